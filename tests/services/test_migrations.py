"""The Alembic migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from radconcord.db.models import Base
from radconcord.db.session import make_engine, upgrade


def test_migrated_schema_matches_the_models(any_db):
    """``any_db`` was created by running every migration (``Database(migrate=True)``)."""
    with any_db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request, tmp_path) -> Iterator[str]:
    """The URL of an empty database (no schema) on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    server = request.getfixturevalue("pg_server")
    name = f"m_{uuid.uuid4().hex[:16]}"
    yield server.create_database(name)
    server.drop_database(name)


def test_0003_gives_each_study_its_own_copy_of_a_shared_case(empty_url):
    """Before 0003 a case was global: two studies' pairs could point at one case row.

    The migration must leave each study its own case (same external id, images, reports),
    keep every pair's texts, and leave no foreign key broken (SQLite copies the table).
    """
    engine = make_engine(empty_url)
    upgrade(engine, "0002")
    t = {name: sa.table(name, *cols) for name, cols in {
        "cases": (sa.column("id"), sa.column("external_id"), sa.column("created_at")),
        "studies": (sa.column("id"), sa.column("name"), sa.column("description"),
                    sa.column("scheme"), sa.column("raters_per_pair"), sa.column("seed"),
                    sa.column("status"), sa.column("provenance"), sa.column("created_at")),
        "images": (sa.column("id"), sa.column("case_id"), sa.column("path"),
                   sa.column("format"), sa.column("view"), sa.column("sha256"),
                   sa.column("width"), sa.column("height"), sa.column("meta")),
        "reports": (sa.column("id"), sa.column("case_id"), sa.column("role"),
                    sa.column("source"), sa.column("text"), sa.column("created_at")),
        "pairs": (sa.column("id"), sa.column("study_id"), sa.column("case_id"),
                  sa.column("reference_id"), sa.column("candidate_id"), sa.column("source"),
                  sa.column("opaque_id"), sa.column("position"), sa.column("input_hash")),
    }.items()}
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with engine.begin() as conn:
        conn.execute(sa.insert(t["cases"]), [{"id": 1, "external_id": "c1", "created_at": now}])
        conn.execute(sa.insert(t["studies"]), [
            {"id": sid, "name": f"s{sid}", "description": "", "scheme": "rexval",
             "raters_per_pair": 1, "seed": 0, "status": "open", "provenance": "{}",
             "created_at": now} for sid in (1, 2)])
        conn.execute(sa.insert(t["images"]), [
            {"id": 1, "case_id": 1, "path": "images/a.png", "format": "png", "view": "PA",
             "sha256": "a" * 64, "width": 4, "height": 4, "meta": "{}"}])
        conn.execute(sa.insert(t["reports"]), [
            {"id": rid, "case_id": 1, "role": role, "source": src, "text": text,
             "created_at": now}
            for rid, role, src, text in [(1, "reference", None, "ref"),
                                         (2, "candidate", "g1", "cand one"),
                                         (3, "candidate", "g2", "cand two")]])
        conn.execute(sa.insert(t["pairs"]), [
            {"id": 1, "study_id": 1, "case_id": 1, "reference_id": 1, "candidate_id": 2,
             "source": "g1", "opaque_id": "p1", "position": 0, "input_hash": "h1"},
            {"id": 2, "study_id": 2, "case_id": 1, "reference_id": 1, "candidate_id": 3,
             "source": "g2", "opaque_id": "p2", "position": 0, "input_hash": "h2"}])
        if engine.dialect.name == "postgresql":  # explicit ids do not advance the sequences
            for name in t:
                conn.execute(sa.text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                                     f"(SELECT max(id) FROM {name}))"))
    upgrade(engine)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT p.opaque_id, p.study_id, c.study_id, c.external_id, r.text, k.text, "
            "r.case_id = c.id, k.case_id = c.id FROM pairs p JOIN cases c ON c.id = p.case_id "
            "JOIN reports r ON r.id = p.reference_id JOIN reports k ON k.id = p.candidate_id "
            "ORDER BY p.opaque_id")).all()
        images = conn.execute(sa.text(
            "SELECT c.study_id, i.path FROM images i JOIN cases c ON c.id = i.case_id "
            "ORDER BY c.study_id")).all()
    assert [tuple(r) for r in rows] == [
        ("p1", 1, 1, "c1", "ref", "cand one", True, True),
        ("p2", 2, 2, "c1", "ref", "cand two", True, True),
    ]
    assert [tuple(r) for r in images] == [(1, "images/a.png"), (2, "images/a.png")]
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    engine.dispose()


def test_0004_keeps_every_scoring_job_as_a_score_job(empty_url):
    """scoring_jobs rows become jobs of kind 'score' with the same id, state and inputs, and
    new jobs get ids after them (PostgreSQL's sequence follows)."""
    engine = make_engine(empty_url)
    upgrade(engine, "0003")
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    old = sa.table("scoring_jobs", *[sa.column(c) for c in (
        "id", "study_id", "metrics", "options", "status", "progress_done", "progress_total",
        "message", "error", "worker_id", "attempts", "heartbeat_at", "created_at",
        "started_at", "finished_at")])
    with engine.begin() as conn:
        conn.execute(sa.insert(old), [
            {"id": 7, "study_id": None, "metrics": '["bleu4", "rougeL"]',
             "options": '{"bleu": {"smooth": "none"}}', "status": "done", "progress_done": 5,
             "progress_total": 5, "message": "ok", "error": None, "worker_id": "w1",
             "attempts": 1, "heartbeat_at": now, "created_at": now, "started_at": now,
             "finished_at": now}])
    upgrade(engine)
    from radconcord.db.models import Job
    from radconcord.db.session import make_sessionmaker

    with make_sessionmaker(engine).begin() as s:
        job = s.get(Job, 7)
        assert (job.kind, job.status, job.progress_done, job.attempts, job.worker_id) == (
            "score", "done", 5, 1, "w1")
        assert job.params == {"metrics": ["bleu4", "rougeL"],
                              "options": {"bleu": {"smooth": "none"}}}
        new = Job(kind="score", params={})
        s.add(new)
        s.flush()
        assert new.id > 7
    assert "scoring_jobs" not in sa.inspect(engine).get_table_names()
    engine.dispose()


def test_0005_gives_old_assignments_version_0_and_old_studies_empty_settings(empty_url):
    """Rows written before 0005 get ``version`` 0 and ``settings`` {} (not NULL), so the
    first versioned save of an old assignment and the settings reader both work."""
    engine = make_engine(empty_url)
    upgrade(engine, "0004")
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO users (id, username, display_name, role, password_hash, active, "
            "must_change_password, created_at) VALUES (1, 'r1', '', 'rater', 'x', :t, :f, :now)"),
            {"t": True, "f": False, "now": now})
        conn.execute(sa.text(
            "INSERT INTO studies (id, name, description, scheme, raters_per_pair, seed, "
            "status, provenance, created_at) VALUES (1, 's', '', 'rexval', 1, 0, 'open', "
            "'{}', :now)"), {"now": now})
        conn.execute(sa.text(
            "INSERT INTO cases (id, study_id, external_id, created_at) VALUES (1, 1, 'c', :now)"),
            {"now": now})
        conn.execute(sa.text(
            "INSERT INTO reports (id, case_id, role, text, created_at) VALUES "
            "(1, 1, 'reference', 'a', :now), (2, 1, 'candidate', 'b', :now)"), {"now": now})
        conn.execute(sa.text(
            "INSERT INTO pairs (id, study_id, case_id, reference_id, candidate_id, source, "
            "opaque_id, position, input_hash) VALUES (1, 1, 1, 1, 2, 's', 'o', 0, 'h')"))
        conn.execute(sa.text(
            "INSERT INTO assignments (id, study_id, rater_id, pair_id, order_index, "
            "active_seconds, last_active_at) VALUES (1, 1, 1, 1, 0, 245.0, :now)"),
            {"now": now})
    upgrade(engine)
    from radconcord.db.models import Assignment, Study
    from radconcord.db.session import make_sessionmaker

    with make_sessionmaker(engine).begin() as s:
        assert s.get(Study, 1).settings == {}
        old = s.get(Assignment, 1)
        # The old gap-capped time on task was ~4x too high: reset, not kept beside spans.
        assert (old.version, old.active_seconds, old.last_active_at) == (0, 0.0, None)
    cols = {c["name"]: c for c in sa.inspect(engine).get_columns("assignments")}
    assert cols["version"]["nullable"] is False
    assert "activity_spans" in sa.inspect(engine).get_table_names()
    engine.dispose()


def test_0007_gives_old_judgements_no_time_and_adds_their_spans(empty_url):
    """A judgement made before 0007 had no time recorded: it gets 0 seconds and no last
    activity (not NULL), and ``judgement_spans`` exists."""
    engine = make_engine(empty_url)
    upgrade(engine, "0006")
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO users (id, username, display_name, role, password_hash, active, "
            "must_change_password, created_at) VALUES (1, 'r1', '', 'rater', 'x', :t, :f, :now)"),
            {"t": True, "f": False, "now": now})
        conn.execute(sa.text(
            "INSERT INTO studies (id, name, description, scheme, raters_per_pair, seed, "
            "status, provenance, created_at, settings) VALUES (1, 's', '', 'rexval', 1, 0, "
            "'open', '{}', :now, '{}')"), {"now": now})
        conn.execute(sa.text(
            "INSERT INTO cases (id, study_id, external_id, created_at) VALUES (1, 1, 'c', :now)"),
            {"now": now})
        conn.execute(sa.text(
            "INSERT INTO reports (id, case_id, role, text, created_at) VALUES "
            "(1, 1, 'reference', 'a', :now), (2, 1, 'candidate', 'b', :now), "
            "(3, 1, 'candidate', 'c', :now)"), {"now": now})
        conn.execute(sa.text(
            "INSERT INTO pairs (id, study_id, case_id, reference_id, candidate_id, source, "
            "opaque_id, position, input_hash, kind) VALUES (1, 1, 1, 1, 2, 's', 'o1', 0, 'h', "
            "'study'), (2, 1, 1, 1, 3, 't', 'o2', 1, 'i', 'study')"))
        conn.execute(sa.text(
            "INSERT INTO comparisons (id, study_id, pair_a_id, pair_b_id, position, opaque_id, "
            "meta) VALUES (1, 1, 1, 2, 0, 'cmp', '{}')"))
        conn.execute(sa.text(
            "INSERT INTO judgements (id, rater_id, comparison_id, order_index, preference, "
            "rating_a, rating_b, completed_at, version, updated_at) VALUES (1, 1, 1, 0, 'A', "
            "4, 2, :now, 3, :now)"), {"now": now})
    upgrade(engine)
    from radconcord.db.models import Judgement
    from radconcord.db.session import make_sessionmaker

    with make_sessionmaker(engine).begin() as s:
        old = s.get(Judgement, 1)
        assert (old.preference, old.version, old.active_seconds, old.last_active_at) == (
            "A", 3, 0.0, None)
    assert "judgement_spans" in sa.inspect(engine).get_table_names()
    engine.dispose()


def test_0010_makes_every_old_image_a_film(empty_url):
    """Images stored before 0010 were all 2-D films: they get ``kind`` 'film' (not NULL),
    and a volume row can be written after it."""
    engine = make_engine(empty_url)
    upgrade(engine, "0009")
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO studies (id, name, description, scheme, raters_per_pair, seed, "
            "status, provenance, created_at, settings) VALUES (1, 's', '', 'rexval', 1, 0, "
            "'open', '{}', :now, '{}')"), {"now": now})
        conn.execute(sa.text(
            "INSERT INTO cases (id, study_id, external_id, created_at) VALUES (1, 1, 'c', :now)"),
            {"now": now})
        conn.execute(sa.text(
            "INSERT INTO images (id, case_id, path, format, sha256, meta) VALUES "
            "(1, 1, 'images/a.png', 'png', 'a', '{}'), (2, 1, 'images/b.dcm', 'dicom', 'b', "
            "'{}')"))
    upgrade(engine)
    from radconcord.db.models import Image
    from radconcord.db.session import make_sessionmaker

    with make_sessionmaker(engine).begin() as s:
        assert [(i.id, i.kind) for i in s.query(Image).order_by(Image.id)] == [
            (1, "film"), (2, "film")]
        s.add(Image(id=3, case_id=1, path="volumes/v", format="volume", kind="volume",
                    sha256="c",
                    meta={"volume": {"shape": [3, 4, 5], "spacing": [2.5, 0.7, 0.7]}}))
    with make_sessionmaker(engine).begin() as s:
        vol = s.query(Image).filter(Image.kind == "volume").one()
        assert vol.meta["volume"]["shape"] == [3, 4, 5]
    cols = {c["name"]: c for c in sa.inspect(engine).get_columns("images")}
    assert cols["kind"]["nullable"] is False
    engine.dispose()
