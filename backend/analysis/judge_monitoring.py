"""Monitoring of the raters of a pairwise study: side bias, straight-lining, agreement.

The counts study has :mod:`backend.analysis.monitoring`; a pairwise study's answers are
judgements (which of two candidates is better, and a 1-5 rating of each), so its checks
differ. Inputs are plain data per rater (the service reads them): each *done* judgement with
its completion time, preference and both ratings. Per rater:

* **Preferences**: how often the rater chose A, B and tie.
* **Side bias**: which candidate is shown as A is drawn at random (seeded) for every
  comparison the app makes, so a rater without a side preference picks A in about half of
  the comparisons they decide (A or B; ties left out). The two-sided exact binomial test of
  ``A = 1/2`` (``scipy.stats.binomtest``) over those comparisons gives ``side_p``;
  ``side_p <`` :data:`SIDE_ALPHA` is flagged once the rater has decided
  :data:`MIN_DECIDED` of them. Imported comparisons keep their file's sides (RadPref: A is
  C1), which need not be random: they are left out of this test.
* **Straight-lining**: the longest run of consecutive identical answers (preference and both
  ratings) in completion order; flagged at :data:`STRAIGHT_RUN` or more.
* **Agreement with the others**: on the rater's done comparisons that another rater also
  did, the share where the rater's preference equals the other raters' (their plurality; a
  split is a tie, as in :func:`backend.analysis.preference.preference_from_votes`); needs
  :data:`MIN_SHARED` shared comparisons. A low robust z of it across raters (as in
  :mod:`backend.analysis.monitoring`) is flagged.

* **Time per comparison**: the median time on task (the Compare screen's tracker, as for
  pairs) over the done judgements that have any; judgements without time are counted apart.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from radconcord.backend.analysis import monitoring as mon
from radconcord.backend.analysis import preference as pref

#: A run of this many consecutive identical answers is flagged as straight-lining.
STRAIGHT_RUN = mon.STRAIGHT_RUN
#: ``side_p`` below this is flagged as a side bias.
SIDE_ALPHA = 0.01
#: Decided (A or B) comparisons needed before a side bias is flagged.
MIN_DECIDED = 10
#: Shared comparisons needed for the agreement with the others.
MIN_SHARED = mon.MIN_SHARED

NAN = float("nan")


@dataclass(frozen=True)
class Judged:
    """One done judgement of one rater.

    Attributes:
        comparison: The comparison's 1-based number (the label pages show).
        completed_at: When the rater marked it done.
        preference: ``A``, ``B`` or ``tie``.
        rating_a: The 1-5 rating of candidate A.
        rating_b: The 1-5 rating of candidate B.
        seconds: Time on task (0: none recorded).
        random_side: Whether which candidate is A was drawn at random (False: imported).
    """

    comparison: int
    completed_at: dt.datetime
    preference: str
    rating_a: int
    rating_b: int
    seconds: float = 0.0
    random_side: bool = True


@dataclass(frozen=True)
class JudgeInput:
    """One rater's judgements in a study.

    Attributes:
        rater: Username.
        done: The done judgements (any order; sorted by completion here).
        assigned: Comparisons assigned to the rater.
    """

    rater: str
    done: Sequence[Judged]
    assigned: int


@dataclass(frozen=True)
class JudgeMonitoring:
    """Monitoring of one rater of a pairwise study (NaN where undefined; notes say why).

    Attributes:
        rater: Username.
        assigned: Comparisons assigned.
        done: Comparisons done.
        n_a: Done comparisons where A was chosen.
        n_b: Where B was chosen.
        n_tie: Where the rater answered tie.
        side_decided: Comparisons with random sides the rater decided (A or B).
        share_a: Share of them where A was chosen.
        side_p: Two-sided exact binomial p-value of ``share_a = 1/2``.
        same_run: Longest run of consecutive identical answers (completion order).
        same_run_comparisons: The comparison numbers of that run.
        straight_lining: ``same_run >= threshold``.
        shared: Done comparisons another rater also did.
        agreement: Share of them where the rater's preference equals the others'.
        agreement_note: Why the agreement is undefined (``""`` when defined).
        agreement_z: Robust z of the agreement across raters (NaN when not computed).
        timed: Done judgements with any time on task.
        median_seconds: Median time on task over them (NaN when none).
        flags: Every flag in words.
    """

    rater: str
    assigned: int
    done: int
    n_a: int
    n_b: int
    n_tie: int
    side_decided: int
    share_a: float
    side_p: float
    same_run: int
    same_run_comparisons: tuple[int, ...]
    straight_lining: bool
    shared: int
    agreement: float
    agreement_note: str
    agreement_z: float
    timed: int
    median_seconds: float
    flags: tuple[str, ...]


def _ordered(done: Sequence[Judged]) -> list[Judged]:
    return sorted(done, key=lambda j: (j.completed_at, j.comparison))


def side_bias(n_a: int, n_b: int) -> float:
    """Two-sided exact binomial p-value of choosing A with probability 1/2 (NaN: none)."""
    if n_a + n_b == 0:
        return NAN
    return float(stats.binomtest(n_a, n_a + n_b, 0.5).pvalue)


def longest_same_run(done: Sequence[Judged]) -> tuple[int, ...]:
    """Comparison numbers of the longest run of identical answers, in completion order
    (the first such run on a tie; empty when nothing is done)."""
    best: list[Judged] = []
    run: list[Judged] = []
    for j in _ordered(done):
        key = (j.preference, j.rating_a, j.rating_b)
        if run and (run[-1].preference, run[-1].rating_a, run[-1].rating_b) == key:
            run.append(j)
        else:
            run = [j]
        if len(run) > len(best):
            best = list(run)
    return tuple(j.comparison for j in best)


def agreement_with_others(own: Mapping[int, str], others: Mapping[int, Sequence[str]]
                          ) -> tuple[int, float, str]:
    """``(shared, agreement, note)`` of one rater against the other raters' plurality."""
    shared = [c for c in own if others.get(c)]
    if len(shared) < MIN_SHARED:
        return len(shared), NAN, (f"{len(shared)} comparison(s) shared with other raters "
                                  f"(needs {MIN_SHARED})")
    theirs = pref.preference_from_votes([list(others[c]) for c in shared])
    mine = pref.preference_from_votes([[own[c]] for c in shared])
    return len(shared), float((theirs == mine).mean()), ""


def monitor_judges(raters: Sequence[JudgeInput], *, straight_run: int = STRAIGHT_RUN,
                   outlier_z: float = mon.OUTLIER_Z) -> list[JudgeMonitoring]:
    """Monitoring of every rater of a pairwise study, by username (see the module docstring).

    Args:
        raters: One entry per rater.
        straight_run: Identical answers in a row flagged as straight-lining (>= 2).
        outlier_z: ``|robust z|`` of the agreement across raters flagged when low (> 0).
    """
    answers: dict[int, dict[str, str]] = defaultdict(dict)
    for r in raters:
        for j in r.done:
            answers[j.comparison][r.rater] = j.preference
    partial = []
    for r in sorted(raters, key=lambda r: r.rater):
        own = {j.comparison: j.preference for j in r.done}
        others = {c: [p for name, p in answers[c].items() if name != r.rater] for c in own}
        shared, agreement, note = agreement_with_others(own, others)
        partial.append((r, shared, agreement, note))
    with_value = [p for p in partial if not math.isnan(p[2])]
    zs: dict[str, float] = {}
    if len(with_value) >= mon.MIN_RATERS_FOR_Z:
        for (r, *_), z in zip(with_value, mon.robust_z([p[2] for p in with_value]),
                              strict=True):
            zs[r.rater] = z
    out = []
    for r, shared, agreement, note in partial:
        n_a = sum(j.preference == "A" for j in r.done)
        n_b = sum(j.preference == "B" for j in r.done)
        n_tie = sum(j.preference == "tie" for j in r.done)
        side_a = sum(j.preference == "A" for j in r.done if j.random_side)
        decided = side_a + sum(j.preference == "B" for j in r.done if j.random_side)
        p = side_bias(side_a, decided - side_a)
        run = longest_same_run(r.done)
        z = zs.get(r.rater, NAN)
        seconds = [j.seconds for j in r.done if j.seconds > 0]
        flags = []
        if decided >= MIN_DECIDED and p < SIDE_ALPHA:
            flags.append(f"side bias: chose A in {side_a} of {decided} decided comparisons "
                         f"(binomial p = {p:.2g}; which candidate is A is random)")
        if len(run) >= straight_run:
            flags.append(f"straight-lining: the same answer {len(run)} times in a row "
                         f"(comparisons {mon.pair_list(list(run))})")
        if math.isfinite(z) and z < -outlier_z:
            flags.append(f"agreement with the others {agreement:.2f} is far below the other "
                         f"raters' (robust z {z:.1f})")
        out.append(JudgeMonitoring(
            rater=r.rater, assigned=r.assigned, done=len(r.done), n_a=n_a, n_b=n_b,
            n_tie=n_tie, side_decided=decided, share_a=side_a / decided if decided else NAN,
            side_p=p,
            same_run=len(run), same_run_comparisons=run,
            straight_lining=len(run) >= straight_run, shared=shared, agreement=agreement,
            agreement_note=note, agreement_z=z, timed=len(seconds),
            median_seconds=float(np.median(seconds)) if seconds else NAN,
            flags=tuple(flags)))
    return out


__all__ = [
    "MIN_DECIDED",
    "SIDE_ALPHA",
    "STRAIGHT_RUN",
    "JudgeInput",
    "JudgeMonitoring",
    "Judged",
    "agreement_with_others",
    "longest_same_run",
    "monitor_judges",
    "side_bias",
]
