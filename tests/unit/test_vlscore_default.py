"""VLScore's default image-text model: a CLIPModel (StanfordAIMI XrayCLIP ViT-B/16).

The loader is tested on a tiny random-weight ``CLIPModel`` (same architecture: CLIP text and
vision towers with projections, a CLIP BPE tokenizer and a CLIP image processor) saved by the
test: as a local folder, and served under the default hub id by the fake hub of
``test_hf_online`` (no revision pinned: the hub's commit is resolved, downloaded and named in
the signature). Values equal an independent forward pass of the same model (1e-5, fp32
batching). What the real XrayCLIP weights give could not be checked here (no hub access).
"""

from __future__ import annotations

import huggingface_hub
import numpy as np
import pytest
import torch
from PIL import Image

from radconcord.backend.metrics import hf, vlscore
from tests.unit.test_hf_online import SHA, FakeHub


def build_tiny_clip(folder):
    """Save a random-weight CLIPModel with a byte-level CLIP tokenizer and image processor."""
    from transformers import (
        CLIPConfig,
        CLIPImageProcessor,
        CLIPModel,
        CLIPTextConfig,
        CLIPTokenizer,
        CLIPVisionConfig,
    )
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    folder.mkdir(parents=True, exist_ok=True)
    chars = list(bytes_to_unicode().values())
    tokens = chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]
    tok = CLIPTokenizer(vocab={t: i for i, t in enumerate(tokens)}, merges=[],
                        model_max_length=77)
    tok.save_pretrained(str(folder))
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
                       ).save_pretrained(str(folder))
    torch.manual_seed(0)
    config = CLIPConfig(
        text_config=CLIPTextConfig(vocab_size=len(tokens), hidden_size=32, intermediate_size=64,
                       num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=77,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                       pad_token_id=tok.pad_token_id).to_dict(),
        vision_config=CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32,
                                       intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4).to_dict(),
        projection_dim=16,
    )
    model = CLIPModel(config).eval()
    model.save_pretrained(str(folder))
    return folder, model


def _png(path, seed):
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, size=(40, 48), dtype=np.uint8)).save(path)
    return path


REFS = ["No acute process.", "Small left effusion.", "Cardiomegaly, unchanged."]
CANDS = ["Normal chest.", "Large right effusion.", "Cardiomegaly."]


def _independent(model, folder, imgs):
    from transformers import CLIPImageProcessor, CLIPTokenizer

    tok = CLIPTokenizer.from_pretrained(str(folder))
    proc = CLIPImageProcessor.from_pretrained(str(folder))

    def unit(v):
        return v / np.linalg.norm(v)

    with torch.no_grad():
        def text(t):
            enc = tok([t], return_tensors="pt", truncation=True, max_length=77)
            out = model.get_text_features(input_ids=enc["input_ids"],
                                          attention_mask=enc["attention_mask"])
            return unit(getattr(out, "pooler_output", out)[0].numpy().astype(np.float64))

        def image(p):
            pix = proc(images=[Image.fromarray(vlscore.load_pixels(p)).convert("RGB")],
                       return_tensors="pt")
            out = model.get_image_features(pixel_values=pix["pixel_values"])
            return unit(getattr(out, "pooler_output", out)[0].numpy().astype(np.float64))

        i = np.stack([image(p) for p in imgs])
        g = np.stack([text(t) for t in CANDS])
        r = np.stack([text(t) for t in REFS])
    return vlscore.triangle_scores(i, g, r)


def test_default_is_a_chest_xray_clip_model():
    assert vlscore.VLScore().options["model"] == vlscore.DEFAULT_MODEL
    assert vlscore.DEFAULT_MODEL == "StanfordAIMI/XrayCLIP__vit-b-16__laion2b-s34b-b88k"
    # LIMITR or any other image-text model stays an option.
    assert vlscore.VLScore(model="/models/limitr").options["model"] == "/models/limitr"


def test_tiny_clip_folder_matches_an_independent_forward_pass(tmp_path):
    folder, model = build_tiny_clip(tmp_path / "tiny-clip")
    imgs = [_png(tmp_path / f"im{k}.png", k) for k in range(3)]
    metric = vlscore.VLScore(model=str(folder))
    assert metric.availability() is None
    res = metric.score(references=REFS, candidates=CANDS, images=[(p,) for p in imgs])
    geo = _independent(model, folder, imgs)
    c = geo["area"].max()
    np.testing.assert_allclose(res.values["vlscore"], vlscore.vlscore_from_area(geo["area"], c),
                               atol=1e-5)
    np.testing.assert_allclose(res.values["vl_cosine"], geo["cosine"], atol=1e-5)
    np.testing.assert_allclose(res.values["vl_image_cosine"], geo["image_cosine"], atol=1e-5)
    assert res.corpus["vlscore_C"] == pytest.approx(c, rel=1e-5)
    assert metric.signature().startswith(
        f"vlscore|model:tiny-clip@sha256:{hf.fingerprint(folder)[:16]}|C:scored-set-max")


def test_default_model_online_is_pinned_downloaded_and_named(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("RADCONCORD_MODEL_DIR", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://fake-hub.invalid")
    monkeypatch.setattr(hf, "hub_reachable", lambda timeout=1.5: True)
    folder, model = build_tiny_clip(tmp_path / "src")
    hub = FakeHub(tmp_path / "hf-cache", {vlscore.DEFAULT_MODEL: folder})
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info",
                        lambda api, repo_id, **kw: hub.model_info(repo_id, **kw))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
    hf._HUB_SHA.clear()
    try:
        metric = vlscore.VLScore(c=0.5)
        assert metric.availability() is None
        sig = metric.signature()
        assert f"|model:{vlscore.DEFAULT_MODEL}@{SHA}|C:0.5|" in sig
        imgs = [_png(tmp_path / f"im{k}.png", k) for k in range(3)]
        res = metric.score(references=REFS, candidates=CANDS, images=[(p,) for p in imgs])
        assert hub.downloads == [(vlscore.DEFAULT_MODEL, SHA)]
        assert metric.signature() == sig  # the same name after the download
        geo = _independent(model, folder, imgs)
        np.testing.assert_allclose(res.values["vlscore"],
                                   vlscore.vlscore_from_area(geo["area"], 0.5), atol=1e-5)
    finally:
        hf._HUB_SHA.clear()


def test_default_model_unavailable_offline_names_the_alternatives(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path))
    reason = vlscore.VLScore().availability()
    assert reason.startswith("the default image-text model is not available")
    assert vlscore.DEFAULT_MODEL in reason and "HF_HUB_OFFLINE" in reason
    assert "vlscore.model" in reason and "LIMITR" in reason
