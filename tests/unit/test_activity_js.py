"""The browser's activity clock (webapp/components/activity/activity.js, ``createTracker``) run
in node on a scripted rater whose true times are known: continuous work, a change of pair, an
idle gap longer than the cut, a pass through a pair in half a second, a blurred window."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parents[2] / "webapp" / "components" / "activity" / "activity.js"

SCRIPT = r"""
import { createTracker } from "./activity.mjs";
const t = createTracker({ idleMs: 2000 });
const spans = [];
const take = (at) => spans.push(...t.take(at));
const work = (from, to) => { for (let x = from; x <= to; x += 250) t.activity(x); };
t.activity(0);            // the page load
t.setPair("A", 0);
work(0, 4000);            // 4 s on A, the last event is the click on Next
take(2600);               // a periodic send in the middle of the work
t.setPair("B", 4300);     // the next pair is on screen 0.3 s later
work(4300, 6300);         // 2 s on B, then nothing
take(10000);              // the send after the idle gap: B ends 2 s after its last event
t.activity(12000);        // back: a click on Next
t.setPair("C", 12300);
t.activity(12800);        // half a second on C: Next again
t.setPair("D", 13100);
take(20000);              // D gets the cut after the last event (12.8 + 2 s)
t.activity(30000);        // on D again
t.inactive(30500);        // the window loses the focus: time stops at once
take(40000);
t.setPair(null, 41000);   // left the rating page: events count for no pair
t.activity(41500);
take(50000);
console.log(JSON.stringify(spans));
"""


def _run(tmp_path: Path) -> list[dict]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node not found: install nodejs (apt-get install -y nodejs) to test the "
                    "browser components")
    shutil.copyfile(JS, tmp_path / "activity.mjs")
    (tmp_path / "run.mjs").write_text(SCRIPT, encoding="utf-8")
    out = subprocess.run([node, "run.mjs"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


def test_scripted_rater_gets_its_true_times(tmp_path):
    spans = _run(tmp_path)
    per_pair: dict[str, float] = {}
    for s in spans:
        assert s["end"] > s["start"]
        per_pair[s["pair"]] = per_pair.get(s["pair"], 0) + (s["end"] - s["start"])
    assert per_pair == {
        "A": 4300,          # 0 -> 4.3 s (until the next pair is on screen)
        "B": 4000 + 300,    # 4.3 -> 8.3 s (2 s of work, then the 2 s cut), 12 -> 12.3 s
        "C": 800,           # passed through: 12.3 -> 13.1 s (the old measure gave ~61 s)
        "D": 1700 + 500,    # 13.1 -> 14.8 s (the cut), 30 -> 30.5 s (then the blur)
    }
    # Spans never overlap: the rater is on one pair at a time.
    ordered = sorted(spans, key=lambda s: s["start"])
    assert all(a["end"] <= b["start"] for a, b in zip(ordered, ordered[1:], strict=False))
    # The periodic send cut A's open span at 2.6 s; the pieces join up.
    a = [s for s in spans if s["pair"] == "A"]
    assert [(s["start"], s["end"]) for s in a] == [(0, 2600), (2600, 4300)]
    # Events are counted per span: 17 on A (0, 0.25, ..., 4 s; the page load came before
    # any pair was on screen).
    assert sum(s["events"] for s in a) == 17


WIRING = r"""
import tracker from "./activity.mjs";
// The page's clock moves only in sleep(): on a loaded machine real time would also pass
// between a mount and its send, and cut spans where the script expects none.
let fakeNow = 1000;
performance.now = () => fakeNow;
const sleep = async (ms) => {
  fakeNow += ms;
  await new Promise((r) => setTimeout(r, 0));
};
globalThis.window = new EventTarget();
globalThis.document = new EventTarget();
document.visibilityState = "visible";
document.hasFocus = () => true;
const calls = [];
const replies = [401, 409, 200, 200];
globalThis.fetch = async (url, options) => {
  calls.push({ url, keepalive: options.keepalive, headers: options.headers,
               body: JSON.parse(options.body) });
  return { status: replies.shift() ?? 200, text: async () => "" };
};
const data = (pair, account) => ({ pair, account, url: "/_rc/api/activity", idle_ms: 2000,
                                   flush_ms: 1000000, server_now_ms: Date.now() });
tracker({ data: data("A", "acc-rita") });
await sleep(30);
document.dispatchEvent(new Event("pointerdown"));
await sleep(60);
await window.__radconcordActivity.flush();          // 401: rita's session ended; kept
const kept = window.__radconcordActivity.queue.length;
tracker({ data: data("B", "acc-ravi") });           // ravi logs in at the same browser
await sleep(60);                                    // the send on the change: rita's -> 409
document.dispatchEvent(new Event("keydown"));
await sleep(60);
window.dispatchEvent(new Event("pagehide"));        // keepalive send of ravi's span
await sleep(60);
console.log(JSON.stringify({ calls, kept, left: window.__radconcordActivity.queue.length }));
clearInterval(window.__radconcordActivity.timer);
"""


def test_page_wiring_keeps_spans_on_401_and_never_sends_them_for_another_account(tmp_path):
    shutil.copyfile(JS, tmp_path / "activity.mjs")
    (tmp_path / "run.mjs").write_text(WIRING, encoding="utf-8")
    out = subprocess.run([shutil.which("node") or "node", "run.mjs"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=True)
    result = json.loads(out.stdout)
    calls = result["calls"]
    assert result["kept"] == 1 and result["left"] == 0
    assert [c["body"]["account"] for c in calls] == ["acc-rita", "acc-rita", "acc-ravi"]
    assert all(c["headers"]["X-RadConcord"] == "1" and c["url"] == "/_rc/api/activity"
               for c in calls)
    # The span refused with 401 is sent again as it was (same page load, same times); on a
    # loaded machine the still-open span may have grown a continuation meanwhile, which is
    # sent after it.
    first, again = calls[0]["body"], calls[1]["body"]
    assert {k: v for k, v in first.items() if k != "spans"} == {
        k: v for k, v in again.items() if k != "spans"}
    assert again["spans"][: len(first["spans"])] == first["spans"]
    assert all(s["start"] >= first["spans"][-1]["end"]
               for s in again["spans"][len(first["spans"]):])
    assert {s["pair"] for s in calls[0]["body"]["spans"]} == {"A"}
    # ravi's span, sent on pagehide with keepalive, carries only ravi's pair.
    assert calls[2]["keepalive"] is True
    assert {s["pair"] for s in calls[2]["body"]["spans"]} == {"B"}
    assert set(calls[2]["body"]["spans"][0]) == {"pair", "start", "end", "events"}
