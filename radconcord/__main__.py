"""``python -m radconcord``: the same as the ``radconcord`` script."""

import sys

from radconcord.cli import main

sys.exit(main())
