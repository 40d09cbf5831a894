"""One registry entry: what the scoring machinery knows of a metric family without importing it.

Its own module so that the registry and the plug-in reader (:mod:`backend.metrics.plugins`,
which builds entries for other packages' families) both use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CorpusRule", "Entry"]

#: Options -> whether the values depend on the whole scored set.
CorpusRule = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Entry:
    """One registered family.

    Attributes:
        family: Family name.
        target: ``"module:Class"``, imported only when an instance is created.
        keys: Output keys in the class's declaration order.
        kind: lexical | embedding | clinical | composite | image | learned | uncertainty.
        per_pair: False for metrics of several sampled reports of one case (no
            reference/candidate pair).
        lower_is_better: The keys whose lower values are better (every other key: higher).
        corpus_dependent: Whether a value depends on the whole scored set (CIDEr's document
            frequencies); a function of the options where an option decides (BERTScore idf,
            VLScore's C calibrated on the set).
        origin: ``None`` for a built-in family; for a plug-in, the package and entry point
            it comes from (``package NAME VERSION (entry point NAME = module:Class)``).
        error: Why a plug-in cannot be used (it failed to import, or breaks the contract);
            such an entry has no keys and every instance request raises
            :class:`~backend.metrics.base.MetricUnavailable` with this message.
    """

    family: str
    target: str
    keys: tuple[str, ...]
    kind: str
    per_pair: bool = True
    lower_is_better: tuple[str, ...] = ()
    corpus_dependent: bool | CorpusRule = False
    origin: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        stray = set(self.lower_is_better) - set(self.keys)
        if stray:
            raise ValueError(f"registry entry '{self.family}': lower_is_better names"
                             f" keys it does not have: {sorted(stray)}")
