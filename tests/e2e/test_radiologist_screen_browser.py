"""The radiologist's screen (issue 24) in chromium at 1280x800 and 1920x1080.

- Focus: a scripted rater opens pairs and types the counts and Ctrl+Enter; the first grid
  cell has the focus on every pair (0 Tabs), and V moves between the film viewer and the
  grid. Keys and seconds per pair are printed (``pytest -s``).
- A layout that does not move: the grid's top edge between pairs (film and no film) stays
  within 10 px, and the all-zero question takes Mark done's place (nothing moves).
- Film size: at 1280x800 the film takes at least half the window's width and the height
  under the header; the split between film and reports is dragged and remembered for the
  rater; full screen keeps the grid reachable in a panel beside the film.
- Window/level: the demo's real CR (RG1_UNCR, header W 30000 / C 15000) opens on the auto
  window, W/L are whole numbers on a dark plate, "100%" is one image pixel per screen pixel.
- Error records: at 1280x800 the derived count grid is above the fold.

Screenshots go to ``$RADCONCORD_SHOTS`` (default /tmp/shots24d).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import (
    RATER,
    RATER_PASSWORD,
    demo_in_error_records,
    log_in,
    start_server,
    wait_for_cookie,
)
from tests.e2e.test_viewer_browser import _pairs

pytestmark = pytest.mark.browser

RATER2, RATER2_PASSWORD = "rater2", "radconcord-rater2"
SHOTS = Path(os.environ.get("RADCONCORD_SHOTS", "/tmp/shots24d"))
SIZES = [(1280, 800), (1920, 1080)]
FIRST_CELL = "False prediction of finding (clinically significant)"

# The label of the focused grid cell of ``pair`` (the grid lives in a shadow root), or null.
FOCUSED_CELL = """(pair) => {
    const a = document.activeElement;
    const inner = a && a.shadowRoot ? a.shadowRoot.activeElement : null;
    const grid = inner && inner.closest ? inner.closest('.rc-grid') : null;
    return grid && grid.dataset.pair === pair ? inner.getAttribute('aria-label') : null;
}"""
VIEWER_FOCUSED = """() => Boolean(document.activeElement
    && document.activeElement.classList.contains('rcv-root'))"""


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def _page(browser, url, size, user=RATER, password=RATER_PASSWORD, path="/"):
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{url}{path}")
    log_in(page, user, password)
    wait_for_cookie(page)
    try:
        page.locator(".rc-grid").first.wait_for()
    except Exception:
        _shot(page, "failed_open")
        raise
    return context, page


def _pair_in_url(page) -> str:
    return page.evaluate("() => new URL(location.href).searchParams.get('pair')")


def _grid(page, pair):
    return page.locator(f'.rc-grid[data-pair="{pair}"]')


def _wait_pair_change(page, pair: str) -> str:
    page.wait_for_function(
        f"() => {{ const p = new URL(location.href).searchParams.get('pair');"
        f" return p && p !== '{pair}'; }}")
    nxt = _pair_in_url(page)
    _grid(page, nxt).wait_for()
    return nxt


@pytest.mark.parametrize("size,user,password", [
    (SIZES[0], RATER, RATER_PASSWORD), (SIZES[1], RATER2, RATER2_PASSWORD)])
def test_a_scripted_rater_types_counts_and_ctrl_enter_with_no_tab(server, browser, size, user,
                                                                  password):
    """Six pairs, each: one count typed (one key) and Ctrl+Enter. Any Tab needed to reach
    the grid is counted (and fails the test); keys and seconds per pair are printed."""
    url, _ = server
    context, page = _page(browser, url, size, user, password)
    try:
        rows = []
        pair = _pair_in_url(page)
        _grid(page, pair).wait_for()
        for _ in range(6):
            started = time.monotonic()
            tabs = 0
            # The grid mounts and takes the focus a moment after it is drawn.
            deadline = time.monotonic() + 3
            while page.evaluate(FOCUSED_CELL, pair) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            while page.evaluate(FOCUSED_CELL, pair) is None and tabs < 40:
                page.keyboard.press("Tab")
                tabs += 1
            focused = page.evaluate(FOCUSED_CELL, pair)
            page.keyboard.press("1")
            _grid(page, pair).locator(".rc-state").get_by_text("Saved").wait_for()
            page.keyboard.press("Control+Enter")
            nxt = _wait_pair_change(page, pair)
            rows.append({"pair": pair, "tabs": tabs, "keys": tabs + 2, "focused": focused,
                         "seconds": time.monotonic() - started})
            pair = nxt
        _shot(page, f"rate_next_pair_focus_{size[0]}x{size[1]}")
        print(f"\nscripted rater at {size[0]}x{size[1]}, {len(rows)} pairs, one count each:")
        for r in rows:
            print(f"  tabs {r['tabs']:2d}  keys {r['keys']:2d}  {r['seconds']:.2f} s  "
                  f"focus on: {r['focused']}")
        print(f"  keys per pair {statistics.mean(r['keys'] for r in rows):.2f} (ideal 2: the "
              f"count + Ctrl+Enter), Tabs per pair {statistics.mean(r['tabs'] for r in rows):.2f}"
              f", seconds per pair median {statistics.median(r['seconds'] for r in rows):.2f}")
        assert [r["tabs"] for r in rows] == [0] * len(rows)
        assert all(r["focused"] == FIRST_CELL for r in rows), rows
    finally:
        context.close()


def test_v_moves_between_the_film_and_the_grid(server, browser):
    url, data = server
    context, page = _page(browser, url, SIZES[0])
    try:
        pair = next(oid for oid, fmts, _ in _pairs(data) if fmts == ["dicom"])
        page.goto(f"{url}/?pair={pair}")
        page.locator(f".rcv-root[data-pair-key='{pair}'][data-ready='true']").wait_for()
        page.wait_for_function(f"() => ({FOCUSED_CELL})('{pair}') !== null")
        page.keyboard.press("ArrowDown")  # a cell other than the first
        page.keyboard.press("v")
        page.wait_for_function(VIEWER_FOCUSED)
        page.keyboard.press("v")
        page.wait_for_function(f"() => ({FOCUSED_CELL})('{pair}') !== null")
        # Back on the cell the rater left, not the first one.
        assert page.evaluate(FOCUSED_CELL, pair) == "Omission of finding (clinically significant)"
        # A click on a report leaves the focus nowhere: a digit still goes to the grid.
        page.locator(".rc-report").first.click()
        page.keyboard.press("2")
        cell = _grid(page, pair).get_by_label("Omission of finding (clinically significant)",
                                              exact=True)
        expect(cell).to_have_value("2")
        _grid(page, pair).locator(".rc-state").get_by_text("Saved").wait_for()
    finally:
        context.close()


@pytest.mark.parametrize("size", SIZES)
def test_the_grid_stays_put_between_pairs_and_the_zero_question_takes_mark_done_s_place(
        server, browser, size):
    url, data = server
    context, page = _page(browser, url, size)
    try:
        pairs = _pairs(data)
        page.goto(f"{url}/?pair={pairs[0][0]}")
        tops = []
        kinds = []
        pair = pairs[0][0]
        for i in range(min(8, len(pairs))):
            grid = _grid(page, pair)
            grid.wait_for()
            # Let the film settle (its height is set a moment after the first paint).
            page.wait_for_timeout(400)
            tops.append(round(grid.bounding_box()["y"], 1))
            kinds.append("film" if page.locator(".rcv-root").count() else "no film")
            if i == 0 or kinds[-1] != kinds[0]:
                _shot(page, f"rate_{kinds[-1].replace(' ', '')}_{size[0]}x{size[1]}")
            nxt = pairs[i][2]
            if nxt is None:
                break
            page.get_by_role("button", name="Next").click()
            _grid(page, nxt).wait_for()
            pair = nxt
        print(f"\ngrid top at {size[0]}x{size[1]} over {len(tops)} pairs ({kinds}): {tops}; "
              f"movement {max(tops) - min(tops):.1f} px")
        assert {"film", "no film"} <= set(kinds)
        assert max(tops) - min(tops) <= 10, tops

        # The all-zero question: in Mark done's place, the grid does not move.
        zero = next(oid for oid, _, _ in _pairs(data) if not _counts(data, RATER, oid))
        page.goto(f"{url}/?pair={zero}")
        grid = _grid(page, zero)
        grid.wait_for()
        page.wait_for_timeout(400)
        before = grid.bounding_box()["y"]
        done = page.get_by_role("button", name="Mark done").bounding_box()
        page.wait_for_function(f"() => ({FOCUSED_CELL})('{zero}') !== null")
        page.keyboard.press("Control+Enter")
        yes = page.get_by_role("button", name=re.compile(r"^Yes, no errors"))
        expect(yes).to_be_visible()
        page.get_by_text("All twelve counts are zero").wait_for()
        page.wait_for_timeout(300)
        after = grid.bounding_box()["y"]
        box = yes.bounding_box()
        _shot(page, f"rate_zero_question_{size[0]}x{size[1]}")
        print(f"all-zero question: grid top {before:.1f} -> {after:.1f} px; Mark done at "
              f"y {done['y']:.1f}, the question's Yes at y {box['y']:.1f}")
        assert abs(after - before) <= 2
        assert abs(box["y"] - done["y"]) <= 10
        page.locator(".st-key-confirm_zero_no button").first.click()
        expect(page.get_by_role("button", name="Mark done")).to_be_visible()
    finally:
        context.close()


def _counts(data, user, pair):
    from radconcord.backend.services.accounts import auth
    from radconcord.backend.services.annotation import rating
    from radconcord.db.session import Database

    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        actor = auth.authenticate(db, username=user, password=RATER_PASSWORD)
        view = rating.get_pair(db, actor, opaque_id=pair)
        return {k: v for k, v in view.counts.items() if v} or (
            {"done": 1} if view.completed_at else {})
    finally:
        db.dispose()


def test_the_film_is_the_dominant_pane_with_a_remembered_split_and_a_full_screen_panel(
        server, browser):
    url, data = server
    size = SIZES[0]
    context, page = _page(browser, url, size)
    try:
        pair = next(oid for oid, fmts, _ in _pairs(data) if fmts == ["dicom"])
        page.goto(f"{url}/?pair={pair}")
        page.locator(f".rcv-root[data-pair-key='{pair}'][data-ready='true']").wait_for()
        page.wait_for_timeout(500)
        root = page.locator(".rcv-root").bounding_box()
        film = page.locator(".rcv-pane").bounding_box()
        header_bottom = page.get_by_role("button", name="Mark done").bounding_box()
        print(f"\nat 1280x800: viewer {root['width']:.0f}x{root['height']:.0f} px, film pane "
              f"{film['width']:.0f}x{film['height']:.0f} px from y {film['y']:.0f} to "
              f"{film['y'] + film['height']:.0f}")
        assert root["width"] >= size[0] / 2
        # The full height under the header: from under the toolbar to the help line.
        assert root["y"] <= header_bottom["y"] + header_bottom["height"] + 60
        assert root["y"] + root["height"] >= size[1] - 20
        # The grid beside it, whole, on screen.
        grid = _grid(page, pair).bounding_box()
        assert grid["y"] + grid["height"] <= size[1]

        # Drag the split 200 px to the left: more report, less film; kept after a reload.
        handle = page.locator(".rcv-split").bounding_box()
        x, y = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x - 200, y, steps=5)
        page.mouse.up()
        page.wait_for_timeout(300)
        narrower = page.locator(".rcv-root").bounding_box()["width"]
        assert root["width"] - 230 < narrower < root["width"] - 170, (root, narrower)
        page.reload()
        page.locator(f".rcv-root[data-pair-key='{pair}'][data-ready='true']").wait_for()
        page.wait_for_timeout(500)
        kept = page.locator(".rcv-root").bounding_box()["width"]
        print(f"split dragged: viewer width {root['width']:.0f} -> {narrower:.0f} px, after a "
              f"reload {kept:.0f} px")
        assert abs(kept - narrower) <= 3
        # Another rater on this browser starts from the default split.
        page.evaluate("() => { for (const k of Object.keys(localStorage))"
                      " if (k.startsWith('rc-film-split:')) localStorage.setItem(k, '60'); }")
        page.reload()
        page.locator(f".rcv-root[data-pair-key='{pair}'][data-ready='true']").wait_for()
        page.wait_for_timeout(500)
        sixty = page.locator(".rcv-root").bounding_box()["width"]
        row = page.locator(".st-key-rc_split").bounding_box()["width"]
        assert abs(sixty / row - 0.6) < 0.02, (sixty, row)

        # Full screen: the film and the grid; the panel collapses (H) and comes back.
        page.get_by_role("button", name="Full screen").click()
        page.wait_for_function("() => document.fullscreenElement !== null")
        page.wait_for_timeout(500)
        grid_host = page.evaluate("""() => {
            const fs = document.fullscreenElement;
            const g = [...document.querySelectorAll('*')].find(
                e => e.shadowRoot && e.shadowRoot.querySelector('.rc-grid'));
            return Boolean(fs && g && fs.contains(g));
        }""")
        assert grid_host, "the grid is not inside the full-screen element"
        full = page.locator(".rcv-root").bounding_box()
        _shot(page, "rate_fullscreen_panel_1280x800")
        page.get_by_role("button", name="Panel").click()
        page.wait_for_timeout(400)
        alone = page.locator(".rcv-root").bounding_box()
        _shot(page, "rate_fullscreen_film_only_1280x800")
        assert alone["width"] > full["width"] + 200
        page.get_by_role("button", name="Panel").click()
        page.wait_for_timeout(300)
        assert abs(page.locator(".rcv-root").bounding_box()["width"] - full["width"]) < 5
        print(f"full screen: viewer {full['width']:.0f} px with the grid panel, "
              f"{alone['width']:.0f} px with it collapsed")
    finally:
        context.close()


def test_the_real_cr_opens_on_an_auto_window_with_legible_integer_overlay(server, browser):
    url, data = server
    context, page = _page(browser, url, SIZES[1])
    try:
        pair = next(oid for oid, fmts, _ in _pairs(data) if fmts == ["dicom"])
        page.goto(f"{url}/?pair={pair}")
        page.locator(f".rcv-root[data-pair-key='{pair}'][data-ready='true']").wait_for()
        pane = page.locator(".rcv-pane")
        assert pane.get_attribute("data-preset") == "auto"
        width, center = float(pane.get_attribute("data-width")), float(
            pane.get_attribute("data-center"))
        print(f"\nRG1_UNCR opens at W {width:.0f} / C {center:.0f} (header W 30000 / C 15000)")
        assert 8000 < width < 20000 and 6000 < center < 13000
        text = page.locator(".rcv-ov-bl").inner_text()
        assert re.fullmatch(r"W \d+ · C \d+", text), text
        plate = page.locator(".rcv-ov-bl").evaluate("e => getComputedStyle(e).backgroundColor")
        assert plate not in ("rgba(0, 0, 0, 0)", "transparent"), plate
        # Invert (a white film): the text is still on its dark plate.
        page.locator(".rcv-root").focus()
        page.keyboard.press("i")
        page.wait_for_timeout(300)
        _shot(page, "viewer_inverted_overlay_1920x1080")
        page.keyboard.press("i")
        # 100%: one image pixel per screen pixel.
        page.keyboard.press("1")
        page.wait_for_function("() => Math.abs(+document.querySelector('.rcv-pane')"
                               ".dataset.pixelScale - 1) < 0.001")
        assert page.locator(".rcv-ov-br").inner_text().startswith("100%")
        page.keyboard.press("0")
        page.wait_for_timeout(200)
        fit = page.locator(".rcv-ov-br").inner_text()
        assert not fit.startswith("100%"), fit  # fitted, the 1955-px film is smaller than 100%
        _shot(page, "viewer_auto_window_1920x1080")
    finally:
        context.close()


def test_error_records_mode_shows_the_derived_grid_above_the_fold(browser, tmp_path):
    with start_server(tmp_path) as (url, data):
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.set_default_timeout(60_000)
        try:
            page.goto(url)
            page.get_by_label("Username", exact=True).wait_for()
            demo_in_error_records(data)
            log_in(page, RATER, RATER_PASSWORD)
            wait_for_cookie(page)
            expect(page.locator(".rc-er")).to_be_visible()
            pairs = _pairs(data)
            chosen = [next(p for p in pairs if not p[1]), next(p for p in pairs if p[1])]
            for oid, fmts, _ in chosen:
                page.goto(f"{url}/?pair={oid}")
                grid = _grid(page, oid)
                grid.wait_for()
                page.wait_for_timeout(400)
                box = grid.bounding_box()
                _shot(page, f"rate_error_records_{'film' if fmts else 'nofilm'}_1280x800")
                print(f"\nerror records, {fmts or 'no film'}: grid from y {box['y']:.0f} to "
                      f"{box['y'] + box['height']:.0f} (fold 800)")
                assert box["y"] + box["height"] <= 800, box
        finally:
            context.close()
