"""BERTScore's speed paths: the embedding cache between calls and the dtype choice.

Values are the judge: a cached embedding must give the scores of a fresh run, a cache shared
in one ``Resources`` must only be shared between instances that compute the same embeddings,
and a half-precision run stays opt-in, named in the signature and close to fp32.
"""

from __future__ import annotations

import pytest
import torch

from radconcord.backend.metrics import bertscore as bs
from radconcord.backend.metrics.base import Resources
from radconcord.backend.metrics.bertscore import BertScore, EmbeddingCache, resolve_dtype
from tests.helpers_models import build_tiny_roberta, minilm_dir

REFS = [
    "No pleural effusion. Heart size is normal.",
    "Mild cardiomegaly with small bilateral pleural effusions.",
    "Right lower lobe consolidation concerning for pneumonia.",
    "Endotracheal tube terminates 4 cm above the carina.",
]
CANDS_A = [
    "Heart size is normal, no effusion.",
    "Cardiomegaly. Bilateral effusions are small.",
    "Consolidation in the right lower lobe.",
    "ET tube 4 cm above the carina",
]
CANDS_B = [
    "No effusion.",
    "Small effusions on both sides, enlarged heart.",
    "Pneumonia in the right lower lobe.",
    "Tube above the carina.",
]
KEYS = ("bertscore_p", "bertscore_r", "bertscore_f")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_roberta(tmp_path_factory.mktemp("rb"), add_prefix_space=True)


class _Counting:
    """Wraps a model and counts the sequences it is run on."""

    def __init__(self, model):
        self.model = model
        self.rows = 0

    def __call__(self, ids, **kw):
        self.rows += int(ids.shape[0])
        return self.model(ids, **kw)


def _metric(path, **options) -> BertScore:
    m = BertScore(model=str(path), num_layers=2, rescale=False, **options)
    m.load("cpu")
    return m


def test_second_call_reuses_reference_embeddings_with_equal_values(tiny):
    cached = _metric(tiny)
    fresh = _metric(tiny, cache_mb=0)
    first = cached.score(references=REFS, candidates=CANDS_A).values
    counter = _Counting(cached._model)
    cached._model = counter
    second = cached.score(references=REFS, candidates=CANDS_B).values
    # Only the four new candidates went through the encoder; the references came from cache.
    assert counter.rows == len(CANDS_B)
    expected_a = fresh.score(references=REFS, candidates=CANDS_A).values
    expected_b = fresh.score(references=REFS, candidates=CANDS_B).values
    for k in KEYS:
        assert first[k] == pytest.approx(expected_a[k], abs=1e-6)
        assert second[k] == pytest.approx(expected_b[k], abs=1e-6)
    # A repeated call is answered from the cache, value for value.
    counter.rows = 0
    again = cached.score(references=REFS, candidates=CANDS_B).values
    assert counter.rows == 0
    assert again == second


def test_cache_off_runs_the_encoder_every_call(tiny):
    m = _metric(tiny, cache_mb=0)
    m.score(references=REFS, candidates=CANDS_A)
    counter = _Counting(m._model)
    m._model = counter
    m.score(references=REFS, candidates=CANDS_A)
    assert counter.rows == len(set(REFS + CANDS_A))


def test_cache_is_shared_in_one_pool_only_for_the_same_layer(tiny):
    pool = Resources()
    a = BertScore(model=str(tiny), num_layers=2, rescale=False)
    b = BertScore(model=str(tiny), num_layers=2, rescale=False)
    other_layer = BertScore(model=str(tiny), num_layers=1, rescale=False)
    for m in (a, b, other_layer):
        m.use_resources(pool)
        m.load("cpu")
    assert a._cache is b._cache
    assert other_layer._cache is not a._cache
    a.score(references=REFS, candidates=CANDS_A)
    counter = _Counting(b._model)
    b._model = counter
    b.score(references=REFS, candidates=CANDS_A)
    assert counter.rows == 0
    # Layer 1 embeddings differ from layer 2's: computed, not taken from a's cache.
    before = other_layer._cache.misses
    one = other_layer.score(references=REFS, candidates=CANDS_A).values
    assert other_layer._cache.misses - before == len(set(REFS + CANDS_A))
    assert one["bertscore_f"] != a.score(references=REFS, candidates=CANDS_A).values["bertscore_f"]


def test_cache_evicts_least_recently_used_beyond_its_bytes():
    cache = EmbeddingCache(max_bytes=3 * 4 * 4)  # three 4-float tensors
    for i in range(3):
        cache.put((i,), torch.zeros(4))
    assert cache.get((0,)) is not None  # 0 is now the most recent
    cache.put((3,), torch.zeros(4))
    assert cache.get((1,)) is None  # the least recent went
    assert cache.get((0,)) is not None and cache.get((3,)) is not None
    assert cache.bytes == 3 * 16 and len(cache) == 3
    cache.put((9,), torch.zeros(100))  # larger than the whole bound: not kept
    assert cache.get((9,)) is None and len(cache) == 3


@pytest.mark.parametrize("bad", [-1, "big", True, float("nan")])
def test_bad_cache_mb_fails_clearly(bad):
    with pytest.raises(ValueError, match="cache_mb"):
        BertScore(cache_mb=bad)


def test_dtype_choice(monkeypatch):
    assert resolve_dtype("cpu", "fp32") is torch.float32
    assert resolve_dtype("cpu", "auto") is torch.float32  # exact by default on CPU
    with pytest.raises(ValueError, match="CUDA"):
        resolve_dtype("cpu", "fp16")
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("cpu", "int8")
    monkeypatch.setattr(bs, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(ValueError, match="native bf16"):
        resolve_dtype("cpu", "bf16")
    monkeypatch.setattr(bs, "cpu_has_native_bf16", lambda: True)
    assert resolve_dtype("cpu", "bf16") is torch.bfloat16
    assert resolve_dtype("cuda", "bf16") is torch.bfloat16
    assert resolve_dtype("cuda:0", "fp16") is torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("cuda", "auto") is torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("cuda", "auto") is torch.bfloat16


def test_bf16_without_native_support_is_refused_at_load(tiny, monkeypatch):
    monkeypatch.setattr(bs, "cpu_has_native_bf16", lambda: False)
    m = BertScore(model=str(tiny), num_layers=2, rescale=False, dtype="bf16")
    with pytest.raises(ValueError, match="bertscore: dtype bf16 needs CUDA"):
        m.load("cpu")


def test_bf16_is_close_to_fp32_and_named_in_the_signature(monkeypatch):
    # Forced on: where the CPU lacks native bf16 torch emulates it (slow, same values).
    monkeypatch.setattr(bs, "cpu_has_native_bf16", lambda: True)
    half = BertScore(model=str(minilm_dir()), num_layers=6, rescale=False, dtype="bf16")
    full = BertScore(model=str(minilm_dir()), num_layers=6, rescale=False)
    pool = Resources()
    for m in (half, full):
        m.use_resources(pool)
        m.load("cpu")
    assert next(half._model.parameters()).dtype is torch.bfloat16
    assert "dtype:bf16" in half.signature() and "dtype" not in full.signature()
    h = half.score(references=REFS, candidates=CANDS_A).values
    f = full.score(references=REFS, candidates=CANDS_A).values
    for k in KEYS:
        # Measured about 2e-3 at most on 300 synthetic report pairs (raw, unrescaled).
        assert h[k] == pytest.approx(f[k], abs=1e-2)
        assert h[k] != f[k]
    # Each dtype has its own cache in a pool: fp32 values never come from bf16 embeddings.
    assert half._cache is not full._cache
