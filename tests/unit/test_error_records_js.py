"""The per-error records panel's rules (webapp/components/errors/error_records.js, ``Marker``,
``tokenize``, ``tokenMarks``) run in node against a scripted server: keyboard selection of
words, category and significance keys (S and I set it, none is chosen until one is pressed,
and every save, stored or refused, clears it), omissions against a reference sentence, the
payloads sent with the panel's version, 409 adopting the stored records, errors kept on
screen, a refused category explained in the service's words."""

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
    assert out["hint"]["kind"] == "refused" and "category" in out["hint"]["text"]
    assert out["sentBefore"] == 0
    assert out["handled"] == [True, True, False]
    assert out["busy"] is True
    assert out["sent"] == [{"url": "/_rc/api/error-records/add", "body": {
        "pair": "P1", "version": 4, "category": 1, "significant": True, "note": "side",
        "kind": "span", "candidate_start": 6, "candidate_end": 19}}]
    assert out["after"] == {"version": 5, "records": 1, "status": "saved", "category": None,
                            "significant": None, "range": None, "note": "", "saved": [5]}


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
press(m, "Enter");                // no significance chosen yet
out.noSig = [m.status.kind, m.status.text, srv.sent.length];
press(m, "i");
press(m, "Enter");
out.sent = srv.sent.map((s) => s.body);
await srv.answer(200, { version: 5, records: [] });
press(m, "Escape");               // nothing picked any more: back to the words
out.back = m.mode;
""")
    assert out["mode"] == "omission"
    assert "omitted sentence" in out["hint"]
    assert out["noSig"] == ["refused", "Not saved: choose the significance: S clinically "
                            "significant, I insignificant.", 0]
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
// Errors keep the panel's selection and category and say why; the significance goes.
press(m, "3"); press(m, "s"); press(m, "Enter");
await srv.answer(401, { reason: "login", message: "Not saved: your session has ended." });
out.login = [m.status.kind, m.status.text, m.range(), m.category, m.significant];
press(m, "s"); press(m, "Enter");
await srv.answer(0, {});
out.offline = [m.status.text, m.significant];
press(m, "i"); press(m, "Enter");
await srv.answer(400, { reason: "bad_request", message: "category: must be an integer 1-6" });
out.bad = [m.status.kind, m.status.text, m.significant];
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
    assert out["login"] == ["error", "Not saved: your session has ended.", [1, 1], 3, None]
    assert "can't be reached" in out["offline"][0] and out["offline"][1] is None
    assert out["bad"] == ["refused", "Not saved: category: must be an integer 1-6", None]
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
press(m, "i");
out.lone = m.payload();
press(m, "Home");
press(m, "End", true);            // everything, from "Small" to the final "."
out.all = m.payload();
""")
    assert out["cursor"] == 4 and out["range"] == [4, 7] and out["back"] == 5
    assert out["lone"] == {"error": "select words, not only punctuation"}
    assert (out["all"]["candidate_start"], out["all"]["candidate_end"]) == (0, 44)


def test_a_category_the_mode_cannot_carry_is_a_hint_and_nothing_is_sent(tmp_path):
    # The service's rule (KIND_CATEGORIES), said before a round trip: an omission is 2 or 6,
    # a span of the candidate 1, 3, 4 or 5.
    out = _run(tmp_path, r"""
import { HINT_SPAN, HINT_OMISSION } from "./error_records.mjs";
const srv = server();
const m = marker(srv);
press(m, "ArrowRight");           // "Small" selected
press(m, "s");
out.span = {};
for (const key of ["1", "2", "3", "4", "5", "6"]) {
  press(m, key);
  out.span[key] = m.payload();
}
press(m, "2");
out.onKey = [m.status.kind, m.status.text];  // said as the key is pressed
press(m, "s");
press(m, "Enter");                // refused at once, with the way to an omission
out.spanHint = [m.status.kind, m.status.text, srv.sent.length, m.range(), m.significant];
press(m, "o");                    // the category is kept: 2 is right for an omission
press(m, "ArrowDown");
press(m, "s");
out.omission = {};
for (const key of ["1", "2", "3", "4", "5", "6"]) {
  press(m, key);
  out.omission[key] = m.payload();
}
press(m, "1");
press(m, "Enter");
out.omissionHint = [m.status.kind, m.status.text, srv.sent.length, m.sentencePicked];
// The service's words, when the panel has them, replace the built-in ones.
const told = marker(srv, { refusals: { span: { "6": "category 6 is an omission (told)" } } });
press(told, "ArrowRight"); press(told, "6");
out.told = told.payload();
out.hints = [HINT_SPAN, HINT_OMISSION];
""")
    def refused_span(c):
        return (f"category {c} is an omission: press O on a reference sentence the candidate "
                "leaves out")

    def refused_omission(c):
        return (f"category {c} marks wrong words of the candidate, not an omission: press O "
                "to go back to the candidate's words")

    assert out["span"]["2"] == {"error": refused_span(2)}
    assert out["span"]["6"] == {"error": refused_span(6)}
    for key in ("1", "3", "4", "5"):
        assert out["span"][key]["kind"] == "span"
        assert out["span"][key]["category"] == int(key)
        assert "error" not in out["span"][key]
    assert out["onKey"] == ["hint", refused_span(2) + "."]
    # The significance pressed for the refused save is cleared: the next error needs its own.
    assert out["spanHint"] == ["refused", f"Not saved: {refused_span(2)}. Significance "
                               "cleared: press S or I again.", 0, [0, 0], None]
    for key in ("1", "3", "4", "5"):
        assert out["omission"][key] == {"error": refused_omission(int(key))}
    for key in ("2", "6"):
        assert out["omission"][key]["kind"] == "omission"
        assert out["omission"][key]["category"] == int(key)
        assert (out["omission"][key]["reference_start"],
                out["omission"][key]["reference_end"]) == (0, 12)
    assert out["omissionHint"] == ["refused", f"Not saved: {refused_omission(1)}. Significance "
                                   "cleared: press S or I again.", 0, True]
    assert out["told"] == {"error": "category 6 is an omission (told)"}
    assert "1, 3, 4 or 5" in out["hints"][0] and "2 or 6" in out["hints"][1]


def test_significance_is_set_not_toggled_and_no_choice_outlives_a_save(tmp_path):
    # Issue 24: with S as a toggle, an S left on by a refused save turned the next error's S
    # into "insignificant". Now S and I set it, nothing is chosen until one is pressed, and a
    # refused save clears it like a stored one does.
    out = _run(tmp_path, r"""
const srv = server();
const m = marker(srv);
out.start = m.significant;
press(m, "s"); press(m, "s");
out.twice = m.significant;
press(m, "i");
out.i = m.significant;
press(m, "s");
press(m, "ArrowRight"); press(m, "2"); press(m, "Enter");   // refused: 2 is an omission
out.refused = [m.status.kind, m.significant, srv.sent.length];
press(m, "1"); press(m, "Enter");                            // no significance: refused
out.unchosen = [m.status.text, srv.sent.length];
press(m, "s"); press(m, "Enter");                            // the next error, significant
out.sent = srv.sent.map((s) => s.body.significant);
await srv.answer(200, { version: 5, records: [] });
out.after = m.significant;
""")
    assert out["start"] is None
    assert out["twice"] is True and out["i"] is False
    assert out["refused"] == ["refused", None, 0]
    assert out["unchosen"] == ["Not saved: choose the significance: S clinically significant, "
                               "I insignificant.", 0]
    assert out["sent"] == [True]
    assert out["after"] is None
