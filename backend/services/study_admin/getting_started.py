"""The study lead's next steps: import -> assign -> rate -> score -> dashboard -> report/export.

:func:`getting_started` says, for one study (the one asked for, else the newest study in
use), the state of each step (``done``, ``in_progress``, ``waiting`` on an earlier step, or
``todo``), what is missing in words, and which page does it (the router's ``url_path``). The
admin's landing page draws it with ``webapp/components/getting_started.py``.

"Next" is the first step the admin can act on now, not the first step not done: while
raters are still rating, the admin can already score or read the dashboard, and a "Next:
Raters rate" would hide that. A step that only waits on others (raters rating, a live worker
running the scoring job) says what it waits for in ``waiting_for``; when only such steps are
left, the panel says what it waits for instead of naming an action.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from radconcord.backend.errors import NotFound, require_admin
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.scores import score_now
from radconcord.backend.services.study_admin.study_status import ARCHIVED
from radconcord.backend.types import Actor
from radconcord.db.models import PAIR_STUDY, STUDY_STAGING, Assignment, Pair, Study
from radconcord.db.session import Database

DONE, IN_PROGRESS, WAITING, TODO = "done", "in_progress", "waiting", "todo"
#: Pairs with a rating that a correlation needs at least.
MIN_RATED_PAIRS = 2


@dataclass(frozen=True)
class Step:
    """One step of the path: its state, what is missing, the page that does it."""

    key: str  # import | assign | rate | score | dashboard | report
    title: str
    state: str  # done | in_progress | waiting | todo
    detail: str
    page: str  # the router's url_path of the page that does it
    #: What the step waits on when only others can move it (raters rating, a worker
    #: scoring), e.g. ``"raters: 5 of 24 pairs fully rated"``; ``None`` when the admin can
    #: act on it (or it is done, or it waits on an earlier step).
    waiting_for: str | None = None

    @property
    def actionable(self) -> bool:
        """Whether the admin can do something about this step now."""
        return self.state not in (DONE, WAITING) and self.waiting_for is None


@dataclass(frozen=True)
class GettingStarted:
    """The steps of one study (``study`` is None when there is no study yet)."""

    study: str | None
    steps: tuple[Step, ...]

    @property
    def next_step(self) -> Step | None:
        """The first step the admin can act on now, if any (see the module docstring)."""
        return next((s for s in self.steps if s.actionable), None)

    @property
    def waiting(self) -> str | None:
        """What the study waits for when no step is the admin's to act on, else ``None``.

        For example ``"Waiting for raters: 5 of 24 pairs fully rated."``; ``None`` when there
        is a next step or every step is done.
        """
        if self.next_step is not None:
            return None
        waits = [s.waiting_for for s in self.steps if s.state != DONE and s.waiting_for]
        return ("Waiting for " + "; ".join(waits) + ".") if waits else None


def _pick(db: Database, study_name: str | None) -> str | None:
    with db.read() as s:
        if study_name:
            try:
                study = get_study(s, study_name)
            except NotFound:
                study = None
            if study is not None and study.status not in (STUDY_STAGING, ARCHIVED):
                return study.name
        return s.scalar(select(Study.name).where(Study.status.not_in((STUDY_STAGING, ARCHIVED)))
                        .order_by(Study.created_at.desc(), Study.id.desc()).limit(1))


def getting_started(db: Database, actor: Actor, *,
                    study_name: str | None = None) -> GettingStarted:
    """The state of each step for ``study_name`` (else the newest study in use); admin only.

    Raises:
        PermissionDenied: the actor is not an admin.
    """
    require_admin(actor)
    name = _pick(db, study_name)
    if name is None:
        steps = [Step("import", "Import a study", TODO,
                      "No study yet: import cases (JSONL/CSV) or ReXVal files.", "import")]
        steps += [Step(key, title, WAITING, "Waiting for a study.", page)
                  for key, title, page in (
                      ("assign", "Assign raters", "assign"),
                      ("rate", "Raters rate", "studies"),
                      ("score", "Score metrics", "dashboard"),
                      ("dashboard", "Read the dashboard", "dashboard"),
                      ("report", "Report and export", "export"))]
        return GettingStarted(study=None, steps=tuple(steps))

    with db.read() as s:
        study = get_study(s, name)
        n_pairs = s.scalar(select(func.count(Pair.id)).where(
            Pair.study_id == study.id, Pair.kind == PAIR_STUDY)) or 0
        study_pairs = (select(Pair.id).where(Pair.study_id == study.id,
                                             Pair.kind == PAIR_STUDY)).scalar_subquery()
        assigned_pairs = s.scalar(select(func.count(func.distinct(Assignment.pair_id))).where(
            Assignment.study_id == study.id, Assignment.pair_id.in_(study_pairs))) or 0
        n_assign, n_done = s.execute(select(
            func.count(Assignment.id), func.count(Assignment.completed_at)).where(
            Assignment.study_id == study.id, Assignment.pair_id.in_(study_pairs))).one()
        rated_pairs = s.scalar(select(func.count(func.distinct(Assignment.pair_id))).where(
            Assignment.study_id == study.id, Assignment.pair_id.in_(study_pairs),
            Assignment.completed_at.is_not(None))) or 0
        # Fully rated: every rater assigned to the pair is done (what "waiting for raters"
        # counts down; a pair with one of two raters done is still waiting).
        open_pairs = (select(Assignment.pair_id).where(
            Assignment.study_id == study.id,
            Assignment.completed_at.is_(None))).scalar_subquery()
        fully_rated = s.scalar(select(func.count(func.distinct(Assignment.pair_id))).where(
            Assignment.study_id == study.id, Assignment.pair_id.in_(study_pairs),
            Assignment.pair_id.not_in(open_pairs))) or 0
    scores = score_now.score_state(db, actor, name)

    steps = [Step("import", "Import a study", DONE,
                  f"{name}: {n_pairs} pairs.", "import")]
    if assigned_pairs == 0:
        assign = Step("assign", "Assign raters", TODO,
                      f"No rater has pairs yet: assign raters to the {n_pairs} pairs.",
                      "assign")
    elif assigned_pairs < n_pairs:
        assign = Step("assign", "Assign raters", IN_PROGRESS,
                      f"{n_pairs - assigned_pairs} of {n_pairs} pairs have no rater.", "assign")
    else:
        assign = Step("assign", "Assign raters", DONE,
                      f"Every pair has a rater ({n_assign} assignments).", "assign")
    steps.append(assign)

    if n_assign == 0:
        rate = Step("rate", "Raters rate", WAITING, "Waiting for assignments.", "studies")
    elif n_done == n_assign:
        rate = Step("rate", "Raters rate", DONE, f"All {n_assign} assignments done.", "studies")
    else:
        # Only the raters can move this step: it is never the admin's "Next".
        raters = f"raters: {fully_rated} of {n_pairs} pairs fully rated"
        if rated_pairs >= MIN_RATED_PAIRS:
            rate = Step("rate", "Raters rate", IN_PROGRESS,
                        f"{n_done} of {n_assign} assignments done; {rated_pairs} pairs rated "
                        "(enough for correlations).", "studies", waiting_for=raters)
        else:
            rate = Step("rate", "Raters rate", TODO,
                        f"{n_done} of {n_assign} assignments done: correlations need "
                        f"{MIN_RATED_PAIRS} rated pairs.", "studies", waiting_for=raters)
    steps.append(rate)

    if scores.scored and scores.pending is None:
        score = Step("score", "Score metrics", DONE,
                     f"{scores.n_scored_pairs} of {scores.n_pairs} pairs have metric values.",
                     "dashboard")
    elif scores.pending is not None:
        worker = ("" if not scores.pending_unserved
                  else " No worker is alive to take it: start one (scripts/run-app.sh does).")
        # A live worker will finish the job without the admin; with none alive the admin
        # must start one, so the step is theirs again.
        score = Step("score", "Score metrics", IN_PROGRESS,
                     f"Scoring job #{scores.pending.id} is {scores.pending.status}."
                     + worker, "dashboard",
                     waiting_for=None if scores.pending_unserved
                     else f"the scoring job: #{scores.pending.id} is {scores.pending.status}")
    else:
        score = Step("score", "Score metrics", TODO,
                     "No metric values yet: press \"Score now\" on the dashboard.",
                     "dashboard")
    steps.append(score)

    ready = scores.scored and rated_pairs >= MIN_RATED_PAIRS
    if ready:
        dash = Step("dashboard", "Read the dashboard", DONE,
                    f"Correlations over {rated_pairs} rated pairs.", "dashboard")
    else:
        missing = [w for w, ok in (("metric values", scores.scored),
                                   (f"{MIN_RATED_PAIRS} rated pairs",
                                    rated_pairs >= MIN_RATED_PAIRS)) if not ok]
        dash = Step("dashboard", "Read the dashboard", WAITING,
                    "Waiting for " + " and ".join(missing) + ".", "dashboard")
    steps.append(dash)
    steps.append(
        Step("report", "Report and export", TODO if ready else WAITING,
             "Download the HTML report at the foot of the dashboard, or export the study "
             "(ReXVal files or JSONL with a manifest)." if ready
             else "Waiting for the dashboard's correlations.", "export"))
    return GettingStarted(study=name, steps=tuple(steps))
