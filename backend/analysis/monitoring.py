"""Rater monitoring for the study lead: pace, drift, straight-lining, agreement, outliers.

Inputs are plain data per rater (the service reads them): each *done* study pair with its
completion time, time on task (seconds, :mod:`backend.services.annotation.activity`: the rater's own
activity spans, unioned, idle gaps cut; 0 when none was recorded, e.g. imported ratings) and
total error count, plus the rater's time on all their study pairs. Training items and hidden
repeats are not inputs. Per rater:

* **Time per pair**: median, quartiles (numpy's linear interpolation) and IQR over the done
  pairs that have any time; *slow* outliers take more than ``Q3 + 3 IQR``, *fast* ones less
  than :data:`FAST_SECONDS` (3 s: too short to read two reports). Pairs without time are
  counted apart, never as fast.
* **Done per hour**: done pairs / hours of time on task on all the rater's study pairs (time
  spent on pairs not yet done is work too).
* **Drift**: in completion order, the mean total count of the first third of the done pairs
  and of the last third (``n // 3`` pairs each; needs 3 done pairs) and ``last - first``.
* **Straight-lining**: the longest run of consecutive all-zero done pairs in completion
  order; flagged at :data:`STRAIGHT_RUN` (8) or more.
* **Agreement with the others**: on the rater's done pairs that another rater also did, the
  Spearman correlation of the rater's total with the mean total of the other raters (needs 3
  shared pairs and variance on both sides) and the mean absolute difference.
* **Outliers across raters**: for median time per pair, Spearman agreement, mean absolute
  difference and drift, a robust z ``(x - median) / (1.4826 MAD)`` over the raters with a
  value (at least :data:`MIN_RATERS_FOR_Z`); when the MAD is 0 the mean absolute deviation
  times 1.2533 is the scale (Iglewicz & Hoaglin's modified z); all values equal gives no z.
  ``|z| > 3`` is flagged, with the reason in words: time per pair and drift on either side,
  agreement only when low and the absolute difference only when high. With fewer than
  :data:`MIN_RATERS_FOR_Z` raters with a done pair there is no such flag, and
  :func:`between_rater_note` says so in words instead of staying silent.
* **Absolute floors** (:class:`Floors`, the study's settings; issue 24): they flag one rater
  alone, with no other rater to compare with. A done pair whose time on task is under the
  minimum (the higher one when the pair shows a film) is implausibly fast; a rater with
  :data:`FLOOR_PAIRS` such pairs is flagged. The pace over any :data:`PACE_WINDOW`
  consecutive completions (by completion time, so a script that sends no time on task is
  caught as well) above the maximum flags the rater too (the time-on-task floor already
  bounds the pace of time on task). A scripted rater at a few seconds a pair
  is flagged by its 5th done pair at the latest.
* **Agreement with the expert**: on the rater's done training items (expert counts), the
  mean absolute difference of the totals and how many are within the qualification's
  ``max_error``; fewer than half within, from :data:`MIN_EXPERT_ITEMS` items, is flagged.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: Pairs done in less than this many seconds of time on task are "fast" outliers.
FAST_SECONDS = 3.0
#: Slow outliers take more than ``Q3 + SLOW_IQR * IQR``.
SLOW_IQR = 3.0
#: A run of this many consecutive all-zero done pairs is flagged as straight-lining.
STRAIGHT_RUN = 8
#: ``|robust z|`` above this across raters is flagged.
OUTLIER_Z = 3.0
#: Raters with a value needed before a robust z is computed.
MIN_RATERS_FOR_Z = 3
MIN_SHARED = 3
#: Done pairs under the time floor before a rater is flagged (one or two hurried pairs of
#: an honest rater are not).
FLOOR_PAIRS = 3
#: Consecutive completions over which the pace (pairs per hour) is measured.
PACE_WINDOW = 5
#: Done training items before agreement with the expert can flag a rater.
MIN_EXPERT_ITEMS = 2
# Consistency constants: MAD and mean absolute deviation as estimates of a normal sigma.
_MAD_SCALE = 1.4826
_MEANAD_SCALE = 1.2533

NAN = float("nan")


@dataclass(frozen=True)
class DoneItem:
    """One done study pair of one rater.

    Attributes:
        pair: The pair's 1-based number (the label every page shows).
        completed_at: When the rater marked it done.
        seconds: Time on task (0: none recorded).
        total: Total error count (all twelve cells).
    """

    pair: int
    completed_at: dt.datetime
    seconds: float
    total: float
    has_film: bool = False


@dataclass(frozen=True)
class Floors:
    """Absolute floors (study settings ``qc_*``; 0 turns one off).

    Attributes:
        min_seconds: Fewest plausible seconds of time on task per pair (text only).
        min_seconds_film: The same for a pair that shows a film.
        max_per_hour: Most plausible pairs per hour.
    """

    min_seconds: float = 10.0
    min_seconds_film: float = 20.0
    max_per_hour: float = 180.0

    def minimum(self, item: DoneItem) -> float:
        """The time floor of one done pair."""
        return self.min_seconds_film if item.has_film else self.min_seconds


@dataclass(frozen=True)
class ExpertItem:
    """One done training item: the rater's total and the expert's."""

    rater_total: float
    expert_total: float


@dataclass(frozen=True)
class RaterInput:
    """One rater's work in a study.

    Attributes:
        rater: Username.
        done: The done study pairs (any order; sorted by completion here).
        assigned: Study pairs assigned to the rater.
        time_seconds: Time on task over all the rater's study pairs, done or not.
        training: The rater's done training items with the expert's answer.
        timed: False for ratings that were not entered through the rating screen
            (constructed demo ratings): their completion times say nothing about a pace,
            so the absolute floors are not applied; every other check is.
    """

    rater: str
    done: Sequence[DoneItem]
    assigned: int
    time_seconds: float
    training: Sequence[ExpertItem] = ()
    timed: bool = True


@dataclass(frozen=True)
class Outlier:
    """A value of one rater far from the other raters'.

    Attributes:
        measure: ``time_per_pair``, ``agreement``, ``abs_diff`` or ``drift``.
        z: The robust z.
        reason: The flag in words.
    """

    measure: str
    z: float
    reason: str


@dataclass(frozen=True)
class RaterMonitoring:
    """Monitoring of one rater (NaN where a value is undefined; the ``*_note`` says why).

    Attributes:
        rater: Username.
        assigned: Study pairs assigned.
        done: Study pairs done.
        seconds: Time on task of each done pair with time, in completion order.
        timed_pairs: Done pairs with any time on task.
        untimed_pairs: Done pairs without time on task.
        median_seconds: Median time per pair.
        q1_seconds: First quartile.
        q3_seconds: Third quartile.
        iqr_seconds: ``q3 - q1``.
        slow_limit_seconds: ``q3 + 3 IQR``.
        slow_pairs: Pair numbers above the slow limit.
        fast_pairs: Pair numbers under :data:`FAST_SECONDS`.
        time_seconds: Time on task on all the rater's study pairs.
        done_per_hour: Done pairs per hour of time on task.
        drift_n: Pairs in each third.
        drift_first: Mean total count of the first third (completion order).
        drift_last: Mean total count of the last third.
        drift: ``drift_last - drift_first``.
        drift_note: Why drift is undefined (``""`` when defined).
        zero_run: Longest run of consecutive all-zero done pairs.
        zero_run_pairs: The pair numbers of that run, in completion order.
        straight_lining: ``zero_run >= threshold``.
        shared_pairs: Done pairs another rater also did.
        spearman: Spearman rho of the rater's total vs the others' mean total.
        abs_diff: Mean absolute difference from the others' mean total.
        agreement_note: Why the agreement is undefined (``""`` when defined).
        outliers: Robust-z outliers across raters.
        flags: Every flag in words (straight-lining, outliers, fast pairs).
    """

    rater: str
    assigned: int
    done: int
    seconds: tuple[float, ...]
    timed_pairs: int
    untimed_pairs: int
    median_seconds: float
    q1_seconds: float
    q3_seconds: float
    iqr_seconds: float
    slow_limit_seconds: float
    slow_pairs: tuple[int, ...]
    fast_pairs: tuple[int, ...]
    time_seconds: float
    done_per_hour: float
    drift_n: int
    drift_first: float
    drift_last: float
    drift: float
    drift_note: str
    zero_run: int
    zero_run_pairs: tuple[int, ...]
    straight_lining: bool
    shared_pairs: int
    spearman: float
    abs_diff: float
    agreement_note: str
    outliers: tuple[Outlier, ...]
    flags: tuple[str, ...]
    below_floor_pairs: tuple[int, ...] = ()
    max_pace_per_hour: float = NAN
    expert_items: int = 0
    expert_within: int = 0
    expert_abs_diff: float = NAN


@dataclass(frozen=True)
class TimeStats:
    """Time per pair of one rater (see :func:`time_stats`)."""

    median: float
    q1: float
    q3: float
    iqr: float
    slow_limit: float
    slow_pairs: tuple[int, ...]
    fast_pairs: tuple[int, ...]
    timed: int
    untimed: int


def time_stats(items: Sequence[DoneItem]) -> TimeStats:
    """Median, quartiles and outlier pairs of the time per pair.

    Args:
        items: Done pairs; those with ``seconds <= 0`` have no time and are counted apart.
    """
    timed = [i for i in items if i.seconds > 0 and math.isfinite(i.seconds)]
    untimed = len(items) - len(timed)
    if not timed:
        return TimeStats(NAN, NAN, NAN, NAN, NAN, (), (), 0, untimed)
    secs = np.array([i.seconds for i in timed], dtype=np.float64)
    q1, median, q3 = (float(v) for v in np.percentile(secs, [25, 50, 75]))
    iqr = q3 - q1
    limit = q3 + SLOW_IQR * iqr
    return TimeStats(
        median=median, q1=q1, q3=q3, iqr=iqr, slow_limit=limit,
        slow_pairs=tuple(i.pair for i in timed if i.seconds > limit),
        fast_pairs=tuple(i.pair for i in timed if i.seconds < FAST_SECONDS),
        timed=len(timed), untimed=untimed)


def completion_order(items: Sequence[DoneItem]) -> list[DoneItem]:
    """Done pairs by completion time (ties by pair number, so the order is stable)."""
    return sorted(items, key=lambda i: (i.completed_at, i.pair))


def drift(totals: Sequence[float]) -> tuple[int, float, float, str]:
    """Mean total of the first and last third of totals in completion order.

    Args:
        totals: Total counts in completion order.

    Returns:
        ``(n per third, first mean, last mean, note)``; NaN means and a note when fewer than
        three pairs are done.
    """
    k = len(totals) // 3
    if k == 0:
        return 0, NAN, NAN, f"needs at least 3 done pairs, got {len(totals)}"
    values = np.asarray(totals, dtype=np.float64)
    return k, float(values[:k].mean()), float(values[-k:].mean()), ""


def longest_zero_run(totals: Sequence[float]) -> tuple[int, int]:
    """Longest run of consecutive zero totals.

    Args:
        totals: Total counts in completion order.

    Returns:
        ``(length, start index)``; ``(0, -1)`` when no total is zero. The earliest of equally
        long runs is reported.
    """
    best, best_start, run, start = 0, -1, 0, 0
    for index, value in enumerate(totals):
        if value == 0:
            if run == 0:
                start = index
            run += 1
            if run > best:
                best, best_start = run, start
        else:
            run = 0
    return best, best_start


def agreement_with_others(own: Mapping[int, float], others: Mapping[int, float]
                          ) -> tuple[int, float, float, str]:
    """Spearman rho and mean absolute difference of a rater vs the others' mean.

    Args:
        own: ``pair -> the rater's total``.
        others: ``pair -> mean total of the other raters`` (pairs nobody else did absent).

    Returns:
        ``(shared pairs, rho, mean absolute difference, note)``.
    """
    shared = sorted(set(own) & set(others))
    if not shared:
        return 0, NAN, NAN, "no pair done by another rater too"
    a = np.array([own[p] for p in shared], dtype=np.float64)
    b = np.array([others[p] for p in shared], dtype=np.float64)
    diff = float(np.mean(np.abs(a - b)))
    if len(shared) < MIN_SHARED:
        return len(shared), NAN, diff, (f"Spearman needs at least {MIN_SHARED} shared "
                                        f"pairs, got {len(shared)}")
    if np.all(a == a[0]) or np.all(b == b[0]):
        who = "this rater's" if np.all(a == a[0]) else "the other raters'"
        return len(shared), NAN, diff, f"Spearman undefined: {who} totals are all equal"
    rho = float(stats.spearmanr(a, b).statistic)
    return len(shared), rho, diff, ""


def robust_z(values: Sequence[float]) -> list[float]:
    """Robust z of each value among the finite ones (NaN where missing or undefined).

    ``(x - median) / (1.4826 MAD)``; when the MAD is 0, ``1.2533 x`` the mean absolute
    deviation from the median is the scale; when that is 0 too (all equal), every z is NaN.
    Needs :data:`MIN_RATERS_FOR_Z` finite values.
    """
    x = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(x)
    out = [NAN] * x.size
    if finite.sum() < MIN_RATERS_FOR_Z:
        return out
    vals = x[finite]
    med = float(np.median(vals))
    dev = np.abs(vals - med)
    scale = _MAD_SCALE * float(np.median(dev))
    if scale == 0.0:
        scale = _MEANAD_SCALE * float(np.mean(dev))
    if scale == 0.0:
        return out
    for index in np.flatnonzero(finite):
        out[int(index)] = float((x[index] - med) / scale)
    return out


def max_pace(ordered: Sequence[DoneItem], window: int = PACE_WINDOW) -> float:
    """Most pairs per hour over any ``window`` consecutive completions (completion order);
    NaN with fewer done pairs, infinite when a window took no time at all."""
    if len(ordered) < window:
        return NAN
    times = [i.completed_at.timestamp() for i in ordered]
    spans = [times[k + window - 1] - times[k] for k in range(len(times) - window + 1)]
    shortest = min(spans)
    return math.inf if shortest <= 0 else (window - 1) * 3600.0 / shortest


def below_floor(ordered: Sequence[DoneItem], floors: Floors) -> tuple[int, ...]:
    """Pair numbers done in less time on task than their floor (pairs without time are not:
    the pace catches a script that sends none)."""
    return tuple(i.pair for i in ordered
                 if i.seconds > 0 and floors.minimum(i) > 0 and i.seconds < floors.minimum(i))


def expert_agreement(items: Sequence[ExpertItem], max_error: float) -> tuple[int, int, float]:
    """``(items, within max_error, mean |rater - expert|)`` of a rater's training items."""
    if not items:
        return 0, 0, NAN
    diffs = [abs(float(i.rater_total) - float(i.expert_total)) for i in items]
    return len(diffs), sum(1 for d in diffs if d <= max_error), float(np.mean(diffs))


def between_rater_note(raters: Sequence[RaterMonitoring]) -> str:
    """Why between-rater flags (robust z, agreement) are off, or ``""`` when they are on."""
    n = sum(1 for r in raters if r.done)
    if n >= MIN_RATERS_FOR_Z:
        return ""
    return (f"too few raters for between-rater flags (n < {MIN_RATERS_FOR_Z}): {n} rater"
            f"{'s' if n != 1 else ''} with done pairs, so no rater is compared with the others;"
            " the absolute floors and the expert's training items still apply")


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.0f} s" if abs(value) >= 10 else f"{value:.1f} s"
    return f"{value:.2f}"


def _pace(value: float) -> str:
    return "more than 3600" if math.isinf(value) else f"{value:.0f}"


def pair_list(pairs: Sequence[int], limit: int = 8) -> str:
    """``3, 1, 2`` or, for a long run, the first pairs, an ellipsis and the last one."""
    if len(pairs) <= limit:
        return ", ".join(str(p) for p in pairs)
    return ", ".join(str(p) for p in pairs[:limit - 1]) + f", ..., {pairs[-1]}"


_MEASURES = (
    # (field, name in words, unit, sides flagged): an unusually high agreement or a small
    # difference from the others is no warning sign, so those are flagged on one side only.
    ("median_seconds", "median time per pair", "s", "both"),
    ("spearman", "agreement with the other raters (Spearman)", "", "low"),
    ("abs_diff", "mean absolute difference from the other raters", "", "high"),
    ("drift", "drift (last third minus first third, mean total count)", "", "both"),
)
_MEASURE_KEYS = {"median_seconds": "time_per_pair", "spearman": "agreement",
                 "abs_diff": "abs_diff", "drift": "drift"}


def monitor(raters: Sequence[RaterInput], *, straight_run: int = STRAIGHT_RUN,
            outlier_z: float = OUTLIER_Z, floors: Floors | None = None,
            expert_max_error: float = 1.0) -> tuple[RaterMonitoring, ...]:
    """Monitoring of every rater of a study (see the module docstring for the rules).

    Args:
        raters: Each rater's done study pairs and time.
        straight_run: Zero-run length flagged as straight-lining (at least 2).
        outlier_z: ``|robust z|`` above which a rater is an outlier (positive).
        floors: Absolute floors (``None``: off).
        expert_max_error: Largest ``|rater - expert|`` total that agrees on a training item.

    Returns:
        One entry per rater, in the order given.

    Raises:
        ValueError: a bad threshold or a rater named twice.
    """
    if straight_run < 2:
        raise ValueError(f"straight_run must be at least 2, got {straight_run}")
    if not outlier_z > 0:
        raise ValueError(f"outlier_z must be positive, got {outlier_z}")
    names = [r.rater for r in raters]
    if len(set(names)) != len(names):
        raise ValueError("a rater is listed twice: " + ", ".join(
            sorted({n for n in names if names.count(n) > 1})))
    totals = {r.rater: {i.pair: float(i.total) for i in r.done} for r in raters}
    partial: list[dict[str, object]] = []
    for r in raters:
        ordered = completion_order(r.done)
        seq = [float(i.total) for i in ordered]
        times = time_stats(ordered)
        k, first, last, drift_note = drift(seq)
        run, start = longest_zero_run(seq)
        others: dict[int, float] = {}
        for pair in totals[r.rater]:
            vals = [t[pair] for name, t in totals.items() if name != r.rater and pair in t]
            if vals:
                others[pair] = float(np.mean(vals))
        shared, rho, diff, agreement_note = agreement_with_others(totals[r.rater], others)
        hours = r.time_seconds / 3600.0
        partial.append(dict(
            rater=r.rater, assigned=int(r.assigned), done=len(ordered),
            seconds=tuple(float(i.seconds) for i in ordered if i.seconds > 0),
            timed_pairs=times.timed, untimed_pairs=times.untimed,
            median_seconds=times.median, q1_seconds=times.q1, q3_seconds=times.q3,
            iqr_seconds=times.iqr, slow_limit_seconds=times.slow_limit,
            slow_pairs=times.slow_pairs, fast_pairs=times.fast_pairs,
            time_seconds=float(r.time_seconds),
            done_per_hour=len(ordered) / hours if hours > 0 else NAN,
            drift_n=k, drift_first=first, drift_last=last,
            drift=last - first if k else NAN, drift_note=drift_note,
            zero_run=run,
            zero_run_pairs=tuple(i.pair for i in ordered[start:start + run]) if run else (),
            straight_lining=run >= straight_run,
            shared_pairs=shared, spearman=rho, abs_diff=diff, agreement_note=agreement_note,
        ))
    zs = {field: robust_z([float(p[field]) for p in partial]) for field, *_ in _MEASURES}
    out: list[RaterMonitoring] = []
    for index, p in enumerate(partial):
        outliers: list[Outlier] = []
        for field, words, unit, sides in _MEASURES:
            z = zs[field][index]
            if not math.isfinite(z) or abs(z) <= outlier_z:
                continue
            if sides == "both" or (sides == "high") == (z > 0):
                others = [float(q[field]) for j, q in enumerate(partial)
                          if j != index and math.isfinite(float(q[field]))]
                side = "far above" if z > 0 else "far below"
                outliers.append(Outlier(
                    measure=_MEASURE_KEYS[field], z=z,
                    reason=f"{words} {_fmt(float(p[field]), unit)} is {side} the other "
                           f"raters' (median {_fmt(float(np.median(others)), unit)}; robust z "
                           f"{z:+.1f})"))
        flags: list[str] = []
        if p["straight_lining"]:
            flags.append(f"straight-lining: {p['zero_run']} consecutive all-zero pairs "
                         f"(in completion order: pairs {pair_list(p['zero_run_pairs'])}; "
                         f"flagged from {straight_run})")
        flags.extend(o.reason for o in outliers)
        fast = p["fast_pairs"]
        if fast:
            flags.append(f"{len(fast)} pair{'s' if len(fast) != 1 else ''} done in under "
                         f"{FAST_SECONDS:g} s of time on task")
        r_in = raters[index]
        ordered = completion_order(r_in.done)
        low: tuple[int, ...] = ()
        pace = max_pace(ordered) if r_in.timed else NAN
        if floors is not None and r_in.timed:
            low = below_floor(ordered, floors)
            if len(low) >= FLOOR_PAIRS:
                flags.append(
                    f"implausibly fast: {len(low)} of {len(ordered)} done pairs under the "
                    f"minimum time per pair ({floors.min_seconds:g} s; "
                    f"{floors.min_seconds_film:g} s with a film): pairs {pair_list(low)}")
            if floors.max_per_hour > 0:
                if not math.isnan(pace) and pace > floors.max_per_hour:
                    flags.append(
                        f"implausible pace: {_pace(pace)} pairs per hour over "
                        f"{PACE_WINDOW} consecutive pairs (by completion time; maximum "
                        f"{floors.max_per_hour:g})")
        n_exp, within, exp_diff = expert_agreement(r_in.training, expert_max_error)
        if n_exp >= MIN_EXPERT_ITEMS and within * 2 < n_exp:
            flags.append(f"disagrees with the expert: {within} of {n_exp} training items "
                         f"within {expert_max_error:g} of the expert's total (mean difference "
                         f"{exp_diff:.1f})")
        out.append(RaterMonitoring(**p, outliers=tuple(outliers), flags=tuple(flags),
                                   below_floor_pairs=low, max_pace_per_hour=pace,
                                   expert_items=n_exp, expert_within=within,
                                   expert_abs_diff=exp_diff))
    return tuple(out)


__all__ = [
    "FAST_SECONDS",
    "FLOOR_PAIRS",
    "MIN_EXPERT_ITEMS",
    "PACE_WINDOW",
    "ExpertItem",
    "Floors",
    "below_floor",
    "between_rater_note",
    "expert_agreement",
    "max_pace",
    "OUTLIER_Z",
    "SLOW_IQR",
    "STRAIGHT_RUN",
    "DoneItem",
    "Outlier",
    "RaterInput",
    "RaterMonitoring",
    "TimeStats",
    "agreement_with_others",
    "completion_order",
    "drift",
    "longest_zero_run",
    "monitor",
    "pair_list",
    "robust_z",
    "time_stats",
]
