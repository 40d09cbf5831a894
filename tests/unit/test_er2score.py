"""ER2Score metric: availability, signature, adapter round trip, SmolLM2 training smoke."""

from __future__ import annotations

import json
import math

import pytest

from radconcord.backend.metrics import er2score, llm
from radconcord.backend.metrics.er2score import (
    ER2Score,
    RatedCandidate,
    TrainConfig,
    train_reward_model,
)
from tests.helpers_llm import SMOLLM2_CONVERTED_ROOT, build_tiny_llama, smollm2_gguf


def _items(n_groups: int = 3) -> list[RatedCandidate]:
    out = []
    for g in range(n_groups):
        ref = "no pleural effusion." if g % 2 else "mild cardiomegaly."
        for k in range(3):
            out.append(RatedCandidate(f"{g}-{k}", f"g{g}", ref, ref + " spurious nodule seen." * k,
                                      (float(k), 0, 0, 0, 0, 0)))
    return out


def test_availability_needs_adapter(tmp_path) -> None:
    reason = ER2Score().availability()
    assert reason is not None and "train-er2score" in reason and "er2score.adapter" in reason
    reason = ER2Score(adapter=str(tmp_path)).availability()
    assert reason is not None and "er2score.json" in reason
    assert "missing" in ER2Score().signature()


def test_adapter_round_trip_and_base_check(tmp_path) -> None:
    base = build_tiny_llama(tmp_path)
    out = tmp_path / "ad"
    res = train_reward_model(
        base=llm.LMRef(str(base)), train_items=_items(), output=out,
        config=TrainConfig(epochs=1, lr=1e-3, max_steps=2), study="s",
    )
    assert res.steps == 2 and all(math.isfinite(x) for x in res.losses)
    m = ER2Score(adapter=str(out))
    assert m.availability() is None
    refs = ["mild cardiomegaly.", "no pleural effusion."]
    cands = ["mild cardiomegaly. spurious nodule seen.", "no pleural effusion."]
    a = m.score(references=refs, candidates=cands)
    b = ER2Score(adapter=str(out), batch_size=1).score(references=refs, candidates=cands)
    assert a.values["er2score"] == pytest.approx(b.values["er2score"], abs=1e-5)
    assert set(a.values) == {"er2score", *er2score.CATEGORY_KEYS}
    # A different base than the one recorded is refused with a clear reason.
    other = build_tiny_llama(tmp_path, seed=1, name="other")
    reason = ER2Score(adapter=str(out), base=str(other)).availability()
    assert reason is not None and "not the one the adapter was trained on" in reason
    # Retraining into a non-empty folder is refused and leaves it alone.
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ValueError, match="not empty"):
        train_reward_model(base=llm.LMRef(str(base)), train_items=_items(), output=out)
    assert sorted(p.name for p in out.iterdir()) == before
    meta = json.loads((out / er2score.META_FILE).read_text())
    assert meta["hyperparameters"]["max_steps"] == 2 and meta["steps"] == 2


def test_no_pairs_is_an_error(tmp_path) -> None:
    base = build_tiny_llama(tmp_path)
    same = [RatedCandidate("a", "g", "r", "c", (1, 0, 0, 0, 0, 0)),
            RatedCandidate("b", "g", "r", "d", (0, 1, 0, 0, 0, 0))]
    with pytest.raises(ValueError, match="no training pairs"):
        train_reward_model(base=llm.LMRef(str(base)), train_items=same, output=tmp_path / "o")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_smollm2_short_training(tmp_path, monkeypatch) -> None:
    """A few LoRA steps on SmolLM2-135M-Instruct (GGUF converted once), then scoring."""
    gguf = smollm2_gguf()
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(SMOLLM2_CONVERTED_ROOT))
    out = tmp_path / "ad"
    res = train_reward_model(
        base=llm.LMRef(str(gguf)), train_items=_items(2), output=out,
        config=TrainConfig(epochs=1, lr=1e-4, max_steps=2, batch_size=2), study="smoke",
    )
    assert res.steps == 2 and all(math.isfinite(x) for x in res.losses)
    meta = json.loads((out / er2score.META_FILE).read_text())
    assert meta["base"]["fingerprint"].startswith("gguf:sha256:")
    m = ER2Score(adapter=str(out))
    assert m.availability() is None
    r = m.score(references=["mild cardiomegaly."], candidates=["mild cardiomegaly."])
    assert all(math.isfinite(v[0]) for v in r.values.values())


def _varied_items() -> list[RatedCandidate]:
    """Four references with four candidates of different lengths and error counts."""
    words = ["there is pleural effusion.", "mild cardiomegaly.", "spurious nodule seen.",
             "no pneumothorax.", "right lobe consolidation.", "lungs are clear."]
    out = []
    for g in range(4):
        ref = " ".join(words[g : g + 2])
        for k in range(4):
            cand = " ".join(words[(g + k) % 6 : (g + k) % 6 + 1 + k % 3])
            out.append(RatedCandidate(f"{g}-{k}", f"g{g}", ref, cand,
                                      (float(k), float(g % 2), 0, float(k % 2), 0, 0)))
    return out


def _train(base, out, **config):
    cfg = TrainConfig(**{"epochs": 1, "lr": 1e-2, "seed": 3, "batch_size": 8, "max_steps": 3,
                         **config})
    res = train_reward_model(base=llm.LMRef(str(base)), train_items=_varied_items(),
                             output=out, config=cfg)
    from safetensors.torch import load_file

    return res, load_file(str(out / er2score.HEAD_FILE))


def test_micro_batches_and_checkpointing_train_the_same_model(tmp_path) -> None:
    """Accumulated micro-batches and recomputed activations give the full-batch step."""
    base = build_tiny_llama(tmp_path)
    full, head_full = _train(base, tmp_path / "full", micro_batch=8,
                             gradient_checkpointing=False)
    small, head_small = _train(base, tmp_path / "small", micro_batch=1,
                               gradient_checkpointing=True)
    odd, head_odd = _train(base, tmp_path / "odd", micro_batch=3, gradient_checkpointing=False)
    assert full.steps == small.steps == odd.steps == 3
    # The loss moved (lr is large), so equal losses mean equal updates, not a frozen model.
    assert full.losses[0] != pytest.approx(full.losses[-1], abs=1e-3)
    assert small.losses == pytest.approx(full.losses, abs=1e-5)
    assert odd.losses == pytest.approx(full.losses, abs=1e-5)
    # The head's weight only: its bias cancels in every reward difference, so its gradient is
    # float noise that AdamW scales up to full-size steps, whatever the batching.
    want = head_full["weight"].flatten().tolist()
    assert head_small["weight"].flatten().tolist() == pytest.approx(want, abs=1e-5)
    assert head_odd["weight"].flatten().tolist() == pytest.approx(want, abs=1e-5)
    meta = json.loads((tmp_path / "small" / er2score.META_FILE).read_text())
    assert meta["hyperparameters"]["micro_batch"] == 1
    assert meta["hyperparameters"]["gradient_checkpointing"] is True


def test_training_keeps_far_fewer_activations_for_backward(tmp_path, monkeypatch) -> None:
    """Bytes autograd saves during one forward pass: the memory a step holds at its peak.

    (With checkpointing the recomputation in the backward pass saves again, one layer at a
    time; that happens outside the forward call and is not counted.)"""
    import torch

    base = build_tiny_llama(tmp_path)
    original = er2score.RewardModel.forward
    peaks: list[int] = []

    def counting_forward(self, texts):
        saved = [0]

        def pack(t):
            saved[0] += t.element_size() * t.nelement()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = original(self, texts)
        if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            peaks.append(saved[0])
        return out

    monkeypatch.setattr(er2score.RewardModel, "forward", counting_forward)
    _train(base, tmp_path / "old-way", micro_batch=8, gradient_checkpointing=False)
    old_way = max(peaks)
    peaks.clear()
    _train(base, tmp_path / "default")  # the defaults: micro-batches of 2 pairs out of 8
    assert TrainConfig().micro_batch == 2 and not TrainConfig().gradient_checkpointing
    default = max(peaks)
    assert default < old_way / 2.5
    peaks.clear()
    _train(base, tmp_path / "recompute", gradient_checkpointing=True)
    assert max(peaks) < default / 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_micro_batch_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="micro_batch"):
        TrainConfig(micro_batch=bad)


def test_training_reports_its_stages_and_steps_in_order(tmp_path) -> None:
    base = build_tiny_llama(tmp_path)
    events: list[str] = []
    items = _varied_items()
    train, held = er2score.split_groups(items, 0.25, seed=0)
    train_reward_model(
        base=llm.LMRef(str(base)), train_items=train, heldout_items=held,
        output=tmp_path / "ad", config=TrainConfig(epochs=1, max_steps=2, batch_size=4),
        progress=lambda step, total, loss: events.append(f"step {step}/{total}"),
        phase=events.append,
    )
    assert events == [
        f"loading the backbone {base}",
        f"scoring {len(held)} held-out pairs before training",
        "training: 2 steps of up to 4 preference pairs",
        "step 1/2",
        "step 2/2",
        f"scoring {len(held)} held-out pairs after training",
        "saving the adapter",
    ]
