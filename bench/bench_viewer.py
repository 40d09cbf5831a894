"""Benchmark: how long a window/level change takes to show in the canvas viewer on a 2k film.

The film: the demo study's PA chest CR (RG1_UNCR.dcm from pydicom-data, 15-bit MONOCHROME1)
resampled to 2048 x 2048 and written as a DICOM file, served at full resolution through the
images service's own encoder (``backend.services.annotation.images`` + ``webapp/api/images.py``) by
a
Playwright route, so no app server or database is involved. The viewer
(``webapp/components/viewer``) is mounted in a bare page in Debian's headless chromium (software
canvas, as in the e2e tests) at 1600x1000; then the mouse right-drags in small steps, and for
each step the viewer records:

* latency: from the pointer event's timestamp to the animation frame after the film was
  redrawn (what the rater waits for);
* compute: windowing the 4.2 M values through the lookup table, putImageData and drawImage.

Prints median, 95th percentile and max of both. The issue's bar is 150 ms.

Usage: python bench/bench_viewer.py [--steps 40] [--side 2048] [--scale 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ORIGIN = "http://viewer-bench.local"


def make_film(side: int, folder: Path) -> Path:
    """RG1_UNCR.dcm resampled to ``side`` x ``side``, saved as a DICOM file."""
    import pydicom
    from PIL import Image
    from pydicom.data import get_testdata_file

    ds = pydicom.dcmread(get_testdata_file("RG1_UNCR.dcm"))
    pixels = ds.pixel_array.astype(np.float32)
    resized = np.asarray(Image.fromarray(pixels, mode="F").resize(
        (side, side), Image.Resampling.BILINEAR))
    arr = np.clip(np.rint(resized), 0, 2 ** int(ds.BitsStored) - 1).astype(np.uint16)
    ds.Rows, ds.Columns = side, side
    ds.PixelData = arr.tobytes()
    path = folder / f"film_{side}.dcm"
    ds.save_as(path)
    return path


def body_for(path: Path) -> bytes:
    """The pixel route's response body for the whole film (full resolution)."""
    from radconcord.backend.services.annotation import images as image_service
    from radconcord.webapp.api import images as images_api

    return images_api.encode(image_service._viewer_cached(str(path), "bench", 1 << 15))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--side", type=int, default=2048)
    parser.add_argument("--scale", type=float, default=1.0, help="device pixel ratio")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    viewer = ROOT / "webapp" / "components" / "viewer"
    js = (viewer / "window.js").read_text() + "\n" + (viewer / "viewer.js").read_text()
    css = (viewer / "viewer.css").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        body = body_for(make_film(args.side, Path(tmp)))
    page_html = (f"<html><head><style>{css}</style></head><body style='margin:0'>"
                 "<div id='host' style='width:700px;margin:120px 0 0 40px'></div></body></html>")

    def serve(route) -> None:
        url = route.request.url
        if url.endswith("/viewer.js"):
            route.fulfill(body=js, content_type="text/javascript")
        elif "/pixels" in url:
            route.fulfill(body=body, content_type="application/octet-stream")
        else:
            route.fulfill(body=page_html, content_type="text/html")

    data = {"pair_key": "bench", "images": [
        {"image_id": 1, "caption": "PA (DICOM)", "url": f"{ORIGIN}/images/1/pixels"}]}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000},
                                device_scale_factor=args.scale)
        page.route(f"{ORIGIN}/**", serve)
        page.goto(f"{ORIGIN}/index.html")
        page.evaluate(f"""async () => {{
            const m = await import('{ORIGIN}/viewer.js');
            m.default({{data: {json.dumps(data)}, parentElement: document.getElementById('host')}});
        }}""")
        page.wait_for_function(
            f"() => +document.querySelector('.rcv-pane')?.dataset.dataSide === {args.side}"
            " && document.querySelector('.rcv-root').dataset.ready === 'true'",
            timeout=60_000)
        page.evaluate("""() => {
            window.__wl = [];
            const pane = document.querySelector('.rcv-pane');
            new MutationObserver(() => window.__wl.push({
                latency: +pane.dataset.wlLatencyMs, compute: +pane.dataset.windowMs,
            })).observe(pane, {attributes: true, attributeFilter: ['data-wl-latency-ms']});
        }""")
        box = page.locator(".rcv-pane").bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down(button="right")
        for i in range(args.steps):
            sign = 1 if (i // 10) % 2 == 0 else -1  # back and forth, inside the window
            x, y = x + 6 * sign, y + 2 * sign
            page.mouse.move(x, y)
            page.wait_for_function(f"() => window.__wl.length > {i}", timeout=10_000)
        page.mouse.up(button="right")
        samples = page.evaluate("() => window.__wl")
        browser.close()

    def summary(values: list[float]) -> str:
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
        return (f"median {statistics.median(values):6.1f} ms  p95 {p95:6.1f} ms  "
                f"max {max(values):6.1f} ms")

    print(f"{args.side} x {args.side} film, {len(samples)} W/L drag steps, "
          f"device pixel ratio {args.scale:g} (chromium headless, software canvas)")
    print(f"  event to frame:        {summary([s['latency'] for s in samples])}")
    print(f"  window + put + draw:   {summary([s['compute'] for s in samples])}")


if __name__ == "__main__":
    main()
