"""Kind ``train_er2score``: train an ER2Score adapter on a study's ratings.

Params (written by :func:`backend.services.evaluation.er2train.enqueue_training`): ``study``,
``base``,
``base_revision``, ``output`` (relative to the data folder), ``epochs``, ``lr``, ``seed``,
``heldout``, ``batch_size``, ``max_steps``. The worker's device trains.

Safe to run again after a kill -9: the adapter is built in a hidden folder named after the
job and renamed onto ``output`` in one step, with ``training.json`` naming the job; a retry
starts over in that hidden folder, or reports the adapter its killed run had finished. The
result is the training summary (steps, final loss, held-out Kendall tau before and after).
"""

from __future__ import annotations

from typing import Any

from radconcord.backend.jobs.context import JobContext
from radconcord.backend.runner.kinds._common import param


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Train on the worker, reporting each optimiser step.

    Raises:
        InvalidInput: bad params, base model or study without training pairs.
        NotFound: the study is gone.
        JobCancelled: cancelled, claim lost or worker stopping (no adapter is written).
    """
    from radconcord.backend.services.evaluation import er2train
    from radconcord.backend.services.job_inputs import resolve_data_path

    output = resolve_data_path(param(params, "output", str), "output folder")

    def progress(step: int, total: int, loss: float) -> None:
        ctx.progress(step, total, f"step {step} of {total}, loss {loss:.4f}")

    def phase(message: str) -> None:
        # Stages without steps keep the step count reached so far (0 of 0 before training).
        done, total = ctx.last_progress or (0, 0)
        ctx.progress(done, total, message)

    ctx.progress(0, 0, "loading the ratings and the base model")
    summary = er2train.train_from_study(
        ctx.db, ctx.actor,
        study=param(params, "study", str),
        base=param(params, "base", str),
        output=output,
        base_revision=param(params, "base_revision", str, None),
        epochs=param(params, "epochs", int, 3),
        lr=float(param(params, "lr", (int, float), 1e-4)),
        seed=param(params, "seed", int, 0),
        heldout=float(param(params, "heldout", (int, float), 0.3)),
        batch_size=param(params, "batch_size", int, 8),
        max_steps=param(params, "max_steps", int, None),
        device=ctx.device,
        progress=progress,
        job_id=ctx.job_id,
        phase=phase,
    )
    out = er2train.summary_to_json(summary)
    out["output"] = param(params, "output", str)
    out["summary"] = (f"{summary.steps} steps on {summary.n_train_pairs} pairs; held-out "
                      f"Kendall tau {summary.tau_untrained:.3f} -> {summary.tau_trained:.3f}")
    return out
