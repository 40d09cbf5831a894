"""One PAIRS reader: ``score --input`` (read_pairs) and ``import-pairs`` (parse_cases) accept
and refuse a file the same way, with the same message, numbering and limits."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from radconcord.backend.datasets.pairs import parse_cases
from radconcord.backend.errors import InvalidInput
from radconcord.backend.scoring.io import read_pairs
from radconcord.backend.scoring.pairs_reader import read_records
from radconcord.backend.util import SafeCsvWriter

HEADER = "id,reference,candidate\n"
OK = {"id": "a", "reference": "R.", "candidate": "C."}


def _line(**fields) -> str:
    return json.dumps({**OK, **fields}) + "\n"


# (file name, content, message after "<file>: "); every file here has the columns both
# readers need (parse_cases takes ``id`` as the case id), so only the defect differs.
BAD: list[tuple[str, str | bytes, str]] = [
    # A quoted report spanning lines: the data row and the physical line differ, and a row
    # of blank cells or a blank line is neither counted nor refused.
    ("latin1.csv", HEADER.encode() + b'a,"Line one\nline two",C.\n,,\n\nb,Caf\xe9.,C.\n',
     "row 2 (line 6): not valid UTF-8 (byte 0xe9 at offset {offset}); save the file as UTF-8"),
    ("nul.csv", HEADER + 'a,"R\nR",C.\nb,R\x00.,C.\n',
     "row 2 (line 4), field 'reference': contains a NUL character"),
    ("count.csv", HEADER + "a,R.,C.\n\nb,R.\n", "row 2 (line 4): 2 fields, the header has 3"),
    ("quote.csv", HEADER + 'a,"R." x,C.\n', "row 1 (line 2): malformed CSV (',' expected "
                                           "after '\"')"),
    ("unclosed.csv", HEADER + 'a,R.,C.\nb,"R.,C.\n',
     "row 2 (line 3): malformed CSV (unexpected end of data: a quoted field is not closed)"),
    ("dup.csv", "id,reference,candidate,reference\na,R.,C.,R.\n",
     "header: duplicate column 'reference'"),
    ("nocol.csv", "id,candidate\na,C.\n", "header: missing column 'reference' (found: 'id', "
                                          "'candidate')"),
    ("huge.csv", HEADER + "a,R.," + "x" * 200_000 + "\n",
     "row 1 (line 2), field 'candidate': larger than the CSV field limit; reports are limited "
     "to 100000 bytes"),
    ("big.csv", HEADER + "a," + "é" * 50_001 + ",C.\n",
     "row 1 (line 2), field 'reference': report is 100002 bytes; the limit is 100000 bytes"),
    ("longid.csv", HEADER + "i" * 129 + ",R.,C.\n",
     "row 1 (line 2), field 'id': longer than 128 characters"),
    ("empty.csv", "", "empty file (no header row)"),
    ("header.csv", HEADER + "\n , , \n", "no data rows"),
    ("deep.jsonl", _line() + "\n" + '{"id": "b", "x": ' + "[" * 5000 + "]" * 5000 + "}\n",
     "line 3: nesting deeper than 32 levels"),
    ("json.jsonl", _line() + '{"id": "b",\n', "line 2: invalid JSON (Expecting property name "
                                             "enclosed in double quotes, column 12)"),
    ("array.jsonl", "[1]\n", "line 1: expected a JSON object, got array"),
    ("type.jsonl", _line() + _line(id="b", reference=["R."]),
     "line 2, field 'reference': expected text, got array"),
    ("null.jsonl", _line(candidate=None), "line 1, field 'candidate': expected text, got null"),
    ("idtype.jsonl", _line(id=2.5), "line 1, field 'id': expected text, got number"),
    ("source.jsonl", _line(source={"n": 1}), "line 1, field 'source': expected text, got object"),
    ("surrogate.jsonl", '{"id": "a", "reference": "R\\ud800.", "candidate": "C."}\n',
     "line 1, field 'reference': contains an unpaired surrogate escape"),
    ("bytes.jsonl", b'{"id": "a", "reference": "R.", "candidate": "\xff"}\n',
     "line 1: not valid UTF-8 (byte 0xff at offset {offset}); save the file as UTF-8"),
    ("image.jsonl", _line(image="../outside.png"), "line 1, field 'image': '../outside.png' "
                                                   "lies outside the allowed folder {base}"),
    ("images.jsonl", _line(images=[{"path": "a.png", "view": 3.5}]),
     "line 1, field 'images[0].view': expected text, got number"),
    ("blank.jsonl", "\n \n", "no data rows"),
]


@pytest.mark.parametrize(("name", "content", "expected"), BAD, ids=[b[0] for b in BAD])
def test_both_readers_refuse_a_bad_file_with_the_same_message(tmp_path, name, content,
                                                              expected):
    base = tmp_path / "data"
    base.mkdir()
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "outside.png")
    f = base / name
    if isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_text(content, encoding="utf-8", newline="")
    with pytest.raises(InvalidInput) as scored:
        read_pairs(f)
    with pytest.raises(InvalidInput) as imported:
        parse_cases(f)
    raw = f.read_bytes()
    offset = next((i for i, b in enumerate(raw) if b >= 0x80), None)  # the first non-ASCII
    want = f"{f}: {expected.format(base=base.resolve(), offset=offset)}"
    assert str(scored.value) == want
    assert str(imported.value) == want


def test_records_carry_row_line_and_where(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text(HEADER + '\na,"R\r\none",C.\n , ,\nb,R.,C.\n', encoding="utf-8", newline="")
    parsed = read_records(f)
    assert parsed.header == ("id", "reference", "candidate")
    assert [(r.number, r.line, r.where) for r in parsed.records] == [
        (1, 3, "row 1 (line 3)"), (2, 6, "row 2 (line 6)")]
    assert parsed.records[0].fields["reference"] == "R\r\none"
    pairs = read_pairs(f).pairs
    assert [(p.id, p.row, p.where) for p in pairs] == [("a", 3, "row 1 (line 3)"),
                                                        ("b", 6, "row 2 (line 6)")]


def test_a_file_both_readers_accept_reads_the_same(tmp_path):
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "a.png")
    f = tmp_path / "p.jsonl"
    f.write_text(_line(id=7, source=3, images=[{"path": "a.png", "view": "PA"}])
                 + _line(id="b", reference="  R2.\u2028", candidate="C2.", image="a.png"),
                 encoding="utf-8")
    pairs = read_pairs(f).pairs
    cases = parse_cases(f)
    assert [(p.id, p.source) for p in pairs] == [("7", "3"), ("b", None)]
    assert [(c.case_id, c.candidates[0].source) for c in cases] == [("7", "3"),
                                                                     ("b", "unspecified")]
    assert pairs[0].images == pairs[1].images == tuple(i.path for i in cases[0].images)
    # score keeps texts exactly (they are hashed); import-pairs strips them.
    assert (pairs[1].reference, cases[1].reference) == ("  R2.\u2028", "R2.")


def test_a_neutralised_header_cell_names_the_plain_column_in_both(tmp_path):
    """A header our CSV writer protected against spreadsheet formulas (``'=gen``) reads back
    as the column it names: the wide layout's source, and an ordinary column for score."""
    f = tmp_path / "wide.csv"
    with f.open("w", encoding="utf-8", newline="") as fh:
        writer = SafeCsvWriter(fh)
        writer.writerow(["id", "reference", "candidate", "=gen"])
        writer.writerow(["a", "R.", "C.", "C2."])
    assert f.read_text(encoding="utf-8").splitlines()[0] == "id,reference,candidate,'=gen"
    assert read_records(f).header == ("id", "reference", "candidate", "=gen")
    # A long file with an extra column is refused, naming the plain column (never dropped).
    with pytest.raises(InvalidInput, match=r"header: unknown column\(s\) '=gen'; the long"):
        parse_cases(f)
    g = tmp_path / "g.csv"
    with g.open("w", encoding="utf-8", newline="") as fh:
        writer = SafeCsvWriter(fh)
        writer.writerow(["id", "reference", "=gen"])
        writer.writerow(["a", "R.", "C2."])
    assert [(c.source, c.text) for c in parse_cases(g)[0].candidates] == [("=gen", "C2.")]


def test_only_import_pairs_caps_the_file_size(tmp_path, monkeypatch):
    import radconcord.backend.datasets.pairs as pairs_module

    f = tmp_path / "p.csv"
    f.write_text(HEADER + "a,R.,C.\n", encoding="utf-8")
    monkeypatch.setattr(pairs_module, "MAX_FILE_BYTES", 10)
    with pytest.raises(InvalidInput, match=r"p\.csv: file is 31 bytes; the limit is 10$"):
        parse_cases(f)
    assert [p.id for p in read_pairs(f).pairs] == ["a"]


def test_missing_and_unreadable_inputs(tmp_path):
    for read in (read_pairs, parse_cases):
        with pytest.raises(InvalidInput, match=r"none\.csv: file not found$"):
            read(tmp_path / "none.csv")
        with pytest.raises(InvalidInput, match=r": not a file$"):
            read(tmp_path)


def test_a_bom_is_dropped_and_crlf_lines_are_read(tmp_path):
    f = tmp_path / "p.csv"
    f.write_bytes(b"\xef\xbb\xbfid,reference,candidate\r\na,R.,C.\r\n")
    assert [(p.id, p.reference, p.where) for p in read_pairs(f).pairs] == [
        ("a", "R.", "row 1 (line 2)")]
    assert parse_cases(f)[0].case_id == "a"


def test_the_format_comes_from_the_content_without_a_known_suffix(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text(_line(), encoding="utf-8")
    assert read_records(f).format == "jsonl"
    assert [c.case_id for c in parse_cases(f)] == [p.id for p in read_pairs(f).pairs] == ["a"]
    g = tmp_path / "g.txt"
    g.write_text(HEADER + "b,R.,C.\n", encoding="utf-8")
    assert read_records(g).format == "csv"
    assert [c.case_id for c in parse_cases(g)] == [p.id for p in read_pairs(g).pairs] == ["b"]


def test_the_hugging_face_export_reads_its_jsonl_through_the_same_reader(tmp_path):
    """A damaged export (a byte that is not UTF-8) is one clear error, not a traceback."""
    from radconcord.backend.datasets.hf_export import PAIRS_FILE, RATINGS_FILE, write_hf_dataset

    src = tmp_path / "jsonl"
    src.mkdir()
    pair = {"position": 0, "pair_id": "p0", "case_id": "c0", "reference": "R.",
            "candidate": "C.", "source": "gen", "images": [], "input_hash": "h"}
    raw = (json.dumps(pair) + "\n").encode() + b'{"position": 1, "reference": "\xe9"}\n'
    (src / PAIRS_FILE).write_bytes(raw)
    (src / RATINGS_FILE).write_text("", encoding="utf-8")
    offset = raw.index(b"\xe9")
    with pytest.raises(InvalidInput) as info:
        write_hf_dataset(src, tmp_path / "hf")
    assert str(info.value) == (f"{src / PAIRS_FILE}: line 2: not valid UTF-8 (byte 0xe9 at "
                               f"offset {offset}); save the file as UTF-8")
    assert not (tmp_path / "hf").exists()
