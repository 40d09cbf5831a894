"""The canvas viewer's windowing (webapp/components/viewer/window.js) run in node against the
backend's (backend/imaging/window.py + render.py): every grey level must be the same.

Reference: ``np.rint(display_values(image, window, invert=...) * 255)``, exactly what
``backend.imaging.render.render_array`` computes before its downscale. Tolerance: none for
LINEAR, LINEAR_EXACT and VOI LUT tables (the JS rounds every step to float32 as numpy does,
and rounds halves to even as ``np.rint``). SIGMOID: one grey level where a value lands on a
half (numpy's float32 ``exp`` is not correctly rounded; JavaScript has only a float64 one).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from pydicom.data import get_testdata_file

from radconcord.backend.imaging.load import LoadedImage, load_image
from radconcord.backend.imaging.window import Window, display_values, resolve_window

VIEWER = Path(__file__).resolve().parents[2] / "webapp" / "components" / "viewer"

HARNESS = r"""
const fs = require("fs");
const vm = require("vm");
vm.runInThisContext(fs.readFileSync(process.argv[2], "utf8"));
const job = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const out = job.cases.map((c) => {
  if (c.integer) {
    const table = rcvBuildLut(c.win, c.lut, c.flip, c.lo, c.hi);
    return Array.from(table, (rgba) => rgba & 0xff);
  }
  return c.values.map((v) => rcvGrey(v, c.win, c.lut, c.flip));
});
process.stdout.write(JSON.stringify(out));
"""


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node not found: install nodejs (apt-get install -y nodejs) to test the "
                    "browser components")
    return node


def _run(tmp_path: Path, cases: list[dict]) -> list[list[int]]:
    (tmp_path / "harness.js").write_text(HARNESS, encoding="utf-8")
    (tmp_path / "job.json").write_text(json.dumps({"cases": cases}), encoding="utf-8")
    out = subprocess.run([_node(), "harness.js", str(VIEWER / "window.js"), "job.json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def _js_window(window: Window) -> dict:
    if window.lut is not None:
        return {"center": None, "width": None, "function": "LUT"}
    return {"center": window.center, "width": window.width, "function": window.function}


def _js_lut(image: LoadedImage) -> dict | None:
    lut = image.voi_lut
    if lut is None:
        return None
    return {"first_mapped": lut.first_mapped, "bits": lut.bits,
            "table": [float(v) for v in lut.table]}


def _expected(image: LoadedImage, window: Window, values: np.ndarray, invert: bool) -> list[int]:
    shown = display_values(image, window, invert=invert, pixels=values.astype(np.float32))
    return np.rint(shown * 255.0).astype(np.uint8).tolist()


def _same(case: dict, want: list[int], have: list[int]) -> None:
    if case["win"]["function"] != "SIGMOID":
        assert have == want, f"{case['win']} flip={case['flip']}"
        return
    diff = np.abs(np.asarray(have, dtype=int) - np.asarray(want, dtype=int))
    assert diff.max() <= 1 and np.mean(diff == 0) > 0.999, case["win"]


def _windows(image: LoadedImage) -> list[Window]:
    found = [resolve_window(image, p) for p in ("header", "lung", "bone")]
    found.append(resolve_window(image, "manual", center=12345.5, width=777.0))
    found.append(resolve_window(image, "manual", center=15000.0, width=1.0))  # threshold
    found.append(Window(14000.0, 9000.0, "SIGMOID"))
    found.append(Window(14000.0, 0.5, "LINEAR_EXACT"))
    return found


@pytest.mark.parametrize("name", ["RG1_UNCR.dcm", "RG3_UNCR.dcm", "vlut_04.dcm"])
def test_every_grey_level_equals_the_backend(tmp_path, name):
    """Each integer value of the film's range, through each window, with and without the
    invert toggle (RG1/RG3 are MONOCHROME1 CRs, vlut_04 carries a VOI LUT table)."""
    image = load_image(get_testdata_file(name))
    lo, hi = int(image.pixels.min()), int(image.pixels.max())
    values = np.arange(lo, hi + 1, dtype=np.float64)
    cases, expected = [], []
    for window in _windows(image):
        for invert in (False, True):
            cases.append({"integer": True, "lo": lo, "hi": hi, "win": _js_window(window),
                          "lut": _js_lut(image),
                          "flip": image.invert_for_display != invert})
            expected.append(_expected(image, window, values, invert))
    got = _run(tmp_path, cases)
    for case, want, have in zip(cases, expected, got, strict=True):
        _same(case, want, have)


def test_float_values_and_halves_round_like_numpy(tmp_path):
    """Float pixels (a downscaled or float DICOM) and values exactly half-way between grey
    levels: the JS per-pixel path agrees with numpy's float32 arithmetic and np.rint."""
    image = load_image(get_testdata_file("RG1_UNCR.dcm"))
    rng = np.random.default_rng(7)
    values = np.concatenate([
        rng.uniform(-100.0, 40000.0, 4000),
        np.arange(0.0, 30000.0, 0.5)[::97],  # halves, for the VOI LUT's rint too
    ]).astype(np.float32)
    lut_image = load_image(get_testdata_file("vlut_04.dcm"))
    cases, expected = [], []
    for img, window in [(image, resolve_window(image, "header")),
                        (image, resolve_window(image, "lung")),
                        (image, Window(1000.0, 30.0, "SIGMOID")),
                        (lut_image, resolve_window(lut_image, "header"))]:
        src = values if img is image else (values / 100.0).astype(np.float32)
        cases.append({"integer": False, "values": [float(v) for v in src],
                      "win": _js_window(window), "lut": _js_lut(img),
                      "flip": img.invert_for_display})
        expected.append(_expected(img, window, src, False))
    got = _run(tmp_path, cases)
    for case, want, have in zip(cases, expected, got, strict=True):
        _same(case, want, have)
