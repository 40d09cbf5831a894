"""A study's qualification gate: training items a rater must pass before the study pairs.

Training items (``Pair.kind == "training"``) come first in every rater's order. With the study
setting ``qualification_items`` N > 0 the rater reaches the study pairs and their hidden
repeats only after N done training items within ``qualification_max_error`` of the expert's
total (:class:`Qualification`). The rater whose counts are a training item's answer key
(marked from their ratings) is the expert the gate measures against, not held by it.

Used by the rater's side (backend/services/annotation/rating.py,
backend/services/annotation/assignment_writes.py),
calibration and pace.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.db.models import PAIR_TRAINING, Assignment, Pair, Rating, Study


@dataclass(frozen=True)
class Qualification:
    """Where a rater stands with a study's qualification gate.

    A training item passes when the rater's total count is within ``max_error`` of the
    expert's total. With ``required`` N > 0 the study pairs (and repeats) open to the rater
    only once N items have passed; with N = 0 there is no gate.
    """

    required: int
    max_error: int
    training: int  # training items the rater holds
    done: int  # of them marked done
    passed: int  # of the done ones, within max_error of the expert

    @property
    def open(self) -> bool:
        """The rater may rate the study pairs."""
        return self.required <= 0 or self.passed >= self.required

    @property
    def failed(self) -> bool:
        """Even passing every remaining training item cannot reach ``required``.

        A rater who holds fewer training items than ``required`` has not failed: the lead
        set the rule before marking (all) the items, and the rater waits for them.
        """
        return (not self.open and self.training >= self.required
                and self.passed + (self.training - self.done) < self.required)

    def message(self, study_name: str) -> str | None:
        """What the rater is told while the gate holds them back; None when open."""
        if self.open:
            return None
        if self.training == 0:
            return (f"Study {study_name!r} starts with training items that are not ready "
                    "yet: your study lead will let you know.")
        if self.failed:
            return (f"You did not qualify for study {study_name!r}: {self.passed} of the "
                    f"{self.required} training items needed were within {self.max_error} "
                    "of the expert's total. Your study lead can see this and will contact you.")
        if self.done == self.training:
            return (f"Study {study_name!r}: {self.passed} of the {self.required} training "
                    "items needed passed; the others are not ready yet: your study lead "
                    "will let you know.")
        return (f"Finish the training items of study {study_name!r} first "
                f"({self.passed} of {self.required} passed).")


def expert_total(expert: Mapping[str, Any] | None) -> int | None:
    """Sum of a training item's expert counts (``Pair.expert["counts"]``); None if absent."""
    counts = (expert or {}).get("counts")
    if not isinstance(counts, Mapping):
        return None
    return sum(int(v) for v in counts.values())


def item_passed(rater_total: int, expert: Mapping[str, Any] | None, max_error: int) -> bool:
    """A done training item passes when the totals differ by at most ``max_error``."""
    total = expert_total(expert)
    return total is not None and abs(int(rater_total) - total) <= int(max_error)


def answer_key_of(expert: Mapping[str, Any] | None, rater_id: int) -> bool:
    """Whether a training item's expert counts are this rater's own (marked from their
    ratings): it is their answer key, not a test of them."""
    return (expert or {}).get("rater_id") == rater_id


def _training_rows(s: Session, rater_id: int, study_id: int
                   ) -> list[tuple[int, dt.datetime | None, int, dict[str, Any] | None]]:
    """(pair id, completed_at, rater total, expert) of every training item the rater holds,
    their own answer keys included, in their order."""
    totals = (
        select(Rating.pair_id, func.sum(Rating.count).label("total"))
        .where(Rating.rater_id == rater_id)
        .group_by(Rating.pair_id)
        .subquery()
    )
    return [
        (int(pid), done, int(total or 0), expert)
        for pid, done, total, expert in s.execute(
            select(Pair.id, Assignment.completed_at, totals.c.total, Pair.expert)
            .join(Assignment, Assignment.pair_id == Pair.id)
            .outerjoin(totals, totals.c.pair_id == Pair.id)
            .where(Assignment.rater_id == rater_id, Assignment.study_id == study_id,
                   Pair.kind == PAIR_TRAINING)
            .order_by(Assignment.order_index, Assignment.id)
        )
    ]


def training_results(s: Session, rater_id: int, study_id: int
                     ) -> list[tuple[int, dt.datetime | None, int, dict[str, Any] | None]]:
    """(pair id, completed_at, rater total, expert) of a rater's training items, in order.

    Items whose expert counts are the rater's own (:func:`answer_key_of`) are left out.
    """
    return [r for r in _training_rows(s, rater_id, study_id)
            if not answer_key_of(r[3], rater_id)]


def qualification(s: Session, rater_id: int, study_id: int,
                  settings: Mapping[str, Any] | None = None, *,
                  count_without_gate: bool = False) -> Qualification:
    """The rater's standing with the study's gate (``settings``: the stored Study.settings).

    The rater whose counts are the expert's answer key of a training item (marked from
    their ratings, so given to them too) is not held by the gate: they are the expert it
    measures against. Without a gate the items are not read (this runs on every save)
    unless ``count_without_gate`` asks for them (the lead's view).
    """
    if settings is None:
        settings = s.scalar(select(Study.settings).where(Study.id == study_id))
    values = effective(settings)
    required = int(values["qualification_items"])
    max_error = int(values["qualification_max_error"])
    rows = _training_rows(s, rater_id, study_id) if required > 0 or count_without_gate else []
    if any(answer_key_of(r[3], rater_id) for r in rows):
        required = 0
    results = [r for r in rows if not answer_key_of(r[3], rater_id)]
    done = [r for r in results if r[1] is not None]
    passed = sum(1 for _, _, total, expert in done if item_passed(total, expert, max_error))
    return Qualification(required=required, max_error=max_error, training=len(results),
                         done=len(done), passed=passed)


__all__ = [
    "Qualification",
    "answer_key_of",
    "expert_total",
    "item_passed",
    "qualification",
    "training_results",
]
