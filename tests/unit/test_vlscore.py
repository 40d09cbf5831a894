"""VLScore geometry (hand-worked triangles) and the metric end to end on a tiny image-text model.

The tiny model is a real ``VisionTextDualEncoderModel`` (BERT text tower + ViT vision tower)
with random weights, saved with ``save_pretrained`` and loaded through the same code path a
user's CLIP-style checkpoint takes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from radconcord.backend.metrics import vlscore
from tests.helpers_models import build_tiny_bert


def test_triangle_area_and_score_on_a_right_triangle():
    """Legs 3 and 4 -> area 6, hypotenuse 5 -> minimal sphere radius 2.5 (exact)."""
    i = np.array([[0.0, 0.0, 0.0]])
    g = np.array([[3.0, 0.0, 0.0]])
    r = np.array([[0.0, 4.0, 0.0]])
    geo = vlscore.triangle_scores(i, g, r)
    assert geo["area"][0] == pytest.approx(6.0, abs=1e-12)
    assert geo["sphere"][0] == pytest.approx(2.5, abs=1e-12)
    assert geo["cosine"][0] == pytest.approx(0.0, abs=1e-12)
    assert geo["image_cosine"][0] == pytest.approx(0.0, abs=1e-12)
    assert vlscore.vlscore_from_area(geo["area"], 12.0)[0] == pytest.approx(0.5)
    assert vlscore.vlscore_from_area(geo["area"], 3.0)[0] == 0.0  # clipped at 0


def test_equilateral_triangle_uses_the_circumradius():
    """Side 1 equilateral: area sqrt(3)/4, circumradius 1/sqrt(3) (acute case)."""
    i = np.array([[0.0, 0.0]])
    g = np.array([[1.0, 0.0]])
    r = np.array([[0.5, math.sqrt(3) / 2]])
    geo = vlscore.triangle_scores(i, g, r)
    assert geo["area"][0] == pytest.approx(math.sqrt(3) / 4, abs=1e-12)
    assert geo["sphere"][0] == pytest.approx(1 / math.sqrt(3), abs=1e-12)


def test_area_matches_cross_product_in_3d():
    """Reference: |(g-i) x (r-i)| / 2 with numpy's cross product, random triangles, 1e-9."""
    rng = np.random.default_rng(0)
    i, g, r = (rng.normal(size=(50, 3)) for _ in range(3))
    expected = 0.5 * np.linalg.norm(np.cross(g - i, r - i), axis=1)
    np.testing.assert_allclose(vlscore.triangle_scores(i, g, r)["area"], expected, atol=1e-9)


def test_identical_candidate_has_zero_area_and_full_score():
    i = np.array([[1.0, 2.0]])
    g = r = np.array([[3.0, -1.0]])
    geo = vlscore.triangle_scores(i, g, r)
    assert geo["area"][0] == 0.0
    assert vlscore.vlscore_from_area(geo["area"], 1.0)[0] == 1.0


def _tiny_dual_encoder(tmp_path):
    from transformers import (
        BertConfig,
        BertTokenizer,
        VisionTextDualEncoderConfig,
        VisionTextDualEncoderModel,
        ViTConfig,
        ViTImageProcessor,
    )

    text_dir = build_tiny_bert(tmp_path, name="text")
    torch.manual_seed(0)
    vision = ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
        num_attention_heads=4, intermediate_size=64, num_channels=3,
    )
    config = VisionTextDualEncoderConfig.from_vision_text_configs(
        vision, BertConfig.from_pretrained(str(text_dir)), projection_dim=16
    )
    model = VisionTextDualEncoderModel(config).eval()
    out = tmp_path / "dual"
    model.save_pretrained(str(out))
    BertTokenizer.from_pretrained(str(text_dir)).save_pretrained(str(out))
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(str(out))
    return out, model


def _png(path, seed):
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, size=(40, 48), dtype=np.uint8)).save(path)
    return path


# How far a unit embedding from another batch (or another CPU's kernels) may be from ours:
# float32 reductions over at most 64 dims (hidden 32, feed-forward 64), sqrt(64) * eps = 1e-6
# with eps = 2**-23.
EMBED_TOL = 1e-6


def _area_ratio_tolerance(i, g, r, area, e=EMBED_TOL):
    """First-order bound on how far T / C moves when each vertex moves by at most ``e``.

    Moving one vertex by e changes a triangle's area by at most e times the opposite side / 2,
    so T moves by at most e * P / 2 (P the perimeter), and C (the largest T) likewise.
    """
    perimeter = (np.linalg.norm(i - g, axis=1) + np.linalg.norm(i - r, axis=1)
                 + np.linalg.norm(g - r, axis=1))
    k = int(np.argmax(area))
    c = area[k]
    return (e * perimeter / 2 + area / c * e * perimeter[k] / 2) / c


def test_metric_end_to_end_matches_an_independent_forward_pass(tmp_path):
    """Values equal the geometry of embeddings computed independently with the same model; C
    calibrated on the scored set is the max area.

    Both sides embed in float32 but in other batches, so the unit embeddings may differ by
    about EMBED_TOL. The cosines and the sphere radius (these triangles are obtuse: half the
    longest side) move by about that: 1e-5. VLScore = 1 - T / C does not: this random-weight
    text tower puts every text within about 4e-3 of the others, so the triangles are thin
    (T ~ 1e-3) and T / C moves about 1e3 times more than a vertex; its tolerance is the bound
    of :func:`_area_ratio_tolerance` (about 8e-4 here; observed up to 2.2e-5 with
    ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2, over the 1e-5 this test used to allow), and C's
    relative one e * P / (2 C).
    """
    from transformers import AutoTokenizer, ViTImageProcessor

    path, model = _tiny_dual_encoder(tmp_path)
    imgs = [_png(tmp_path / f"im{k}.png", k) for k in range(3)]
    refs = ["No acute process.", "Small left effusion.", "Cardiomegaly."]
    cands = ["Normal chest.", "Large right effusion.", "Cardiomegaly."]
    metric = vlscore.VLScore(model=str(path))
    assert metric.availability() is None
    assert metric.corpus_dependent
    res = metric.score(
        references=refs, candidates=cands, images=[(p,) for p in imgs[:2]] + [()]
    )
    assert math.isnan(res.values["vlscore"][2]) and res.details[2]["flag"] == "no image"

    tok = AutoTokenizer.from_pretrained(str(path))
    proc = ViTImageProcessor.from_pretrained(str(path))
    with torch.no_grad():
        def text(t):
            enc = tok([t], return_tensors="pt")
            out = model.get_text_features(
                input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]
            )
            out = getattr(out, "pooler_output", out)
            return out[0].numpy().astype(np.float64)

        def image(p):
            arr = vlscore.load_pixels(p)
            pix = proc(images=[Image.fromarray(arr).convert("RGB")], return_tensors="pt")
            out = model.get_image_features(pixel_values=pix["pixel_values"])
            out = getattr(out, "pooler_output", out)
            return out[0].numpy().astype(np.float64)

        def unit(v):
            return v / np.linalg.norm(v)

        i = np.stack([unit(image(p)) for p in imgs[:2]])
        g = np.stack([unit(text(t)) for t in cands[:2]])
        r = np.stack([unit(text(t)) for t in refs[:2]])
    geo = vlscore.triangle_scores(i, g, r)
    c = geo["area"].max()
    expected = vlscore.vlscore_from_area(geo["area"], c)
    tol = _area_ratio_tolerance(i, g, r, geo["area"])
    got = np.asarray(res.values["vlscore"][:2])
    assert np.all(np.abs(got - expected) <= tol), (got, expected, tol)
    np.testing.assert_allclose(res.values["vl_cosine"][:2], geo["cosine"], atol=1e-5)
    np.testing.assert_allclose(res.values["vl_sphere"][:2], geo["sphere"], atol=1e-5)
    k = int(np.argmax(geo["area"]))
    c_rel = EMBED_TOL * float(np.sum([np.linalg.norm(i[k] - g[k]), np.linalg.norm(i[k] - r[k]),
                                      np.linalg.norm(g[k] - r[k])])) / (2 * c)
    assert res.corpus["vlscore_C"] == pytest.approx(c, rel=c_rel)
    assert min(res.values["vlscore"][:2]) == pytest.approx(0.0, abs=1e-9)  # the max-area pair


def test_explicit_c_is_in_the_signature_and_not_corpus_dependent(tmp_path):
    path, _ = _tiny_dual_encoder(tmp_path)
    metric = vlscore.VLScore(model=str(path), c=890)
    assert not metric.corpus_dependent
    sig = metric.signature()
    assert sig.startswith("vlscore|model:dual@sha256:")
    assert sig.endswith("|C:890|norm:l2|img:header-window-512|dtype:fp32|version:1")
    assert "C:scored-set-max" in vlscore.VLScore(model=str(path)).signature()


def test_unavailable_without_a_model_says_why(monkeypatch, tmp_path):
    # The default model is a hub id now: offline with an empty cache it is not available.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path))
    reason = vlscore.VLScore().availability()
    assert reason is not None and "LIMITR" in reason and "vlscore.model" in reason
    assert "does not exist" in vlscore.VLScore(model="/nonexistent/clip").availability()
    assert "positive" in vlscore.VLScore(model="/x", c=-1).availability()


def test_text_only_model_is_rejected(tmp_path):
    text_dir = build_tiny_bert(tmp_path, name="textonly")
    metric = vlscore.VLScore(model=str(text_dir))
    with pytest.raises(ValueError, match="not an image-text model"):
        metric.load("cpu")
