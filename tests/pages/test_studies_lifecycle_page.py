"""AppTest: the Studies page archives, unarchives and deletes a study (the name typed to
confirm; ratings exported first, and the page says where) and records every study setting
(drawn by type, a refused change named with its reason)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from radconcord.backend.services.study_admin import studies, study_settings
from radconcord.db.models import Pair, Rating, Study


def _studies_page(env, make_app):
    at = make_app(env.admin)
    return at.switch_page("views/studies.py").run()


def test_archive_moves_the_study_to_the_archived_filter_and_back(study_env, make_app,
                                                                    all_text):
    at = _studies_page(study_env, make_app)
    at.button(key="archive_study").click().run()
    assert not at.exception and not at.error
    assert at.success[0].value == (f"Study {study_env.study} archived: see it under Show: "
                                   "Archived.")
    assert "No studies yet" in all_text(at)
    assert [s.name for s in studies.list_studies(study_env.db, study_env.admin,
                                                 archived=True)] == [study_env.study]
    at.segmented_control(key="studies_filter").set_value("Archived").run()
    assert list(at.dataframe[0].value["Status"]) == ["archived"]
    at.button(key="unarchive_study").click().run()
    assert at.success[0].value == f"Study {study_env.study} is closed again."
    assert [s.status for s in studies.list_studies(study_env.db, study_env.admin)] == [
        "closed"]


def test_delete_needs_the_typed_name_and_exports_the_ratings_first(study_env, make_app):
    db = study_env.db
    with db.begin() as s:
        pair = s.scalar(select(Pair).order_by(Pair.position))
        s.add(Rating(rater_id=study_env.rater.user_id, pair_id=pair.id, category=1,
                     significant=True, count=1))
    at = _studies_page(study_env, make_app)
    assert at.button(key="delete_study").disabled
    at.text_input(key=f"delete_confirm_{study_env.study}").input("wrong name").run()
    assert at.button(key="delete_study").disabled
    at.text_input(key=f"delete_confirm_{study_env.study}").input(study_env.study).run()
    assert not at.button(key="delete_study").disabled
    at.button(key="delete_study").click().run()
    assert not at.exception and not at.error
    message = at.success[0].value
    assert message.startswith(f"Deleted study {study_env.study} (3 pairs). Its 1 rating "
                              f"cells were exported first to `{study_env.data_dir}/"
                              "deleted-studies/")
    folder = message.split("`")[1]
    assert (study_env.data_dir / "deleted-studies").is_dir()
    assert (Path(folder) / "ratings.jsonl").is_file()
    with db.read() as s:
        assert list(s.scalars(select(Study.name))) == []


def _setting(env, key: str) -> str:
    return f"setting_{env.study}_{key}"


def test_the_highlight_toggle_is_recorded_with_the_study(study_env, make_app, all_text):
    at = _studies_page(study_env, make_app)
    assert "May bias raters; recorded with the study." in all_text(at)
    toggle = at.toggle(key=_setting(study_env, "highlight_differences"))
    assert toggle.value is False
    toggle.set_value(True).run()
    assert not at.exception and not at.error
    now = study_settings.study_settings(study_env.db, study_env.admin, study_env.study)
    assert now.highlight_differences and len(now.history) == 1
    assert (f"Last changed {now.history[0]['at'][:19].replace('T', ' ')} UTC by "
            f"{study_env.admin.username} (from False to True).") in all_text(at)


def test_every_setting_is_drawn_by_its_type_with_its_caveat(study_env, make_app, all_text):
    at = _studies_page(study_env, make_app)
    assert not at.exception and not at.error
    widgets = {w.key: w for group in (at.toggle, at.selectbox, at.number_input)
               for w in group}
    for spec in study_settings.SETTINGS.values():
        widget = widgets[_setting(study_env, spec.key)]
        assert widget.label == spec.label
        kind = type(widget).__name__
        if spec.type is bool:
            assert kind == "Toggle"
        elif spec.choices is not None:
            # Shown by meaning (an annotation mode by its name), stored as the value.
            assert kind == "Selectbox" and list(widget.options) == [
                str(study_settings.display_value(spec.key, c)) for c in spec.choices]
        else:
            assert kind == "NumberInput"
            assert widget.min == spec.minimum and widget.max == spec.maximum
        assert widget.value == spec.default
        if spec.caveat:
            assert spec.caveat in all_text(at)
    assert "From 0 to 0.5." in all_text(at) and "Never changed." in all_text(at)


def test_a_choice_a_count_a_share_and_a_switch_are_recorded(study_env, make_app, all_text):
    at = _studies_page(study_env, make_app)
    at.selectbox(key=_setting(study_env, "annotation_mode")).set_value("error_records").run()
    at.number_input(key=_setting(study_env, "qualification_items")).set_value(3).run()
    at.number_input(key=_setting(study_env, "repeat_share")).set_value(0.2).run()
    at.toggle(key=_setting(study_env, "adjudicate_category_12")).set_value(False).run()
    assert not at.exception and not at.error
    now = study_settings.study_settings(study_env.db, study_env.admin, study_env.study)
    assert now.values["annotation_mode"] == "error_records"
    assert now.values["qualification_items"] == 3
    assert type(now.values["qualification_items"]) is int
    assert now.values["repeat_share"] == 0.2
    assert now.values["adjudicate_category_12"] is False
    assert [h["key"] for h in now.history] == ["annotation_mode", "qualification_items",
                                              "repeat_share", "adjudicate_category_12"]
    # The page shows what is in force after each change.
    assert at.selectbox(key=_setting(study_env, "annotation_mode")).value == "error_records"
    assert at.number_input(key=_setting(study_env, "repeat_share")).value == 0.2
    assert "(from 'Error counts (ReXVal)' to 'Error records (spans)')" in all_text(at)


def test_a_refused_change_says_which_setting_and_why(study_env, make_app):
    at = _studies_page(study_env, make_app)
    # Another admin deletes the study while this page is open.
    studies.delete_study(study_env.db, study_env.admin, study_name=study_env.study,
                         confirm=study_env.study)
    at.number_input(key=_setting(study_env, "break_reminder_minutes")).set_value(20).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any(e.startswith("Not saved: Remind the rater to take a break after this many "
                            "minutes (0: off): ") and study_env.study in e for e in errors), errors


def test_the_annotation_mode_is_refused_once_a_rater_has_answered(study_env, make_app):
    with study_env.db.begin() as s:
        pair = s.scalars(select(Pair).order_by(Pair.position)).first()
        s.add(Rating(rater_id=study_env.rater.user_id, pair_id=pair.id, category=1,
                     significant=True, count=1))
    at = _studies_page(study_env, make_app)
    at.selectbox(key=_setting(study_env, "annotation_mode")).set_value("pairwise").run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any(e.startswith("Not saved: ") and "annotation_mode stays 'counts'" in e
               and "start a new study" in e for e in errors), errors
    # The widget shows the mode in force again, and nothing was recorded.
    assert at.selectbox(key=_setting(study_env, "annotation_mode")).value == "counts"
    now = study_settings.study_settings(study_env.db, study_env.admin, study_env.study)
    assert now.annotation_mode == "counts" and now.history == ()


def test_other_pages_do_not_offer_an_archived_study(study_env, make_app, tmp_path):
    from radconcord.backend.services.transfer import imports
    from radconcord.backend.types import CandidateInput, CaseInput

    imports.import_cases(study_env.db, study_env.admin, study_name="Other study",
                         cases=[CaseInput("o1", "Ref.", [CandidateInput("Cand.", "gen")])])
    studies.archive_study(study_env.db, study_env.admin, study_name=study_env.study)
    at = make_app(study_env.admin)
    for page, key in (("views/assign.py", "assign_study"), ("views/dashboard.py", "dash_study"),
                      ("views/export.py", None), ("views/metrics.py", "score_study")):
        at.switch_page(page).run(timeout=120)
        assert not at.exception, page
        options = [o for box in at.selectbox for o in box.options
                   if key is None or box.key == key]
        assert "Other study" in options and study_env.study not in options, page


def test_the_raters_table_shows_blanks_not_none_and_times_as_on_the_dashboard(study_env,
                                                                               make_app):
    # One rater worked 40 s + 20 s on two pairs; the other never sent any activity.
    import datetime as dt

    from radconcord.backend.services.annotation import activity, rating

    queue = [q.opaque_id for q in rating.rater_queue(study_env.db, study_env.rater,
                                                     study_name=study_env.study)]
    t0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)

    def at(seconds: float) -> dt.datetime:
        return t0 + dt.timedelta(seconds=seconds)

    activity.record_spans(study_env.db, study_env.rater, client_id="tab-one-0001", spans=[
        activity.SpanInput(queue[0], at(0), at(40), 10),
        activity.SpanInput(queue[1], at(40), at(60), 5)], now=at(61))
    at_ = _studies_page(study_env, make_app)
    assert not at_.exception and not at_.error
    (table,) = [d.value for d in at_.dataframe if "Median per pair" in d.value.columns]
    rows = {r["Rater"]: r for _, r in table.iterrows()}
    worked = rows[study_env.rater.username]
    idle = rows[study_env.other_rater.username]
    assert (worked["Time on task"], worked["Median per pair"]) == ("1:00", "0:30")
    assert worked["Last active"] == "2026-11-24 09:01:00 UTC"
    # Never "None" drawn as a value: blank cells where there is nothing to show.
    assert (idle["Time on task"], idle["Median per pair"], idle["Last active"]) == (
        "0:00", "", "")
    for _, row in table.iterrows():
        for value in row:
            assert value is not None and value == value, dict(row)  # no None, no NaN
