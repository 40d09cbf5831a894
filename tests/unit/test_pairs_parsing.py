"""Parsing case files (backend.datasets.pairs) and ReXVal's files (backend.datasets.rexval)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from backend.datasets import rexval
from backend.datasets.pairs import MAX_REPORT_BYTES, parse_cases
from backend.services.errors import InvalidInput

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
