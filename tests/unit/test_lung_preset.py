"""The Lung preset on the demo's real CR (issue 24, "the Lung preset burns out the
mediastinum"), justified by numbers measured on the film.

RG1_UNCR (pydicom-data, the demo's film) is a 15-bit MONOCHROME1 chest CR. Two regions,
drawn on the film as fractions of its width and height (columns, then rows):

- the mediastinum: the central strip between the lungs, spine included,
  x 0.42..0.58, y 0.12..0.62;
- the lungs: one box in each lung field, x 0.12..0.36 and 0.62..0.86, y 0.18..0.55.

"Clipped at white" is a pixel shown as 255 on an 8-bit screen (brightness rounded to 1/255).
Measured (brightness as shown, after the MONOCHROME1 flip):

====================  ==================  ===============  ==================
window                mediastinum white   lungs p5..p95    lungs p25..p75
====================  ==================  ===============  ==================
old Lung (linear,     0.79                0.66             0.27
0.10..0.80 of the
whole film's p1..p99)
auto                  0.00                0.67             0.27
new Lung (sigmoid,    0.00                0.73             0.34
C 0.45 / W 0.70 of
the body range)
====================  ==================  ===============  ==================

So the old preset burned out four fifths of the mediastinum and bought the lungs no more
contrast than the auto window (its range included the direct-exposure background, so its
"0.80" sat where the mediastinum starts); the new one clips none of the mediastinum and
still spreads the lungs more than ``auto`` does, which is what a lung preset is for.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydicom.data import get_testdata_file

from radconcord.backend.imaging.load import LoadedImage, load_image
from radconcord.backend.imaging.window import (
    Window,
    display_values,
    percentile_range,
    resolve_window,
)

MEDIASTINUM = (0.42, 0.58, 0.12, 0.62)
LUNGS = ((0.12, 0.36, 0.18, 0.55), (0.62, 0.86, 0.18, 0.55))


@pytest.fixture(scope="module")
def rg1() -> LoadedImage:
    return load_image(get_testdata_file("RG1_UNCR.dcm"))


def _region(image: LoadedImage, box: tuple[float, float, float, float]) -> np.ndarray:
    rows, cols = image.pixels.shape
    x0, x1, y0, y1 = box
    return image.pixels[int(y0 * rows):int(y1 * rows), int(x0 * cols):int(x1 * cols)]


def _shown(image: LoadedImage, window: Window, pixels: np.ndarray) -> np.ndarray:
    """8-bit grey as on screen."""
    return np.rint(display_values(image, window, pixels=pixels) * 255)


def _measure(image: LoadedImage, window: Window) -> dict[str, float]:
    med = _shown(image, window, _region(image, MEDIASTINUM))
    lungs = np.concatenate([_shown(image, window, _region(image, b)).ravel() for b in LUNGS])
    p5, p25, p75, p95 = np.percentile(lungs / 255, [5, 25, 75, 95])
    return {"mediastinum_white": float((med >= 255).mean()),
            "lungs_black": float((lungs <= 0).mean()),
            "lungs_p5_p95": float(p95 - p5), "lungs_iqr": float(p75 - p25)}


def _old_lung(image: LoadedImage) -> Window:
    """The Lung preset before issue 24: linear, brightness 0.10..0.80 of the whole film's
    [p1, p99], MONOCHROME1 (dark = high stored values)."""
    lo, hi = percentile_range(image.pixels, 1.0, 99.0)
    span = hi - lo
    a, b = hi - 0.80 * span, hi - 0.10 * span
    return Window((a + b) / 2, b - a, "LINEAR_EXACT")


def test_the_old_lung_preset_burned_out_the_mediastinum(rg1):
    old = _measure(rg1, _old_lung(rg1))
    auto = _measure(rg1, resolve_window(rg1, "auto"))
    print(f"\nold Lung: {old}\nauto:     {auto}")
    assert old["mediastinum_white"] > 0.7
    # ... and gave the lungs no more contrast than the auto window.
    assert old["lungs_p5_p95"] < auto["lungs_p5_p95"] + 0.01


def test_the_lung_preset_keeps_the_mediastinum_and_spreads_the_lungs(rg1):
    lung = resolve_window(rg1, "lung")
    new = _measure(rg1, lung)
    auto = _measure(rg1, resolve_window(rg1, "auto"))
    old = _measure(rg1, _old_lung(rg1))
    print(f"\nnew Lung (W {lung.width:.0f} / C {lung.center:.0f}, {lung.function}): {new}")
    # None of the mediastinum at white (the old preset: about 79 %).
    assert new["mediastinum_white"] < 0.01 < 0.7 < old["mediastinum_white"]
    # The lungs get more of the grey scale than under auto and the old preset ...
    assert new["lungs_p5_p95"] > auto["lungs_p5_p95"] + 0.04
    assert new["lungs_p5_p95"] > old["lungs_p5_p95"] + 0.04
    assert new["lungs_iqr"] > 1.2 * auto["lungs_iqr"]
    # ... with no lung pixel crushed to black either.
    assert new["lungs_black"] < 0.01


def test_the_mediastinum_stays_readable_under_the_lung_preset(rg1):
    """Not clipped is not enough: the mediastinum keeps some grey range (spine, heart border
    visible), where the old preset left it a flat white."""
    med_new = _shown(rg1, resolve_window(rg1, "lung"), _region(rg1, MEDIASTINUM)) / 255
    med_old = _shown(rg1, _old_lung(rg1), _region(rg1, MEDIASTINUM)) / 255
    spread = lambda v: float(np.percentile(v, 95) - np.percentile(v, 5))  # noqa: E731
    assert spread(med_new) > 0.3 > spread(med_old)
    assert float(np.median(med_new)) < 0.95 <= float(np.median(med_old))
