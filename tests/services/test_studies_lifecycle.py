"""A study's lifecycle (admin only): archive hides it from raters and from the default lists
and can be undone; delete removes it with its pairs and ratings, exporting the ratings first
(and deletes nothing when that export fails). Study settings are validated and recorded."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from radconcord.backend import cli, jobs
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin import assignment, studies, study_settings
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
from radconcord.db.models import (
    STUDY_STAGING,
    Assignment,
    Case,
    Image,
    Job,
    Pair,
    Rating,
    RatingEvent,
    Report,
    Study,
)

ADMIN = Actor.system()


def _png(path: Path, value: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.fromarray(np.full((8, 8), value, np.uint8)).save(path)
    return path


@pytest.fixture
def env(db, tmp_path, fast_password_hashing):
    """Two studies ('Keep' and 'Old'), each assigned to rater 'rita'; 'Old' has an image."""
    info = auth.create_user(db, ADMIN, username="rita", password="rita-password-1",
                            role="rater")
    rita = Actor(user_id=info.user_id, username="rita", role="rater")
    for name, value in (("Keep", 10), ("Old", 200)):
        cases = [CaseInput(f"{name}-c{i}", f"Ref {i}.",
                           [CandidateInput(f"{name} cand {i}.", "gen-A")],
                           [ImageInput(_png(tmp_path / "src" / f"{name}{i}.png", value + i))])
                 for i in range(2)]
        imports.import_cases(db, ADMIN, study_name=name, cases=cases)
        assignment.assign_raters(db, ADMIN, study_name=name, rater_usernames=["rita"],
                                 raters_per_pair=1, seed=0)
    return db, rita


def _rate(db, rater: Actor, study: str, count: int = 2) -> None:
    with db.begin() as s:
        pair = s.scalar(select(Pair).join(Study).where(Study.name == study)
                        .order_by(Pair.position))
        s.add(Rating(rater_id=rater.user_id, pair_id=pair.id, category=3, significant=True,
                     count=count))


def _n(db, model, study: str | None = None) -> int:
    with db.read() as s:
        q = select(func.count()).select_from(model)
        if study is not None and model is Pair:
            q = q.join(Study).where(Study.name == study)
        return s.scalar(q)


def test_archive_hides_the_study_from_lists_and_raters_and_unarchive_brings_it_back(env):
    db, rita = env
    assert [s.name for s in rating.rater_studies(db, rita)] == ["Keep", "Old"]
    archived = studies.archive_study(db, ADMIN, study_name="Old")
    assert archived.status == "archived"
    assert [s.name for s in studies.list_studies(db, ADMIN)] == ["Keep"]
    assert [s.name for s in studies.list_studies(db, ADMIN, archived=True)] == ["Old"]
    # Raters see it no more: neither in their list nor through its queue.
    assert [s.name for s in rating.rater_studies(db, rita)] == ["Keep"]
    with pytest.raises(NotFound):
        rating.rater_queue(db, rita, study_name="Old")
    # Kept whole, and recorded.
    assert _n(db, Pair, "Old") == 2
    record = studies.get_study_summary(db, ADMIN, study_name="Old").provenance["lifecycle"]
    assert [(r["action"], r["by"], r["from"]) for r in record] == [
        ("archived", "system", "open")]
    with pytest.raises(InvalidInput, match="'Old' is archived; it cannot be archived"):
        studies.archive_study(db, ADMIN, study_name="Old")
    back = studies.unarchive_study(db, ADMIN, study_name="Old")
    assert back.status == "closed"
    assert [s.name for s in studies.list_studies(db, ADMIN)] == ["Keep", "Old"]
    with pytest.raises(InvalidInput, match="'Keep' is open; it cannot be unarchived"):
        studies.unarchive_study(db, ADMIN, study_name="Keep")
    with pytest.raises(PermissionDenied):
        studies.archive_study(db, rita, study_name="Keep")


def test_delete_with_ratings_exports_them_first_then_deletes_everything(env, tmp_path):
    db, rita = env
    _rate(db, rita, "Old", count=4)
    keep_pairs = _n(db, Pair, "Keep")
    with db.read() as s:
        keep_images = sorted(tmp_path / p for p in s.scalars(
            select(Image.path).join(Case).join(Study).where(Study.name == "Keep")))
    assert len(list((tmp_path / "images").iterdir())) == 4
    with pytest.raises(InvalidInput, match="type its name exactly to confirm"):
        studies.delete_study(db, ADMIN, study_name="Old", confirm="old")
    with pytest.raises(PermissionDenied):
        studies.delete_study(db, rita, study_name="Old", confirm="Old")
    assert _n(db, Pair, "Old") == 2  # refused: nothing changed

    done = studies.delete_study(db, ADMIN, study_name="Old", confirm="Old")
    assert (done.n_pairs, done.n_ratings, done.n_files_removed) == (2, 1, 2)
    assert done.export_dir is not None
    assert done.export_dir.parent == tmp_path / "deleted-studies"
    ratings = [json.loads(line) for line in
               (done.export_dir / "ratings.jsonl").read_text().splitlines()]
    assert [(r["case_id"], r["category"], r["count"]) for r in ratings
            if r["count"]] == [("Old-c0", 3, 4)]
    exported_pairs = (done.export_dir / "pairs.jsonl").read_text().splitlines()
    assert len(exported_pairs) == 2
    assert len(list((done.export_dir / "images").iterdir())) == 2
    # Gone: the study and every row of it; the other study is untouched.
    with db.read() as s:
        assert list(s.scalars(select(Study.name))) == ["Keep"]
        assert s.scalar(select(func.count()).select_from(Case)) == 2
        assert s.scalar(select(func.count()).select_from(Report)) == 4
    assert _n(db, Pair) == keep_pairs == 2
    assert _n(db, Rating) == 0 and _n(db, RatingEvent) == 0
    assert _n(db, Assignment) == 2 and _n(db, Image) == 2
    assert sorted((tmp_path / "images").iterdir()) == keep_images
    with pytest.raises(NotFound):
        studies.get_study_summary(db, ADMIN, study_name="Old")


def test_delete_without_ratings_exports_nothing(env, tmp_path):
    db, _ = env
    done = studies.delete_study(db, ADMIN, study_name="Old", confirm="Old")
    assert done.export_dir is None and done.n_ratings == 0
    assert not (tmp_path / "deleted-studies").exists()
    assert [s.name for s in studies.list_studies(db, ADMIN)] == ["Keep"]


def test_a_pair_marked_done_without_errors_counts_as_a_rating_to_export(env):
    db, rita = env
    with db.begin() as s:
        first = s.scalar(select(Assignment).join(Study).where(
            Study.name == "Old", Assignment.rater_id == rita.user_id))
        first.completed_at = dt.datetime.now(dt.UTC)
    done = studies.delete_study(db, ADMIN, study_name="Old", confirm="Old")
    assert (done.n_ratings, done.n_completed) == (0, 1) and done.export_dir is not None
    assert (done.export_dir / "ratings.jsonl").is_file()


def test_a_failed_export_deletes_nothing_and_restores_the_status(env, tmp_path):
    db, rita = env
    _rate(db, rita, "Old")
    blocker = tmp_path / "not a folder"
    blocker.write_text("x")
    with pytest.raises(InvalidInput, match=r"study 'Old' was not deleted: exporting its 1 "
                                           r"rating cells and 0 completed pairs to .* "
                                           r"failed"):
        studies.delete_study(db, ADMIN, study_name="Old", confirm="Old", export_root=blocker)
    summary = studies.get_study_summary(db, ADMIN, study_name="Old")
    assert summary.status == "open" and _n(db, Pair, "Old") == 2 and _n(db, Rating) == 1
    assert "lifecycle" not in summary.provenance


def test_delete_is_refused_while_a_job_of_the_study_is_queued(env):
    db, _ = env
    with db.read() as s:
        sid = s.scalar(select(Study.id).where(Study.name == "Old"))
    job = jobs.enqueue(db, "score", {"metrics": ["bleu"], "options": {}}, study_id=sid)
    with pytest.raises(InvalidInput, match=f"job\\(s\\) #{job} queued or running"):
        studies.delete_study(db, ADMIN, study_name="Old", confirm="Old")
    assert _n(db, Pair, "Old") == 2 and _n(db, Job) == 1


def test_an_interrupted_delete_is_finished_by_the_stale_import_cleanup(env, monkeypatch):
    db, _ = env

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies between staging and the batch deletes

    monkeypatch.setattr(imports, "delete_staged_study", killed)
    with pytest.raises(KeyboardInterrupt):
        studies.delete_study(db, ADMIN, study_name="Old", confirm="Old")
    with db.read() as s:
        assert s.scalar(select(Study.status).where(Study.name == "Old")) == STUDY_STAGING
    assert [s.name for s in studies.list_studies(db, ADMIN)] == ["Keep"]
    monkeypatch.undo()
    removed = imports.cleanup_stale_imports(
        db, older_than=dt.timedelta(0), now=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    assert removed == ["Old"] and _n(db, Pair) == 2


def test_study_settings_are_validated_and_recorded(env):
    db, rita = env
    now = study_settings.study_settings(db, ADMIN, "Keep")
    assert now.values == {key: spec.default for key, spec in study_settings.SETTINGS.items()}
    assert now.values["highlight_differences"] is False and now.history == ()
    assert now.annotation_mode == "counts"
    assert not now.highlight_differences
    changed = study_settings.update_study_settings(db, ADMIN, study_name="Keep",
                                                   highlight_differences=True)
    assert changed.highlight_differences
    (entry,) = changed.history
    assert (entry["key"], entry["from"], entry["to"], entry["by"]) == (
        "highlight_differences", False, True, "system")
    assert changed.changed_at == {"highlight_differences": entry["at"]}
    # Setting the same value again records nothing new.
    again = study_settings.update_study_settings(db, ADMIN, study_name="Keep",
                                                 highlight_differences=True)
    assert len(again.history) == 1
    with db.read() as s:
        stored = s.scalar(select(Study.settings).where(Study.name == "Keep"))
    assert stored["highlight_differences"] is True
    exported = study_settings.export_settings(stored)
    assert exported["values"]["highlight_differences"] is True
    assert exported["history"] == [entry]
    with pytest.raises(InvalidInput, match=r"unknown study setting\(s\): highlight"):
        study_settings.update_study_settings(db, ADMIN, study_name="Keep", highlight=True)
    with pytest.raises(InvalidInput, match="'highlight_differences' must be bool, got 1"):
        study_settings.update_study_settings(db, ADMIN, study_name="Keep",
                                             highlight_differences=1)
    with pytest.raises(PermissionDenied):
        study_settings.update_study_settings(db, rita, study_name="Keep",
                                             highlight_differences=False)
    with pytest.raises(PermissionDenied):
        study_settings.study_settings(db, rita, "Keep")
    # The other study keeps its default.
    assert not study_settings.study_settings(db, ADMIN, "Old").highlight_differences


def test_cli_archives_deletes_and_sets(env, capsys, tmp_path):
    db, rita = env
    _rate(db, rita, "Old")
    assert cli.main(["archive-study", "--study", "Old"]) == 0
    assert capsys.readouterr().out == "study 'Old' is now archived\n"
    assert cli.main(["archive-study", "--study", "Old", "--undo"]) == 0
    assert capsys.readouterr().out == "study 'Old' is now closed\n"
    assert cli.main(["study-settings", "--study", "Keep", "--set",
                     "highlight_differences=true"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("highlight_differences = true (changed ")
    assert "May bias raters; recorded with the study." in out
    assert cli.main(["delete-study", "--study", "Old", "--confirm", "Keep"]) == 2
    assert "type its name exactly" in capsys.readouterr().err
    assert cli.main(["delete-study", "--study", "Old", "--confirm", "Old"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "deleted study 'Old': 2 pairs, 1 rating cells, 2 image files"
    assert out[1].startswith(f"its ratings were exported first to {tmp_path}/deleted-studies/")


@pytest.mark.parametrize(("changes", "message"), [
    ({"annotation_mode": "grid"}, "must be one of counts, error_records, pairwise"),
    ({"repeat_share": 0.9}, "must be <= 0.5"),
    ({"repeat_share": True}, "must be float"),
    ({"qualification_items": -1}, "must be >= 0"),
    ({"break_reminder_minutes": "50"}, "must be int"),
])
def test_study_settings_refuse_values_out_of_their_rule(env, changes, message):
    db, _ = env
    with pytest.raises(InvalidInput, match=message):
        study_settings.update_study_settings(db, ADMIN, study_name="Keep", **changes)
    assert study_settings.study_settings(db, ADMIN, "Keep").history == ()


def test_the_annotation_mode_stays_once_a_rater_has_answered(env):
    """Counts are not error records nor judgements: a stored answer fixes the mode (the
    same mode again, or the other settings, are still accepted)."""
    db, rita = env
    _rate(db, rita, "Keep")
    with pytest.raises(InvalidInput, match=r"study 'Keep': annotation_mode stays 'counts': "
                                           r"raters have already stored 1 answer\(s\) in "
                                           r"this mode; start a new study to rate in "
                                           r"'error_records'"):
        study_settings.update_study_settings(db, ADMIN, study_name="Keep",
                                             annotation_mode="error_records")
    now = study_settings.update_study_settings(db, ADMIN, study_name="Keep",
                                               annotation_mode="counts", repeat_share=0.1)
    assert now.annotation_mode == "counts" and now.values["repeat_share"] == 0.1
    # A pair marked done with no count stored is an answer too.
    with db.begin() as s:
        done = s.scalars(select(Assignment).join(Study).where(Study.name == "Old")).first()
        done.completed_at = dt.datetime.now(dt.UTC)
    with pytest.raises(InvalidInput, match="already stored 1 answer"):
        study_settings.update_study_settings(db, ADMIN, study_name="Old",
                                             annotation_mode="pairwise")


def test_an_int_is_stored_as_float_for_a_share(env):
    db, _ = env
    now = study_settings.update_study_settings(db, ADMIN, study_name="Keep", repeat_share=0)
    assert now.values["repeat_share"] == 0.0
    now = study_settings.update_study_settings(db, ADMIN, study_name="Keep", repeat_share=0.2,
                                               annotation_mode="error_records")
    assert now.values["repeat_share"] == 0.2 and now.annotation_mode == "error_records"
