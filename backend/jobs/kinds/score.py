"""Kind ``score``: score a study's pairs with metrics into the score cache.

Params: ``{"metrics": [names...], "options": {family: {option: value}}}``; the job's
``study_id`` names the study. Each batch is committed on its own (insert-or-ignore into the
score cache), so after a kill -9 the retried job computes only the pairs that were not
committed, and a cancelled job leaves valid cached values behind.
"""

from __future__ import annotations

from typing import Any

from backend.jobs.context import JobContext


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Score the job's study; returns per-family counts and a one-line ``summary``
    (the pairs with an empty report: their count and the first 100 ids).

    Raises:
        ScoringError: no study, bad metrics or options.
        MetricUnavailable: a family cannot run on this worker.
        MetricFailed: a metric raised while scoring.
        JobCancelled: cancelled, claim lost or worker stopping (between batches).
    """
    from backend.jobs import queue
    from backend.scoring.jobs import study_pairs, validate_request
    from backend.scoring.runner import ScoringError, score

    info = queue.get(ctx.db, ctx.job_id)
    if info is None or info.study_id is None:
        raise ScoringError("a score job needs a study")
    metrics, options = validate_request(params.get("metrics") or [], params.get("options"))
    pairs = study_pairs(ctx.db, info.study_id)
    ctx.progress(0, 0, f"scoring {len(pairs)} pairs")
    table = score(
        pairs,
        metrics,
        options=options,
        device=ctx.device,
        batch_size=ctx.batch_size,
        db=ctx.db,
        progress=ctx.progress,
        pool=ctx.pool,
    )
    parts = [
        f"{f}: {r.computed} computed, {r.cached} cached"
        + (f" ({r.seconds:.1f} s on {r.device})" if r.computed else "")
        for f, r in table.families.items()
    ]
    if table.empty_ids:
        parts.append(f"{len(table.empty_ids)} pair(s) with an empty report -> nan")
    return {
        "summary": "; ".join(parts),
        "pairs": len(table.ids),
        "families": {
            f: {
                "computed": r.computed,
                "cached": r.cached,
                "seconds": round(float(r.seconds), 3),
                "device": r.device,
                "signature": r.signature,
                "signature_hash": r.signature_hash,
            }
            for f, r in table.families.items()
        },
        "empty": len(table.empty_ids),
        "empty_ids": list(table.empty_ids[:100]),
    }
