"""Parsing case files (backend.datasets.pairs) and ReXVal's files (backend.datasets.rexval)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from radconcord.backend.datasets import rexval
from radconcord.backend.datasets.pairs import MAX_REPORT_BYTES, parse_cases
from radconcord.backend.errors import InvalidInput

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "rexval_mini"


def _png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(path)
    return path


def test_long_format_groups_rows_by_case(tmp_path):
    _png(tmp_path / "img" / "c1_pa.png")
    _png(tmp_path / "img" / "c1_lat.png")
    f = tmp_path / "cases.csv"
    f.write_text(
        "case_id,reference,candidate,source,images\n"
        'c1,"Clear lungs, no effusion.",Clear lungs.,gen-A,img/c1_pa.png;img/c1_lat.png\n'
        'c1,"Clear lungs, no effusion.",Small effusion.,gen-B,img/c1_pa.png\n'
        "c2,Cardiomegaly.,Normal heart.,,\n",
        encoding="utf-8",
    )
    cases = parse_cases(f)
    assert [c.case_id for c in cases] == ["c1", "c2"]
    assert cases[0].reference == "Clear lungs, no effusion."
    assert [(c.text, c.source) for c in cases[0].candidates] == [
        ("Clear lungs.", "gen-A"), ("Small effusion.", "gen-B")]
    assert [i.path for i in cases[0].images] == [
        (tmp_path / "img" / "c1_pa.png").resolve(), (tmp_path / "img" / "c1_lat.png").resolve()]
    assert cases[1].candidates[0].source == "unspecified"
    assert cases[1].images == []


def test_wide_format_uses_column_names_as_sources(tmp_path):
    f = tmp_path / "wide.csv"
    f.write_text("id,reference,gen-A,gen-B\nx,Ref one.,Cand A.,\ny,Ref two.,Cand A2.,Cand B2.\n")
    cases = parse_cases(f)
    assert [(c.case_id, [(k.source, k.text) for k in c.candidates]) for c in cases] == [
        ("x", [("gen-A", "Cand A.")]),
        ("y", [("gen-A", "Cand A2."), ("gen-B", "Cand B2.")]),
    ]


def test_jsonl_with_candidate_objects_and_images_folder(tmp_path):
    images = tmp_path / "pictures"
    _png(images / "a.png")
    f = tmp_path / "cases.jsonl"
    lines = [
        {"case_id": "a", "reference": "R.", "candidates": {"gen-A": "A.", "gen-B": "B."},
         "images": ["a.png"]},
        {"case_id": "b", "reference": "R2.", "candidate": "C.", "source": "gen-C"},
        {"id": "c", "reference": "R3.", "candidates": [{"text": "D.", "source": "gen-D"}]},
    ]
    f.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    cases = parse_cases(f, images_dir=images)
    assert [c.case_id for c in cases] == ["a", "b", "c"]
    assert [k.source for k in cases[0].candidates] == ["gen-A", "gen-B"]
    assert cases[0].images[0].path == (images / "a.png").resolve()
    assert cases[2].candidates[0].source == "gen-D"


def test_path_traversal_is_rejected(tmp_path):
    base = tmp_path / "data"
    base.mkdir()
    _png(tmp_path / "secret.png")
    f = base / "cases.csv"
    f.write_text("case_id,reference,candidate,images\nc1,R.,C.,../secret.png\n")
    with pytest.raises(InvalidInput, match=r"cases\.csv: row 1 \(line 2\), field 'images'.*"
                                           r"outside the allowed folder"):
        parse_cases(f)
    f.write_text(f"case_id,reference,candidate,images\nc1,R.,C.,{tmp_path / 'secret.png'}\n")
    with pytest.raises(InvalidInput, match="outside the allowed folder"):
        parse_cases(f)


def test_errors_name_file_row_and_field(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("case_id,reference,candidate\nc1,R.,C.\nc2,,C2.\n")
    with pytest.raises(InvalidInput, match=r"bad\.csv: row 2 \(line 3\), field 'reference': "
                                           "empty report"):
        parse_cases(f)
    f.write_text("case_id,reference,candidate\nc1,R.,C.\nc1,Other.,C2.\n")
    with pytest.raises(InvalidInput, match=r"row 2 \(line 3\), field 'reference': differs"):
        parse_cases(f)
    f.write_text("case_id,candidate\nc1,C.\n")
    with pytest.raises(InvalidInput, match=r"bad\.csv: header: missing column 'reference'"):
        parse_cases(f)
    f.write_text("case_id,reference,candidate,images\nc1,R.,C.,missing.png\n")
    with pytest.raises(InvalidInput, match="field 'images': no such file 'missing.png'"):
        parse_cases(f)
    f.write_text("case_id,reference,candidate\nc1,R.,C.,extra\n")
    with pytest.raises(InvalidInput, match=r"row 1 \(line 2\): 4 fields, the header has 3"):
        parse_cases(f)
    j = tmp_path / "bad.jsonl"
    j.write_text('{"case_id": "a", "reference": "R.", "candidate": "C."}\n{oops\n')
    with pytest.raises(InvalidInput, match=r"bad\.jsonl: line 2: invalid JSON"):
        parse_cases(j)


def test_huge_report_is_rejected_clearly(tmp_path):
    f = tmp_path / "huge.csv"
    big = "A" * (10 * 1024 * 1024)
    f.write_text(f"case_id,reference,candidate\nc1,R.,{big}\n")
    with pytest.raises(InvalidInput, match=rf"huge\.csv: row 1.*limited to {MAX_REPORT_BYTES}"):
        parse_cases(f)
    j = tmp_path / "huge.jsonl"
    j.write_text(json.dumps({"case_id": "c1", "reference": "R.", "candidate": big}) + "\n")
    with pytest.raises(InvalidInput, match=rf"line 1, field 'candidate': report is {len(big)} "
                                           rf"bytes; the limit is {MAX_REPORT_BYTES}"):
        parse_cases(j)


def test_non_utf8_is_rejected_with_row(tmp_path):
    f = tmp_path / "latin1.csv"
    f.write_bytes("case_id,reference,candidate\nc1,R.,C.\nc2,Épanchement.,C.\n".encode("latin-1"))
    with pytest.raises(InvalidInput, match=r"latin1\.csv: row 2 \(line 3\): not valid UTF-8"):
        parse_cases(f)


def test_utf8_bom_accepted(tmp_path):
    f = tmp_path / "bom.csv"
    f.write_bytes("\ufeffcase_id,reference,candidate\nc1,Épanchement.,C.\n".encode("utf-8"))
    assert parse_cases(f)[0].reference == "Épanchement."


def test_rexval_fixture_reads_and_writes_back_byte_identical(tmp_path):
    gt = rexval.read_gt(FIXTURE / rexval.GT_FILENAME)
    assert gt.candidate_types == rexval.CANDIDATE_TYPES
    assert len(gt.rows) == 3 and gt.index_column is None
    assert '"acute"' in gt.rows[0].candidates[3]
    ratings = rexval.read_ratings(FIXTURE / rexval.RATINGS_FILENAME, gt)
    assert len(ratings.rows) == 3 * 4 * 3 * 6 * 2
    first = ratings.rows[0]
    assert (first.study_number, first.candidate_type, first.error_category, first.rater_index,
            first.clinically_significant) == (0, "radgraph", 1, 0, False)
    rexval.write_gt(tmp_path / "gt.csv", gt)
    rexval.write_ratings(tmp_path / "r.csv", ratings)
    assert (tmp_path / "gt.csv").read_bytes() == (FIXTURE / rexval.GT_FILENAME).read_bytes()
    assert (tmp_path / "r.csv").read_bytes() == (FIXTURE / rexval.RATINGS_FILENAME).read_bytes()


def test_rexval_pandas_index_column_and_crlf_round_trip(tmp_path):
    src = tmp_path / "gt.csv"
    src.write_bytes(b',study_id,gt_report,radgraph,bleu\r\n0,s1,"R, one.",A.,B.\r\n'
                    b"1,s2,R two.,C.,D.\r\n")
    gt = rexval.read_gt(src)
    assert gt.index_column == "" and gt.line_terminator == "\r\n"
    rexval.write_gt(tmp_path / "out.csv", gt)
    assert (tmp_path / "out.csv").read_bytes() == src.read_bytes()


def _ratings_error(tmp_path: Path, line: str) -> str:
    shutil.copy(FIXTURE / rexval.GT_FILENAME, tmp_path / rexval.GT_FILENAME)
    gt = rexval.read_gt(tmp_path / rexval.GT_FILENAME)
    f = tmp_path / "ratings.csv"
    f.write_text(",".join(rexval.RATINGS_COLUMNS) + "\n0,bleu,1,0,True,1\n" + line + "\n")
    with pytest.raises(InvalidInput) as info:
        rexval.read_ratings(f, gt)
    return str(info.value)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("3,bleu,1,0,True,1", "row 1 (line 3), field 'study_number': 3 is not a row"),
        ("0,rouge,1,0,True,1", "field 'candidate_type': 'rouge' is not one of"),
        ("0,bleu,7,0,True,1", "field 'error_category': 7 not in 1..6"),
        ("0,bleu,1,0,maybe,1", "field 'clinically_significant': expected True or False"),
        ("0,bleu,1,0,True,-1", "field 'num_errors': negative"),
        ("0,bleu,1,0,True,1.5", "field 'num_errors': '1.5' is not an integer"),
        ("0,bleu,1,0,True,2", "row 1 (line 3): same cell as row 0"),
    ],
)
def test_rexval_ratings_validation(tmp_path, line, expected):
    message = _ratings_error(tmp_path, line)
    assert "ratings.csv" in message
    assert expected in message


def test_rexval_gt_validation(tmp_path):
    f = tmp_path / "gt.csv"
    f.write_text("study_id,report,radgraph\ns1,R.,A.\n")
    with pytest.raises(InvalidInput, match=r"gt\.csv: header: missing column 'gt_report'"):
        rexval.read_gt(f)
    f.write_text("study_id,gt_report,radgraph\ns1,R.,A.\ns1,R2.,B.\n")
    with pytest.raises(InvalidInput, match=r"row 1 \(line 3\), field 'study_id': 's1' repeats"):
        rexval.read_gt(f)
    f.write_text("study_id,gt_report,radgraph\ns1,,A.\n")
    with pytest.raises(InvalidInput, match="row 0 .*field 'gt_report': empty report"):
        rexval.read_gt(f)


def test_images_found_by_case_id_in_an_images_folder(tmp_path):
    """A folder organised by case id imports without listing files: <id>/ (any depth) first,
    then <id>.<ext> and <id>_*.<ext>; other files and look-alike names are ignored."""
    from pydicom.data import get_testdata_file

    images = tmp_path / "images"
    (images / "c1" / "views").mkdir(parents=True)
    shutil.copy(get_testdata_file("RG1_UNCR.dcm"), images / "c1" / "views" / "pa.dcm")
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(images / "c1" / "lateral.png")
    (images / "c1" / "notes.txt").write_text("not an image")
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(images / "c2_frontal.jpg")
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(images / "c22.png")  # not c2's
    src = tmp_path / "cases.csv"
    src.write_text(
        "case_id,reference,candidate,source\n"
        "c1,Normal.,Normal.,gen-A\n"
        "c2,Effusion.,No effusion.,gen-A\n"
        "c3,Clear.,Clear.,gen-A\n"
    )
    cases = {c.case_id: c for c in parse_cases(src, images_dir=images)}
    assert [p.path.name for p in cases["c1"].images] == ["lateral.png", "pa.dcm"]
    assert [p.path.name for p in cases["c2"].images] == ["c2_frontal.jpg"]
    assert cases["c3"].images == []


def test_explicit_image_column_wins_over_folder_lookup(tmp_path):
    images = tmp_path / "images"
    (images / "c1").mkdir(parents=True)
    for name in ("a.png", "b.png"):
        Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(images / "c1" / name)
    src = tmp_path / "cases.csv"
    src.write_text("case_id,reference,candidate,source,image\nc1,R.,C.,g,c1/b.png\n")
    (case,) = parse_cases(src, images_dir=images)
    assert [p.path.name for p in case.images] == ["b.png"]


def test_deeply_nested_jsonl_line_is_refused_without_recursion(tmp_path):
    f = tmp_path / "deep.jsonl"
    ok = {"case_id": "a", "reference": "R.", "candidate": "C."}
    f.write_text(json.dumps(ok) + "\n\n"
                 + json.dumps({**ok, "case_id": "b"})[:-1] + ', "x": '
                 + "[" * 200_000 + "]" * 200_000 + "}\n")
    with pytest.raises(InvalidInput) as info:
        parse_cases(f)
    assert str(info.value) == f"{f}: line 3: nesting deeper than 32 levels"
    # 32 levels (the object and 31 arrays) pass; brackets inside strings are text.
    f.write_text(json.dumps({**ok, "notes": json.loads("[" * 31 + "]" * 31),
                             "candidate": "[" * 50 + " C."}) + "\n")
    assert parse_cases(f)[0].candidates[0].text == "[" * 50 + " C."


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"case_id": ["a"]}, "field 'case_id': expected text, got array"),
        ({"case_id": True}, "field 'case_id': expected text, got boolean"),
        ({"case_id": 2.5}, "field 'case_id': expected text, got number"),
        ({"id": {"x": 1}, "case_id": None}, "field 'id': expected text, got object"),
        ({"reference": 12}, "field 'reference': expected text, got number"),
        ({"reference": None}, "field 'reference': expected text, got null"),
        ({"candidate": {"text": "C."}}, "field 'candidate': expected text, got object"),
        ({"source": ["gen"]}, "field 'source': expected text, got array"),
        ({"source": False}, "field 'source': expected text, got boolean"),
        ({"candidate": None, "candidates": {"gen-A": 5}},
         "field 'candidates.gen-A': expected text, got number"),
        ({"candidate": None, "candidates": [{"text": "C.", "source": {"n": 1}}]},
         "field 'candidates[0].source': expected text, got object"),
        ({"candidate": None, "candidates": "C."},
         "field 'candidates': expected an object or a list, got string"),
        ({"images": [3]}, "field 'images[0]': expected text, got number"),
        ({"images": [{"path": None}]}, "field 'images[0].path': expected text, got null"),
        ({"images": [{"path": "a.png", "view": ["PA"]}]},
         "field 'images[0].view': expected text, got array"),
        ({"images": {"path": "a.png"}},
         "field 'images': expected ';'-separated paths or a list, got object"),
        ({"reference": "No\x00 effusion."}, "field 'reference': contains a NUL character"),
    ],
)
def test_non_text_values_are_refused_naming_line_and_field(tmp_path, fields, expected):
    _png(tmp_path / "a.png")
    record = {"case_id": "c1", "reference": "R.", "candidate": "C.", **fields}
    record = {k: v for k, v in record.items() if not (k == "candidate" and v is None)}
    f = tmp_path / "cases.jsonl"
    f.write_text(json.dumps({"case_id": "c0", "reference": "R.", "candidate": "C."}) + "\n"
                 + json.dumps(record) + "\n")
    with pytest.raises(InvalidInput) as info:
        parse_cases(f)
    assert str(info.value) == f"{f}: line 2, {expected}"


def test_integer_ids_and_image_views_are_accepted(tmp_path):
    _png(tmp_path / "a.png")
    f = tmp_path / "cases.jsonl"
    f.write_text(json.dumps({"case_id": 17, "reference": "R.", "candidate": "C.", "source": 3,
                             "images": [{"path": "a.png", "view": "PA"}]}) + "\n")
    (case,) = parse_cases(f)
    assert (case.case_id, case.candidates[0].source) == ("17", "3")
    assert [(i.path.name, i.view) for i in case.images] == [("a.png", "PA")]


def test_csv_blank_cells_keep_their_meaning(tmp_path):
    """CSV cells are text: blank id/reference still give today's messages, blank sources the
    default, and whitespace around values is trimmed."""
    f = tmp_path / "cases.csv"
    f.write_text("case_id,reference,candidate,source\n  ,R.,C.,g\n")
    with pytest.raises(InvalidInput, match=r"row 1 \(line 2\), field 'case_id': missing"):
        parse_cases(f)
    f.write_text("case_id,reference,candidate,source\nc1,R.,C.,   \n c2 , R2. ,C2.,g\n")
    cases = parse_cases(f)
    assert [(c.case_id, c.reference, c.candidates[0].source) for c in cases] == [
        ("c1", "R.", "unspecified"), ("c2", "R2.", "g")]


@pytest.mark.parametrize(
    ("case_id", "reason"),
    [
        ("/etc/passwd", "it is an absolute path"),
        ("\\\\server\\share", "it is an absolute path"),
        ("sub/c1", "it contains a path separator"),
        ("sub\\c1", "it contains a path separator"),
        ("..", "it contains '..'"),
        ("c1..", "it contains '..'"),
        (".", "it is '.', the images folder itself"),
    ],
)
def test_case_ids_that_could_leave_the_images_folder_are_refused(tmp_path, case_id, reason):
    images = tmp_path / "images"
    _png(images / "c1.png")
    _png(tmp_path / "passwd.png")
    f = tmp_path / "cases.jsonl"
    f.write_text(json.dumps({"case_id": "c1", "reference": "R.", "candidate": "C."}) + "\n"
                 + json.dumps({"case_id": case_id, "reference": "R.", "candidate": "C."}) + "\n")
    with pytest.raises(InvalidInput) as info:
        parse_cases(f, images_dir=images)
    assert str(info.value) == (f"{f}: line 2, field 'case_id': case id {case_id!r} cannot be "
                               f"looked up in the images folder: {reason}")
    # Without an images folder the id names no file and is accepted as is.
    assert parse_cases(f)[1].case_id == case_id
    # With explicit images the lookup is not used, so the id is fine too.
    f.write_text(json.dumps({"case_id": case_id, "reference": "R.", "candidate": "C.",
                             "images": ["c1.png"]}) + "\n")
    assert parse_cases(f, images_dir=images)[0].images[0].path.name == "c1.png"


def test_image_links_out_of_the_images_folder_are_refused(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    _png(tmp_path / "outside.png")
    (images / "c1.png").symlink_to(tmp_path / "outside.png")
    f = tmp_path / "cases.csv"
    f.write_text("case_id,reference,candidate\nc1,R.,C.\n")
    with pytest.raises(InvalidInput) as info:
        parse_cases(f, images_dir=images)
    assert str(info.value) == (f"{f}: row 1 (line 2), field 'case_id': case id 'c1' cannot be "
                               "looked up in the images folder: image 'c1.png' resolves "
                               "outside the images folder")


def test_glob_characters_in_a_case_id_match_only_themselves(tmp_path):
    images = tmp_path / "images"
    _png(images / "c1.png")
    _png(images / "c[1].png")
    f = tmp_path / "cases.csv"
    f.write_text("case_id,reference,candidate\nc*,R.,C.\nc[1],R.,C.\n")
    cases = {c.case_id: c for c in parse_cases(f, images_dir=images)}
    assert cases["c*"].images == []
    assert [i.path.name for i in cases["c[1]"].images] == ["c[1].png"]


def test_rexval_writer_neutralises_formulas_and_reader_restores_them(tmp_path):
    """OWASP CSV injection: text cells starting with = + - @ tab CR are prefixed with ';
    reading the file back gives the original texts; numbers are not prefixed."""
    texts = ['=HYPERLINK("http://evil","click")', "@SUM(1)", "-1+2", "+33 effusion",
             "\tTab.", "\rCR first."]
    gt = rexval.GtFile(candidate_types=("=gen", "bleu"), index_column="",
                       rows=tuple(rexval.GtRow(f"s{i}", t, (t, "Plain."))
                                  for i, t in enumerate(texts)))
    rexval.write_gt(tmp_path / "gt.csv", gt)
    with open(tmp_path / "gt.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["", "study_id", "gt_report", "'=gen", "bleu"]
    assert [r[2] for r in rows[1:]] == ["'" + t for t in texts]
    assert [r[0] for r in rows[1:]] == [str(i) for i in range(len(texts))]
    back = rexval.read_gt(tmp_path / "gt.csv")
    assert back == gt
    ratings = rexval.RatingsFile((rexval.RatingRow(0, "=gen", 1, 0, True, 2),))
    rexval.write_ratings(tmp_path / "r.csv", ratings)
    assert (tmp_path / "r.csv").read_text().splitlines()[1] == "0,'=gen,1,0,True,2"
    assert rexval.read_ratings(tmp_path / "r.csv", back) == ratings


def test_jsonl_lines_end_only_at_line_feeds(tmp_path):
    """Unicode line separators inside JSON strings are text (json.dumps leaves them raw
    with ensure_ascii=False, as the JSONL export writes)."""
    text = "Line one.\u2028Line two.\x85Next\u2029end."
    f = tmp_path / "cases.jsonl"
    f.write_text(json.dumps({"case_id": "a", "reference": text, "candidate": "C."},
                            ensure_ascii=False) + "\r\n"
                 + json.dumps({"case_id": "b", "reference": "R.", "candidate": 5}) + "\n",
                 encoding="utf-8", newline="")
    with pytest.raises(InvalidInput) as info:
        parse_cases(f)
    assert str(info.value) == f"{f}: line 2, field 'candidate': expected text, got number"
    f.write_text(json.dumps({"case_id": "a", "reference": text, "candidate": "C."},
                            ensure_ascii=False) + "\n", encoding="utf-8")
    assert parse_cases(f)[0].reference == text
