"""PAIRS reading, SCORES writing and the pair input hash."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import time
from pathlib import Path

import pytest

from radconcord.backend.errors import InvalidInput
from radconcord.backend.scoring.hashing import input_hash
from radconcord.backend.scoring.io import (
    MAX_REPORT_BYTES,
    ScoreInputError,
    read_pairs,
    write_scores_csv,
)


def test_input_hash_is_the_documented_sha256():
    expected = hashlib.sha256(b"v1\x00ref\x00cand\x00aa,bb").hexdigest()
    assert input_hash("ref", "cand", ["aa", "bb"]) == expected
    # Pinned so an accidental change of the definition breaks the cache loudly.
    assert input_hash("a", "b") == (
        "669611750119049a0d1a865f1e97e47c7098c898060925cd500f2beddb5b223f"
    )
    assert input_hash("a", "b") != input_hash("b", "a")
    assert input_hash("a", "b", ["x"]) != input_hash("a", "b")
    with pytest.raises(TypeError):
        input_hash("a", "b", "abc")


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


TRICKY = 'Line one, with comma.\nLine "two" — ünïcode.'


def test_csv_and_jsonl_read_the_same_pairs(tmp_path):
    recs = [
        {"id": "1", "reference": TRICKY, "candidate": "ok", "source": "gen-a", "case_id": "c1"},
        {"id": "2", "reference": "r", "candidate": "c"},
    ]
    j = read_pairs(_jsonl(tmp_path / "p.jsonl", recs))
    c = read_pairs(
        _csv(
            tmp_path / "p.csv",
            [
                ["id", "reference", "candidate", "source", "case_id", "notes"],
                ["1", TRICKY, "ok", "gen-a", "c1", "ignored"],
                ["2", "r", "c", "", "", ""],
            ],
        )
    )
    assert j.format == "jsonl" and c.format == "csv"
    for a, b in zip(j.pairs, c.pairs, strict=True):
        assert (a.id, a.reference, a.candidate, a.source, a.case_id) == (
            b.id,
            b.reference,
            b.candidate,
            b.source,
            b.case_id,
        )
        assert a.input_hash == b.input_hash == input_hash(a.reference, a.candidate)
    assert [p.row for p in c.pairs] == [2, 4]  # the quoted newline makes record 1 two lines
    assert [p.where for p in c.pairs] == ["row 1 (line 2)", "row 2 (line 4)"]
    assert [p.where for p in j.pairs] == ["line 1", "line 2"]


def test_format_is_detected_from_content(tmp_path):
    p = tmp_path / "pairs.txt"
    _jsonl(p, [{"id": 7, "reference": "r", "candidate": "c"}])
    got = read_pairs(p)
    assert got.format == "jsonl" and got.pairs[0].id == "7"
    q = tmp_path / "other.txt"
    _csv(q, [["id", "reference", "candidate"], ["x", "r", "c"]])
    assert read_pairs(q).format == "csv"


def _error(path: Path, **kw) -> str:
    with pytest.raises(ScoreInputError) as info:
        read_pairs(path, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_missing_file_and_missing_column(tmp_path):
    assert _error(tmp_path / "none.csv").endswith("none.csv: file not found")
    p = _csv(tmp_path / "p.csv", [["id", "reference", "cand"], ["1", "r", "c"]])
    assert _error(p) == (f"{p}: header: missing column 'candidate' (found: 'id', "
                         "'reference', 'cand')")


def test_jsonl_errors_name_row_and_field(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(
        '{"id": "a", "reference": "r", "candidate": "c"}\n\n{"id": "b", "reference": 3,'
        ' "candidate": "c"}\n',
        encoding="utf-8",
    )
    assert _error(p) == f"{p}: line 3, field 'reference': expected text, got number"
    p.write_text('{"id": "a", "reference": "r", "candidate": "c"}\n{"id": "b", "refer', "utf-8")
    assert _error(p).startswith(f"{p}: line 2: invalid JSON (Unterminated string")
    p.write_text('["a", "b"]\n', encoding="utf-8")
    assert _error(p) == f"{p}: line 1: expected a JSON object, got array"
    p.write_text('{"id": "", "reference": "r", "candidate": "c"}\n', encoding="utf-8")
    assert _error(p) == f"{p}: line 1, field 'id': missing pair id"
    p.write_text('{"id": "a", "reference": "r"}\n', encoding="utf-8")
    assert _error(p) == f"{p}: line 1, field 'candidate': missing"


def test_malformed_csv_and_field_count(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text('id,reference,candidate\n1,"r"x,c\n', encoding="utf-8")
    assert _error(p) == f"{p}: row 1 (line 2): malformed CSV (',' expected after '\"')"
    p.write_text("id,reference,candidate\n1,r\n", encoding="utf-8")
    assert _error(p) == f"{p}: row 1 (line 2): 2 fields, the header has 3"
    p.write_text('id,reference,candidate\n1,r,c\n2,"unclosed,c\n', encoding="utf-8")
    assert _error(p) == (f"{p}: row 2 (line 3): malformed CSV (unexpected end of data: a "
                         "quoted field is not closed)")


def test_duplicate_ids_name_both_rows(tmp_path):
    p = _csv(
        tmp_path / "p.csv",
        [["id", "reference", "candidate"], ["a", "r", "c"], ["b", "r", "c"], ["a", "r2", "c2"]],
    )
    assert _error(p) == f"{p}: row 3 (line 4), field 'id': duplicates id 'a' of row 1 (line 2)"


def test_non_utf8_names_row_and_byte_offset(tmp_path):
    p = tmp_path / "p.csv"
    data = b"id,reference,candidate\n1,fine,ok\n2,caf\xe9,ok\n"
    p.write_bytes(data)
    msg = _error(p)
    offset = data.index(b"\xe9")
    assert offset == 38
    assert msg == (f"{p}: row 2 (line 3): not valid UTF-8 (byte 0xe9 at offset {offset}); "
                   "save the file as UTF-8")
    q = tmp_path / "p.jsonl"
    raw = b'\xef\xbb\xbf{"id": "a", "reference": "r", "candidate": "\xff"}\n'
    q.write_bytes(raw)
    at = raw.index(b"\xff")  # offsets count the BOM: they are the file's bytes
    assert f"{q}: line 1: not valid UTF-8 (byte 0xff at offset {at})" in _error(q)


def test_a_10_mb_report_fails_fast_with_a_clear_message(tmp_path):
    huge = "effusion " * (10_000_000 // 9)
    j = _jsonl(
        tmp_path / "p.jsonl",
        [
            {"id": "a", "reference": "r", "candidate": "c"},
            {"id": "b", "reference": huge, "candidate": "c"},
        ],
    )
    c = _csv(
        tmp_path / "p.csv", [["id", "reference", "candidate"], ["a", "r", "c"], ["b", "r", huge]]
    )
    t0 = time.perf_counter()
    msg_j, msg_c = _error(j), _error(c)
    assert time.perf_counter() - t0 < 30  # generous: the point is no hang/OOM, not speed
    assert msg_j == (f"{j}: line 2, field 'reference': report is {len(huge)} bytes; the limit "
                     f"is {MAX_REPORT_BYTES} bytes")
    assert msg_c == (f"{c}: row 2 (line 3), field 'candidate': larger than the CSV field limit; "
                     f"reports are limited to {MAX_REPORT_BYTES} bytes")
    # Just over our limit but under the csv module's own limit: our check names it too.
    mid = _csv(
        tmp_path / "m.csv",
        [["id", "reference", "candidate"], ["a", "x" * (MAX_REPORT_BYTES + 1), "c"]],
    )
    assert _error(mid) == (f"{mid}: row 1 (line 2), field 'reference': report is 100001 bytes; "
                           "the limit is 100000 bytes")
    # The limit is in UTF-8 bytes, as for import-pairs: 50,001 two-byte characters are over.
    wide = _jsonl(tmp_path / "w.jsonl", [{"id": "a", "reference": "é" * 50_001, "candidate": "c"}])
    assert "field 'reference': report is 100002 bytes" in _error(wide)


def test_images_resolve_inside_the_base_folder_only(tmp_path):
    base = tmp_path / "study"
    (base / "img").mkdir(parents=True)
    (base / "img" / "a.png").write_bytes(b"\x89PNG fake a")
    (base / "img" / "b.png").write_bytes(b"\x89PNG fake b")
    (tmp_path / "secret.png").write_bytes(b"outside")
    p = _jsonl(
        base / "p.jsonl",
        [
            {"id": "1", "reference": "r", "candidate": "c", "image": "img/a.png"},
            {"id": "2", "reference": "r", "candidate": "c", "image": ["img/a.png", "img/b.png"]},
        ],
    )
    got = read_pairs(p).pairs
    sha_a = hashlib.sha256(b"\x89PNG fake a").hexdigest()
    sha_b = hashlib.sha256(b"\x89PNG fake b").hexdigest()
    assert got[0].images == ((base / "img" / "a.png").resolve(),)
    assert got[1].image_sha256s == (sha_a, sha_b)
    assert got[1].input_hash == input_hash("r", "c", [sha_a, sha_b])
    c = _csv(
        base / "p.csv",
        [["id", "reference", "candidate", "image"], ["1", "r", "c", "img/a.png; img/b.png"]],
    )
    assert read_pairs(c).pairs[0].image_sha256s == (sha_a, sha_b)

    esc = _jsonl(
        base / "e.jsonl",
        [{"id": "1", "reference": "r", "candidate": "c", "image": "../secret.png"}],
    )
    assert _error(esc) == (f"{esc}: line 1, field 'image': '../secret.png' lies outside the "
                           f"allowed folder {base.resolve()}")
    absolute = _jsonl(
        base / "abs.jsonl",
        [{"id": "1", "reference": "r", "candidate": "c", "image": str(tmp_path / "secret.png")}],
    )
    assert "lies outside the allowed folder" in _error(absolute)
    os.symlink(tmp_path / "secret.png", base / "img" / "link.png")
    link = _jsonl(
        base / "l.jsonl", [{"id": "1", "reference": "r", "candidate": "c", "image": "img/link.png"}]
    )
    assert "lies outside the allowed folder" in _error(link)
    missing = _jsonl(
        base / "m.jsonl", [{"id": "1", "reference": "r", "candidate": "c", "image": "img/none.png"}]
    )
    assert _error(missing) == f"{missing}: line 1, field 'image': no such file 'img/none.png'"
    # An explicit base widens or narrows what is allowed.
    assert read_pairs(absolute, image_base=tmp_path).pairs[0].images == (
        (tmp_path / "secret.png").resolve(),
    )


def test_empty_reports_are_listed(tmp_path):
    p = _jsonl(
        tmp_path / "p.jsonl",
        [
            {"id": "a", "reference": "r", "candidate": "c"},
            {"id": "b", "reference": " \n", "candidate": "c"},
            {"id": "c", "reference": "r", "candidate": ""},
        ],
    )
    got = read_pairs(p)
    assert got.empty_ids == ["b", "c"]
    assert len(got.pairs) == 3


def test_empty_files(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("", encoding="utf-8")
    assert _error(p) == f"{p}: empty file (no header row)"
    p.write_text("id,reference,candidate\n\n", encoding="utf-8")
    assert _error(p) == f"{p}: no data rows"
    q = tmp_path / "p.jsonl"
    q.write_text("\n\n", encoding="utf-8")
    assert _error(q) == f"{q}: no data rows"


def test_write_scores_csv_round_trips_full_precision(tmp_path):
    out = tmp_path / "s.csv"
    values = [0.1 + 0.2, 1e-300, math.nan, 2 / 3, None, -0.0]
    write_scores_csv(out, [f"id{i}" for i in range(6)], {"k1": values, "k2": [1.0] * 6})
    with out.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["id", "k1", "k2"]
    back = [float(r[1]) for r in rows[1:]]
    for a, b in zip(values, back, strict=True):
        if a is None or math.isnan(a):
            assert math.isnan(b)
        else:
            assert a == b
    assert rows[1][1] == repr(0.1 + 0.2)
    assert os.listdir(tmp_path) == ["s.csv"]


def test_write_scores_csv_never_leaves_a_partial_file(tmp_path):
    out = tmp_path / "s.csv"
    out.write_text("previous complete file\n", encoding="utf-8")

    class Bad:
        def __float__(self):
            raise ValueError("broken value")

    ids = [str(i) for i in range(1000)]
    col = [0.5] * 999 + [Bad()]
    with pytest.raises(ValueError, match="not a number"):
        write_scores_csv(out, ids, {"k": col})
    assert out.read_text(encoding="utf-8") == "previous complete file\n"
    assert os.listdir(tmp_path) == ["s.csv"]  # no temporary file left behind
    with pytest.raises(ValueError, match="has 2 values for 1000 ids"):
        write_scores_csv(out, ids, {"k": [1.0, 2.0]})
    with pytest.raises(FileNotFoundError):
        write_scores_csv(tmp_path / "no" / "s.csv", ["a"], {"k": [1.0]})


def test_write_scores_csv_neutralises_formula_ids_but_not_numbers(tmp_path):
    """OWASP CSV injection: text cells starting with = + - @ tab CR get a leading quote;
    numbers stay numbers, negative ones included."""
    out = tmp_path / "s.csv"
    ids = ["=HYPERLINK(\"http://x\",\"y\")", "@SUM(1)", "-1+2", "+1", "\tx", "\rx", "plain"]
    write_scores_csv(out, ids, {"=k": [-0.5, -1e-9, 0.25, -math.inf, None, 1.0, -2.0]})
    with out.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["id", "'=k"]
    assert [r[0] for r in rows[1:]] == ["'" + i for i in ids[:-1]] + ["plain"]
    assert [r[1] for r in rows[1:]] == ["-0.5", "-1e-09", "0.25", "-inf", "nan", "1.0",
                                        "-2.0"]


def test_deeply_nested_jsonl_is_refused_before_parsing(tmp_path):
    f = tmp_path / "deep.jsonl"
    ok = {"id": "a", "reference": "R.", "candidate": "C."}
    f.write_text(json.dumps(ok) + "\n"
                 + '{"id": "b", "reference": "R.", "candidate": "C.", "x": '
                 + "[" * 100_000 + "]" * 100_000 + "}\n", encoding="utf-8")
    with pytest.raises(ScoreInputError) as info:
        read_pairs(f)
    assert str(info.value) == f"{f}: line 2: nesting deeper than 32 levels"
    # 32 levels (brackets inside strings do not count) are accepted.
    f.write_text(json.dumps({**ok, "x": json.loads("[" * 31 + "]" * 31), "y": "[" * 40})
                 + "\n", encoding="utf-8")
    assert [p.id for p in read_pairs(f).pairs] == ["a"]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("reference", {"text": "R."}, "field 'reference': expected text, got object"),
        ("candidate", ["C."], "field 'candidate': expected text, got array"),
        ("candidate", 3, "field 'candidate': expected text, got number"),
        ("reference", True, "field 'reference': expected text, got boolean"),
        ("reference", None, "field 'reference': expected text, got null"),
        ("id", 1.5, "field 'id': expected text, got number"),
        ("source", ["a"], "field 'source': expected text, got array"),
        ("case_id", {"a": 1}, "field 'case_id': expected text, got object"),
        ("image", 7, "field 'image': expected ';'-separated paths or a list, got number"),
        ("image", ["a.png", 3], "field 'image[1]': expected text, got number"),
        # The checks import-pairs makes hold here too (one reader).
        ("reference", "No\x00 effusion.", "field 'reference': contains a NUL character"),
        ("source", "g" * 129, "field 'source': longer than 128 characters"),
        ("id", "i" * 129, "field 'id': longer than 128 characters"),
        ("case_id", "c" * 129, "field 'case_id': longer than 128 characters"),
    ],
)
def test_non_text_values_are_refused(tmp_path, field, value, expected):
    f = tmp_path / "p.jsonl"
    rec = {"id": "a", "reference": "R.", "candidate": "C.", field: value}
    f.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    with pytest.raises(ScoreInputError) as info:
        read_pairs(f)
    assert str(info.value) == f"{f}: line 1, {expected}"
    assert isinstance(info.value, InvalidInput)
