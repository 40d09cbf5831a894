"""VLScore: image-aware report similarity from the triangle (image, candidate, reference).

Embed image ``i``, candidate ``g`` and reference ``r`` in a joint image-text space. The area of
the triangle they span is

    T = 1/2 * sqrt(<i-g, i-g> <i-r, i-r> - <i-g, i-r>^2)

and VLScore = max(1 - T / C, 0), where ``C`` is the largest area on a calibration set (the
paper used LIMITR embeddings and C = 890; C belongs to the embedding model, so it is either
given explicitly or calibrated on the scored set, and recorded in the signature either way).

Ablations from the paper are outputs too: ``vl_cosine`` = cos(r, g), ``vl_image_cosine`` =
cos(r - i, g - i), and ``vl_sphere`` = radius of the minimal sphere enclosing i, g and r (lower
is better for the sphere: a smaller triangle means closer agreement).

The embedding backend is any transformers model with ``get_text_features`` and
``get_image_features`` (CLIPModel, SiglipModel, VisionTextDualEncoderModel, ...), by hub id
(with a pinned revision, or pinned to the hub's current commit when online) or a local
folder. The paper's LIMITR weights are not public; the default is :data:`DEFAULT_MODEL`, a
CLIP ViT-B/16 trained on chest X-ray image-text pairs for CheXagent, loadable by
``AutoModel`` as a plain ``CLIPModel`` (see the card for why); LIMITR or any other
image-text model stays an option (``vlscore.model``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import BaseMetric, MetricResult, MetricSpec, OutputSpec

logger = logging.getLogger(__name__)

#: Longest image side handed to the image processor (it resizes further itself).
IMAGE_SIDE = 512

#: StanfordAIMI's XrayCLIP (CheXagent, Chen et al. 2024): a CLIPModel (transformers "clip"
#: architecture, tokenizer and image processor in the repository) fine-tuned on chest X-ray
#: image-text pairs from the LAION-2B ViT-B/16 CLIP.
DEFAULT_MODEL = "StanfordAIMI/XrayCLIP__vit-b-16__laion2b-s34b-b88k"
#: No full commit sha of it could be verified offline, so none is pinned: online, the hub's
#: current commit is resolved once and named in the signature (backend.metrics.hf).
DEFAULT_REVISION: str | None = None


def triangle_scores(i: np.ndarray, g: np.ndarray, r: np.ndarray) -> dict[str, np.ndarray]:
    """Geometry of each (image, candidate, reference) triangle, vectorised over rows.

    Args:
        i: Image embeddings, shape (n, d).
        g: Candidate embeddings, shape (n, d).
        r: Reference embeddings, shape (n, d).

    Returns:
        ``area`` (T), ``cosine`` (r, g), ``image_cosine`` (r - i, g - i) and ``sphere``
        (minimal enclosing sphere radius), each of shape (n,).
    """
    u, v = i - g, i - r
    uu, vv, uv = (u * u).sum(1), (v * v).sum(1), (u * v).sum(1)
    # Lagrange's identity can go slightly negative in floating point for degenerate triangles.
    area = 0.5 * np.sqrt(np.clip(uu * vv - uv * uv, 0.0, None))

    def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, (a * b).sum(1) / den, np.nan)

    sides = np.stack(
        [np.linalg.norm(g - r, axis=1), np.sqrt(vv), np.sqrt(uu)], axis=1
    )  # opposite i, g, r
    sides.sort(axis=1)
    a, b, c = sides[:, 0], sides[:, 1], sides[:, 2]
    # Right or obtuse (or degenerate): the longest side is a diameter of the minimal sphere;
    # acute: the circumscribed circle is minimal, R = abc / (4 T).
    obtuse = a * a + b * b <= c * c
    with np.errstate(invalid="ignore", divide="ignore"):
        circum = np.where(area > 0, a * b * c / (4 * area), c / 2)
    sphere = np.where(obtuse, c / 2, circum)
    return {"area": area, "cosine": cos(r, g), "image_cosine": cos(r - i, g - i), "sphere": sphere}


def vlscore_from_area(area: np.ndarray, c: float) -> np.ndarray:
    """``max(1 - T / C, 0)``; ``C`` must be positive."""
    if not c > 0:
        raise ValueError(f"VLScore constant C must be positive (got {c})")
    return np.maximum(1.0 - np.asarray(area, dtype=np.float64) / c, 0.0)


class _Embedder:
    """A loaded image-text model with its tokenizer and image processor."""

    def __init__(self, path: Path, device: str, dtype: Any) -> None:
        from transformers import AutoImageProcessor

        self.model = hf.load_model(path, device=device, dtype=dtype)
        if not (hasattr(self.model, "get_text_features") and hasattr(
            self.model, "get_image_features"
        )):
            raise ValueError(
                f"{path} is not an image-text model (needs get_text_features and"
                " get_image_features, e.g. CLIP, SigLIP, VisionTextDualEncoder)"
            )
        self.tokenizer = hf.load_tokenizer(path)
        self.processor = AutoImageProcessor.from_pretrained(str(path), local_files_only=True)
        self.device, self.dtype = device, dtype
        self._lock = threading.Lock()

    @staticmethod
    def _features(out: Any) -> Any:
        # transformers 5 may return a model output object instead of a bare tensor.
        if hasattr(out, "pooler_output") and not hasattr(out, "shape"):
            return out.pooler_output
        return out

    def text(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        import torch

        max_len = min(int(getattr(self.tokenizer, "model_max_length", 512) or 512), 512)

        def run(batch: list[str]) -> list[np.ndarray]:
            enc = self.tokenizer(
                batch, padding=True, truncation=True, max_length=max_len, return_tensors="pt"
            ).to(self.device)
            with self._lock, torch.inference_mode():
                feats = self._features(
                    self.model.get_text_features(
                        input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]
                    )
                )
            return list(feats.float().cpu().numpy().astype(np.float64))

        return np.stack(
            hf.map_sorted_by_length(
                list(texts), run, lengths=[len(t) for t in texts], batch_size=batch_size
            )
        )

    def images(self, arrays: Sequence[np.ndarray], batch_size: int) -> np.ndarray:
        import torch
        from PIL import Image

        out = []
        for start in range(0, len(arrays), batch_size):
            batch = [Image.fromarray(a).convert("RGB") for a in arrays[start : start + batch_size]]
            pixels = self.processor(images=batch, return_tensors="pt")["pixel_values"]
            with self._lock, torch.inference_mode():
                feats = self._features(
                    self.model.get_image_features(
                        pixel_values=pixels.to(self.device, dtype=self.dtype)
                    )
                )
            out.extend(feats.float().cpu().numpy().astype(np.float64))
        return np.stack(out)


def load_pixels(path: Path) -> np.ndarray:
    """An image as the viewer shows it by default (header window, MONOCHROME1 inverted)."""
    from radconcord.backend.imaging.load import load_image
    from radconcord.backend.imaging.render import RenderSettings, render_array

    arr, _ = render_array(load_image(path), RenderSettings(max_side=IMAGE_SIDE))
    return arr


class VLScore(BaseMetric):
    """VLScore and its ablations (see module docstring)."""

    spec = MetricSpec(
        name="vlscore",
        outputs=(
            OutputSpec("vlscore", True, "1 - triangle area / C, clipped at 0"),
            OutputSpec("vl_cosine", True, "cosine(reference, candidate) in the joint space"),
            OutputSpec("vl_image_cosine", True, "cosine(reference - image, candidate - image)"),
            OutputSpec("vl_sphere", False, "radius of the minimal sphere around i, g, r"),
        ),
        needs_image=True,
        needs_model=True,
        citation="VLScore: image-aware radiology report evaluation (2024)",
    )
    defaults: dict[str, Any] = {
        "model": DEFAULT_MODEL,
        "revision": DEFAULT_REVISION,
        "c": None,
        "normalize": True,
        "batch_size": 16,
        "dtype": "fp32",
    }

    @property
    def corpus_dependent(self) -> bool:
        """Calibrating C on the scored set makes every value depend on the whole set.

        The scoring runner reads the same rule from the registry (``c`` unset).
        """
        return self.options["c"] is None

    def _ref(self) -> hf.ModelRef | None:
        model = self.options["model"]
        return hf.ModelRef(str(model), self.options["revision"]) if model else None

    def availability(self) -> str | None:
        ref = self._ref()
        if ref is None:
            return (
                "no image-text model configured: set vlscore.model to a CLIP-style model"
                " folder or hub id@revision (the paper's LIMITR weights are not public)"
            )
        if self.options["c"] is not None and not float(self.options["c"]) > 0:
            return f"vlscore.c must be positive (got {self.options['c']})"
        _, reason = hf.resolve_or_reason(ref)
        if reason is not None and ref.model == DEFAULT_MODEL:
            return (
                f"the default image-text model is not available: {reason}. Set vlscore.model to"
                " another CLIP-style model folder or hub id (LIMITR, the paper's model, if you"
                " have its weights)"
            )
        return reason

    def _load(self) -> None:
        ref = self._ref()
        assert ref is not None
        path = hf.resolve(ref)
        dtype = hf.pick_dtype(self.device, self.options["dtype"])
        key = ("vlscore-embedder", str(path), self.device, str(dtype))
        self._embedder = self.resources.get(key, lambda: _Embedder(path, self.device, dtype))

    def _geometry(
        self, references: Sequence[str], candidates: Sequence[str], images: Sequence[Any]
    ) -> tuple[list[int], dict[str, np.ndarray] | None, list[dict[str, Any]]]:
        """Pairs with an image, their triangle geometry (``None`` if none) and the details."""
        n = len(references)
        paths: list[Path | None] = []
        for item in images:
            if isinstance(item, (str, Path)):
                paths.append(Path(item))
            elif item:
                paths.append(Path(item[0]))  # first image of the pair (frontal first)
            else:
                paths.append(None)
        idx = [k for k in range(n) if paths[k] is not None]
        details: list[dict[str, Any]] = [
            {"image": None if p is None else p.name} for p in paths
        ]
        if not idx:
            return idx, None, details

        bs = int(self.options["batch_size"])
        uniq_text = list(dict.fromkeys([references[k] for k in idx] + [candidates[k] for k in idx]))
        text_vec = self._embedder.text(uniq_text, bs)
        t_index = {t: j for j, t in enumerate(uniq_text)}
        uniq_paths = list(dict.fromkeys(paths[k] for k in idx))
        img_vec = self._embedder.images([load_pixels(p) for p in uniq_paths], bs)
        p_index = {p: j for j, p in enumerate(uniq_paths)}

        r = text_vec[[t_index[references[k]] for k in idx]]
        g = text_vec[[t_index[candidates[k]] for k in idx]]
        i = img_vec[[p_index[paths[k]] for k in idx]]
        if self.options["normalize"]:
            r, g, i = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (r, g, i))
        return idx, triangle_scores(i, g, r), details

    def corpus_statistics(
        self,
        *,
        references: Sequence[str],
        candidates: Sequence[str],
        images: Sequence[Any] | None = None,
    ) -> float:
        """C calibrated on the whole scored set (its largest triangle), computed once.

        ``score(..., corpus=C)`` then scores a chunk with that C, as the one call over the
        whole set does (see :class:`~backend.metrics.base.CorpusStatistics`). Embeds the set.

        Returns:
            The largest triangle area, or ``nan`` when no pair has an image.
        """
        refs, cands = list(references), list(candidates)
        if images is None or len(images) != len(refs):
            raise ValueError("vlscore: corpus statistics need one image entry per pair")
        if not self._loaded:
            self.load(self.device)
        _, geo, _ = self._geometry(refs, cands, images)
        return float("nan") if geo is None else float(geo["area"].max())

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
        corpus: float | None = None,
    ) -> MetricResult:
        assert images is not None
        n = len(references)
        idx, geo, details = self._geometry(references, candidates, images)
        values = {k: [float("nan")] * n for k in self.spec.keys}
        if geo is None:
            for d in details:
                d["flag"] = "no image"
            return MetricResult(values, {}, details)
        if self.options["c"] is not None:
            c = float(self.options["c"])
        elif corpus is not None:
            c = float(corpus)  # the whole set's C (corpus_statistics)
        else:
            c = float(geo["area"].max())
        if not c > 0:
            c = float("nan")  # every triangle degenerate: no calibration possible
        score = vlscore_from_area(geo["area"], c) if c == c else np.full(len(idx), np.nan)
        for j, k in enumerate(idx):
            values["vlscore"][k] = float(score[j])
            values["vl_cosine"][k] = float(geo["cosine"][j])
            values["vl_image_cosine"][k] = float(geo["image_cosine"][j])
            values["vl_sphere"][k] = float(geo["sphere"][j])
            details[k].update(area=float(geo["area"][j]), C=c)
        with_image = set(idx)
        for k in range(n):
            if k not in with_image:
                details[k]["flag"] = "no image"
        return MetricResult(values, {"vlscore_C": c}, details)

    def signature(self) -> str:
        ref = self._ref()
        if ref is None:
            model = "none"
        else:
            try:
                # A folder: <name>@sha256:<weights>; a hub model: <id>@<commit>.
                model = hf.identity(ref)
            except hf.ModelNotAvailable:
                model = str(ref)
        c = "scored-set-max" if self.options["c"] is None else f"{float(self.options['c']):g}"
        norm = "l2" if self.options["normalize"] else "none"
        return (
            f"vlscore|model:{model}|C:{c}|norm:{norm}|img:header-window-{IMAGE_SIDE}"
            f"|dtype:{self.options['dtype']}|version:1"
        )
