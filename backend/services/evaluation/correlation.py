"""Analysis services for the dashboard: correlations, inter-rater agreement, failure modes.

Admin only (raters never see metric scores, sources or other raters' answers). Each function
returns frozen dataclasses of plain values; the full typed ``correlate`` report
(:class:`backend.analysis.correlation.CorrelationReport`) is kept in
``StudyCorrelation.result`` (its JSON in ``.report``) for the panels that need the other sections.

Every correlation of a study goes through :func:`study_report`: the one loader
(:mod:`backend.services.evaluation.study_data`) reads the study, the pure core
(:func:`backend.analysis.report.correlate`) computes. :func:`correlate_study` is its JSON
(what ``radconcord correlate`` writes), without the admin check (the CLI and the Python API
run as the system).

Raw or adjudicated counts: ``counts="raw"`` (default) correlates with the raters' mean per
pair; ``counts="adjudicated"`` uses the adjudicators' consensus on adjudicated pairs instead
(:func:`backend.services.evaluation.study_data.load_ratings`). Results say which (``counts``,
``n_adjudicated``). Agreement between raters is always computed on their own (raw) counts,
and :class:`StudyAgreement` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from radconcord.backend.analysis.bootstrap import DEFAULT_LEVEL
from radconcord.backend.analysis.correlation import CorrelationOptions, CorrelationReport
from radconcord.backend.analysis.data import AnalysisInputError, StudyNotFound
from radconcord.backend.analysis.failure_modes import DEFAULT_FDR
from radconcord.backend.analysis.systems import DEFAULT_PERMUTATIONS
from radconcord.backend.errors import InvalidInput, NotFound, require_admin
from radconcord.backend.types import Actor
from radconcord.db.session import Database


@dataclass(frozen=True)
class MetricCorrelation:
    """One metric key against the radiologists (positive = agreement).

    Attributes:
        key: Output key.
        higher_is_better: The key's direction (lower-is-better keys were negated).
        kendall_tau_b: Kendall tau-b.
        kendall_lo: Lower end of the percentile interval (None without bootstrap).
        kendall_hi: Upper end.
        spearman: Spearman's rho.
        spearman_lo: Lower end.
        spearman_hi: Upper end.
        n: Pairs used.
        signature: Signature of the scores used.
        published: Published tau values for this key as ``(paper, value)``.
        pct_of_ceiling: ``tau / ceiling tau`` (a fraction); None without a ceiling.
        imported: Where the values came from when they were imported from a file
            (``import-scores``: description, source, file, ...); None when computed here.
    """

    key: str
    higher_is_better: bool
    kendall_tau_b: float | None
    kendall_lo: float | None
    kendall_hi: float | None
    spearman: float | None
    spearman_lo: float | None
    spearman_hi: float | None
    n: int
    signature: str
    published: tuple[tuple[str, float], ...] = ()
    pct_of_ceiling: float | None = None
    imported: dict[str, Any] | None = None


@dataclass(frozen=True)
class StudyCorrelation:
    """Result of :func:`study_correlation`.

    Attributes:
        study: Study name.
        target: ``"total"`` or ``"significant"``.
        n_pairs: Rated pairs used.
        seed: Bootstrap seed.
        resamples: Bootstrap resamples.
        metrics: One row per key, best Kendall tau first.
        report: The ``correlate`` JSON (per category, rater, source, ceiling, paired tests,
            systems, ...); :attr:`result` is the same report typed, which pages read.
        counts: ``"raw"`` or ``"adjudicated"``: which per-pair values were correlated.
        n_adjudicated: Pairs whose value is an adjudicated consensus (0 for raw).
    """

    study: str
    target: str
    n_pairs: int
    seed: int
    resamples: int
    metrics: tuple[MetricCorrelation, ...]
    report: dict[str, Any]
    counts: str = "raw"
    n_adjudicated: int = 0
    #: Whether the published values (ReXVal) compare like with like: the study was imported
    #: from ReXVal (``Study.provenance["kind"] == "rexval"``), the dataset the papers used.
    published_applies: bool = False

    @cached_property
    def result(self) -> CorrelationReport:
        """The typed report (what pages read), from :attr:`report`."""
        return CorrelationReport.from_json(self.report)


@dataclass(frozen=True)
class AgreementRow:
    """Inter-rater agreement for the total or one category.

    Attributes:
        scope: ``"total"`` or the category number as a string.
        alpha_interval: Krippendorff's alpha, interval metric.
        alpha_ratio: Krippendorff's alpha, ratio metric.
        icc2_1: ICC(2,1) on the largest complete block (None when there is none).
        icc2_k: ICC(2,k) on that block.
        icc_k: Raters in the block.
        icc_n_pairs: Pairs in the block.
        n_pairs_pairable: Pairs with at least two raters.
        icc2_1_ci95: Percentile bootstrap interval of ICC(2,1) over the block's pairs
            (``(None, None)`` without one).
        icc2_k_ci95: The same for ICC(2,k).
    """

    scope: str
    alpha_interval: float | None
    alpha_ratio: float | None
    icc2_1: float | None
    icc2_k: float | None
    icc_k: int | None
    icc_n_pairs: int | None
    n_pairs_pairable: int
    icc2_1_ci95: tuple[float | None, float | None] = (None, None)
    icc2_k_ci95: tuple[float | None, float | None] = (None, None)


@dataclass(frozen=True)
class StudyAgreement:
    """Result of :func:`study_agreement`.

    Attributes:
        study: Study name.
        target: ``"total"`` or ``"significant"``.
        raters: Usernames of the counted raters.
        rows: Total first, then categories 1-6.
        counts: Always ``"raw"``: agreement between raters is about their own counts, even
            when the rest of the analysis uses adjudicated values.
        n_adjudicated: Adjudicated pairs of the study (not used here; for the page to say).
    """

    study: str
    target: str
    raters: tuple[str, ...]
    rows: tuple[AgreementRow, ...]
    counts: str = "raw"
    n_adjudicated: int = 0


@dataclass(frozen=True)
class SourceTest:
    """One one-sided test ``mean(greater) > mean(less)`` for one category.

    Attributes:
        category: ``"1"``..``"6"`` or ``"total"``.
        greater: Source tested for more errors.
        less: Source compared with.
        mean_greater: Mean errors of ``greater``.
        mean_less: Mean errors of ``less``.
        t: Welch t statistic.
        p: One-sided p-value.
        p_adjusted: Benjamini-Hochberg adjusted p-value.
        reject: Whether the difference is a discovery at the chosen FDR.
    """

    category: str
    greater: str
    less: str
    mean_greater: float | None
    mean_less: float | None
    t: float | None
    p: float | None
    p_adjusted: float | None
    reject: bool


@dataclass(frozen=True)
class FailureModes:
    """Result of :func:`study_failure_modes`.

    Attributes:
        study: Study name.
        target: ``"total"`` or ``"significant"``.
        fdr: False discovery rate used.
        sources: Candidate sources.
        means: ``source -> ((category, mean), ...)`` including ``"total"`` and ``"n"``.
        tests: All tests of the family.
        counts: ``"raw"`` or ``"adjudicated"``: which per-pair values were compared.
        n_adjudicated: Pairs whose value is an adjudicated consensus (0 for raw).
    """

    study: str
    target: str
    fdr: float
    sources: tuple[str, ...]
    means: dict[str, tuple[tuple[str, float | None], ...]]
    tests: tuple[SourceTest, ...]
    counts: str = "raw"
    n_adjudicated: int = 0


def _run(fn: Any, /, **kwargs: Any) -> dict[str, Any]:  # noqa: ANN401
    """Call an analysis function, mapping its errors to service errors."""
    try:
        return fn(**kwargs)
    except StudyNotFound as exc:
        raise NotFound(str(exc)) from exc
    except AnalysisInputError as exc:
        raise InvalidInput(str(exc)) from exc


def study_correlation(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    significant_only: bool = False,
    resamples: int = 1000,
    seed: int = 0,
    metrics: Sequence[str] | None = None,
    cluster: str = "pair",
    unit: str | None = None,
    correction: str = "holm",
    counts: str = "raw",
    fully_rated_only: bool = False,
) -> StudyCorrelation:
    """Correlations of every scored metric with the study's radiologists (admin only).

    The report carries the ``ceiling``, ``pairwise`` and ``systems`` sections and each
    metric's ``pct_of_ceiling`` (see backend/analysis/report.py).

    Args:
        db: The database.
        actor: Who asks; must be an admin.
        study_name: Study name.
        significant_only: Target significant errors only.
        resamples: Bootstrap resamples (0: no intervals).
        seed: Bootstrap seed.
        metrics: Keys or families; ``None`` for every scored key.
        cluster: ``"pair"`` or ``"case"`` resampling.
        unit: Resampling unit of the ceiling and pairwise sections (``"pair"``, ``"case"``,
            ``"rater_pair"``); ``None`` takes ``cluster``.
        correction: ``"holm"`` or ``"bh"`` over the pairwise matrix.
        counts: ``"raw"`` or ``"adjudicated"`` (see the module docstring).
        fully_rated_only: Only the pairs rated by as many raters as planned (the report's
            ``coverage`` counts the others).

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: nothing to correlate, or an unknown ``counts``.
    """
    require_admin(actor)
    _check_counts(counts)
    report = _run(
        study_report, db=db, study_name=study_name, metrics=metrics,
        options=CorrelationOptions(significant_only=significant_only, bootstrap=resamples,
                                   seed=seed, cluster=cluster, unit=unit,
                                   correction=correction, fully_rated_only=fully_rated_only),
        counts=counts,
    )
    rows = [
        MetricCorrelation(
            key=key,
            higher_is_better=m.higher_is_better,
            kendall_tau_b=m.kendall_tau_b,
            kendall_lo=m.kendall_ci95[0],
            kendall_hi=m.kendall_ci95[1],
            spearman=m.spearman,
            spearman_lo=m.spearman_ci95[0],
            spearman_hi=m.spearman_ci95[1],
            n=m.n,
            signature=m.signature,
            published=report.published.for_key(key),
            pct_of_ceiling=m.pct_of_ceiling,
            imported=m.imported,
        )
        for key, m in report.metrics.items()
    ]
    rows.sort(key=lambda r: -(r.kendall_tau_b if r.kendall_tau_b is not None else -2.0))
    return StudyCorrelation(
        study=report.study, target=report.target, n_pairs=report.n_pairs,
        seed=report.seed, resamples=report.resamples, metrics=tuple(rows), report=report.to_json(),
        counts=report.counts, n_adjudicated=report.n_adjudicated,
        published_applies=published_applies(db, study_name),
    )


def published_applies(db: Database, study_name: str) -> bool:
    """Whether the study is the dataset the published values were measured on: imported
    from ReXVal (``Study.provenance["kind"] == "rexval"``). A demo or an own study is not,
    and comparing its tau with a paper's would compare two datasets, not two metrics."""
    from sqlalchemy import select

    from radconcord.db.models import Study

    with db.read() as s:
        provenance = s.scalar(select(Study.provenance).where(Study.name == study_name))
    return isinstance(provenance, dict) and provenance.get("kind") == "rexval"


def study_report(
    db: Database,
    *,
    study_name: str,
    metrics: Sequence[str] | None = None,
    options: CorrelationOptions | None = None,
    counts: str = "raw",
    progress: Callable[[int, int, str], None] | None = None,
) -> CorrelationReport:
    """Load a study (the one loader) and correlate it (the core): the typed report.

    No admin check: callers check (:func:`study_correlation`) or run as the system (the
    CLI, the Python API, the report job through :func:`study_correlation`).

    Args:
        db: The database.
        study_name: Study name.
        metrics: Output keys or family names; ``None`` takes every key scored on the study.
        options: The settings (:class:`CorrelationOptions`; default its defaults).
        counts: ``"raw"`` or ``"adjudicated"`` (see the module docstring).
        progress: ``progress(done, total, section)`` as each section is finished.

    Raises:
        StudyNotFound: unknown study.
        AnalysisInputError: bad option, no scores, fewer than 2 rated pairs.
    """
    from radconcord.backend.analysis.report import correlate
    from radconcord.backend.services.evaluation.study_data import load_study

    options = options or CorrelationOptions()
    options.validate()
    data = load_study(db, study_name, metrics=metrics, counts=counts)
    return correlate(data.ratings, data.scores, options, refit_inputs=data.refit_inputs,
                     progress=progress)


def correlate_study(
    db: Database,
    *,
    study_name: str,
    metrics: Sequence[str] | None = None,
    significant_only: bool = False,
    bootstrap: int = 1000,
    seed: int = 0,
    cluster: str = "pair",
    level: float = DEFAULT_LEVEL,
    fdr: float = DEFAULT_FDR,
    unit: str | None = None,
    correction: str = "holm",
    permutations: int = DEFAULT_PERMUTATIONS,
    progress: Callable[[int, int, str], None] | None = None,
    counts: str = "raw",
) -> dict[str, Any]:
    """The ``correlate`` JSON of a study (what ``radconcord correlate --output`` writes).

    :func:`study_report` with the options as keywords, as ``report.to_json()``; the layout is
    :mod:`backend.analysis.report`'s docstring.

    Args:
        db: The database.
        study_name: Study name.
        metrics: Output keys or family names; ``None`` takes every key scored on the study.
        significant_only: Target the clinically significant errors.
        bootstrap: Resamples for the intervals (0: none).
        seed: Seed of the resampling and of the refit's folds.
        cluster: ``"pair"`` or ``"case"`` resampling.
        level: Interval coverage.
        fdr: False discovery rate of the failure-mode tests.
        unit: Resampling unit of the ceiling and the paired tests; ``None``: ``cluster``.
        correction: ``"holm"`` or ``"bh"`` over the paired matrix.
        permutations: Permutations of the systems section's tests.
        progress: ``progress(done, total, section)`` as each section is finished.
        counts: ``"raw"`` or ``"adjudicated"``.

    Raises:
        StudyNotFound: unknown study.
        AnalysisInputError: bad option, no scores, fewer than 2 rated pairs.
    """
    options = CorrelationOptions(
        significant_only=significant_only, bootstrap=bootstrap, seed=seed, cluster=cluster,
        level=level, fdr=fdr, unit=unit, correction=correction, permutations=permutations)
    return study_report(db, study_name=study_name, metrics=metrics, options=options,
                        counts=counts, progress=progress).to_json()


def _check_counts(counts: str) -> None:
    from radconcord.backend.analysis.data import COUNTS_MODES

    if counts not in COUNTS_MODES:
        raise InvalidInput(f"counts must be one of {', '.join(COUNTS_MODES)}, got {counts!r}")


def _agreement(db: Database, study_name: str, target: str, *, resamples: int = 1000,
               seed: int = 0) -> dict[str, Any]:
    from radconcord.backend.analysis.agreement import agreement_summary, icc_interval
    from radconcord.backend.analysis.data import N_CATEGORIES
    from radconcord.backend.analysis.stats import to_json_safe
    from radconcord.backend.services.evaluation.study_data import load_ratings

    def compute(study_name: str) -> dict[str, Any]:
        # Adjudicated loading only to count the adjudicated pairs: rater_errors stay raw.
        ratings = load_ratings(db, study_name, counts="adjudicated")
        scopes = {"total": ratings.rater_errors(target)}
        for c in range(1, N_CATEGORIES + 1):
            scopes[str(c)] = ratings.rater_errors(target, c)
        out = {scope: agreement_summary(errors) for scope, errors in scopes.items()}
        # The ICC bars' intervals: the block's pairs resampled (seed 0, 1000 resamples).
        intervals = {scope: icc_interval(errors, resamples=resamples, seed=seed)
                     for scope, errors in scopes.items()}
        return {"raters": list(ratings.raters), "rows": to_json_safe(out),
                "intervals": to_json_safe(intervals),
                "n_adjudicated": ratings.n_adjudicated}

    return _run(compute, study_name=study_name)


def study_agreement(
    db: Database, actor: Actor, *, study_name: str, significant_only: bool = False,
    counts: str = "raw",
) -> StudyAgreement:
    """Krippendorff's alpha and ICC(2,1)/(2,k) of the raters' error counts (admin only).

    Args:
        db: The database.
        actor: Who asks; must be an admin.
        study_name: Study name.
        significant_only: Use significant errors only.
        counts: Accepted for symmetry with the other analyses and checked, but agreement is
            always between the raters' own counts (the result's ``counts`` is ``"raw"``).

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: an unknown ``counts``.
    """
    require_admin(actor)
    _check_counts(counts)
    target = "significant" if significant_only else "total"
    data = _agreement(db, study_name, target)
    rows = tuple(
        AgreementRow(
            scope=scope,
            alpha_interval=v["krippendorff_alpha_interval"],
            alpha_ratio=v["krippendorff_alpha_ratio"],
            icc2_1=v["icc2_1"],
            icc2_k=v["icc2_k"],
            icc_k=v["icc_k"],
            icc_n_pairs=v["icc_n_pairs"],
            n_pairs_pairable=v["n_pairs_pairable"],
            icc2_1_ci95=tuple(data["intervals"][scope]["icc2_1_ci95"]),
            icc2_k_ci95=tuple(data["intervals"][scope]["icc2_k_ci95"]),
        )
        for scope, v in data["rows"].items()
    )
    return StudyAgreement(study=study_name, target=target, raters=tuple(data["raters"]),
                          rows=rows, counts="raw", n_adjudicated=int(data["n_adjudicated"]))


def study_failure_modes(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    significant_only: bool = False,
    fdr: float = 0.05,
    counts: str = "raw",
) -> FailureModes:
    """Mean errors per category by source, one-sided Welch t-tests, BH at ``fdr`` (admin).

    Args:
        db: The database.
        actor: Who asks; must be an admin.
        study_name: Study name.
        significant_only: Use significant errors only.
        fdr: False discovery rate.
        counts: ``"raw"`` or ``"adjudicated"`` (see the module docstring).

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: ``fdr`` outside (0, 1), or an unknown ``counts``.
    """
    from radconcord.backend.analysis.data import N_CATEGORIES
    from radconcord.backend.analysis.failure_modes import failure_mode_tests
    from radconcord.backend.analysis.stats import to_json_safe
    from radconcord.backend.services.evaluation.study_data import load_ratings

    require_admin(actor)
    if not 0.0 < fdr < 1.0:
        raise InvalidInput(f"fdr must lie in (0, 1), got {fdr}")
    _check_counts(counts)
    target = "significant" if significant_only else "total"

    def compute(study_name: str) -> dict[str, Any]:
        ratings = load_ratings(db, study_name, counts=counts)
        per_cat: dict[str, Any] = {
            str(c): ratings.mean_errors(target, c) for c in range(1, N_CATEGORIES + 1)
        }
        per_cat["total"] = ratings.mean_errors(target)
        out = to_json_safe(failure_mode_tests(per_cat, list(ratings.sources), fdr=fdr))
        out["n_adjudicated"] = ratings.n_adjudicated
        return out

    data = _run(compute, study_name=study_name)
    return FailureModes(
        study=study_name,
        target=target,
        fdr=fdr,
        sources=tuple(data["sources"]),
        means={src: tuple(row.items()) for src, row in data["means"].items()},
        tests=tuple(
            SourceTest(
                category=t["category"], greater=t["greater"], less=t["less"],
                mean_greater=t["mean_greater"], mean_less=t["mean_less"], t=t["t"], p=t["p"],
                p_adjusted=t["p_adjusted"], reject=t["reject"],
            )
            for t in data["tests"]
        ),
        counts=counts,
        n_adjudicated=int(data["n_adjudicated"]),
    )
