"""Blinding: a rater reaches only their own pairs and never sees sources, scores, database ids
or other raters' answers; admin services refuse raters."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import func, select

from radconcord.backend.errors import NotFound, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin import progress, studies
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, MetricScore, Pair, Rating, RatingEvent

SYSTEM = Actor.system()
SOURCES = ("SECRET-GEN-ALPHA", "SECRET-GEN-BETA")


@pytest.fixture
def world(any_db, make_study, fast_password_hashing):
    """Study of 6 pairs, r1 and r2 on every pair, r3 on none of them; a cached score too."""
    make_study(any_db, "Blind", 6, sources=SOURCES)
    make_study(any_db, "Elsewhere", 2, sources=SOURCES)
    actors = {}
    for name in ("r1", "r2", "r3"):
        auth.create_user(any_db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(any_db, username=name, password=f"{name}-password")
    assign_raters(any_db, SYSTEM, study_name="Blind", rater_usernames=["r1", "r2"],
                  raters_per_pair=2, seed=0)
    assign_raters(any_db, SYSTEM, study_name="Elsewhere", rater_usernames=["r3"],
                  raters_per_pair=1, seed=0)
    with any_db.begin() as s:
        pair = s.scalar(select(Pair).join(Pair.study).where(Pair.position == 0)
                        .order_by(Pair.id).limit(1))
        s.add(MetricScore(input_hash=pair.input_hash, family="bleu", key="bleu4",
                          signature_hash="f" * 32, signature="bleu|test", value=0.123456))
    return any_db, actors


def _walk(value):
    """Every scalar inside a service result (dataclasses, tuples, lists, dicts)."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield f.name
            yield from _walk(getattr(value, f.name))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(k)
            yield from _walk(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _walk(v)
    else:
        yield value


def test_pair_view_fields_are_exactly_the_blinded_ones():
    names = [f.name for f in dataclasses.fields(rating.RaterPairView)]
    assert names == [
        "opaque_id", "study_name", "index", "total", "reference_text", "candidate_text",
        "images", "counts", "completed_at", "prev_opaque_id", "next_opaque_id", "version",
        "highlight_differences", "read_only", "final_for_adjudicator", "annotation_mode",
        "training",
    ]
    assert rating.ImageRef._fields == ("image_id", "view", "format")
    for cls in (rating.RaterStudy, rating.QueueItem, rating.SaveResult,
                rating.CompletionStatus, rating.CountsSaved):
        for f in dataclasses.fields(cls):
            assert not any(word in f.name for word in ("source", "score", "metric", "pair_id",
                                                       "rater")), (cls.__name__, f.name)


def test_rater_outputs_carry_no_source_score_or_other_rater(world):
    db, actors = world
    r1, r2 = actors["r1"], actors["r2"]
    shared = rating.rater_queue(db, r2, study_name="Blind")[0].opaque_id
    # r2's answers, with values r1 never enters.
    rating.set_count(db, r2, opaque_id=shared, category=1, significant=True, count=77)
    rating.set_count(db, r2, opaque_id=shared, category=4, significant=False, count=66)
    outputs = [
        rating.rater_studies(db, r1),
        studies.list_studies(db, r1),
        rating.rater_queue(db, r1, study_name="Blind"),
        rating.get_pair(db, r1, opaque_id=shared),
        rating.set_count(db, r1, opaque_id=shared, category=1, significant=True, count=1),
        rating.complete_pair(db, r1, opaque_id=shared),
        rating.reopen_pair(db, r1, opaque_id=shared),
    ]
    view = outputs[3]
    assert view.counts[(1, True)] == 0 and view.counts[(4, False)] == 0  # not r2's 77/66
    text = repr(outputs)
    for secret in (*SOURCES, "gen-", "0.123456", "bleu", "r2", "Elsewhere"):
        assert secret not in text, secret
    scalars = [v for v in _walk(outputs) if isinstance(v, int) and not isinstance(v, bool)]
    assert 77 not in scalars and 66 not in scalars


def test_unassigned_pair_is_not_found_and_untouched(world):
    db, actors = world
    r1, r3 = actors["r1"], actors["r3"]
    theirs = rating.rater_queue(db, r1, study_name="Blind")[0].opaque_id
    with pytest.raises(NotFound) as assigned_elsewhere:
        rating.get_pair(db, r3, opaque_id=theirs)
    with pytest.raises(NotFound) as missing:
        rating.get_pair(db, r3, opaque_id="does-not-exist")
    # Same wording whether the pair exists or not: ids cannot be probed.
    assert str(assigned_elsewhere.value).replace(theirs, "X") == str(missing.value).replace(
        "does-not-exist", "X"
    )
    for call in (
        lambda: rating.set_count(db, r3, opaque_id=theirs, category=1, significant=True, count=1),
        lambda: rating.complete_pair(db, r3, opaque_id=theirs, confirm_zero=True),
        lambda: rating.reopen_pair(db, r3, opaque_id=theirs),
        lambda: rating.set_counts(db, r3, opaque_id=theirs, cells={(1, True): 1},
                                  expected_version=0),
    ):
        with pytest.raises(NotFound):
            call()
    with pytest.raises(NotFound):
        rating.rater_queue(db, r3, study_name="Blind")
    # The system actor (CLI) has no assignments either.
    with pytest.raises(NotFound):
        rating.get_pair(db, SYSTEM, opaque_id=theirs)
    with db.begin() as s:
        assert s.scalar(select(func.count(Rating.id))) == 0
        assert s.scalar(select(func.count(RatingEvent.id))) == 0
        assert s.scalar(select(func.count(Assignment.id)).where(
            Assignment.version != 0)) == 0
    assert [st.name for st in rating.rater_studies(db, r3)] == ["Elsewhere"]


def test_admin_services_refuse_raters(world):
    db, actors = world
    r1 = actors["r1"]
    calls = [
        lambda: auth.list_users(db, r1),
        lambda: auth.create_user(db, r1, username="x1", password="long-enough", role="rater"),
        lambda: auth.set_active(db, r1, username="r2", active=False),
        lambda: assign_raters(db, r1, study_name="Blind", rater_usernames=["r1"],
                              raters_per_pair=1, seed=0),
        lambda: progress.study_progress(db, r1, study_name="Blind"),
        lambda: studies.get_study_summary(db, r1, study_name="Blind"),
    ]
    for call in calls:
        with pytest.raises(PermissionDenied):
            call()
    # list_studies for a rater is their own view, never the admin summary with sources.
    listed = studies.list_studies(db, r1)
    assert all(isinstance(item, rating.RaterStudy) for item in listed)
    assert "SECRET" not in repr(listed)


@pytest.mark.parametrize("status", ["draft", "importing"])
def test_images_of_a_hidden_study_are_refused_to_its_raters(world, status):
    """A rater's assignment in a draft or still-importing study opens none of its images."""
    from radconcord.backend.services.annotation import images
    from radconcord.db.models import Image, Study

    db, actors = world
    with db.begin() as s:
        pair = s.scalar(select(Pair).join(Pair.study).where(Study.name == "Blind")
                        .order_by(Pair.position).limit(1))
        image = Image(case_id=pair.case_id, path="images/x.png", format="png",
                      sha256="e" * 64, meta={})
        s.add(image)
        s.flush()
        image_id = image.id
        s.get(Study, pair.study_id).status = status
    with pytest.raises(PermissionDenied):
        images.rendered_image(db, actors["r1"], image_id=image_id)
    with db.begin() as s:
        s.scalar(select(Study).where(Study.name == "Blind")).status = "open"
    # Open again: access passes the check and fails only on the missing file.
    with pytest.raises(NotFound, match="missing"):
        images.rendered_image(db, actors["r1"], image_id=image_id)
