"""Generate the demo study's synthetic chest phantom (PA and lateral), 8-bit PNG.

These are drawings made for RadConcord, not patient images: ellipses for lungs, heart,
spine and soft tissue, arcs for ribs, a blurred patch in the right lower zone (the image's
left side, as films are viewed facing the patient), and seeded noise. Run from the
repository root:

    python assets/demo/make_synthetic_images.py

Output is deterministic (seed 0); the committed PNGs were made with this script.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

SIZE = 320
OUT = Path(__file__).resolve().parent / "images"


def _ellipse(yy: np.ndarray, xx: np.ndarray, cy: float, cx: float, ry: float, rx: float
             ) -> np.ndarray:
    return ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0


def _finish(img: np.ndarray, rng: np.random.Generator) -> Image.Image:
    img = img + rng.normal(0, 4, img.shape)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    return pil.filter(ImageFilter.GaussianBlur(1.2))


def frontal(rng: np.random.Generator) -> Image.Image:
    """PA view: two lungs, mediastinum, heart to the image's right, ribs, RLL opacity."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    img = np.full((SIZE, SIZE), 20.0)
    img[_ellipse(yy, xx, 170, 160, 150, 135)] = 185  # soft tissue of the thorax
    right_lung = _ellipse(yy, xx, 150, 100, 95, 50)  # patient's right = image left
    left_lung = _ellipse(yy, xx, 150, 220, 95, 50)
    img[right_lung | left_lung] = 60
    for k in range(7):  # posterior ribs as bright arcs over the lungs
        cy = 80 + 22 * k
        ring = np.abs(np.hypot((yy - cy) * 2.2, xx - 160) - 120) < 6
        img[ring & (right_lung | left_lung)] += 45
    img[_ellipse(yy, xx, 150, 160, 120, 16)] = 200  # spine / mediastinum
    img[_ellipse(yy, xx, 205, 185, 45, 55)] = 195  # heart, to the patient's left
    img[_ellipse(yy, xx, 268, 160, 25, 150) & (yy > 255)] = 205  # diaphragm / abdomen
    opacity = _ellipse(yy, xx, 205, 95, 22, 24)  # right lower zone consolidation
    img[opacity] = np.maximum(img[opacity], 150)
    return _finish(img, rng)


def lateral(rng: np.random.Generator) -> Image.Image:
    """Lateral view: one lung field, heart anterior, spine posterior, posterior opacity."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    img = np.full((SIZE, SIZE), 20.0)
    img[_ellipse(yy, xx, 170, 160, 150, 120)] = 185
    lung = _ellipse(yy, xx, 150, 165, 100, 80)
    img[lung] = 70
    img[_ellipse(yy, xx, 205, 120, 50, 40)] = 190  # heart, anterior (image left)
    img[(xx > 235) & (xx < 262) & (yy > 40) & (yy < 300)] = 210  # spine, posterior
    opacity = _ellipse(yy, xx, 215, 205, 22, 25)  # lower lobe, posterior
    img[opacity] = np.maximum(img[opacity], 150)
    img[_ellipse(yy, xx, 272, 165, 22, 125) & (yy > 258)] = 205
    return _finish(img, rng)


def main() -> None:
    """Write ``images/synthetic_phantom_pa.png`` and ``images/synthetic_phantom_lateral.png``."""
    rng = np.random.default_rng(0)
    OUT.mkdir(parents=True, exist_ok=True)
    frontal(rng).save(OUT / "synthetic_phantom_pa.png", optimize=True)
    lateral(rng).save(OUT / "synthetic_phantom_lateral.png", optimize=True)


if __name__ == "__main__":
    main()
