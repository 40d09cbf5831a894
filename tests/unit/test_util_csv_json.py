"""Formula-safe CSV cells and bounded JSON nesting (backend.util)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from radconcord.backend.util import (
    MAX_JSON_DEPTH,
    SafeCsvWriter,
    csv_safe,
    csv_unescape,
    json_too_deep,
    records_to_csv,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('=HYPERLINK("http://x","y")', '\'=HYPERLINK("http://x","y")'),
        ("@SUM(1)", "'@SUM(1)"),
        ("-1+2", "'-1+2"),
        ("+1", "'+1"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("-0.5", "'-0.5"),  # text that looks like a number is still text
        ("No effusion.", "No effusion."),
        (" =1", " =1"),
        ("", ""),
        (-0.5, -0.5),
        (-3, -3),
        (None, None),
        (True, True),
    ],
)
def test_csv_safe_prefixes_text_only(value, expected):
    assert csv_safe(value) == expected
    if isinstance(value, str):
        assert csv_unescape(csv_safe(value)) == value


def test_csv_unescape_leaves_other_quotes_alone():
    assert csv_unescape("'tis clear.") == "'tis clear."
    assert csv_unescape("'") == "'"
    assert csv_unescape("''=x") == "''=x"


def test_safe_writer_matches_csv_writer_on_ordinary_rows_and_quotes_lone_cr():
    rows = [["id", "text", "n"], ["a", 'He said "no", twice', 1.5], ["b", "line\nbreak", -2]]
    for terminator in ("\n", "\r\n"):
        plain, safe = io.StringIO(newline=""), io.StringIO(newline="")
        csv.writer(plain, lineterminator=terminator).writerows(rows)
        SafeCsvWriter(safe, lineterminator=terminator).writerows(rows)
        assert safe.getvalue() == plain.getvalue()
    out = io.StringIO(newline="")
    SafeCsvWriter(out).writerows([["x", "a\rb", "=1"], ["y", "\rz", -0.25]])
    assert out.getvalue() == 'x,"a\rb",\'=1\ny,"\'\rz",-0.25\n'
    assert list(csv.reader(io.StringIO(out.getvalue(), newline=""))) == [
        ["x", "a\rb", "'=1"], ["y", "'\rz", "-0.25"]]


def test_records_to_csv_for_downloads():
    text = records_to_csv([{"Case": "=cmd|' /C calc'!A0", "Value": -0.5},
                           {"Case": "c2", "Other": None}])
    assert text == "Case,Value,Other\n'=cmd|' /C calc'!A0,-0.5,\nc2,,\n"
    assert records_to_csv([], ["A", "B"]) == "A,B\n"


def test_json_depth_limit_counts_brackets_outside_strings():
    assert MAX_JSON_DEPTH == 32
    at_limit = "[" * 32 + "]" * 32
    assert not json_too_deep(at_limit)
    assert json_too_deep("[" * 33 + "]" * 33)
    assert json_too_deep('{"a": ' * 33 + "1" + "}" * 33)
    # Brackets inside strings, escaped quotes included, are text.
    text = json.dumps({"t": 'say \\"[[[' + "[" * 100 + '"', "u": "{" * 40})
    assert not json_too_deep(text)
    assert json_too_deep(json.dumps({"t": '"\\'})[:-1] + ', "x": ' + "[" * 40 + "]" * 40 + "}")
    # Unbalanced or invalid text is left to the parser to report.
    assert not json_too_deep("]" * 100 + "[" * 10)


def test_json_depth_follows_escapes_like_a_json_lexer():
    deep = json.loads("[" * 32 + "]" * 32)  # 32 levels; inside an object: 33
    for tricky in ("a\\", 'q"', '\\"', "\\\\", 'end\\"\\'):
        line = json.dumps({"t": tricky, "x": deep, "u": "]]]]" * 10})
        assert json_too_deep(line), tricky
        line = json.dumps({"t": tricky, "x": deep[0], "u": "[[[[" * 10})
        assert not json_too_deep(line), tricky
        json.loads(line)
