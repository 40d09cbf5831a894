"""Train an ER2Score adapter on a study's own ratings (admin only).

Which ratings count follows :func:`backend.analysis.data.load_ratings` (completed assignments,
or imported ratings without assignments; untouched cells of a counted pair are 0). Per pair,
the error count of category ``k`` is the mean over its counted raters of the clinically
significant plus insignificant count; pairs nobody counted are left out. Candidates of the same
case (same reference report) form the (accepted, rejected) pairs, see
:func:`backend.metrics.er2score.preference_pairs`. The held-out split is by case, so no
reference is seen in training and evaluation.

Torch and transformers are imported only when training starts. Pages and scripts queue a
``train_er2score`` job with :func:`enqueue_training` (checked here, trained on the worker by
``backend.runner.kinds.train_er2score``); the command line trains inline. A job's training
builds the adapter in a hidden folder named after the job (``.<name>.job-<id>``) together with
``training.json`` (the summary and the job id) and renames it onto the output at the end: a
killed run leaves no half adapter under the output name, its retry starts over in the same
hidden folder, and a retry that finds the finished adapter of its own job reports it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import aliased

from radconcord.backend.analysis.data import StudyNotFound
from radconcord.backend.errors import InvalidInput, NotFound, require_admin
from radconcord.backend.services.evaluation import trained_output
from radconcord.backend.services.evaluation.study_data import load_ratings
from radconcord.backend.types import Actor
from radconcord.db.models import PAIR_STUDY, Pair, Report
from radconcord.db.session import Database

if TYPE_CHECKING:
    from radconcord.backend.services.jobs import JobView

logger = logging.getLogger(__name__)

#: The job kind that runs :func:`train_from_study` on the worker.
KIND = "train_er2score"
#: Written into a job's adapter folder: the training summary and the job id.
SUMMARY_FILE = "training.json"


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
    from radconcord.backend.metrics.er2score import RatedCandidate

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
            .where(Pair.study_id == ratings.study_id, Pair.kind == PAIR_STUDY)
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


def _check_settings(*, epochs: int, lr: float, heldout: float, batch_size: int,
                    max_steps: int | None) -> None:
    if epochs < 1:
        raise InvalidInput(f"epochs must be >= 1, got {epochs}")
    if not lr > 0:
        raise InvalidInput(f"lr must be > 0, got {lr}")
    if not 0.0 <= heldout < 1.0:
        raise InvalidInput(f"heldout must be in [0, 1), got {heldout}")
    if batch_size < 1:
        raise InvalidInput(f"batch size must be >= 1, got {batch_size}")
    if max_steps is not None and max_steps < 1:
        raise InvalidInput(f"max steps must be >= 1, got {max_steps}")



def _check_data(db: Database, actor: Actor, *, study: str, base: str,
                base_revision: str | None, heldout: float, seed: int) -> tuple[Any, Any, Any]:
    """``(model ref, train items, held-out items)``, refusing an unusable base or study."""
    from radconcord.backend.metrics import er2score, llm

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
    return ref, train, held


def enqueue_training(
    db: Database,
    actor: Actor,
    *,
    study: str,
    base: str,
    output: str,
    base_revision: str | None = None,
    epochs: int = 3,
    lr: float = 1e-4,
    seed: int = 0,
    heldout: float = 0.3,
    batch_size: int = 8,
    max_steps: int | None = None,
    device: str | None = None,
) -> JobView:
    """Check a training request and queue it as a ``train_er2score`` job for the worker.

    Args:
        db: The database.
        actor: Must be an admin.
        study: Study whose ratings are the training signal.
        base: Backbone (hub id, folder or ``.gguf`` file) as the worker will see it.
        output: New adapter folder, relative to the data folder (must not exist or be
            empty, and no queued job may write it).
        base_revision: Hub revision for ``base``.
        epochs: Passes over the training pairs.
        lr: AdamW learning rate.
        seed: Seed for the split, initialisation and shuffling.
        heldout: Fraction of references held out for the before/after Kendall tau.
        batch_size: Preference pairs per step.
        max_steps: Optional cap on optimiser steps.
        device: Only a worker on this device may run it (``None``: any worker).

    Returns:
        The queued job.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: bad options or output folder, an unusable base model, no training
            pairs.
    """
    from radconcord.backend.jobs import queue
    from radconcord.backend.services import jobs
    from radconcord.backend.services.job_inputs import resolve_data_path

    require_admin(actor)
    _check_settings(epochs=epochs, lr=lr, heldout=heldout, batch_size=batch_size,
                    max_steps=max_steps)
    target = resolve_data_path(output, "output folder")
    trained_output.check_output(target)
    for job in queue.list_jobs(db, kind=KIND):
        if not job.finished and job.params.get("output") == output:
            raise InvalidInput(f"output folder {output} is being written by job {job.id} "
                               f"({job.status}); choose another")
    _check_data(db, actor, study=study, base=base, base_revision=base_revision,
                heldout=heldout, seed=seed)
    params = {"study": study, "base": base, "base_revision": base_revision, "output": output,
              "epochs": int(epochs), "lr": float(lr), "seed": int(seed),
              "heldout": float(heldout), "batch_size": int(batch_size),
              "max_steps": None if max_steps is None else int(max_steps)}
    return jobs.enqueue_job(db, actor, kind=KIND, params=params, study_name=study,
                            device=device)


def summary_to_json(summary: TrainSummary) -> dict[str, Any]:
    """A training summary as plain JSON data (NaN becomes ``None``)."""
    out = asdict(summary)
    out["output"] = str(summary.output)
    for key, value in out.items():
        if isinstance(value, float) and not math.isfinite(value):
            out[key] = None
    return out


def _finished_by_job(output: Path, job_id: int) -> TrainSummary | None:
    """The summary of the adapter a previous run of job ``job_id`` finished at ``output``."""
    data = trained_output.finished_record(output, job_id, SUMMARY_FILE)
    if data is None:
        return None
    fields = {k: data[k] for k in TrainSummary.__dataclass_fields__}
    fields["output"] = output
    fields["final_loss"] = math.nan if fields["final_loss"] is None else fields["final_loss"]
    return TrainSummary(**fields)


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
    job_id: int | None = None,
    phase: Callable[[str], None] | None = None,
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
        progress: Called with ``(step, total, loss)``; it may raise to stop (no adapter
            is written then).
        job_id: The job running this training (see the module docstring): the adapter is
            built in ``.<name>.job-<id>`` with ``training.json``, and an adapter this job
            already finished at ``output`` is reported instead of trained again.
        phase: Called with a short message when a stage without steps starts (reading the
            ratings, loading the backbone, scoring the held-out pairs, saving).

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: bad options, an unusable base model or no training pairs.
    """
    from radconcord.backend.metrics import er2score

    require_admin(actor)
    _check_settings(epochs=epochs, lr=lr, heldout=heldout, batch_size=batch_size,
                    max_steps=max_steps)
    output = Path(output).expanduser()
    if job_id is not None:
        done = _finished_by_job(output, job_id)
        if done is not None:
            logger.info("job %d: adapter %s was already trained", job_id, output)
            return done
    trained_output.check_output(output)
    if phase is not None:
        phase(f"reading the ratings of study '{study}'")
    ref, train, held = _check_data(db, actor, study=study, base=base,
                                   base_revision=base_revision, heldout=heldout, seed=seed)
    config = er2score.TrainConfig(
        epochs=epochs, lr=lr, seed=seed, batch_size=batch_size, max_steps=max_steps
    )
    target = trained_output.staging_folder(output, job_id)
    try:
        result = er2score.train_reward_model(
            base=ref,
            train_items=train,
            heldout_items=held,
            output=target,
            config=config,
            study=study,
            device=device,
            progress=progress,
            phase=phase,
        )
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    logger.info(
        "er2score trained on %s: %d pairs, %d steps, held-out tau %.3f -> %.3f",
        study, result.n_train_pairs, result.steps, result.tau_untrained, result.tau_trained,
    )
    summary = TrainSummary(
        study=study,
        output=output,
        n_train_items=result.n_train_items,
        n_train_pairs=result.n_train_pairs,
        n_heldout_items=result.n_heldout_items,
        steps=result.steps,
        seconds=result.seconds,
        final_loss=result.losses[-1] if result.losses else math.nan,
        tau_untrained=result.tau_untrained,
        tau_trained=result.tau_trained,
    )
    if job_id is not None:
        trained_output.publish(target, output, {**summary_to_json(summary), "job_id": job_id},
                               SUMMARY_FILE)
    return summary
