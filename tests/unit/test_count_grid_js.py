"""The count grid's saving rules (webapp/components/grid/count_grid.js, ``Saver`` and
``resendKept``) run in node against a scripted server: one save in flight at a time, each
with the version it is based on; 409 shows the stored counts; 401 keeps the change in the
browser (counts and base version only) until the next mount sends it; 503 and a network
failure retry with backoff; changes kept for other pairs are sent again on a mount."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parents[2] / "webapp" / "components" / "grid" / "count_grid.js"

# A localStorage stand-in, a server whose answers the script queues, manual timers.
PRELUDE = r"""
import { Saver, resendKept, storeKey, RETRY_FIRST_MS } from "./count_grid.mjs";
const out = {};
class Store {
  constructor() { this.map = new Map(); }
  get length() { return this.map.size; }
  key(i) { return [...this.map.keys()][i] ?? null; }
  getItem(k) { return this.map.has(k) ? this.map.get(k) : null; }
  setItem(k, v) { this.map.set(k, String(v)); }
  removeItem(k) { this.map.delete(k); }
  dump() { return Object.fromEntries([...this.map].map(([k, v]) => [k, JSON.parse(v)])); }
}
const ZERO = Object.fromEntries(
  [1, 2, 3, 4, 5, 6].flatMap((c) => [[`${c}s`, 0], [`${c}i`, 0]]));
function server() {
  const s = { sent: [], replies: [], waiting: [] };
  s.post = (url, body) => {
    s.sent.push(JSON.parse(JSON.stringify(body)));
    return new Promise((resolve) => s.waiting.push(resolve));
  };
  // Answer the oldest request still waiting.
  s.answer = async (status, body) => {
    const resolve = s.waiting.shift();
    resolve({ status, body });
    await new Promise((r) => setTimeout(r, 0));
  };
  return s;
}
function timers() {
  const t = { queue: [] };
  t.set = (fn, ms) => { t.queue.push({ fn, ms }); return t.queue.length; };
  t.clear = () => {};
  t.fire = async () => { const next = t.queue.shift(); next.fn(); await tick(); return next.ms; };
  return t;
}
const tick = () => new Promise((r) => setTimeout(r, 0));
function saver(srv, store, tm, extra = {}) {
  return new Saver({ pair: "P1", tag: "T1", url: "/_rc/api/rating/counts", version: 0,
    counts: { ...ZERO }, post: srv.post, storage: store, setTimer: tm.set,
    clearTimer: tm.clear, ...extra });
}
"""


def _run(tmp_path: Path, script: str) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node not found: install nodejs (apt-get install -y nodejs) to test the "
                    "browser components")
    shutil.copyfile(JS, tmp_path / "count_grid.mjs")
    (tmp_path / "run.mjs").write_text(PRELUDE + script + "\nconsole.log(JSON.stringify(out));\n",
                                      encoding="utf-8")
    done = subprocess.run([node, "run.mjs"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_one_save_in_flight_and_the_next_carries_the_returned_version(tmp_path):
    out = _run(tmp_path, r"""
const srv = server(), store = new Store(), tm = timers();
const s = saver(srv, store, tm);
s.change("2s", 1);                 // sent at once
s.change("2s", 2);                 // waits: a save is in flight
s.change("4i", 3);
out.sentWhileInFlight = srv.sent.length;
out.shown = [s.value("2s"), s.value("4i")];
out.keptWhileInFlight = store.dump();
await srv.answer(200, { version: 1, counts: { ...ZERO, "2s": 1 },
                        saved_at: "2026-01-02T10:42:07+00:00" });
out.second = srv.sent[1];
await srv.answer(200, { version: 2, counts: { ...ZERO, "2s": 2, "4i": 3 },
                        saved_at: "2026-01-02T10:42:08+00:00" });
out.first = srv.sent[0];
out.status = s.status.kind;
out.version = s.version;
out.keptAfter = store.dump();
out.settled = await s.settle();
""")
    assert out["sentWhileInFlight"] == 1
    assert out["shown"] == [2, 3]
    # While unsaved, the browser keeps the counts and the version they are based on, only.
    assert out["keptWhileInFlight"] == {
        "radconcord.grid.unsaved:P1:T1": {"cells": {"2s": 2, "4i": 3}, "version": 0}}
    assert out["first"] == {"pair": "P1", "version": 0, "cells": {"2s": 1}, "tag": "T1"}
    assert out["second"] == {"pair": "P1", "version": 1, "cells": {"2s": 2, "4i": 3},
                             "tag": "T1"}
    assert (out["status"], out["version"], out["keptAfter"]) == ("saved", 2, {})
    assert out["settled"] is True


def test_a_stale_save_shows_the_stored_counts_and_holds_mark_done(tmp_path):
    out = _run(tmp_path, r"""
const srv = server(), store = new Store(), tm = timers();
const s = saver(srv, store, tm);
s.change("1s", 1);
s.change("3i", 4);                 // pending behind the first
const settled = s.settle();        // Mark done pressed now
await srv.answer(409, { reason: "stale", version: 5,
  message: "Not saved: changed in another window, reloaded",
  counts: { ...ZERO, "1s": 2 } });
out.status = s.status;
out.values = [s.value("1s"), s.value("3i")];
out.version = s.version;
out.sent = srv.sent.length;
out.kept = store.dump();
out.settled = await settled;
s.change("1s", 3);                 // the next click goes on from the stored version
out.next = srv.sent[1];
""")
    assert out["status"] == {"kind": "stale",
                             "text": "Not saved: changed in another window, reloaded"}
    assert out["values"] == [2, 0] and out["version"] == 5
    assert out["sent"] == 1 and out["kept"] == {}
    assert out["settled"] is False  # the rater sees the reloaded counts before marking done
    assert out["next"]["version"] == 5 and out["next"]["cells"] == {"1s": 3}


def test_a_lost_reply_refused_as_stale_but_already_stored_counts_as_saved(tmp_path):
    out = _run(tmp_path, r"""
const srv = server(), store = new Store(), tm = timers();
const s = saver(srv, store, tm);
s.change("5s", 2);
await srv.answer(409, { reason: "stale", version: 3, counts: { ...ZERO, "5s": 2 } });
out.status = s.status.kind;
out.version = s.version;
""")
    assert (out["status"], out["version"]) == ("saved", 3)


def test_a_401_keeps_the_change_until_the_next_mount_sends_it(tmp_path):
    out = _run(tmp_path, r"""
const srv = server(), store = new Store(), tm = timers();
const s = saver(srv, store, tm, { version: 7 });
s.change("2s", 1);
await srv.answer(401, { reason: "login", message: "Not saved: your session has ended." });
out.status = s.status.kind;
out.notSaved = s.notSaved("2s");
s.change("6i", 2);                 // still logged out: kept, not sent
out.sent = srv.sent.length;
out.kept = store.dump();
out.settled = await s.settle();    // Mark done is refused
// The rater logs in again; the pair's grid mounts afresh (version 7 still stored).
const again = saver(srv, store, tm, { version: 7 });
out.restored = again.restoreKept();
out.shown = [again.value("2s"), again.value("6i")];
out.resent = srv.sent[1];
await srv.answer(200, { version: 8, counts: { ...ZERO, "2s": 1, "6i": 2 },
                        saved_at: "2026-01-02T10:00:00+00:00" });
out.after = [again.status.kind, store.dump()];
""")
    assert out["status"] == "login" and out["notSaved"] is True
    assert out["sent"] == 1
    assert out["kept"] == {"radconcord.grid.unsaved:P1:T1": {"cells": {"2s": 1, "6i": 2},
                                                             "version": 7}}
    assert out["settled"] is False
    assert out["restored"] is True and out["shown"] == [1, 2]
    assert out["resent"] == {"pair": "P1", "version": 7, "cells": {"2s": 1, "6i": 2},
                             "tag": "T1"}
    assert out["after"] == ["saved", {}]


def test_a_401_right_after_login_is_sent_again_when_the_new_cookie_is_set(tmp_path):
    """The grid mounts after a login before the page's cookie request has set the new
    cookie: its resend gets 401. The cookie script's session event retries it at once;
    without a 401 the event does nothing."""
    out = _run(tmp_path, r"""
const srv = server(), store = new Store(), tm = timers();
store.setItem("radconcord.grid.unsaved:P1:T1",
              JSON.stringify({ cells: { "2s": 1 }, version: 7 }));
const s = saver(srv, store, tm, { version: 7 });
s.restoreKept();
await srv.answer(401, { reason: "login", message: "Not saved: your session has ended." });
out.blocked = s.status.kind;
s.retryAfterLogin();               // the cookie is set now
out.resent = srv.sent.length;
await srv.answer(200, { version: 8, counts: { ...ZERO, "2s": 1 },
                        saved_at: "2026-01-02T10:00:00+00:00" });
out.after = [s.status.kind, store.dump()];
s.retryAfterLogin();               // nothing blocked: nothing sent
out.quiet = srv.sent.length;
""")
    assert out["blocked"] == "login" and out["resent"] == 2
    assert out["after"] == ["saved", {}]
    assert out["quiet"] == 2


def test_busy_and_unreachable_retry_with_backoff(tmp_path):
    out = _run(tmp_path, r"""
const srv = server(), store = new Store(), tm = timers();
const s = saver(srv, store, tm);
s.change("3s", 1);
await srv.answer(503, { reason: "busy",
  message: "Not saved: the database is busy; your count is kept, try again" });
out.first = [s.status.kind, s.status.text, s.notSaved("3s")];
out.waits = [await tm.fire()];     // the retry
await srv.answer(0, {});           // the server is down (restarting)
out.second = s.status.text;
out.waits.push(await tm.fire());
await srv.answer(503, {});
out.waits.push(await tm.fire());
await srv.answer(200, { version: 1, counts: { ...ZERO, "3s": 1 },
                        saved_at: "2026-01-02T10:00:00+00:00" });
out.sent = srv.sent.map((b) => [b.version, b.cells]);
out.end = [s.status.kind, store.dump(), s.retryDelay === RETRY_FIRST_MS];
""")
    kind, text, not_saved = out["first"]
    assert kind == "busy" and not_saved is True
    assert text == ("Not saved: the database is busy; your count is kept, try again "
                    "(sent again in 1 s).")
    assert out["second"] == ("Not saved: the server cannot be reached; your change is kept "
                             "and sent again in 2 s.")
    assert out["waits"] == [1000, 2000, 4000]
    assert out["sent"] == [[0, {"3s": 1}]] * 4
    assert out["end"] == ["saved", {}, True]


def test_a_full_disk_keeps_the_change_says_so_and_retries(tmp_path):
    """507 (the server's storage is full): nothing was stored, so the change stays in this
    browser, the status names storage, and it is sent again as after a busy answer."""
    out = _run(tmp_path, r"""
const srv = server(), store = new Store(), tm = timers();
const s = saver(srv, store, tm);
s.change("2s", 3);
await srv.answer(507, { reason: "storage",
  message: "Not saved: the server's storage is full. Tell the study's administrator" });
out.first = [s.status.kind, s.status.text, s.notSaved("2s"), s.value("2s"), store.dump()];
out.wait = await tm.fire();
await srv.answer(200, { version: 1, counts: { ...ZERO, "2s": 3 },
                        saved_at: "2026-01-02T10:00:00+00:00" });
out.sent = srv.sent.map((b) => [b.version, b.cells]);
out.end = [s.status.kind, store.dump()];
""")
    kind, text, not_saved, value, kept = out["first"]
    assert kind == "busy" and not_saved is True and value == 3
    assert text == ("Not saved: the server's storage is full; your change is kept in this "
                    "browser and sent again in 1 s. Tell the study's administrator.")
    assert kept["radconcord.grid.unsaved:P1:T1"]["cells"] == {"2s": 3}
    assert out["wait"] == 1000
    assert out["sent"] == [[0, {"2s": 3}]] * 2
    assert out["end"] == ["saved", {}]


def test_a_closed_study_refusal_drops_the_change_and_goes_read_only(tmp_path):
    out = _run(tmp_path, r"""
const srv = server(), store = new Store(), tm = timers();
const s = saver(srv, store, tm);
s.change("1i", 2);
await srv.answer(403, { reason: "read_only", message: "Not saved: study 'S' is closed" });
out.state = [s.status.kind, s.readOnly, s.value("1i"), store.dump()];
s.change("1i", 3);
out.sent = srv.sent.length;
""")
    assert out["state"] == ["error", True, 0, {}]
    assert out["sent"] == 1


def test_a_rerun_only_moves_forward_and_never_over_unsaved_changes(tmp_path):
    out = _run(tmp_path, r"""
const srv = server(), store = new Store(), tm = timers();
const s = saver(srv, store, tm, { version: 4, counts: { ...ZERO, "2i": 1 } });
s.adopt(3, { ...ZERO, "2i": 9 }, false);           // an older rerun: ignored
out.older = [s.version, s.value("2i")];
s.adopt(6, { ...ZERO, "2i": 5 }, false);           // a newer one (another tab): shown
out.newer = [s.version, s.value("2i")];
s.change("2i", 7);
s.adopt(9, { ...ZERO, "2i": 0 }, false);           // not while a change is unsaved
out.unsaved = [s.version, s.value("2i")];
""")
    assert out["older"] == [4, 1]
    assert out["newer"] == [6, 5]
    assert out["unsaved"] == [6, 7]


def test_changes_kept_for_other_pairs_are_sent_again_on_a_mount(tmp_path):
    out = _run(tmp_path, r"""
const store = new Store();
const put = (pair, tag, cells, version) =>
  store.setItem(storeKey(pair, tag), JSON.stringify({ cells, version }));
put("A", "t1", { "1s": 1 }, 0);   // stored now
put("B", "t2", { "2s": 2 }, 3);   // another account's: stays for it
put("C", "t3", { "3s": 3 }, 1);   // changed elsewhere meanwhile: dropped, counted
put("D", "t4", { "4s": 4 }, 0);   // still logged out: stays
put("E", "t5", { "5s": 5 }, 0);   // not this account's pair any more: dropped
put("F", "t6", { "6s": 6 }, 2);   // the grid now on screen: not sent by this
store.setItem("theme", "1");      // not the grid's: left alone
const replies = {
  A: [200, { version: 1, counts: {} }], B: [404, { reason: "not_yours" }],
  C: [409, { reason: "stale", version: 2, counts: { "3s": 0 } }],
  D: [401, { reason: "login" }], E: [404, { reason: "not_found" }],
};
const sent = [];
const post = async (url, body) => { sent.push(body); return {
  status: replies[body.pair][0], body: replies[body.pair][1] }; };
out.stale = await resendKept("/u", storeKey("F", "t6"), { post, storage: store });
out.sent = sent.map((b) => [b.pair, b.tag, b.version, b.cells]);
out.left = [...store.map.keys()].sort();
""")
    assert out["stale"] == 1
    assert out["sent"] == [["A", "t1", 0, {"1s": 1}], ["B", "t2", 3, {"2s": 2}],
                           ["C", "t3", 1, {"3s": 3}], ["D", "t4", 0, {"4s": 4}],
                           ["E", "t5", 0, {"5s": 5}]]
    assert out["left"] == ["radconcord.grid.unsaved:B:t2", "radconcord.grid.unsaved:D:t4",
                           "radconcord.grid.unsaved:F:t6", "theme"]
