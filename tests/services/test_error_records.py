"""Per-error records on both databases: counts derived from the records (audited, versioned),
validation naming the field, nothing written on a refusal, modes, ownership, blinding, export."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import func, select, update

from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import assignment_writes, error_records, rating
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import ErrorRecord, Pair, Rating, RatingEvent, Report, Study

SYSTEM = Actor.system()
CANDIDATE = "Small left effusion. Cardiomegaly is present. No pneumothorax."
REFERENCE = "Large right effusion.  Normal heart size.\nNo pneumothorax!"


def _setup(db, make_study, *, mode="error_records", raters=("r1", "r2")):
    make_study(db, "S", 3)
    with db.begin() as s:
        for report in s.scalars(select(Report)):
            report.text = CANDIDATE if report.role == "candidate" else REFERENCE
    actors = {}
    for name in raters:
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    assign_raters(db, SYSTEM, study_name="S", rater_usernames=list(raters),
                  raters_per_pair=len(raters), seed=1)
    if mode != "counts":
        study_settings.update_study_settings(db, SYSTEM, study_name="S", annotation_mode=mode)
    return actors


def _first(db, actor) -> str:
    return rating.rater_queue(db, actor, study_name="S")[0].opaque_id


def _span(words: str) -> tuple[int, int]:
    start = CANDIDATE.index(words)
    return start, start + len(words)


def _stored(db):
    """Every stored row a write could touch: records, ratings, audit events, versions."""
    with db.read() as s:
        return (
            s.scalar(select(func.count(ErrorRecord.id))),
            sorted(s.execute(select(Rating.rater_id, Rating.pair_id, Rating.category,
                                    Rating.significant, Rating.count)).all()),
            s.scalar(select(func.count(RatingEvent.id))),
            sorted(s.execute(select(rating.Assignment.id, rating.Assignment.version)).all()),
        )


def test_reference_sentences_split_on_sentence_ends_and_line_breaks():
    spans = error_records.reference_sentences(REFERENCE)
    assert [REFERENCE[a:b] for a, b in spans] == [
        "Large right effusion.", "Normal heart size.", "No pneumothorax!"]
    assert error_records.reference_sentences("   \n ") == []
    assert error_records.reference_sentences("No period") == [(0, 9)]


def test_counts_are_the_tally_of_the_records(any_db, make_study, fast_password_hashing):
    r1 = _setup(any_db, make_study)["r1"]
    pair = _first(any_db, r1)
    a, b = _span("Small left")
    first = error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=1,
                                     significant=True, candidate_start=a, candidate_end=b,
                                     note="  laterality  ", expected_version=0)
    assert first.version == 1 and first.saved_at is not None
    (rec,) = first.records
    assert (rec.kind, rec.candidate_text, rec.note, rec.reference_start) == (
        "span", "Small left", "laterality", None)
    a2, b2 = _span("Cardiomegaly")
    second = error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=1,
                                      significant=True, candidate_start=a2, candidate_end=b2,
                                      expected_version=1)
    start, end = error_records.reference_sentences(REFERENCE)[1]
    third = error_records.add_record(any_db, r1, opaque_id=pair, kind="omission", category=2,
                                     significant=False, reference_start=start,
                                     reference_end=end, expected_version=second.version)
    assert third.version == 3
    assert third.records[-1].reference_text == "Normal heart size."
    assert third.records[-1].candidate_text is None
    expected = dict.fromkeys(assignment_writes.CELLS, 0) | {(1, True): 2, (2, False): 1}
    assert third.counts == expected
    # The rating view (and so every analysis) reads the same counts.
    view = rating.get_pair(any_db, r1, opaque_id=pair)
    assert view.counts == expected and view.version == 3
    # Audited as grid saves: one "set" event per changed cell, old and new count.
    with any_db.read() as s:
        events = s.execute(select(RatingEvent.category, RatingEvent.significant,
                                  RatingEvent.old_count, RatingEvent.new_count)
                           .where(RatingEvent.rater_id == r1.user_id)
                           .order_by(RatingEvent.id)).all()
    assert [tuple(e) for e in events] == [(1, True, None, 1), (1, True, 1, 2),
                                          (2, False, None, 1)]

    # Deleting one record derives the counts again.
    after = error_records.delete_record(any_db, r1, opaque_id=pair,
                                        record_id=first.records[0].record_id,
                                        expected_version=3)
    assert after.version == 4
    assert [r.candidate_text for r in after.records] == ["Cardiomegaly", None]
    assert after.counts == expected | {(1, True): 1}
    assert error_records.list_records(any_db, r1, opaque_id=pair) == dataclasses.replace(
        after, saved_at=None)


def test_a_stale_version_is_refused_and_nothing_is_written(any_db, make_study,
                                                           fast_password_hashing):
    r1 = _setup(any_db, make_study)["r1"]
    pair = _first(any_db, r1)
    a, b = _span("effusion")
    saved = error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=1,
                                     significant=False, candidate_start=a, candidate_end=b,
                                     expected_version=0)
    before = _stored(any_db)
    with pytest.raises(assignment_writes.StaleWrite) as caught:
        error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=3,
                                 significant=True, candidate_start=a, candidate_end=b,
                                 expected_version=0)
    assert caught.value.version == 1 and caught.value.counts[(1, False)] == 1
    with pytest.raises(assignment_writes.StaleWrite):
        error_records.delete_record(any_db, r1, opaque_id=pair,
                                    record_id=saved.records[0].record_id, expected_version=0)
    assert _stored(any_db) == before


@pytest.mark.parametrize(("fields", "message"), [
    ({"candidate_start": 0, "candidate_end": len(CANDIDATE) + 1}, "candidate_start/candidate_end"),
    ({"candidate_start": 5, "candidate_end": 5}, "not a non-empty span"),
    ({"candidate_start": -1, "candidate_end": 3}, "candidate_start/candidate_end"),
    ({"candidate_start": 5, "candidate_end": 6}, "only white space"),
    # A full stop on its own (the word cursor rests on punctuation too) is no error.
    ({"candidate_start": 19, "candidate_end": 21}, "19-21 holds no word"),
    ({"kind": "omission", "category": 2, "reference_start": 40, "reference_end": 42},
     "40-42 holds no word"),
    ({"candidate_start": "0", "candidate_end": 3}, "candidate_start: must be a whole number"),
    ({"candidate_start": 0}, "candidate_end: required for a span record"),
    ({"candidate_start": 0, "candidate_end": 3, "reference_start": 0, "reference_end": 3},
     "reference_start: not allowed for a span record"),
    ({"kind": "omission", "category": 6, "reference_start": 0,
      "reference_end": len(REFERENCE) + 2}, "reference_start/reference_end"),
    ({"kind": "omission", "category": 2, "candidate_start": 0, "candidate_end": 3},
     "reference_start: required for an omission record"),
    ({"kind": "typo", "candidate_start": 0, "candidate_end": 3}, "kind: must be"),
    ({"category": 7, "candidate_start": 0, "candidate_end": 3}, "category: must be"),
    ({"category": True, "candidate_start": 0, "candidate_end": 3}, "category: must be"),
    ({"significant": 1, "candidate_start": 0, "candidate_end": 3}, "significant: must be"),
    ({"note": "x" * (error_records.MAX_NOTE + 1), "candidate_start": 0, "candidate_end": 3},
     "note: at most"),
    ({"expected_version": -1, "candidate_start": 0, "candidate_end": 3}, "expected_version"),
])
def test_bad_values_are_refused_naming_the_field(any_db, make_study, fast_password_hashing,
                                                 fields, message):
    r1 = _setup(any_db, make_study, raters=("r1",))["r1"]
    pair = _first(any_db, r1)
    args = {"kind": "span", "category": 1, "significant": True} | fields
    before = _stored(any_db)
    with pytest.raises(InvalidInput, match=message.replace("/", ".")):
        error_records.add_record(any_db, r1, opaque_id=pair, **args)
    assert _stored(any_db) == before


def test_a_kind_takes_only_its_own_categories(any_db, make_study, fast_password_hashing):
    """An omission marks a reference sentence (2 finding, 6 comparison); a span of the
    candidate is a false finding (1), a wrong location (3) or severity (4) or a comparison the
    reference lacks (5). Any other pair is refused, naming the field and what is allowed,
    and writes nothing; every allowed pair is stored."""
    assert error_records.KIND_CATEGORIES == {"span": (1, 3, 4, 5), "omission": (2, 6)}
    r1 = _setup(any_db, make_study, raters=("r1",))["r1"]
    pair = _first(any_db, r1)
    a, b = _span("Cardiomegaly")
    start, end = error_records.reference_sentences(REFERENCE)[1]
    where = {"span": {"candidate_start": a, "candidate_end": b},
             "omission": {"reference_start": start, "reference_end": end}}
    refused = [("span", 2, "an error span marks the candidate, so its category is 1 or 3 or 4 "
                           "or 5, got 2"),
               ("span", 6, "so its category is 1 or 3 or 4 or 5, got 6"),
               ("omission", 1, "an omission marks the reference, so its category is 2 or 6, "
                               "got 1"),
               ("omission", 3, "so its category is 2 or 6, got 3"),
               ("omission", 4, "so its category is 2 or 6, got 4"),
               ("omission", 5, "so its category is 2 or 6, got 5")]
    before = _stored(any_db)
    for kind, category, message in refused:
        with pytest.raises(InvalidInput) as caught:
            error_records.add_record(any_db, r1, opaque_id=pair, kind=kind, category=category,
                                     significant=True, expected_version=0, **where[kind])
        assert str(caught.value).startswith("category: "), str(caught.value)
        assert message in str(caught.value)
        # ...and why, in the words the panel says (issue 24).
        why = error_records.category_refusal(kind, category)
        assert why is not None and f"({why})" in str(caught.value)
        assert _stored(any_db) == before
    version = 0
    for kind, categories in error_records.KIND_CATEGORIES.items():
        for category in categories:
            saved = error_records.add_record(any_db, r1, opaque_id=pair, kind=kind,
                                             category=category, significant=False,
                                             expected_version=version, **where[kind])
            version = saved.version
    assert [(r.kind, r.category) for r in saved.records] == [
        ("span", 1), ("span", 3), ("span", 4), ("span", 5), ("omission", 2), ("omission", 6)]
    assert saved.counts == dict.fromkeys(assignment_writes.CELLS, 0) | {
        (c, False): 1 for c in range(1, 7)}


def test_the_same_record_twice_and_bad_record_ids_are_refused(any_db, make_study,
                                                              fast_password_hashing):
    r1 = _setup(any_db, make_study, raters=("r1",))["r1"]
    pair = _first(any_db, r1)
    a, b = _span("Cardiomegaly")
    error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=5,
                             significant=True, candidate_start=a, candidate_end=b)
    before = _stored(any_db)
    with pytest.raises(InvalidInput, match="already recorded"):
        error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=5,
                                 significant=True, candidate_start=a, candidate_end=b)
    with pytest.raises(InvalidInput, match="record_id"):
        error_records.delete_record(any_db, r1, opaque_id=pair, record_id="1")
    with pytest.raises(NotFound, match="not among your records"):
        error_records.delete_record(any_db, r1, opaque_id=pair, record_id=10_000)
    assert _stored(any_db) == before
    # The same words under another category are a second error, recorded.
    again = error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=4,
                                     significant=True, candidate_start=a, candidate_end=b)
    assert again.counts[(5, True)] == again.counts[(4, True)] == 1


def test_a_counts_study_refuses_records(any_db, make_study, fast_password_hashing):
    r1 = _setup(any_db, make_study, mode="counts", raters=("r1",))["r1"]
    pair = _first(any_db, r1)
    before = _stored(any_db)
    with pytest.raises(InvalidInput, match="does not use per-error records"):
        error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=1,
                                 significant=True, candidate_start=0, candidate_end=5)
    assert _stored(any_db) == before
    assert error_records.list_records(any_db, r1, opaque_id=pair).records == ()


def test_a_closed_study_refuses_records(any_db, make_study, fast_password_hashing):
    r1 = _setup(any_db, make_study, raters=("r1",))["r1"]
    pair = _first(any_db, r1)
    saved = error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=1,
                                     significant=True, candidate_start=0, candidate_end=5)
    with any_db.begin() as s:
        s.execute(update(Study).values(status="closed"))
    before = _stored(any_db)
    with pytest.raises(PermissionDenied, match="closed"):
        error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=3,
                                 significant=True, candidate_start=0, candidate_end=5)
    with pytest.raises(PermissionDenied, match="closed"):
        error_records.delete_record(any_db, r1, opaque_id=pair,
                                    record_id=saved.records[0].record_id)
    assert _stored(any_db) == before
    assert len(error_records.list_records(any_db, r1, opaque_id=pair).records) == 1


def test_a_rater_cannot_see_or_delete_another_raters_records(any_db, make_study,
                                                             fast_password_hashing):
    actors = _setup(any_db, make_study, raters=("r1", "r2", "r3"))
    r1, r2 = actors["r1"], actors["r2"]
    pair = _first(any_db, r1)
    mine = error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=3,
                                    significant=True, candidate_start=0, candidate_end=5,
                                    note="r1's private note")
    # r2 rates the same pair: sees none of r1's records or counts, can't delete r1's.
    theirs = error_records.list_records(any_db, r2, opaque_id=pair)
    assert theirs.records == () and not any(theirs.counts.values())
    before = _stored(any_db)
    with pytest.raises(NotFound, match="not among your records"):
        error_records.delete_record(any_db, r2, opaque_id=pair,
                                    record_id=mine.records[0].record_id)
    assert _stored(any_db) == before
    # A pair not assigned to the actor is NotFound, the same as one that does not exist.
    with any_db.begin() as s:
        s.execute(rating.Assignment.__table__.delete().where(
            rating.Assignment.rater_id == r2.user_id))
    for oid in (pair, "no-such-pair"):
        with pytest.raises(NotFound, match="is not in your assignments"):
            error_records.list_records(any_db, r2, opaque_id=oid)
        with pytest.raises(NotFound, match="is not in your assignments"):
            error_records.add_record(any_db, r2, opaque_id=oid, kind="span", category=1,
                                     significant=True, candidate_start=0, candidate_end=5)


def test_record_views_are_blinded():
    for cls in (error_records.RecordView, error_records.PairRecords):
        for f in dataclasses.fields(cls):
            assert not any(word in f.name for word in ("source", "score", "metric", "pair_id",
                                                       "rater", "user")), (cls.__name__, f.name)


def test_export_rows_are_the_study_pairs_records_for_admins(any_db, make_study,
                                                           fast_password_hashing):
    actors = _setup(any_db, make_study)
    r1, r2 = actors["r1"], actors["r2"]
    pair = _first(any_db, r1)
    a, b = _span("Cardiomegaly")
    error_records.add_record(any_db, r2, opaque_id=pair, kind="span", category=3,
                             significant=False, candidate_start=a, candidate_end=b, note="n")
    start, end = error_records.reference_sentences(REFERENCE)[0]
    error_records.add_record(any_db, r1, opaque_id=pair, kind="omission", category=2,
                             significant=True, reference_start=start, reference_end=end)
    # A record on a training item stays out of the study export.
    other = rating.rater_queue(any_db, r1, study_name="S")[1].opaque_id
    error_records.add_record(any_db, r1, opaque_id=other, kind="span", category=1,
                             significant=True, candidate_start=0, candidate_end=5)
    with any_db.begin() as s:
        s.execute(update(Pair).where(Pair.opaque_id == other).values(kind="training"))
    with pytest.raises(PermissionDenied):
        error_records.export_rows(any_db, r1, "S")
    with pytest.raises(NotFound):
        error_records.export_rows(any_db, SYSTEM, "nope")
    rows = error_records.export_rows(any_db, SYSTEM, "S")
    with any_db.read() as s:
        number = s.scalar(select(Pair.position).where(Pair.opaque_id == pair)) + 1
    assert [(r["pair_number"], r["opaque_id"], r["rater"], r["kind"]) for r in rows] == [
        (number, pair, "r1", "omission"), (number, pair, "r2", "span")]
    assert rows[0] | {"created_at": None} == {
        "pair_number": number, "opaque_id": pair, "rater": "r1", "kind": "omission",
        "category": 2, "significant": True, "candidate_start": None, "candidate_end": None,
        "candidate_text": None, "reference_start": start, "reference_end": end,
        "reference_text": "Large right effusion.", "note": "", "details": None,
        "created_at": None}
    assert rows[1]["candidate_text"] == "Cardiomegaly" and rows[1]["note"] == "n"
    assert rows[1]["created_at"].endswith("+00:00")


def test_an_error_records_study_refuses_direct_grid_edits(any_db, make_study,
                                                          fast_password_hashing):
    """The counts are derived from the records: a grid save (one cell or several) is
    refused with the reason, and nothing is written."""
    r1 = _setup(any_db, make_study, raters=("r1",))["r1"]
    pair = _first(any_db, r1)
    before = _stored(any_db)
    with pytest.raises(PermissionDenied, match="derives the counts from your marked errors"):
        rating.set_count(any_db, r1, opaque_id=pair, category=1, significant=True, count=2)
    with pytest.raises(PermissionDenied, match="derives the counts"):
        rating.set_counts(any_db, r1, opaque_id=pair, cells={(2, False): 1},
                          expected_version=0)
    assert _stored(any_db) == before
    # A record still derives the counts.
    start, end = _span("Cardiomegaly")
    error_records.add_record(any_db, r1, opaque_id=pair, kind="span", category=1,
                             significant=True, candidate_start=start, candidate_end=end)
    assert rating.get_pair(any_db, r1, opaque_id=pair).counts[(1, True)] == 1


def test_category_refusal_says_in_words_which_report_the_category_marks():
    """Issue 24: the panel says why a category was refused, e.g. "category 2 is an omission:
    press O on a reference sentence"; the service's message carries the same words."""
    assert error_records.category_refusal("span", 2) == (
        "category 2 is an omission: press O on a reference sentence the candidate leaves out "
        "(omission of finding)")
    assert error_records.category_refusal("omission", 4) == (
        "category 4 marks wrong words of the candidate, not an omission: press O to go back "
        "to the candidate's words (incorrect severity of finding)")
    fits = [(kind, c) for kind, cats in error_records.KIND_CATEGORIES.items() for c in cats]
    assert all(error_records.category_refusal(kind, c) is None for kind, c in fits)
    refusals = error_records.category_refusals()
    assert {k: sorted(v) for k, v in refusals.items()} == {"span": [2, 6],
                                                           "omission": [1, 3, 4, 5]}
