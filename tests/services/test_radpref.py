"""RadPref import and export on SQLite and PostgreSQL: lossless round trip, the rows an
import writes (comparisons, judgements, per-error records, derived counts), refusals that
write nothing, dry run, the commands, and export of a pairwise study rated in the app."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from radconcord.backend import cli
from radconcord.backend.datasets import radpref as files
from radconcord.backend.errors import InvalidInput, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.services.transfer import radpref
from radconcord.backend.types import Actor
from radconcord.db.models import (
    Assignment,
    Case,
    Comparison,
    ErrorRecord,
    Judgement,
    Pair,
    Rating,
    RatingEvent,
    Report,
    Study,
    User,
)
from tests.helpers_radpref import CASES, USER_1, USER_2, preferences_bytes, user_bytes, write_set

ADMIN = Actor.system()
MODELS = (Study, Case, Report, Pair, Comparison, Judgement, ErrorRecord, Rating, RatingEvent,
          Assignment, User)


def _counts(db) -> dict[str, int]:
    with db.read() as s:
        return {m.__name__: s.scalar(select(func.count()).select_from(m)) for m in MODELS}


def _data(user1=USER_1, user2=USER_2) -> files.RadPrefData:
    return files.parse(("preference_data.json", preferences_bytes()),
                       [("user_1.json", user_bytes(user1)), ("user_2.json", user_bytes(user2))])


def test_import_then_export_gives_the_same_files_byte_for_byte(any_db):
    summary = radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RadPref")
    assert (summary.n_cases, summary.n_pairs, summary.n_judgements) == (3, 6, 5)
    assert summary.raters == ("radpref_user_1", "radpref_user_2")
    export = radpref.export_radpref(any_db, ADMIN, study_name="RadPref")
    assert list(export.files) == ["preference_data.json",
                                  "radiologist_annotations/user_1.json",
                                  "radiologist_annotations/user_2.json"]
    assert export.files["preference_data.json"] == preferences_bytes()
    assert export.files["radiologist_annotations/user_1.json"] == user_bytes(USER_1)
    assert export.files["radiologist_annotations/user_2.json"] == user_bytes(USER_2)
    # Key order survives too (JSON equality alone would not show it).
    back = json.loads(export.files["radiologist_annotations/user_2.json"])
    assert list(back) == ["annotations", "user_id"]
    assert list(back["annotations"]) == ["case-002", "case-001"]
    assert list(back["annotations"]["case-002"]["C1"]) == [
        "rating_explanation", "rating", "finding_errors", "missing_findings"]
    assert "rating_explanation" not in back["annotations"]["case-001"]["C1"]
    assert "new_finding_indices" not in back["annotations"]["case-002"]
    assert export.warnings == ()


def test_import_writes_a_pairwise_study_with_judgements_records_and_counts(any_db):
    summary = radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP")
    # user 1: 3 cases, user 2: 2 cases; 12 cells per candidate.
    assert summary.n_ratings == (3 + 2) * 2 * 12
    with any_db.read() as s:
        study = s.scalar(select(Study).where(Study.name == "RP"))
        assert study.scheme == "radpref" and study.status == "open"
        assert effective(study.settings)["annotation_mode"] == "pairwise"
        assert study.provenance["kind"] == "radpref"
        assert set(study.provenance["files"]) == {"preference_data.json", "user_1.json",
                                                  "user_2.json"}
        comps = list(s.scalars(select(Comparison).where(Comparison.study_id == study.id)
                               .order_by(Comparison.position)))
        assert len(comps) == 3
        first = comps[0]
        a, b = s.get(Pair, first.pair_a_id), s.get(Pair, first.pair_b_id)
        assert (a.source, b.source, a.kind, b.kind) == ("gen-m", "gen-g", "study", "study")
        assert s.get(Report, a.candidate_id).text == CASES[0]["C1_report"]
        assert s.get(Report, a.reference_id).text == CASES[0]["ground_truth_report"]
        assert s.get(Case, a.case_id).external_id == "case-001"
        fields = first.meta["radpref"]["fields"]
        assert fields["PatientAge"] == "072Y" and fields["C2_findings"] == CASES[0]["C2_findings"]
        assert first.meta["radpref"]["case_index"] == 0

        user1 = s.scalar(select(User).where(User.username == "radpref_user_1"))
        assert user1.role == "rater"
        js = list(s.scalars(select(Judgement).where(Judgement.rater_id == user1.id)
                            .order_by(Judgement.order_index)))
        assert [(j.rating_a, j.rating_b, j.preference) for j in js] == [
            (2, 4, None), (3, 1, None), (5, 5, None)]
        assert all(j.completed_at is not None for j in js)
        assert js[0].details["radpref"]["C1"]["fields"] == {
            "rating_explanation": "Hallucinated aneurysm"}

        recs = list(s.scalars(select(ErrorRecord).where(
            ErrorRecord.rater_id == user1.id, ErrorRecord.pair_id == a.id)
            .order_by(ErrorRecord.id)))
        assert [(r.kind, r.category, r.significant) for r in recs] == [
            ("span", 1, True), ("span", 3, False), ("omission", 2, False)]
        false_finding = recs[0]
        report = CASES[0]["C1_report"]
        assert false_finding.candidate_text == "Abdominal aortic aneurysm"
        assert report[false_finding.candidate_start:false_finding.candidate_end] == \
            "Abdominal aortic aneurysm"
        assert false_finding.note == "Aneurysm can’t be seen on a chest film"
        assert false_finding.details["radpref"]["index"] == "1"
        omission = recs[2]
        assert omission.reference_text == "Left lower lobe atelectasis"
        gt = CASES[0]["ground_truth_report"]
        assert gt[omission.reference_start:omission.reference_end] == omission.reference_text

        cells = {(r.category, r.significant): r.count for r in s.scalars(select(Rating).where(
            Rating.rater_id == user1.id, Rating.pair_id == b.id))}
        # C2 of case-001: location significant; severity significant + measurement negligible.
        assert len(cells) == 12
        assert {k: v for k, v in cells.items() if v} == {(3, True): 1, (4, True): 1,
                                                         (4, False): 1}
        done = s.scalars(select(Assignment.completed_at).where(
            Assignment.rater_id == user1.id)).all()
        assert len(done) == 6 and all(done)


def test_imported_accounts_cannot_log_in(any_db):
    radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP")
    assert auth.authenticate(any_db, username="radpref_user_1", password="") is None
    assert auth.authenticate(any_db, username="radpref_user_1", password="1") is None


def test_a_second_study_reuses_the_annotator_accounts(any_db):
    radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP one")
    summary = radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP two")
    assert summary.new_raters == ()
    with any_db.read() as s:
        assert s.scalar(select(func.count()).select_from(User)) == 2


def test_reimport_into_an_existing_study_name_is_refused_and_writes_nothing(any_db):
    radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP")
    before = _counts(any_db)
    with pytest.raises(InvalidInput, match="study 'RP' already exists; choose another name"):
        radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP")
    with pytest.raises(InvalidInput, match="study 'RP' already exists"):
        radpref.import_radpref(any_db, ADMIN, data=_data(), study_name=" RP ", dry_run=True)
    assert _counts(any_db) == before


def test_an_annotator_name_held_by_an_admin_is_refused_and_nothing_is_written(any_db):
    auth.create_user(any_db, ADMIN, username="radpref_user_2", password="admin-password-1",
                     role="admin")
    before = _counts(any_db)
    with pytest.raises(InvalidInput, match="account 'radpref_user_2' exists and is not a rater"):
        radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP")
    assert _counts(any_db) == before


def test_a_failure_while_writing_leaves_nothing(any_db, monkeypatch):
    before = _counts(any_db)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(radpref, "_record", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP")
    assert _counts(any_db) == before


def test_dry_run_counts_and_writes_nothing(any_db):
    before = _counts(any_db)
    summary = radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP",
                                     dry_run=True)
    assert summary.dry_run and summary.study_id is None
    assert summary.new_raters == ("radpref_user_1", "radpref_user_2")
    # user 1: case-001 3 + 3, case-003 2 + 6, case-002 0; user 2: case-001 2 + 0.
    expected = sum(len(files.map_candidate(ann[c])) for u in (USER_1, USER_2)
                   for ann in u["annotations"].values() for c in ("C1", "C2"))
    assert summary.n_error_records == expected == 16
    assert _counts(any_db) == before


def test_only_an_admin_imports_or_exports(any_db):
    rater = Actor(user_id=5, username="rita", role="rater")
    with pytest.raises(PermissionDenied):
        radpref.import_radpref(any_db, rater, data=_data(), study_name="RP")
    radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP")
    with pytest.raises(PermissionDenied):
        radpref.export_radpref(any_db, rater, study_name="RP")


def test_export_of_a_study_without_comparisons_is_refused(any_db, make_study):
    make_study(any_db, "Counts only", 2)
    with pytest.raises(InvalidInput, match="has no comparisons: only a pairwise study"):
        radpref.export_radpref(any_db, ADMIN, study_name="Counts only")


def test_ratings_entered_in_the_app_export_in_the_radpref_layout(any_db):
    """A real rater's judgement (no imported details) and error records become entries."""
    radpref.import_radpref(any_db, ADMIN, data=_data(user2={"user_id": "2",
                                                             "annotations": {}}),
                           study_name="RP")
    rita = auth.create_user(any_db, ADMIN, username="rita", password="rita-password-1",
                            role="rater")
    with any_db.begin() as s:
        comps = list(s.scalars(select(Comparison).order_by(Comparison.position)))
        first, second = comps[0], comps[2]
        s.add(Judgement(rater_id=rita.user_id, comparison_id=first.id, order_index=0,
                        preference="A", rating_a=4, rating_b=2))
        # Not rated on both candidates: left out of the export with a warning.
        s.add(Judgement(rater_id=rita.user_id, comparison_id=second.id, order_index=1,
                        rating_a=3))
        s.add_all([
            ErrorRecord(rater_id=rita.user_id, pair_id=first.pair_a_id, kind="span",
                        category=1, significant=True, candidate_text="Abdominal aortic "
                        "aneurysm", note="not on a chest film"),
            ErrorRecord(rater_id=rita.user_id, pair_id=first.pair_b_id, kind="span",
                        category=3, significant=True,
                        candidate_text="Left IJ catheter tip in the lower SVC"),
            ErrorRecord(rater_id=rita.user_id, pair_id=first.pair_b_id, kind="span",
                        category=4, significant=False,
                        candidate_text="Left IJ catheter tip in the lower SVC"),
            ErrorRecord(rater_id=rita.user_id, pair_id=first.pair_b_id, kind="omission",
                        category=2, significant=False,
                        reference_text="Left lower lobe atelectasis"),
            ErrorRecord(rater_id=rita.user_id, pair_id=first.pair_b_id, kind="span",
                        category=1, significant=False, candidate_text="tip in"),
            # RadPref has no omitted comparison: written as the nearest type, with a warning.
            ErrorRecord(rater_id=rita.user_id, pair_id=first.pair_a_id, kind="omission",
                        category=6, significant=True,
                        reference_text="Right IJ catheter tip in the lower SVC"),
            ErrorRecord(rater_id=rita.user_id, pair_id=first.pair_a_id, kind="span",
                        category=6, significant=False,
                        candidate_text="Central venous catheter with tip in the mid SVC"),
        ])
    export = radpref.export_radpref(any_db, ADMIN, study_name="RP")
    assert list(export.files)[-1] == "radiologist_annotations/user_rita.json"
    rita_file = json.loads(export.files["radiologist_annotations/user_rita.json"])
    assert rita_file == {"user_id": "rita", "annotations": {"case-001": {
        "C1": {"finding_errors": {"1": {"error_type": "false",
                                        "clinical_significance": "actionable_not_urgent",
                                        "explanation": "not on a chest film"},
                                  "0": {"error_type": "attribute",
                                        "attributes": {"temporal": "negligible"}}},
               "missing_findings": {"0": {"clinical_significance": "actionable_not_urgent"}},
               "rating": 4},
        "C2": {"finding_errors": {"0": {"error_type": "attribute", "attributes": {
                   "location": "significant", "severity": "negligible"}}},
               "missing_findings": {"1": {"clinical_significance":
                                          "not_actionable_not_urgent"}},
               "rating": 2},
    }}}
    assert export.warnings == (
        "rita, case 'case-001', C1: a category 6 omission 'Right IJ catheter tip in the lower "
        "SVC' is written as a RadPref missing finding, which reads back as category 2",
        "rita, case 'case-001', C1: a category 6 span 'Central venous catheter with tip in the "
        "mid SVC' is written as a RadPref temporal attribute, which reads back as category 5",
        "rita, case 'case-001', C2: error span 'tip in' matches no finding of the candidate; "
        "left out",
        "rita, case 'case-003': not rated on both candidates yet; left out",
    )
    # The imported annotator is still written back unchanged.
    assert export.files["radiologist_annotations/user_1.json"] == user_bytes(USER_1)


def test_import_and_export_commands(db, tmp_path, capsys):
    prefs, folder = write_set(tmp_path / "in")
    before = _counts(db)
    code = cli.main(["import-radpref", "--preferences", str(prefs), "--annotations",
                     str(folder), "--study", "RP", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and _counts(db) == before
    assert "RP: would create 3 cases (6 pairs, 3 comparisons), 2 raters, 5 judgements, " \
        "16 error records, 120 rating cells" in out
    assert out.rstrip().endswith("dry run: nothing was written")
    code = cli.main(["import-radpref", "--preferences", str(prefs), "--annotations",
                     str(folder), "--study", "RP"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("RP: created 3 cases")
    assert "rater radpref_user_1 (new account, no usable password)" in out
    code = cli.main(["import-radpref", "--preferences", str(prefs), "--annotations",
                     str(folder), "--study", "RP"])
    assert code == 2
    assert "error: study 'RP' already exists" in capsys.readouterr().err
    out_dir = tmp_path / "out"
    code = cli.main(["export-radpref", "--study", "RP", "--out", str(out_dir)])
    assert code == 0
    assert (out_dir / "preference_data.json").read_bytes() == prefs.read_bytes()
    for name in ("user_1.json", "user_2.json"):
        assert (out_dir / "radiologist_annotations" / name).read_bytes() == \
            (folder / name).read_bytes()
    code = cli.main(["export-radpref", "--study", "RP", "--out", str(out_dir)])
    assert code == 2 and "exists and is not an empty folder" in capsys.readouterr().err


def test_a_malformed_file_on_the_command_line_names_it_and_writes_nothing(db, tmp_path,
                                                                         capsys):
    bad = copy.deepcopy(USER_2)
    bad["annotations"]["case-001"]["C2"]["rating"] = 0
    prefs, folder = write_set(tmp_path / "in", users={"user_1.json": USER_1,
                                                      "user_2.json": bad})
    before = _counts(db)
    code = cli.main(["import-radpref", "--preferences", str(prefs), "--annotations",
                     str(folder), "--study", "RP"])
    assert code == 2 and _counts(db) == before
    assert capsys.readouterr().err.strip() == (
        "error: user_2.json: case 'case-001', field 'C2.rating': must be a whole number "
        "from 1 to 5, got 0")
    code = cli.main(["import-radpref", "--preferences", str(tmp_path / "nope.json"),
                     "--annotations", str(folder), "--study", "RP"])
    assert code == 2 and "nope.json: no such file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    code = cli.main(["import-radpref", "--preferences", str(prefs), "--annotations",
                     str(empty), "--study", "RP"])
    assert code == 2 and "no annotator file (user_N.json)" in capsys.readouterr().err
    assert _counts(db) == before


def test_zip_holds_the_files_under_one_folder(any_db):
    import io
    import zipfile

    radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP")
    export = radpref.export_radpref(any_db, ADMIN, study_name="RP")
    with zipfile.ZipFile(io.BytesIO(export.zip_bytes())) as archive:
        assert archive.namelist() == ["RadPref/preference_data.json",
                                      "RadPref/radiologist_annotations/user_1.json",
                                      "RadPref/radiologist_annotations/user_2.json"]
        assert archive.read("RadPref/preference_data.json") == preferences_bytes()


def test_written_files_import_again(any_db, tmp_path):
    radpref.import_radpref(any_db, ADMIN, data=_data(), study_name="RP")
    export = radpref.export_radpref(any_db, ADMIN, study_name="RP")
    export.write(tmp_path / "x")
    again = files.read(tmp_path / "x" / "preference_data.json",
                       tmp_path / "x" / "radiologist_annotations")
    radpref.import_radpref(any_db, ADMIN, data=again, study_name="RP again")
    assert radpref.export_radpref(any_db, ADMIN, study_name="RP again").files == export.files


def test_helper_writes_the_files_it_claims(tmp_path):
    prefs, folder = write_set(tmp_path)
    assert Path(prefs).read_bytes() == preferences_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["user_1.json", "user_2.json"]
