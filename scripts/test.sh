#!/usr/bin/env bash
# Install (idempotent) and run the whole suite: lint, then pytest (unit, parity, services on
# SQLite and a real PostgreSQL the fixtures start, Streamlit AppTest pages, chromium e2e).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
