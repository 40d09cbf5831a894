"""Disagreement ranking, word diff and its safe HTML rendering.

Expected ranks are worked out by hand in each test (no call into the code under test).
"""

from __future__ import annotations

import html
import math
import re

import numpy as np
import pytest

from radconcord.backend.analysis.disagreement import (
    DiffOp,
    disagreement_scores,
    normalised_ranks,
    rank_disagreements,
    tokenize,
    word_diff,
)
from radconcord.webapp.components.diff import diff_html


def test_normalised_ranks_average_ties_and_keep_nan():
    r = normalised_ranks([10.0, np.nan, 30.0, 20.0, 20.0])
    # ranks 1, -, 4, 2.5, 2.5 over 4 values -> (rank - 1) / 3
    assert r[0] == 0.0 and math.isnan(r[1])
    assert r[2:] == pytest.approx([1.0, 0.5, 0.5])
    assert list(normalised_ranks([7.0])) == [0.5]
    assert normalised_ranks([]).size == 0


def test_scores_and_order_by_hand():
    metric = [0.9, 0.1, 0.5, 0.7]          # higher is better
    errors = [3.0, 0.0, 1.0, np.nan]      # pair 3 unrated
    # over pairs 0-2: metric ranks 1, 0, 0.5; -errors = -3, 0, -1 -> ranks 0, 1, 0.5
    scores = disagreement_scores(metric, errors, higher_is_better=True)
    assert scores[:3] == pytest.approx([1.0, 1.0, 0.0]) and math.isnan(scores[3])
    order, _ = rank_disagreements(metric, errors, higher_is_better=True)
    assert list(order) == [0, 1, 2, 3]  # tie 0/1 in input order, NaN last


def test_lower_is_better_is_negated():
    metric = [3.0, 0.0, 1.0]                # e.g. RadCliQ: lower is better
    errors = [3.0, 0.0, 1.0]
    assert list(disagreement_scores(metric, errors, higher_is_better=False)) == [0.0, 0.0, 0.0]
    assert list(disagreement_scores(metric, errors, higher_is_better=True)) == pytest.approx(
        [1.0, 1.0, 0.0])


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="equal length"):
        disagreement_scores([1.0, 2.0], [1.0], higher_is_better=True)


def test_tokenize_round_trips_and_splits_punctuation():
    text = "  Small left-sided effusion, 1.5 cm.\nNo pneumothorax. "
    tokens = tokenize(text)
    assert "".join(tokens) == text
    assert [t.strip() for t in tokens] == ["Small", "left-sided", "effusion", ",", "1", ".",
                                           "5", "cm", ".", "No", "pneumothorax", "."]
    assert tokenize("") == [] and tokenize("   ") == ["   "]


def test_word_diff_exact_runs():
    ops = word_diff("Small left pleural effusion.", "Large left  PLEURAL effusion and edema.")
    assert ops == [
        DiffOp("replace", "Small ", "Large "),
        DiffOp("equal", "left pleural effusion", "left  PLEURAL effusion "),
        DiffOp("insert", "", "and edema"),
        DiffOp("equal", ".", "."),
    ]


def test_diff_html_escapes_report_text():
    ref, cand = "<b>No</b> effusion.", "<script>alert(1)</script> effusion & edema."
    ops = word_diff(ref, cand)
    for side, text in (("reference", ref), ("candidate", cand)):
        out = diff_html(ops, side)
        assert "<script" not in out and "<b>" not in out
        inner = re.sub(r"<[^>]+>", "", out)  # drop our own div/span tags
        assert html.unescape(inner) == text
    assert "line-through" in diff_html(ops, "reference")
    with pytest.raises(ValueError):
        diff_html(ops, "both")
