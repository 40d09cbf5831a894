"""What the scoring runner and its engines exchange: chunks of pairs, their results, and
the :class:`Engine` protocol (:mod:`backend.scoring.engines` implements it).

A module of its own so that the runner, which takes an engine, and the engines, which score
through the runner's metric pool, do not import each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

ChunkProgress = Callable[[int], None]


@dataclass(frozen=True)
class TextChunk:
    """One chunk of pairs for :meth:`Engine.score_chunks`.

    Attributes:
        references: Reference texts.
        candidates: Candidate texts, aligned with ``references``.
        images: Per pair the image paths (a family with ``spec.needs_image``), else ``None``.
            Paths, not pixels: a Ray worker reads them from the same filesystem.
    """

    references: list[str]
    candidates: list[str]
    images: list[tuple[Path, ...]] | None = None


@dataclass
class ChunkResult:
    """What one chunk gave (picklable: it comes back from Ray workers).

    Attributes:
        values: ``key -> floats`` (``nan`` where undefined), one per pair of the chunk.
        details: Per-pair JSON-able dicts of the family, or ``None``.
        corpus: The family's aggregates over this chunk.
        seconds: Time the metric's ``score`` took.
        device: Device the family ran on.
        error_kind: ``None`` when scored, else ``unavailable`` (the family cannot load
            here), ``load`` (its model would not load), ``scoring`` (a request error),
            ``input`` (malformed input) or ``failed`` (raised while scoring).
        error: The error's message (``TypeName: message`` for ``load`` and ``failed``).
        statistics: :meth:`Engine.corpus_statistics`'s answer, for that call only.
    """

    values: dict[str, list[float]] = field(default_factory=dict)
    details: list[Any] | None = None
    corpus: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    device: str = "cpu"
    error_kind: str | None = None
    error: str | None = None
    statistics: Any = None

    @classmethod
    def failure(cls, kind: str, message: str) -> ChunkResult:
        """A chunk that could not be scored."""
        return cls(error_kind=kind, error=message)


ChunkCallback = Callable[[int, ChunkResult], None]


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

    def score_chunks(
        self,
        family: str,
        options: Mapping[str, Any],
        chunks: Sequence[TextChunk],
        *,
        corpus: Any = None,  # noqa: ANN401 - the family's own statistics
        on_result: ChunkCallback | None = None,
    ) -> list[ChunkResult]:
        """Score each chunk (all in flight at once where the engine can); results in chunk
        order. ``on_result(index, result)`` is called as each chunk completes (in completion
        order); if it raises, the chunks not done yet are abandoned and the error propagates.
        ``corpus`` goes to every chunk's ``score(..., corpus=...)``."""
        ...  # pragma: no cover - protocol

    def corpus_statistics(
        self,
        family: str,
        options: Mapping[str, Any],
        chunk: TextChunk,
    ) -> ChunkResult:
        """The family's :meth:`~backend.metrics.base.CorpusStatistics.corpus_statistics` of
        the whole set ``chunk``, computed in one call (``result.statistics``)."""
        ...  # pragma: no cover - protocol

    def close(self) -> None:
        """Release what the engine started."""
        ...  # pragma: no cover - protocol
