"""The metric contract shared by every metric family.

A metric family (``bleu``, ``bertscore``, ...) is a class that owns one or more output keys
(``bleu1`` .. ``bleu4``). Construction is cheap and takes keyword options; heavy imports and
weights are touched only in :meth:`Metric.load`. Scoring is keyword-only so that a swapped
reference/candidate pair cannot happen silently.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


class MetricUnavailable(RuntimeError):
    """Raised when a metric cannot run here (missing weights, package or runtime).

    The message is shown to users verbatim, so it must say what is missing and how to
    provide it.
    """


class MetricInputError(ValueError):
    """Raised when the inputs given to ``score`` are malformed (lengths differ, wrong type)."""


@dataclass(frozen=True)
class OutputSpec:
    """One output key of a metric family.

    Attributes:
        key: Column name in score files and the database (``bleu4``).
        higher_is_better: Direction; RadCliQ-like error predictions are ``False``.
        description: One line for tables and tooltips.
    """

    key: str
    higher_is_better: bool = True
    description: str = ""


@dataclass(frozen=True)
class MetricSpec:
    """Static description of a metric family.

    Attributes:
        name: Family name used by the registry and ``--set name.option=value``.
        outputs: Per-pair output keys.
        needs_image: Whether ``images=`` is required.
        needs_model: Whether weights must be loaded (drives availability display).
        citation: Short citation string (full one lives in the card).
        corpus_outputs: Names of corpus-level aggregates returned in ``MetricResult.corpus``.
    """

    name: str
    outputs: tuple[OutputSpec, ...]
    needs_image: bool = False
    needs_model: bool = False
    citation: str = ""
    corpus_outputs: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        """Output keys in declaration order."""
        return tuple(o.key for o in self.outputs)

    def direction(self, key: str) -> bool:
        """Return ``higher_is_better`` for ``key``."""
        for o in self.outputs:
            if o.key == key:
                return o.higher_is_better
        raise KeyError(key)


@dataclass
class MetricResult:
    """Per-pair scores of one family for one batch.

    Attributes:
        values: ``key -> list`` with one float per pair (``nan`` where undefined).
        corpus: Corpus-level aggregates over the scored set.
        details: Optional per-pair JSON-able dicts (labels, parsed errors, flags).
    """

    values: dict[str, list[float]]
    corpus: dict[str, float] = field(default_factory=dict)
    details: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        lengths = {len(v) for v in self.values.values()}
        if len(lengths) > 1:
            raise MetricInputError(f"output keys have different lengths: {sorted(lengths)}")
        if self.details is not None and lengths and len(self.details) not in lengths:
            raise MetricInputError("details must have one entry per pair")

    def __len__(self) -> int:
        for v in self.values.values():
            return len(v)
        return 0


class Resources:
    """Loaded heavy objects (models, tokenizers, metric instances) shared inside one owner.

    A metric never keeps a module-level cache: it asks its ``resources`` for what it needs,
    keyed by everything that defines the object (loader name, resolved path or revision,
    device, dtype). The scoring runner's :class:`~backend.scoring.runner.MetricPool` owns one
    ``Resources`` and hands it to every instance it creates, so two families on the same
    checkpoint (CheXbert labels and s_emb; RadCliQ and its inputs) load it once per pool, and
    dropping the pool frees it. A metric used on its own gets a private ``Resources``.
    """

    def __init__(self) -> None:
        self._items: dict[tuple[Hashable, ...], Any] = {}
        # Reentrant: a loader may itself ask for a resource (a metric instance its model).
        self._lock = threading.RLock()
        self.loads: Counter[Hashable] = Counter()  # loader name -> objects built, for tests

    def get(self, key: tuple[Hashable, ...], load: Callable[[], T]) -> T:
        """The object under ``key``, built by ``load()`` the first time it is asked for.

        Args:
            key: ``(loader name, ...what defines the object)``; the first element counts the
                loads in :attr:`loads`.
            load: Builds the object; called at most once per key while it is held.
        """
        with self._lock:
            if key in self._items:
                return self._items[key]
            obj = load()
            self._items[key] = obj
            self.loads[key[0]] += 1
            return obj

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        """Forget every object (their memory goes once no instance refers to them)."""
        with self._lock:
            self._items.clear()


@runtime_checkable
class Metric(Protocol):
    """What the scoring runner needs from a metric family."""

    spec: MetricSpec

    def availability(self) -> str | None:
        """Return ``None`` when the metric can run here, else the reason it cannot.

        Must be cheap: no model load, no network.
        """

    def load(self, device: str = "cpu") -> None:
        """Import heavy dependencies and load weights. Idempotent."""

    def score(
        self,
        *,
        references: Sequence[str],
        candidates: Sequence[str],
        images: Sequence[Any] | None = None,
    ) -> MetricResult:
        """Score aligned reference/candidate pairs."""

    def signature(self) -> str:
        """Settings that change the numbers, and nothing else."""


@runtime_checkable
class CorpusStatistics(Protocol):
    """Optional hook of a corpus-dependent family: its set statistics, computed once.

    A family whose per-pair values depend on the whole scored set (CIDEr's document
    frequencies, BERTScore's idf, VLScore's calibrated C) may implement it so that a set can
    be scored in chunks, on several workers: ``stats = metric.corpus_statistics(...)`` over the
    whole set, once, then ``metric.score(references=..., candidates=..., corpus=stats)`` per
    chunk gives each pair the value the one-call ``score`` over the whole set gives it. The
    statistics must be picklable (they travel to Ray workers). A family without the hook is
    scored in one call over the whole set, wherever it runs.
    """

    def corpus_statistics(
        self,
        *,
        references: Sequence[str],
        candidates: Sequence[str],
        images: Sequence[Any] | None = None,
    ) -> Any:  # noqa: ANN401 - each family's own picklable statistics
        """Statistics of the whole scored set (every pair, duplicates included, in order)."""


def has_corpus_statistics(metric: object) -> bool:
    """Whether ``metric`` implements :class:`CorpusStatistics` (the optional hook)."""
    return callable(getattr(metric, "corpus_statistics", None))


class BaseMetric:
    """Convenience base: option handling, availability, input validation.

    Subclasses declare ``spec`` and ``defaults`` (option name -> default value) and implement
    ``_score``; ``signature`` must be overridden to list exactly what changes the number.
    """

    spec: ClassVar[MetricSpec]
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, **options: Any) -> None:
        unknown = set(options) - set(self.defaults)
        if unknown:
            known = ", ".join(sorted(self.defaults)) or "none"
            raise ValueError(
                f"unknown option(s) for metric '{self.spec.name}': {', '.join(sorted(unknown))}"
                f" (known: {known})"
            )
        self.options: dict[str, Any] = {**self.defaults, **options}
        self.device = "cpu"
        self._loaded = False
        self._resources: Resources | None = None

    @property
    def resources(self) -> Resources:
        """Where this instance gets its models (the pool's, else a private one)."""
        res = getattr(self, "_resources", None)
        if res is None:
            res = self._resources = Resources()
        return res

    def use_resources(self, resources: Resources) -> None:
        """Share models with the other instances of ``resources`` (call before ``load``)."""
        self._resources = resources

    def availability(self) -> str | None:
        return None

    def load(self, device: str = "cpu") -> None:
        if self._loaded and device == self.device:
            return
        reason = self.availability()
        if reason is not None:
            raise MetricUnavailable(reason)
        self.device = device
        self._load()
        self._loaded = True

    def _load(self) -> None:
        """Load heavy state; override in subclasses that need it."""

    def score(
        self,
        *,
        references: Sequence[str],
        candidates: Sequence[str],
        images: Sequence[Any] | None = None,
        corpus: Any = None,  # noqa: ANN401 - the family's own statistics
    ) -> MetricResult:
        """Score aligned pairs; ``corpus`` is :meth:`CorpusStatistics.corpus_statistics`'s
        answer over the whole set, for a family with that hook (``None``: the set is this call).

        Raises:
            MetricInputError: malformed inputs, or ``corpus`` given to a family without the hook.
        """
        references, candidates = validate_pairs(references=references, candidates=candidates)
        if corpus is not None and not has_corpus_statistics(self):
            raise MetricInputError(
                f"metric '{self.spec.name}' takes no corpus statistics (no corpus_statistics hook)"
            )
        if self.spec.needs_image:
            if images is None or len(images) != len(references):
                raise MetricInputError(
                    f"metric '{self.spec.name}' needs one image per pair"
                    f" (got {0 if images is None else len(images)} for {len(references)} pairs)"
                )
        if not self._loaded:
            self.load(self.device)
        if not references:
            return MetricResult(values={k: [] for k in self.spec.keys})
        if corpus is not None:
            # Only families with the hook take the keyword, so the others' _score is unchanged.
            return self._score(  # type: ignore[call-arg]
                references=references, candidates=candidates, images=images, corpus=corpus
            )
        return self._score(references=references, candidates=candidates, images=images)

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        raise NotImplementedError

    def signature(self) -> str:
        raise NotImplementedError


def validate_pairs(
    *, references: Sequence[str], candidates: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Check aligned string sequences and return them as lists.

    Raises:
        MetricInputError: when a side is a bare string, lengths differ or an item is not str.
    """
    if isinstance(references, str) or isinstance(candidates, str):
        raise MetricInputError("references and candidates must be sequences of strings, not str")
    refs, cands = list(references), list(candidates)
    if len(refs) != len(cands):
        raise MetricInputError(
            f"references ({len(refs)}) and candidates ({len(cands)}) differ in length"
        )
    for side, items in (("references", refs), ("candidates", cands)):
        for i, t in enumerate(items):
            if not isinstance(t, str):
                raise MetricInputError(f"{side}[{i}] is {type(t).__name__}, expected str")
    return refs, cands


def signature_hash(signature: str) -> str:
    """Stable short hash of a signature string; keys the score cache."""
    return hashlib.sha256(signature.encode("utf-8")).hexdigest()[:16]


def nan() -> float:
    """The value stored for a pair on which a metric is undefined."""
    return math.nan
