"""Engines: strategies of the scoring runner for large sets of index pairs.

The metric-oracle builder scores every (test report, candidate) pair of its candidate stage
with each requested family. That set is given as two text lists and an ``(n, 2)`` array of
indices into them, so texts travel once (to the Ray object store, say) and pairs as integers.

Every engine scores through the same code as :func:`backend.scoring.runner.score`: metric
instances come from a :class:`~backend.scoring.runner.MetricPool` (the only model cache; the
local engine uses the caller's pool, each Ray worker holds its own), the corpus-dependent
rule is the registry's (:func:`backend.metrics.registry.corpus_dependent`: such a family gets
the whole set in ONE call), and scoring runs under the runner's inference context. The local
and Ray engines split the pairs into the same chunks, so their values are identical.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from radconcord.backend.metrics import registry
from radconcord.backend.scoring.runner import (
    MetricPool,
    ScoringError,
    inference_context,
    resolve_device,
)

ChunkProgress = Callable[[int], None]


class Engine(Protocol):
    """Scores ``(reference index, candidate index)`` pairs with one metric family."""

    name: str

    def score(
        self,
        family: str,
        options: Mapping[str, Any],
        references: Sequence[str],
        candidates: Sequence[str],
        pairs: np.ndarray,
        *,
        chunk_size: int,
        progress: ChunkProgress | None = None,
    ) -> dict[str, np.ndarray]:
        """Values per output key, aligned with ``pairs`` (an ``(n, 2)`` int array)."""
        ...  # pragma: no cover - protocol

    def close(self) -> None:
        """Release what the engine started."""
        ...  # pragma: no cover - protocol


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


class RayEngine:
    """Chunks as tasks of Ray actors, each holding a :class:`MetricPool`.

    A local Ray instance is started if none is connected. The texts are put in the object
    store once per family; chunks go to the actors in turn and results are gathered in chunk
    order, so values line up with the local engine's exactly. The actors (and their loaded
    models) live until :meth:`close`.
    """

    name = "ray"

    def __init__(self, *, num_cpus: int | None = None, address: str | None = None,
                 workers: int | None = None, device: str = "cpu") -> None:
        """Connect to Ray (``address``), or start a local instance if none is running.

        Args:
            num_cpus: CPUs of a local instance started here.
            address: Cluster to connect to.
            workers: Actors to start (default: the cluster's CPUs).
            device: Device each actor loads its models on.

        Raises:
            ScoringError: Ray is not installed.
        """
        try:
            import ray
        except ImportError as exc:
            raise ScoringError(f"engine 'ray' needs the 'ray' package ({exc})") from None
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            from radconcord.backend.config import REPO_ROOT

            # Workers must import `backend` the way this process does.
            ray.init(address=address, num_cpus=num_cpus, include_dashboard=False,
                     log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})
            self._started = True
        self._workers_wanted = workers
        self._device = device
        self._actors: list[Any] = []

    def _ensure_actors(self, n_chunks: int) -> list[Any]:
        want = self._workers_wanted or int(self._ray.cluster_resources().get("CPU", 1))
        want = max(1, min(want, n_chunks))
        if len(self._actors) < want:
            actor_cls = self._ray.remote(num_cpus=1)(PoolWorker)
            self._actors.extend(actor_cls.remote(self._device)
                                for _ in range(want - len(self._actors)))
        return self._actors

    def score(self, family: str, options: Mapping[str, Any], references: Sequence[str],
              candidates: Sequence[str], pairs: np.ndarray, *, chunk_size: int,
              progress: ChunkProgress | None = None) -> dict[str, np.ndarray]:
        """Score ``pairs`` on the actors (see :class:`Engine`)."""
        ray = self._ray
        spans = _spans_for(family, options, len(pairs), chunk_size)
        actors = self._ensure_actors(len(spans))
        refs_ref = ray.put(list(references))
        cands_ref = ray.put(list(candidates))
        opts = dict(options)
        futures = [actors[i % len(actors)].score.remote(family, opts, refs_ref, cands_ref,
                                                        pairs[a:b])
                   for i, (a, b) in enumerate(spans)]
        index = {f: i for i, f in enumerate(futures)}
        parts: list[dict[str, list[float]] | None] = [None] * len(futures)
        pending = list(futures)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = index[ref]
                parts[i] = ray.get(ref)
                if progress is not None:
                    progress(spans[i][1] - spans[i][0])
        return _assemble([p for p in parts if p is not None])

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
