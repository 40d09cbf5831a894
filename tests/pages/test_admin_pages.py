"""AppTest: admin pages with a seeded study, and raters kept out of them.

A rater is kept out twice: the router does not register admin pages for the role, and each
admin page script, run directly with a rater logged in, stops at the services' own role
check (``require_admin``) before drawing anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radconcord.backend.services.annotation import rating

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"
def _submit(at, form: str, timeout: float = 60):
    """Click the submit button of ``form`` and rerun."""
    button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
    return button.click().run(timeout=timeout)


ADMIN_PAGES = ["studies.py", "import_data.py", "assign.py", "export.py", "metrics.py"]
# Analysis pages (tested in detail by their own test files); here: the router only.
ANALYSIS_PAGES = ["dashboard.py", "explorer.py", "probes.py", "build_study.py"]


@pytest.mark.parametrize("page", ADMIN_PAGES + ANALYSIS_PAGES)
def test_the_router_offers_admin_pages_to_admins_only(study_env, make_app, page):
    at = make_app(study_env.rater)
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page(f"views/{page}")
    admin = make_app(study_env.admin)
    admin.switch_page(f"views/{page}").run()
    assert not admin.exception
    assert not admin.error


@pytest.mark.parametrize("page", ADMIN_PAGES)
def test_an_admin_page_run_directly_by_a_rater_shows_only_an_access_error(study_env, make_app,
                                                                          all_text, page):
    at = make_app(study_env.rater, script=VIEWS / page)
    assert not at.exception
    assert [e.value for e in at.error] == ["this action needs an admin account"]
    assert not at.dataframe and not at.title and not at.button
    assert study_env.study not in all_text(at)


def test_an_admin_page_run_directly_while_logged_out_asks_to_log_in(study_env, make_app):
    at = make_app(None, script=VIEWS / "studies.py")
    assert [e.value for e in at.error] == ["Please log in first."]
    assert not at.dataframe


def test_studies_page_lists_the_study_and_its_progress(study_env, make_app, all_text):
    first = rating.rater_queue(study_env.db, study_env.rater, study_name=study_env.study)[0]
    rating.set_count(study_env.db, study_env.rater, opaque_id=first.opaque_id, category=1,
                     significant=True, count=2)
    rating.complete_pair(study_env.db, study_env.rater, opaque_id=first.opaque_id)
    at = make_app(study_env.admin)
    assert not at.exception
    assert at.title[0].value == "Studies & progress"
    studies_table = at.dataframe[0].value
    assert list(studies_table["Study"]) == [study_env.study]
    assert list(studies_table["Ratings done"]) == ["1 / 6"]
    raters_table = at.dataframe[1].value
    assert dict(zip(raters_table["Rater"], raters_table["Done"], strict=True)) == {
        "ravi": 0, "rita": 1}
    assert [m.value for m in at.metric][:1] == ["3"]


def test_assign_page_adds_a_new_rater(study_env, make_app):
    from radconcord.backend.services.accounts import auth

    auth.create_user(study_env.db, study_env.admin, username="rosa",
                     password="rosa-password", role="rater")
    at = make_app(study_env.admin)
    at.switch_page("views/assign.py").run()
    at.multiselect(key="assign_raters").set_value(["ravi", "rita", "rosa"])
    at.number_input(key="assign_k").set_value(3)
    _submit(at, "assign")
    assert not at.exception and not at.error
    assert at.success[0].value.startswith("3 new assignments in Page test study")
    queue = rating.rater_queue(study_env.db, _actor(study_env, "rosa"), study_name=STUDY_NAME)
    assert len(queue) == 3


STUDY_NAME = "Page test study"


def _actor(env, username):
    from radconcord.backend.services.accounts import auth
    from radconcord.backend.types import Actor

    info = next(u for u in auth.list_users(env.db, env.admin) if u.username == username)
    return Actor(info.user_id, info.username, info.role)


def test_assign_page_reports_bad_input(study_env, make_app):
    at = make_app(study_env.admin)
    at.switch_page("views/assign.py").run()
    at.multiselect(key="assign_raters").set_value(["rita"])
    at.number_input(key="assign_k").set_value(2)
    _submit(at, "assign")
    assert not at.exception
    assert "raters_per_pair" in at.error[0].value


def test_import_page_creates_a_study_from_an_uploaded_csv(study_env, make_app):
    csv = (b"case_id,reference,candidate,source\n"
           b"n1,No acute disease.,Normal chest.,gen-a\n"
           b"n1,No acute disease.,Small effusion.,gen-b\n")
    at = make_app(study_env.admin)
    at.switch_page("views/import_data.py").run()
    at.text_input(key="import_study").input("Uploaded study")
    at.file_uploader(key="import_cases_file").upload("cases.csv", csv, "text/csv")
    _submit(at, "import_cases")
    assert not at.exception and not at.error
    assert "Created study **Uploaded study**: 2 pairs" in at.success[0].value
    at.switch_page("views/studies.py").run()
    assert "Uploaded study" in list(at.dataframe[0].value["Study"])


def test_import_page_names_the_bad_row(study_env, make_app):
    csv = b"case_id,reference,candidate\nn1,,Normal chest.\n"
    at = make_app(study_env.admin)
    at.switch_page("views/import_data.py").run()
    at.text_input(key="import_study").input("Broken study")
    at.file_uploader(key="import_cases_file").upload("cases.csv", csv, "text/csv")
    _submit(at, "import_cases")
    assert not at.exception
    assert "cases.csv" in at.error[0].value and "reference" in at.error[0].value


def test_export_page_writes_rexval_files_and_offers_a_zip(study_env, make_app):
    at = make_app(study_env.admin)
    at.switch_page("views/export.py").run()
    _submit(at, "export")
    assert not at.exception and not at.error
    assert at.success[0].value.startswith(f"Exported **{study_env.study}** as rexval")
    files = list(at.dataframe[0].value["File"])
    assert "manifest.json" in files
    out_dirs = list((study_env.data_dir / "exports").iterdir())
    assert len(out_dirs) == 1
    manifest = json.loads((out_dirs[0] / "manifest.json").read_text())
    assert manifest["format"] == "rexval"
    download = at.get("download_button")[0]
    assert download is not None


def test_no_pages_folder_beside_the_entry_script():
    """A ``webapp/pages/`` folder would switch Streamlit to its legacy multipage mode, which
    routes to every script in it whatever the user's role (bypassing the router)."""
    assert not (VIEWS.parent / "pages").exists()
