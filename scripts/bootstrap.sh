#!/usr/bin/env bash
# Install everything RadConcord needs on a fresh Debian/Ubuntu machine, idempotently.
#   scripts/bootstrap.sh app   -> JRE (METEOR) + `pip install -e .[all]` in .venv
#   scripts/bootstrap.sh test  -> also chromium, chromium-driver, postgresql + `.[dev]`
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
# torch first and pinned: this exact version is the CPU build on our machines; pyproject.toml
# names torch without a build, so the installed one satisfies it and nothing resolves a
# multi-GB CUDA build. On a GPU host install the CUDA wheel of your choice instead.
TORCH="${RADCONCORD_TORCH:-torch==2.13.0}"
if [ "$mode" = "test" ]; then extras="dev"; else extras="all"; fi
# The package itself, editable (the checkout is what runs), with its dependencies from
# pyproject.toml and setup.py; skipped when they and the mode did not change since the last run.
stamp=".venv/.radconcord-installed"
# This script's own install steps count too: a changed step reinstalls on machines that ran
# the old one.
hash="$(cat pyproject.toml setup.py scripts/bootstrap.sh | sha256sum | cut -c1-64)"
want="$mode $hash"
have="$(cat "$stamp" 2>/dev/null || true)"
# A test install ([dev]) holds everything the app needs ([all]): run-app.sh after test.sh
# does not reinstall.
if { [ "$have" = "$want" ] || { [ "$mode" = "app" ] && [ "$have" = "test $hash" ]; }; } \
    && [ -x .venv/bin/radconcord ] && .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "bootstrap: ready ($mode, unchanged)"
  exit 0
fi
# Progress on stdout: pip is quiet (-q), and a multi-minute install whose only output is
# pip's warnings looks hung. Each step says what it does and how long it took.
steps=3
[ "$mode" = "test" ] && steps=4
step() {  # step N "what": print the step and start its clock
  step_start=$SECONDS
  echo "bootstrap: [$1/$steps] $2"
}
done_step() {
  echo "bootstrap:       done in $((SECONDS - step_start)) s (total $((SECONDS - boot_start)) s)"
}
boot_start=$SECONDS
echo "bootstrap: installing RadConcord ($mode) into .venv; a first install downloads about" \
  "2 GB and takes several minutes, later runs are quick"
step 1 "upgrading pip"
.venv/bin/python -m pip install -q --upgrade pip
done_step
step 2 "installing $TORCH (CPU build; the largest download)"
.venv/bin/python -m pip install -q "$TORCH"
done_step
step 3 "installing radconcord[$extras] and its dependencies (metrics, Streamlit, ...)"
.venv/bin/python -m pip install -q -e ".[$extras]"
done_step
if [ "$mode" = "test" ]; then
  step 4 "installing radeval==2.2.1 (parity tests only)"
  # RadEval's own code for the `radeval` family's parity tests. --no-deps: its lexical
  # metrics need only what we have, and its full dependency set (torchvision) would replace
  # the CPU torch (backend/metrics/cards/radeval.md).
  .venv/bin/python -m pip install -q --no-deps "radeval==2.2.1"
  done_step
fi
echo "$want" > "$stamp"
echo "bootstrap: ready ($mode)"
