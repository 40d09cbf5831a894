"""Concord's cross-encoder (``ce``): training, the saved folder, loading by the family.

A tiny random BERT (``tests/helpers_models.build_tiny_bert``, own small vocabulary) stands
in for the packaged MiniLM, so a few training steps take seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import Resources
from radconcord.backend.metrics.concord import ce
from radconcord.backend.metrics.concord.folder import META_FILE, folder_sha256, read_meta
from tests.helpers_models import build_tiny_bert

REPORTS = (
    "The lungs are clear. There is no pleural effusion or pneumothorax.",
    "Mild cardiomegaly with small bilateral pleural effusions.",
    "Right lower lobe consolidation concerning for pneumonia.",
    "Heart size is normal. Mediastinal contours are within normal limits.",
    "Moderate pulmonary edema. Stable position of the right internal jugular line.",
    "Low lung volumes with bibasilar opacities, likely atelectasis.",
)


@dataclass(frozen=True)
class Pair:
    """What ``train_ce`` reads of a pair (a ``SyntheticPair`` has the same fields)."""

    reference: str
    candidate: str
    counts: tuple[int, ...]


def _pairs(n: int, offset: int = 0) -> list[Pair]:
    out = []
    for i in range(n):
        ref = REPORTS[(i + offset) % len(REPORTS)]
        k = i % 3
        cand = REPORTS[(i + offset + k) % len(REPORTS)]
        counts = [0] * 12
        counts[0] = k  # c1_sig: one per report swapped in
        counts[3] = (i + offset) % 2
        out.append(Pair(ref, cand, tuple(counts)))
    return out


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("bert"), own_vocab=True)


@pytest.fixture(scope="module")
def trained(tiny_bert, tmp_path_factory):
    out = tmp_path_factory.mktemp("ce") / "model"
    config = ce.CeConfig(seed=0, max_steps=4, batch_size=4, eval_every=2, lr=1e-3)
    result = ce.train_ce(_pairs(16), _pairs(6, offset=1), base=tiny_bert, output=out,
                         config=config, meta={"training": {"note": "test"}},
                         figures=lambda p, y: {"n": int(len(y)), "mean": float(p.mean())})
    return out, result


def test_training_writes_a_complete_folder(trained):
    out, result = trained
    for name in ("config.json", "model.safetensors", ce.HEAD_FILE, META_FILE):
        assert (out / name).is_file(), name
    assert [p.name for p in out.parent.iterdir()] == ["model"]  # no staging left behind
    meta = read_meta(out)
    assert meta["variant"] == "ce"
    assert meta["ce"]["pooling"] == "mean" and meta["ce"]["max_length"] == ce.MAX_LENGTH
    assert meta["training"]["note"] == "test" and meta["training"]["steps"] == 4
    assert meta["heldout"]["n"] == 6
    assert result.steps == 4 and len(result.losses) == 4
    # Selection on the held-out pairs: evaluated at step 2 and at the end.
    assert [e["step"] for e in result.evaluations] == [2, 4]
    assert result.best_step in (2, 4)
    assert result.heldout_predictions.shape == (6, 12)


def test_load_ce_predicts_non_negative_counts_in_input_order(trained):
    out, _ = trained
    resources = Resources()
    model = ce.load_ce(out, "cpu", resources)
    assert ce.load_ce(out, "cpu", resources) is model  # shared through the resources
    assert resources.loads["concord_ce"] == 1
    refs = [p.reference for p in _pairs(9)]
    cands = [p.candidate for p in _pairs(9)]
    pred = model.predict(refs, cands, batch_size=4)
    assert pred.shape == (9, 12) and pred.dtype == np.float32
    assert np.all(pred >= 0) and np.all(np.isfinite(pred))
    back = model.predict(refs[::-1], cands[::-1], batch_size=2)
    np.testing.assert_allclose(back[::-1], pred, rtol=1e-5, atol=1e-6)
    assert model.predict([], [], batch_size=4).shape == (0, 12)
    with pytest.raises(ValueError, match="candidates"):
        model.predict(refs, cands[:-1])


def test_the_family_loads_the_folder_and_names_its_sha(trained):
    out, _ = trained
    metric = registry.create("concord", variant="ce", model=str(out))
    assert metric.availability() is None
    metric.load("cpu")
    refs = [p.reference for p in _pairs(5)]
    cands = [p.candidate for p in _pairs(5)]
    result = metric.score(references=refs, candidates=cands)
    assert len(result.values["concord_total"]) == 5
    assert all(v >= 0 for v in result.values["concord_total"])
    assert all(v >= 0 for v in result.values["concord_sig"])
    raw = ce.load_ce(out, "cpu", Resources()).predict(refs, cands)
    # Whole errors by default (the family's round option), the raw rates with round=false.
    np.testing.assert_array_equal(result.values["concord_total"], np.rint(raw).sum(axis=1))
    unrounded = registry.create("concord", variant="ce", model=str(out), round=False)
    got = unrounded.score(references=refs, candidates=cands).values["concord_total"]
    np.testing.assert_allclose(got, raw.sum(axis=1), rtol=1e-4, atol=1e-5)
    assert folder_sha256(out)[:12] in metric.signature()


def test_same_seed_same_model_other_seed_other_model(tiny_bert, trained, tmp_path):
    out, _ = trained
    config = ce.CeConfig(seed=0, max_steps=4, batch_size=4, eval_every=2, lr=1e-3)
    again = tmp_path / "again"
    ce.train_ce(_pairs(16), _pairs(6, offset=1), base=tiny_bert, output=again,
                config=config, meta={"training": {"note": "test"}},
                figures=lambda p, y: {"n": int(len(y)), "mean": float(p.mean())})
    assert (again / ce.HEAD_FILE).read_bytes() == (out / ce.HEAD_FILE).read_bytes()
    assert (again / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
    other = tmp_path / "other"
    ce.train_ce(_pairs(16), _pairs(6, offset=1), base=tiny_bert, output=other,
                config=ce.CeConfig(seed=1, max_steps=4, batch_size=4, lr=1e-3))
    assert (other / ce.HEAD_FILE).read_bytes() != (out / ce.HEAD_FILE).read_bytes()


def test_refusals(tiny_bert, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        ce.train_ce(_pairs(4), [], base=tiny_bert, output=taken)
    with pytest.raises(ValueError, match="no training pairs"):
        ce.train_ce([], [], base=tiny_bert, output=tmp_path / "a")
    with pytest.raises(ValueError, match="12 counts"):
        ce.train_ce([Pair("a", "b", (1, 2))], [], base=tiny_bert, output=tmp_path / "b")
    with pytest.raises(ValueError, match="pooling"):
        ce.CeConfig(pooling="max")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_cls_pooling_and_no_heldout_keep_the_last_step(tiny_bert, tmp_path):
    out = tmp_path / "cls"
    result = ce.train_ce(_pairs(8), [], base=tiny_bert, output=out,
                         config=ce.CeConfig(max_steps=2, batch_size=4, pooling="cls"))
    assert result.steps == 2 and result.evaluations == []
    assert read_meta(out)["ce"]["pooling"] == "cls"
    model = ce.CrossEncoder.from_folder(out)
    assert model.pooling == "cls"
    assert model.predict(["No effusion."], ["Small effusion."]).shape == (1, 12)


def test_the_training_service_trains_ce_end_to_end(tiny_bert, tmp_path):
    from radconcord.backend.services.evaluation import concord_train

    out = tmp_path / "svc-ce"
    summary = concord_train.train_concord(variant="ce", output=out, seed=0, n_pairs=24,
                                          heldout=0.34, corpus=list(REPORTS), max_steps=2,
                                          base=tiny_bert, batch_size=4)
    assert summary.steps == 2 and summary.n_heldout_pairs == 8
    assert summary.figures["n"] == 8 and len(summary.figures["mae"]) == 12
    meta = read_meta(out)
    assert meta["variant"] == "ce" and meta["heldout"] == summary.figures
    assert meta["training"]["human_ratings_used"] is False
    assert meta["training"]["corpus"]["sha256"] == summary.corpus_sha256
    assert meta["created_by"].startswith("radconcord train-concord --variant ce --seed 0")
    metric = registry.create("concord", variant="ce", model=str(out))
    assert metric.availability() is None
