"""Review of issue 14's adjudication: pairs keep the number every other page and file gives
them (``position + 1``), also once an earlier pair became a training item.

Numbering by rank among the study pairs shifted every later pair by one after pair 1 was
marked as training: the queue, ``get_item(pair_number=...)`` and adjudications.jsonl then
named a different pair than the dashboard, ratings.jsonl and ``mark_from_adjudication``.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.quality import adjudication, calibration
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Pair, Rating, Study

SYSTEM = Actor.system()
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def test_numbers_are_positions_after_a_pair_became_training(any_db, make_study,
                                                            fast_password_hashing):
    db = any_db
    opaque = make_study(db, "N", 4)
    calibration.mark_training(db, SYSTEM, study_name="N", expert={1: {}}, source="panel")
    ids = {}
    for name in ("r1", "r2"):
        ids[name] = auth.create_user(db, SYSTEM, username=name, password=f"{name}-password",
                                     role="rater").user_id
    with db.begin() as s:
        study_id = s.scalar(select(Study.id).where(Study.name == "N"))
        pair_id = s.scalar(select(Pair.id).where(Pair.opaque_id == opaque[2]))  # pair 3
        for name, count in (("r1", 0), ("r2", 3)):
            s.add(Assignment(study_id=study_id, rater_id=ids[name], pair_id=pair_id,
                             order_index=0, completed_at=T0))
            s.add(Rating(rater_id=ids[name], pair_id=pair_id, category=1, significant=True,
                         count=count, created_at=T0, updated_at=T0))

    [entry] = adjudication.queue(db, SYSTEM, study_name="N")
    assert (entry.pair_number, entry.opaque_id) == (3, opaque[2])
    view = adjudication.get_item(db, SYSTEM, study_name="N", pair_number=3)
    assert view.opaque_id == opaque[2] and view.pair_number == 3
    auth.create_user(db, SYSTEM, username="lead", password="lead-password", role="admin")
    lead = auth.authenticate(db, username="lead", password="lead-password")
    adjudication.record(db, lead, study_name="N", opaque_id=opaque[2],
                        counts={c: 0 for c in view.raters[0].counts}, note="none")
    assert {r["pair_number"] for r in adjudication.export_rows(db, SYSTEM, study_name="N")} \
        == {3}
    # The training CSV and mark_from_adjudication number pairs the same way.
    marked = calibration.mark_from_adjudication(db, SYSTEM, study_name="N")
    assert marked.pair_numbers == (3,)
