"""The benchmark leaderboard: every metric on one gold set under one fixed protocol (pure).

Arrays in, typed results out: no database, no files, no Streamlit. The service
:mod:`backend.services.evaluation.benchmark` loads a gold set (a ReXVal or RadPref folder, or a
study)
into :class:`CountData` or :class:`PreferenceData`, scores it through the score cache and
hands the values here as :class:`MetricValues`; :func:`count_board` and
:func:`preference_board` apply :data:`PROTOCOL` and return the boards that
:func:`board_json` writes into ``leaderboard.json``.

Every statistic is the project's own, called the way ``correlate`` calls it
(:mod:`backend.analysis.report` with ``cluster="case"``), so a count board's tau and interval
equal ``correlate``'s for the same pairs, values and seed:

- Kendall tau-b and its percentile interval: :func:`backend.analysis.bootstrap.bootstrap_many`
  on resamples of cases drawn once by :func:`~backend.analysis.bootstrap.draw_resamples`;
  per source :func:`~backend.analysis.bootstrap.bootstrap_correlations` over the source's pairs
  with its own resamples from the same seed (``correlate``'s ``per_source``).
- The human ceiling: :func:`backend.analysis.ceiling.human_ceiling` on the same resamples, and
  :func:`~backend.analysis.ceiling.pct_of_ceiling`.
- The paired test against the best metric: :func:`backend.analysis.paired_tests.bootstrap_pvalues`
  on the differences of the shared replicates and :func:`~backend.analysis.paired_tests.holm`.
- Preference sets: :func:`backend.analysis.preference.preference_from_ratings` and
  :func:`~backend.analysis.preference.pairwise_agreement` with references as clusters (as
  :func:`backend.services.annotation.pairwise.study_preference_stats`), and tau-b against the mean
  1-5
  rating with the same reference-clustered bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from radconcord.backend.analysis import preference as pref
from radconcord.backend.analysis.bootstrap import (
    DEFAULT_LEVEL,
    Resamples,
    bootstrap_correlations,
    bootstrap_many,
    draw_resamples,
    percentile_interval,
)
from radconcord.backend.analysis.ceiling import (
    MIN_RATERS,
    CeilingResult,
    human_ceiling,
    pct_of_ceiling,
)
from radconcord.backend.analysis.paired_tests import bootstrap_pvalues, holm
from radconcord.backend.analysis.stats import orient, to_json_safe

__all__ = [
    "CSV_COLUMNS",
    "HEADLINE",
    "PROTOCOL",
    "PROTOCOL_VERSION",
    "TARGETS",
    "Ceiling",
    "CountBoard",
    "CountData",
    "CountRow",
    "Estimate",
    "LeaderboardInputError",
    "MetricValues",
    "NotAvailable",
    "PreferenceBoard",
    "PreferenceData",
    "PreferenceRow",
    "Reported",
    "ReportedRow",
    "SourceRow",
    "TargetBoard",
    "VersusBest",
    "board_json",
    "count_board",
    "csv_rows",
    "preference_board",
    "rank_values",
]

PROTOCOL_VERSION = 1
#: Targets of a count set, the headline first.
TARGETS = ("total", "significant")
#: What each kind of gold set ranks by.
HEADLINE = {
    "counts": "Kendall tau-b against the mean of the raters' total errors, pooled over all "
              "rated pairs of the dataset",
    "preference": "pairwise agreement with the raters' preference (the candidate with the "
                  "higher mean 1-5 rating), over the comparisons the raters do not tie",
}
#: The protocol, written verbatim into every ``leaderboard.json``.
PROTOCOL: tuple[str, ...] = (
    "Count datasets (ReXVal, and studies rated in the ReXVal scheme): for each pair the target "
    "is the mean, over the raters who counted the pair, of their total errors (six categories, "
    "both significance levels), and separately of their clinically significant errors.",
    "Each metric is oriented so that higher means better (a lower-is-better metric is negated) "
    "and correlated with the negated target by Kendall tau-b (ties handled as tau-b), so a "
    "positive tau means agreement with the radiologists.",
    "Headline: tau-b against total errors pooled over all rated pairs of the dataset. The same "
    "statistics against significant errors, and tau-b per candidate type (source), are given "
    "beside it and are not the headline.",
    "95% intervals: percentile bootstrap over cases (every candidate of one reference drawn "
    "together); the resamples are drawn once from the seed and shared by every metric, the "
    "ceiling and the paired tests. Per-source intervals draw their own resamples of that "
    "source's pairs from the same seed.",
    "Human ceiling: the mean over raters of the Kendall tau-b between one rater's counts and the "
    "mean of the other raters' (leave one rater out; needs at least 3 raters), with its interval "
    "on the same resamples. A metric reaches tau / ceiling of it.",
    "Paired test against the best metric (the highest pooled tau-b): two-sided paired-bootstrap "
    "p-value of tau(best) - tau(metric) on the shared resamples, p = min(1, 2 min(1 + #(d <= 0), "
    "1 + #(d >= 0)) / (B + 1)), Holm-corrected over the metrics compared with the best.",
    "Preference datasets (RadPref, and studies in the pairwise annotation mode): the raters "
    "prefer the candidate with the higher mean 1-5 rating over the raters who judged the "
    "comparison; comparisons the raters tie are excluded. Pairwise agreement is the share of "
    "the remaining comparisons where the metric prefers the same candidate (a metric tie scores "
    "0.5); its interval resamples references, because comparisons of one reference share "
    "candidates. It is the headline of a preference dataset.",
    "Preference datasets also give Kendall tau-b of each metric against each candidate's mean "
    "1-5 rating with the same reference-clustered bootstrap, and the leave-one-rater-out "
    "ceiling of the ratings.",
    "Ranks: computed values only, highest first; equal values share a rank. A metric that "
    "cannot be computed on a dataset (unavailable here, no images, failed, undefined) is n/a "
    "with its reason and never ranked. Figures reported in papers sit beside ours, marked "
    "reported with their source, and never enter a rank.",
    "Scores come from the score cache, keyed by pair input, output key and the metric's "
    "signature (its settings); a second run with the same inputs computes nothing.",
)


class LeaderboardInputError(ValueError):
    """The data cannot be benchmarked (too few rated pairs, shapes that do not match)."""


# ------------------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class MetricValues:
    """One output key's values over the items of a gold set (pairs or candidates).

    Attributes:
        key: Output key.
        family: Its family.
        values: ``(n,)`` raw values (not oriented), NaN where missing or undefined.
        higher_is_better: The key's direction (from the metric registry).
        signature: The metric's settings string.
        signature_hash: Its hash, as stored in the score cache.
    """

    key: str
    family: str
    values: NDArray[np.float64]
    higher_is_better: bool
    signature: str
    signature_hash: str = ""


@dataclass(frozen=True)
class NotAvailable:
    """A requested key that has no value on a gold set, and why.

    Attributes:
        key: Output key (the family name when the family's keys are not known).
        family: Its family.
        reason: Why, for people ("unavailable here: ...", "needs images: ...").
    """

    key: str
    family: str
    reason: str


@dataclass(frozen=True)
class Reported:
    """A figure from a paper, shown beside ours and never ranked.

    Attributes:
        key: Our closest output key (``None`` when we have none).
        metric: The metric as the paper names it.
        value: The figure.
        source: The paper it comes from.
        where: Where RadConcord cites it (a metric card).
        statistic: What the figure is (``kendall_tau_b``).
        target: Against what (``total`` errors).
    """

    key: str | None
    metric: str
    value: float
    source: str
    where: str = ""
    statistic: str = "kendall_tau_b"
    target: str = "total"


@dataclass(frozen=True)
class CountData:
    """A count gold set: pairs and each rater's error counts.

    Attributes:
        pair_ids: ``(n,)`` pair ids.
        cases: ``(n,)`` case (reference) of each pair: the resampling cluster.
        sources: ``(n,)`` candidate type or source of each pair.
        raters: ``R`` rater names.
        errors: Target (``"total"``, ``"significant"``) -> ``(R, n)`` counts, NaN where the
            rater did not count the pair.
    """

    pair_ids: tuple[str, ...]
    cases: tuple[str, ...]
    sources: tuple[str, ...]
    raters: tuple[str, ...]
    errors: Mapping[str, NDArray[np.float64]]

    def __post_init__(self) -> None:
        n = len(self.pair_ids)
        if len(self.cases) != n or len(self.sources) != n:
            raise LeaderboardInputError("pair_ids, cases and sources must have one length")
        for target in TARGETS:
            e = self.errors.get(target)
            if e is None or np.shape(e) != (len(self.raters), n):
                raise LeaderboardInputError(
                    f"errors[{target!r}] must have shape ({len(self.raters)}, {n})")

    def mean_errors(self, target: str) -> NDArray[np.float64]:
        """``(n,)`` mean over the raters who counted each pair (NaN where nobody did)."""
        e = np.asarray(self.errors[target], dtype=np.float64)
        counted = np.isfinite(e)
        n_r = counted.sum(axis=0)
        total = np.where(counted, e, 0.0).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n_r > 0, total / np.maximum(n_r, 1), np.nan)


@dataclass(frozen=True)
class PreferenceData:
    """A preference gold set: candidates, comparisons of two candidates, 1-5 ratings.

    Attributes:
        candidate_ids: ``(m,)`` candidate (pair) ids.
        references: ``(m,)`` reference of each candidate: the resampling cluster.
        sources: ``(m,)`` source of each candidate.
        raters: ``R`` rater names.
        ratings: ``(R, m)`` each rater's 1-5 rating of each candidate (the mean when a rater
            rated it in several comparisons), NaN where not rated.
        candidate_mean: ``(m,)`` mean rating of each candidate over every completed judgement
            that rated it, NaN where none did.
        comparison_a: ``(c,)`` index of candidate A of each comparison.
        comparison_b: ``(c,)`` index of candidate B.
        comparison_mean_a: ``(c,)`` mean rating of A over the raters who judged the
            comparison (NaN: none).
        comparison_mean_b: ``(c,)`` likewise for B.
    """

    candidate_ids: tuple[str, ...]
    references: tuple[str, ...]
    sources: tuple[str, ...]
    raters: tuple[str, ...]
    ratings: NDArray[np.float64]
    candidate_mean: NDArray[np.float64]
    comparison_a: NDArray[np.int64]
    comparison_b: NDArray[np.int64]
    comparison_mean_a: NDArray[np.float64]
    comparison_mean_b: NDArray[np.float64]

    def __post_init__(self) -> None:
        m = len(self.candidate_ids)
        if len(self.references) != m or len(self.sources) != m:
            raise LeaderboardInputError(
                "candidate_ids, references and sources must have one length")
        if np.shape(self.ratings) != (len(self.raters), m) or np.shape(
                self.candidate_mean) != (m,):
            raise LeaderboardInputError(f"ratings must be ({len(self.raters)}, {m}) and "
                                        f"candidate_mean ({m},)")
        c = np.shape(self.comparison_a)
        if not (c == np.shape(self.comparison_b) == np.shape(self.comparison_mean_a)
                == np.shape(self.comparison_mean_b)) or len(c) != 1:
            raise LeaderboardInputError("the comparison arrays must be 1-d of one length")
        for side in (self.comparison_a, self.comparison_b):
            if np.size(side) and (np.min(side) < 0 or np.max(side) >= m):
                raise LeaderboardInputError("a comparison names a candidate out of range")


# ------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class Estimate:
    """A statistic with its percentile interval (NaN bounds without resamples)."""

    value: float
    lo: float
    hi: float
    n: int


@dataclass(frozen=True)
class VersusBest:
    """The paired test of a metric against the best one.

    Attributes:
        best: The best metric's key.
        diff: ``tau(best) - tau(this)`` on the original sample.
        lo: Lower end of the percentile interval of the difference.
        hi: Upper end.
        p: Two-sided paired-bootstrap p-value.
        p_holm: Holm-adjusted over the metrics compared with the best.
    """

    best: str
    diff: float
    lo: float
    hi: float
    p: float
    p_holm: float


@dataclass(frozen=True)
class Ceiling:
    """Leave-one-rater-out agreement of the raters with each other."""

    value: float
    lo: float
    hi: float
    n_raters: int
    per_rater: dict[str, float]
    unit: str
    resamples: int

    @classmethod
    def of(cls, result: CeilingResult) -> Ceiling:
        """From :func:`backend.analysis.ceiling.human_ceiling`'s result."""
        return cls(value=float(result.kendall), lo=float(result.kendall_ci[0]),
                   hi=float(result.kendall_ci[1]), n_raters=result.n_raters,
                   per_rater=dict(zip(result.raters, result.per_rater_kendall.tolist(),
                                      strict=True)),
                   unit=result.unit, resamples=result.resamples)


@dataclass(frozen=True)
class CountRow:
    """One metric on one target of a count set (ranked, or n/a with the reason)."""

    key: str
    family: str
    status: str  # "ranked" | "n/a"
    reason: str = ""
    rank: int | None = None
    higher_is_better: bool | None = None
    signature: str = ""
    signature_hash: str = ""
    tau: Estimate | None = None
    pct_of_ceiling: float | None = None
    vs_best: VersusBest | None = None


@dataclass(frozen=True)
class SourceRow:
    """One metric's tau-b on the pairs of one source."""

    key: str
    tau: Estimate
    rank: int | None


@dataclass(frozen=True)
class ReportedRow:
    """A reported figure beside our value of its key (never ranked)."""

    reported: Reported
    ours: float | None


@dataclass(frozen=True)
class TargetBoard:
    """Every metric against one target of a count set."""

    target: str
    headline: bool
    n_pairs: int
    resamples: int
    ceiling: Ceiling | None
    ceiling_reason: str
    best: str | None
    rows: tuple[CountRow, ...]
    per_source: dict[str, tuple[int, tuple[SourceRow, ...]]]
    reported: tuple[ReportedRow, ...] = ()


@dataclass(frozen=True)
class CountBoard:
    """The leaderboard of a count set: the headline target first."""

    n_pairs: int
    n_raters: int
    raters_per_pair: float
    sources: dict[str, int]
    targets: dict[str, TargetBoard]
    kind: str = field(default="counts", init=False)


@dataclass(frozen=True)
class PreferenceRow:
    """One metric on a preference set (ranked by pairwise agreement, or n/a)."""

    key: str
    family: str
    status: str
    reason: str = ""
    rank: int | None = None
    higher_is_better: bool | None = None
    signature: str = ""
    signature_hash: str = ""
    agreement: Estimate | None = None
    n_ties_excluded: int = 0
    n_metric_ties: int = 0
    n_references: int = 0
    tau_rating: Estimate | None = None
    pct_of_ceiling: float | None = None


@dataclass(frozen=True)
class PreferenceBoard:
    """The leaderboard of a preference set."""

    n_comparisons: int
    n_judged: int
    n_ties: int
    n_candidates_rated: int
    n_raters: int
    resamples: int
    ceiling: Ceiling | None
    ceiling_reason: str
    rows: tuple[PreferenceRow, ...]
    preference_source: str = "mean_rating"
    kind: str = field(default="preference", init=False)


# ------------------------------------------------------------------------------ helpers


def rank_values(values: Mapping[str, float]) -> dict[str, int | None]:
    """Competition ranks, highest first: equal values share the lower rank; NaN gets None.

    Args:
        values: Key -> value.
    """
    ordered = sorted(((v, k) for k, v in values.items() if math.isfinite(v)),
                     key=lambda item: (-item[0], item[1]))
    ranks: dict[str, int | None] = {k: None for k in values}
    previous: float | None = None
    rank = 0
    for position, (value, key) in enumerate(ordered, start=1):
        if previous is None or value != previous:
            rank = position
        ranks[key] = rank
        previous = value
    return ranks


def _estimate(value: float, ci: ArrayLike, n: int) -> Estimate:
    lo, hi = (float(v) for v in np.asarray(ci, dtype=np.float64)[:2])
    return Estimate(value=float(value), lo=lo, hi=hi, n=int(n))


def _check_metrics(metrics: Sequence[MetricValues], n: int) -> None:
    seen: set[str] = set()
    for m in metrics:
        if np.shape(m.values) != (n,):
            raise LeaderboardInputError(f"metric {m.key}: values must have shape ({n},), got "
                                        f"{np.shape(m.values)}")
        if m.key in seen:
            raise LeaderboardInputError(f"metric {m.key} given twice")
        seen.add(m.key)


def _undefined(n: int) -> str:
    if n < 2:
        return (f"Kendall tau-b undefined: {n} rated item(s) with a value (it needs 2)")
    return "Kendall tau-b undefined: the metric or the target is constant on these items"


# ------------------------------------------------------------------------------ counts


def _target_board(
    data: CountData,
    target: str,
    metrics: Sequence[MetricValues],
    x_all: NDArray[np.float64],
    unavailable: Sequence[NotAvailable],
    reported: Sequence[Reported],
    *,
    resamples: int,
    seed: int,
    level: float,
) -> TargetBoard:
    mean = data.mean_errors(target)
    rated = np.flatnonzero(np.isfinite(mean))
    cases = np.asarray(data.cases, dtype=object)
    clusters = cases[rated]
    # Drawn once: metrics, ceiling and paired tests see the same resamples (correlate's
    # draws with cluster="case", so its figures and these agree).
    draws: Resamples | None = (
        draw_resamples(rated.size, resamples, seed, clusters) if resamples > 0 else None)
    keys = [m.key for m in metrics]
    x = x_all[:, rated]
    main = bootstrap_many(x, (-mean[rated])[None, :], resamples=0, seed=seed, level=level,
                          draws=draws)[0] if keys else None

    errors = np.asarray(data.errors[target], dtype=np.float64)[:, rated]
    result = human_ceiling(errors, data.raters, draws=draws, unit="case", seed=seed,
                           level=level)
    ceiling = Ceiling.of(result) if result is not None else None
    ceiling_reason = "" if ceiling is not None else (
        f"{len(data.raters)} rater(s): the leave-one-rater-out ceiling needs {MIN_RATERS}")
    if ceiling is not None and not math.isfinite(ceiling.value):
        ceiling_reason = "undefined: no rater's counts vary together with the others'"

    taus = {k: float(main.kendall[i]) for i, k in enumerate(keys)} if main else {}
    ranks = rank_values(taus)
    ranked = [k for k in keys if ranks[k] is not None]
    best = min(ranked, key=lambda k: (ranks[k], keys.index(k))) if ranked else None
    versus: dict[str, VersusBest] = {}
    if best is not None and main is not None:
        others = [k for k in ranked if k != best]
        b = keys.index(best)
        idx = [keys.index(k) for k in others]
        p = np.full(len(others), np.nan)
        ci = np.full((len(others), 2), np.nan)
        if main.kendall_replicates is not None and others:
            reps = main.kendall_replicates
            d = reps[:, [b]] - reps[:, idx]
            p = bootstrap_pvalues(d)
            ci = percentile_interval(d, level)
        p_holm = holm(p)
        for j, k in enumerate(others):
            versus[k] = VersusBest(best=best, diff=taus[best] - taus[k], lo=float(ci[j, 0]),
                                   hi=float(ci[j, 1]), p=float(p[j]), p_holm=float(p_holm[j]))

    ceiling_tau = ceiling.value if ceiling is not None else None
    rows: list[CountRow] = []
    for i, m in enumerate(metrics):
        assert main is not None
        n = int(main.n[i])
        common = {"key": m.key, "family": m.family, "higher_is_better": m.higher_is_better,
                  "signature": m.signature, "signature_hash": m.signature_hash}
        if ranks[m.key] is None:
            rows.append(CountRow(status="n/a", reason=_undefined(n), **common))
            continue
        tau = _estimate(main.kendall[i], main.kendall_ci[i], n)
        rows.append(CountRow(status="ranked", rank=ranks[m.key], tau=tau,
                             pct_of_ceiling=pct_of_ceiling(tau.value, ceiling_tau),
                             vs_best=versus.get(m.key), **common))
    rows.sort(key=lambda r: (r.rank is None, r.rank or 0, keys.index(r.key)))
    rows.extend(CountRow(key=u.key, family=u.family, status="n/a", reason=u.reason)
                for u in unavailable)

    sources = np.asarray(data.sources, dtype=object)
    per_source: dict[str, tuple[int, tuple[SourceRow, ...]]] = {}
    for src in sorted(set(data.sources)):
        subset = rated[sources[rated] == src]
        res = bootstrap_correlations(
            x_all[:, subset], -mean[subset], resamples=resamples if subset.size else 0,
            seed=seed, clusters=cases[subset], level=level) if keys else None
        if res is None:
            per_source[src] = (int(subset.size), ())
            continue
        src_taus = {k: float(res.kendall[i]) for i, k in enumerate(keys)}
        src_ranks = rank_values(src_taus)
        src_rows = [SourceRow(key=k, tau=_estimate(res.kendall[i], res.kendall_ci[i], res.n[i]),
                              rank=src_ranks[k]) for i, k in enumerate(keys)]
        src_rows.sort(key=lambda r: (r.rank is None, r.rank or 0, keys.index(r.key)))
        per_source[src] = (int(subset.size), tuple(src_rows))

    reported_rows = tuple(
        ReportedRow(reported=r, ours=taus.get(r.key) if r.key in ranks and ranks[r.key]
                    is not None else None)
        for r in reported if r.target == target)
    return TargetBoard(
        target=target, headline=target == TARGETS[0], n_pairs=int(rated.size),
        resamples=draws.count if draws is not None else 0, ceiling=ceiling,
        ceiling_reason=ceiling_reason, best=best, rows=tuple(rows), per_source=per_source,
        reported=reported_rows)


def count_board(
    data: CountData,
    metrics: Sequence[MetricValues],
    *,
    unavailable: Sequence[NotAvailable] = (),
    reported: Sequence[Reported] = (),
    resamples: int = 1000,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> CountBoard:
    """Rank the metrics of a count set under :data:`PROTOCOL`, for each of :data:`TARGETS`.

    Args:
        data: Pairs and the raters' counts.
        metrics: The values of each key with a column on this set.
        unavailable: Keys without values on this set and why (rows marked n/a).
        reported: Published figures of this gold set (shown, never ranked).
        resamples: Bootstrap resamples (0: no intervals and no p-values).
        seed: Seed of the resamples.
        level: Interval coverage.

    Returns:
        One :class:`TargetBoard` per target; every requested key appears in each.

    Raises:
        LeaderboardInputError: fewer than 2 rated pairs, or shapes that do not match.
    """
    if resamples < 0:
        raise LeaderboardInputError(f"resamples must be >= 0, got {resamples}")
    n = len(data.pair_ids)
    _check_metrics(metrics, n)
    mean = data.mean_errors(TARGETS[0])
    rated = int(np.isfinite(mean).sum())
    if rated < 2:
        raise LeaderboardInputError(f"{rated} rated pair(s); the benchmark needs at least 2")
    x_all = (np.stack([orient(m.values, m.higher_is_better) for m in metrics])
             if metrics else np.zeros((0, n)))
    targets = {
        t: _target_board(data, t, metrics, x_all, unavailable, reported, resamples=resamples,
                         seed=seed, level=level)
        for t in TARGETS
    }
    counted = np.isfinite(np.asarray(data.errors[TARGETS[0]], dtype=np.float64))
    per_pair = counted.sum(axis=0)
    sources: dict[str, int] = {}
    for src, ok in zip(data.sources, np.isfinite(mean), strict=True):
        if ok:
            sources[src] = sources.get(src, 0) + 1
    return CountBoard(n_pairs=rated, n_raters=int(counted.any(axis=1).sum()),
                      raters_per_pair=float(per_pair[per_pair > 0].mean()),
                      sources=dict(sorted(sources.items())), targets=targets)


# ------------------------------------------------------------------------------ preference


def preference_board(
    data: PreferenceData,
    metrics: Sequence[MetricValues],
    *,
    unavailable: Sequence[NotAvailable] = (),
    resamples: int = 1000,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> PreferenceBoard:
    """Rank the metrics of a preference set under :data:`PROTOCOL`.

    Args:
        data: Candidates, comparisons and ratings.
        metrics: Each key's values over the candidates.
        unavailable: Keys without values on this set and why.
        resamples: Bootstrap resamples (0: no intervals).
        seed: Seed of the resamples.
        level: Interval coverage.

    Raises:
        LeaderboardInputError: no comparison with a rating, or shapes that do not match.
    """
    if resamples < 0:
        raise LeaderboardInputError(f"resamples must be >= 0, got {resamples}")
    m = len(data.candidate_ids)
    _check_metrics(metrics, m)
    prefs = pref.preference_from_ratings(data.comparison_mean_a, data.comparison_mean_b)
    judged = int(np.isfinite(prefs).sum())
    if judged == 0:
        raise LeaderboardInputError("no comparison has ratings of both candidates")
    references = np.asarray(data.references, dtype=object)
    comp_refs = references[np.asarray(data.comparison_a, dtype=np.int64)]
    rated = np.flatnonzero(np.isfinite(np.asarray(data.candidate_mean, dtype=np.float64)))
    draws = (draw_resamples(rated.size, resamples, seed, references[rated])
             if resamples > 0 and rated.size else None)
    keys = [mv.key for mv in metrics]
    taus = None
    if keys and rated.size:
        x = np.stack([orient(mv.values, mv.higher_is_better) for mv in metrics])[:, rated]
        # Ratings are higher-is-better already: no negation of the target here.
        taus = bootstrap_many(x, np.asarray(data.candidate_mean, dtype=np.float64)[rated][None],
                              resamples=0, seed=seed, level=level, draws=draws)[0]
    ratings = np.asarray(data.ratings, dtype=np.float64)[:, rated]
    result = human_ceiling(ratings, data.raters, draws=draws, unit="case", seed=seed,
                           level=level)
    ceiling = Ceiling.of(result) if result is not None else None
    ceiling_reason = "" if ceiling is not None else (
        f"{len(data.raters)} rater(s): the leave-one-rater-out ceiling needs {MIN_RATERS}")
    if ceiling is not None and not math.isfinite(ceiling.value):
        ceiling_reason = "undefined: no rater's ratings vary together with the others'"

    agreements: dict[str, pref.PairwiseAgreement] = {}
    a_idx = np.asarray(data.comparison_a, dtype=np.int64)
    b_idx = np.asarray(data.comparison_b, dtype=np.int64)
    for mv in metrics:
        values = np.asarray(mv.values, dtype=np.float64)
        agreements[mv.key] = pref.pairwise_agreement(
            values[a_idx], values[b_idx], prefs, higher_is_better=mv.higher_is_better,
            resamples=resamples, seed=seed, level=level, clusters=comp_refs)
    ranks = rank_values({k: a.value for k, a in agreements.items()})
    ceiling_tau = ceiling.value if ceiling is not None else None
    rows: list[PreferenceRow] = []
    for i, mv in enumerate(metrics):
        a = agreements[mv.key]
        common = {"key": mv.key, "family": mv.family, "higher_is_better": mv.higher_is_better,
                  "signature": mv.signature, "signature_hash": mv.signature_hash}
        if ranks[mv.key] is None:
            rows.append(PreferenceRow(
                status="n/a", reason=f"pairwise agreement undefined: no comparison the raters "
                                     f"do not tie has both values ({a.n_missing} missing)",
                **common))
            continue
        tau = (_estimate(taus.kendall[i], taus.kendall_ci[i], taus.n[i])
               if taus is not None else None)
        rows.append(PreferenceRow(
            status="ranked", rank=ranks[mv.key],
            agreement=Estimate(a.value, a.ci_low, a.ci_high, a.n_comparisons),
            n_ties_excluded=a.n_ties_excluded, n_metric_ties=a.n_metric_ties,
            n_references=a.n_clusters, tau_rating=tau,
            pct_of_ceiling=pct_of_ceiling(tau.value, ceiling_tau) if tau else None, **common))
    rows.sort(key=lambda r: (r.rank is None, r.rank or 0, keys.index(r.key)))
    rows.extend(PreferenceRow(key=u.key, family=u.family, status="n/a", reason=u.reason)
                for u in unavailable)
    return PreferenceBoard(
        n_comparisons=int(prefs.size), n_judged=judged, n_ties=int(np.sum(prefs == pref.TIE)),
        n_candidates_rated=int(rated.size), n_raters=len(data.raters),
        resamples=draws.count if draws is not None else 0, ceiling=ceiling,
        ceiling_reason=ceiling_reason, rows=tuple(rows))


# ------------------------------------------------------------------------------ JSON


def _est(e: Estimate | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {"value": e.value, "ci95": [e.lo, e.hi], "n": e.n}


def _ceiling(c: Ceiling | None, reason: str) -> dict[str, Any] | None:
    if c is None:
        return {"value": None, "reason": reason}
    out: dict[str, Any] = {"value": c.value, "ci95": [c.lo, c.hi], "n_raters": c.n_raters,
                           "per_rater": c.per_rater, "unit": c.unit, "resamples": c.resamples}
    if reason:
        out["reason"] = reason
    return out


def _count_row(r: CountRow) -> dict[str, Any]:
    vs = r.vs_best
    return {
        "key": r.key, "family": r.family, "status": r.status, "rank": r.rank,
        "reason": r.reason or None, "kendall_tau_b": _est(r.tau),
        "pct_of_ceiling": r.pct_of_ceiling,
        "vs_best": None if vs is None else {
            "best": vs.best, "tau_diff": vs.diff, "ci95": [vs.lo, vs.hi], "p": vs.p,
            "p_holm": vs.p_holm},
        "higher_is_better": r.higher_is_better, "signature": r.signature or None,
        "signature_hash": r.signature_hash or None,
    }


def _reported(r: ReportedRow) -> dict[str, Any]:
    p = r.reported
    return {"status": "reported", "rank": None, "key": p.key, "metric": p.metric,
            "statistic": p.statistic, "target": p.target, "value": p.value,
            "source": p.source, "where": p.where, "ours": r.ours}


def _target_json(t: TargetBoard) -> dict[str, Any]:
    return {
        "target": t.target, "headline": t.headline, "scope": "pooled over all rated pairs",
        "n_pairs": t.n_pairs, "resamples": t.resamples, "best": t.best,
        "ceiling": _ceiling(t.ceiling, t.ceiling_reason),
        "rows": [_count_row(r) for r in t.rows],
        "reported": [_reported(r) for r in t.reported],
        "per_source": {
            src: {"n_pairs": n, "rows": [{"key": s.key, "rank": s.rank,
                                          "kendall_tau_b": _est(s.tau)} for s in rows]}
            for src, (n, rows) in t.per_source.items()},
    }


def board_json(board: CountBoard | PreferenceBoard) -> dict[str, Any]:
    """The board as the JSON-able block of one dataset in ``leaderboard.json``.

    Args:
        board: From :func:`count_board` or :func:`preference_board`.
    """
    if isinstance(board, CountBoard):
        return to_json_safe({
            "kind": board.kind, "headline": HEADLINE["counts"],
            "n_pairs": board.n_pairs, "n_raters": board.n_raters,
            "raters_per_pair": board.raters_per_pair, "sources": board.sources,
            "targets": {t: _target_json(tb) for t, tb in board.targets.items()},
        })
    return to_json_safe({
        "kind": board.kind, "headline": HEADLINE["preference"],
        "preference_source": board.preference_source,
        "n_comparisons": board.n_comparisons, "n_judged": board.n_judged,
        "n_ties_excluded": board.n_ties, "n_candidates_rated": board.n_candidates_rated,
        "n_raters": board.n_raters, "resamples": board.resamples,
        "ceiling": _ceiling(board.ceiling, board.ceiling_reason),
        "ceiling_of": "Kendall tau-b of each rater's 1-5 ratings against the other raters' mean",
        "rows": [{
            "key": r.key, "family": r.family, "status": r.status, "rank": r.rank,
            "reason": r.reason or None, "pairwise_agreement": _est(r.agreement),
            "n_ties_excluded": r.n_ties_excluded, "n_metric_ties": r.n_metric_ties,
            "n_references": r.n_references, "kendall_tau_b_rating": _est(r.tau_rating),
            "pct_of_ceiling": r.pct_of_ceiling, "higher_is_better": r.higher_is_better,
            "signature": r.signature or None, "signature_hash": r.signature_hash or None,
        } for r in board.rows],
    })


# ------------------------------------------------------------------------------ CSV

#: Columns of ``leaderboard.csv``: one row per dataset, table, scope and metric.
CSV_COLUMNS = (
    "dataset", "kind", "statistic", "target", "scope", "rank", "status", "key", "family",
    "value", "ci95_low", "ci95_high", "n", "pct_of_ceiling", "ceiling", "vs_best",
    "tau_diff_vs_best", "p_vs_best", "p_holm_vs_best", "signature", "reason", "source",
)


def _ci_cells(est: Mapping[str, Any] | None) -> dict[str, Any]:
    if not est:
        return {"value": None, "ci95_low": None, "ci95_high": None, "n": None}
    lo, hi = est.get("ci95") or (None, None)
    return {"value": est.get("value"), "ci95_low": lo, "ci95_high": hi, "n": est.get("n")}


def csv_rows(datasets: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``leaderboard.csv`` from the ``datasets`` of ``leaderboard.json``.

    Every metric of every table appears: ranked rows with their figures, n/a rows with the
    reason, reported figures with their source (status ``reported``, no rank).

    Args:
        datasets: ``[{"name", "board": board_json(...)}, ...]``.
    """
    out: list[dict[str, Any]] = []

    def add(**cells: Any) -> None:  # noqa: ANN401 - CSV cells of any type
        out.append({c: cells.get(c) for c in CSV_COLUMNS})

    for ds in datasets:
        name, board = ds["name"], ds["board"]
        if board["kind"] == "counts":
            for target, tb in board["targets"].items():
                ceiling = (tb.get("ceiling") or {}).get("value")
                base = {"dataset": name, "kind": "counts", "statistic": "kendall_tau_b",
                        "target": target}
                for r in tb["rows"]:
                    vs = r.get("vs_best") or {}
                    add(**base, scope="pooled", rank=r["rank"], status=r["status"],
                        key=r["key"], family=r["family"], **_ci_cells(r["kendall_tau_b"]),
                        pct_of_ceiling=r["pct_of_ceiling"], ceiling=ceiling,
                        vs_best=vs.get("best"), tau_diff_vs_best=vs.get("tau_diff"),
                        p_vs_best=vs.get("p"), p_holm_vs_best=vs.get("p_holm"),
                        signature=r["signature"], reason=r["reason"])
                for r in tb["reported"]:
                    add(**base, scope="pooled", status="reported", key=r["key"],
                        value=r["value"], reason=f"reported as {r['metric']}",
                        source=f"{r['source']} ({r['where']})" if r["where"] else r["source"])
                for src, block in tb["per_source"].items():
                    for r in block["rows"]:
                        status = "ranked" if r["rank"] is not None else "n/a"
                        add(**base, scope=f"source:{src}", rank=r["rank"], status=status,
                            key=r["key"], **_ci_cells(r["kendall_tau_b"]),
                            reason=None if status == "ranked" else "Kendall tau-b undefined")
            continue
        ceiling = (board.get("ceiling") or {}).get("value")
        for r in board["rows"]:
            base = {"dataset": name, "kind": "preference", "scope": "pooled",
                    "status": r["status"], "key": r["key"], "family": r["family"],
                    "signature": r["signature"], "reason": r["reason"]}
            add(**base, statistic="pairwise_agreement", target="preference", rank=r["rank"],
                **_ci_cells(r["pairwise_agreement"]))
            add(**base, statistic="kendall_tau_b", target="mean_rating",
                **_ci_cells(r["kendall_tau_b_rating"]), pct_of_ceiling=r["pct_of_ceiling"],
                ceiling=ceiling)
    return out
