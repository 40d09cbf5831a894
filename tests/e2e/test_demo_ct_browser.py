"""A first start shows a CT volume (issue 25): the demo CT study, seeded beside the chest demo.

The app is started on a fresh data folder; its first page load seeds the demo, the chest
study and "Demo study (CT)" (a synthetic chest phantom imported as a NIfTI volume). rater1
logs in, opens My studies, sees both studies (the chest one first), opens the CT one with its
Start button, and the rating screen shows the CT viewer: "Axial 21 / 40" and its position in
mm. Scrolled up to the nodule's slice, the pointer reads soft tissue on the nodule and lung
beside it. Screenshots at 1280x800 go to ``$RADCONCORD_SHOTS`` (default /tmp/shots25).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from radconcord.backend.datasets import demo_ct
from radconcord.backend.services.accounts.seed import DEMO_CT_STUDY, DEMO_STUDY
from tests.e2e.conftest import RATER, RATER_PASSWORD, log_in

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("RADCONCORD_SHOTS", "/tmp/shots25"))
PANE = ".rcv-pane.rcv-volume"
# Streamlit's class for the button keyed "open-Demo study (CT)" (my_studies.py).
CT_START = ".st-key-open-Demo-study--CT- button"


def _pane(page) -> dict:
    return page.evaluate(f"""() => {{
        const p = document.querySelector({PANE!r});
        const d = p.dataset;
        return {{slice: +d.slice, count: +d.sliceCount, shown: d.shownSlice,
                 position: +d.positionMm, hu: d.hu === undefined ? null : +d.hu,
                 drawn: JSON.parse(d.drawn), box: p.getBoundingClientRect().toJSON(),
                 text: p.querySelector('.rcv-ov-tr').textContent}};
    }}""")


def _wait_shown(page, index: int) -> dict:
    page.wait_for_function(
        f"() => {{ const p = document.querySelector({PANE!r});"
        f" return p && p.dataset.shownSlice === 'axial:{index}'; }}")
    return _pane(page)


def _voxel_point(state: dict, row: int, col: int) -> tuple[float, float]:
    """The screen point at the centre of voxel (row, col) of the axial plane shown."""
    d, b = state["drawn"], state["box"]
    _, rows, cols = demo_ct.SHAPE
    return (b["x"] + d["x"] + (col + 0.5) / cols * d["w"],
            b["y"] + d["y"] + (row + 0.5) / rows * d["h"])


def test_a_first_start_opens_the_demo_ct_study_from_my_studies(server, browser):
    url, _ = server
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        page.goto(url)  # the first page load seeds both demo studies
        log_in(page, RATER, RATER_PASSWORD)
        deadline = time.monotonic() + 30
        while not any(c["name"] == "radconcord_session" for c in context.cookies()):
            assert time.monotonic() < deadline, "the server never set the session cookie"
            time.sleep(0.1)
        page.goto(f"{url}/my-studies")
        page.get_by_role("heading", name="My studies").wait_for()
        page.locator(CT_START).wait_for()
        names = page.locator("[data-testid='stMarkdownContainer'] strong").all_inner_texts()
        assert [n for n in names if n.startswith("Demo")] == [DEMO_STUDY, DEMO_CT_STUDY]
        assert page.get_by_text("0 of 3 done").count() == 1
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "ct-demo-my-studies-1280x800.png"))

        page.locator(CT_START).click()
        page.locator(f".rcv-root[data-ready='true'] {PANE}").wait_for()
        slices = demo_ct.SHAPE[0]
        mid = slices // 2
        state = _wait_shown(page, mid)
        assert state["count"] == slices
        z = demo_ct.Z0_MM + demo_ct.SPACING_MM[0] * mid
        assert state["text"] == f"Axial {mid + 1} / {slices} · {z:.1f} mm"
        assert state["position"] == pytest.approx(z)
        assert page.url.startswith(f"{url}/rate")
        # Blinding: no generator's name on the rater's screen.
        content = page.content()
        assert not [s for s in demo_ct.CANDIDATES if s in content]

        # Up to the nodule's slice (ArrowDown goes one slice up the body) and onto it.
        k, row, col = demo_ct.NODULE_CENTRE
        page.mouse.click(*_voxel_point(state, 48, 48))
        for _ in range(k - mid):
            page.keyboard.press("ArrowDown")
        state = _wait_shown(page, k)
        assert state["text"].startswith(f"Axial {k + 1} / {slices} · ")
        for (r, c), hu in (((row, col), demo_ct.SOFT), ((row, col - 5), demo_ct.LUNG)):
            page.mouse.move(*_voxel_point(state, r, c))
            page.wait_for_function(
                f"() => +document.querySelector({PANE!r}).dataset.hu === {hu}")
        page.get_by_role("radio", name="Lung", exact=True).click()
        page.mouse.move(*_voxel_point(state, row, col))
        page.screenshot(path=str(SHOTS / "ct-demo-nodule-1280x800.png"))
    finally:
        context.close()
