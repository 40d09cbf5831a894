#!/usr/bin/env bash
# Start a throwaway PostgreSQL server (tests/pgserver.py) for trying RadConcord on PostgreSQL.
# Prints the DATABASE_URL of a fresh database, keeps running until Ctrl-C, then deletes it all.
#   scripts/pg_test_server.sh            # then, in another shell:
#   DATABASE_URL=<printed url> .venv/bin/python -m backend db seed-demo
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python - <<'PY'
import importlib.util
import signal
import sys
from pathlib import Path

# Loaded by path: a third-party wheel installs its own top-level "tests" package.
spec = importlib.util.spec_from_file_location("radconcord_pgserver", Path("tests/pgserver.py"))
pgserver = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pgserver)

try:
    server = pgserver.PgServer(fast=False).start()
except pgserver.PgServerError as exc:
    sys.exit(f"error: {exc}")
try:
    url = server.create_database("radconcord")
    print(f"DATABASE_URL={url}", flush=True)
    print("PostgreSQL running; Ctrl-C stops it and deletes its data.", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.pause()
except KeyboardInterrupt:
    pass
finally:
    server.stop()
PY
