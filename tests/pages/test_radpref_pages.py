"""AppTest: RadPref on the Import page (uploads, dry run, import, a bad file named as
uploaded with nothing written) and on the Export page (the zip gives the files back)."""

from __future__ import annotations

import copy
import io
import zipfile

from sqlalchemy import func, select

from radconcord.db.models import Comparison, ErrorRecord, Judgement, Study, User
from tests.helpers_radpref import USER_1, USER_2, preferences_bytes, user_bytes


def _counts(env) -> tuple[int, ...]:
    with env.db.read() as s:
        return tuple(s.scalar(select(func.count()).select_from(m))
                     for m in (Study, Comparison, Judgement, ErrorRecord, User))


def _click(at, label: str):
    (button,) = [b for b in at.button if b.key == f"FormSubmitter:import_radpref-{label}"]
    return button.click().run(timeout=60)


def _page(env, make_app, users=(("user_1.json", USER_1), ("user_2.json", USER_2)),
          study: str = "RadPref test"):
    at = make_app(env.admin)
    at.switch_page("views/import_data.py").run()
    at.text_input(key="radpref_study").input(study)
    at.file_uploader(key="radpref_preferences").upload("preference_data.json",
                                                      preferences_bytes(), "application/json")
    for name, user in users:
        at.file_uploader(key="radpref_users").upload(name, user_bytes(user),
                                                     "application/json")
    return at


def test_dry_run_writes_nothing_then_import_creates_the_study(study_env, make_app, all_text):
    before = _counts(study_env)
    at = _click(_page(study_env, make_app), "Dry run (write nothing)")
    assert not at.exception and not at.error
    assert "**Dry run** for study **RadPref test**: nothing was written." in all_text(at)
    assert [m.value for m in at.metric] == ["3", "2", "5", "16"]
    assert _counts(study_env) == before

    at = _click(_page(study_env, make_app), "Import RadPref")
    assert not at.exception and not at.error
    assert "Created study **RadPref test** (pairwise, 1-5 ratings)" in all_text(at)
    (frame,) = at.dataframe
    raters = frame.value
    assert list(raters["Rater account"]) == ["radpref_user_1", "radpref_user_2"]
    with study_env.db.read() as s:
        study = s.scalar(select(Study).where(Study.name == "RadPref test"))
        assert study.settings["annotation_mode"] == "pairwise"
        assert s.scalar(select(func.count()).select_from(Judgement)) == 5


def test_a_bad_annotator_file_is_named_as_uploaded_and_nothing_is_written(study_env, make_app):
    bad = copy.deepcopy(USER_2)
    bad["annotations"]["case-001"]["C1"]["finding_errors"]["1"]["error_type"] = "typo"
    before = _counts(study_env)
    at = _click(_page(study_env, make_app, users=[("user_1.json", USER_1),
                                                  ("my user 2.json", bad)]), "Import RadPref")
    assert not at.exception
    assert [e.value for e in at.error] == [
        "my user 2.json: case 'case-001', field 'C1.finding_errors.1.error_type': unknown "
        "error type 'typo' (known: false, attribute)"]
    assert _counts(study_env) == before


def test_many_warnings_are_one_summary_with_the_list_folded(study_env, make_app):
    """The published files give 18 warnings for one case: one line says how many and what
    happens (kept), the list is folded under it instead of 18 boxes above the study."""
    past = copy.deepcopy(USER_2)
    errors = past["annotations"]["case-001"]["C2"]["finding_errors"]
    for index in ("5", "6", "7", "8"):  # C2 of case-001 has two findings
        errors[index] = {"error_type": "false", "clinical_significance": "urgent"}
    at = _click(_page(study_env, make_app, users=[("user_1.json", USER_1),
                                                  ("user_2.json", past)]),
                "Dry run (write nothing)")
    assert not at.exception and not at.error
    (warning,) = at.warning
    assert warning.value.startswith("4 warnings")
    assert "kept" in warning.value
    (folded,) = [e for e in at.expander if e.label.startswith("The 4 warnings")]
    text = "\n".join(c.value for c in folded.code)
    for index in ("5", "6", "7", "8"):
        assert f"field 'C2.finding_errors.{index}': index {index} is out of range" in text


def test_import_without_annotator_files_asks_for_them(study_env, make_app):
    at = _click(_page(study_env, make_app, users=()), "Import RadPref")
    assert [e.value for e in at.error] == [
        "Annotator files: choose at least one user_N.json file."]


def test_an_existing_study_name_is_refused(study_env, make_app):
    at = _click(_page(study_env, make_app, study=study_env.study), "Import RadPref")
    assert [e.value for e in at.error] == [
        f"study {study_env.study!r} already exists; choose another name (a RadPref import "
        "always creates a new study)"]


def test_export_page_gives_the_radpref_files_back_as_a_zip(study_env, make_app):
    at = _click(_page(study_env, make_app), "Import RadPref")
    assert not at.error
    at.switch_page("views/export.py").run()
    at.selectbox(key="radpref_export_study").set_value("RadPref test")
    (button,) = [b for b in at.button if b.key.startswith("FormSubmitter:export_radpref-")]
    at = button.click().run(timeout=60)
    assert not at.exception and not at.error
    assert [s.value for s in at.success] == [
        "**RadPref test** as RadPref: 3 cases, 2 annotators, 5 judgements."]
    assert [d.proto.label for d in at.get("download_button")] == ["Download RadPref .zip"]
    export = at.session_state["last_radpref_export"]
    with zipfile.ZipFile(io.BytesIO(export.zip_bytes())) as archive:
        assert archive.read("RadPref/preference_data.json") == preferences_bytes()
        assert archive.read("RadPref/radiologist_annotations/user_1.json") == \
            user_bytes(USER_1)
        assert archive.read("RadPref/radiologist_annotations/user_2.json") == \
            user_bytes(USER_2)


def test_export_of_a_counts_study_as_radpref_is_refused_clearly(study_env, make_app):
    at = make_app(study_env.admin)
    at.switch_page("views/export.py").run()
    at.selectbox(key="radpref_export_study").set_value(study_env.study)
    (button,) = [b for b in at.button if b.key.startswith("FormSubmitter:export_radpref-")]
    at = button.click().run(timeout=60)
    assert [e.value for e in at.error] == [
        f"study {study_env.study!r} has no comparisons: only a pairwise study exports as "
        "RadPref"]
