#!/usr/bin/env bash
# Fetch the Indiana University (Open-i) chest X-ray reports, unmodified.
#
# The reports (3,955 XML files, CC BY-NC-ND 4.0, Demner-Fushman et al. 2016) are shipped inside
# the torchxrayvision 1.5.7 wheel on PyPI as torchxrayvision/data/NLMCXR_reports.tgz. We only
# DOWNLOAD the wheel (--no-deps) and unzip that one member: torchxrayvision itself is never
# installed (it would pull torchvision).
#
# Usage: scripts/fetch_iu_reports.sh [DEST_DIR]   (default: .cache/data)
# Prints the path of the .tgz. Idempotent: does nothing when the file is already there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/.cache/data}"
WHEELS="$ROOT/.cache/wheels"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON="python3"
MEMBER="torchxrayvision/data/NLMCXR_reports.tgz"
OUT="$DEST/NLMCXR_reports.tgz"
# sha256 of the member in torchxrayvision-1.5.7-py3-none-any.whl (checked after extraction).
EXPECTED_SHA256="${IU_REPORTS_SHA256:-8fb6de7eec73d8c3665067ad4bb003ccd57f971ae316d2642e1627ac7268667a}"

if [ -s "$OUT" ]; then
    echo "$OUT"
    exit 0
fi
mkdir -p "$DEST" "$WHEELS"
WHEEL="$(ls "$WHEELS"/torchxrayvision-1.5.7-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$WHEEL" ]; then
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
        torchxrayvision==1.5.7 -d "$WHEELS" >&2
    WHEEL="$(ls "$WHEELS"/torchxrayvision-1.5.7-*.whl | head -n1)"
fi
# Extract through a temporary name so an interrupted run leaves no truncated file behind.
"$PYTHON" - "$WHEEL" "$MEMBER" "$OUT" "$EXPECTED_SHA256" <<'PY'
import hashlib, os, sys, zipfile
wheel, member, out, expected = sys.argv[1:5]
with zipfile.ZipFile(wheel) as zf:
    data = zf.read(member)
digest = hashlib.sha256(data).hexdigest()
if expected and digest != expected:
    sys.exit(f"{member} in {wheel}: sha256 {digest} != expected {expected}")
tmp = out + ".part"
with open(tmp, "wb") as fh:
    fh.write(data)
os.replace(tmp, out)
PY
echo "$OUT"
