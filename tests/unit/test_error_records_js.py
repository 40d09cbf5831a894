"""The per-error records panel's rules (webapp/components/errors/error_records.js, ``Marker``,
``tokenize``, ``tokenMarks``) run in node against a scripted server: keyboard selection of
words, category and significance keys, omissions against a reference sentence, the payloads
sent with the panel's version, 409 adopting the stored records, errors kept on screen."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

JS = (Path(__file__).resolve().parents[2] / "webapp" / "components" / "errors"
      / "error_records.js")

PRELUDE = r"""
import { Marker, tokenize, tokenMarks } from "./error_records.mjs";
const out = {};
const tick = () => new Promise((r) => setTimeout(r, 0));
function server() {
  const s = { sent: [], waiting: [] };
  s.post = (url, body) => {
    s.sent.push({ url, body: JSON.parse(JSON.stringify(body)) });
    return new Promise((resolve) => s.waiting.push(resolve));
  };
  s.answer = async (status, body) => { s.waiting.shift()({ status, body }); await tick(); };
  return s;
}
const CAND = "Small left effusion, 1.5 cm. No pneumothorax.";
const SENTENCES = [{ start: 0, end: 12, text: "Large right." }, { start: 13, end: 30,
                   text: "Heart is normal." }];
function marker(srv, extra = {}) {
  return new Marker({ pair: "P1", url: "/_rc/api/error-records", version: 4, candidate: CAND,
    sentences: SENTENCES, records: [], post: srv.post, ...extra });
}
const press = (m, key, shiftKey = false) => m.key({ key, shiftKey });
"""


def _run(tmp_path: Path, script: str) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node not found: install nodejs (apt-get install -y nodejs) to test the "
                    "browser components")
    shutil.copyfile(JS, tmp_path / "error_records.mjs")
    (tmp_path / "run.mjs").write_text(PRELUDE + script + "\nconsole.log(JSON.stringify(out));\n",
                                      encoding="utf-8")
    done = subprocess.run([node, "run.mjs"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_words_keep_inner_dots_and_hyphens_and_punctuation_is_its_own_token(tmp_path):
    out = _run(tmp_path, r"""
out.tokens = tokenize("T11-T12 fracture, 1.5 cm; don't.").map((t) => [t.start, t.end, t.text]);
out.marks = tokenMarks(tokenize(CAND), [
  { kind: "span", candidate_start: 6, candidate_end: 19, category: 1 },
  { kind: "omission", reference_start: 0, reference_end: 5, category: 2 },
  { kind: "span", candidate_start: 11, candidate_end: 12, category: 3 },
]).map((hits) => hits.map((r) => r.category));
""")
    assert out["tokens"] == [[0, 7, "T11-T12"], [8, 16, "fracture"], [16, 17, ","],
                             [18, 21, "1.5"], [22, 24, "cm"], [24, 25, ";"],
                             [26, 31, "don't"], [31, 32, "."]]
    # Small | left | effusion | , | 1.5 | cm | . | No | pneumothorax | .
    assert out["marks"][:4] == [[], [1], [1, 3], []]


def test_keyboard_selection_category_significance_and_save_payload(tmp_path):
    out = _run(tmp_path, r"""
const srv = server();
const m = marker(srv);
press(m, "ArrowRight");           // selects "Small" (the word under the cursor)
press(m, "ArrowRight");           // moves to "left"
press(m, "ArrowRight", true);     // extends to "effusion"
out.range = m.range();
await m.save();                   // no category yet: a hint, nothing sent
out.hint = m.status;
out.sentBefore = srv.sent.length;
out.handled = [press(m, "1"), press(m, "s"), press(m, "x")];
m.note = "  side  ";
press(m, "Enter");
out.busy = m.busy;
press(m, "Enter");                // a second Enter while saving sends nothing more
out.sent = srv.sent;
const saved = [];
m.onSaved = (answer) => saved.push(answer.version);
await srv.answer(200, { version: 5, saved_at: "2026-01-01T10:00:00+00:00", records: [
  { id: 9, kind: "span", category: 1, significant: true, candidate_start: 6,
    candidate_end: 19, candidate_text: "left effusion", note: "side" }] });
out.after = { version: m.version, records: m.records.length, status: m.status.kind,
              category: m.category, significant: m.significant, range: m.range(),
              note: m.note, saved };
""")
    assert out["range"] == [1, 2]
    assert out["hint"]["kind"] == "hint" and "category" in out["hint"]["text"]
    assert out["sentBefore"] == 0
    assert out["handled"] == [True, True, False]
    assert out["busy"] is True
    assert out["sent"] == [{"url": "/_rc/api/error-records/add", "body": {
        "pair": "P1", "version": 4, "category": 1, "significant": True, "note": "side",
        "kind": "span", "candidate_start": 6, "candidate_end": 19}}]
    assert out["after"] == {"version": 5, "records": 1, "status": "saved", "category": None,
                            "significant": False, "range": None, "note": "", "saved": [5]}


def test_omission_mode_picks_a_reference_sentence(tmp_path):
    out = _run(tmp_path, r"""
const srv = server();
const m = marker(srv);
press(m, "o");
out.mode = m.mode;
press(m, "2");
press(m, "Enter");                // no sentence picked yet
out.hint = m.status.text;
press(m, "ArrowDown");            // picks the first sentence
press(m, "ArrowDown");            // then the second
press(m, "Enter");
out.sent = srv.sent.map((s) => s.body);
await srv.answer(200, { version: 5, records: [] });
press(m, "Escape");               // nothing picked any more: back to the words
out.back = m.mode;
""")
    assert out["mode"] == "omission"
    assert "omitted sentence" in out["hint"]
    assert out["sent"] == [{"pair": "P1", "version": 4, "category": 2, "significant": False,
                            "note": "", "kind": "omission", "reference_start": 13,
                            "reference_end": 30}]
    assert out["back"] == "span"


def test_delete_removes_the_record_under_the_cursor_and_409_adopts_the_stored(tmp_path):
    out = _run(tmp_path, r"""
const srv = server();
const records = [{ id: 3, kind: "span", category: 1, significant: false, candidate_start: 6,
                   candidate_end: 10, candidate_text: "left" }];
const m = marker(srv, { records });
press(m, "Delete");               // cursor on "Small": no record there
out.none = [m.status.kind, srv.sent.length];
press(m, "ArrowRight"); press(m, "ArrowRight");
press(m, "Delete");
out.sent = srv.sent.map((s) => [s.url, s.body]);
await srv.answer(409, { reason: "stale", version: 7, records: [...records, { id: 4,
  kind: "omission", category: 2, significant: true, reference_start: 0, reference_end: 12 }] });
out.stale = { status: m.status, version: m.version, records: m.records.map((r) => r.id) };
// Errors keep the panel's state and say why.
press(m, "3"); press(m, "Enter");
await srv.answer(401, { reason: "login", message: "Not saved: your session has ended." });
out.login = [m.status.kind, m.status.text, m.range(), m.category];
press(m, "Enter");
await srv.answer(0, {});
out.offline = m.status.text;
press(m, "Enter");
await srv.answer(400, { reason: "bad_request", message: "category: must be an integer 1-6" });
out.bad = m.status.text;
// A page rerun with an older version does not replace newer records.
m.refresh(6, [], false);
out.refresh = m.records.length;
m.refresh(8, [], true);
out.refresh2 = [m.records.length, m.readOnly];
out.readOnlySave = await m.save();
""")
    assert out["none"] == ["hint", 0]
    assert out["sent"] == [["/_rc/api/error-records/delete",
                            {"pair": "P1", "version": 4, "record": 3}]]
    assert out["stale"]["status"]["kind"] == "stale"
    assert "changed in another window" in out["stale"]["status"]["text"]
    assert out["stale"]["version"] == 7 and out["stale"]["records"] == [3, 4]
    assert out["login"] == ["error", "Not saved: your session has ended.", [1, 1], 3]
    assert "can't be reached" in out["offline"]
    assert out["bad"] == "Not saved: category: must be an integer 1-6"
    assert out["refresh"] == 2
    assert out["refresh2"] == [0, True]
    assert out["readOnlySave"] is False


def test_delete_in_omission_mode_removes_the_omission_of_the_picked_sentence(tmp_path):
    out = _run(tmp_path, r"""
const srv = server();
const records = [{ id: 8, kind: "omission", category: 2, significant: true, reference_start: 13,
                   reference_end: 30, reference_text: "Heart is normal." }];
const m = marker(srv, { records });
press(m, "o");
press(m, "ArrowDown");            // the first sentence: not omitted
press(m, "Delete");
out.first = [m.status.text, srv.sent.length];
press(m, "ArrowDown");            // the second: its omission is removed
press(m, "Backspace");
out.sent = srv.sent.map((s) => [s.url, s.body]);
""")
    assert out["first"] == ["This sentence is not marked as omitted.", 0]
    assert out["sent"] == [["/_rc/api/error-records/delete",
                            {"pair": "P1", "version": 4, "record": 8}]]


def test_arrows_step_over_punctuation_and_a_span_starts_and_ends_on_words(tmp_path):
    # A radiologist marks words: the cursor never rests on "," or ".", and a selection
    # reaching punctuation (End, a drag) saves only its words; a lone "." saves nothing.
    out = _run(tmp_path, r"""
const srv = server();
const m = marker(srv);
press(m, "ArrowRight");           // "Small"
press(m, "ArrowRight");           // "left"
press(m, "ArrowRight");           // "effusion"
press(m, "ArrowRight");           // "1.5", past ","
out.cursor = m.cursor;
press(m, "ArrowRight", true);     // "cm"
press(m, "ArrowRight", true);     // "No", past "."
out.range = m.range();
press(m, "ArrowLeft");            // back to "cm", past "."
out.back = m.cursor;
press(m, "End");                  // the final "." alone
press(m, "3");
out.lone = m.payload();
press(m, "Home");
press(m, "End", true);            // everything, from "Small" to the final "."
out.all = m.payload();
""")
    assert out["cursor"] == 4 and out["range"] == [4, 7] and out["back"] == 5
    assert out["lone"] == {"error": "Select words, not only punctuation."}
    assert (out["all"]["candidate_start"], out["all"]["candidate_end"]) == (0, 44)


def test_a_category_the_mode_cannot_carry_is_a_hint_and_nothing_is_sent(tmp_path):
    # The service's rule (KIND_CATEGORIES), said before a round trip: an omission is 2 or 6,
    # a span of the candidate 1, 3, 4 or 5.
    out = _run(tmp_path, r"""
import { HINT_SPAN, HINT_OMISSION } from "./error_records.mjs";
const srv = server();
const m = marker(srv);
press(m, "ArrowRight");           // "Small" selected
out.span = {};
for (const key of ["1", "2", "3", "4", "5", "6"]) {
  press(m, key);
  out.span[key] = m.payload();
}
press(m, "2");
press(m, "Enter");                // refused at once, with the way to an omission
out.spanHint = [m.status.kind, m.status.text, srv.sent.length, m.range()];
press(m, "o");                    // the category is kept: 2 is right for an omission
press(m, "ArrowDown");
out.omission = {};
for (const key of ["1", "2", "3", "4", "5", "6"]) {
  press(m, key);
  out.omission[key] = m.payload();
}
press(m, "1");
press(m, "Enter");
out.omissionHint = [m.status.kind, m.status.text, srv.sent.length, m.sentencePicked];
out.hints = [HINT_SPAN, HINT_OMISSION];
""")
    refused_span = ("Categories 2 and 6 are omissions: press O to mark the reference sentence "
                    "the candidate leaves out.")
    refused_omission = "An omission is category 2 (finding) or 6 (comparison)."
    assert out["span"]["2"] == out["span"]["6"] == {"error": refused_span}
    for key in ("1", "3", "4", "5"):
        assert out["span"][key]["kind"] == "span"
        assert out["span"][key]["category"] == int(key)
        assert "error" not in out["span"][key]
    assert out["spanHint"] == ["hint", refused_span, 0, [0, 0]]
    for key in ("1", "3", "4", "5"):
        assert out["omission"][key] == {"error": refused_omission}
    for key in ("2", "6"):
        assert out["omission"][key]["kind"] == "omission"
        assert out["omission"][key]["category"] == int(key)
        assert (out["omission"][key]["reference_start"],
                out["omission"][key]["reference_end"]) == (0, 12)
    assert out["omissionHint"] == ["hint", refused_omission, 0, True]
    assert "1, 3, 4 or 5" in out["hints"][0] and "2 or 6" in out["hints"][1]
