"""The scoring runner: metrics x pairs -> per-pair values, through the score cache.

For each requested family the runner creates the metric with its options, checks
availability, computes the signature and its hash, looks up cached ``MetricScore`` cells by
``(input_hash, key, signature_hash)``, scores only the missing pairs in batches and stores each
batch in one transaction (insert-or-ignore). Rescoring with the same signature computes
nothing and loads no model; changing an option changes the signature and recomputes.

Conventions metric families can rely on:

* ``corpus_dependent`` (declared in the registry entry, possibly as a rule over the options:
  :func:`backend.metrics.registry.corpus_dependent`): a metric whose per-pair value depends
  on the whole scored set (CIDEr's document frequencies, BERTScore with idf). The runner
  passes the whole scored set (every non-empty pair, duplicates included, in
  input order) in ONE ``score()`` call, never per batch, and appends the scored set's identity
  ``|set:<16 hex>`` (sha256 of the sorted pair input hashes) to ``signature()`` before hashing
  it. ``signature()`` must therefore be callable before ``score()`` and describe settings only.
* ``images=``: for metrics with ``spec.needs_image`` the runner passes one tuple of
  ``pathlib.Path`` per pair (the pair's image files, possibly empty); otherwise ``None``.
* Pairs with an empty reference or candidate are never sent to a metric: their value is
  ``nan`` and they are listed in :attr:`ScoreTable.empty_ids`.
* Models are loaded through :class:`MetricPool`, the only model cache: the pool hands its
  :class:`~backend.metrics.base.Resources` to each instance (``use_resources``), and a family
  gets its model with ``self.resources.get((loader, path, device, dtype), build)``, never from
  a module-level dict. Families on one checkpoint load it once per pool; closing (or
  dropping) the pool frees them.
* Torch is never imported here unless a family with ``spec.needs_model`` must be computed with
  ``device="auto"``; ``score()`` runs under ``torch.inference_mode()`` only when torch is
  already imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import (
    Metric,
    MetricInputError,
    MetricResult,
    MetricUnavailable,
    Resources,
    signature_hash,
)
from radconcord.backend.scoring import cache
from radconcord.backend.scoring.hashing import input_hash as compute_input_hash

if TYPE_CHECKING:
    from radconcord.backend.scoring.chunks import ChunkResult, Engine
    from radconcord.db.session import Database

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 32
# Score rows written per transaction (one corpus-dependent call can return a whole study).
STORE_CHUNK_ROWS = 2000
ProgressFn = Callable[[int, int, str], None]


class ScoringError(ValueError):
    """A request the runner cannot honour (unknown metric or option, bad device)."""


class MetricFailed(RuntimeError):
    """A metric raised while scoring; the message names the family and the pairs."""


class PairLike(Protocol):
    """What the runner needs of a pair (``io.PairRecord`` and ``ScorePair`` fit)."""

    @property
    def id(self) -> str: ...  # noqa: D102

    @property
    def reference(self) -> str: ...  # noqa: D102

    @property
    def candidate(self) -> str: ...  # noqa: D102

    @property
    def images(self) -> tuple[Path, ...]: ...  # noqa: D102

    @property
    def input_hash(self) -> str: ...  # noqa: D102


@dataclass(frozen=True)
class ScorePair:
    """A pair to score when it does not come from a PAIRS file (e.g. a study's ``Pair``).

    ``input_hash`` defaults to :func:`backend.scoring.hashing.input_hash` of the texts and
    ``image_sha256s``; a study passes the hash stored on its ``Pair`` row so cache rows line up
    with what the dashboard reads.
    """

    id: str
    reference: str
    candidate: str
    images: tuple[Path, ...] = ()
    image_sha256s: tuple[str, ...] = ()
    stored_hash: str | None = None

    @property
    def input_hash(self) -> str:
        """The pair's cache key."""
        if self.stored_hash is not None:
            return self.stored_hash
        return compute_input_hash(self.reference, self.candidate, self.image_sha256s)


@dataclass
class FamilyRun:
    """What happened to one family during a ``score`` call."""

    family: str
    keys: list[str]
    signature: str = ""
    signature_hash: str = ""
    device: str = "cpu"
    computed: int = 0  # distinct pair inputs computed now
    cached: int = 0  # distinct pair inputs found in the cache
    seconds: float = 0.0
    corpus: dict[str, float] = field(default_factory=dict)
    unavailable: str | None = None
    failed: str | None = None
    #: Pairs no LLM endpoint answered: NaN now, not cached, so the next run retries them.
    endpoint_failed: int = 0
    #: Per-endpoint requests/failures/rests of an LLM endpoint pool (``endpoints=`` option).
    endpoints: list[dict[str, Any]] | None = None

    @property
    def status(self) -> str:
        """``done``, ``unavailable`` (cannot run here) or ``failed`` (raised while scoring)."""
        if self.unavailable:
            return "unavailable"
        if self.failed:
            return "failed"
        return "done"

    @property
    def status_text(self) -> str:
        """``done``, ``unavailable: <reason>`` or ``failed: <error>``, for people."""
        if self.unavailable:
            return f"unavailable: {self.unavailable}"
        if self.failed:
            return f"failed: {self.failed}"
        return "done"


@dataclass
class ScoreTable:
    """Per-pair values for the requested keys, in pair order and request order."""

    ids: list[str]
    columns: dict[str, list[float]]
    families: dict[str, FamilyRun]
    empty_ids: list[str] = field(default_factory=list)

    @property
    def unavailable(self) -> dict[str, str]:
        """``family -> reason`` for families skipped because they cannot run here."""
        return {f: r.unavailable for f, r in self.families.items() if r.unavailable}

    @property
    def failed(self) -> dict[str, str]:
        """``family -> error`` for families that raised while scoring (``keep_going``)."""
        return {f: r.failed for f, r in self.families.items() if r.failed}

    @property
    def done(self) -> list[str]:
        """The families scored in full."""
        return [f for f, r in self.families.items() if r.status == "done"]


class MetricPool:
    """Warm metric instances and the models they share: the only model cache.

    One pool per process that scores (the worker's, a Ray worker's, a command's). Instances
    are kept per (family, options) and share the pool's :attr:`resources`, where models are
    held per (loader, path or revision, device, dtype): CheXbert labels and s_emb load one
    checkpoint, RadCliQ's inputs are the pool's own instances of those families. Nothing is
    kept at module level, so :meth:`close`, or dropping the pool, frees every model.
    """

    def __init__(self) -> None:
        self.resources = Resources()
        self.created = 0

    def get(self, family: str, options: Mapping[str, Any]) -> Metric:
        """The instance for ``family`` with ``options``, created on first use.

        Raises:
            ScoringError: unknown family or option.
            MetricUnavailable: the family's module cannot be imported here.
        """
        return self.resources.get(
            registry.instance_key(family, options), lambda: self._new(family, options)
        )

    def _new(self, family: str, options: Mapping[str, Any]) -> Metric:
        metric = _create(family, options)
        use = getattr(metric, "use_resources", None)
        if use is not None:
            use(self.resources)
        self.created += 1
        return metric

    def close(self) -> None:
        """Drop every instance and model (their memory goes once nothing else holds them)."""
        self.resources.clear()

    clear = close  # the worker's older name


def is_corpus_dependent(family: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``family`` with ``options`` is scored as one set (the registry's declaration).

    Raises:
        ScoringError: unknown family.
    """
    try:
        return registry.corpus_dependent(family, options)
    except registry.UnknownMetric as exc:
        raise ScoringError(str(exc)) from None


def _create(family: str, options: Mapping[str, Any]) -> Metric:
    try:
        return registry.create(family, **options)
    except registry.UnknownMetric as exc:
        raise ScoringError(str(exc)) from None
    except MetricUnavailable:
        raise
    except ImportError as exc:
        raise MetricUnavailable(f"cannot import the metric's code: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ScoringError(f"metric '{family}': {exc}") from None


def parse_option_value(text: str) -> bool | int | float | str:
    """Parse a ``--set`` value: true/false, int, float, else the string itself."""
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return text  # kept as text: options have typed defaults, None is never settable
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_set_options(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Turn ``["bertscore.idf=true", ...]`` into ``{"bertscore": {"idf": True}}``.

    Raises:
        ScoringError: for an item not of the form ``family.option=value``.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        family, dot, option = name.strip().partition(".")
        if not sep or not dot or not family or not option:
            raise ScoringError(f"--set '{item}': expected metric.option=value")
        if family not in registry.ENTRIES and family in registry.KEY_TO_FAMILY:
            family = registry.KEY_TO_FAMILY[family]  # accept an output key for its family
        out.setdefault(family, {})[option.strip()] = parse_option_value(value)
    return out


def requested_keys(names: Sequence[str]) -> list[str]:
    """Output keys in request order: a family expands to all its keys, duplicates dropped.

    Raises:
        ScoringError: for a name that is neither a family nor a key.
    """
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in registry.ENTRIES:
            keys: Sequence[str] = registry.ENTRIES[name].keys
        elif name in registry.KEY_TO_FAMILY:
            keys = (name,)
        else:
            raise ScoringError(str(registry.UnknownMetric(name)))
        if not keys:
            continue  # a plug-in that could not be loaded: scoring reports it unavailable
        entry = registry.ENTRIES[registry.KEY_TO_FAMILY[keys[0]]]
        if not entry.per_pair:
            raise ScoringError(
                f"'{name}' measures several sampled reports of one case, not pairs:"
                " use `python -m backend uncertainty --input PAIRS --output OUT.json`"
            )
        out.extend(k for k in keys if k not in out)
    return out


def resolve_device(requested: str, *, needs_model: bool) -> str:
    """Map ``auto|cpu|cuda[:N]`` to the device a family runs on.

    Torch is imported only when ``needs_model`` and the answer depends on it.

    Raises:
        ScoringError: unknown device, or CUDA requested where it is not available.
    """
    req = (requested or "auto").strip().lower()
    if req not in ("auto", "cpu") and not req.startswith("cuda"):
        raise ScoringError(f"unknown device '{requested}' (expected auto, cpu or cuda)")
    if not needs_model or req == "cpu":
        return "cpu"
    try:
        import torch
    except ImportError:
        if req == "auto":
            return "cpu"
        raise ScoringError("device 'cuda' requested but torch is not installed") from None
    cuda = bool(torch.cuda.is_available())
    if req == "auto":
        return "cuda" if cuda else "cpu"
    if not cuda:
        raise ScoringError(f"device '{requested}' requested but CUDA is not available here")
    return req


def corpus_identity(input_hashes: Sequence[str]) -> str:
    """Identity of a scored set: sha256 over its sorted pair input hashes (16 hex)."""
    h = hashlib.sha256()
    for ih in sorted(input_hashes):
        h.update(ih.encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()[:16]


def inference_context() -> contextlib.AbstractContextManager[Any]:
    """``torch.inference_mode()`` when torch is already imported, else a no-op context."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "inference_mode"):
        return torch.inference_mode()
    return contextlib.nullcontext()


def _chunks(items: Sequence[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


@dataclass
class _Plan:
    family: str
    keys: list[str]
    metric: Metric | None
    run: FamilyRun
    corpus_dependent: bool = False
    options: dict[str, Any] = field(default_factory=dict)


def score(
    pairs: Sequence[PairLike],
    metrics: Sequence[str],
    *,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    device: str = "auto",
    batch_size: int = DEFAULT_BATCH_SIZE,
    db: Database | None = None,
    progress: ProgressFn | None = None,
    skip_unavailable: bool = False,
    pool: MetricPool | None = None,
    keep_going: bool = False,
    engine: Engine | None = None,
) -> ScoreTable:
    """Score ``pairs`` with ``metrics``, using and filling the score cache in ``db``.

    Args:
        pairs: Pairs in output order (ids must be unique).
        metrics: Family names or output keys (``["bleu4", "rouge"]``), in output order.
        options: ``family -> {option: value}`` passed to the metric constructors.
        device: ``auto``, ``cpu`` or ``cuda[:N]`` for metrics that load models.
        batch_size: Pairs per ``score()`` call and per committed transaction.
        db: A :class:`db.session.Database` for the cache, or ``None`` to compute everything
            and store nothing.
        progress: Called as ``progress(done, total, message)`` after each batch; ``total`` is
            pairs x families. It may raise to stop early (committed batches stay).
        skip_unavailable: Record unavailable families in the result instead of raising.
        pool: Warm metric instances to reuse (the worker keeps one per process).
        keep_going: Score every family that can be scored: a family that turns out
            unavailable when its model loads, or fails while scoring, is recorded
            (``FamilyRun.unavailable`` / ``FamilyRun.failed``, no column) and the next family
            is scored; its batches committed before the failure stay cached. Implies
            ``skip_unavailable``. A stop requested through ``progress`` still stops all.
        engine: Where the missing pairs are computed (:mod:`backend.scoring.engines`):
            ``None`` computes them here, batch after batch. With an engine the cache lookup
            and writes stay here (same rows and signatures) and the engine computes chunks of
            ``batch_size`` pairs (on Ray, all in flight at once). A corpus-dependent family
            with the :class:`~backend.metrics.base.CorpusStatistics` hook gets its statistics
            computed once over the whole scored set, then its chunks are spread too; one
            without the hook is computed in one call over the whole set, on the engine. Pairs'
            image paths are sent as paths: the engine's workers must see this filesystem.

    Returns:
        The values of every requested key for every pair (``nan`` where undefined).

    Raises:
        ScoringError: unknown metric or option, options for a family not requested, bad
            device or batch size, duplicate pair ids.
        MetricUnavailable: a family cannot run here and ``skip_unavailable`` is false.
        MetricFailed: a metric raised while scoring.
    """
    options = {k: dict(v) for k, v in (options or {}).items()}
    if batch_size < 1:
        raise ScoringError(f"batch size must be at least 1 (got {batch_size})")
    try:
        requested = registry.resolve(list(metrics))
    except registry.UnknownMetric as exc:
        raise ScoringError(str(exc)) from None
    if not requested:
        raise ScoringError("no metrics requested")
    requested_keys(list(metrics))  # refuses metrics that do not score pairs
    stray = sorted(set(options) - set(requested))
    if stray:
        raise ScoringError(
            f"options given for metric(s) not requested: {', '.join(stray)}"
            f" (requested: {', '.join(requested)})"
        )
    pairs = list(pairs)
    ids = [str(p.id) for p in pairs]
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise ScoringError(f"duplicate pair id(s): {', '.join(dupes)}")
    pool = pool or MetricPool()
    skip_unavailable = skip_unavailable or keep_going

    # Create every family first: an unknown option or a missing family fails before any
    # batch is computed or stored.
    plans: list[_Plan] = []
    for family, keys in requested.items():
        run = FamilyRun(family=family, keys=list(keys))
        metric: Metric | None = None
        try:
            metric = pool.get(family, options.get(family, {}))
            reason = metric.availability()
            if reason is None:
                # Some signatures need files (a checkpoint hash) and say so by raising.
                run.signature = metric.signature()
        except MetricUnavailable as exc:
            reason = str(exc)
        if reason is not None:
            if not skip_unavailable:
                raise MetricUnavailable(f"metric '{family}' is unavailable: {reason}")
            run.unavailable = reason
            metric = None
        plans.append(_Plan(family, list(keys), metric, run,
                           is_corpus_dependent(family, options.get(family, {})),
                           dict(options.get(family, {}))))

    hashes = [p.input_hash for p in pairs]
    empty = [not p.reference.strip() or not p.candidate.strip() for p in pairs]
    scored_idx = [i for i in range(len(pairs)) if not empty[i]]
    # One representative pair per distinct input: identical pairs are computed once.
    first_of: dict[str, int] = {}
    for i in scored_idx:
        first_of.setdefault(hashes[i], i)
    unique_idx = list(first_of.values())

    total = len(pairs) * sum(1 for p in plans if p.metric is not None)
    done = 0
    columns: dict[str, list[float]] = {}
    for plan in plans:
        fam_values: dict[str, dict[str, float]] = {k: {} for k in plan.keys}
        if plan.metric is not None:
            n_done_before = done

            def tick(n: int, message: str, base: int = n_done_before) -> None:
                nonlocal done
                done = base + n
                if progress is not None:
                    progress(done, total, message)

            try:
                _score_family(
                    plan,
                    pairs=pairs,
                    hashes=hashes,
                    scored_idx=scored_idx,
                    unique_idx=unique_idx,
                    n_empty=len(pairs) - len(scored_idx),
                    values=fam_values,
                    device=device,
                    batch_size=batch_size,
                    db=db,
                    tick=tick,
                    engine=engine,
                )
            except MetricUnavailable as exc:
                if not keep_going:
                    raise
                plan.run.unavailable = _reason(str(exc), plan.family)
            except (MetricFailed, MetricInputError) as exc:
                if not keep_going:
                    raise
                log.warning("scoring %s failed; going on with the other families: %s",
                            plan.family, exc)
                plan.run.failed = _reason(str(exc), plan.family)
            if plan.run.status != "done":
                # Its share of the progress is skipped, so the bar still ends at the total.
                tick(len(pairs), f"{plan.family}: {plan.run.status}")
        for key in plan.keys:
            if plan.metric is None or plan.run.status != "done":
                continue
            columns[key] = [
                math.nan if empty[i] else fam_values[key].get(hashes[i], math.nan)
                for i in range(len(pairs))
            ]
    order = [k for k in requested_keys(metrics) if k in columns]
    return ScoreTable(
        ids=ids,
        columns={k: columns[k] for k in order},
        families={p.family: p.run for p in plans},
        empty_ids=[ids[i] for i in range(len(pairs)) if empty[i]],
    )


def _reason(message: str, family: str) -> str:
    """``message`` without the ``metric '<family>' is unavailable: `` prefix (the family is
    named beside it wherever the reason is shown)."""
    for prefix in (f"metric '{family}' is unavailable: ",):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def _score_family(
    plan: _Plan,
    *,
    pairs: list[PairLike],
    hashes: list[str],
    scored_idx: list[int],
    unique_idx: list[int],
    n_empty: int,
    values: dict[str, dict[str, float]],
    device: str,
    batch_size: int,
    db: Database | None,
    tick: Callable[[int, str], None],
    engine: Engine | None = None,
) -> None:
    metric, run, family = plan.metric, plan.run, plan.family
    assert metric is not None
    corpus_dependent = plan.corpus_dependent
    signature = run.signature
    if corpus_dependent:
        signature = f"{signature}|set:{corpus_identity([hashes[i] for i in scored_idx])}"
    run.signature = signature
    run.signature_hash = sig_hash = signature_hash(signature)
    needs_model = bool(getattr(metric.spec, "needs_model", False))

    cached: dict[tuple[str, str], float] = {}
    if db is not None and unique_idx:
        # A read session: on SQLite a large lookup must not hold the write lock.
        with db.read() as session:
            cached = cache.lookup(
                session,
                input_hashes=[hashes[i] for i in unique_idx],
                keys=plan.keys,
                signature_hash=sig_hash,
            )
    missing: list[int] = []
    for i in unique_idx:
        h = hashes[i]
        if all((h, k) in cached for k in plan.keys):
            for k in plan.keys:
                values[k][h] = cached[(h, k)]
        else:
            missing.append(i)
    run.cached = len(unique_idx) - len(missing)
    # Pairs sharing an input with a cached pair count as done too.
    missing_hashes = {hashes[i] for i in missing}
    resolved = n_empty + sum(1 for i in scored_idx if hashes[i] not in missing_hashes)
    tick(resolved, f"{family}: {run.cached} cached")
    if not missing:
        return

    multiplicity: dict[str, int] = {}
    for i in scored_idx:
        multiplicity[hashes[i]] = multiplicity.get(hashes[i], 0) + 1
    stored_keys = list(metric.spec.keys)

    def record(batch: list[int], values_of: Mapping[str, Sequence[Any]],
               details: Sequence[Any] | None, corpus: Mapping[str, float], seconds: float,
               *, whole_set: bool, one_call: bool, endpoint_metric: Metric | None = None) -> None:
        """Keep one computed batch's values, store them (one transaction per
        STORE_CHUNK_ROWS rows) and tick. ``one_call``: the batch is a corpus-dependent
        family's one call over the set (every missing input is computed by it)."""
        nonlocal resolved
        run.seconds += seconds
        if whole_set:
            run.corpus = dict(corpus)
        rows: list[cache.ScoreRow] = []
        per_pair = seconds / max(len(batch), 1)
        batch_hashes: list[str] = []
        for pos, i in enumerate(batch):
            h = hashes[i]
            if h in batch_hashes:
                continue  # a duplicate input inside a corpus call: stored once
            batch_hashes.append(h)
            detail = details[pos] if details is not None else None
            transient = isinstance(detail, dict) and bool(detail.get("endpoint_error"))
            run.endpoint_failed += transient
            for k in stored_keys:
                v = _as_float(values_of[k][pos], family, k)
                if k in values:
                    values[k][h] = v
                if transient:
                    continue  # an outage is not a score: never cache it
                rows.append(
                    cache.ScoreRow(
                        input_hash=h,
                        family=family,
                        key=k,
                        signature_hash=sig_hash,
                        signature=run.signature,
                        value=v,
                        details=detail,
                        device=run.device,
                        seconds=per_pair,
                    )
                )
        if db is not None:
            # Short transactions: a corpus-dependent family stores its whole scored set at
            # once, and raters' saves must not wait behind one long write. Existing cells
            # are ignored by the insert, so a chunk repeated after a crash is harmless.
            for start in range(0, len(rows), STORE_CHUNK_ROWS):
                with db.begin() as session:
                    cache.store(session, rows[start:start + STORE_CHUNK_ROWS])
        if endpoint_metric is not None:
            stats = getattr(endpoint_metric, "endpoint_stats", None)
            if callable(stats):
                pool = stats()
                if pool is not None:
                    run.endpoints = list(pool.get("endpoints", []))
        run.computed += len(missing_hashes if one_call else batch_hashes)
        resolved += sum(multiplicity[h] for h in batch_hashes if h in missing_hashes)
        tick(resolved, f"{family}: {run.computed} computed, {run.cached} cached")

    if engine is not None:
        _score_on_engine(plan, engine, pairs=pairs, scored_idx=scored_idx, missing=missing,
                         batch_size=batch_size, record=record)
        return

    run.device = resolve_device(device, needs_model=needs_model) if needs_model else "cpu"
    try:
        metric.load(run.device)
    except MetricUnavailable as exc:
        raise MetricUnavailable(f"metric '{family}' is unavailable: {exc}") from None
    except (ScoringError, MetricInputError):
        raise
    except Exception as exc:
        # A model that will not load (a corrupt checkpoint, out of memory) fails this family.
        raise MetricFailed(f"metric '{family}' could not load its model: "
                           f"{type(exc).__name__}: {exc}") from exc

    if corpus_dependent:
        # The whole scored set in one call: the values depend on it.
        batches = [list(scored_idx)]
    else:
        batches = list(_chunks(missing, batch_size))

    for batch in batches:
        result, seconds = _call(metric, family, pairs, batch)
        record(batch, result.values, result.details, result.corpus, seconds,
               whole_set=len(batches) == 1 and len(batch) == len(scored_idx),
               one_call=corpus_dependent, endpoint_metric=metric)


def _images_of(
    metric: Metric, pairs: list[PairLike], batch: list[int]
) -> list[tuple[Path, ...]] | None:
    if not getattr(metric.spec, "needs_image", False):
        return None
    return [tuple(pairs[i].images) for i in batch]


def _score_on_engine(
    plan: _Plan,
    engine: Engine,
    *,
    pairs: list[PairLike],
    scored_idx: list[int],
    missing: list[int],
    batch_size: int,
    record: Callable[..., None],
) -> None:
    """Compute a family's missing pairs on ``engine``; ``record`` keeps and stores each chunk."""
    from radconcord.backend.metrics.base import has_corpus_statistics
    from radconcord.backend.scoring.chunks import TextChunk

    metric, run, family = plan.metric, plan.run, plan.family
    assert metric is not None

    def chunk_of(batch: list[int]) -> TextChunk:
        return TextChunk([pairs[i].reference for i in batch],
                         [pairs[i].candidate for i in batch], _images_of(metric, pairs, batch))

    stats: Any = None
    one_call = plan.corpus_dependent
    if plan.corpus_dependent and has_corpus_statistics(metric):
        one_call = False
        # The set's statistics once, over every scored pair (duplicates included, in input
        # order: what the one call sees), then every chunk is scored with them.
        got = engine.corpus_statistics(family, plan.options, chunk_of(list(scored_idx)))
        if got.error_kind is not None:
            _raise_chunk_error(family, pairs, list(scored_idx), got)
        stats = got.statistics
        run.seconds += got.seconds
        batches = list(_chunks(missing, batch_size))
    elif plan.corpus_dependent:
        # No hook: the whole scored set in one call, as in-process.
        batches = [list(scored_idx)]
    else:
        batches = list(_chunks(missing, batch_size))
    whole = len(batches) == 1 and len(batches[0]) == len(scored_idx)

    def on_result(j: int, res: ChunkResult) -> None:
        if res.error_kind is not None:
            _raise_chunk_error(family, pairs, batches[j], res)
        run.device = res.device
        record(batches[j], res.values, res.details, res.corpus, res.seconds,
               whole_set=whole, one_call=one_call)

    engine.score_chunks(family, plan.options, [chunk_of(b) for b in batches], corpus=stats,
                        on_result=on_result)


def _raise_chunk_error(family: str, pairs: list[PairLike], batch: list[int],
                       res: ChunkResult) -> None:
    """Raise what the in-process runner raises for the error an engine's chunk met."""
    kind, message = res.error_kind, res.error or ""
    if kind == "unavailable":
        raise MetricUnavailable(f"metric '{family}' is unavailable: {message}")
    if kind == "scoring":
        raise ScoringError(message)
    if kind == "input":
        raise MetricInputError(message)
    if kind == "load":
        raise MetricFailed(f"metric '{family}' could not load its model: {message}")
    if kind == "result":
        raise MetricFailed(f"metric '{family}' {message}")
    first = ", ".join(str(pairs[i].id) for i in batch[:3])
    more = f" and {len(batch) - 3} more" if len(batch) > 3 else ""
    raise MetricFailed(f"metric '{family}' failed on pairs {first}{more}: {message}")


def _call(
    metric: Metric, family: str, pairs: list[PairLike], batch: list[int]
) -> tuple[MetricResult, float]:
    refs = [pairs[i].reference for i in batch]
    cands = [pairs[i].candidate for i in batch]
    images = (
        [tuple(pairs[i].images) for i in batch]
        if getattr(metric.spec, "needs_image", False)
        else None
    )
    t0 = time.perf_counter()
    try:
        with inference_context():
            result = metric.score(references=refs, candidates=cands, images=images)
    except (MetricUnavailable, ScoringError):
        raise
    except Exception as exc:
        first = ", ".join(str(pairs[i].id) for i in batch[:3])
        more = f" and {len(batch) - 3} more" if len(batch) > 3 else ""
        raise MetricFailed(
            f"metric '{family}' failed on pairs {first}{more}: {type(exc).__name__}: {exc}"
        ) from exc
    seconds = time.perf_counter() - t0
    problem = result_problem(metric, result, len(batch))
    if problem is not None:
        raise MetricFailed(f"metric '{family}' {problem}")
    return result, seconds


def result_problem(metric: Metric, result: Any, n: int) -> str | None:  # noqa: ANN401
    """What is wrong with ``metric``'s answer for ``n`` pairs (``returned ...``), or ``None``:
    not a :class:`MetricResult`, a key with another number of values, a key of the spec
    missing. The one check of the in-process runner and of an engine's chunks."""
    if not isinstance(result, MetricResult):
        return f"returned {type(result).__name__}, not MetricResult"
    for k, vals in result.values.items():
        if len(vals) != n:
            return f"returned {len(vals)} values of '{k}' for {n} pairs"
    missing_keys = [k for k in metric.spec.keys if k not in result.values]
    if missing_keys:
        return f"returned no values for {', '.join(missing_keys)}"
    return None


def _as_float(value: Any, family: str, key: str) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise MetricFailed(
            f"metric '{family}' returned a non-number for '{key}': {value!r}"
        ) from None
