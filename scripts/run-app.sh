#!/usr/bin/env bash
# Install (idempotent) and start RadConcord on the embedded default: a SQLite file in ./data,
# the bundled demo study and demo accounts (see README). Extra args go to `streamlit run`.
# It starts the app and one scoring worker together (scripts/serve.sh); Ctrl+C stops both.
# RADCONCORD_WORKER=0 starts the app alone. On the first start the demo study's offline
# metrics (no model download) are queued, so its dashboard fills in by itself.
#
# The server listens on 127.0.0.1 only, so the demo accounts (whose passwords are published)
# are created and usable from this machine's browser alone. RADCONCORD_HOST=0.0.0.0 makes it
# reachable from other computers: then no demo is seeded and published passwords are refused
# from them; put it behind a reverse proxy with TLS instead (docs/deployment.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh app
exec bash scripts/serve.sh "$@"
