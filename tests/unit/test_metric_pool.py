"""MetricPool is the only model cache: families on one checkpoint share it inside a pool,
composites share the pool's instances, and nothing outlives the pool."""

from __future__ import annotations

import gc
import weakref

import pytest

from radconcord.backend.metrics import chexbert, registry
from radconcord.backend.metrics.base import Resources
from radconcord.backend.scoring.runner import MetricPool
from tests.helpers_chexbert import write_chexbert_checkpoint

REFS = ["No pleural effusion.", "Small left effusion.", "Heart size is normal."]
CANDS = ["Small left effusion.", "No pleural effusion.", "Cardiomegaly."]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    enc, ckpt, _, _ = write_chexbert_checkpoint(tmp_path_factory.mktemp("chexbert"))
    return {"checkpoint": str(ckpt), "encoder": str(enc)}


def _count_model_builds(monkeypatch) -> list[str]:
    built: list[str] = []
    real = chexbert.ChexbertModel.__init__

    def counting(self, **kwargs):
        built.append(str(kwargs["checkpoint"]))
        real(self, **kwargs)

    monkeypatch.setattr(chexbert.ChexbertModel, "__init__", counting)
    return built


def test_two_families_on_one_checkpoint_load_it_once_per_pool(weights, monkeypatch):
    built = _count_model_builds(monkeypatch)
    pool = MetricPool()
    labels = pool.get("chexbert", weights)
    semb = pool.get("semb", weights)
    labels.score(references=REFS, candidates=CANDS)
    semb.score(references=REFS, candidates=CANDS)
    assert len(built) == 1
    assert labels._model is semb._model
    assert pool.resources.loads["chexbert"] == 1
    # The same family and options: the same warm instance.
    assert pool.get("semb", dict(weights)) is semb and pool.created == 2

    # Another pool shares nothing: there is no process-wide cache any more.
    other = MetricPool()
    other.get("semb", weights).score(references=REFS, candidates=CANDS)
    assert len(built) == 2
    assert other.get("semb", weights)._model is not semb._model


def test_dropping_or_closing_the_pool_frees_the_model(weights):
    pool = MetricPool()
    metric = pool.get("semb", weights)
    metric.load("cpu")
    model = weakref.ref(metric._model)
    del metric
    del pool
    gc.collect()
    assert model() is None

    pool = MetricPool()
    pool.get("chexbert", weights).load("cpu")
    model = weakref.ref(pool.get("chexbert", weights)._model)
    pool.close()
    gc.collect()
    assert model() is None and len(pool.resources) == 0
    # A closed pool starts again from nothing (a fresh instance, a fresh load).
    again = pool.get("chexbert", weights)
    again.load("cpu")
    assert pool.resources.loads["chexbert"] == 2


def test_a_metric_outside_a_pool_owns_its_model(weights):
    a = chexbert.SEmb(**weights)
    b = chexbert.ChexbertLabels(**weights)
    a.load("cpu")
    b.load("cpu")
    assert a._model is not b._model
    assert a.resources is not b.resources
    shared = Resources()
    c, d = chexbert.SEmb(**weights), chexbert.ChexbertLabels(**weights)
    c.use_resources(shared)
    d.use_resources(shared)
    c.load("cpu")
    d.load("cpu")
    assert c._model is d._model and shared.loads["chexbert"] == 1


def test_radcliq_and_crg_take_their_inputs_from_the_pool():
    """A composite's input is the pool's own instance of that family (same options)."""
    pool = MetricPool()
    radcliq = pool.get("radcliq", {})
    assert radcliq._input("bleu2_radcliq") is pool.get("bleu2_radcliq", {})
    assert radcliq._input("semb") is pool.get("semb", {})
    crg = pool.get("crg", {})
    assert crg._get_labeler() is pool.get("chexpert", {})
    assert pool.resources.loads["metric"] == 5  # radcliq, bleu2_radcliq, semb, crg, chexpert
    # Outside a pool the composite still works on its own instances.
    alone = registry.create("radcliq")
    assert alone._input("bleu2_radcliq") is not pool.get("bleu2_radcliq", {})


def test_resources_build_each_key_once():
    res = Resources()
    calls: list[int] = []
    first = res.get(("thing", "a"), lambda: calls.append(1) or object())
    assert res.get(("thing", "a"), lambda: calls.append(2) or object()) is first
    res.get(("thing", "b"), lambda: calls.append(3) or object())
    assert calls == [1, 3] and res.loads["thing"] == 2 and ("thing", "a") in res
    res.clear()
    assert len(res) == 0


def test_bertscore_instances_on_one_encoder_and_layer_share_it():
    """Options that do not change the weights (idf) give two instances and one encoder."""
    pool = MetricPool()
    plain = pool.get("bertscore", {"idf": False})
    weighted = pool.get("bertscore", {"idf": True})
    reason = plain.availability()
    assert reason is None, reason  # the packaged MiniLM is a test dependency
    plain.score(references=REFS, candidates=CANDS)
    weighted.score(references=REFS, candidates=CANDS)
    assert plain is not weighted and plain._model is weighted._model
    assert pool.resources.loads["bertscore-encoder"] == 1
    other_layer = pool.get("bertscore", {"num_layers": 1})
    other_layer.load("cpu")
    assert other_layer._model is not plain._model
    assert pool.resources.loads["bertscore-encoder"] == 2
