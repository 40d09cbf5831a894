"""Hidden intra-rater repeats: how many, where in the rater's queue, not recognisable,
idempotent, kept in place by the adaptive order, and out of the study's statistics."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import func, select, update

from radconcord.backend.errors import PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.evaluation.study_data import load_ratings
from radconcord.backend.services.quality import calibration
from radconcord.backend.services.study_admin import assignment, study_settings
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Pair, Study
from tests.helpers_adaptive import build_study, rater_actor

SYSTEM = Actor.system()
RATERS = ("r1", "r2", "r3")


def _setup(db, make_study, *, n_pairs=16, share=0.25, k=2, seed=4):
    opaque = make_study(db, "S", n_pairs)
    actors = {}
    for username in RATERS:
        auth.create_user(db, SYSTEM, username=username, password=f"{username}-password",
                         role="rater")
        actors[username] = auth.authenticate(db, username=username,
                                             password=f"{username}-password")
    study_settings.update_study_settings(db, SYSTEM, study_name="S", repeat_share=share)
    summary = assign_raters(db, SYSTEM, study_name="S", rater_usernames=list(RATERS),
                            raters_per_pair=k, seed=seed)
    return opaque, actors, summary


def _pairs(db) -> dict[str, Pair]:
    with db.read() as s:
        return {p.opaque_id: p for p in s.scalars(select(Pair))}


def _repeat_layout(db, actor) -> tuple[list[str], dict[str, str]]:
    """(the rater's queue, repeat opaque id -> source opaque id)."""
    pairs = _pairs(db)
    by_id = {p.id: p for p in pairs.values()}
    queue = [q.opaque_id for q in rating.rater_queue(db, actor, study_name="S")]
    sources = {o: by_id[pairs[o].repeat_of_id].opaque_id for o in queue
               if pairs[o].kind == "repeat"}
    return queue, sources


def test_each_rater_gets_their_share_later_in_their_queue_never_adjacent(
        any_db, make_study, fast_password_hashing):
    _, actors, summary = _setup(any_db, make_study)
    # 16 pairs x k=2 over 3 raters: loads 11, 11, 10; round(0.25 * n) repeats each.
    assert sorted(summary.per_rater.values()) == [10, 11, 11]
    assert summary.repeats_created == 3 + 3 + 3  # 2.75, 2.75, 2.5 all round to 3
    for username, actor in actors.items():
        queue, sources = _repeat_layout(any_db, actor)
        n_study = summary.per_rater[username]
        assert len(sources) == round(0.25 * n_study + 0.01)
        assert len(queue) == n_study + len(sources)
        gap = assignment.repeat_gap(n_study)
        assert gap == 2
        for repeat, source in sources.items():
            i, j = queue.index(source), queue.index(repeat)
            assert j - i > gap, (username, i, j)  # at least `gap` pairs between: not adjacent
            assert j >= len(queue) // 2 - 1  # in the later part of the queue
        assert len(set(sources.values())) == len(sources)  # one repeat per source and rater


def test_a_repeat_shows_the_same_pair_and_nothing_marks_it(any_db, make_study,
                                                             fast_password_hashing):
    _, actors, _ = _setup(any_db, make_study)
    actor = actors["r1"]
    queue, sources = _repeat_layout(any_db, actor)
    repeat, source = next(iter(sources.items()))
    pairs = _pairs(any_db)
    for field in ("case_id", "reference_id", "candidate_id", "input_hash", "study_id"):
        assert getattr(pairs[repeat], field) == getattr(pairs[source], field)
    assert pairs[repeat].position > max(p.position for p in pairs.values()
                                        if p.kind == "study")
    a = rating.get_pair(any_db, actor, opaque_id=source)
    b = rating.get_pair(any_db, actor, opaque_id=repeat)
    differ = {f.name for f in dataclasses.fields(rating.RaterPairView)
              if getattr(a, f.name) != getattr(b, f.name)}
    # Only the ids and the place in the queue differ (no field says "repeat").
    assert differ <= {"opaque_id", "index", "prev_opaque_id", "next_opaque_id"}
    assert b.training is False and b.index == queue.index(repeat) + 1
    # Rating the repeat is rating a pair like any other; it stays out of the study's ratings.
    rating.set_count(any_db, actor, opaque_id=repeat, category=1, significant=True, count=2)
    rating.complete_pair(any_db, actor, opaque_id=repeat)
    assert repeat not in load_ratings(any_db, "S").opaque_ids
    listed = calibration.repeat_pairs(any_db, SYSTEM, "S")
    assert ("r1", pairs[source].position + 1, repeat) in listed
    assert len(listed) == 9


def test_assigning_again_adds_no_repeats_and_new_pairs_get_theirs(any_db, make_study,
                                                                  fast_password_hashing):
    _, actors, _ = _setup(any_db, make_study)
    with any_db.read() as s:
        before = sorted(s.execute(select(Assignment.rater_id, Assignment.pair_id,
                                         Assignment.order_index)).all())
    again = assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=list(RATERS),
                          raters_per_pair=2, seed=99)
    assert (again.created, again.repeats_created) == (0, 0)
    with any_db.read() as s:
        assert sorted(s.execute(select(Assignment.rater_id, Assignment.pair_id,
                                       Assignment.order_index)).all()) == before
    # A larger k gives every rater more study pairs, so more repeats, placed by the rule.
    more = assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=list(RATERS),
                         raters_per_pair=3, seed=4)
    assert more.created == 16 and more.repeats_created == 3  # 16 pairs each: 4 repeats
    for actor in actors.values():
        queue, sources = _repeat_layout(any_db, actor)
        assert len(sources) == 4
        for repeat, source in sources.items():
            assert queue.index(repeat) - queue.index(source) > 2


def test_repeats_are_placed_after_what_the_rater_has_done(any_db, make_study,
                                                          fast_password_hashing):
    _, actors, _ = _setup(any_db, make_study, share=0.0)
    actor = actors["r1"]
    queue = [q.opaque_id for q in rating.rater_queue(any_db, actor, study_name="S")]
    for oid in queue[:8]:
        rating.complete_pair(any_db, actor, opaque_id=oid, confirm_zero=True)
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", repeat_share=0.3)
    summary = assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=list(RATERS),
                            raters_per_pair=2, seed=4)
    assert summary.repeats_created > 0
    after, sources = _repeat_layout(any_db, actor)
    assert after[:8] == queue[:8]  # done pairs keep their places
    assert sources and all(after.index(r) >= 8 for r in sources)
    assert [o for o in after if o not in sources] == queue  # the rest keeps its order


@pytest.mark.parametrize("share, expected", [(0.0, 0), (0.1, 1), (0.5, 4)])
def test_share_rounds_half_up(any_db, make_study, fast_password_hashing, share, expected):
    make_study(any_db, "S", 8)
    auth.create_user(any_db, SYSTEM, username="solo", password="solo-password", role="rater")
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", repeat_share=share)
    summary = assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=["solo"],
                            raters_per_pair=1, seed=1)
    # 8 study pairs: 0.1 * 8 = 0.8 -> 1; 0.5 * 8 = 4, though sources need room for the gap.
    assert summary.repeats_created == expected


def test_adaptive_order_never_moves_repeats_or_training_items(any_db):
    build_study(any_db, "S", n_pairs=20, raters=("ra", "rb"), k=2, seed=2)
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", repeat_share=0.2)
    assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=["ra", "rb"],
                  raters_per_pair=2, seed=2)
    assignment.set_strategy(any_db, SYSTEM, study_name="S", strategy="adaptive")
    ra = rater_actor(any_db, "ra")
    queue, sources = _repeat_layout(any_db, ra)
    places = {r: queue.index(r) for r in sources}
    assert len(places) == 4
    for _ in range(5):
        q = rating.rater_queue(any_db, ra, study_name="S")
        nxt = next(x.opaque_id for x in q if not x.completed and x.opaque_id not in sources)
        rating.set_count(any_db, ra, opaque_id=nxt, category=1, significant=True, count=1)
        rating.complete_pair(any_db, ra, opaque_id=nxt)
        queue, _ = _repeat_layout(any_db, ra)
        assert {r: queue.index(r) for r in sources} == places


def test_adaptive_order_keeps_each_source_well_before_its_repeat(any_db):
    # The adaptive order permutes open study pairs; a source moved next to (or after) its
    # repeat would make the repeat recognisable, or no repeat at all.
    build_study(any_db, "S", n_pairs=24, raters=("ra", "rb"), k=2, seed=7)
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", repeat_share=0.3)
    assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=["ra", "rb"],
                  raters_per_pair=2, seed=7)
    assignment.set_strategy(any_db, SYSTEM, study_name="S", strategy="adaptive")
    gap = assignment.repeat_gap(24)
    for username in ("ra", "rb"):
        actor = rater_actor(any_db, username)
        for step in range(8):
            queue, sources = _repeat_layout(any_db, actor)
            assert sources
            for repeat, source in sources.items():
                assert queue.index(repeat) - queue.index(source) > gap, (username, step)
            q = rating.rater_queue(any_db, actor, study_name="S")
            nxt = next(x.opaque_id for x in q if not x.completed)
            rating.set_count(any_db, actor, opaque_id=nxt, category=1, significant=True,
                             count=step % 3 + 1)
            rating.complete_pair(any_db, actor, opaque_id=nxt)


def test_training_gate_repeats_and_adaptive_order_together(any_db):
    # The brief's combined study: training items first behind a gate, then the study pairs
    # in adaptive order with hidden repeats well after their sources; the repeats feed the
    # intra-rater statistics and nothing else.
    from radconcord.backend.services.quality import qc

    build_study(any_db, "S", n_pairs=20, raters=("ra", "rb"), k=2, seed=3)
    calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=(
        "pair_number,error_category,clinically_significant,num_errors\n1,1,true,1\n"
        "2,2,false,0\n"))
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", repeat_share=0.3,
                                         qualification_items=2, qualification_max_error=1)
    summary = assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=["ra", "rb"],
                            raters_per_pair=2, seed=3)
    assert summary.repeats_created == 2 * round(0.3 * 18)
    assignment.set_strategy(any_db, SYSTEM, study_name="S", strategy="adaptive")
    ra = rater_actor(any_db, "ra")
    gap = assignment.repeat_gap(18)
    seen: list[str] = []
    pairs = _pairs(any_db)
    for step in range(40):
        queue, sources = _repeat_layout(any_db, ra)
        for repeat, source in sources.items():
            assert queue.index(repeat) - queue.index(source) > gap, step
        q = rating.rater_queue(any_db, ra, study_name="S")
        open_ = [x.opaque_id for x in q if not x.completed]
        if not open_:
            break
        nxt = open_[0]
        kind = pairs[nxt].kind
        if step < 2:
            assert kind == "training"  # the gate: training items first
        else:
            assert kind != "training"
        # A repeat's answer differs from its source's by one error: agreement is not perfect.
        rating.set_count(any_db, ra, opaque_id=nxt, category=1, significant=True,
                         count=1 + (kind == "repeat"))
        rating.complete_pair(any_db, ra, opaque_id=nxt)
        seen.append(nxt)
    assert len(seen) == len(set(seen)) == 2 + 18 + round(0.3 * 18)
    intra = {r.rater: r for r in qc.intra_rater(any_db, SYSTEM, "S").raters}
    total = intra["ra"].agreement.scope("total")
    assert (intra["ra"].counted, total.exact, total.mean_abs_diff) == (5, 0.0, 1.0)
    # Only the 18 study pairs count for the study (no training item, no repeat).
    assert set(load_ratings(any_db, "S").opaque_ids) == {
        o for o, p in pairs.items() if p.kind == "study"}


def test_a_share_set_after_assignment_adds_the_repeats_when_asked(any_db, make_study,
                                                                  fast_password_hashing):
    # The lead assigned first and set the share afterwards (the Assign page's order).
    opaque, actors, summary = _setup(any_db, make_study, share=0.0)
    assert summary.repeats_created == 0
    with pytest.raises(PermissionDenied):
        assignment.add_missing_repeats(any_db, actors["r1"], study_name="S")
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", repeat_share=0.25)
    assert assignment.add_missing_repeats(any_db, SYSTEM, study_name="S") == 9
    for username, actor in actors.items():
        queue, sources = _repeat_layout(any_db, actor)
        assert len(sources) == 3
        for repeat, source in sources.items():
            assert queue.index(repeat) - queue.index(source) > assignment.repeat_gap(
                summary.per_rater[username])
    # Nothing more, now or from assigning again.
    assert assignment.add_missing_repeats(any_db, SYSTEM, study_name="S") == 0
    again = assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=list(RATERS),
                          raters_per_pair=2, seed=4)
    assert again.repeats_created == 0 and again.created == 0


def test_a_closed_study_gets_no_repeats_nobody_could_do(any_db, make_study,
                                                        fast_password_hashing):
    _setup(any_db, make_study, share=0.0)
    with any_db.begin() as s:
        s.execute(update(Study).where(Study.name == "S").values(status="closed"))
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", repeat_share=0.25)
    assert assignment.add_missing_repeats(any_db, SYSTEM, study_name="S") == 0
    with any_db.read() as s:
        assert s.scalar(select(func.count(Pair.id)).where(Pair.kind == "repeat")) == 0
