"""Pairwise preference statistics: does a metric prefer the candidate the radiologists prefer?

Pure numpy/scipy; the service :mod:`backend.services.annotation.pairwise` loads the data.

Encoding. A comparison shows candidate A beside candidate B of the same reference. A
preference is coded ``+1`` (A better), ``-1`` (B better), ``0`` (tie) and ``NaN`` (none).

Raters' preference of a comparison, from one of two sources (an argument, recorded in results):

* ``"votes"``: the explicit "which is better" answers. The option (A, B or tie) named by most
  raters wins; when the top count is shared (e.g. one A and one B, or one A and one tie) the
  raters are split and the comparison is a tie.
* ``"mean_rating"``: the mean 1-5 overall rating of each candidate over the raters who rated
  it; the higher mean wins, equal means are a tie. This is what ``correlate`` uses on a
  RadPref study (its annotators rated both candidates; the issue asks for this source).

Pairwise agreement of a metric. Over the comparisons where the raters prefer one candidate
(their ties are excluded and counted in ``n_ties_excluded``) and the metric has both values,
each comparison scores 1 when the metric (oriented so that higher is better) is higher for the
candidate the raters prefer, 0 when it is lower, and 0.5 when the metric gives both candidates
the same value (a metric tie is a coin flip, so a constant metric scores 0.5, not 0 or 1).
The agreement is the mean score; its interval is the seeded percentile bootstrap of
:mod:`backend.analysis.bootstrap` (the same draws for every metric). Comparisons of one
reference share candidates (with three candidates, A-B, A-C and B-C), so they are not
independent: given ``clusters`` (the reference of each comparison) the references are drawn
with replacement, and a replicate is the mean score over the comparisons drawn (a ratio
estimator). With one comparison per reference it is the bootstrap over comparisons.

Kendall tau-b against the ratings. ``scipy.stats.kendalltau(variant="b")`` between the
oriented metric and the mean 1-5 rating of each candidate (one point per candidate, i.e. per
study pair), over the candidates with both values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from radconcord.backend.analysis.bootstrap import DEFAULT_LEVEL, draw_resamples, percentile_interval

#: Sources of the raters' preference (see the module docstring).
SOURCES = ("votes", "mean_rating")
A, B, TIE = 1.0, -1.0, 0.0
_CODE = {"A": A, "B": B, "tie": TIE}


def preference_from_votes(votes: Sequence[Sequence[str | None]]) -> NDArray[np.float64]:
    """The raters' preference of each comparison from their explicit answers.

    Args:
        votes: One sequence per comparison of answers ``"A"``, ``"B"``, ``"tie"`` (``None``:
            not given, ignored).

    Returns:
        ``(n,)`` codes: ``+1`` A, ``-1`` B, ``0`` tie (or split), NaN without any answer.

    Raises:
        ValueError: an answer that is not A, B, tie or None (names the comparison).
    """
    out = np.full(len(votes), np.nan)
    for i, answers in enumerate(votes):
        tally = {A: 0, B: 0, TIE: 0}
        for answer in answers:
            if answer is None:
                continue
            if answer not in _CODE:
                raise ValueError(f"comparison {i}: preference must be A, B or tie, "
                                 f"got {answer!r}")
            tally[_CODE[answer]] += 1
        top = max(tally.values())
        if top == 0:
            continue
        winners = [code for code, n in tally.items() if n == top]
        out[i] = winners[0] if len(winners) == 1 else TIE
    return out


def preference_from_ratings(mean_a: ArrayLike, mean_b: ArrayLike) -> NDArray[np.float64]:
    """The raters' preference of each comparison from the mean 1-5 rating of each candidate.

    Args:
        mean_a: ``(n,)`` mean rating of candidate A (NaN: not rated).
        mean_b: ``(n,)`` mean rating of candidate B.

    Returns:
        ``(n,)`` codes ``+1``/``-1``/``0``; NaN where either mean is missing.
    """
    a = np.asarray(mean_a, dtype=np.float64)
    b = np.asarray(mean_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"mean_a and mean_b must be 1-d of one length, got {a.shape}, {b.shape}")
    return np.sign(a - b)  # NaN propagates


@dataclass(frozen=True)
class PairwiseAgreement:
    """A metric's pairwise agreement with the raters' preferences.

    Attributes:
        value: Mean score (1 agree, 0.5 metric tie, 0 disagree); NaN with no comparison.
        ci_low: Lower end of the percentile interval (NaN without resamples).
        ci_high: Upper end.
        n_comparisons: Comparisons scored (raters not tied, metric present for both).
        n_ties_excluded: Comparisons left out because the raters' preference is a tie.
        n_missing: Comparisons left out for a missing preference or metric value.
        n_metric_ties: Scored comparisons where the metric tied (each scored 0.5).
        n_clusters: Resampling units among the scored comparisons (their references when
            clustered; else ``n_comparisons``).
        resamples: Bootstrap resamples ``B``.
        seed: Seed of the resampling.
        level: Interval coverage.
    """

    value: float
    ci_low: float
    ci_high: float
    n_comparisons: int
    n_ties_excluded: int
    n_missing: int
    n_metric_ties: int
    n_clusters: int
    resamples: int
    seed: int
    level: float


def agreement_scores(metric_a: ArrayLike, metric_b: ArrayLike, preference: ArrayLike, *,
                     higher_is_better: bool = True) -> NDArray[np.float64]:
    """Per-comparison score (1, 0.5, 0; NaN where not scored), see the module docstring.

    Args:
        metric_a: ``(n,)`` metric value of candidate A.
        metric_b: ``(n,)`` metric value of candidate B.
        preference: ``(n,)`` raters' preference codes.
        higher_is_better: The metric's direction (lower-is-better metrics are negated).
    """
    a = np.asarray(metric_a, dtype=np.float64)
    b = np.asarray(metric_b, dtype=np.float64)
    p = np.asarray(preference, dtype=np.float64)
    if not (a.shape == b.shape == p.shape) or a.ndim != 1:
        raise ValueError(f"metric_a, metric_b and preference must be 1-d of one length, got "
                         f"{a.shape}, {b.shape}, {p.shape}")
    sign = 1.0 if higher_is_better else -1.0
    diff = sign * (a - b)
    scores = np.where(np.sign(diff) == p, 1.0, 0.0)
    scores = np.where(diff == 0, 0.5, scores)
    usable = np.isfinite(diff) & np.isfinite(p) & (p != TIE)
    return np.where(usable, scores, np.nan)


def pairwise_agreement(
    metric_a: ArrayLike,
    metric_b: ArrayLike,
    preference: ArrayLike,
    *,
    higher_is_better: bool = True,
    resamples: int = 1000,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    clusters: ArrayLike | None = None,
) -> PairwiseAgreement:
    """Share of comparisons where the metric prefers the candidate the raters prefer.

    Args:
        metric_a: ``(n,)`` metric value of candidate A of each comparison (NaN: missing).
        metric_b: ``(n,)`` metric value of candidate B.
        preference: ``(n,)`` raters' preference codes (:func:`preference_from_votes` or
            :func:`preference_from_ratings`).
        higher_is_better: The metric's direction.
        resamples: Bootstrap resamples over the scored comparisons (0: no interval).
        seed: Seed of ``numpy.random.default_rng`` for the resamples.
        level: Interval coverage.
        clusters: ``(n,)`` label of each comparison's reference: the bootstrap draws
            references, not comparisons (see the module docstring). ``None``: comparisons.

    Returns:
        The agreement, its interval and what was left out.
    """
    if resamples < 0:
        raise ValueError(f"resamples must be >= 0, got {resamples}")
    scores = agreement_scores(metric_a, metric_b, preference, higher_is_better=higher_is_better)
    p = np.asarray(preference, dtype=np.float64)
    ties = int(np.sum(p == TIE))
    scored = np.isfinite(scores)
    kept = scores[scored]
    n = int(kept.size)
    labels = None
    if clusters is not None:
        labels = np.asarray(clusters)
        if labels.shape != scores.shape:
            raise ValueError(f"clusters must have shape {scores.shape}, got {labels.shape}")
        labels = labels[scored]
    n_clusters = int(np.unique(labels).size) if labels is not None else n
    value = float(kept.mean()) if n else float("nan")
    lo = hi = float("nan")
    if n and resamples:
        res = draw_resamples(n, resamples, seed, clusters=labels)
        # Clustered, a replicate holds as many comparisons as its drawn references have.
        replicates = res.weights @ kept / res.weights.sum(axis=1)
        lo, hi = (float(v) for v in percentile_interval(replicates, level)[0])
    return PairwiseAgreement(
        value=value, ci_low=lo, ci_high=hi, n_comparisons=n, n_ties_excluded=ties,
        n_missing=int(scores.size) - n - ties, n_metric_ties=int(np.sum(kept == 0.5)),
        n_clusters=n_clusters, resamples=int(resamples), seed=int(seed), level=float(level),
    )


def kendall_tau_b_rating(metric: ArrayLike, mean_rating: ArrayLike, *,
                         higher_is_better: bool = True) -> tuple[float, int]:
    """Kendall tau-b between a metric and the mean 1-5 rating, one point per candidate.

    Args:
        metric: ``(m,)`` metric value of each candidate (NaN: missing).
        mean_rating: ``(m,)`` mean rating of each candidate (NaN: not rated).
        higher_is_better: The metric's direction (negated when lower is better, so a positive
            tau always means agreement with the raters).

    Returns:
        ``(tau, n)``: tau-b (NaN when fewer than 2 candidates or a constant side) and the
        number of candidates with both values.
    """
    x = np.asarray(metric, dtype=np.float64)
    y = np.asarray(mean_rating, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"metric and mean_rating must be 1-d of one length, got "
                         f"{x.shape}, {y.shape}")
    if not higher_is_better:
        x = -x
    both = np.isfinite(x) & np.isfinite(y)
    n = int(both.sum())
    if n < 2 or np.ptp(x[both]) == 0 or np.ptp(y[both]) == 0:
        return float("nan"), n
    return float(stats.kendalltau(x[both], y[both], variant="b").statistic), n
