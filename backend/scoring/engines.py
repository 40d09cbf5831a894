"""Engines: where the scoring runner and the metric-oracle builder compute their chunks.

Two units of work, one dispatch strategy per engine:

* :meth:`Engine.score_chunks` (the scoring runner, :func:`backend.scoring.runner.score` with
  ``engine=``): chunks of pairs given as texts (and image paths for a family with
  ``spec.needs_image``); each comes back as a :class:`ChunkResult` with values, per-pair
  ``details``, the seconds the metric took and the device it ran on, or the error it met.
  The driver keeps the cache lookup and the cache writes; the engine only computes.
  :meth:`Engine.corpus_statistics` computes a corpus-dependent family's statistics of the
  whole set in one call (:class:`~backend.metrics.base.CorpusStatistics`), so that its
  chunks can be spread too.
* :meth:`Engine.score` (the metric-oracle builder): every (test report, candidate) pair of
  its candidate stage, given as two text lists and an ``(n, 2)`` array of indices into them,
  so texts travel once (to the Ray object store, say) and pairs as integers.

Image paths travel as paths: Ray workers must see the same filesystem (the same data
folder, mounted at the same place) as the driver.

Every engine scores through the same code as :func:`backend.scoring.runner.score`: metric
instances come from a :class:`~backend.scoring.runner.MetricPool` (the only model cache; the
local engine uses the caller's pool, each Ray worker holds its own), the corpus-dependent
rule is the registry's (:func:`backend.metrics.registry.corpus_dependent`: such a family gets
the whole set in ONE call, unless the runner computed its statistics once with the hook and
sends them with every chunk), and scoring runs under the runner's inference context. The
local and Ray engines split the pairs into the same chunks and dispatch them the same way
(:meth:`RayEngine._dispatch` is the one strategy of the Ray engine for both units of work).
Values of the lexical families are identical across engines; a family computing fp32 matrix
products (BERTScore, VLScore) may differ in the last bits between processes (thread count,
batch shapes).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import (
    MetricInputError,
    MetricUnavailable,
    has_corpus_statistics,
)
from radconcord.backend.scoring.chunks import (
    ChunkCallback as ChunkCallback,  # re-exported: the engines' API
)
from radconcord.backend.scoring.chunks import ChunkProgress as ChunkProgress
from radconcord.backend.scoring.chunks import ChunkResult as ChunkResult
from radconcord.backend.scoring.chunks import Engine as Engine
from radconcord.backend.scoring.chunks import TextChunk as TextChunk
from radconcord.backend.scoring.runner import (
    MetricPool,
    ScoringError,
    inference_context,
    resolve_device,
    result_problem,
)

log = logging.getLogger(__name__)


#: Restarts of a Ray actor that died (killed, out of memory) and retries of its tasks: the
#: chunk it held is computed again on the restarted actor (the cache insert ignores a row
#: stored twice, and results are kept per chunk index, so nothing is counted twice).
RAY_MAX_RESTARTS = 4


def score_index_pairs(
    pool: MetricPool,
    family: str,
    options: Mapping[str, Any],
    references: Sequence[str],
    candidates: Sequence[str],
    pairs: np.ndarray,
    *,
    device: str = "cpu",
) -> dict[str, list[float]]:
    """Score one chunk of index pairs with the pool's instance; the unit of work of engines.

    ``device`` is ``cpu``, ``cuda[:N]`` or ``auto``, resolved as the runner does (torch is
    imported only for a family that loads a model and a device that is not ``cpu``).

    Raises:
        ScoringError: unknown family or option, bad or missing device.
        MetricUnavailable: the family cannot run here.
    """
    metric = pool.get(family, options)
    needs_model = bool(getattr(metric.spec, "needs_model", False))
    metric.load(resolve_device(device, needs_model=needs_model))
    refs = [references[int(t)] for t in pairs[:, 0]]
    cands = [candidates[int(c)] for c in pairs[:, 1]]
    with inference_context():
        result = metric.score(references=refs, candidates=cands)
    return {k: [math.nan if v is None else float(v) for v in vals]
            for k, vals in result.values.items()}


def _load_for(pool: MetricPool, family: str, options: Mapping[str, Any],
              device: str) -> tuple[Any, str] | ChunkResult:
    """The pool's loaded instance and its device, or the failure, as the runner words it."""
    try:
        metric = pool.get(family, options)
        needs_model = bool(getattr(metric.spec, "needs_model", False))
        dev = resolve_device(device, needs_model=needs_model) if needs_model else "cpu"
        metric.load(dev)
    except MetricUnavailable as exc:
        return ChunkResult.failure("unavailable", str(exc))
    except ScoringError as exc:
        return ChunkResult.failure("scoring", str(exc))
    except MetricInputError as exc:
        return ChunkResult.failure("input", str(exc))
    except Exception as exc:  # noqa: BLE001 - a model that will not load fails this family
        return ChunkResult.failure("load", f"{type(exc).__name__}: {exc}")
    return metric, dev


def score_chunk(
    pool: MetricPool,
    family: str,
    options: Mapping[str, Any],
    chunk: TextChunk,
    *,
    corpus: Any = None,  # noqa: ANN401 - the family's own statistics
    device: str = "cpu",
) -> ChunkResult:
    """Score one chunk of texts with the pool's instance: the runner's unit of work.

    Errors come back as data (:attr:`ChunkResult.error_kind`), never raised, so that a Ray
    worker never has to pickle an exception and the driver words them as the in-process
    runner does.

    Args:
        pool: Where the instance (and its model) is kept between chunks.
        family: Registry family.
        options: The family's options.
        chunk: The pairs.
        corpus: The whole set's statistics (a family with the corpus hook), else ``None``.
        device: ``cpu``, ``cuda[:N]`` or ``auto`` (resolved as the runner does).
    """
    loaded = _load_for(pool, family, options, device)
    if isinstance(loaded, ChunkResult):
        return loaded
    metric, dev = loaded
    n = len(chunk.references)
    kwargs: dict[str, Any] = {} if corpus is None else {"corpus": corpus}
    t0 = time.perf_counter()
    try:
        with inference_context():
            result = metric.score(references=chunk.references, candidates=chunk.candidates,
                                  images=chunk.images, **kwargs)
    except MetricUnavailable as exc:
        return ChunkResult.failure("unavailable", str(exc))
    except ScoringError as exc:
        return ChunkResult.failure("scoring", str(exc))
    except Exception as exc:  # noqa: BLE001 - reported per family by the driver
        return ChunkResult.failure("failed", f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - t0
    problem = result_problem(metric, result, n)
    if problem is not None:
        return ChunkResult.failure("result", problem)
    values: dict[str, list[float]] = {}
    for k, vals in result.values.items():
        out: list[float] = []
        for v in vals:
            try:
                out.append(math.nan if v is None else float(v))
            except (TypeError, ValueError):
                return ChunkResult.failure("result", f"returned a non-number for '{k}': {v!r}")
        values[k] = out
    return ChunkResult(values=values, details=result.details, corpus=dict(result.corpus),
                       seconds=seconds, device=dev)


def corpus_statistics_of(
    pool: MetricPool,
    family: str,
    options: Mapping[str, Any],
    chunk: TextChunk,
    *,
    device: str = "cpu",
) -> ChunkResult:
    """The family's corpus statistics of the whole set ``chunk`` (``result.statistics``).

    Errors come back as data, as in :func:`score_chunk`.
    """
    loaded = _load_for(pool, family, options, device)
    if isinstance(loaded, ChunkResult):
        return loaded
    metric, dev = loaded
    if not has_corpus_statistics(metric):
        return ChunkResult.failure("scoring", f"metric '{family}' has no corpus_statistics hook")
    t0 = time.perf_counter()
    try:
        with inference_context():
            stats = metric.corpus_statistics(references=chunk.references,
                                             candidates=chunk.candidates, images=chunk.images)
    except MetricUnavailable as exc:
        return ChunkResult.failure("unavailable", str(exc))
    except Exception as exc:  # noqa: BLE001 - reported per family by the driver
        return ChunkResult.failure("failed", f"{type(exc).__name__}: {exc}")
    return ChunkResult(statistics=stats, seconds=time.perf_counter() - t0, device=dev)


def chunk_spans(n: int, size: int, single: bool) -> list[tuple[int, int]]:
    """``[start, stop)`` spans of ``size`` pairs (one span for a corpus-dependent family)."""
    if single or n == 0:
        return [(0, n)]
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def _spans_for(family: str, options: Mapping[str, Any], n: int,
               chunk_size: int) -> list[tuple[int, int]]:
    if chunk_size < 1:
        raise ScoringError(f"chunk size must be at least 1 (got {chunk_size})")
    try:
        single = registry.corpus_dependent(family, options)
    except registry.UnknownMetric as exc:
        raise ScoringError(str(exc)) from None
    return chunk_spans(n, chunk_size, single)


def _assemble(parts: Sequence[dict[str, list[float]]]) -> dict[str, np.ndarray]:
    keys = parts[0].keys() if parts else []
    return {k: np.asarray([v for p in parts for v in p[k]], dtype=np.float64) for k in keys}


class LocalEngine:
    """Chunks scored one after another in this process, with the caller's pool."""

    name = "local"

    def __init__(self, pool: MetricPool | None = None, *, device: str = "cpu") -> None:
        """Use ``pool`` (a new one if ``None``) on ``device``."""
        self.pool = pool if pool is not None else MetricPool()
        self.device = device

    def score(self, family: str, options: Mapping[str, Any], references: Sequence[str],
              candidates: Sequence[str], pairs: np.ndarray, *, chunk_size: int,
              progress: ChunkProgress | None = None) -> dict[str, np.ndarray]:
        """Score ``pairs`` chunk by chunk (see :class:`Engine`)."""
        parts = []
        for start, stop in _spans_for(family, options, len(pairs), chunk_size):
            parts.append(score_index_pairs(self.pool, family, options, references, candidates,
                                           pairs[start:stop], device=self.device))
            if progress is not None:
                progress(stop - start)
        return _assemble(parts)

    def score_chunks(self, family: str, options: Mapping[str, Any], chunks: Sequence[TextChunk],
                     *, corpus: Any = None,  # noqa: ANN401 - the family's own statistics
                     on_result: ChunkCallback | None = None) -> list[ChunkResult]:
        """Score ``chunks`` one after another (see :class:`Engine`)."""
        results = []
        for i, chunk in enumerate(chunks):
            res = score_chunk(self.pool, family, options, chunk, corpus=corpus,
                              device=self.device)
            results.append(res)
            if on_result is not None:
                on_result(i, res)
        return results

    def corpus_statistics(self, family: str, options: Mapping[str, Any],
                          chunk: TextChunk) -> ChunkResult:
        """The statistics, computed with the caller's pool (see :class:`Engine`)."""
        return corpus_statistics_of(self.pool, family, options, chunk, device=self.device)

    def close(self) -> None:
        """Nothing to release: the pool belongs to the caller."""


class PoolWorker:
    """What one Ray worker runs: a :class:`MetricPool` kept for the worker's lifetime."""

    def __init__(self, device: str = "cpu") -> None:
        """A fresh pool on ``device``."""
        self.pool = MetricPool()
        self.device = device

    def score(self, family: str, options: Mapping[str, Any], references: Sequence[str],
              candidates: Sequence[str], pairs: np.ndarray) -> dict[str, list[float]]:
        """:func:`score_index_pairs` with this worker's pool."""
        return score_index_pairs(self.pool, family, options, references, candidates, pairs,
                                 device=self.device)

    def score_chunk(self, family: str, options: Mapping[str, Any], chunk: TextChunk,
                    corpus: Any = None) -> ChunkResult:  # noqa: ANN401
        """:func:`score_chunk` with this worker's pool."""
        return score_chunk(self.pool, family, options, chunk, corpus=corpus, device=self.device)

    def corpus_statistics(self, family: str, options: Mapping[str, Any],
                          chunk: TextChunk) -> ChunkResult:
        """:func:`corpus_statistics_of` with this worker's pool."""
        return corpus_statistics_of(self.pool, family, options, chunk, device=self.device)

    def pid(self) -> int:
        """The worker's process id (tests kill it to check that its chunk is redone)."""
        import os

        return os.getpid()


def actor_placement(device: str, cluster: Mapping[str, float]) -> tuple[int, str]:
    """``(GPUs per actor, device inside the actor)`` for the engine's ``device``.

    Each actor holds one device: for ``cuda``/``cuda:N`` (or ``auto`` on a cluster with GPUs)
    it asks Ray for one GPU, and Ray makes exactly that GPU visible to it, so inside the actor
    it is ``cuda`` (``cuda:N`` would name a GPU the actor cannot see); otherwise no GPU and
    the device as given.
    """
    text = (device or "cpu").strip().lower()
    if text.startswith("cuda") or (text == "auto" and cluster.get("GPU", 0) >= 1):
        return 1, "cuda"
    return 0, text


class RayEngine:
    """Chunks as tasks of Ray actors, each holding a :class:`MetricPool`.

    A local Ray instance is started if none is connected (or the cluster at ``address`` is
    joined). Chunks go to the actors in turn, all in flight at once, and results are kept per
    chunk index, so values line up with the local engine's exactly. An actor that dies
    (killed, out of memory) is restarted and the chunk it held is run again on it
    (``max_restarts``/``max_task_retries``); should it stay dead, the chunk is sent to
    another actor. The actors (and their loaded models) live until :meth:`close`. Image paths
    are sent as paths: the workers must see the driver's filesystem.
    """

    name = "ray"

    def __init__(self, *, num_cpus: int | None = None, address: str | None = None,
                 workers: int | None = None, device: str = "cpu",
                 max_restarts: int = RAY_MAX_RESTARTS) -> None:
        """Connect to Ray (``address``), or start a local instance if none is running.

        Args:
            num_cpus: CPUs of a local instance started here.
            address: Cluster to connect to (``ray://host:10001`` or ``host:6379``).
            workers: Actors to start (default: the cluster's GPUs when the device is CUDA,
                else its CPUs).
            device: Device each actor loads its models on.
            max_restarts: Restarts of a dead actor, and retries of the task it was running.

        Raises:
            ScoringError: Ray is not installed or cannot be reached, or ``workers`` < 1.
        """
        if workers is not None and workers < 1:
            raise ScoringError(f"workers must be at least 1 (got {workers})")
        try:
            import ray
        except ImportError as exc:
            raise ScoringError(f"engine 'ray' needs the 'ray' package ({exc})") from None
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            from radconcord.backend.config import REPO_ROOT

            try:
                # Workers must import `backend` the way this process does.
                ray.init(address=address, num_cpus=num_cpus, include_dashboard=False,
                         log_to_driver=False,
                         runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                raise ScoringError(f"engine 'ray': cannot start or join {where}: {exc}") from None
            self._started = True
        self._workers_wanted = workers
        self._device = device
        self._max_restarts = max_restarts
        self._actors: list[Any] = []

    @property
    def actors(self) -> list[Any]:
        """The actor handles started so far (tests kill one to check recovery)."""
        return list(self._actors)

    def _ensure_actors(self, n_chunks: int) -> list[Any]:
        cluster = self._ray.cluster_resources()
        gpus, device = actor_placement(self._device, cluster)
        default = cluster.get("GPU" if gpus else "CPU", 1)
        want = self._workers_wanted or int(default)
        want = max(1, min(want, n_chunks))
        if len(self._actors) < want:
            actor_cls = self._ray.remote(
                num_cpus=1, num_gpus=gpus, max_restarts=self._max_restarts,
                max_task_retries=self._max_restarts,
            )(PoolWorker)
            self._actors.extend(actor_cls.remote(device)
                                for _ in range(want - len(self._actors)))
        return self._actors

    def _dispatch(self, method: str, calls: Sequence[tuple[Any, ...]],
                  on_result: Callable[[int, Any], None] | None) -> list[Any]:
        """Run ``actor.<method>(*call)`` for each call, all in flight, results by call index.

        The one strategy of this engine: round-robin over the actors, gathered as they
        complete; a call whose actor died for good is sent to the next actor (at most once
        per actor), so every call gives exactly one result.
        """
        ray = self._ray
        from ray.exceptions import RayActorError

        if not calls:
            return []
        actors = self._ensure_actors(len(calls))
        futures: dict[Any, tuple[int, int]] = {}  # ref -> (call index, tries)
        for i, call in enumerate(calls):
            futures[getattr(actors[i % len(actors)], method).remote(*call)] = (i, 1)
        results: list[Any] = [None] * len(calls)
        pending = list(futures)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    i, tries = futures.pop(ref)
                    try:
                        res = ray.get(ref)
                    except RayActorError as exc:
                        if tries >= len(actors) + 1:
                            raise
                        log.warning("ray actor died on chunk %d (%s); sending it again", i, exc)
                        actor = actors[(i + tries) % len(actors)]
                        retry = getattr(actor, method).remote(*calls[i])
                        futures[retry] = (i, tries + 1)
                        pending.append(retry)
                        continue
                    results[i] = res
                    if on_result is not None:
                        on_result(i, res)
        except BaseException:
            # A stop (a progress callback raising) or a failure: drop what is still queued.
            for ref in pending:
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - best effort; the result is ignored anyway
                    log.debug("could not cancel a pending chunk", exc_info=True)
            raise
        return results

    def score(self, family: str, options: Mapping[str, Any], references: Sequence[str],
              candidates: Sequence[str], pairs: np.ndarray, *, chunk_size: int,
              progress: ChunkProgress | None = None) -> dict[str, np.ndarray]:
        """Score ``pairs`` on the actors (see :class:`Engine`)."""
        ray = self._ray
        spans = _spans_for(family, options, len(pairs), chunk_size)
        refs_ref = ray.put(list(references))
        cands_ref = ray.put(list(candidates))
        opts = dict(options)

        def tick(i: int, _res: Any) -> None:
            if progress is not None:
                progress(spans[i][1] - spans[i][0])

        parts = self._dispatch("score", [(family, opts, refs_ref, cands_ref, pairs[a:b])
                                         for a, b in spans], tick)
        return _assemble(parts)

    def score_chunks(self, family: str, options: Mapping[str, Any], chunks: Sequence[TextChunk],
                     *, corpus: Any = None,  # noqa: ANN401 - the family's own statistics
                     on_result: ChunkCallback | None = None) -> list[ChunkResult]:
        """Score ``chunks`` on the actors, all in flight (see :class:`Engine`)."""
        # The statistics (document frequencies, say) go to the object store once, not per chunk.
        stats = None if corpus is None else self._ray.put(corpus)
        return self._dispatch("score_chunk", [(family, dict(options), c, stats) for c in chunks],
                              on_result)

    def corpus_statistics(self, family: str, options: Mapping[str, Any],
                          chunk: TextChunk) -> ChunkResult:
        """The statistics, computed by one actor in one call (see :class:`Engine`)."""
        return self._dispatch("corpus_statistics", [(family, dict(options), chunk)], None)[0]

    def close(self) -> None:
        """Stop the actors (freeing their models); shut Ray down if this engine started it."""
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
        self._started = False


def make_engine(name: str | Engine, *, pool: MetricPool | None = None, device: str = "cpu",
                **kwargs: Any) -> Engine:
    """``"local"`` (with ``pool``) or ``"ray"``; an engine object is returned unchanged.

    Raises:
        ScoringError: an unknown engine name, or Ray missing.
    """
    if not isinstance(name, str):
        return name
    if name == "local":
        return LocalEngine(pool, device=device)
    if name == "ray":
        return RayEngine(device=device, **kwargs)
    raise ScoringError(f"unknown engine {name!r} (expected local or ray)")
