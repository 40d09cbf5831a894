"""Strict import: the layout is chosen or detected only when unambiguous, unknown columns are
refused by name (with the column each looks like), a dry run writes nothing, errors of an
import on the worker name the uploaded files, and ``import-pairs`` prints layout, preview and
progress."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from radconcord.backend import cli
from radconcord.backend.datasets.pairs import parse_cases, read_cases
from radconcord.backend.errors import InvalidInput
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services import job_inputs
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor
from radconcord.db.models import Case, Image, Job, Pair, Report, Study

ADMIN = Actor.system()
TYPO = ("case_id,reference,candidat,source\n"
        "c1,No effusion.,Small effusion.,gen-A\n"
        "c2,Normal heart.,Cardiomegaly.,gen-B\n")


def _counts(db) -> dict[str, int]:
    with db.read() as s:
        return {m.__name__: s.scalar(select(func.count()).select_from(m))
                for m in (Study, Case, Report, Pair, Image, Job)}


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _png(path: Path) -> Path:
    PILImage.fromarray(np.full((8, 8), 100, np.uint8)).save(path)
    return path


def test_a_misspelt_candidate_column_is_refused_naming_column_and_file(db, tmp_path, capsys):
    """Before: a study with a generator called 'candidat' and the 'source' column dropped."""
    f = _write(tmp_path / "typo cases.csv", TYPO)
    with pytest.raises(InvalidInput) as err:
        parse_cases(f)
    message = str(err.value)
    assert message.startswith(f"{f}: header: column 'source' belongs to the long layout")
    assert "unknown column(s) 'candidat' (did you mean 'candidate'?)" in message
    # The same file through the command: one line naming the file, nothing created.
    before = _counts(db)
    code = cli.main(["import-pairs", "--input", str(f), "--study", "typo"])
    out = capsys.readouterr()
    assert code == 2 and out.err.startswith("error: ") and "typo cases.csv" in out.err
    assert "'candidat' (did you mean 'candidate'?)" in out.err
    assert _counts(db) == before


@pytest.mark.parametrize(("header", "expected"), [
    # Without source: it would have become a generator named 'candidat'.
    ("case_id,reference,candidat",
     "header: unknown column(s) 'candidat' (did you mean 'candidate'?); without a 'candidate' "
     "column every other column would become a generator"),
    # Long file with a stray column: refused, never silently dropped.
    ("case_id,reference,candidate,source,Sourse",
     "header: unknown column(s) 'Sourse' (did you mean 'source'?); the long layout takes"),
    ("case_id,reference,Candidate,source",
     "unknown column(s) 'Candidate' (did you mean 'candidate'?)"),
])
def test_unknown_columns_are_named_with_a_suggestion(tmp_path, header, expected):
    n = header.count(",") + 1
    f = _write(tmp_path / "c.csv", header + "\n" + ",".join(["c1"] + ["Text."] * (n - 1)) + "\n")
    with pytest.raises(InvalidInput, match=re.escape(expected)):
        parse_cases(f)


def test_layout_is_detected_only_when_unambiguous_and_can_be_chosen(tmp_path):
    wide = _write(tmp_path / "wide.csv", "case_id,reference,gen-A,gen-B\nc1,R.,A.,B.\n")
    long = _write(tmp_path / "long.csv",
                  "case_id,reference,candidate,source\nc1,R.,A.,gen-A\nc1,R.,B.,gen-B\n")
    detected = read_cases(wide)
    assert detected.layout == "wide"
    assert detected.layout_reason == ("no 'candidate' column, so every other column is a "
                                      "generator: gen-A, gen-B")
    assert [(c.source, c.text) for c in detected.cases[0].candidates] == [
        ("gen-A", "A."), ("gen-B", "B.")]
    assert read_cases(long).layout == "long"
    assert read_cases(long, layout="long").layout_reason == "chosen"
    # The explicit layout must fit the columns.
    with pytest.raises(InvalidInput, match=r"wide layout: column\(s\) 'candidate', 'source' "
                                           r"belong to the long layout"):
        read_cases(long, layout="wide")
    with pytest.raises(InvalidInput, match=r"long layout: missing column 'candidate'; "
                                           r"unknown column\(s\) 'gen-A', 'gen-B'"):
        read_cases(wide, layout="long")
    with pytest.raises(InvalidInput, match="layout must be one of auto, long, wide"):
        read_cases(wide, layout="tall")
    # Wide chosen explicitly still refuses a generator column that is a misspelt name.
    typo = _write(tmp_path / "w2.csv", "case_id,refrence,reference,gen-A\nc1,x,R.,A.\n")
    with pytest.raises(InvalidInput, match=r"wide layout: column\(s\) 'refrence' \(did you "
                                           r"mean 'reference'\?\) look like misspelt"):
        read_cases(typo, layout="wide")


def test_a_jsonl_export_re_imports_with_its_bookkeeping_columns_ignored(tmp_path):
    f = tmp_path / "pairs.jsonl"
    f.write_text(json.dumps({"position": 0, "pair_id": "ab12", "case_id": "c1",
                             "reference": "R.", "candidate": "C.", "source": "gen-A",
                             "images": [], "input_hash": "0" * 64}) + "\n", encoding="utf-8")
    parsed = read_cases(f)
    assert parsed.layout == "long" and parsed.ignored == ("position", "pair_id", "input_hash")
    assert [(c.source, c.text) for c in parsed.cases[0].candidates] == [("gen-A", "C.")]


def test_dry_run_reports_everything_and_writes_nothing(db, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _png(folder / "c1.png")
    f = _write(folder / "cases.csv",
               "case_id,reference,candidate,source,images\n"
               "c1,R1.,A1.,gen-A,c1.png\n"
               "c1,R1.,B1.,gen-B,\n"
               "c2,R2.,A2.,gen-A,gone.png;also gone.png\n"
               "c3,R3.,A3.,gen-A,\n")
    before = _counts(db)
    files_before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    preview = imports.preview_import(db, ADMIN, study_name="Dry", cases_file=f,
                                     file_name="my cases.csv")
    assert _counts(db) == before
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == files_before
    assert (preview.file, preview.layout, preview.n_cases, preview.n_pairs) == (
        "my cases.csv", "long", 3, 4)
    assert preview.sources == {"gen-A": 3, "gen-B": 1}
    assert preview.n_images == 1 and preview.n_cases_without_images == 2
    assert preview.missing_images == ("row 3 (line 4): gone.png", "row 3 (line 4): also gone.png")
    assert preview.problems == ("2 image file(s) listed in the file are missing",)
    assert not preview.ok
    assert "2 of 3 cases have no image" in preview.warnings
    lines = imports.preview_lines(preview)
    assert lines[0] == "dry run of my cases.csv -> study 'Dry': nothing was written"
    assert "sources: gen-A (3), gen-B (1)" in lines
    assert "missing image: row 3 (line 4): gone.png" in lines
    assert lines[-1] == "the import would be refused: fix the problems above"
    # A taken name is a problem too; a good file with a free name is ready.
    ok = _write(folder / "ok.csv", "case_id,reference,gen-A\nc1,R.,A.\n")
    assert imports.preview_import(db, ADMIN, study_name="Fine", cases_file=ok).ok
    imports.import_cases(db, ADMIN, study_name="Fine", cases=parse_cases(ok))
    taken = imports.preview_import(db, ADMIN, study_name="Fine", cases_file=ok)
    assert taken.problems == ("study 'Fine' already exists; choose another name",)


def test_import_pairs_dry_run_prints_the_preview_and_writes_nothing(db, tmp_path, capsys):
    f = _write(tmp_path / "wide.csv", "case_id,reference,gen-A,gen-B\nc1,R.,A.,B.\nc2,S.,C.,\n")
    before = _counts(db)
    code = cli.main(["import-pairs", "--input", str(f), "--study", "W", "--dry-run"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and _counts(db) == before
    assert out == [
        "dry run of wide.csv -> study 'W': nothing was written",
        "layout: wide (detected: no 'candidate' column, so every other column is a generator: "
        "gen-A, gen-B)",
        "cases: 2",
        "pairs: 3",
        "sources: gen-A (2), gen-B (1)",
        "images found: 0; missing: 0; cases without an image: 2",
        "ready to import",
    ]
    # The real import prints the layout and its progress (plain lines off a terminal).
    code = cli.main(["import-pairs", "--input", str(f), "--study", "W", "--layout", "wide"])
    captured = capsys.readouterr()
    assert code == 0 and "study 'W': 3 pairs, 2 cases" in captured.out
    assert "layout: wide\n" in captured.err
    assert re.search(r"import W: 3/3 pairs", captured.err)
    assert _counts(db)["Pair"] == 3


def test_a_worker_import_error_names_the_uploaded_file_not_the_server_path(db):
    folder = job_inputs.new_upload_dir()
    _write(folder / "cases.csv", "case_id,reference,candidate,images\nc1,R.,C.,scan.png\n")
    _png(folder / "scan.png")
    job = imports.enqueue_import(
        db, ADMIN, fmt="cases", study_name="Via worker", upload_dir=folder,
        cases_file=folder / "cases.csv", layout="long",
        file_names={folder / "cases.csv": "my upload.csv", folder / "scan.png": "scan.png"})
    assert job.params["layout"] == "long"
    # The image goes bad after the page checked it (a late failure, in the worker).
    (folder / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n not a png")
    done = Worker(db).run_once()
    assert done.status == "failed"
    assert "scan.png" in done.error and str(folder) not in done.error
    assert "uploads/" not in done.error, done.error
    assert _counts(db)["Study"] == 0
