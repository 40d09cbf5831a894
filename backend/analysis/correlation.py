"""The typed result of ``correlate``: options in, :class:`CorrelationReport` out (pure).

:func:`backend.analysis.report.correlate` fills these dataclasses from arrays;
:meth:`CorrelationReport.to_json` gives the ``correlate`` JSON (the layout in
:mod:`backend.analysis.report`), key for key and byte for byte what ``radconcord correlate``
has always written. Readers (the dashboard, the HTML report, the figures) use the typed
fields; the sections that are tables of their own (agreement, failure modes, refit, ceiling,
paired tests, systems) are kept as their JSON-safe mappings.

JSON key ``paired_tests`` (the paired comparison of every two metrics, formerly ``pairwise``):
:meth:`CorrelationReport.to_json` writes the section under ``paired_tests`` and, for one
release, the same section again under the old key ``pairwise``, so readers of older files and
older readers of new files both work. ``pairwise`` will be dropped in the next release; read
``paired_tests``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from radconcord.backend.analysis.bootstrap import DEFAULT_LEVEL
from radconcord.backend.analysis.ceiling import UNITS
from radconcord.backend.analysis.data import AnalysisInputError
from radconcord.backend.analysis.failure_modes import DEFAULT_FDR
from radconcord.backend.analysis.paired_tests import CORRECTIONS
from radconcord.backend.analysis.stats import to_json_safe
from radconcord.backend.analysis.systems import DEFAULT_PERMUTATIONS

#: How the main sections resample: pairs, or cases with all their pairs.
CLUSTERS = ("pair", "case")
#: The JSON key of the paired metric tests, and its alias kept for one release.
PAIRED_TESTS_KEY = "paired_tests"
PAIRED_TESTS_ALIAS = "pairwise"

Interval = tuple[float | None, float | None]


@dataclass(frozen=True)
class CorrelationOptions:
    """The settings of one ``correlate`` run (the CLI's flags).

    Attributes:
        significant_only: Target the clinically significant errors instead of all errors.
        bootstrap: Resamples for the percentile intervals (0: no intervals).
        seed: Seed of the resampling and of the refit's folds.
        cluster: ``"pair"`` resamples pairs; ``"case"`` resamples cases with all their pairs.
        level: Interval coverage.
        fdr: False discovery rate of the failure-mode tests.
        unit: Resampling unit of the ceiling and the paired tests (``"pair"``, ``"case"``
            or ``"rater_pair"``); ``None`` takes ``cluster``.
        correction: Multiple-comparison correction over the paired matrix (``"holm"``,
            ``"bh"``).
        permutations: Permutations of the systems section's randomization tests.
        fully_rated_only: Correlate only the pairs rated by as many raters as planned (the
            report's ``coverage`` says how many were left out).
    """

    significant_only: bool = False
    bootstrap: int = 1000
    seed: int = 0
    cluster: str = "pair"
    level: float = DEFAULT_LEVEL
    fdr: float = DEFAULT_FDR
    unit: str | None = None
    correction: str = "holm"
    permutations: int = DEFAULT_PERMUTATIONS
    #: Leave out the pairs rated by fewer raters than planned (``StudyRatings.planned``).
    fully_rated_only: bool = False

    @property
    def target(self) -> str:
        """``"significant"`` or ``"total"``."""
        return "significant" if self.significant_only else "total"

    @property
    def resolved_unit(self) -> str:
        """The unit of the ceiling and the paired tests (``cluster`` when not given)."""
        return self.cluster if self.unit is None else self.unit

    def validate(self) -> None:
        """Raise :class:`AnalysisInputError` naming the first bad setting."""
        if self.cluster not in CLUSTERS:
            raise AnalysisInputError(f"cluster must be one of {CLUSTERS}, got '{self.cluster}'")
        if self.resolved_unit not in UNITS:
            raise AnalysisInputError(f"unit must be one of {UNITS}, got '{self.resolved_unit}'")
        if self.correction not in CORRECTIONS:
            raise AnalysisInputError(
                f"correction must be one of {CORRECTIONS}, got '{self.correction}'")
        if self.permutations < 1:
            raise AnalysisInputError(f"permutations must be >= 1, got {self.permutations}")
        if self.bootstrap < 0:
            raise AnalysisInputError(f"bootstrap must be >= 0, got {self.bootstrap}")


@dataclass(frozen=True)
class CorrelationEntry:
    """One metric against one target: tau-b and Spearman with percentile intervals."""

    kendall_tau_b: float | None
    kendall_ci95: Interval
    spearman: float | None
    spearman_ci95: Interval
    n: int

    def to_json(self) -> dict[str, Any]:
        """The entry as in ``per_category``/``per_rater``/``per_source``."""
        return {"kendall_tau_b": self.kendall_tau_b, "kendall_ci95": list(self.kendall_ci95),
                "spearman": self.spearman, "spearman_ci95": list(self.spearman_ci95),
                "n": self.n}


@dataclass(frozen=True)
class MetricEntry:
    """One metric key of the ``metrics`` section.

    Attributes:
        key: Output key.
        kendall_tau_b, kendall_ci95, spearman, spearman_ci95, n: Against the target.
        higher_is_better: The key's direction (lower-is-better keys were negated).
        signature, signature_hash, family: Of the scores used.
        n_signatures: Signatures stored for the key on the study's pairs.
        n_degenerate_resamples: Resamples where the correlation was undefined.
        imported: Where imported values came from (``ScoreImportInfo.as_json``); ``None``
            for a metric computed here.
        pct_of_ceiling: ``tau / ceiling tau`` (negative when the metric ranks against the
            raters); ``None`` without a positive ceiling.
    """

    key: str
    kendall_tau_b: float | None
    kendall_ci95: Interval
    spearman: float | None
    spearman_ci95: Interval
    higher_is_better: bool
    signature: str
    signature_hash: str
    family: str
    n: int
    n_signatures: int
    n_degenerate_resamples: int
    imported: dict[str, Any] | None = None
    pct_of_ceiling: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as in the JSON's ``metrics`` section."""
        return {"kendall_tau_b": self.kendall_tau_b, "kendall_ci95": list(self.kendall_ci95),
                "spearman": self.spearman, "spearman_ci95": list(self.spearman_ci95),
                "higher_is_better": self.higher_is_better, "signature": self.signature,
                "signature_hash": self.signature_hash, "family": self.family, "n": self.n,
                "n_signatures": self.n_signatures,
                "n_degenerate_resamples": self.n_degenerate_resamples,
                "imported": self.imported, "pct_of_ceiling": self.pct_of_ceiling}


def _pair(value: Any) -> Interval:  # noqa: ANN401 - [lo, hi] or None
    lo, hi = (list(value or ()) + [None, None])[:2]
    return (lo, hi)


def _entries_json(entries: Mapping[str, CorrelationEntry]) -> dict[str, Any]:
    return {key: e.to_json() for key, e in entries.items()}


@dataclass(frozen=True)
class CategorySection:
    """One ReXVal error category: its name, mean errors and every metric against it."""

    name: str
    mean_errors: float | None
    metrics: dict[str, CorrelationEntry]

    def to_json(self) -> dict[str, Any]:
        """As in ``per_category``."""
        return {"name": self.name, "mean_errors": self.mean_errors,
                "metrics": _entries_json(self.metrics)}


@dataclass(frozen=True)
class RaterSection:
    """One rater's pairs: every metric against the rater's own counts."""

    n_pairs: int
    mean_errors: float | None
    kendall_vs_other_raters: float | None
    n_shared_pairs: int
    metrics: dict[str, CorrelationEntry]

    def to_json(self) -> dict[str, Any]:
        """As in ``per_rater``."""
        return {"n_pairs": self.n_pairs, "mean_errors": self.mean_errors,
                "kendall_vs_other_raters": self.kendall_vs_other_raters,
                "n_shared_pairs": self.n_shared_pairs, "metrics": _entries_json(self.metrics)}


@dataclass(frozen=True)
class SourceSection:
    """One candidate source's pairs: every metric against the target there."""

    n_pairs: int
    mean_errors: float | None
    metrics: dict[str, CorrelationEntry]

    def to_json(self) -> dict[str, Any]:
        """As in ``per_source``."""
        return {"n_pairs": self.n_pairs, "mean_errors": self.mean_errors,
                "metrics": _entries_json(self.metrics)}


@dataclass(frozen=True)
class PublishedEntry:
    """A published Kendall tau-b on ReXVal and ours for the closest key (if scored)."""

    paper: str
    metric: str
    key: str | None
    kendall_tau_b: float
    ours: float | None

    def to_json(self) -> dict[str, Any]:
        """As in ``published.entries``."""
        return {"paper": self.paper, "metric": self.metric, "key": self.key,
                "kendall_tau_b": self.kendall_tau_b, "ours": self.ours}


@dataclass(frozen=True)
class PublishedSection:
    """The published values beside ours."""

    dataset: str
    note: str
    entries: tuple[PublishedEntry, ...]

    def for_key(self, key: str) -> tuple[tuple[str, float], ...]:
        """``(paper, tau)`` of every published value whose closest key is ``key``."""
        return tuple((e.paper, e.kendall_tau_b) for e in self.entries if e.key == key)

    def to_json(self) -> dict[str, Any]:
        """As in ``published``."""
        return {"dataset": self.dataset, "note": self.note,
                "entries": [e.to_json() for e in self.entries]}


@dataclass(frozen=True)
class CorrelationReport:
    """Every agreement statistic of one study (the ``correlate`` JSON, typed).

    Attributes mirror the JSON's top-level keys (:mod:`backend.analysis.report`), with
    ``paired_tests`` the section formerly called ``pairwise``. ``agreement``,
    ``failure_modes``, ``radcliq_refit``, ``ceiling``, ``paired_tests`` and ``systems`` are
    JSON-safe mappings (``ceiling`` is ``None`` below 3 raters).
    """

    study: str
    target: str
    n_pairs: int
    n_pairs_in_study: int
    n_raters: int
    counts: str
    n_adjudicated: int
    seed: int
    resamples: int
    cluster: str
    level: float
    metrics: dict[str, MetricEntry]
    per_category: dict[str, CategorySection]
    per_rater: dict[str, RaterSection]
    per_source: dict[str, SourceSection]
    agreement: dict[str, Any]
    failure_modes: dict[str, Any]
    radcliq_refit: dict[str, Any]
    published: PublishedSection
    unit: str
    correction: str
    ceiling: dict[str, Any] | None
    paired_tests: dict[str, Any]
    systems: dict[str, Any]
    #: ``{"fully_rated_only", "n_pairs_under_rated", "n_pairs_left_out"}``: rated pairs with
    #: fewer raters than planned, and how many the option left out (0 when off).
    coverage: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CorrelationReport:
        """The typed report of a ``correlate`` JSON (a saved file, older output).

        Missing sections become empty; ``paired_tests`` is read from its old key
        ``pairwise`` when the new one is absent.
        """
        def entry(e: Mapping[str, Any]) -> CorrelationEntry:
            return CorrelationEntry(
                kendall_tau_b=e.get("kendall_tau_b"), kendall_ci95=_pair(e.get("kendall_ci95")),
                spearman=e.get("spearman"), spearman_ci95=_pair(e.get("spearman_ci95")),
                n=int(e.get("n") or 0))

        def entries(section: Mapping[str, Any]) -> dict[str, CorrelationEntry]:
            return {k: entry(e) for k, e in (section.get("metrics") or {}).items()}

        metrics = {
            k: MetricEntry(
                key=k, kendall_tau_b=m.get("kendall_tau_b"),
                kendall_ci95=_pair(m.get("kendall_ci95")), spearman=m.get("spearman"),
                spearman_ci95=_pair(m.get("spearman_ci95")),
                higher_is_better=bool(m.get("higher_is_better", True)),
                signature=str(m.get("signature") or ""),
                signature_hash=str(m.get("signature_hash") or ""),
                family=str(m.get("family") or ""), n=int(m.get("n") or 0),
                n_signatures=int(m.get("n_signatures") or 0),
                n_degenerate_resamples=int(m.get("n_degenerate_resamples") or 0),
                imported=m.get("imported"), pct_of_ceiling=m.get("pct_of_ceiling"))
            for k, m in (data.get("metrics") or {}).items()
        }
        pub = data.get("published") or {}
        published = PublishedSection(
            dataset=str(pub.get("dataset") or ""), note=str(pub.get("note") or ""),
            entries=tuple(PublishedEntry(paper=e["paper"], metric=e["metric"], key=e.get("key"),
                                         kendall_tau_b=e["kendall_tau_b"], ours=e.get("ours"))
                          for e in pub.get("entries") or ()))
        return cls(
            study=str(data.get("study") or ""), target=str(data.get("target") or "total"),
            n_pairs=int(data.get("n_pairs") or 0),
            n_pairs_in_study=int(data.get("n_pairs_in_study") or 0),
            n_raters=int(data.get("n_raters") or 0), counts=str(data.get("counts") or "raw"),
            n_adjudicated=int(data.get("n_adjudicated") or 0), seed=int(data.get("seed") or 0),
            resamples=int(data.get("resamples") or 0),
            cluster=str(data.get("cluster") or "pair"), level=float(data.get("level") or 0.95),
            metrics=metrics,
            per_category={k: CategorySection(name=str(c.get("name") or k),
                                             mean_errors=c.get("mean_errors"),
                                             metrics=entries(c))
                          for k, c in (data.get("per_category") or {}).items()},
            per_rater={k: RaterSection(n_pairs=int(r.get("n_pairs") or 0),
                                       mean_errors=r.get("mean_errors"),
                                       kendall_vs_other_raters=r.get("kendall_vs_other_raters"),
                                       n_shared_pairs=int(r.get("n_shared_pairs") or 0),
                                       metrics=entries(r))
                       for k, r in (data.get("per_rater") or {}).items()},
            per_source={k: SourceSection(n_pairs=int(r.get("n_pairs") or 0),
                                         mean_errors=r.get("mean_errors"), metrics=entries(r))
                        for k, r in (data.get("per_source") or {}).items()},
            agreement=dict(data.get("agreement") or {}),
            failure_modes=dict(data.get("failure_modes") or {}),
            radcliq_refit=dict(data.get("radcliq_refit") or {}), published=published,
            unit=str(data.get("unit") or data.get("cluster") or "pair"),
            correction=str(data.get("correction") or "holm"), ceiling=data.get("ceiling"),
            paired_tests=dict(data.get(PAIRED_TESTS_KEY) or data.get(PAIRED_TESTS_ALIAS) or {}),
            systems=dict(data.get("systems") or {}),
            coverage=data.get("coverage"),
        )

    @property
    def ceiling_tau(self) -> float | None:
        """The human ceiling's tau-b (``None`` without a ceiling)."""
        return None if self.ceiling is None else self.ceiling.get("kendall_tau_b")

    def to_json(self) -> dict[str, Any]:
        """The ``correlate`` JSON: today's layout and key order, NaN as ``None``.

        The paired tests are written under ``paired_tests`` and under the alias
        ``pairwise`` (one release; see the module docstring).
        """
        out = {
            "study": self.study, "target": self.target, "n_pairs": self.n_pairs,
            "n_pairs_in_study": self.n_pairs_in_study, "n_raters": self.n_raters,
            "counts": self.counts, "n_adjudicated": self.n_adjudicated, "seed": self.seed,
            "resamples": self.resamples, "cluster": self.cluster, "level": self.level,
            "metrics": {k: m.to_json() for k, m in self.metrics.items()},
            "per_category": {k: c.to_json() for k, c in self.per_category.items()},
            "per_rater": {k: r.to_json() for k, r in self.per_rater.items()},
            "per_source": {k: s.to_json() for k, s in self.per_source.items()},
            "agreement": self.agreement, "failure_modes": self.failure_modes,
            "radcliq_refit": self.radcliq_refit, "published": self.published.to_json(),
            "unit": self.unit, "correction": self.correction, "ceiling": self.ceiling,
            PAIRED_TESTS_KEY: self.paired_tests,
            # The old key, the same section, for one release (see the module docstring).
            PAIRED_TESTS_ALIAS: self.paired_tests,
            "systems": self.systems,
            "coverage": self.coverage,
        }
        return to_json_safe(out)
