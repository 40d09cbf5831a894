#!/usr/bin/env bash
# Start the RadConcord web app and one scoring worker on the same database, and stop both
# together. scripts/run-app.sh runs it after installing; the Docker image runs it as its
# command. Extra args go to `streamlit run`.
#
#   RADCONCORD_HOST       address the app listens on (default 127.0.0.1, see run-app.sh)
#   RADCONCORD_WORKER=0   no worker (run `python -m backend worker` elsewhere instead)
#   RADCONCORD_WORKER_ARGS  extra worker options, e.g. "--device cuda:0"
#   RADCONCORD_PYTHON     the interpreter (default .venv/bin/python, else python3)
#
# Both processes inherit this environment and working directory, so they open the same
# database (DATABASE_URL, else the SQLite file in RADCONCORD_DATA_DIR or ./data). Ctrl+C or
# SIGTERM stops the app and the worker (the worker puts its current job back in the queue);
# if the worker dies the app keeps running and its Metrics page says no worker is alive.
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${RADCONCORD_PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi

app_pid=""
worker_pid=""

# TERM to each child still running, then wait; KILL what is left after the grace period (a
# worker in the middle of a long step may take a while to reach its next stop point).
stop_children() {
  trap - INT TERM
  local pid
  for pid in $app_pid $worker_pid; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  local waited=0
  while [ "$waited" -lt "${RADCONCORD_STOP_GRACE_S:-30}0" ]; do
    local alive=""
    for pid in $app_pid $worker_pid; do
      if kill -0 "$pid" 2>/dev/null; then alive=1; fi
    done
    [ -z "$alive" ] && break
    sleep 0.1
    waited=$((waited + 1))
  done
  for pid in $app_pid $worker_pid; do
    kill -KILL "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}

# Each child in a process group of its own: Ctrl+C in the terminal signals the foreground
# group, and a child there would get SIGINT from the terminal and SIGTERM from the trap (a
# worker takes a second signal as "stop now"). So only this script hears the terminal, and
# each child gets exactly one SIGTERM.
own_group=()
if command -v setsid >/dev/null 2>&1; then own_group=(setsid); fi

trap 'stop_children; exit 130' INT
trap 'stop_children; exit 143' TERM

# Migrate once before both start: two processes upgrading a fresh SQLite file at the same
# moment would race on the first CREATE TABLE.
"$PY" -m backend db init >/dev/null || exit $?

if [ "${RADCONCORD_WORKER:-1}" != "0" ]; then
  # shellcheck disable=SC2086 # word splitting of the extra options is wanted
  "${own_group[@]}" "$PY" -m backend worker ${RADCONCORD_WORKER_ARGS:-} &
  worker_pid=$!
  echo "serve: worker started (pid $worker_pid); RADCONCORD_WORKER=0 runs the app alone"
fi
"${own_group[@]}" "$PY" -m streamlit run webapp/server.py --server.address "${RADCONCORD_HOST:-127.0.0.1}" "$@" &
app_pid=$!

# `wait` returns early when a trapped signal arrives; the trap then stops both.
wait "$app_pid"
status=$?
app_pid=""
stop_children
exit "$status"
