"""AppTest: the rating screen (texts, the count grid's data, Mark done and the all-zero
confirmation, the end screen, navigation). The grid saves through its JSON route: its
behaviour in a browser is in tests/e2e/test_grid_browser.py, the route in
tests/services/test_rating_api.py."""

from __future__ import annotations

import html
import json

from sqlalchemy import update

from radconcord.backend.services.annotation import rating
from radconcord.db.models import Assignment, Pair, Study
from radconcord.webapp.components.count_grid import grid_key


def _queue(env):
    return rating.rater_queue(env.db, env.rater, study_name=env.study)


def _grid(at, opaque_id):
    """The data the count grid of ``opaque_id`` got on the last run (None: not drawn)."""
    for element in at.get("bidi_component"):
        if element.proto.component_name == "radconcord_count_grid" and \
                element.proto.id.endswith(grid_key(opaque_id)):
            return json.loads(element.proto.json)
    return None


def _toasts(at):
    return [t.value for t in at.toast]


def test_rating_page_shows_both_texts_and_the_twelve_cells(study_env, make_app, all_text):
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
    grid = _grid(at, first)
    assert grid["pair"] == first and grid["version"] == 0 and grid["read_only"] is False
    assert grid["counts"] == {f"{c}{g}": 0 for c in range(1, 7) for g in "si"}
    assert [r["label"] for r in grid["rows"]][1] == "Omission of finding"
    assert [c["label"] for c in grid["columns"]] == ["Clinically significant",
                                                     "Clinically insignificant"]
    assert grid["url"] == "/_rc/api/rating/counts"
    # Blinding: the candidate's source never reaches the rater's screen, nor the grid.
    assert study_env.secret_source not in text
    assert study_env.secret_source not in json.dumps(grid)


def test_the_cases_image_goes_to_the_viewer_beside_the_texts(study_env, make_app, all_text):
    with_image = [item.opaque_id for item in _queue(study_env)
                  if rating.get_pair(study_env.db, study_env.rater,
                                     opaque_id=item.opaque_id).images]
    assert len(with_image) == 1
    at = make_app(study_env.rater, params={"pair": with_image[0]})
    assert not at.exception
    names = [e.proto.component_name for e in at.get("bidi_component")]
    # The grid, the viewer, the definitions panel and the (invisible) time-on-task tracker.
    assert sorted(names) == ["radconcord_activity", "radconcord_count_grid",
                             "radconcord_definitions", "radconcord_film_viewer"]
    no_image = next(item.opaque_id for item in _queue(study_env)
                    if item.opaque_id != with_image[0])
    at = make_app(study_env.rater, params={"pair": no_image})
    assert "No images for this case." in all_text(at)


def test_the_grid_shows_what_the_service_stored_with_its_version(study_env, make_app):
    first = _queue(study_env)[0].opaque_id
    at = make_app(study_env.rater)
    # Saved by the grid's route (or another tab): the next run shows the stored values.
    rating.set_counts(study_env.db, study_env.rater, opaque_id=first,
                      cells={(5, False): 4, (2, True): 3}, expected_version=0)
    at.run()
    grid = _grid(at, first)
    assert (grid["counts"]["5i"], grid["counts"]["2s"], grid["version"]) == (4, 3, 1)
    # A reload (a fresh session on the same URL) too; another rater's grid is untouched.
    again = make_app(study_env.rater, params={"pair": first})
    assert _grid(again, first)["counts"]["5i"] == 4
    other = make_app(study_env.other_rater, params={"pair": first})
    assert not any(_grid(other, first)["counts"].values())
    assert _grid(other, first)["tag"] != _grid(again, first)["tag"]


def test_mark_done_moves_on_with_an_inline_message_not_a_toast(study_env, make_app,
                                                               all_text):
    queue = _queue(study_env)
    at = make_app(study_env.rater)
    rating.set_count(study_env.db, study_env.rater, opaque_id=queue[0].opaque_id,
                     category=1, significant=True, count=1)
    at.button(key="done").click().run()
    assert not at.exception
    assert rating.get_pair(study_env.db, study_env.rater,
                           opaque_id=queue[0].opaque_id).completed_at is not None
    assert at.query_params["pair"] == queue[1].opaque_id
    # In the header, in place of the progress bar (a toast, top right, covered Mark done;
    # a row of its own pushed the grid below the fold on a laptop).
    assert _toasts(at) == []
    n = len(queue)
    (line,) = [m.value for m in at.markdown if "marked done" in m.value]
    assert line.endswith(f"check_circle: Pair 1 of {n} marked done.]] 1 of {n} done · "
                         f"{n - 1} left · estimate after 3 pairs")
    assert not at.get("progress") and not at.success


def test_an_all_zero_pair_needs_an_explicit_confirmation(study_env, make_app, all_text):
    queue = _queue(study_env)
    first = queue[0].opaque_id
    at = make_app(study_env.rater)
    assert at.button(key="done").proto.shortcut.lower() == "ctrl+enter"
    at.button(key="done").click().run()
    assert not at.exception
    assert "All twelve counts are zero" in all_text(at)
    assert rating.get_pair(study_env.db, study_env.rater, opaque_id=first).completed_at is None
    assert at.query_params["pair"] == first
    # While the question is open, Ctrl+Enter answers it (and Mark done gives the key up).
    assert at.button(key="confirm_zero_yes").proto.shortcut.lower() == "ctrl+enter"
    # Its answers take Mark done's place (nothing is pushed down the page).
    assert "done" not in [b.key for b in at.button]

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


def test_the_last_pair_done_shows_the_end_screen_with_the_time_spent(study_env, make_app,
                                                                     all_text):
    queue = _queue(study_env)
    for item in queue[:-1]:
        rating.complete_pair(study_env.db, study_env.rater, opaque_id=item.opaque_id,
                             confirm_zero=True)
    with study_env.db.begin() as s:  # time on task as the activity spans left it
        s.execute(update(Assignment).where(Assignment.rater_id == study_env.rater.user_id)
                  .values(active_seconds=251.0))
    last = queue[-1].opaque_id
    rating.set_count(study_env.db, study_env.rater, opaque_id=last, category=2,
                     significant=False, count=1)
    at = make_app(study_env.rater, params={"pair": last})
    at.button(key="done").click().run()
    assert not at.exception
    text = all_text(at)
    assert "Study complete" in text and "Thank you" in text
    assert f"all {len(queue)} pairs" in text
    assert "12 min 33 s" in text  # 3 x 251 s
    assert _toasts(at) == [] and _grid(at, last) is None
    # The rater can go back over the pairs.
    at.button(key="end_review").click().run()
    assert not at.exception and _grid(at, last) is not None


def test_a_closed_study_shows_the_grid_read_only(study_env, make_app, all_text):
    first = _queue(study_env)[0].opaque_id
    with study_env.db.begin() as s:
        s.execute(update(Study).values(status="closed"))
    at = make_app(study_env.rater, params={"pair": first})
    assert not at.exception
    assert _grid(at, first)["read_only"] is True
    assert at.button(key="done").disabled
    assert "Study closed" in _grid(at, first)["note"]


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


def test_a_pair_of_another_rater_or_unknown_id_shows_an_error(study_env, make_app):
    at = make_app(study_env.rater, params={"pair": "no-such-pair"})
    assert not at.exception
    assert "is not in your assignments" in at.error[0].value
    assert _grid(at, "no-such-pair") is None


def test_a_rater_without_assignments_is_told_so(study_env, make_app, all_text):
    from radconcord.backend.services.accounts import auth
    from radconcord.backend.types import Actor

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


def test_difference_marks_follow_the_studys_choice(study_env, make_app, all_text):
    from radconcord.webapp.components.reports import HIGHLIGHT_NOTE

    first = _queue(study_env)[0].opaque_id
    at = make_app(study_env.rater, params={"pair": first})
    assert HIGHLIGHT_NOTE not in all_text(at)  # off by default
    with study_env.db.begin() as s:
        s.execute(update(Study).values(settings={"highlight_differences": True}))
    at = make_app(study_env.rater, params={"pair": first})
    assert not at.exception
    assert HIGHLIGHT_NOTE in all_text(at)


def test_mark_done_based_on_a_stale_view_is_refused_with_a_message(study_env, make_app,
                                                                   monkeypatch):
    """Another tab changes the pair between this run's read and the completion."""
    first = _queue(study_env)[0].opaque_id
    rating.set_count(study_env.db, study_env.rater, opaque_id=first, category=3,
                     significant=True, count=1)
    at = make_app(study_env.rater, params={"pair": first})
    real = rating.complete_pair

    def other_tab_first(db, actor, **kwargs):
        rating.set_count(db, actor, opaque_id=kwargs["opaque_id"], category=3,
                         significant=True, count=2)
        return real(db, actor, **kwargs)

    monkeypatch.setattr(rating, "complete_pair", other_tab_first)
    at.button(key="done").click().run()
    assert not at.exception
    view = rating.get_pair(study_env.db, study_env.rater, opaque_id=first)
    assert view.completed_at is None and view.counts[(3, True)] == 2
    assert at.query_params["pair"] == first
    assert any("changed in another window" in w.value for w in at.warning)
    assert _grid(at, first)["counts"]["3s"] == 2


def test_an_error_records_study_shows_the_grid_read_only_with_derived_counts(study_env,
                                                                            make_app):
    """The counts come from the rater's marked errors: the grid only shows them."""
    first = _queue(study_env)[0].opaque_id
    with study_env.db.begin() as s:
        s.execute(update(Study).values(settings={"annotation_mode": "error_records"}))
    at = make_app(study_env.rater, params={"pair": first})
    assert not at.exception
    grid = _grid(at, first)
    assert grid["read_only"] is True and grid["note"] == "Counts from your marked errors"
    assert not at.button(key="done").disabled


def test_a_training_item_says_so_and_a_counts_study_pair_does_not(study_env, make_app,
                                                                 all_text):
    first, second = (q.opaque_id for q in _queue(study_env)[:2])
    with study_env.db.begin() as s:
        s.execute(update(Pair).where(Pair.opaque_id == first).values(
            kind="training", expert={"counts": {}, "source": "panel"}))
    at = make_app(study_env.rater, params={"pair": first})
    assert "Training item" in all_text(at)
    assert _grid(at, first)["read_only"] is False
    at = make_app(study_env.rater, params={"pair": second})
    assert "Training item" not in all_text(at)
