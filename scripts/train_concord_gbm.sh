#!/usr/bin/env bash
# Generator of backend/metrics/concord/weights/gbm-v2: the packaged weights of the concord
# family's gbm variant (the default of `--set concord.variant=gbm`).
#
# Inputs, all public: the Indiana University chest X-ray reports (3,955 XML reports,
# CC BY-NC-ND 4.0) as fetched by scripts/fetch_iu_reports.sh, checked against the sha256
# below (the archive whose parse backend/datasets/corpus.py caches under the same sha256),
# and the synthetic-error generator backend/analysis/synthetic_errors.py. No human rating is
# read: training, tuning and selection use a held-out synthetic split only (10 % of the
# reports, split by report).
#
# Deterministic given the seed: the same archive, code and seed give byte-identical gbm.json
# and concord.json (compare the printed folder sha256 with the one in the commit message).
#
# Usage: scripts/train_concord_gbm.sh        (a few minutes to tens of minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=backend/metrics/concord/weights/gbm-v2
SEED=0
PAIRS=40000
# sha256 of NLMCXR_reports.tgz (torchxrayvision 1.5.7 wheel), as in scripts/fetch_iu_reports.sh.
IU_SHA256=8fb6de7eec73d8c3665067ad4bb003ccd57f971ae316d2642e1627ac7268667a

bash scripts/fetch_iu_reports.sh >/dev/null
HAVE=$("$PY" -c 'from radconcord.backend.datasets.corpus import load_iu_corpus
print(load_iu_corpus().sha256)')
if [ "$HAVE" != "$IU_SHA256" ]; then
    echo "IU report archive has sha256 $HAVE, expected $IU_SHA256" >&2
    exit 1
fi
# Train beside the target and swap at the end, so a failed run keeps the old weights.
NEW="$(dirname "$OUT")/.gbm-v2.new"
rm -rf "$NEW"
# (its last line names the staging folder; the packaged folder is the gbm default)
"$PY" -m backend train-concord --variant gbm --output "$NEW" --seed "$SEED" --pairs "$PAIRS"
rm -rf "$OUT"
mv "$NEW" "$OUT"
"$PY" - "$OUT" <<'PYEOF'
import sys
from pathlib import Path
from radconcord.backend.metrics.concord.folder import folder_sha256
out = Path(sys.argv[1])
size = (out / "gbm.json").stat().st_size
print(f"{out}: folder sha256 {folder_sha256(out)}, gbm.json {size / 1e6:.2f} MB")
PYEOF
