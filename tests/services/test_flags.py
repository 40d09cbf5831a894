"""'I'm unsure / flag this pair' on both databases: a rater flags their own pair with a note,
sees only their own flag, the lead lists every flag of the study; flags never touch counts,
done-state or version; bad notes and foreign pairs are refused by name with nothing saved."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select, update

from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import flags, rating
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Pair, Study

SYSTEM = Actor.system()
T0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)


def _setup(db, make_study):
    make_study(db, "S", 3)
    actors = {}
    for name, role in (("lead", "admin"), ("r1", "rater"), ("r2", "rater")):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role=role)
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    assign_raters(db, SYSTEM, study_name="S", rater_usernames=["r1", "r2"],
                  raters_per_pair=2, seed=3)
    return actors


def _assignment(db, actor, oid):
    with db.read() as s:
        a = s.execute(select(Assignment).join(Pair, Pair.id == Assignment.pair_id)
                      .where(Assignment.rater_id == actor.user_id, Pair.opaque_id == oid)
                      ).scalar_one()
        return a.flagged_at, a.flag_note, a.version, a.completed_at


def _positions(db):
    with db.read() as s:
        return dict(s.execute(select(Pair.opaque_id, Pair.position)).all())


def test_flag_with_note_is_the_raters_own_and_the_lead_sees_it(any_db, make_study,
                                                                fast_password_hashing):
    a = _setup(any_db, make_study)
    queue = rating.rater_queue(any_db, a["r1"], study_name="S")
    first, second = queue[0].opaque_id, queue[1].opaque_id
    assert not flags.pair_flag(any_db, a["r1"], opaque_id=first).flagged

    state = flags.flag_pair(any_db, a["r1"], opaque_id=first,
                            note="  Is the 'small effusion' a category 4?  ", now=T0)
    assert state.flagged and state.flagged_at == T0
    assert state.note == "Is the 'small effusion' a category 4?"  # stripped
    assert flags.pair_flag(any_db, a["r1"], opaque_id=first) == state
    # The other rater of the same pair does not see it: their own flag is unset.
    assert not flags.pair_flag(any_db, a["r2"], opaque_id=first).flagged

    # A new note replaces the old one; the pair stays flagged since the first time.
    again = flags.flag_pair(any_db, a["r1"], opaque_id=first, note="",
                            now=T0 + dt.timedelta(minutes=5))
    assert again.flagged_at == T0 and again.note == ""
    flags.flag_pair(any_db, a["r1"], opaque_id=first, note="unsure about laterality",
                    now=T0 + dt.timedelta(minutes=6))
    flags.flag_pair(any_db, a["r2"], opaque_id=second, note=None,
                    now=T0 + dt.timedelta(minutes=7))

    listed = flags.study_flags(any_db, a["lead"], "S")
    pos = _positions(any_db)
    assert [(f.pair_number, f.opaque_id, f.kind, f.rater, f.note, f.flagged_at, f.completed)
            for f in listed] == [
        (pos[first] + 1, first, "study", "r1", "unsure about laterality", T0, False),
        (pos[second] + 1, second, "study", "r2", "", T0 + dt.timedelta(minutes=7), False),
    ]

    # Unflag removes flag and note; unflagging again is no error.
    assert not flags.unflag_pair(any_db, a["r1"], opaque_id=first).flagged
    assert flags.unflag_pair(any_db, a["r1"], opaque_id=first).note == ""
    assert _assignment(any_db, a["r1"], first)[:2] == (None, None)
    assert [f.rater for f in flags.study_flags(any_db, a["lead"], "S")] == ["r2"]


def test_flags_never_touch_counts_done_state_or_version(any_db, make_study,
                                                       fast_password_hashing):
    a = _setup(any_db, make_study)
    oid = rating.rater_queue(any_db, a["r1"], study_name="S")[0].opaque_id
    rating.set_counts(any_db, a["r1"], opaque_id=oid, cells={(2, True): 1}, expected_version=0)
    rating.complete_pair(any_db, a["r1"], opaque_id=oid, expected_version=1)
    before = rating.get_pair(any_db, a["r1"], opaque_id=oid)

    flags.flag_pair(any_db, a["r1"], opaque_id=oid, note="second thoughts")
    after = rating.get_pair(any_db, a["r1"], opaque_id=oid)
    assert (after.counts, after.version, after.completed_at) == (
        before.counts, before.version, before.completed_at)
    # A save carrying the version seen before the flag is not stale.
    rating.set_counts(any_db, a["r1"], opaque_id=oid, cells={(2, True): 2},
                      expected_version=before.version)
    flags.unflag_pair(any_db, a["r1"], opaque_id=oid)
    assert rating.get_pair(any_db, a["r1"], opaque_id=oid).counts[(2, True)] == 2
    listed_done = flags.flag_pair(any_db, a["r1"], opaque_id=oid)
    assert listed_done.flagged
    assert flags.study_flags(any_db, a["lead"], "S")[0].completed is True


def test_bad_notes_foreign_pairs_and_closed_studies_are_refused(any_db, make_study,
                                                               fast_password_hashing):
    a = _setup(any_db, make_study)
    oid = rating.rater_queue(any_db, a["r1"], study_name="S")[0].opaque_id
    flags.flag_pair(any_db, a["r1"], opaque_id=oid, note="kept", now=T0)

    too_long = "x" * (flags.MAX_NOTE_CHARS + 1)
    with pytest.raises(InvalidInput, match=r"note: 1001 characters, at most 1000"):
        flags.flag_pair(any_db, a["r1"], opaque_id=oid, note=too_long)
    with pytest.raises(InvalidInput, match="note: must be text"):
        flags.flag_pair(any_db, a["r1"], opaque_id=oid, note=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="NUL"):
        flags.flag_pair(any_db, a["r1"], opaque_id=oid, note="a\x00b")
    # Nothing saved by a refused flag: the first note stands.
    assert flags.pair_flag(any_db, a["r1"], opaque_id=oid).note == "kept"
    # Exactly at the limit is fine.
    assert len(flags.flag_pair(any_db, a["r1"], opaque_id=oid,
                               note="y" * flags.MAX_NOTE_CHARS).note) == flags.MAX_NOTE_CHARS

    # A pair that does not exist, and another rater's only pair, answer alike.
    make_study(any_db, "Other", 1)
    with any_db.read() as s:
        foreign = s.scalar(select(Pair.opaque_id).join(Study).where(Study.name == "Other"))
    for bad in ("nope", foreign):
        with pytest.raises(NotFound, match=f"pair '{bad}' is not in your assignments"):
            flags.flag_pair(any_db, a["r1"], opaque_id=bad)
        with pytest.raises(NotFound, match="is not in your assignments"):
            flags.pair_flag(any_db, a["r1"], opaque_id=bad)
    with pytest.raises(InvalidInput, match="opaque_id"):
        flags.flag_pair(any_db, a["r1"], opaque_id="")

    # Only an admin lists flags; an unknown study is named.
    with pytest.raises(PermissionDenied):
        flags.study_flags(any_db, a["r1"], "S")
    with pytest.raises(NotFound, match="no study named 'Nope'"):
        flags.study_flags(any_db, a["lead"], "Nope")

    # A closed study: the flag is shown, no longer changed.
    with any_db.begin() as s:
        s.execute(update(Study).where(Study.name == "S").values(status="closed"))
    assert flags.pair_flag(any_db, a["r1"], opaque_id=oid).flagged
    with pytest.raises(PermissionDenied, match="study 'S' is closed; flags can't change"):
        flags.unflag_pair(any_db, a["r1"], opaque_id=oid)
    with pytest.raises(PermissionDenied, match="closed"):
        flags.flag_pair(any_db, a["r1"], opaque_id=oid, note="late")
    assert flags.pair_flag(any_db, a["r1"], opaque_id=oid).flagged
