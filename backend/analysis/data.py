"""A study's ratings and metric scores as arrays: the types, and the rules that fill them.

The database is read by :mod:`backend.services.evaluation.study_data` (the one loader); this module
is
pure (no database, no sqlalchemy), so the analysis core takes arrays in and gives numbers out.

Which ratings count. A (rater, pair) enters the analysis when the rater's assignment for the
pair is completed, or when the rater has ratings for the pair and no assignment for it at
all (ratings imported from a ReXVal file without assignments). A pair that is assigned but not
completed is work in progress and is left out, so a half-entered pair never counts as a pair
with few errors. Inside a counted (rater, pair), a category/significance cell without a
Rating row is 0 (the rating form stores the cells a rater touched; completing a pair
confirms the rest are 0).

Raw or adjudicated counts. ``load_ratings(..., counts="adjudicated")`` keeps every rater's
counts as they are (so agreement between raters, per-rater and ceiling statistics stay raw)
and adds the adjudicators' consensus of each adjudicated pair (``Adjudication`` rows) as
``StudyRatings.consensus``: the per-pair mean every target uses (:meth:`StudyRatings.mean_errors`)
is the consensus there, as one value, whatever the raters said. ``counts="raw"`` (the default)
ignores adjudications.

Which scores count. Metric values come from ``MetricScore`` rows joined through
``Pair.input_hash == MetricScore.input_hash``. One key may have been scored with several
signatures (another model revision, another option); per key the signature covering the most
pairs of the study is used, ties going to the most recently written one, and the chosen
signature is recorded with the values. A ``NULL`` value is a pair where the metric is
undefined (NaN).

Metric directions come from the metric registry (:func:`backend.metrics.registry.higher_is_better`,
declared per key, no metric code imported); a stored key the registry does not know is an
error that names it, never a guess.

Imported scores (``import-scores``, :mod:`backend.services.scores.score_imports`). A key whose
values
were computed elsewhere is stored as ``MetricScore`` rows of family :data:`EXTERNAL_FAMILY`
under ``external:<key>|sha256:<file digest>``, and each import is a ``ScoreImport`` row of the
study. For such a key the study uses its latest import (not the coverage rule), with the
direction recorded by that import, and :attr:`MetricColumn.imported` says where the values
came from; rows of the study's older imports count in ``n_signatures`` only. Rows of family
``external`` that no import of *this* study names (another study imported a file for pairs
with the same content) never count here, and neither do computed rows of a key the study
imported (its import wins).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Container, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from radconcord.backend.metrics import registry

N_CATEGORIES = 6
TARGETS = ("total", "significant")
#: ``load_ratings(counts=...)``: the raters' own counts, or consensus where adjudicated.
COUNTS_MODES = ("raw", "adjudicated")
#: ``MetricScore.family`` of values imported from a file (computed elsewhere).
EXTERNAL_FAMILY = "external"

class AnalysisInputError(ValueError):
    """The requested analysis cannot run on this data (message names what is missing)."""


class StudyNotFound(AnalysisInputError):
    """No study has the given name."""


@dataclass(frozen=True)
class StudyRatings:
    """A study's pairs and the counted ratings, as arrays over pairs in position order.

    Attributes:
        study: Study name.
        study_id: Database id.
        pair_ids: ``(n,)`` pair ids.
        positions: ``(n,)`` pair positions.
        opaque_ids: Opaque pair ids (what raters see).
        sources: Candidate source of each pair.
        cases: External case id of each pair.
        input_hashes: Score-cache key of each pair.
        raters: Usernames, one per row of ``counts``.
        counts: ``(R, n, 6, 2)`` error counts, ``[..., 0]`` insignificant and ``[..., 1]``
            significant, category ``c`` at index ``c - 1``; NaN where the (rater, pair) does
            not count.
        counts_mode: ``"raw"`` or ``"adjudicated"`` (see the module docstring).
        consensus: ``(n, 6, 2)`` consensus counts of adjudicated pairs, NaN elsewhere;
            ``None`` for raw counts.
    """

    study: str
    study_id: int
    pair_ids: NDArray[np.int64]
    positions: NDArray[np.int64]
    opaque_ids: tuple[str, ...]
    sources: tuple[str, ...]
    cases: tuple[str, ...]
    input_hashes: tuple[str, ...]
    raters: tuple[str, ...]
    counts: NDArray[np.float64]
    counts_mode: str = "raw"
    consensus: NDArray[np.float64] | None = None
    #: ``(n,)`` raters planned per pair (its assignments); ``None`` when unknown (ratings
    #: built without assignments): then no pair counts as under-rated.
    planned: NDArray[np.int64] | None = None

    @property
    def n_adjudicated(self) -> int:
        """Pairs whose mean is the consensus (0 for raw counts)."""
        if self.consensus is None:
            return 0
        return int(np.isfinite(self.consensus[:, 0, 0]).sum())

    @property
    def n_pairs(self) -> int:
        """Pairs in the study (rated or not)."""
        return int(self.pair_ids.size)

    def rater_errors(self, target: str = "total", category: int | None = None) -> NDArray:
        """``(R, n)`` error counts per rater (NaN where not counted).

        Args:
            target: ``"total"`` (both significance levels) or ``"significant"``.
            category: 1-6 for one category, ``None`` for the sum over categories.
        """
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
        c = self.counts
        if category is not None:
            if not 1 <= category <= N_CATEGORIES:
                raise ValueError(f"category must be 1..{N_CATEGORIES}, got {category}")
            c = c[:, :, category - 1 : category, :]
        c = c[..., 1:] if target == "significant" else c
        return c.sum(axis=(2, 3))

    def mean_errors(self, target: str = "total", category: int | None = None) -> NDArray:
        """``(n,)`` mean over counted raters (NaN for a pair nobody counted).

        With adjudicated counts, an adjudicated pair's value is its consensus instead.

        Args:
            target: ``"total"`` or ``"significant"``.
            category: 1-6 or ``None`` for the sum over categories.
        """
        per_rater = self.rater_errors(target, category)
        rated = np.isfinite(per_rater)
        n_r = rated.sum(axis=0)
        total = np.where(rated, per_rater, 0.0).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n_r > 0, total / np.maximum(n_r, 1), np.nan)
        if self.consensus is None:
            return mean
        c = self.consensus
        if category is not None:
            c = c[:, category - 1 : category, :]
        c = c[..., 1:] if target == "significant" else c
        agreed = c.sum(axis=(1, 2))
        return np.where(np.isfinite(agreed), agreed, mean)

    def raters_per_pair(self) -> NDArray[np.int64]:
        """``(n,)`` number of counted raters of each pair."""
        return np.isfinite(self.counts[:, :, 0, 0]).sum(axis=0)

    def under_rated(self) -> NDArray[np.bool_]:
        """``(n,)`` rated pairs (at least one counted rater) with fewer counted raters than
        planned (:attr:`planned`); all False when the plan is unknown."""
        have = self.raters_per_pair()
        if self.planned is None:
            return np.zeros(have.shape, dtype=bool)
        return (have > 0) & (have < np.asarray(self.planned))

    def only_fully_rated(self) -> StudyRatings:
        """The same study with the under-rated pairs' ratings (and consensus) left out, so
        every analysis sees only the pairs rated by as many raters as planned."""
        drop = self.under_rated()
        counts = self.counts.copy()
        counts[:, drop] = np.nan
        consensus = None
        if self.consensus is not None:
            consensus = self.consensus.copy()
            consensus[drop] = np.nan
        return replace(self, counts=counts, consensus=consensus)


@dataclass(frozen=True)
class MetricColumn:
    """One metric key's values over the study's pairs.

    Attributes:
        key: Output key.
        family: Family recorded with the scores.
        values: ``(n,)`` raw values (not oriented), NaN where missing or undefined.
        signature: The chosen signature string.
        signature_hash: Its hash.
        higher_is_better: Direction of the key.
        n_signatures: How many signatures exist for this key on the study's pairs.
        imported: The import the values come from; ``None`` for a computed metric.
    """

    key: str
    family: str
    values: NDArray[np.float64]
    signature: str
    signature_hash: str
    higher_is_better: bool
    n_signatures: int
    imported: ScoreImportInfo | None = None

    @property
    def n(self) -> int:
        """Pairs with a finite value."""
        return int(np.isfinite(self.values).sum())


@dataclass(frozen=True)
class ScoreImportInfo:
    """One import of a key's values computed elsewhere (a ``score_imports`` row).

    Attributes:
        id: Row id.
        key: Output key.
        signature: ``external:<key>|sha256:<file digest>``.
        signature_hash: Its hash (as the runner computes it).
        higher_is_better: Direction given at import.
        description: What the metric is.
        source: Where the values come from (URL or text).
        file_name: The imported file's name.
        file_sha256: Its sha256.
        n_pairs: Study pairs with a value.
        n_missing: Study pairs without one (allowed with ``allow_missing``).
        imported_at: When.
        imported_by: Username of the admin (``system`` for the command line).
    """

    id: int
    key: str
    signature: str
    signature_hash: str
    higher_is_better: bool
    description: str
    source: str
    file_name: str
    file_sha256: str
    n_pairs: int
    n_missing: int
    imported_at: dt.datetime
    imported_by: str

    def as_json(self) -> dict[str, Any]:
        """The import as JSON-able values (``imported_at`` in ISO 8601 UTC)."""
        when = self.imported_at
        when = when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)
        return {"description": self.description, "source": self.source,
                "file_name": self.file_name, "file_sha256": self.file_sha256,
                "n_pairs": self.n_pairs, "n_missing": self.n_missing,
                "imported_at": when.isoformat(), "imported_by": self.imported_by,
                "signature": self.signature}


@dataclass(frozen=True)
class StudyImports:
    """A study's score imports, and which stored score rows they let count for it.

    Attributes:
        history: Every import, oldest first.
    """

    history: tuple[ScoreImportInfo, ...] = ()
    _latest: dict[str, ScoreImportInfo] = field(default_factory=dict, init=False, repr=False)
    _signatures: dict[str, frozenset[str]] = field(default_factory=dict, init=False,
                                                   repr=False)

    def __post_init__(self) -> None:
        signatures: dict[str, set[str]] = defaultdict(set)
        for imp in self.history:  # oldest first: the last one of a key is its latest
            self._latest[imp.key] = imp
            signatures[imp.key].add(imp.signature_hash)
        self._signatures.update({k: frozenset(v) for k, v in signatures.items()})

    @property
    def latest(self) -> dict[str, ScoreImportInfo]:
        """``key -> `` the latest import of each imported key."""
        return dict(self._latest)

    def counts(self, key: str, family: str, signature_hash: str) -> bool:
        """Whether a stored score row may count for this study.

        A computed row counts unless the study imported its key; an ``external`` row counts
        only under a signature one of the study's imports of that key wrote.
        """
        if key in self._signatures:
            return signature_hash in self._signatures[key]
        return family != EXTERNAL_FAMILY

    def chosen(self, key: str, present: Container[str]) -> ScoreImportInfo | None:
        """The import whose values the study reads for ``key``: its newest import whose
        signature hash is in ``present`` (the signatures with rows); ``None`` when the study
        imported no values of ``key`` (a computed key: the coverage rule picks)."""
        if key not in self._signatures:
            return None
        return next((imp for imp in reversed(self.history)
                     if imp.key == key and imp.signature_hash in present), None)

    def direction(self, key: str, family: str | None = None) -> bool:
        """``higher_is_better`` of ``key``: the latest import's, else the registry's.

        Raises:
            AnalysisInputError: neither an imported nor a registered key.
        """
        imp = self._latest.get(key)
        return imp.higher_is_better if imp is not None else metric_direction(key, family)


def metric_direction(key: str, family: str | None = None) -> bool:
    """``higher_is_better`` of an output key, from the metric registry.

    Args:
        key: Output key (``bleu4``, ``radcliq_v1``, ...).
        family: The family recorded on the score rows, named in the error only (the key
            alone decides: a key belongs to one family).

    Raises:
        AnalysisInputError: for a key the registry does not know.
    """
    try:
        return registry.higher_is_better(key)
    except registry.UnknownMetric:
        recorded = f" (scored as family '{family}')" if family else ""
        raise AnalysisInputError(
            f"metric key '{key}'{recorded} is not in the metric registry, so its direction"
            " is unknown; known keys: see `python -m backend metrics`"
        ) from None


def expand_metric_names(names: Iterable[str]) -> list[str]:
    """Expand family names to their keys; other names are taken as keys (order kept).

    Args:
        names: Family names or output keys; comma-separated items are split.
    """
    from radconcord.backend.metrics import registry

    out: list[str] = []
    for raw in names:
        for name in (part.strip() for part in raw.split(",")):
            if not name:
                continue
            keys = registry.ENTRIES[name].keys if name in registry.ENTRIES else (name,)
            out.extend(k for k in keys if k not in out)
    return out


def key_order(key: str) -> tuple[int, str]:
    """Sort key of an output key: the registry's order, unknown keys last by name."""
    from radconcord.backend.metrics import registry

    order = {k: i for i, k in enumerate(registry.KEY_TO_FAMILY)}
    return (order.get(key, len(order)), key)
