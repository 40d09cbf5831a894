"""Model resolution, fingerprints, device/dtype choice and length batching (backend.metrics.hf)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import torch

from radconcord.backend.metrics import hf
from tests.helpers_models import build_tiny_bert, minilm_dir


@pytest.fixture
def isolated_env(monkeypatch, tmp_path):
    """No model dir, an empty HF cache, hub offline: nothing resolves by accident."""
    monkeypatch.delenv("RADCONCORD_MODEL_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("m"), own_vocab=True)


def test_absolute_path_resolves(isolated_env, tiny_bert):
    path, reason = hf.resolve_or_reason(hf.ModelRef(str(tiny_bert)))
    assert reason is None
    assert path == tiny_bert.resolve()


def test_missing_folder_gives_reason(isolated_env):
    missing = isolated_env / "nope"
    path, reason = hf.resolve_or_reason(hf.ModelRef(str(missing)))
    assert path is None
    assert str(missing) in reason and "does not exist" in reason


def test_folder_without_config_gives_reason(isolated_env):
    folder = isolated_env / "empty-model"
    folder.mkdir()
    path, reason = hf.resolve_or_reason(hf.ModelRef(str(folder)))
    assert path is None and "config.json" in reason


@pytest.mark.parametrize("folder_name", ["acme--tiny-bert", "tiny-bert"])
def test_model_dir_lookup(isolated_env, tiny_bert, monkeypatch, folder_name):
    root = isolated_env / "models"
    shutil.copytree(tiny_bert, root / folder_name)
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(root))
    found, reason = hf.locate(hf.ModelRef("acme/tiny-bert", "0" * 40))
    assert reason is None
    assert found.source == "model_dir"
    assert found.path == (root / folder_name).resolve()


def test_hub_id_offline_fails_with_reason(isolated_env):
    path, reason = hf.resolve_or_reason(hf.ModelRef("acme/absent-model", "a" * 40))
    assert path is None
    assert "acme/absent-model" in reason and "HF_HUB_OFFLINE" in reason
    with pytest.raises(hf.ModelNotAvailable, match="HF_HUB_OFFLINE"):
        hf.resolve(hf.ModelRef("acme/absent-model", "a" * 40))


def test_hub_id_without_revision_is_refused(isolated_env):
    _, reason = hf.resolve_or_reason(hf.ModelRef("acme/absent-model"))
    assert "pinned revision" in reason


def test_unreachable_hub_fails_fast_with_reason(isolated_env, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # A port nobody listens on: the probe must answer False, not hang.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    hf._PROBE.clear()
    assert hf.hub_reachable(timeout=1.0) is False
    _, reason = hf.resolve_or_reason(hf.ModelRef("acme/absent-model", "a" * 40))
    assert "cannot be reached" in reason
    hf._PROBE.clear()


def test_reachable_hub_means_downloadable(isolated_env, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf, "hub_reachable", lambda timeout=1.5: True)
    path, reason = hf.resolve_or_reason(hf.ModelRef("acme/absent-model", "a" * 40))
    assert (path, reason) == (None, None)


def test_packaged_minilm_is_found(isolated_env):
    folder = hf.packaged_minilm_dir()
    assert folder == minilm_dir().resolve()
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    found, reason = hf.locate(hf.ModelRef(hf.PACKAGED_MINILM_ID))
    assert reason is None and found.source == "packaged" and found.path == folder


def test_fingerprint_tracks_weights_only(tmp_path, tiny_bert):
    a = tmp_path / "a"
    shutil.copytree(tiny_bert, a)
    fp = hf.fingerprint(a)
    assert len(fp) == 64 and fp == hf.fingerprint(tiny_bert)
    (a / "README.md").write_text("notes do not change a score\n")
    assert hf.fingerprint(a) == fp
    weights = a / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert hf.fingerprint(a) != fp


def test_fingerprint_needs_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError):
        hf.fingerprint(tmp_path)


def test_pick_device(monkeypatch):
    assert hf.pick_device("cpu") == "cpu"
    assert hf.pick_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown device"):
        hf.pick_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hf.pick_device("auto") == "cpu"
    with pytest.raises(ValueError, match="CUDA is not available"):
        hf.pick_device("cuda")


def test_pick_dtype():
    assert hf.pick_dtype("cpu") is torch.float32
    assert hf.pick_dtype("cpu", "fp32") is torch.float32
    with pytest.raises(ValueError):
        hf.pick_dtype("cpu", "bf16")
    with pytest.raises(ValueError):
        hf.pick_dtype("cpu", "fp8")
    assert hf.dtype_name(torch.bfloat16) == "bf16"


def test_length_sorted_batches_cover_everything():
    lengths = [5, 1, 9, 3, 9, 2, 7, 4]
    batches = list(hf.length_sorted_batches(lengths, 3))
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(len(b) <= 3 for b in batches)
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)
    capped = list(hf.length_sorted_batches(lengths, 8, max_tokens=18))
    assert all(len(b) * max(lengths[i] for i in b) <= 18 for b in capped)
    with pytest.raises(ValueError):
        list(hf.length_sorted_batches(lengths, 0))


def test_map_sorted_by_length_restores_order():
    items = ["ccc", "a", "bbbbb", "dd"]
    out = hf.map_sorted_by_length(
        items,
        lambda batch: [s.upper() for s in batch],
        lengths=[len(s) for s in items],
        batch_size=2,
    )
    assert out == ["CCC", "A", "BBBBB", "DD"]


def test_load_model_and_tokenizer_from_folder(tiny_bert):
    tok = hf.load_tokenizer(tiny_bert)
    model = hf.load_model(tiny_bert, device="cpu")
    assert not model.training
    ids = tok(["no pleural effusion ."], return_tensors="pt")
    with torch.inference_mode():
        out = model(**ids)[0]
    assert out.shape[-1] == 32
