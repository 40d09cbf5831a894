"""Bad input files give the one-line ``error: ...`` and change nothing (issue 10).

Each case runs the real command (``python -m backend import-pairs``/``import-rexval``/``score``
in process) against a fresh SQLite database and asserts the exact message, exit status 2, and
that no study, case, report or stored image file was created.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from radconcord.backend.cli import main
from radconcord.backend.datasets import rexval
from radconcord.db.models import Case, Image, Pair, Report, Study, User
from radconcord.db.session import Database

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "rexval_mini"
GT, RATINGS = rexval.GT_FILENAME, rexval.RATINGS_FILENAME
ROW = {"case_id": "c1", "reference": "No effusion.", "candidate": "Small effusion."}


@pytest.fixture
def env(tmp_path, monkeypatch) -> Path:
    """Data folder and database in ``tmp_path``; the database is migrated before the run."""
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{data / 'radconcord.db'}")
    Database().dispose()  # migrate now, so the counts below read real, empty tables
    return tmp_path


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def _assert_nothing_saved(env: Path) -> None:
    db = Database()
    try:
        with db.begin() as s:
            for model in (Study, Case, Report, Pair, Image, User):
                assert s.scalar(select(func.count()).select_from(model)) == 0, model.__name__
    finally:
        db.dispose()
    images = env / "data" / "images"
    assert not images.exists() or not any(images.iterdir())


def _png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.fromarray(np.zeros((8, 8), np.uint8)).save(path)
    return path


def _jsonl(path: Path, *records: dict | str) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# Each case: (file name, writer(tmp) -> extra CLI args, expected message after "<file>: ").
Writer = Callable[[Path], list[str]]


def _unclosed_quote(f: Path) -> list[str]:
    f.write_text('case_id,reference,candidate\nc1,"Unclosed quote,Cand.\n', encoding="utf-8")
    return []


def _nul_byte(f: Path) -> list[str]:
    f.write_text("case_id,reference,candidate\nc1,R.,C.\nc2,R\x00.,C.\n", encoding="utf-8")
    return []


def _missing_column(f: Path) -> list[str]:
    f.write_text("case_id,candidate\nc1,Cand.\n", encoding="utf-8")
    return []


def _deep_jsonl(f: Path) -> list[str]:
    _jsonl(f, ROW, '{"case_id": "c2", "reference": "R.", "candidate": "C.", "x": '
           + "[" * 100_000 + "]" * 100_000 + "}")
    return []


def _object_case_id(f: Path) -> list[str]:
    _jsonl(f, {**ROW, "case_id": {"name": "c1"}})
    return []


def _list_candidate(f: Path) -> list[str]:
    _jsonl(f, {**ROW, "candidate": ["Small", "effusion."]})
    return []


def _number_source(f: Path) -> list[str]:
    _jsonl(f, ROW, {**ROW, "source": 1.5})
    return []


def _null_reference(f: Path) -> list[str]:
    _jsonl(f, {**ROW, "reference": None})
    return []


def _absolute_case_id(f: Path) -> list[str]:
    images = f.parent / "images"
    images.mkdir()
    f.write_text("case_id,reference,candidate\n/etc/passwd,R.,C.\n", encoding="utf-8")
    return ["--images", str(images)]


def _escaping_case_id(f: Path) -> list[str]:
    images = f.parent / "images"
    _png(f.parent / "outside" / "c1.png")
    images.mkdir()
    f.write_text("case_id,reference,candidate\nok,R.,C.\n../outside/c1,R.,C.\n",
                 encoding="utf-8")
    return ["--images", str(images)]


def _huge_field(f: Path) -> list[str]:
    big = "A" * (10 * 1024 * 1024)
    _jsonl(f, ROW, {**ROW, "case_id": "c2", "candidate": big})
    return []


def _misspelt_candidate(f: Path) -> list[str]:
    # Before: a study with a generator called "candidat" and the source column dropped.
    f.write_text("case_id,reference,candidat\nc1,R.,C.\n", encoding="utf-8")
    return []


def _stray_column(f: Path) -> list[str]:
    f.write_text("case_id,reference,candidate,source,score\nc1,R.,C.,gen,0.5\n",
                 encoding="utf-8")
    return []


def _long_file_read_wide(f: Path) -> list[str]:
    f.write_text("case_id,reference,candidate,source\nc1,R.,C.,gen\n", encoding="utf-8")
    return ["--layout", "wide"]


CASES: list[tuple[str, Writer, str]] = [
    ("misspelt.csv", _misspelt_candidate,
     "header: unknown column(s) 'candidat' (did you mean 'candidate'?); without a "
     "'candidate' column every other column would become a generator, so the layout is not "
     "clear: fix the header"),
    ("stray.csv", _stray_column,
     "header: unknown column(s) 'score'; the long layout takes case_id (or id), reference, "
     "candidate, source, images and notes"),
    ("long-as-wide.csv", _long_file_read_wide,
     "header: wide layout: column(s) 'candidate', 'source' belong to the long layout (one "
     "row per candidate); in the wide layout each generator has its own column"),
    ("unclosed.csv", _unclosed_quote,
     "row 1 (line 2): malformed CSV (unexpected end of data: a quoted field is not closed)"),
    ("nul.csv", _nul_byte, "row 2 (line 3), field 'reference': contains a NUL character"),
    ("missing.csv", _missing_column,
     "header: missing column 'reference' (found: 'case_id', 'candidate')"),
    ("deep.jsonl", _deep_jsonl, "line 2: nesting deeper than 32 levels"),
    ("object.jsonl", _object_case_id, "line 1, field 'case_id': expected text, got object"),
    ("list.jsonl", _list_candidate, "line 1, field 'candidate': expected text, got array"),
    ("number.jsonl", _number_source, "line 2, field 'source': expected text, got number"),
    ("null.jsonl", _null_reference, "line 1, field 'reference': expected text, got null"),
    ("absolute.csv", _absolute_case_id,
     "row 1 (line 2), field 'case_id': case id '/etc/passwd' cannot be looked up in the "
     "images folder: it is an absolute path"),
    ("escaping.csv", _escaping_case_id,
     "row 2 (line 3), field 'case_id': case id '../outside/c1' cannot be looked up in the "
     "images folder: it contains a path separator"),
    ("huge.jsonl", _huge_field,
     f"line 2, field 'candidate': report is {10 * 1024 * 1024} bytes; the limit is "
     "100000 bytes"),
]


@pytest.mark.parametrize(("name", "write", "expected"), CASES, ids=[c[0] for c in CASES])
def test_import_pairs_refuses_bad_files_with_one_line_and_saves_nothing(
    env, capsys, name, write, expected
):
    f = env / "input" / name
    f.parent.mkdir()
    extra = write(f)
    code, err = _run(capsys, "import-pairs", "--input", str(f), "--study", "s", *extra)
    assert (code, err) == (2, f"error: {f}: {expected}\n")
    _assert_nothing_saved(env)


def test_escaping_case_id_through_a_link_is_refused(env, capsys):
    """A plain case id whose folder is a link out of the images folder is refused too."""
    images = env / "images"
    images.mkdir()
    _png(env / "secret" / "scan.png")
    os.symlink(env / "secret", images / "c1")
    f = env / "cases.csv"
    f.write_text("case_id,reference,candidate\nc1,R.,C.\n", encoding="utf-8")
    code, err = _run(capsys, "import-pairs", "--input", str(f), "--study", "s",
                     "--images", str(images))
    assert (code, err) == (2, f"error: {f}: row 1 (line 2), field 'case_id': case id 'c1' "
                              "cannot be looked up in the images folder: its folder 'c1' "
                              "resolves outside the images folder\n")
    _assert_nothing_saved(env)


def _gt_with_candidate(env: Path, row: int, text: str) -> Path:
    """The fixture's ground-truth file with the last candidate of ``row`` replaced."""
    gt = rexval.read_gt(FIXTURE / GT)
    rows = list(gt.rows)
    rows[row] = dataclasses.replace(rows[row], candidates=(*rows[row].candidates[:-1], text))
    path = env / GT
    rexval.write_gt(path, dataclasses.replace(gt, rows=tuple(rows)))
    shutil.copy(FIXTURE / RATINGS, env / RATINGS)
    return path


def test_import_rexval_refuses_a_huge_report_and_saves_nothing(env, capsys):
    gt = _gt_with_candidate(env, 0, "x" * 100_001)
    code, err = _run(capsys, "import-rexval", "--gt", str(gt), "--ratings",
                     str(env / RATINGS), "--study", "r")
    assert (code, err) == (2, f"error: {gt}: row 0 (line 2), field 'bleu': report is 100001 "
                              "bytes; the limit is 100000 bytes\n")
    _assert_nothing_saved(env)


def test_import_rexval_refuses_a_field_over_the_csv_limit(env, capsys):
    gt = _gt_with_candidate(env, 1, "x" * (10 * 1024 * 1024))
    code, err = _run(capsys, "import-rexval", "--gt", str(gt), "--ratings",
                     str(env / RATINGS), "--study", "r")
    assert (code, err) == (2, f"error: {gt}: row 1 (line 4): a field is larger than the CSV "
                              "field limit; reports are limited to 100000 bytes\n")
    _assert_nothing_saved(env)


def test_score_refuses_deep_jsonl_with_one_line(env, capsys):
    f = _jsonl(env / "pairs.jsonl", {"id": "a", "reference": "R.", "candidate": "C."},
               '{"id": "b", "reference": "R.", "candidate": "C.", "x": '
               + "{\"k\": " * 5000 + "1" + "}" * 5000 + "}")
    out = env / "scores.csv"
    code, err = _run(capsys, "score", "--input", str(f), "--metrics", "bleu4",
                     "--output", str(out))
    assert (code, err) == (2, f"error: {f}: line 2: nesting deeper than 32 levels\n")
    assert not out.exists()
