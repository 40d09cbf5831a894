"""Calibration (training) items: marking, first in every queue, the qualification gate,
feedback, training rows apart from the study's ratings, the CLI."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from radconcord.backend.cli import main
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.evaluation.study_data import load_ratings
from radconcord.backend.services.quality import calibration
from radconcord.backend.services.study_admin import assignment, study_settings
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import Adjudication, Assignment, Pair, Study, User
from radconcord.db.session import Database
from tests.helpers_adaptive import build_study, rater_actor

SYSTEM = Actor.system()
RATERS = ("r1", "r2")


def _setup(db, make_study, *, n_pairs=8, raters=RATERS, k=1, name="S", assign=True):
    opaque = make_study(db, name, n_pairs)
    actors = {}
    for username in raters:
        auth.create_user(db, SYSTEM, username=username, password=f"{username}-password",
                         role="rater")
        actors[username] = auth.authenticate(db, username=username,
                                             password=f"{username}-password")
    if assign:
        assign_raters(db, SYSTEM, study_name=name, rater_usernames=list(raters),
                      raters_per_pair=k, seed=3)
    return opaque, actors


def _csv(*items: tuple[int, int]) -> str:
    """A training CSV giving each (pair number, total) as category 1 significant errors."""
    lines = ["pair_number,error_category,clinically_significant,num_errors"]
    for number, total in items:
        lines.append(f"{number},1,true,{total}")
        lines.append(f"{number},2,false,0")
    return "\n".join(lines) + "\n"


def _answer(db, actor, opaque_id: str, total: int) -> None:
    rating.set_count(db, actor, opaque_id=opaque_id, category=2, significant=True, count=total)
    rating.complete_pair(db, actor, opaque_id=opaque_id, confirm_zero=True)


def _kinds_in_queue(db, actor, study="S") -> list[str]:
    queue = rating.rater_queue(db, actor, study_name=study)
    with db.read() as s:
        kind = dict(s.execute(select(Pair.opaque_id, Pair.kind)).all())
    return [kind[q.opaque_id] for q in queue]


def test_marked_items_come_first_for_every_rater_and_assignment_stays_idempotent(
        any_db, make_study, fast_password_hashing):
    opaque, actors = _setup(any_db, make_study)
    result = calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=_csv((2, 1), (5, 3)))
    assert result.pair_numbers == (2, 5)
    # Training items marked after assignment go to every rater, before their open pairs.
    for actor in actors.values():
        kinds = _kinds_in_queue(any_db, actor)
        assert kinds[:2] == ["training", "training"]
        assert "training" not in kinds[2:]
    items = calibration.list_training(any_db, SYSTEM, study_name="S")
    assert [(i.pair_number, i.opaque_id, i.raters, i.done) for i in items] == [
        (2, opaque[1], 2, 0), (5, opaque[4], 2, 0)]
    assert items[0].expert_counts["1:1"] == 1 and sum(items[1].expert_counts.values()) == 3
    assert len(items[0].expert_counts) == 12
    with any_db.read() as s:
        before = sorted(s.execute(select(Assignment.rater_id, Assignment.pair_id,
                                         Assignment.order_index)).all())
    again = assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=list(RATERS),
                          raters_per_pair=1, seed=3)
    assert (again.created, again.training_created, again.repeats_created) == (0, 0, 0)
    # Training items are no study pairs: k and the loads count the six others only.
    assert again.n_pairs == 6 and sum(again.per_rater.values()) == 6
    with any_db.read() as s:
        after = sorted(s.execute(select(Assignment.rater_id, Assignment.pair_id,
                                        Assignment.order_index)).all())
    assert after == before


def test_training_items_marked_before_assignment_are_first_in_a_seeded_order(
        any_db, make_study, fast_password_hashing):
    _, actors = _setup(any_db, make_study, n_pairs=12, assign=False)
    calibration.mark_from_csv(any_db, SYSTEM, study_name="S",
                              text=_csv((1, 0), (4, 1), (7, 2), (9, 0)))
    summary = assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=list(RATERS),
                            raters_per_pair=2, seed=11)
    assert summary.training_created == 8 and summary.created == 16
    orders = []
    for actor in actors.values():
        assert _kinds_in_queue(any_db, actor)[:4] == ["training"] * 4
        orders.append([q.opaque_id for q in rating.rater_queue(any_db, actor, study_name="S")][:4])
    assert sorted(orders[0]) == sorted(orders[1])


def test_gate_blocks_study_pairs_until_enough_items_pass(any_db, make_study,
                                                         fast_password_hashing):
    opaque, actors = _setup(any_db, make_study)
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S",
                                         qualification_items=2, qualification_max_error=1)
    calibration.mark_from_csv(any_db, SYSTEM, study_name="S",
                              text=_csv((1, 2), (2, 0), (3, 4)))
    r1 = actors["r1"]
    queue = rating.rater_queue(any_db, r1, study_name="S")
    assert len(queue) == 3 and _kinds_in_queue(any_db, r1) == ["training"] * 3
    study_pair = next(o for o in opaque[3:]
                      if o in {q for q, in _held(any_db, "r1")})
    for call in (lambda: rating.get_pair(any_db, r1, opaque_id=study_pair),
                 lambda: rating.set_count(any_db, r1, opaque_id=study_pair, category=1,
                                          significant=True, count=1)):
        with pytest.raises(PermissionDenied, match=r"training items .* first \(0 of 2 passed\)"):
            call()
    [mine] = rating.rater_studies(any_db, r1)
    assert mine.qualification and "0 of 2 passed" in mine.qualification
    # Held back: progress counts the training items the rater can reach.
    assert (mine.training_done, mine.training_total) == (0, 3)
    assert mine.resume_opaque_id == queue[0].opaque_id

    expert_total = {opaque[0]: 2, opaque[1]: 0, opaque[2]: 4}
    first = queue[0].opaque_id
    _answer(any_db, r1, first, expert_total[first] + 1)  # within 1: passes
    view = rating.get_pair(any_db, r1, opaque_id=first)
    assert view.training and view.read_only and view.next_opaque_id == queue[1].opaque_id
    with pytest.raises(PermissionDenied, match="1 of 2 passed"):
        rating.get_pair(any_db, r1, opaque_id=study_pair)
    second = queue[1].opaque_id
    _answer(any_db, r1, second, expert_total[second])
    # Qualified: the study pairs open; the third training item is still first to do.
    assert rating.get_pair(any_db, r1, opaque_id=study_pair).training is False
    [mine] = rating.rater_studies(any_db, r1)
    assert mine.qualification is None and mine.resume_opaque_id == queue[2].opaque_id
    assert (mine.training_done, mine.training_total) == (0, 0)  # open: the whole study counts
    assert len(rating.rater_queue(any_db, r1, study_name="S")) == len(_held(any_db, "r1"))
    status = {r.rater: r for r in calibration.qualification_status(any_db, SYSTEM,
                                                                     study_name="S")}
    assert (status["r1"].done, status["r1"].passed, status["r1"].qualified) == (2, 2, True)
    assert (status["r2"].done, status["r2"].qualified, status["r2"].failed) == (0, False, False)


def _held(db, username: str) -> list[tuple[str]]:
    with db.read() as s:
        return s.execute(
            select(Pair.opaque_id).join(Assignment, Assignment.pair_id == Pair.id)
            .join(User, User.id == Assignment.rater_id).where(User.username == username)
        ).all()


def test_a_rater_who_cannot_pass_enough_items_is_told_and_the_lead_sees_it(
        any_db, make_study, fast_password_hashing):
    _, actors = _setup(any_db, make_study)
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S",
                                         qualification_items=2, qualification_max_error=0)
    calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=_csv((1, 1), (2, 1)))
    r2 = actors["r2"]
    queue = rating.rater_queue(any_db, r2, study_name="S")
    _answer(any_db, r2, queue[0].opaque_id, 5)  # off by 4: fails, and 2 can no longer pass
    [mine] = rating.rater_studies(any_db, r2)
    assert mine.qualification.startswith("You did not qualify for study 'S'")
    status = {r.rater: r for r in calibration.qualification_status(any_db, SYSTEM,
                                                                     study_name="S")}
    assert status["r2"].failed and not status["r2"].qualified and status["r2"].passed == 0
    # One wording everywhere (CLI, Assign and Quality control pages), the rater's own.
    assert (status["r1"].status, status["r2"].status) == ("in training", "did not qualify")
    # The last item can still be done (it is feedback), the study pairs stay closed.
    _answer(any_db, r2, queue[1].opaque_id, 1)
    [mine] = rating.rater_studies(any_db, r2)
    assert mine.resume_opaque_id is None and "did not qualify" in mine.qualification
    assert [q.opaque_id for q in rating.rater_queue(any_db, r2, study_name="S")] == [
        q.opaque_id for q in queue]


def test_done_training_item_is_final_and_its_feedback_is_the_raters_own(
        any_db, make_study, fast_password_hashing):
    opaque, actors = _setup(any_db, make_study)
    calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=_csv((3, 2)))
    r1, r2 = actors["r1"], actors["r2"]
    item = opaque[2]
    with pytest.raises(NotFound, match="not one of your done training items"):
        calibration.training_feedback(any_db, r1, item)  # not answered yet: nothing leaks
    rating.set_count(any_db, r1, opaque_id=item, category=1, significant=True, count=1)
    rating.set_count(any_db, r1, opaque_id=item, category=3, significant=False, count=1)
    rating.complete_pair(any_db, r1, opaque_id=item)
    fb = calibration.training_feedback(any_db, r1, item)
    cells = {(c.category, c.significant): c for c in fb.cells}
    assert len(fb.cells) == 12 and (fb.rater_total, fb.expert_total) == (2, 2)
    assert cells[(1, True)].rater == 1 and cells[(1, True)].expert == 2
    assert cells[(1, True)].differs and cells[(3, False)].differs
    assert not cells[(2, False)].differs
    assert fb.max_error is None and fb.passed is None  # no gate set
    assert fb.definitions[2][0] == "Omission of finding" and fb.definitions[2][1]
    with pytest.raises(NotFound):
        calibration.training_feedback(any_db, r2, opaque[0])  # not r2's training item
    with pytest.raises(PermissionDenied, match="can't be reopened"):
        rating.reopen_pair(any_db, r1, opaque_id=item)
    with pytest.raises(PermissionDenied, match="training item is done"):
        rating.set_count(any_db, r1, opaque_id=item, category=1, significant=True, count=2)
    # Marking it done again changes nothing and is no error.
    assert rating.complete_pair(any_db, r1, opaque_id=item).completed_at is not None

    study_settings.update_study_settings(any_db, SYSTEM, study_name="S",
                                         qualification_items=1, qualification_max_error=0)
    fb = calibration.training_feedback(any_db, r1, item)
    assert (fb.max_error, fb.passed) == (0, True)


def test_training_answers_are_exported_apart_and_not_in_the_study_ratings(
        any_db, make_study, fast_password_hashing):
    opaque, actors = _setup(any_db, make_study)
    r1 = actors["r1"]
    # r1 rates pair 4 as a study pair; then the lead makes it a training item.
    study_pair = next(q.opaque_id for q in rating.rater_queue(any_db, r1, study_name="S"))
    number = opaque.index(study_pair) + 1
    _answer(any_db, r1, study_pair, 2)
    result = calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=_csv((number, 2)))
    assert result.ratings_left_study == 1
    ratings = load_ratings(any_db, "S")
    assert study_pair not in list(ratings.opaque_ids)
    rows = calibration.training_rows(any_db, SYSTEM, "S")
    mine = [r for r in rows if r["rater"] == "r1"]
    assert len(mine) == 12 and {r["pair_number"] for r in mine} == {number}
    assert sum(r["count"] for r in mine) == 2 and sum(r["expert_count"] for r in mine) == 2
    assert all(r["passed"] is True for r in mine)
    theirs = [r for r in rows if r["rater"] == "r2"]
    assert len(theirs) == 12 and all(r["passed"] is None for r in theirs)


def test_mark_from_an_expert_account_and_from_adjudication_then_unmark(
        any_db, make_study, fast_password_hashing):
    opaque, actors = _setup(any_db, make_study, raters=("r1", "r2", "expert"), k=1)
    expert = actors["expert"]
    done = [q.opaque_id for q in rating.rater_queue(any_db, expert, study_name="S")][:1]
    _answer(any_db, expert, done[0], 3)
    number = opaque.index(done[0]) + 1
    with pytest.raises(InvalidInput, match="has not completed pair"):
        calibration.mark_from_rater(any_db, SYSTEM, study_name="S", username="expert",
                                    pair_numbers=[n for n in range(1, 9) if n != number][:1])
    result = calibration.mark_from_rater(any_db, SYSTEM, study_name="S", username="expert")
    assert result.pair_numbers == (number,)
    [item] = calibration.list_training(any_db, SYSTEM, study_name="S")
    assert item.expert_source == "expert expert" and item.expert_counts["2:1"] == 3

    other = next(n for n in range(1, 9) if n != number)
    with any_db.begin() as s:
        pair = s.scalar(select(Pair).where(Pair.opaque_id == opaque[other - 1]))
        s.add(Adjudication(pair_id=pair.id, adjudicator_id=expert.user_id,
                           counts={"1:1": 1, "4:0": 2}, note="consensus"))
    result = calibration.mark_from_adjudication(any_db, SYSTEM, study_name="S")
    assert result.pair_numbers == (other,)
    items = {i.pair_number: i for i in calibration.list_training(any_db, SYSTEM,
                                                                 study_name="S")}
    assert items[other].expert_source == "adjudicated consensus"
    assert sum(items[other].expert_counts.values()) == 3

    # The expert's own item is done: it stays a training item; the other goes back.
    with pytest.raises(InvalidInput, match="have done this training item"):
        calibration.unmark_training(any_db, SYSTEM, study_name="S", pair_numbers=[number])
    r1 = actors["r1"]
    rating.set_count(any_db, r1, opaque_id=opaque[other - 1], category=1, significant=True,
                     count=1)  # unfinished: removed with the assignment
    result = calibration.unmark_training(any_db, SYSTEM, study_name="S", pair_numbers=[other])
    assert result.assignments_removed == 3
    assert [i.pair_number for i in calibration.list_training(any_db, SYSTEM,
                                                             study_name="S")] == [number]
    with any_db.read() as s:
        pair = s.scalar(select(Pair).where(Pair.opaque_id == opaque[other - 1]))
        assert (pair.kind, pair.expert) == ("study", None)
    with pytest.raises(InvalidInput, match="is not a training item"):
        calibration.unmark_training(any_db, SYSTEM, study_name="S", pair_numbers=[other])
    # Assigning again gives it a rater, as a study pair.
    summary = assign_raters(any_db, SYSTEM, study_name="S",
                            rater_usernames=["r1", "r2", "expert"], raters_per_pair=1, seed=3)
    assert summary.created == 1


def test_the_expert_whose_counts_are_the_key_is_not_graded_against_them(
        any_db, make_study, fast_password_hashing):
    """Items marked from an expert account's ratings: the others are graded against them;
    the expert is not (no training answer exported for them, no pass counted) and the gate
    does not hold them, while it still holds r1."""
    opaque, actors = _setup(any_db, make_study, raters=("r1", "expert"), k=2)
    expert, r1 = actors["expert"], actors["r1"]
    queue = [q.opaque_id for q in rating.rater_queue(any_db, expert, study_name="S")]
    _answer(any_db, expert, queue[0], 3)
    _answer(any_db, expert, queue[1], 0)
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S",
                                         qualification_items=2, qualification_max_error=0)
    calibration.mark_from_rater(any_db, SYSTEM, study_name="S", username="expert")
    items = calibration.list_training(any_db, SYSTEM, study_name="S")
    assert [i.expert_source for i in items] == ["expert expert"] * 2
    status = {q.rater: q for q in calibration.qualification_status(any_db, SYSTEM,
                                                                   study_name="S")}
    # The expert holds the two items (done, as study pairs) but is not tested on them.
    assert (status["expert"].training, status["expert"].passed) == (0, 0)
    assert status["expert"].qualified and status["expert"].required == 0
    assert (status["r1"].training, status["r1"].qualified) == (2, False)
    study_pair = next(q.opaque_id for q in rating.rater_queue(any_db, expert, study_name="S")
                      if q.opaque_id not in queue[:2])
    rating.set_count(any_db, expert, opaque_id=study_pair, category=1, significant=True,
                     count=1)  # the gate does not hold the expert
    with pytest.raises(PermissionDenied, match="Finish the training items of study 'S'"):
        rating.set_count(any_db, r1, opaque_id=study_pair, category=1, significant=True,
                         count=1)
    rows = calibration.training_rows(any_db, SYSTEM, "S")
    assert {r["rater"] for r in rows} == {"r1"}
    # r1 answers the key: 3 and 0 errors -> both pass with max error 0, and the gate opens.
    for oid, total in zip(queue[:2], (3, 0), strict=True):
        _answer(any_db, r1, oid, total)
    status = {q.rater: q for q in calibration.qualification_status(any_db, SYSTEM,
                                                                   study_name="S")}
    assert (status["r1"].passed, status["r1"].qualified) == (2, True)


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty"),
    ("pair_number,error_category,num_errors\n1,1,2\n", "missing column.*clinically_significant"),
    ("pair_number,error_category,clinically_significant,num_errors\n1,7,true,1\n",
     "line 2: error_category must be 1-6"),
    ("pair_number,error_category,clinically_significant,num_errors\n1,1,maybe,1\n",
     "line 2: clinically_significant must be true or false"),
    ("pair_number,error_category,clinically_significant,num_errors\n1,1,true,1\n1,1,yes,2\n",
     "line 3: pair 1 category 1 significant given twice"),
    ("pair_number,error_category,clinically_significant,num_errors\n1,1,true,100\n",
     "num_errors must be 0-99"),
    ("pair_number,error_category,clinically_significant,num_errors\nx,1,true,1\n",
     "line 2: pair_number, error_category and num_errors must be integers"),
])
def test_bad_training_csv_is_refused_with_its_line(text, message):
    with pytest.raises(InvalidInput, match=message):
        calibration.parse_expert_csv(text)


def test_marking_refuses_unknown_pairs_repeats_and_non_admins(any_db, make_study,
                                                              fast_password_hashing):
    _, actors = _setup(any_db, make_study)
    with pytest.raises(InvalidInput, match="has no pair number"):
        calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=_csv((99, 1)))
    with pytest.raises(PermissionDenied):
        calibration.mark_from_csv(any_db, actors["r1"], study_name="S", text=_csv((1, 1)))
    with pytest.raises(NotFound):
        calibration.list_training(any_db, SYSTEM, study_name="nope")
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", repeat_share=0.5)
    assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=list(RATERS),
                  raters_per_pair=1, seed=3)
    [(_, source_number, _), *_] = calibration.repeat_pairs(any_db, SYSTEM, "S")
    with pytest.raises(InvalidInput, match="has hidden repeats"):
        calibration.mark_from_csv(any_db, SYSTEM, study_name="S",
                                  text=_csv((source_number, 1)))
    # Nothing was half-written by the refusals.
    assert calibration.list_training(any_db, SYSTEM, study_name="S") == []


def test_adaptive_reorder_keeps_training_items_first(any_db):
    build_study(any_db, "A", n_pairs=16, raters=("ra", "rb"), k=2, seed=2)
    calibration.mark_from_csv(any_db, SYSTEM, study_name="A", text=_csv((3, 1), (8, 0)))
    assignment.set_strategy(any_db, SYSTEM, study_name="A", strategy="adaptive")
    ra = rater_actor(any_db, "ra")
    for _ in range(4):
        queue = rating.rater_queue(any_db, ra, study_name="A")
        assert _kinds_in_queue(any_db, ra, "A")[:2] == ["training", "training"]
        nxt = next(q.opaque_id for q in queue if not q.completed)
        _answer(any_db, ra, nxt, 1)
    kinds = _kinds_in_queue(any_db, ra, "A")
    assert kinds[:2] == ["training", "training"] and "training" not in kinds[2:]


def test_training_items_cli(tmp_path, monkeypatch, capsys, make_study, fast_password_hashing):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    db = Database(url)
    try:
        opaque, _ = _setup(db, make_study)
        assert main(["qualification", "--study", "S"]) == 0
        assert "S: no rater holds training items" in capsys.readouterr().out
        csv_file = tmp_path / "expert.csv"
        csv_file.write_text(_csv((1, 2), (2, 0), (6, 1)), encoding="utf-8")
        assert main(["training-items", "--study", "S", "--csv", str(csv_file),
                     "--pairs", "1,6"]) == 0
        out = capsys.readouterr().out
        assert "pair(s) 1, 6 marked as training items; 2 new training assignment(s)" in out
        assert main(["training-items", "--study", "S", "--list"]) == 0
        out = capsys.readouterr().out
        assert f"pair 1 ({opaque[0]}): expert total 2 from expert CSV expert.csv" in out
        assert "pair 6" in out and "pair 2 " not in out
        assert main(["training-items", "--study", "S", "--unmark", "--pairs", "6"]) == 0
        assert "pair(s) 6 are study pairs again" in capsys.readouterr().out
        assert main(["qualification", "--study", "S"]) == 0
        # No gate set: "no gate" (the same word on the Assign and Quality control pages).
        assert "r1: 0 of 1 training item(s) done, 0 passed (needs 0): no gate" in (
            capsys.readouterr().out)
        assert main(["training-items", "--study", "S", "--csv", str(csv_file),
                     "--pairs", "3"]) == 2
        assert "the CSV has no rows for pair(s) 3" in capsys.readouterr().err
        assert main(["training-items", "--study", "S", "--list", "--unmark"]) == 2
        assert "exactly one of" in capsys.readouterr().err
        with db.read() as s:
            assert s.scalar(select(Study.name)) == "S"
    finally:
        db.dispose()


def test_a_gate_without_training_items_holds_raters_waiting_not_failed(
        any_db, make_study, fast_password_hashing):
    opaque, actors = _setup(any_db, make_study)
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", qualification_items=1)
    r1 = actors["r1"]
    [mine] = rating.rater_studies(any_db, r1)
    assert mine.resume_opaque_id is None
    assert mine.qualification == ("Study 'S' starts with training items that are not ready "
                                  "yet: your study lead will let you know.")
    held = [o for o, in _held(any_db, "r1")]
    with pytest.raises(PermissionDenied, match="not ready yet"):
        rating.get_pair(any_db, r1, opaque_id=held[0])
    status = calibration.qualification_status(any_db, SYSTEM, study_name="S")
    assert [(r.rater, r.qualified, r.failed) for r in status] == [
        ("r1", False, False), ("r2", False, False)]
    # Once an item is marked, the rater is on it.
    calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=_csv((1, 0)))
    [mine] = rating.rater_studies(any_db, r1)
    assert mine.resume_opaque_id == opaque[0] and "0 of 1 passed" in mine.qualification


def test_feedback_says_where_the_rater_stands_with_the_gate(any_db, make_study,
                                                            fast_password_hashing):
    # On the rating screen the feedback is where a rater learns whether the study pairs
    # opened or they failed: the studies list is another page.
    _, actors = _setup(any_db, make_study)
    calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=_csv((1, 1), (2, 1)))
    r1, r2 = actors["r1"], actors["r2"]
    q1 = rating.rater_queue(any_db, r1, study_name="S")
    _answer(any_db, r1, q1[0].opaque_id, 1)
    assert calibration.training_feedback(any_db, r1, q1[0].opaque_id).standing is None

    study_settings.update_study_settings(any_db, SYSTEM, study_name="S",
                                         qualification_items=2, qualification_max_error=0)
    fb = calibration.training_feedback(any_db, r1, q1[0].opaque_id)
    assert fb.standing == "Finish the training items of study 'S' first (1 of 2 passed)."
    assert fb.qualified is False
    _answer(any_db, r1, q1[1].opaque_id, 1)
    fb = calibration.training_feedback(any_db, r1, q1[1].opaque_id)
    assert fb.standing == ("Qualified: 2 of the 2 training item(s) needed passed; the study "
                           "pairs of 'S' are open to you.")
    assert fb.qualified is True
    q2 = rating.rater_queue(any_db, r2, study_name="S")
    _answer(any_db, r2, q2[0].opaque_id, 4)
    fb = calibration.training_feedback(any_db, r2, q2[0].opaque_id)
    assert fb.passed is False and fb.standing.startswith("You did not qualify for study 'S'")


def test_assign_and_study_settings_commands_say_what_training_and_repeats_add(
        tmp_path, monkeypatch, capsys, make_study, fast_password_hashing):
    """``assign`` names its training-item and hidden-repeat assignments; a ``repeat_share``
    set with ``study-settings`` after raters were assigned gives them their repeats at once."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    db = Database(url)
    try:
        make_study(db, "S", 8)
        calibration.mark_training(db, SYSTEM, study_name="S", expert={8: {"1:1": 1}},
                                  source="panel")
        for name in ("r1", "r2"):
            auth.create_user(db, SYSTEM, username=name, password=f"{name}-password",
                             role="rater")
        assert main(["assign", "--study", "S", "--raters", "r1,r2", "--per-pair", "1",
                     "--seed", "2"]) == 0
        assert "plus 2 training-item and 0 hidden-repeat assignments" in (
            capsys.readouterr().out)
        assert main(["study-settings", "--study", "S", "--set", "repeat_share=0.5"]) == 0
        out = capsys.readouterr().out
        with db.read() as s:
            n = s.scalar(select(func.count(Pair.id)).where(Pair.kind == "repeat"))
        # (The placement rule may give a short queue fewer than the share asks.)
        assert n > 0 and f"{n} hidden repeats given to the raters already assigned" in out
        assert main(["study-settings", "--study", "S", "--set", "repeat_share=0.5"]) == 0
        assert "hidden repeats given" not in capsys.readouterr().out
    finally:
        db.dispose()
