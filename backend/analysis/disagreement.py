"""Where a metric and the radiologists disagree most, pair by pair; word-level report diffs.

Ranking. For one metric key, both the metric (oriented so that higher means better) and the
raters' mean error count (negated, so that higher means better too) are turned into
normalised ranks over the pairs where both are defined: average ranks for ties, scaled to
``[0, 1]`` by ``(rank - 1) / (m - 1)`` for ``m`` such pairs. A pair's disagreement is the
absolute difference of its two normalised ranks: 0 when the metric places it exactly where
the raters do, 1 when the metric calls the best pair the worst (or the reverse). Pairs with a
missing metric value or no counted rating get NaN and sort last.

Diff. Reports are split into word tokens (letters/digits, with inner hyphens, apostrophes or
slashes) and single punctuation marks, each token keeping the whitespace that follows it so a
rendering reproduces the original text exactly. ``difflib.SequenceMatcher`` compares the
lowercased tokens without their whitespace, so re-spacing or re-capitalising a word is not
reported as a change.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import rankdata

from radconcord.backend.analysis.stats import orient

__all__ = [
    "DiffOp",
    "disagreement_scores",
    "normalised_ranks",
    "rank_disagreements",
    "tokenize",
    "word_diff",
]

_TOKEN = re.compile(r"\w+(?:[-'/]\w+)*|[^\w\s]")


def normalised_ranks(values: ArrayLike) -> NDArray[np.float64]:
    """Average ranks of the finite values scaled to ``[0, 1]``; NaN stays NaN.

    Args:
        values: 1-D values (NaN allowed).

    Returns:
        ``(rank - 1) / (m - 1)`` for the ``m`` finite values (``0.5`` for all of them when
        ``m == 1``: one value is neither best nor worst).
    """
    arr = np.asarray(values, dtype=np.float64)
    out = np.full(arr.shape, np.nan)
    ok = np.isfinite(arr)
    m = int(ok.sum())
    if m == 1:
        out[ok] = 0.5
    elif m > 1:
        out[ok] = (rankdata(arr[ok], method="average") - 1.0) / (m - 1)
    return out


def disagreement_scores(
    metric_values: ArrayLike, mean_errors: ArrayLike, *, higher_is_better: bool
) -> NDArray[np.float64]:
    """Per-pair ``|rank(metric, oriented) - rank(-mean errors)|`` on normalised ranks.

    Ranks are taken over the pairs where both inputs are finite; other pairs get NaN.

    Args:
        metric_values: Raw metric values per pair (NaN where undefined).
        mean_errors: Raters' mean error count per pair (NaN where nobody counted).
        higher_is_better: The metric's direction.

    Raises:
        ValueError: when the two inputs differ in length.
    """
    x = orient(metric_values, higher_is_better)
    y = -np.asarray(mean_errors, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(
            f"metric values and mean errors must be 1-D of equal length, got {x.shape} and"
            f" {y.shape}"
        )
    both = np.isfinite(x) & np.isfinite(y)
    out = np.full(x.shape, np.nan)
    if both.any():
        out[both] = np.abs(normalised_ranks(x[both]) - normalised_ranks(y[both]))
    return out


def rank_disagreements(
    metric_values: ArrayLike, mean_errors: ArrayLike, *, higher_is_better: bool
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Pair indices ordered from the largest disagreement down, and the scores.

    Ties keep the input order; pairs with a NaN score come last, in input order.

    Args:
        metric_values: Raw metric values per pair.
        mean_errors: Raters' mean error count per pair.
        higher_is_better: The metric's direction.

    Returns:
        ``(order, scores)``: indices into the inputs and the per-pair scores (input order).
    """
    scores = disagreement_scores(metric_values, mean_errors, higher_is_better=higher_is_better)
    key = np.where(np.isfinite(scores), -scores, np.inf)
    order = np.argsort(key, kind="stable").astype(np.int64)
    return order, scores


@dataclass(frozen=True)
class DiffOp:
    """One run of a word-level diff.

    Attributes:
        op: ``"equal"``, ``"delete"`` (only in the reference), ``"insert"`` (only in the
            candidate) or ``"replace"``.
        a_text: The run's text in the reference (empty for ``insert``), whitespace included.
        b_text: The run's text in the candidate (empty for ``delete``).
    """

    op: str
    a_text: str
    b_text: str


def tokenize(text: str) -> list[str]:
    """Split ``text`` into word/punctuation tokens that each carry their trailing whitespace.

    ``"".join(tokenize(text)) == text`` always holds (leading whitespace goes with the first
    token; text without any token is one token).
    """
    starts = [m.start() for m in _TOKEN.finditer(text)]
    if not starts:
        return [text] if text else []
    starts[0] = 0
    bounds = [*starts, len(text)]
    return [text[bounds[i] : bounds[i + 1]] for i in range(len(starts))]


def word_diff(reference: str, candidate: str) -> list[DiffOp]:
    """Word-level diff of two reports (see the module docstring).

    Args:
        reference: The reference report.
        candidate: The candidate report.

    Returns:
        Runs in text order; joining ``a_text`` gives the reference and joining ``b_text``
        gives the candidate.
    """
    a, b = tokenize(reference), tokenize(candidate)
    matcher = difflib.SequenceMatcher(
        None, [t.strip().lower() for t in a], [t.strip().lower() for t in b], autojunk=False
    )
    return [
        DiffOp(tag, "".join(a[i1:i2]), "".join(b[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]
