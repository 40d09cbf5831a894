"""Train an ER2Score adapter on a study's own ratings (admin only).

Which ratings count follows :func:`backend.analysis.data.load_ratings` (completed assignments,
or imported ratings without assignments; untouched cells of a counted pair are 0). Per pair,
the error count of category ``k`` is the mean over its counted raters of the clinically
significant plus insignificant count; pairs nobody counted are left out. Candidates of the same
case (same reference report) form the (accepted, rejected) pairs, see
:func:`backend.metrics.er2score.preference_pairs`. The held-out split is by case, so no
reference is seen in training and evaluation.

Torch and transformers are imported only when training starts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import aliased

from backend.analysis.data import StudyNotFound, load_ratings
from backend.services.errors import InvalidInput, NotFound, require_admin
from backend.services.types import Actor
from db.models import Pair, Report
from db.session import Database

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingSet:
    """Rated candidates of a study, ready for ER2Score training.

    Attributes:
        study: Study name.
        items: One entry per rated pair (``backend.metrics.er2score.RatedCandidate``).
        n_pairs: Pairs in the study.
        n_unrated: Pairs left out because no rater counted them.
    """

    study: str
    items: tuple
    n_pairs: int
    n_unrated: int


@dataclass(frozen=True)
class TrainSummary:
    """Outcome of :func:`train_from_study`."""

    study: str
    output: Path
    n_train_items: int
    n_train_pairs: int
    n_heldout_items: int
    steps: int
    seconds: float
    final_loss: float
    tau_untrained: float
    tau_trained: float


def gather_training_set(db: Database, actor: Actor, *, study: str) -> TrainingSet:
    """Collect each rated pair's texts and mean per-category error counts.

    Args:
        db: The database.
        actor: Must be an admin.
        study: Study name.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
    """
    from backend.metrics.er2score import RatedCandidate

    require_admin(actor)
    try:
        ratings = load_ratings(db, study)
    except StudyNotFound as exc:
        raise NotFound(str(exc)) from exc
    ref_report, cand_report = aliased(Report), aliased(Report)
    with db.begin() as s:
        rows = s.execute(
            select(Pair.id, Pair.reference_id, ref_report.text, cand_report.text)
            .join(ref_report, ref_report.id == Pair.reference_id)
            .join(cand_report, cand_report.id == Pair.candidate_id)
            .where(Pair.study_id == ratings.study_id)
        ).all()
    texts = {r[0]: (r[1], r[2], r[3]) for r in rows}
    per_cat = [ratings.mean_errors("total", category=k) for k in range(1, 7)]
    items = []
    unrated = 0
    for i, pid in enumerate(ratings.pair_ids.tolist()):
        errors = tuple(float(c[i]) for c in per_cat)
        if any(math.isnan(e) for e in errors):
            unrated += 1
            continue
        ref_id, ref_text, cand_text = texts[pid]
        items.append(
            RatedCandidate(
                pair_id=ratings.opaque_ids[i],
                # Group by the reference report itself: a case can only have one reference
                # here, but grouping on the report keeps that assumption out of this code.
                group=f"ref-{ref_id}",
                reference=ref_text,
                candidate=cand_text,
                errors=errors,
            )
        )
    return TrainingSet(study, tuple(items), ratings.n_pairs, unrated)


def train_from_study(
    db: Database,
    actor: Actor,
    *,
    study: str,
    base: str,
    output: Path,
    base_revision: str | None = None,
    epochs: int = 3,
    lr: float = 1e-4,
    seed: int = 0,
    heldout: float = 0.3,
    batch_size: int = 8,
    max_steps: int | None = None,
    device: str = "cpu",
    progress: Callable[[int, int, float], None] | None = None,
) -> TrainSummary:
    """Train LoRA + reward head on the study's ratings and save the adapter to ``output``.

    Args:
        db: The database.
        actor: Must be an admin.
        study: Study whose ratings are the training signal.
        base: Backbone (hub id, folder or ``.gguf`` file).
        output: New adapter folder (must not exist or be empty).
        base_revision: Hub revision for ``base``.
        epochs: Passes over the training pairs.
        lr: AdamW learning rate.
        seed: Seed for the split, initialisation and shuffling.
        heldout: Fraction of references held out for the before/after Kendall tau.
        batch_size: Preference pairs per step.
        max_steps: Optional cap on optimiser steps.
        device: Torch device.
        progress: Called with ``(step, total, loss)``.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: bad options, an unusable base model or no training pairs.
    """
    from backend.metrics import er2score, llm

    require_admin(actor)
    if epochs < 1:
        raise InvalidInput(f"epochs must be >= 1, got {epochs}")
    if not lr > 0:
        raise InvalidInput(f"lr must be > 0, got {lr}")
    if not 0.0 <= heldout < 1.0:
        raise InvalidInput(f"heldout must be in [0, 1), got {heldout}")
    output = Path(output).expanduser()
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise InvalidInput(f"output folder {output} already exists and is not empty")
    ref = llm.LMRef(base, base_revision)
    reason = llm.availability(ref)
    if reason:
        raise InvalidInput(f"base model: {reason}")
    data = gather_training_set(db, actor, study=study)
    train, held = er2score.split_groups(data.items, heldout, seed)
    if not er2score.preference_pairs(train):
        raise InvalidInput(
            f"study '{study}' has no training pairs: need references with at least two rated"
            f" candidates whose total errors differ ({len(data.items)} rated pairs,"
            f" {data.n_unrated} unrated)"
        )
    config = er2score.TrainConfig(
        epochs=epochs, lr=lr, seed=seed, batch_size=batch_size, max_steps=max_steps
    )
    try:
        result = er2score.train_reward_model(
            base=ref,
            train_items=train,
            heldout_items=held,
            output=output,
            config=config,
            study=study,
            device=device,
            progress=progress,
        )
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    logger.info(
        "er2score trained on %s: %d pairs, %d steps, held-out tau %.3f -> %.3f",
        study, result.n_train_pairs, result.steps, result.tau_untrained, result.tau_trained,
    )
    return TrainSummary(
        study=study,
        output=result.output,
        n_train_items=result.n_train_items,
        n_train_pairs=result.n_train_pairs,
        n_heldout_items=result.n_heldout_items,
        steps=result.steps,
        seconds=result.seconds,
        final_loss=result.losses[-1] if result.losses else math.nan,
        tau_untrained=result.tau_untrained,
        tau_trained=result.tau_trained,
    )
