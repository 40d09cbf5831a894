"""RadCliQ becomes available as soon as its four inputs are, and scores through the CLI.

Inputs are real architectures with random weights, each loaded through the same code a user's
checkpoint goes through: a RadGraph archive (radgraph package), a CheXbert ``chexbert.pth``
(s_emb), a RoBERTa encoder with a bert_score-style baseline file (BERTScore at RadCliQ's layer
5 with rescaling) and BLEU-2. The composite is checked against the published formula applied
to the inputs scored separately (tolerance 1e-9: same floats, one extra linear map).
"""

from __future__ import annotations

import csv
import json

import pytest

from radconcord.backend.cli import main
from radconcord.backend.metrics import radcliq, registry
from tests.helpers_chexbert import write_chexbert_checkpoint
from tests.helpers_models import build_tiny_roberta, write_baseline_tsv
from tests.helpers_radgraph import build_tiny_radgraph

REFS = [
    "Small left pleural effusion. No pneumothorax.",
    "Heart size is normal. Lungs are clear.",
    "Mild pulmonary edema with bilateral effusions.",
]
CANDS = [
    "Small right pleural effusion. No pneumothorax.",
    "Heart size is normal. Lungs are clear.",
    "Severe pulmonary edema.",
]


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("RADCONCORD_MODEL_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    archive = build_tiny_radgraph(tmp_path / "rg")
    enc, ckpt, _, _ = write_chexbert_checkpoint(tmp_path / "cx")
    roberta = build_tiny_roberta(tmp_path / "bs", num_layers=6)
    baseline = write_baseline_tsv(tmp_path / "baseline.tsv", [(0.1 * i, 0.1 * i, 0.1 * i)
                                                              for i in range(7)])
    return {
        "radgraph": {"checkpoint": str(archive)},
        "semb": {"checkpoint": str(ckpt), "encoder": str(enc)},
        "bertscore": {"model": str(roberta), "baseline": str(baseline)},
        "bleu2_radcliq": {},
    }


def test_unavailable_until_inputs_exist_and_says_which(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.delenv("RADCONCORD_MODEL_DIR", raising=False)
    reason = registry.availability("radcliq")
    assert reason is not None and reason.startswith("needs ")


def test_composite_equals_formula_on_separately_scored_inputs(inputs):
    metric = radcliq.RadCliQ(input_options=inputs)
    assert metric.availability() is None
    res = metric.score(references=REFS, candidates=CANDS)
    cols = []
    for family, key in radcliq.INPUTS:
        opts = dict(inputs[family])
        if family == "bertscore":
            opts = {**radcliq.BERTSCORE_RADCLIQ_OPTIONS, **opts}
        cols.append(registry.create(family, **opts).score(references=REFS, candidates=CANDS)
                    .values[key])
    for version in ("v0", "v1"):
        expected = radcliq.radcliq(version, *cols)
        assert res.values[f"radcliq_{version}"] == pytest.approx(list(expected), abs=1e-9)
    sig = metric.signature()
    for family in ("radgraph", "semb", "bertscore", "bleu2_radcliq"):
        assert family in sig


def test_cli_scores_radcliq_with_dotted_options(inputs, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "\n".join(json.dumps({"id": f"p{i}", "reference": r, "candidate": c})
                  for i, (r, c) in enumerate(zip(REFS, CANDS, strict=True))) + "\n"
    )
    out = tmp_path / "scores.csv"
    sets = []
    for family, opts in inputs.items():
        for opt, value in opts.items():
            sets += ["--set", f"radcliq.{family}.{opt}={value}"]
    code = main(["score", "--input", str(pairs), "--metrics", "radcliq_v1,bleu2_radcliq",
                 "--output", str(out), "--device", "cpu", *sets])
    assert code == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["id"] for r in rows] == ["p0", "p1", "p2"]
    direct = radcliq.RadCliQ(input_options=inputs).score(references=REFS, candidates=CANDS)
    got = [float(r["radcliq_v1"]) for r in rows]
    assert got == pytest.approx(direct.values["radcliq_v1"], abs=1e-9)


def test_dotted_option_for_unknown_input_is_rejected():
    with pytest.raises(ValueError, match="unknown input"):
        radcliq.RadCliQ(**{"chexpert.labeler": "x"})
