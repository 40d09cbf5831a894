"""Kind ``score``: score a study's pairs with metrics into the score cache.

Params: ``{"metrics": [names...], "options": {family: {option: value}}}``; the job's
``study_id`` names the study. Each batch is committed on its own (insert-or-ignore into the
score cache), so after a kill -9 the retried job computes only the pairs that were not
committed, and a cancelled job leaves valid cached values behind.

Families are scored independently: one that cannot run on this worker (``unavailable``,
with the reason) or that raises (``failed``, with the error) does not stop the others. The
result has a status per family (``families[f]["status"]``: done | unavailable | failed, with
``reason`` or ``error``), and the job's message says a partial success plainly ("done with 1
family unavailable: radgraph (...)"). When no family could be scored the job fails, naming
each family's reason.
"""

from __future__ import annotations

from typing import Any

from radconcord.backend.jobs.context import JobContext


def outcome(statuses: dict[str, dict[str, Any]]) -> str:
    """``done``, or ``done with N family(ies) unavailable/failed: f (reason); ...``."""
    bad = {f: v for f, v in statuses.items() if v["status"] != "done"}
    if not bad:
        return "done"
    counts = []
    for status in ("unavailable", "failed"):
        n = sum(1 for v in bad.values() if v["status"] == status)
        if n:
            counts.append(f"{n} {'family' if n == 1 else 'families'} {status}")
    details = "; ".join(f"{f} ({v.get('reason') or v.get('error')})" for f, v in bad.items())
    return f"done with {' and '.join(counts)}: {details}"


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Score the job's study, family by family; returns a status per family, their counts
    and a one-line ``summary`` that begins with the outcome (the pairs with an empty report:
    their count and the first 100 ids).

    Raises:
        ScoringError: no study, bad metrics or options.
        MetricUnavailable: no family can run on this worker (each reason named).
        MetricFailed: no family was scored: each one failed or is unavailable.
        JobCancelled: cancelled, claim lost or worker stopping (between batches).
    """
    from radconcord.backend.metrics.base import MetricUnavailable
    from radconcord.backend.scoring.jobs import study_pairs, validate_request
    from radconcord.backend.scoring.runner import MetricFailed, ScoringError, score

    if ctx.study_id is None:
        raise ScoringError("a score job needs a study")
    metrics, options = validate_request(params.get("metrics") or [], params.get("options"))
    pairs = study_pairs(ctx.db, ctx.study_id)
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
        keep_going=True,
    )
    statuses: dict[str, dict[str, Any]] = {}
    for f, r in table.families.items():
        entry: dict[str, Any] = {"status": r.status}
        if r.unavailable:
            entry["reason"] = r.unavailable
        if r.failed:
            entry["error"] = r.failed
        entry.update({
            "computed": r.computed,
            "cached": r.cached,
            "seconds": round(float(r.seconds), 3),
            "device": r.device,
            "signature": r.signature,
            "signature_hash": r.signature_hash,
        })
        if r.endpoints is not None:
            entry["endpoints"] = r.endpoints
        if r.endpoint_failed:
            entry["endpoint_failed"] = r.endpoint_failed
        statuses[f] = entry
    if not table.done:
        text = "; ".join(f"{f}: {r.status_text}" for f, r in table.families.items())
        if all(r.unavailable for r in table.families.values()):
            raise MetricUnavailable(f"no metric could run on this worker: {text}")
        raise MetricFailed(f"no metric was scored: {text}")
    parts = [
        f"{f}: {r.computed} computed, {r.cached} cached"
        + (f" ({r.seconds:.1f} s on {r.device})" if r.computed else "")
        + (f", {r.endpoint_failed} pair(s) no LLM endpoint answered -> nan, not cached"
           if r.endpoint_failed else "")
        for f, r in table.families.items() if r.status == "done"
    ]
    if table.empty_ids:
        parts.append(f"{len(table.empty_ids)} pair(s) with an empty report -> nan")
    result_outcome = outcome(statuses)
    return {
        "summary": "; ".join([result_outcome, *parts]),
        "outcome": result_outcome,
        "pairs": len(table.ids),
        "families": statuses,
        "empty": len(table.empty_ids),
        "empty_ids": list(table.empty_ids[:100]),
    }
