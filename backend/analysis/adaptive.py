"""Adaptive rating: which of a rater's remaining pairs to rate next, and its simulation.

The question. The lead asks either for the Kendall tau-b difference between two metrics
(``tau_diff:A,B``) or for every metric's tau (``all``, the objective being the widest CI).
Both are U-statistics over pairs: with ``h`` the mean radiologist errors of a pair (negated,
so that higher is better) and ``W[i, j]`` the question's metric weight of two pairs
(``sign(a_i - a_j)`` for one metric, ``(sign(a_i - a_j) - sign(b_i - b_j)) / 2`` for a
difference), the statistic is ``mean_{i != j} W[i, j] sign(h_i - h_j)`` up to tie
normalisation.

The priority rule (higher first, applied to one rater's remaining pairs):

1. A pair nobody has rated yet comes before every rated one. It is absent from the pair
   bootstrap altogether, and adding a pair shrinks the CI by about ``1 / (2 n)`` of its width,
   more than refining a pair already in it. Unrated pairs keep a seeded random order among
   themselves: the interim sample of pairs then stays a simple random sample, so an interim
   estimate is not biased by the metric scores (ordering unrated pairs by metric disagreement
   would select the pairs where the metrics differ and bias any early look at tau_diff).
2. Among rated pairs, the expected reduction of the question's variance from one more rating
   (delta method): ``g_i^2 * s^2 / (r_i (r_i + 1))``, where ``r_i`` is the pair's current
   rating count, ``s^2`` the pooled within-pair variance of the raters' counts (so
   ``s^2 / (r_i (r_i + 1))`` is how much one more rating shrinks the variance of ``h_i``), and
   ``g_i = sum_j W[i, j] phi(d_ij) / sigma_ij`` with ``d_ij = (h_i - h_j) / sigma_ij`` and
   ``sigma_ij = s sqrt(1/r_i + 1/r_j)``: the derivative of the smoothed statistic
   (``sign`` replaced by the probability that the observed order is the true one) with
   respect to ``h_i``. A pair weighs when its human score is still noisy (few ratings), sits
   among pairs with close human scores (its rank can flip) and those neighbours are ordered
   differently by the question's metrics (for ``tau_diff``, where A and B disagree).
   For ``all`` the weights are those of the metric whose tau has the widest current
   asymptotic CI (``4 var(U_i) / n``, ``U_i`` the Hoeffding projection), because that CI is
   the one the question asks to shrink.
3. Ties (common: equal counts, or every pair unrated) are broken by a seeded draw per
   (rater, pair position), so the order is a function of the seed and the data only.

The simulation replays a fully rated study: raters take turns (round robin over raters
with pairs left), each revealing their next pair in the strategy's order (``random``: a
seeded shuffle per rater, as :mod:`backend.services.study_admin.assignment` does; ``adaptive``: the
rule above recomputed after every revealed rating). At checkpoints the question's CI width
is the percentile bootstrap over the pairs rated so far (their mean of the revealed raters).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from radconcord.backend.analysis.bootstrap import draw_resamples
from radconcord.backend.analysis.stats import kendall_tau_b_batch

STRATEGIES = ("random", "adaptive")
DEFAULT_STRATEGY = "random"

__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "Question",
    "SimulationResult",
    "adaptive_priority",
    "order_pairs",
    "parse_question",
    "question_ci_width",
    "question_estimate",
    "question_weights",
    "savings_summary",
    "simulate",
    "tiebreak_draws",
    "widest_weight",
]


@dataclass(frozen=True)
class Question:
    """What the adaptive order should make precise.

    Attributes:
        kind: ``"all"`` (every metric's tau) or ``"tau_diff"``.
        metrics: The two metric keys of a ``tau_diff`` (A, B); empty for ``all``.
    """

    kind: str
    metrics: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The question as written on the command line (``all``, ``tau_diff:A,B``)."""
        return "all" if self.kind == "all" else f"tau_diff:{','.join(self.metrics)}"

    @property
    def quantity(self) -> str:
        """What a CI width measures: ``max_tau`` or ``tau_diff``."""
        return "max_tau" if self.kind == "all" else "tau_diff"


def parse_question(text: str | None) -> Question:
    """Parse ``"all"`` or ``"tau_diff:A,B"``.

    Raises:
        ValueError: anything else (the message shows the accepted forms).
    """
    raw = (text or "all").strip()
    if raw == "all":
        return Question("all")
    kind, _, rest = raw.partition(":")
    keys = tuple(k.strip() for k in rest.split(",") if k.strip())
    if kind.strip() != "tau_diff" or len(keys) != 2 or keys[0] == keys[1]:
        raise ValueError(
            f"question: expected 'all' or 'tau_diff:A,B' with two different metric keys, "
            f"got {raw!r}"
        )
    return Question("tau_diff", keys)


def tiebreak_draws(seed: int, label: str, positions: ArrayLike) -> NDArray[np.float64]:
    """Seeded uniform draws in [0, 1), one per pair position, stable across runs and hosts.

    Args:
        seed: The study seed.
        label: Separates streams (e.g. the rater's username).
        positions: Pair positions (not database ids, so any database gives the same draws).
    """
    pos = np.asarray(positions, dtype=np.int64).ravel()
    out = np.empty(pos.size)
    for i, p in enumerate(pos):
        digest = hashlib.sha256(f"{seed}\x1fadaptive\x1f{label}\x1f{int(p)}".encode()).digest()
        out[i] = int.from_bytes(digest[:8], "big") / 2.0**64
    return out


def question_weights(oriented: ArrayLike, question_kind: str) -> NDArray[np.float64]:
    """The ``W`` matrices, ``(K, n, n)``: one per metric (``all``) or A - B (``tau_diff``).

    Args:
        oriented: ``(M, n)`` oriented metric values; NaN counts as the metric's median.
        question_kind: ``"all"`` or ``"tau_diff"`` (then ``M == 2``).
    """
    x = np.atleast_2d(np.asarray(oriented, dtype=np.float64))
    if question_kind == "tau_diff" and x.shape[0] != 2:
        raise ValueError("tau_diff needs exactly two metric rows (A, B)")
    filled = x.copy()
    for row in filled:
        ok = np.isfinite(row)
        # A pair without a value sits at the metric's median: it ranks neither way.
        row[~ok] = float(np.median(row[ok])) if ok.any() else 0.0
    signs = np.sign(filled[:, :, None] - filled[:, None, :])
    if question_kind == "tau_diff":
        return (signs[0:1] - signs[1:2]) / 2.0
    return signs


def _rated_state(y: NDArray[np.float64]) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    """(rating counts per pair, indices of rated pairs, their oriented mean, counts there)."""
    seen = np.isfinite(y)
    r = seen.sum(axis=0)
    rated = np.flatnonzero(r > 0)
    sums = np.where(seen, y, 0.0).sum(axis=0)
    h = -(sums[rated] / np.maximum(r[rated], 1))  # negated errors: higher is better
    return r, rated, h, r[rated].astype(np.float64)


def widest_weight(weights: NDArray[np.float64], ratings: ArrayLike) -> int:
    """Index of the ``W`` whose statistic has the widest asymptotic CI on the ratings so far.

    The variance is the U-statistic's ``4 var(U_i) / n`` with ``U_i`` the Hoeffding
    projection ``mean_j W[i, j] sign(h_i - h_j)``; 0 when fewer than 3 pairs are rated.
    """
    if weights.shape[0] == 1:
        return 0
    _, rated, h, _ = _rated_state(np.atleast_2d(np.asarray(ratings, dtype=np.float64)))
    if rated.size < 3:
        return 0
    w = weights[:, rated][:, :, rated]
    u = np.einsum("kij,ij->ki", w, np.sign(h[:, None] - h[None, :])) / (rated.size - 1)
    return int(np.argmax(u.var(axis=1)))


def adaptive_priority(
    oriented: ArrayLike | None,
    ratings: ArrayLike,
    *,
    question_kind: str = "all",
    weights: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """Priority of one more rating on each pair (higher first), ``inf`` for unrated pairs.

    Args:
        oriented: ``(M, n)`` metric values oriented so that higher is better (``M == 2``, A
            then B, for ``tau_diff``); NaN where missing (treated as the metric's median).
            May be ``None`` when ``weights`` is given.
        ratings: ``(R, n)`` error counts of each rater so far, NaN where not rated (yet).
        question_kind: ``"all"`` or ``"tau_diff"``.
        weights: Precomputed :func:`question_weights`; with several, the one of the widest
            current CI is used (:func:`widest_weight`); pass one ``(1, n, n)`` to fix it.

    Returns:
        ``(n,)`` priorities: ``inf`` for a pair without any rating, else the expected
        reduction of the question's variance from one more rating (see the module docstring).
    """
    y = np.atleast_2d(np.asarray(ratings, dtype=np.float64))
    n = y.shape[1]
    if weights is None:
        if oriented is None:
            raise ValueError("give the metric values or their weights")
        weights = question_weights(oriented, question_kind)
    if weights.shape[1:] != (n, n):
        raise ValueError(f"metric values cover {weights.shape[1]} pairs, ratings {n}")
    r, rated, h, rr = _rated_state(y)
    out = np.full(n, np.inf)
    if rated.size < 2:
        # Nothing to compare a rated pair with: its rating adds nothing yet beyond coverage.
        out[rated] = 0.0
        return out
    seen = np.isfinite(y)
    multi = r >= 2
    s2 = 0.0
    if multi.any():
        means = np.where(seen[:, multi], y[:, multi], 0.0).sum(axis=0) / r[multi]
        dev = np.where(seen[:, multi], y[:, multi] - means, 0.0)
        s2 = float((dev**2).sum() / max(1, int((r[multi] - 1).sum())))
    if s2 <= 0:
        # No disagreement seen yet: take the spread of the counts as a conservative guess.
        s2 = float(np.nanvar(y)) or 1.0
    w = weights[widest_weight(weights, y)][np.ix_(rated, rated)]
    sigma = np.sqrt(s2 * (1.0 / rr[:, None] + 1.0 / rr[None, :]))
    d = (h[:, None] - h[None, :]) / sigma
    dens = np.exp(-0.5 * d**2) / (np.sqrt(2.0 * np.pi) * sigma)
    np.fill_diagonal(dens, 0.0)
    g = (w * dens).sum(axis=1) / (rated.size - 1)
    out[rated] = g**2 * s2 / (rr * (rr + 1.0))
    return out


def order_pairs(
    priority: ArrayLike, tiebreak: ArrayLike
) -> NDArray[np.int64]:
    """Indices of pairs sorted by priority (highest first), ties by the seeded draw.

    Args:
        priority: ``(m,)`` priorities of the pairs to order.
        tiebreak: ``(m,)`` seeded draws (see :func:`tiebreak_draws`).
    """
    p = np.asarray(priority, dtype=np.float64)
    t = np.asarray(tiebreak, dtype=np.float64)
    # Round so that float noise in equal priorities cannot beat the seeded tie-break.
    key = np.where(np.isinf(p), np.inf, np.round(p, 12))
    return np.lexsort((t, -key)).astype(np.int64)


def question_ci_width(
    oriented: ArrayLike,
    target: ArrayLike,
    *,
    question_kind: str,
    resamples: int = 200,
    seed: int = 0,
    level: float = 0.95,
) -> float:
    """Percentile-bootstrap CI width of the question over the given pairs.

    Args:
        oriented: ``(M, n)`` oriented metric values.
        target: ``(n,)`` oriented human score (negated mean errors).
        question_kind: ``"all"`` (widest CI over the metrics) or ``"tau_diff"`` (A - B).
        resamples: Bootstrap resamples.
        seed: Resampling seed.
        level: CI coverage.

    Returns:
        The width, NaN with fewer than 3 pairs.
    """
    x = np.atleast_2d(np.asarray(oriented, dtype=np.float64))
    y = np.asarray(target, dtype=np.float64)
    if y.size < 3:
        return float("nan")
    res = draw_resamples(y.size, resamples, seed)
    tau = kendall_tau_b_batch(x, y, res.weights)  # (B, M)
    q = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
    if question_kind == "tau_diff":
        diff = tau[:, 0] - tau[:, 1]
        diff = diff[np.isfinite(diff)]
        if not diff.size:
            return float("nan")
        lo, hi = np.quantile(diff, q)
        return float(hi - lo)
    widths = [float(np.subtract(*np.quantile(col[np.isfinite(col)], q[::-1])))
              for col in tau.T if np.isfinite(col).any()]
    return max(widths) if widths else float("nan")


def question_estimate(
    oriented: ArrayLike, target: ArrayLike, *, question_kind: str
) -> NDArray[np.float64]:
    """The question's point estimate: every metric's tau-b (``all``) or ``[tau_A - tau_B]``.

    Args:
        oriented: ``(M, n)`` oriented metric values.
        target: ``(n,)`` oriented human score.
        question_kind: ``"all"`` or ``"tau_diff"``.
    """
    tau = kendall_tau_b_batch(np.atleast_2d(np.asarray(oriented, dtype=np.float64)),
                              np.asarray(target, dtype=np.float64))[0]
    return np.array([tau[0] - tau[1]]) if question_kind == "tau_diff" else tau


@dataclass(frozen=True)
class SimulationResult:
    """One replay: CI width of the question after each checkpoint's number of ratings.

    Attributes:
        strategy: ``"random"`` or ``"adaptive"``.
        seed: The replay's seed.
        n_ratings: ``(P,)`` ratings revealed at each checkpoint.
        ci_width: ``(P,)`` the question's CI width there (NaN when undefined).
        abs_error: ``(P,)`` distance of the interim estimate from the full-data one (for
            ``all`` the largest over the metrics): a narrow CI is only good news when the
            estimate is also close to where all the ratings put it.
        reveals: ``(total, 2)`` (rater row, pair index) of every rating in reveal order.
    """

    strategy: str
    seed: int
    n_ratings: NDArray[np.int64]
    ci_width: NDArray[np.float64]
    abs_error: NDArray[np.float64]
    reveals: NDArray[np.int64]


def _checkpoints(total: int, n_checkpoints: int) -> NDArray[np.int64]:
    pts = np.unique(np.linspace(0, total, n_checkpoints + 1).round().astype(np.int64))
    return pts[pts >= 3]


def simulate(
    oriented: ArrayLike,
    ratings: ArrayLike,
    *,
    strategy: str,
    seed: int,
    question_kind: str = "all",
    positions: Sequence[int] | None = None,
    checkpoints: int = 25,
    resamples: int = 200,
) -> SimulationResult:
    """Replay a fully rated study under one strategy.

    Args:
        oriented: ``(M, n)`` oriented metric values.
        ratings: ``(R, n)`` every rater's error counts, NaN where the rater has no rating of
            the pair (not assigned): those are never revealed.
        strategy: ``"random"`` or ``"adaptive"``.
        seed: Orders the raters' queues (and the adaptive tie-breaks) and the bootstrap.
        question_kind: ``"all"`` or ``"tau_diff"``.
        positions: Pair positions for the seeded draws (default ``0..n-1``).
        checkpoints: About how many points of the curve.
        resamples: Bootstrap resamples per checkpoint.

    Returns:
        The curve (ratings revealed, CI width).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    x = np.atleast_2d(np.asarray(oriented, dtype=np.float64))
    full = np.atleast_2d(np.asarray(ratings, dtype=np.float64))
    n_raters, n = full.shape
    pos = np.arange(n) if positions is None else np.asarray(positions, dtype=np.int64)
    held = [np.flatnonzero(np.isfinite(full[k])) for k in range(n_raters)]
    draws = [tiebreak_draws(seed, f"sim-rater-{k}", pos[held[k]]) for k in range(n_raters)]
    # Random: each rater's queue is fixed up front by the seeded draws.
    queues = [list(held[k][np.argsort(draws[k], kind="stable")]) for k in range(n_raters)]
    remaining = [set(h.tolist()) for h in held]
    total = int(sum(h.size for h in held))
    stops = set(_checkpoints(total, checkpoints).tolist())
    seen = np.full_like(full, np.nan)
    widths: list[tuple[int, float, float]] = []
    everyone = np.isfinite(full).any(axis=0)
    final_est = np.full(x.shape[0] if question_kind == "all" else 1, np.nan)
    if everyone.sum() >= 3:
        final_est = question_estimate(x[:, everyone], -np.nanmean(full[:, everyone], axis=0),
                                      question_kind=question_kind)
    order: list[tuple[int, int]] = []
    weights = question_weights(x, question_kind) if strategy == "adaptive" else None
    revealed = 0
    while revealed < total:
        if weights is not None:
            # The widest CI moves slowly: choose its metric once per round of the raters.
            fixed = weights[widest_weight(weights, seen)][None]
        for k in range(n_raters):
            if not remaining[k]:
                continue
            if strategy == "random":
                pick = int(queues[k].pop(0))
            else:
                left = np.fromiter(sorted(remaining[k]), dtype=np.int64)
                prio = adaptive_priority(None, seen, weights=fixed)[left]
                tb = draws[k][np.searchsorted(held[k], left)]
                pick = int(left[order_pairs(prio, tb)[0]])
            remaining[k].discard(pick)
            order.append((k, pick))
            seen[k, pick] = full[k, pick]
            revealed += 1
            if revealed in stops:
                rated = np.isfinite(seen).any(axis=0)
                target = -np.nanmean(seen[:, rated], axis=0)
                est = question_estimate(x[:, rated], target, question_kind=question_kind)
                with np.errstate(invalid="ignore"):
                    err = np.abs(est - final_est)
                widths.append((revealed, question_ci_width(
                    x[:, rated], target, question_kind=question_kind,
                    resamples=resamples, seed=seed),
                    float(np.nanmax(err)) if np.isfinite(err).any() else float("nan")))
    arr = np.array(widths, dtype=np.float64).reshape(-1, 3)
    return SimulationResult(strategy, seed, arr[:, 0].astype(np.int64), arr[:, 1], arr[:, 2],
                            np.array(order, dtype=np.int64).reshape(-1, 2))


def savings_summary(
    n_ratings: ArrayLike,
    random_width: ArrayLike,
    adaptive_width: ArrayLike,
    *,
    tolerance: float = 0.05,
    random_error: ArrayLike | None = None,
    adaptive_error: ArrayLike | None = None,
) -> dict[str, object]:
    """How many ratings adaptive needs to reach the random order's widths (mean curves).

    A curve reaches a width at the first checkpoint from which it stays at or below it.

    ``final_random_ci_width`` is the random curve's last width; both strategies reach it
    with all ratings, so the comparison is made at ``(1 + tolerance)`` times it, and at the
    width random has after a quarter, half and three quarters of the ratings.

    Args:
        n_ratings: ``(P,)`` checkpoints, ascending.
        random_width: ``(P,)`` mean CI width of the random order at each checkpoint.
        adaptive_width: ``(P,)`` same for adaptive.
        tolerance: Relative slack over the final width.
        random_error: ``(P,)`` mean ``abs_error`` of the random order (optional).
        adaptive_error: ``(P,)`` same for adaptive; with both, each checkpoint of
            ``at_random_checkpoints`` also gives both errors at that number of ratings.

    Returns:
        JSON-ready numbers (``None`` where a curve never reaches a target).
    """
    n = np.asarray(n_ratings, dtype=np.int64)
    rw = np.asarray(random_width, dtype=np.float64)
    aw = np.asarray(adaptive_width, dtype=np.float64)

    def first_reach(curve: NDArray[np.float64], target: float) -> int | None:
        # Reached = at or below the target from that checkpoint on: a noisy dip of the
        # curve (few pairs early on make the bootstrap CI erratic) does not count.
        above = np.flatnonzero(~(np.isfinite(curve) & (curve <= target + 1e-12)))
        start = 0 if not above.size else int(above[-1]) + 1
        return int(n[start]) if start < n.size else None

    final = float(rw[-1]) if rw.size else float("nan")
    target = final * (1.0 + tolerance)
    r_need, a_need = first_reach(rw, target), first_reach(aw, target)
    points = []
    for frac in (0.25, 0.5, 0.75):
        i = int(np.searchsorted(n, frac * n[-1])) if n.size else 0
        if i >= n.size or not np.isfinite(rw[i]):
            continue
        need = first_reach(aw, float(rw[i]))
        point: dict[str, object] = {
            "random_ratings": int(n[i]), "random_ci_width": float(rw[i]),
            "adaptive_ci_width": float(aw[i]), "adaptive_ratings": need,
            "saved": None if need is None else int(n[i]) - need}
        if random_error is not None and adaptive_error is not None:
            point["random_abs_error"] = float(np.asarray(random_error, dtype=float)[i])
            point["adaptive_abs_error"] = float(np.asarray(adaptive_error, dtype=float)[i])
        points.append(point)
    return {
        "total_ratings": int(n[-1]) if n.size else 0,
        "final_random_ci_width": final,
        "final_adaptive_ci_width": float(aw[-1]) if aw.size else float("nan"),
        "tolerance": tolerance,
        "target_ci_width": target,
        "random_ratings_to_target": r_need,
        "adaptive_ratings_to_target": a_need,
        "saved_to_target": (None if r_need is None or a_need is None else r_need - a_need),
        "at_random_checkpoints": points,
    }
