#!/usr/bin/env bash
# Install (idempotent) and start RadConcord on the embedded default: a SQLite file in ./data,
# the bundled demo study and demo accounts (see README). Extra args go to `streamlit run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh app
exec .venv/bin/streamlit run webapp/app.py --server.address "${RADCONCORD_HOST:-127.0.0.1}" "$@"
