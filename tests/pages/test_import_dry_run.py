"""AppTest: the Import page's dry run (a preview, nothing written), the layout choice, and a
misspelt column refused naming the uploaded file."""

from __future__ import annotations

from sqlalchemy import func, select

from radconcord.db.models import Case, Pair, Report, Study

TEMP_MARK = "radconcord-upload-"


def _counts(env) -> tuple[int, ...]:
    with env.db.read() as s:
        return tuple(s.scalar(select(func.count()).select_from(m))
                     for m in (Study, Case, Report, Pair))


def _click(at, label: str):
    (button,) = [b for b in at.button if b.key == f"FormSubmitter:import_cases-{label}"]
    return button.click().run(timeout=60)


def _page(env, make_app, name: str, data: bytes, study: str = "Dry study"):
    at = make_app(env.admin)
    at.switch_page("views/import_data.py").run()
    at.text_input(key="import_study").input(study)
    at.file_uploader(key="import_cases_file").upload(name, data, "text/csv")
    return at


WIDE = b"case_id,reference,gen-A,gen-B\nn1,No acute disease.,Normal.,Effusion.\nn2,Clear.,Clear.,\n"


def test_dry_run_previews_and_writes_nothing_then_import_writes(study_env, make_app,
                                                                  all_text):
    before = _counts(study_env)
    uploads = study_env.data_dir / "uploads"
    at = _page(study_env, make_app, "wide cases.csv", WIDE)
    _click(at, "Dry run (write nothing)")
    assert not at.exception and not at.error
    assert _counts(study_env) == before
    # The upload folder of a dry run is removed at once.
    assert not uploads.exists() or not any(uploads.iterdir())
    text = all_text(at)
    assert "**Dry run of wide cases.csv** for study **Dry study**: nothing was written." in text
    assert ("Layout: wide (detected: no 'candidate' column, so every other column is a "
            "generator: gen-A, gen-B)") in text
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"Cases": "2", "Pairs": "3", "Images found": "0",
                       "Images missing": "0"}
    sources = at.dataframe[0].value
    assert dict(zip(sources["Source"], sources["Pairs"], strict=True)) == {"gen-A": 2,
                                                                           "gen-B": 1}
    assert [s.value for s in at.success] == ["Ready to import."]
    _click(at, "Import")
    assert not at.exception and not at.error
    assert "Created study **Dry study**: 3 pairs from 2 cases" in at.success[0].value
    assert _counts(study_env)[0] == before[0] + 1


def test_a_misspelt_column_is_refused_naming_the_uploaded_file(study_env, make_app):
    before = _counts(study_env)
    data = b"case_id,reference,candidat,source\nn1,R.,C.,gen-A\n"
    for label in ("Dry run (write nothing)", "Import"):
        at = _page(study_env, make_app, "my typo.csv", data)
        _click(at, label)
        assert not at.exception
        (message,) = [e.value for e in at.error]
        assert message.startswith("my typo.csv: header: column 'source' belongs to the long "
                                  "layout")
        assert "'candidat' (did you mean 'candidate'?)" in message
        assert TEMP_MARK not in message and str(study_env.data_dir) not in message
    assert _counts(study_env) == before


def test_the_chosen_layout_is_applied(study_env, make_app):
    at = _page(study_env, make_app, "wide.csv", WIDE)
    at.radio(key="import_layout").set_value("long")
    _click(at, "Dry run (write nothing)")
    (message,) = [e.value for e in at.error]
    assert message == ("wide.csv: header: long layout: missing column 'candidate'; unknown "
                       "column(s) 'gen-A', 'gen-B'")


def test_dry_run_lists_missing_images_and_a_taken_name(study_env, make_app):
    data = (b"case_id,reference,candidate,source,images\n"
            b"n1,R.,C.,gen-A,scan1.png;scan2.png\n")
    at = _page(study_env, make_app, "cases.csv", data, study=study_env.study)
    _click(at, "Dry run (write nothing)")
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Images missing"] == "2"
    assert [e.value for e in at.error] == [
        f"study {study_env.study!r} already exists; choose another name",
        "2 image file(s) listed in the file are missing"]
    assert not at.success
