#!/usr/bin/env bash
# Install everything RadConcord needs on a fresh Debian/Ubuntu machine, idempotently.
#   scripts/bootstrap.sh app   -> JRE (METEOR) + runtime Python deps in .venv
#   scripts/bootstrap.sh test  -> also chromium, chromium-driver, postgresql + dev deps
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-app}"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need=()
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
if [ "$mode" = "test" ]; then
  [ -x /usr/bin/chromium ] || need+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
    need+=(postgresql)
  fi
  id postgres >/dev/null 2>&1 || need+=(postgresql)
fi
if [ "${#need[@]}" -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned: this exact version is the CPU build on our machines; letting another
# requirement resolve torch could pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0"
if [ "$mode" = "test" ]; then
  .venv/bin/python -m pip install -q -r requirements-dev.txt
else
  .venv/bin/python -m pip install -q -r requirements.txt
fi
echo "bootstrap: ready ($mode)"
