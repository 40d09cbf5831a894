"""Review of issue 14's pairwise mode: comparisons made in a second run get new positions.

With exactly one comparison (position 0) the next run must start at position 1, not reuse 0
(``max(position)`` is 0, which is falsy).
"""

from __future__ import annotations

from sqlalchemy import select

from radconcord.backend.scoring.hashing import input_hash
from radconcord.backend.services.annotation import pairwise
from radconcord.backend.types import Actor
from radconcord.db.models import Case, Comparison, Pair, Report, Study

SYSTEM = Actor.system()


def _add_candidate(db, case_id, ref_id, ref_text, source, position):
    with db.begin() as s:
        text = f"Candidate by {source}: small effusion."
        cand = Report(case_id=case_id, role="candidate", source=source, text=text)
        s.add(cand)
        s.flush()
        s.add(Pair(study_id=s.scalar(select(Case.study_id).where(Case.id == case_id)),
                   case_id=case_id, reference_id=ref_id, candidate_id=cand.id, source=source,
                   opaque_id=f"pp-{position}", position=position,
                   input_hash=input_hash(ref_text, text)))


def test_a_second_run_after_one_comparison_appends_positions(any_db):
    db = any_db
    ref_text = "Reference: heart size normal."
    with db.begin() as s:
        study = Study(name="PP", status="open", settings={"annotation_mode": "pairwise"})
        s.add(study)
        s.flush()
        case = Case(external_id="pp-case", study_id=study.id)
        s.add(case)
        s.flush()
        ref = Report(case_id=case.id, role="reference", text=ref_text)
        s.add(ref)
        s.flush()
        case_id, ref_id = case.id, ref.id
    _add_candidate(db, case_id, ref_id, ref_text, "sys-x", 0)
    _add_candidate(db, case_id, ref_id, ref_text, "sys-y", 1)
    assert pairwise.make_comparisons(db, SYSTEM, "PP", seed=1).created == 1
    _add_candidate(db, case_id, ref_id, ref_text, "sys-z", 2)
    summary = pairwise.make_comparisons(db, SYSTEM, "PP", seed=1)
    assert (summary.created, summary.total) == (2, 3)
    with db.read() as s:
        positions = sorted(s.scalars(select(Comparison.position)))
    assert positions == [0, 1, 2]
