"""A CT volume on the rating screen, in chromium (issue 25, "A CT viewer a radiologist
accepts").

A synthetic chest phantom (air, body wall, two lungs, mediastinum, spine; 40 axial slices of
96 x 96 at 0.8 x 0.8 mm, 2.5 mm apart: anisotropic) is written as a DICOM series, imported
into its own study through the import service (de-identified, stored as a volume) and
assigned to rater1. On the rating screen the rater sees one plane large with slice k of N and
its position in mm; scrolls with the wheel, ArrowUp/ArrowDown, PageUp/PageDown, Home/End and
the slider; switches to coronal and sagittal, drawn with the voxel spacing (the plane's
height over width is the volume's extent in mm, not in voxels); chooses Lung, Mediastinum
and Bone and drags W/L, one window for every plane; reads the HU under the pointer; and a
prefetched slice shows well under 50 ms (median). With "3 planes" the three are side by side
(at 1920x1080; in the narrower column at 1280x800 the axial plane is large and the other two
stack beside it),
a crosshair in each marks where the other two cut it, scrolling one moves the lines on the
others and a click takes the other two planes to the point clicked. Screenshots at 1280x800
and 1920x1080 go to ``$RADCONCORD_SHOTS`` (default /tmp/shots25).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
from pydicom.uid import generate_uid

from radconcord.backend.datasets.pairs import parse_cases
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.services.transfer.imports import import_cases
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from tests.e2e.conftest import RATER, RATER_PASSWORD, log_in

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("RADCONCORD_SHOTS", "/tmp/shots25"))
STUDY = "CT phantom study"
SOURCE = "ct-generator-zeta"
SLICES, SIDE = 40, 96
PIXEL_MM, SLICE_MM = 0.8, 2.5
Z0 = -120.0
AIR, SOFT, LUNG, BONE = -1000, 40, -850, 700
PANE = ".rcv-pane.rcv-volume"


def phantom_slice(k: int, side: int = SIDE, slices: int = SLICES) -> np.ndarray:
    """HU of axial slice ``k``: air, an elliptic body, two lungs that narrow towards the
    ends of the volume, the mediastinum between them and a vertebra behind."""
    y, x = np.mgrid[0:side, 0:side]
    x = (x - (side - 1) / 2) / (side / 2)
    y = (y - (side - 1) / 2) / (side / 2)
    hu = np.full((side, side), AIR, np.int16)
    hu[(x / 0.9) ** 2 + (y / 0.7) ** 2 < 1] = SOFT
    shrink = 1 - 0.3 * abs(k - slices / 2) / (slices / 2)
    for cx in (-0.4, 0.4):
        hu[((x - cx) / (0.3 * shrink)) ** 2 + ((y + 0.05) / (0.45 * shrink)) ** 2 < 1] = LUNG
    hu[(x ** 2 + (y - 0.5) ** 2) < 0.12 ** 2] = BONE
    return hu


def write_phantom(folder: Path) -> None:
    from tests.hostile_corpus import ct_slice

    folder.mkdir(parents=True)
    study, series, frame = generate_uid(), generate_uid(), generate_uid()
    for k in range(SLICES):
        stored = (phantom_slice(k).astype(np.int32) + 1024).astype(np.uint16)
        ds = ct_slice((-38.0, -38.0, Z0 + SLICE_MM * k), stored, study_uid=study,
                      series_uid=series, frame_uid=frame, spacing=(PIXEL_MM, PIXEL_MM))
        ds.PatientName = "PHANTOM^CHEST"
        ds.save_as(folder / f"slice_{SLICES - k:03d}.dcm", enforce_file_format=True)


def write_big_nifti(path: Path, side: int = 512, slices: int = 300) -> Path:
    """The phantom at a clinical size (512 x 512 x 300, 0.7 mm pixels, 1.25 mm slices) as a
    NIfTI file in HU (int16, scl_slope 1), as CT-RATE ships its volumes."""
    import nibabel as nib

    data = np.empty((side, side, slices), np.int16)
    for k in range(slices):
        data[:, :, k] = phantom_slice(k, side, slices).T
    affine = np.diag([-0.7, -0.7, 1.25, 1.0])
    img = nib.Nifti1Image(data, affine)
    img.header.set_xyzt_units("mm")
    img.header.set_slope_inter(1.0, 0.0)
    nib.save(img, path)
    return path


def _db(data: Path) -> Database:
    return Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)


def _wait_for_rater(data: Path, timeout_s: float = 90) -> None:
    """The app seeds the demo (and rater1) on its first page load."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db = _db(data)
            try:
                # authenticate answers None (it does not raise) until the seed commits
                if auth.authenticate(db, username=RATER, password=RATER_PASSWORD) is not None:
                    return
            finally:
                db.dispose()
        except Exception:  # noqa: BLE001 - the file, its tables or the account may not exist yet
            pass
        assert time.monotonic() < deadline, "the demo accounts were not seeded"
        time.sleep(0.5)


def _import_study(server, browser, src: Path, study: str, image: str) -> str:
    """Import a one-case study whose image is ``image`` (in ``src``) into the running app's
    database and data folder, assign it to rater1; the opaque id of rater1's pair."""
    url, data = server
    context = browser.new_context()
    context.new_page().goto(url)  # the first page load seeds the demo
    try:
        _wait_for_rater(data)  # with the page open: its session runs the seed
    finally:
        context.close()
    (src / "cases.csv").write_text(
        "case_id,reference,candidate,source,image\n"
        f"ct1,No pulmonary nodule.,A 6 mm nodule in the right upper lobe.,{SOURCE},{image}\n",
        encoding="utf-8")
    previous = os.environ.get("RADCONCORD_DATA_DIR")
    os.environ["RADCONCORD_DATA_DIR"] = str(data)  # the app's data folder: the volume goes there
    db = _db(data)
    try:
        admin = Actor.system()
        import_cases(db, admin, study_name=study, cases=parse_cases(src / "cases.csv"))
        assign_raters(db, admin, study_name=study, rater_usernames=[RATER],
                      raters_per_pair=1, seed=1)
        actor = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        (item,) = rating.rater_queue(db, actor, study_name=study)
        return item.opaque_id
    finally:
        db.dispose()
        if previous is None:
            os.environ.pop("RADCONCORD_DATA_DIR", None)
        else:
            os.environ["RADCONCORD_DATA_DIR"] = previous


@pytest.fixture(scope="module")
def ct_pair(server, browser, tmp_path_factory) -> str:
    """The opaque id of rater1's pair in a study of one CT series, imported now."""
    src = tmp_path_factory.mktemp("ct-input")
    write_phantom(src / "chest_ct")
    return _import_study(server, browser, src, STUDY, "chest_ct")


def _page(browser, url, width, height, opaque_id):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, RATER, RATER_PASSWORD)
    page.get_by_text("Candidate report").wait_for()
    deadline = time.monotonic() + 30
    while not any(c["name"] == "radconcord_session" for c in context.cookies()):
        assert time.monotonic() < deadline, "the server never set the session cookie"
        time.sleep(0.1)
    page.goto(f"{url}/?pair={opaque_id}")
    page.locator(f".rcv-root[data-pair-key='{opaque_id}'][data-ready='true']").wait_for()
    return context, page


def _state(page) -> dict:
    return page.evaluate(f"""() => {{
        const p = document.querySelector({PANE!r});
        const d = p.dataset;
        return {{plane: d.plane, slice: +d.slice, count: +d.sliceCount, shown: d.shownSlice,
                 position: +d.positionMm, center: +d.center, width: +d.width,
                 preset: d.preset, hu: d.hu === undefined ? null : +d.hu,
                 sliceMs: d.sliceMs === undefined ? null : +d.sliceMs,
                 cached: +(d.cached || 0),
                 drawn: JSON.parse(d.drawn), box: p.getBoundingClientRect().toJSON(),
                 text: p.querySelector('.rcv-ov-tr').textContent,
                 huText: p.querySelector('.rcv-ov-hu').textContent}};
    }}""")


def _wait_shown(page, plane: str, index: int) -> dict:
    page.wait_for_function(
        f"() => {{ const p = document.querySelector({PANE!r});"
        f" return p && p.dataset.shownSlice === '{plane}:{index}'; }}")
    return _state(page)


def _point(state: dict, fx: float, fy: float) -> tuple[float, float]:
    d, b = state["drawn"], state["box"]
    return b["x"] + d["x"] + fx * d["w"], b["y"] + d["y"] + fy * d["h"]


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_a_ct_volume_is_read_slice_by_slice_in_three_planes(server, browser, ct_pair):
    url, _ = server
    context, page = _page(browser, url, 1280, 800, ct_pair)
    try:
        mid = SLICES // 2
        state = _wait_shown(page, "axial", mid)
        assert (state["plane"], state["count"]) == ("axial", SLICES)
        assert state["text"] == f"Axial {mid + 1} / {SLICES} · {Z0 + SLICE_MM * mid:.1f} mm"
        assert state["position"] == pytest.approx(Z0 + SLICE_MM * mid)
        # One plane, large: the viewer's only pane, its drawn slice square (0.8 x 0.8 mm).
        assert page.locator(".rcv-pane").count() == 1
        assert state["drawn"]["w"] == pytest.approx(state["drawn"]["h"], rel=0.01)
        assert state["drawn"]["h"] > 0.5 * 800
        # Prefetch: the slices within 8 of the one shown, not the whole volume.
        page.wait_for_function(
            f"() => document.querySelector({PANE!r}).dataset.prefetching === '0'")
        assert _state(page)["cached"] == 1 + 2 * 8 < SLICES
        # Blinding as for films: the candidate's source is nowhere on the rater's screen.
        assert SOURCE not in page.content()
        _shot(page, "ct-axial-1280x800")

        # The wheel: one notch, one slice, towards the feet or the head.
        page.mouse.move(*_point(state, 0.5, 0.5))
        page.mouse.wheel(0, 100)
        state = _wait_shown(page, "axial", mid + 1)
        assert state["position"] == pytest.approx(Z0 + SLICE_MM * (mid + 1))
        page.mouse.wheel(0, -300)
        _wait_shown(page, "axial", mid - 2)
        # Keys (the viewer has the focus after a click on the image).
        page.mouse.click(*_point(state, 0.5, 0.5))
        for key, expected in (("ArrowDown", mid - 1), ("ArrowUp", mid - 2),
                              ("PageDown", mid + 2), ("PageUp", mid - 2), ("End", SLICES - 1),
                              ("Home", 0)):
            page.keyboard.press(key)
            state = _wait_shown(page, "axial", expected)
        assert state["text"].startswith(f"Axial 1 / {SLICES} · ")
        # The slider: a click three quarters along it.
        slider = page.locator(f"{PANE} input.rcv-slider").bounding_box()
        page.mouse.click(slider["x"] + 0.75 * slider["width"], slider["y"] + slider["height"] / 2)
        page.wait_for_function(
            f"() => Math.abs(+document.querySelector({PANE!r}).dataset.slice - 29) <= 1")
        k = _state(page)["slice"]
        state = _wait_shown(page, "axial", k)

        # Speed: neighbours are prefetched; a prefetched slice shows well under 50 ms.
        page.mouse.click(*_point(state, 0.5, 0.5))
        page.wait_for_function(f"() => +document.querySelector({PANE!r}).dataset.cached >= 12")
        times = []
        for i in range(1, 7):
            page.keyboard.press("ArrowDown")
            times.append(_wait_shown(page, "axial", k + i)["sliceMs"])
            page.wait_for_function(
                f"() => +document.querySelector({PANE!r}).dataset.cached >= 12")
        print(f"prefetched slice to screen: median {statistics.median(times):.1f} ms, "
              f"max {max(times):.1f} ms over {len(times)}")
        assert statistics.median(times) < 50

        # HU under the pointer, on the mid slice.
        page.keyboard.press("Home")
        _wait_shown(page, "axial", 0)
        for _ in range(mid):
            page.keyboard.press("ArrowDown")
        state = _wait_shown(page, "axial", mid)
        for (fx, fy), hu in (((0.7, 0.475), LUNG), ((0.5, 0.76), BONE), ((0.5, 0.3), SOFT),
                             ((0.03, 0.03), AIR)):
            page.mouse.move(*_point(state, fx, fy))
            page.wait_for_function(
                f"() => +document.querySelector({PANE!r}).dataset.hu === {hu}")
            assert _state(page)["huText"].startswith(f"{hu} HU")

        # CT presets.
        for name, (center, width) in (("Lung", (-600, 1500)), ("Mediastinum", (40, 400)),
                                      ("Bone", (400, 1800))):
            page.get_by_role("radio", name=name, exact=True).click()
            page.wait_for_function(
                f"() => +document.querySelector({PANE!r}).dataset.center === {center}"
                f" && +document.querySelector({PANE!r}).dataset.width === {width}")
        page.get_by_role("radio", name="Lung", exact=True).click()
        _shot(page, "ct-axial-lung-1280x800")
        # Right-drag W/L: one window for every plane.
        state = _state(page)
        x, y = _point(state, 0.5, 0.5)
        page.mouse.move(x, y)
        page.mouse.down(button="right")
        page.mouse.move(x + 60, y + 30, steps=5)
        page.mouse.up(button="right")
        dragged = _state(page)
        assert dragged["preset"] == "manual"
        assert (dragged["center"], dragged["width"]) != (-600, 1500)

        # Coronal and sagittal, drawn with the spacing: height / width in mm, not voxels.
        for plane, label, index in (("coronal", "Coronal", SIDE // 2),
                                    ("sagittal", "Sagittal", SIDE // 2)):
            page.get_by_role("radio", name=label, exact=True).click()
            state = _wait_shown(page, plane, index)
            d = state["drawn"]
            assert d["h"] / d["w"] == pytest.approx(SLICES * SLICE_MM / (SIDE * PIXEL_MM),
                                                    rel=0.02)
            assert (state["center"], state["width"]) == (dragged["center"], dragged["width"])
            assert state["text"].startswith(f"{label} {index + 1} / {SIDE} · ")
            page.mouse.move(*_point(state, 0.5, 0.5))
            page.mouse.wheel(0, 200)
            state = _wait_shown(page, plane, index + 2)
            _shot(page, f"ct-{plane}-1280x800")
        # The head is up on a reformat: the top row is the last slice (narrowest lungs).
        page.get_by_role("radio", name="Axial", exact=True).click()
        _wait_shown(page, "axial", _state(page)["slice"])

        # "3 planes" in this narrow column: axial large, coronal and sagittal stacked beside
        # it (side by side, each would be about 170 px wide).
        page.get_by_role("button", name="3 planes").click()
        page.locator(".rcv-root[data-ready='true'] .rcv-pane.rcv-linked").nth(2).wait_for()
        page.wait_for_function(
            "() => document.querySelector('.rcv-panes').dataset.layout === 'stack'")
        for plane in ("axial", "coronal", "sagittal"):
            page.wait_for_function(
                f"() => {{ const p = document.querySelector({_linked(plane)!r});"
                f" return p && p.dataset.crosshair; }}")
        a, c, g = (page.locator(_linked(p)).bounding_box()
                   for p in ("axial", "coronal", "sagittal"))
        assert c["x"] == pytest.approx(g["x"], abs=1) and c["x"] >= a["x"] + a["width"]
        assert g["y"] >= c["y"] + c["height"]
        assert a["width"] > 1.5 * c["width"] and a["height"] > 1.8 * c["height"]
        assert a["height"] == pytest.approx(c["height"] + g["height"], abs=6)
        _shot(page, "ct-three-planes-1280x800")
        page.get_by_role("button", name="3 planes").click()
        page.locator(f".rcv-root[data-ready='true'] {PANE}").wait_for()
    finally:
        context.close()

    context, page = _page(browser, url, 1920, 1080, ct_pair)
    try:
        state = _wait_shown(page, "axial", SLICES // 2)
        assert state["drawn"]["h"] > 0.5 * 1080
        page.get_by_role("radio", name="Mediastinum", exact=True).click()
        page.mouse.move(*_point(state, 0.7, 0.475))
        page.wait_for_function(f"() => +document.querySelector({PANE!r}).dataset.hu === {LUNG}")
        _shot(page, "ct-axial-1920x1080")
        page.get_by_role("radio", name="Coronal", exact=True).click()
        _wait_shown(page, "coronal", SIDE // 2)
        _shot(page, "ct-coronal-1920x1080")

        # Three planes side by side, linked by a crosshair; the window stays.
        page.get_by_role("button", name="3 planes").click()
        page.locator(".rcv-root[data-ready='true'] .rcv-pane.rcv-linked").nth(2).wait_for()
        assert page.evaluate(LINKED + ".map(p => p.dataset.linkedPlane)") == [
            "axial", "coronal", "sagittal"]
        # Wide enough here for three side by side.
        assert page.evaluate("() => document.querySelector('.rcv-panes').dataset.layout") == "row"
        for plane in ("axial", "coronal", "sagittal"):
            page.wait_for_function(
                f"() => {{ const p = document.querySelector({_linked(plane)!r});"
                f" return p && p.dataset.crosshair && +p.dataset.center === 40; }}")
        # The axial plane is cut by the middle coronal and sagittal planes...
        assert _crosshair(page, "axial")[:2] == (SIDE // 2, SIDE // 2)
        # ...and cuts the coronal and sagittal ones at its slice (head up: row S-1-k).
        assert _crosshair(page, "coronal")[:2] == (SIDE // 2, SLICES - 1 - SLICES // 2)
        # Scrolling the axial plane moves the line on the other two.
        axial = page.locator(_linked("axial")).bounding_box()
        page.mouse.move(axial["x"] + axial["width"] / 2, axial["y"] + axial["height"] / 3)
        page.mouse.wheel(0, 300)
        page.wait_for_function(
            f"() => JSON.parse(document.querySelector({_linked('sagittal')!r})"
            f".dataset.crosshair).row === {SLICES - 1 - (SLICES // 2 + 3)}")
        # A click on the axial plane (a lung) takes the coronal and sagittal planes there.
        drawn = page.evaluate(f"() => JSON.parse(document.querySelector("
                              f"{_linked('axial')!r}).dataset.drawn)")
        page.mouse.click(axial["x"] + drawn["x"] + 0.7 * drawn["w"],
                         axial["y"] + drawn["y"] + 0.475 * drawn["h"])
        col, row = int(0.7 * SIDE), int(0.475 * SIDE)
        page.wait_for_function(
            f"() => document.querySelector({_linked('sagittal')!r}).dataset.shownSlice"
            f" === 'sagittal:{col}' && document.querySelector({_linked('coronal')!r})"
            f".dataset.shownSlice === 'coronal:{row}'")
        assert _crosshair(page, "axial")[:2] == (col, row)
        _shot(page, "ct-three-planes-1920x1080")
        page.get_by_role("button", name="3 planes").click()
        page.locator(f".rcv-root[data-ready='true'] {PANE}").wait_for()
        assert page.locator(".rcv-pane").count() == 1
    finally:
        context.close()


LINKED = "[...document.querySelectorAll('.rcv-pane.rcv-linked')]"


def _linked(plane: str) -> str:
    return f".rcv-pane.rcv-linked[data-linked-plane='{plane}']"


def _crosshair(page, plane: str) -> tuple[int, int, float, float]:
    c = page.evaluate(f"() => JSON.parse(document.querySelector({_linked(plane)!r})"
                      ".dataset.crosshair)")
    return c["col"], c["row"], c["x"], c["y"]


def test_a_clinical_size_volume_shows_its_first_slice_within_a_second(server, browser,
                                                                       tmp_path_factory):
    """512 x 512 x 300 (a NIfTI in HU): the first slice is on screen under 1 s after the
    viewer asks for it, a prefetched slice under 50 ms (median), and however far the rater
    scrolls the browser keeps at most 48 planes (a window, not the volume's 300)."""
    src = tmp_path_factory.mktemp("ct-big")
    write_big_nifti(src / "chest.nii.gz")
    opaque_id = _import_study(server, browser, src, "CT clinical size", "chest.nii.gz")
    url, _ = server
    context, page = _page(browser, url, 1280, 800, opaque_id)
    try:
        state = _wait_shown(page, "axial", 150)
        assert (state["count"], state["text"].split(" · ")[0]) == (300, "Axial 151 / 300")
        page.wait_for_function(f"() => document.querySelector({PANE!r}).dataset.firstMs")
        first = float(page.evaluate(f"() => document.querySelector({PANE!r}).dataset.firstMs"))
        print(f"512x512x300: first slice on screen {first:.0f} ms after the request")
        assert first < 1000
        page.mouse.click(*_point(state, 0.5, 0.5))
        page.wait_for_function(
            f"() => document.querySelector({PANE!r}).dataset.prefetching === '0'")
        times = []
        for i in range(1, 9):
            page.keyboard.press("ArrowDown")
            times.append(_wait_shown(page, "axial", 150 + i)["sliceMs"])
            page.wait_for_function(
                f"() => document.querySelector({PANE!r}).dataset.prefetching === '0'")
        print(f"512x512: prefetched slice to screen: median {statistics.median(times):.1f} ms, "
              f"max {max(times):.1f} ms")
        assert statistics.median(times) < 50
        # Far through the volume: PageDown jumps 30 slices, each prefetching 16 more.
        for n in range(1, 5):
            page.keyboard.press("PageDown")
            _wait_shown(page, "axial", 158 + 30 * n)
            page.wait_for_function(
                f"() => document.querySelector({PANE!r}).dataset.prefetching === '0'")
        assert _state(page)["cached"] == 48
        _shot(page, "ct-512-1280x800")
    finally:
        context.close()
