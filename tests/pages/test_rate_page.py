"""AppTest: the rating screen (texts, grid, autosave, all-zero confirmation, navigation)."""

from __future__ import annotations

import html
import sqlite3

from backend.services import rating
from webapp.components.count_grid import cell_key


def _queue(env):
    return rating.rater_queue(env.db, env.rater, study_name=env.study)


def test_rating_page_shows_both_texts_the_image_and_the_twelve_cells(study_env, make_app,
                                                                      all_text):
    first = _queue(study_env)[0].opaque_id
    at = make_app(study_env.rater)
    assert not at.exception
    assert at.query_params["pair"] == first  # the URL names the pair on screen
    view = rating.get_pair(study_env.db, study_env.rater, opaque_id=first)
    text = all_text(at)
    assert "Reference report" in text and "Candidate report" in text
    assert html.escape(view.reference_text) in text
    assert html.escape(view.candidate_text) in text
    assert f"Pair 1 of {view.total}" in text
    cells = [n for n in at.number_input if n.key.startswith(f"count-{first}-")]
    assert len(cells) == 12 and all(n.value == 0 for n in cells)
    # Blinding: the candidate's source never reaches the rater's screen.
    assert study_env.secret_source not in text
    assert len(at.image) == len(view.images)


def test_the_cases_image_is_rendered_beside_the_texts(study_env, make_app, all_text):
    with_image = [item.opaque_id for item in _queue(study_env)
                  if rating.get_pair(study_env.db, study_env.rater,
                                     opaque_id=item.opaque_id).images]
    assert len(with_image) == 1
    at = make_app(study_env.rater, params={"pair": with_image[0]})
    assert not at.exception
    assert len(at.image) == 1
    # Window presets and invert re-render through the service without errors.
    at.toggle(key="view_invert").set_value(True).run()
    at.slider(key="view_zoom").set_value(2.0).run()
    assert not at.exception and not at.warning and len(at.image) == 1
    no_image = next(item.opaque_id for item in _queue(study_env)
                    if item.opaque_id != with_image[0])
    at = make_app(study_env.rater, params={"pair": no_image})
    assert "No images for this case." in all_text(at)


def test_a_changed_count_is_saved_at_once_and_shown_after_a_reload(study_env, make_app,
                                                                    all_text):
    first = _queue(study_env)[0].opaque_id
    at = make_app(study_env.rater)
    at.number_input(key=cell_key(first, 2, True)).set_value(3).run()
    assert not at.exception
    assert [s.value for s in at.success][0].startswith("Saved ")
    saved = rating.get_pair(study_env.db, study_env.rater, opaque_id=first).counts
    assert saved[(2, True)] == 3
    assert sum(saved.values()) == 3
    # Another rater's view of the same pair is untouched.
    other = rating.get_pair(study_env.db, study_env.other_rater, opaque_id=first).counts
    assert not any(other.values())
    # A fresh session (a reload) on the same URL shows what was stored.
    again = make_app(study_env.rater, params={"pair": first})
    assert again.number_input(key=cell_key(first, 2, True)).value == 3
    assert again.number_input(key=cell_key(first, 2, False)).value == 0


def test_grid_shows_what_the_service_stored_not_what_the_session_remembers(study_env,
                                                                          make_app):
    first = _queue(study_env)[0].opaque_id
    at = make_app(study_env.rater)
    # Saved elsewhere (another tab): the next run of this session shows the stored value.
    rating.set_count(study_env.db, study_env.rater, opaque_id=first, category=5,
                     significant=False, count=4)
    at.run()
    assert at.number_input(key=cell_key(first, 5, False)).value == 4


def test_mark_done_with_errors_moves_to_the_next_open_pair(study_env, make_app):
    queue = _queue(study_env)
    at = make_app(study_env.rater)
    at.number_input(key=cell_key(queue[0].opaque_id, 1, True)).set_value(1).run()
    at.button(key="done").click().run()
    assert not at.exception
    assert rating.get_pair(study_env.db, study_env.rater,
                           opaque_id=queue[0].opaque_id).completed_at is not None
    assert at.query_params["pair"] == queue[1].opaque_id
    assert [t.value for t in at.toast] == [f"Pair 1 of {len(queue)} marked done."]


def test_an_all_zero_pair_needs_an_explicit_confirmation(study_env, make_app, all_text):
    queue = _queue(study_env)
    first = queue[0].opaque_id
    at = make_app(study_env.rater)
    at.button(key="done").click().run()
    assert not at.exception
    assert "All twelve counts are zero" in all_text(at)
    assert rating.get_pair(study_env.db, study_env.rater, opaque_id=first).completed_at is None
    assert at.query_params["pair"] == first

    at.button(key="confirm_zero_no").click().run()
    assert "All twelve counts are zero" not in all_text(at)
    assert rating.get_pair(study_env.db, study_env.rater, opaque_id=first).completed_at is None

    at.button(key="done").click().run()
    at.button(key="confirm_zero_yes").click().run()
    assert not at.exception
    view = rating.get_pair(study_env.db, study_env.rater, opaque_id=first)
    assert view.completed_at is not None
    assert set(view.counts.values()) == {0}
    assert at.query_params["pair"] == queue[1].opaque_id


def test_previous_and_next_follow_the_raters_order(study_env, make_app, all_text):
    queue = _queue(study_env)
    at = make_app(study_env.rater)
    assert at.button(key="prev").disabled
    at.button(key="next").click().run()
    assert at.query_params["pair"] == queue[1].opaque_id
    assert f"Pair 2 of {len(queue)}" in all_text(at)
    at.button(key="next").click().run()
    assert at.button(key="next").disabled
    at.button(key="prev").click().run()
    assert at.query_params["pair"] == queue[1].opaque_id


def test_interactions_are_recorded_as_time_on_task(study_env, make_app):
    from backend.services import progress

    at = make_app(study_env.rater)
    first = at.query_params["pair"]
    at.number_input(key=cell_key(first, 3, False)).set_value(1).run()
    prog = progress.study_progress(study_env.db, study_env.admin, study_name=study_env.study)
    rita = next(r for r in prog.raters if r.username == "rita")
    assert rita.last_active_at is not None


def test_a_pair_of_another_rater_or_unknown_id_shows_an_error(study_env, make_app):
    at = make_app(study_env.rater, params={"pair": "no-such-pair"})
    assert not at.exception
    assert "is not in your assignments" in at.error[0].value
    assert not at.number_input


def test_a_rater_without_assignments_is_told_so(study_env, make_app, all_text):
    from backend.services import auth
    from backend.services.types import Actor

    info = auth.create_user(study_env.db, study_env.admin, username="newbie",
                            password="newbie-password", role="rater")
    at = make_app(Actor(info.user_id, info.username, info.role))
    assert not at.exception
    assert "No pairs are assigned to you yet" in all_text(at)


def test_my_studies_lists_progress_and_resumes(study_env, make_app, all_text):
    at = make_app(study_env.rater)
    at.switch_page("views/my_studies.py").run()
    assert not at.exception
    assert study_env.study in all_text(at)
    at.button(key=f"open-{study_env.study}").click().run()
    assert not at.exception
    assert at.query_params["pair"] == _queue(study_env)[0].opaque_id
    assert "Candidate report" in all_text(at)


def _hold_write_lock(env):
    """A raw connection holding SQLite's write lock (as a long import did)."""
    raw = sqlite3.connect(env.data_dir / "pages.db", isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    return raw


def test_a_save_the_busy_database_refuses_stays_in_the_grid_marked_not_saved(
        study_env, make_app, all_text, monkeypatch):
    monkeypatch.setattr(rating, "SAVE_RETRY_SECONDS", 0.6)
    monkeypatch.setattr(rating, "ACTIVITY_RETRY_SECONDS", 0.2)
    first = _queue(study_env)[0].opaque_id
    at = make_app(study_env.rater)
    raw = _hold_write_lock(study_env)
    try:
        at.number_input(key=cell_key(first, 3, True)).set_value(2).run()
        assert not at.exception
        text = all_text(at)
        assert "Not saved" in text and "try again" in text
        assert "Traceback" not in text and 'File "/' not in text
        # The rater's value stays on screen although nothing is stored yet.
        assert at.number_input(key=cell_key(first, 3, True)).value == 2
        assert rating.get_pair(study_env.db, study_env.rater,
                               opaque_id=first).counts[(3, True)] == 0
        at.run()  # any other run of the page keeps it too
        assert at.number_input(key=cell_key(first, 3, True)).value == 2
        assert "Not saved" in all_text(at)
    finally:
        raw.rollback()
        raw.close()
    # Once the database is free, the next change of the pair writes both counts.
    at.number_input(key=cell_key(first, 1, False)).set_value(1).run()
    assert not at.exception
    counts = rating.get_pair(study_env.db, study_env.rater, opaque_id=first).counts
    assert (counts[(3, True)], counts[(1, False)]) == (2, 1)
    assert "Not saved" not in all_text(at)
    assert [s.value for s in at.success][0].startswith("Saved ")


def test_retry_button_writes_the_kept_count(study_env, make_app, all_text, monkeypatch):
    monkeypatch.setattr(rating, "SAVE_RETRY_SECONDS", 0.6)
    monkeypatch.setattr(rating, "ACTIVITY_RETRY_SECONDS", 0.2)
    first = _queue(study_env)[0].opaque_id
    at = make_app(study_env.rater)
    raw = _hold_write_lock(study_env)
    try:
        at.number_input(key=cell_key(first, 6, False)).set_value(4).run()
        # Marking done while the count is unsaved does not complete the pair without it.
        at.button(key="done").click().run()
        assert not at.exception and "Not saved" in all_text(at)
    finally:
        raw.rollback()
        raw.close()
    view = rating.get_pair(study_env.db, study_env.rater, opaque_id=first)
    assert view.completed_at is None and view.counts[(6, False)] == 0
    at.button(key=f"retry-{first}").click().run()
    assert not at.exception
    assert rating.get_pair(study_env.db, study_env.rater,
                           opaque_id=first).counts[(6, False)] == 4
    assert at.number_input(key=cell_key(first, 6, False)).value == 4
    assert "Not saved" not in all_text(at)


def test_a_deactivated_raters_open_tab_stores_no_further_count(study_env, make_app):
    """The grid's save runs in a widget callback, before the router re-checks the account:
    the callback must re-check it itself, or a deactivated tab could store one more count."""
    from backend.services import auth
    from backend.services.types import Actor

    first = _queue(study_env)[0].opaque_id
    at = make_app(study_env.rater)
    auth.set_active(study_env.db, Actor.system(), username=study_env.rater.username,
                    active=False)
    at.number_input(key=cell_key(first, 1, True)).set_value(2).run()
    assert not at.exception
    with study_env.db.read() as s:
        from db.models import Rating
        stored = s.query(Rating).filter_by(rater_id=study_env.rater.user_id).count()
    assert stored == 0
