"""Imports commit in short batches into an invisible staging study that appears at once at
the end; a failed or killed import leaves nothing a user can see; cases belong to their
study (two studies with the same case id keep their own images)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select, update

from radconcord.backend.datasets import rexval
from radconcord.backend.errors import InvalidInput, NotFound
from radconcord.backend.services.annotation import images as image_service
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin import studies
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.services.study_admin.progress import study_progress
from radconcord.backend.services.transfer import exports, imports
from radconcord.backend.services.transfer.imports import (
    cleanup_stale_imports,
    import_cases,
    import_rexval,
)
from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
from radconcord.db.models import (
    STUDY_STAGING,
    Assignment,
    Case,
    Image,
    Pair,
    Rating,
    RatingEvent,
    Report,
    Study,
    User,
)

ADMIN = Actor.system()
ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "rexval_mini"
TABLES = (Study, Case, Report, Image, Pair, Assignment, Rating, RatingEvent)


@pytest.fixture(autouse=True)
def _cheap_argon2(monkeypatch):
    from argon2 import PasswordHasher

    monkeypatch.setattr(imports, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024,
                                                           parallelism=1))


def _count(db, model) -> int:
    with db.read() as s:
        return s.scalar(select(func.count()).select_from(model))


def _png(path: Path, value: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.full((12, 20), value, np.uint8)
    arr[2:5, 2:5] = 255 - value
    PILImage.fromarray(arr).save(path)
    return path


def _cases(n: int, prefix: str = "c", images: dict[int, list[Path]] | None = None):
    images = images or {}
    return [
        CaseInput(f"{prefix}{i}", f"Reference {i}: clear lungs.",
                  [CandidateInput(f"Candidate {i} A", "gen-A"),
                   CandidateInput(f"Candidate {i} B", "gen-B")],
                  [ImageInput(path=p) for p in images.get(i, [])])
        for i in range(n)
    ]


def _stored(root: Path) -> list[str]:
    folder = root / "images"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _rater(db, username: str) -> Actor:
    with db.begin() as s:
        user = User(username=username, role="rater", password_hash="x")
        s.add(user)
        s.flush()
        return Actor(user.id, username, "rater")


def test_batched_import_is_invisible_until_it_is_complete(any_db, monkeypatch):
    db = any_db
    monkeypatch.setattr(imports, "BATCH_PAIRS", 4)  # 2 cases (4 pairs) per transaction
    rater = _rater(db, "reader")
    seen: list[dict] = []
    real_write = imports._write_batch

    def observing_write(s, staging, batch, prepared):
        # A reader on its own connection, between the import's committed batches.
        with db.read() as r:
            committed = r.scalar(select(func.count(Case.id)).where(
                Case.study_id == staging.study_id))
            status = r.scalar(select(Study.status).where(Study.id == staging.study_id))
        admin_names = [x.name for x in studies.list_studies(db, ADMIN)]
        with pytest.raises(NotFound):
            studies.get_study_summary(db, ADMIN, study_name="Batched")
        with pytest.raises(NotFound):
            study_progress(db, ADMIN, study_name="Batched")
        seen.append({"committed": committed, "status": status, "admin": admin_names,
                     "rater": rating.rater_studies(db, rater)})
        return real_write(s, staging, batch, prepared)

    monkeypatch.setattr(imports, "_write_batch", observing_write)
    summary = import_cases(db, ADMIN, study_name="Batched", cases=_cases(9))
    assert (summary.n_cases, summary.n_pairs, summary.n_reports) == (9, 18, 27)
    # Five batches of at most two cases, each committed before the next began.
    assert [x["committed"] for x in seen] == [0, 2, 4, 6, 8]
    assert {x["status"] for x in seen} == {STUDY_STAGING}
    assert all(x["admin"] == [] and x["rater"] == [] for x in seen)
    [listed] = studies.list_studies(db, ADMIN)
    assert (listed.name, listed.status, listed.n_pairs) == ("Batched", "open", 18)
    assert "import_state" not in listed.provenance
    assert listed.provenance["kind"] == "cases-import"
    with db.read() as s:
        positions = s.scalars(select(Pair.position).order_by(Pair.position)).all()
    assert positions == list(range(18))


def test_import_can_end_as_draft(db):
    import_cases(db, ADMIN, study_name="Later", cases=_cases(2), status="draft")
    assert studies.get_study_summary(db, ADMIN, study_name="Later").status == "draft"
    with pytest.raises(InvalidInput, match="status must be one of"):
        import_cases(db, ADMIN, study_name="Other", cases=_cases(2), status="importing")
    assert _count(db, Study) == 1


def test_failed_import_late_in_the_file_leaves_nothing(any_db, tmp_path, monkeypatch):
    db = any_db
    monkeypatch.setattr(imports, "BATCH_PAIRS", 2)
    shared = _png(tmp_path / "in" / "shared.png", 10)
    import_cases(db, ADMIN, study_name="Kept", cases=_cases(1, "k", {0: [shared]}))
    kept_files = _stored(tmp_path)
    before = {m.__name__: _count(db, m) for m in TABLES}
    own = [_png(tmp_path / "in" / f"own{i}.png", 40 + i) for i in range(4)]
    bad = tmp_path / "in" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    cases = _cases(6, "n", {0: [shared, own[0]], 1: [own[1]], 2: [own[2]], 3: [own[3]],
                            5: [bad]})
    with pytest.raises(InvalidInput, match="case n5: .*broken.png"):
        import_cases(db, ADMIN, study_name="Broken", cases=cases)
    # Five batches were committed before case n5; every row and file of them is gone again,
    # and the file the kept study shares with the failed import is still there.
    assert {m.__name__: _count(db, m) for m in TABLES} == before
    assert _stored(tmp_path) == kept_files
    with db.read() as s:
        path = s.scalar(select(Image.path))
    assert (tmp_path / path).is_file()
    assert not list((tmp_path / "images").glob(".*.tmp"))


def test_missing_image_is_refused_before_anything_is_written(db, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(imports, "_create_staging",
                        lambda *a, **k: calls.append(a) or pytest.fail("wrote a study"))
    cases = _cases(3, images={2: [tmp_path / "nope.png"]})
    with pytest.raises(InvalidInput, match="case c2: no such image file .*nope.png"):
        import_cases(db, ADMIN, study_name="S", cases=cases)
    assert calls == [] and _count(db, Study) == 0


def test_failed_rexval_import_removes_its_ratings_and_new_accounts(any_db, monkeypatch):
    db = any_db
    real = imports._insert_batched

    def failing(db_, staging, model, rows):
        if model is RatingEvent:
            raise RuntimeError("disk full")
        return real(db_, staging, model, rows)

    monkeypatch.setattr(imports, "_insert_batched", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        import_rexval(db, ADMIN, gt_path=FIXTURE / rexval.GT_FILENAME,
                      ratings_path=FIXTURE / rexval.RATINGS_FILENAME, study_name="rx")
    for model in (*TABLES, User):
        assert _count(db, model) == 0, model.__name__
    monkeypatch.setattr(imports, "_insert_batched", real)
    summary = import_rexval(db, ADMIN, gt_path=FIXTURE / rexval.GT_FILENAME,
                            ratings_path=FIXTURE / rexval.RATINGS_FILENAME, study_name="rx")
    assert (summary.n_raters, summary.n_ratings) == (3, 432)
    assert studies.get_study_summary(db, ADMIN, study_name="rx").raters_per_pair == 3


KILLED_IMPORT = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from radconcord.backend.services.transfer import imports
    from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
    from radconcord.db.session import Database

    db = Database(sys.argv[1], migrate=False)
    pngs = sorted(Path(sys.argv[2]).glob("*.png"))
    cases = [CaseInput(f"k{i}", f"Ref {i}.", [CandidateInput(f"Cand {i}.", "g")],
                       [ImageInput(path=p)]) for i, p in enumerate(pngs)]
    imports.BATCH_PAIRS = 1
    real = imports._write_batch
    calls = []

    def write(*args):
        calls.append(1)
        if len(calls) == 3:
            os._exit(9)  # killed between the second and third batch
        return real(*args)

    imports._write_batch = write
    imports.import_cases(db, Actor.system(), study_name="Killed", cases=cases)
""")


def _run_killed_import(db, tmp_path) -> None:
    folder = tmp_path / "killed_in"
    for i in range(4):
        _png(folder / f"k{i}.png", 100 + i)
    env = dict(os.environ, RADCONCORD_DATA_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", KILLED_IMPORT, db.url, str(folder), str(ROOT)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr


def test_killed_import_is_invisible_and_removed_by_the_next_import(any_db, tmp_path):
    db = any_db
    _run_killed_import(db, tmp_path)
    with db.read() as s:
        status = s.scalar(select(Study.status).where(Study.name == "Killed"))
        n_cases = s.scalar(select(func.count(Case.id)))
    assert (status, n_cases) == (STUDY_STAGING, 2)  # two batches committed, then killed
    assert len(_stored(tmp_path)) >= 2
    assert studies.list_studies(db, ADMIN) == []
    with pytest.raises(NotFound):
        studies.get_study_summary(db, ADMIN, study_name="Killed")
    # The next import finds the dead process's staging study and deletes it first.
    import_cases(db, ADMIN, study_name="Killed", cases=_cases(1))
    assert [s.name for s in studies.list_studies(db, ADMIN)] == ["Killed"]
    assert _count(db, Image) == 0 and _count(db, Case) == 1
    assert _stored(tmp_path) == []


def test_stale_staging_from_another_host_is_removed_by_age(db, tmp_path):
    _run_killed_import(db, tmp_path)
    with db.begin() as s:
        study = s.scalar(select(Study))
        state = dict(study.provenance["import_state"], host="elsewhere")
        s.execute(update(Study).values(provenance={"import_state": state}))
    # Another host's import may still be running: kept while its heartbeat is recent...
    assert cleanup_stale_imports(db) == []
    with pytest.raises(InvalidInput, match="'Killed' is being imported right now"):
        import_cases(db, ADMIN, study_name="Killed", cases=_cases(1))
    # ...and removed once the heartbeat is older than the limit.
    later = dt.datetime.now(dt.UTC) + imports.STALE_IMPORT_AFTER + dt.timedelta(minutes=1)
    assert cleanup_stale_imports(db, now=later) == ["Killed"]
    for model in TABLES:
        assert _count(db, model) == 0
    assert _stored(tmp_path) == []


def test_same_case_id_in_two_studies_keeps_each_studys_image(any_db, tmp_path):
    # The scenario: study B reuses case id "c1" with a different image.
    db = any_db
    img_a = _png(tmp_path / "a" / "c1.png", 30)
    img_b = _png(tmp_path / "b" / "c1.png", 200)
    one = [CaseInput("c1", "Ref.", [CandidateInput("Cand.", "g")], [ImageInput(path=img_a)])]
    import_cases(db, ADMIN, study_name="A", cases=one)
    one_b = [CaseInput("c1", "Other ref.", [CandidateInput("Other.", "g")],
                       [ImageInput(path=img_b)])]
    import_cases(db, ADMIN, study_name="B", cases=one_b)
    reader = _rater(db, "reader_a")
    assign_raters(db, ADMIN, study_name="A", rater_usernames=["reader_a"], raters_per_pair=1,
                  seed=1)
    [queued] = rating.rater_queue(db, reader, study_name="A")
    view = rating.get_pair(db, reader, opaque_id=queued.opaque_id)
    assert view.reference_text == "Ref."
    [ref] = view.images
    image_service.clear_caches()
    shown = image_service.rendered_image(db, reader, image_id=ref.image_id, preset="header")
    with db.read() as s:
        a_path, a_sha = s.execute(select(Image.path, Image.sha256).where(
            Image.id == ref.image_id)).one()
        b_id = s.scalar(select(Image.id).join(Case, Case.id == Image.case_id)
                        .join(Study, Study.id == Case.study_id).where(Study.name == "B"))
    assert b_id != ref.image_id
    stored = PILImage.open(tmp_path / a_path)
    assert np.asarray(stored).tolist() == np.asarray(PILImage.open(img_a)).tolist()
    b_render = image_service.rendered_image(db, ADMIN, image_id=b_id, preset="header")
    assert shown != b_render  # the rater sees A's pixels, not B's
    out = tmp_path / "export_a"
    exports.export_study(db, ADMIN, study_name="A", fmt="jsonl", out_dir=out)
    [record] = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert record["case_id"] == "c1" and record["reference"] == "Ref."
    [image] = record["images"]
    assert image["sha256"] == a_sha
    exported = (out / image["path"]).read_bytes()
    assert hashlib.sha256(exported).hexdigest() == a_sha
    assert np.asarray(PILImage.open(out / image["path"])).tolist() == \
        np.asarray(PILImage.open(img_a)).tolist()


def test_saves_during_a_long_import_all_succeed(any_db, make_study, fast_password_hashing):
    """Raters keep saving while a 6000-pair import runs in another thread of the process."""
    from radconcord.backend.services.accounts import auth

    db = any_db
    make_study(db, "Live", 8)
    actors = []
    for i in range(6):
        name = f"live{i}"
        auth.create_user(db, ADMIN, username=name, password=f"{name}-password", role="rater")
        actors.append(auth.authenticate(db, username=name, password=f"{name}-password"))
    assign_raters(db, ADMIN, study_name="Live", rater_usernames=[a.username for a in actors],
                  raters_per_pair=3, seed=2)
    queues = {a.username: [q.opaque_id for q in rating.rater_queue(db, a, study_name="Live")]
              for a in actors}
    done = threading.Event()
    errors: list[BaseException] = []
    # Per save: the number of import batches committed before it started and after it ended.
    spans: list[tuple[int, int, bool]] = []
    batches = [0]
    saves = [0]

    def importer() -> None:
        try:
            import_cases(db, ADMIN, study_name="Big", cases=_cases(3000, "big"),
                         progress=lambda *_: batches.__setitem__(0, batches[0] + 1))
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def rater(actor: Actor) -> None:
        step = 0
        try:
            while not done.is_set() or step < 5:
                oid = queues[actor.username][step % len(queues[actor.username])]
                before = batches[0]
                rating.set_count(db, actor, opaque_id=oid, category=1 + step % 6,
                                 significant=bool(step % 2), count=step % 7)
                spans.append((before, batches[0], not done.is_set()))
                saves[0] += 1
                step += 1
                time.sleep(0.01)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=importer)]
    threads += [threading.Thread(target=rater, args=(a,)) for a in actors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert errors == [], errors[:3]
    assert saves[0] >= 30
    # Saves interleave with the import's batches instead of queueing behind the whole
    # import. Counted in batches, not seconds: a loaded CI machine stretches both alike.
    # SQLite's busy handler polls, so a save may lose the lock to the next batch once or
    # twice; what must never happen is a save waiting out most of the import.
    total = batches[0]
    assert total >= 4, total
    during = [s for s in spans if s[2]]
    assert len(during) >= 2 * len(actors), (len(during), total)
    assert len({end for _, end, _ in during}) >= 2, "no save completed between two batches"
    longest = max(end - start for start, end, _ in spans)
    assert longest <= total // 2, (longest, total)
    assert studies.get_study_summary(db, ADMIN, study_name="Big").n_pairs == 6000
