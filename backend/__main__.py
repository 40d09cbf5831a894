"""Run the command line: ``python -m backend ...``."""

import sys

from radconcord.backend.cli import main

sys.exit(main())
