"""Benchmark: the CT viewer on a clinical-size volume (512 x 512 x 300) in headless chromium.

The volume: the demo CT phantom (``backend/datasets/demo_ct.py``) resampled to 300 slices of
512 x 512 (0.7 mm pixels, 1.25 mm apart), written as a NIfTI file in HU, imported into a
throw-away study in a temporary data folder through the real import service (classified,
de-identified, stored memory-mapped). Planes are served by the images service's own
``volume_plane`` and the route's encoder (``webapp/api/images.py``) from a Playwright route,
so no app server is involved (as ``bench/bench_viewer.py`` does for a film). The viewer
(``webapp/components/viewer``) is mounted in a bare page in Debian's headless chromium
(software canvas, as in the e2e tests) at 1280x800; then:

* first slice: from the viewer's first plane request to the animation frame after the
  middle slice was drawn (the pane's ``data-first-ms``), and wall time from mounting;
* next slice, once prefetched: ArrowDown ``--steps`` times, waiting each time for the
  prefetch around the new slice to finish, the time from the key to the frame after the
  slice was drawn (``data-slice-ms``): median, p95, max;
* a jump to a slice that is not prefetched (End, then Home): the same measure;
* planes kept in the browser (``data-cached``) after PageDown through the volume: bounded.

Prints one JSON object with the numbers and the goals (first slice < 1 s, next slice < 50 ms
median) and whether each is met.

Usage: python bench/bench_ct_viewer.py [--slices 300] [--side 512] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ORIGIN = "http://ct-viewer-bench.local"
PANE = ".rcv-pane.rcv-volume"
GOALS = {"first_slice_ms": 1000.0, "next_slice_median_ms": 50.0}


def write_volume(path: Path, side: int, slices: int) -> Path:
    """The demo phantom, nearest-neighbour resampled to ``slices`` x ``side`` x ``side``,
    as a NIfTI file (int16 HU, 0.7 mm pixels, 1.25 mm slices, radiological RAS affine)."""
    import nibabel as nib

    from radconcord.backend.datasets import demo_ct

    small = demo_ct.phantom_volume()
    zs, ys, xs = small.shape
    zi = (np.arange(slices) * zs // slices)
    yi = (np.arange(side) * ys // side)
    xi = (np.arange(side) * xs // side)
    volume = small[zi][:, yi][:, :, xi]  # (z, y, x)
    affine = np.diag([-0.7, -0.7, 1.25, 1.0])
    img = nib.Nifti1Image(np.ascontiguousarray(volume.transpose(2, 1, 0)), affine)
    img.header.set_xyzt_units("mm")
    img.header.set_slope_inter(1.0, 0.0)
    nib.save(img, path)
    return path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slices", type=int, default=300)
    parser.add_argument("--side", type=int, default=512)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="ct-viewer-bench-") as tmp:
        tmp_path = Path(tmp)
        os.environ["RADCONCORD_DATA_DIR"] = str(tmp_path / "data")
        from sqlalchemy import select

        from radconcord.backend.services.annotation import images as image_service
        from radconcord.backend.services.transfer.imports import import_cases
        from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
        from radconcord.db.models import Image
        from radconcord.db.session import Database
        from radconcord.webapp.api import images as images_api

        db = Database(f"sqlite:///{tmp_path / 'bench.db'}")
        admin = Actor.system()
        nifti = write_volume(tmp_path / "ct.nii", args.side, args.slices)
        started = time.perf_counter()
        import_cases(db, admin, study_name="bench", cases=[CaseInput(
            case_id="ct", reference="Nodule.", images=[ImageInput(path=nifti)],
            candidates=[CandidateInput(text="No nodule.", source="gen")])])
        import_s = time.perf_counter() - started
        with db.read() as s:
            image_id = s.scalar(select(Image.id).where(Image.kind == "volume"))
        served: list[float] = []

        def plane_body(url: str) -> bytes:
            from urllib.parse import parse_qs, urlparse

            query = parse_qs(urlparse(url).query)
            index = query.get("index")
            t0 = time.perf_counter()
            pixels = image_service.volume_plane(
                db, admin, image_id=image_id, plane=query["plane"][0],
                index=int(index[0]) if index else None)
            body = images_api.encode(pixels)
            served.append((time.perf_counter() - t0) * 1000)
            return body

        viewer = ROOT / "webapp" / "components" / "viewer"
        js = (viewer / "window.js").read_text() + "\n" + (viewer / "viewer.js").read_text()
        css = (viewer / "viewer.css").read_text()
        page_html = (f"<html><head><style>{css}</style></head><body style='margin:0'>"
                     "<div id='host' style='width:760px;margin:20px 0 0 20px'></div>"
                     "</body></html>")

        def serve(route) -> None:
            url = route.request.url
            if url.endswith("/viewer.js"):
                route.fulfill(body=js, content_type="text/javascript")
            elif "/plane" in url:
                route.fulfill(body=plane_body(url), content_type="application/octet-stream")
            else:
                route.fulfill(body=page_html, content_type="text/html")

        data = {"pair_key": "bench", "images": [
            {"image_id": image_id, "volume": True, "caption": "Volume",
             "url": f"{ORIGIN}/images/{image_id}/plane"}]}
        mid = args.slices // 2
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(60_000)
            page.route(f"{ORIGIN}/**", serve)
            page.goto(f"{ORIGIN}/index.html")
            mounted = time.perf_counter()
            page.evaluate(f"""async () => {{
                const m = await import('{ORIGIN}/viewer.js');
                m.default({{data: {json.dumps(data)},
                           parentElement: document.getElementById('host')}});
            }}""")
            page.wait_for_function(
                f"() => document.querySelector({PANE!r})?.dataset.shownSlice === 'axial:{mid}'"
                f" && document.querySelector({PANE!r}).dataset.firstMs")
            wall_first_ms = (time.perf_counter() - mounted) * 1000
            first_ms = float(page.evaluate(
                f"() => document.querySelector({PANE!r}).dataset.firstMs"))
            text = page.evaluate(
                f"() => document.querySelector({PANE!r} + ' .rcv-ov-tr').textContent")

            def wait_prefetched() -> None:
                page.wait_for_function(
                    f"() => document.querySelector({PANE!r}).dataset.prefetching === '0'")

            def shown(index: int) -> float:
                page.wait_for_function(
                    f"() => document.querySelector({PANE!r}).dataset.shownSlice"
                    f" === 'axial:{index}'")
                # data-slice-ms is set in the frame after the slice was drawn.
                page.wait_for_function(
                    f"() => document.querySelector({PANE!r}).dataset.sliceMs !== undefined")
                return float(page.evaluate(
                    f"() => document.querySelector({PANE!r}).dataset.sliceMs"))

            box = page.locator(PANE).bounding_box()
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            wait_prefetched()
            steps = min(args.steps, args.slices - mid - 1)
            next_ms = []
            for i in range(1, steps + 1):
                page.evaluate(f"() => delete document.querySelector({PANE!r}).dataset.sliceMs")
                page.keyboard.press("ArrowDown")
                next_ms.append(shown(mid + i))
                wait_prefetched()
            cold_ms = []
            for key, index in (("End", args.slices - 1), ("Home", 0)):
                page.evaluate(f"() => delete document.querySelector({PANE!r}).dataset.sliceMs")
                page.keyboard.press(key)
                cold_ms.append(shown(index))
                wait_prefetched()
            kept = []
            for _ in range(args.slices // 30 + 1):
                page.keyboard.press("PageDown")
                wait_prefetched()
                kept.append(int(page.evaluate(
                    f"() => +document.querySelector({PANE!r}).dataset.cached")))
            browser.close()
        db.dispose()

    result = {
        "volume": {"shape": [args.slices, args.side, args.side],
                   "spacing_mm": [1.25, 0.7, 0.7], "import_s": round(import_s, 2)},
        "browser": "chromium headless, software canvas, 1280x800, planes from a Playwright "
                   "route (images service + RCPX encoder, no HTTP server)",
        "first_slice_ms": first_ms,
        "first_slice_wall_ms_from_mount": round(wall_first_ms, 1),
        "first_overlay": text,
        "next_slice_prefetched_ms": {"n": len(next_ms),
                                     "median": round(statistics.median(next_ms), 1),
                                     "p95": round(percentile(next_ms, 0.95), 1),
                                     "max": round(max(next_ms), 1)},
        "jump_not_prefetched_ms": [round(v, 1) for v in cold_ms],
        "plane_served_ms": {"n": len(served), "median": round(statistics.median(served), 2),
                            "p95": round(percentile(served, 0.95), 2)},
        "planes_kept_max": max(kept),
        "planes_kept_after_scrolling": kept[-1],
        "goals": {
            "first_slice_ms": {"goal": f"< {GOALS['first_slice_ms']:.0f}",
                               "met": first_ms < GOALS["first_slice_ms"]},
            "next_slice_median_ms": {"goal": f"< {GOALS['next_slice_median_ms']:.0f}",
                                     "met": statistics.median(next_ms)
                                     < GOALS["next_slice_median_ms"]},
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
