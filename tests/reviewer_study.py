"""A small, fully rated and scored study for the issue-11 dashboard tests (pages and e2e).

Six cases, each with a candidate from two generators: ``gen-near`` (close to the reference)
and ``gen-far`` (a different report). Three raters rate every pair; their counts share a
designed number of errors per candidate (more for ``gen-far``) plus a small rater-specific
offset, so the raters agree (a positive human ceiling), the two sources differ, and bleu and
rougeL are really scored by the scoring runner (no made-up values).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from radconcord.backend.scoring.runner import ScorePair, score
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin import assignment
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput
from radconcord.db.models import Pair, Report, Study
from radconcord.db.session import Database

STUDY = "Reviewer study"
SOURCES = ("gen-far", "gen-near")
METRICS = ("bleu4", "rougeL")

# (case id, reference, near candidate, near errors, far candidate, far errors)
CASES = (
    ("rv-1", "Heart size is normal. No focal consolidation. No pleural effusion.",
     "Heart size is normal. No consolidation. No pleural effusion.", 0,
     "Large right pleural effusion with compressive atelectasis.", 4),
    ("rv-2", "Small left pleural effusion. Lungs otherwise clear.",
     "Small left pleural effusion. Lungs are otherwise clear.", 1,
     "No acute cardiopulmonary process.", 3),
    ("rv-3", "Stable right upper lobe nodule compared with prior study.",
     "Right upper lobe nodule, stable compared with prior study.", 0,
     "New left lower lobe mass concerning for malignancy.", 5),
    ("rv-4", "Mild cardiomegaly with pulmonary vascular congestion.",
     "Mild cardiomegaly. Pulmonary vascular congestion.", 1,
     "Normal heart size. Clear lungs.", 3),
    ("rv-5", "Endotracheal tube terminates 4 cm above the carina.",
     "Endotracheal tube tip 4 cm above the carina.", 0,
     "Nasogastric tube in the stomach. No pneumothorax.", 2),
    ("rv-6", "Right lower lobe pneumonia. No pneumothorax.",
     "Right lower lobe consolidation compatible with pneumonia.", 2,
     "Left apical pneumothorax.", 4),
)


@dataclass(frozen=True)
class ReviewerStudy:
    """What the tests compare against: the study and its three raters."""

    study: str
    raters: tuple[Actor, ...]


def _actor(info: auth.UserInfo) -> Actor:
    return Actor(user_id=info.user_id, username=info.username, role=info.role)


def designed_errors() -> dict[str, int]:
    """Candidate text -> designed error count (before each rater's offset)."""
    out: dict[str, int] = {}
    for _, _, near, near_errors, far, far_errors in CASES:
        out[near] = near_errors
        out[far] = far_errors
    return out


def build_reviewer_study(db: Database, admin: Actor, *, raters: dict[str, str],
                         study: str = STUDY) -> ReviewerStudy:
    """Import, assign (3 raters per pair), rate every pair and score bleu and rougeL.

    Args:
        db: The study database.
        admin: An admin account.
        raters: ``username -> password`` of three rater accounts; missing ones are created.
        study: Study name.
    """
    existing = {u.username: u for u in auth.list_users(db, admin)}
    actors = []
    for username, password in raters.items():
        info = existing.get(username) or auth.create_user(
            db, admin, username=username, password=password, role="rater")
        actors.append(_actor(info))
    cases = [
        CaseInput(case_id=cid, reference=ref,
                  candidates=[CandidateInput(text=near, source="gen-near"),
                              CandidateInput(text=far, source="gen-far")])
        for cid, ref, near, _, far, _ in CASES
    ]
    imports.import_cases(db, admin, study_name=study, cases=cases)
    assignment.assign_raters(db, admin, study_name=study, rater_usernames=list(raters),
                             raters_per_pair=len(raters), seed=3)
    errors = designed_errors()
    for k, rater in enumerate(actors):
        for i, item in enumerate(rating.rater_queue(db, rater, study_name=study)):
            text = rating.get_pair(db, rater, opaque_id=item.opaque_id).candidate_text
            # Raters agree on the designed count, each off by at most one on some pairs.
            count = errors[text] + (1 if (i + k) % 3 == 0 else 0)
            rating.set_count(db, rater, opaque_id=item.opaque_id, category=1,
                             significant=True, count=count)
            rating.set_count(db, rater, opaque_id=item.opaque_id, category=4,
                             significant=False, count=(i + k) % 2)
            rating.complete_pair(db, rater, opaque_id=item.opaque_id, confirm_zero=True)
    with db.begin() as s:
        rows = s.execute(
            select(Pair.id, Pair.input_hash, Report.text, Pair.candidate_id)
            .join(Report, Report.id == Pair.reference_id)
            .join(Study, Study.id == Pair.study_id)
            .where(Study.name == study).order_by(Pair.position)
        ).all()
        cands = {r.id: r.text for r in s.scalars(select(Report))}
    pairs = [ScorePair(id=str(r.id), reference=r.text, candidate=cands[r.candidate_id],
                       stored_hash=r.input_hash) for r in rows]
    score(pairs, list(METRICS), db=db, device="cpu")
    return ReviewerStudy(study=study, raters=tuple(actors))
