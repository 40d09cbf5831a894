"""Kind ``train_concord``: train a Concord ``gbm`` or ``ce`` model on synthetic errors.

Params (written by :func:`backend.services.evaluation.concord_train.enqueue_training`):
``variant``, ``output`` (relative to the data folder), ``seed``, ``n_pairs``, ``heldout``,
``corpus`` (``"iu"`` or a report file on the server) and ``max_steps``. The worker's device
trains (``ce``). No human rating is read.

Safe to run again after a kill -9: the model is built in a hidden folder named after the job
and renamed onto ``output`` in one step, with ``training.json`` naming the job; a retry
starts over in that hidden folder, or reports the folder its killed run had finished. The
result is the training summary with the held-out synthetic figures.
"""

from __future__ import annotations

from typing import Any

from radconcord.backend.jobs.context import JobContext
from radconcord.backend.runner.kinds._common import param


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Train on the worker, reporting each stage or optimiser step.

    Raises:
        InvalidInput: bad params or corpus.
        JobCancelled: cancelled, claim lost or worker stopping (no folder is written).
    """
    from radconcord.backend.services.evaluation import concord_train
    from radconcord.backend.services.job_inputs import resolve_data_path

    output = resolve_data_path(param(params, "output", str), "output folder")

    def progress(done: int, total: int, message: str) -> None:
        if total == 0:  # a stage without steps keeps the count reached so far
            done, total = ctx.last_progress or (0, 0)
        ctx.progress(done, total, message)

    ctx.progress(0, 0, "loading the reports")
    summary = concord_train.train_concord(
        variant=param(params, "variant", str),
        output=output,
        seed=param(params, "seed", int, 0),
        n_pairs=param(params, "n_pairs", int, None),
        heldout=float(param(params, "heldout", (int, float), 0.1)),
        corpus=param(params, "corpus", str, "iu"),
        max_steps=param(params, "max_steps", int, None),
        progress=progress,
        device=ctx.device,
        job_id=ctx.job_id,
    )
    out = concord_train.summary_to_json(summary)
    out["output"] = param(params, "output", str)
    tau = summary.figures.get("tau_total")
    out["summary"] = (f"concord {summary.variant} on {summary.n_train_pairs} synthetic pairs;"
                      f" held-out Kendall tau (total) "
                      f"{'n/a' if tau is None else f'{tau:.3f}'}")
    return out
