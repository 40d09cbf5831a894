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

Split (``"chunks": K`` with K > 1, default off): instead of scoring, the job queues K jobs of
kind ``score_chunk`` that any workers claim independently (one per GPU: ``worker --device
cuda:0``, ``worker --device cuda:1``, ...). The study's pairs, ordered by pair id, are cut
into K contiguous id ranges (``pair_ids: [first, last]``); a corpus-dependent family
(:func:`backend.metrics.registry.corpus_dependent`) is never cut, since its values depend on
the whole set: it goes to one more chunk job over every pair. Each chunk job scores through
the same :func:`backend.scoring.runner.score` call as an unsplit job, so the cache holds the
same rows. The children are queued once, atomically with the parent's record of their ids
(:meth:`backend.jobs.context.JobContext.enqueue_children`): a parent killed -9 and retried
queues no duplicates, and a chunk killed -9 is retried by the queue and computes only the
pairs it had not committed. Their combined progress is :func:`backend.jobs.queue.group`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from radconcord.backend.errors import InvalidInput
from radconcord.backend.jobs.context import JobContext
from radconcord.backend.jobs.queue import CHILDREN_KEY, CHUNK_KIND
from radconcord.backend.runner.kinds._common import param

if TYPE_CHECKING:
    from radconcord.backend.scoring.runner import PairLike

#: The ``pair_ids`` of a chunk job over every pair of the study (corpus-dependent families).
ALL_PAIRS = None


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
    from radconcord.backend.scoring.jobs import study_pairs, validate_request
    from radconcord.backend.scoring.runner import ScoringError

    if ctx.study_id is None:
        raise ScoringError("a score job needs a study")
    metrics, options = validate_request(params.get("metrics") or [], params.get("options"))
    chunks = split_count(params)
    engine = engine_spec(params)
    if engine is not None and chunks > 1:
        raise InvalidInput("job params: a job on Ray is not split into chunk jobs")
    pairs = study_pairs(ctx.db, ctx.study_id)
    if chunks > 1:
        return _split(ctx, pairs, metrics, options, chunks)
    return _score(ctx, pairs, metrics, options, engine=engine)


def run_chunk(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Kind ``score_chunk``: score the pairs of one chunk of a split score job.

    Params: ``metrics``, ``options`` (as ``score``), ``parent`` (the score job), ``chunk``
    and ``of`` (its index and the number of chunks), ``pair_ids``: ``[first, last]`` (pair
    ids, inclusive) or ``null`` for every pair of the study, and ``steps`` (the planned
    progress total). Returns what ``score`` returns, for its pairs.

    Raises:
        ScoringError, MetricUnavailable, MetricFailed, JobCancelled: as ``score``.
        InvalidInput: malformed chunk params.
    """
    from radconcord.backend.scoring.jobs import study_pairs, validate_request
    from radconcord.backend.scoring.runner import ScoringError

    if ctx.study_id is None:
        raise ScoringError("a score_chunk job needs a study")
    metrics, options = validate_request(params.get("metrics") or [], params.get("options"))
    bounds = params.get("pair_ids")
    pairs = study_pairs(ctx.db, ctx.study_id)
    if bounds is not ALL_PAIRS:
        if not (isinstance(bounds, list) and len(bounds) == 2
                and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)):
            raise InvalidInput(
                f"job params: 'pair_ids' must be [first, last] pair ids or null, got {bounds!r}")
        first, last = bounds
        pairs = [p for p in pairs if first <= int(p.id) <= last]
    return _score(ctx, pairs, metrics, options)


def split_count(params: dict[str, Any]) -> int:
    """The ``chunks`` param: how many chunk jobs to split into (1, the default: no split).

    Raises:
        InvalidInput: not a whole number of at least 1.
    """
    chunks = param(params, "chunks", int, 1)
    if chunks < 1:
        raise InvalidInput(f"job params: 'chunks' must be at least 1, got {chunks}")
    return int(chunks)


def plan_chunks(
    pair_ids: Sequence[int],
    metrics: Sequence[str],
    options: dict[str, dict[str, Any]],
    chunks: int,
) -> list[dict[str, Any]]:
    """The params of the chunk jobs of a split: per-pair metrics over ``chunks`` contiguous
    ranges of the sorted pair ids, corpus-dependent ones in one chunk over every pair.

    Ranges are as even as possible and never empty (fewer chunks than asked for when the
    study has fewer pairs). The result depends only on the inputs, so a retried parent would
    plan the same chunks.
    """
    from radconcord.backend.metrics import registry

    per_pair: list[str] = []
    whole: list[str] = []
    for name in metrics:
        family = next(iter(registry.resolve([name])))
        (whole if registry.corpus_dependent(family, options.get(family, {})) else per_pair
         ).append(name)
    ids = sorted(int(i) for i in pair_ids)

    def spec(names: list[str], bounds: list[int] | None, n_pairs: int) -> dict[str, Any]:
        families = registry.resolve(names)
        return {"metrics": names,
                "options": {f: v for f, v in options.items() if f in families},
                "pair_ids": bounds, "steps": n_pairs * len(families)}

    out: list[dict[str, Any]] = []
    if per_pair and ids:
        k = min(chunks, len(ids))
        size, extra = divmod(len(ids), k)
        start = 0
        for i in range(k):
            end = start + size + (1 if i < extra else 0)
            out.append(spec(per_pair, [ids[start], ids[end - 1]], end - start))
            start = end
    if not ids:
        out.append(spec(list(metrics), ALL_PAIRS, 0))  # nothing to cut: one empty chunk
    elif whole:
        out.append(spec(whole, ALL_PAIRS, len(ids)))
    for i, entry in enumerate(out):
        entry.update({"chunk": i, "of": len(out)})
    return out


def _split(ctx: JobContext, pairs: Sequence[PairLike], metrics: list[str],
           options: dict[str, dict[str, Any]], chunks: int) -> dict[str, Any]:
    """Queue the chunk jobs (once) and return the parent's result naming them."""
    specs = plan_chunks([int(p.id) for p in pairs], metrics, options, chunks)
    for spec in specs:
        spec["parent"] = ctx.job_id
    ids = ctx.enqueue_children(CHUNK_KIND, specs)
    ctx.progress(len(ids), len(ids), f"split into {len(ids)} chunk jobs")
    first, last = (ids[0], ids[-1]) if ids else (0, 0)
    return {
        "summary": f"split {len(pairs)} pairs into {len(ids)} chunk jobs #{first}-#{last}",
        "outcome": "split",
        "pairs": len(pairs),
        CHILDREN_KEY: ids,
    }


def engine_spec(params: dict[str, Any]) -> dict[str, Any] | None:
    """The ``engine`` param: ``None`` (the worker computes the pairs) or ``{"name": "ray",
    "address": ADDR or None, "workers": N or None}``.

    Raises:
        InvalidInput: a malformed engine param.
    """
    spec = params.get("engine")
    if spec is None or spec == "local":
        return None
    if not isinstance(spec, dict) or spec.get("name") != "ray":
        raise InvalidInput(f"job params: 'engine' must be null or {{'name': 'ray', ...}},"
                           f" got {spec!r}")
    address, workers = spec.get("address"), spec.get("workers")
    if address is not None and not isinstance(address, str):
        raise InvalidInput(f"job params: engine address must be text, got {address!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise InvalidInput(f"job params: engine workers must be at least 1, got {workers!r}")
    return {"name": "ray", "address": address, "workers": workers}


def engine_text(spec: dict[str, Any] | None) -> str:
    """How a job's engine is named to people: ``this worker`` or ``ray (ADDR, N actors)``."""
    from radconcord.backend.services.scores.scoring import ray_where

    return "this worker" if spec is None else f"ray {ray_where(spec)}"


def _score(ctx: JobContext, pairs: Sequence[PairLike], metrics: list[str],
           options: dict[str, dict[str, Any]], *,
           engine: dict[str, Any] | None = None) -> dict[str, Any]:
    """Score ``pairs`` through the cache and summarise per family (what ``score`` returns).

    With a Ray ``engine`` the worker drives the job (cache lookup and writes, progress,
    cancel between chunks) and Ray actors compute the pairs.
    """
    from radconcord.backend.metrics.base import MetricUnavailable
    from radconcord.backend.scoring.runner import MetricFailed, score

    where = engine_text(engine)
    ctx.progress(0, 0, f"scoring {len(pairs)} pairs on {where}")
    runner_engine = None
    if engine is not None:
        from radconcord.backend.scoring.engines import RayEngine

        # ScoringError (Ray not installed, cluster unreachable) fails the job with the reason.
        runner_engine = RayEngine(address=engine["address"], workers=engine["workers"],
                                  device=ctx.device)
    try:
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
            engine=runner_engine,
        )
    finally:
        if runner_engine is not None:
            runner_engine.close()
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
    extra: dict[str, Any] = {}
    if engine is not None:
        parts.append(f"on {where}")
        extra["engine"] = where
    return {
        **extra,
        "summary": "; ".join([result_outcome, *parts]),
        "outcome": result_outcome,
        "pairs": len(table.ids),
        "families": statuses,
        "empty": len(table.empty_ids),
        "empty_ids": list(table.empty_ids[:100]),
    }
