"""Intra-rater agreement on hidden repeats: exact rate, ICC(2,1) and quadratic-weighted kappa,
each checked against a computation by hand (written out in the test), and the undefined cases.

The ICC follows Shrout & Fleiss (1979), case 2 (two-way random, absolute agreement, single
measure), the formula pingouin reports as ICC2; pingouin is not installed here, so the mean
squares are worked out by hand. Kappa's weights are the squared count distance; scikit-learn's
``cohen_kappa_score(weights="quadratic", labels=range(min, max + 1))`` is the same statistic
(a dev requirement) is compared on random counts (tolerance 1e-12).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from radconcord.backend.analysis import intra_rater as ir


def grid(cells: dict[tuple[int, int], int]) -> np.ndarray:
    g = np.zeros((6, 2))
    for (category, significant), n in cells.items():
        g[category - 1, significant] = n
    return g


def test_icc_by_hand():
    """Targets (0,0), (1,2), (2,2), (1,0): grand mean 1; row means 0, 1.5, 2, 0.5 so
    SS_rows = 2 (1 + .25 + 1 + .25) = 5; column means 1 and 1 so SS_cols = 0; SS_total = 6,
    SS_err = 1. BMS = 5/3, JMS = 0, EMS = 1/3; ICC(2,1) = (4/3) / (5/3 + 1/3 + 2(0 - 1/3)/4)
    = (4/3) / (11/6) = 8/11."""
    value, note = ir.icc_2_1([0, 1, 2, 1], [0, 2, 2, 0])
    assert value == pytest.approx(8 / 11, abs=1e-12)
    assert note == ""


def test_icc_is_absolute_agreement():
    """A repeat that is always one count higher: rows (1,2), (2,3), (3,4); SS_rows = 4,
    SS_cols = 1.5, SS_err = 0, so BMS = 2, JMS = 1.5, EMS = 0 and ICC(2,1) = 2 / (2 + 2 * 1.5
    / 3) = 2/3 (a consistency ICC would be 1: the shift counts as disagreement)."""
    value, _ = ir.icc_2_1([1, 2, 3], [2, 3, 4])
    assert value == pytest.approx(2 / 3, abs=1e-12)


def test_quadratic_kappa_by_hand():
    """a = (0, 1, 2, 1), b = (0, 2, 2, 0): mean squared difference 2/4 = 0.5; over all 16
    (a_i, b_j) combinations the squared differences sum to 8 + 4 + 8 + 4 = 24, mean 1.5;
    kappa = 1 - 0.5 / 1.5 = 2/3. Shifted by one: a = (1, 2, 3), b = (2, 3, 4): observed 1,
    expected (14 + 5 + 2) / 9 = 7/3, kappa = 1 - 3/7 = 4/7."""
    value, note = ir.quadratic_kappa([0, 1, 2, 1], [0, 2, 2, 0])
    assert value == pytest.approx(2 / 3, abs=1e-12) and note == ""
    assert ir.quadratic_kappa([1, 2, 3], [2, 3, 4])[0] == pytest.approx(4 / 7, abs=1e-12)


def test_kappa_weights_are_count_distances_like_sklearn_with_all_labels():
    rng = np.random.default_rng(4)
    for _ in range(20):
        a = rng.integers(0, 6, size=15)
        b = np.clip(a + rng.integers(-2, 3, size=15), 0, 7)
        labels = list(range(int(min(a.min(), b.min())), int(max(a.max(), b.max())) + 1))
        ours, _ = ir.quadratic_kappa(a, b)
        assert ours == pytest.approx(
            cohen_kappa_score(a, b, weights="quadratic", labels=labels), abs=1e-12)


def test_exact_rate_and_undefined_cases_give_nan_with_a_reason():
    assert ir.exact_agreement([1, 0, 2, 3], [1, 1, 2, 0]) == 0.5
    assert math.isnan(ir.exact_agreement([], []))
    value, note = ir.icc_2_1([2], [2])
    assert math.isnan(value) and note == "needs at least 2 repeats, got 1"
    value, note = ir.quadratic_kappa([1, 1, 1], [1, 1, 1])
    assert math.isnan(value) and note == "every count is 1 in both showings: no variance"
    value, note = ir.icc_2_1([0, 0, 0], [0, 0, 0])
    assert math.isnan(value) and "no variance" in note
    # Both constant but different: kappa is 0 (no agreement beyond chance), ICC is 0 too.
    assert ir.quadratic_kappa([1, 1], [2, 2])[0] == pytest.approx(0.0)


def test_rater_agreement_per_scope():
    first = [grid({(1, 1): 1, (3, 0): 2}), grid({}), grid({(2, 1): 1}), grid({(6, 0): 1})]
    second = [grid({(1, 1): 1, (3, 0): 1}), grid({}), grid({(2, 0): 1}), grid({(6, 0): 1})]
    result = ir.rater_agreement("rita", first, second)
    assert result.rater == "rita" and result.n_repeats == 4
    # Cells identical in pairs 2 and 4 only.
    assert result.exact_all_cells == 0.5
    assert [s.scope for s in result.scopes] == list(ir.SCOPES)
    total = result.scope("total")
    # totals: (3, 0, 1, 1) vs (2, 0, 1, 1)
    assert total.n == 4 and total.exact == 0.75 and total.mean_abs_diff == 0.25
    sig = result.scope("significant")  # (1, 0, 1, 0) vs (1, 0, 0, 0)
    assert sig.exact == 0.75
    cat2 = result.scope("category 2")  # the significance changed, the category count did not
    assert cat2.exact == 1.0
    cat4 = result.scope("category 4")  # never used: undefined, with the reason
    assert math.isnan(cat4.icc2_1) and cat4.icc_note.startswith("every count is 0")
    assert math.isnan(cat4.kappa) and cat4.exact == 1.0
    # The total scope by hand: kappa = 1 - mean((a-b)^2) / mean over all (a_i - b_j)^2.
    a, b = np.array([3, 0, 1, 1]), np.array([2, 0, 1, 1])
    expected = 1 - np.mean((a - b) ** 2) / np.mean((a[:, None] - b[None, :]) ** 2)
    assert total.kappa == pytest.approx(expected, abs=1e-12)


def test_no_repeats_and_bad_input():
    empty = ir.rater_agreement("ravi", [], [])
    assert empty.n_repeats == 0 and math.isnan(empty.exact_all_cells)
    assert all(s.n == 0 and math.isnan(s.icc2_1) and s.icc_note for s in empty.scopes)
    with pytest.raises(ValueError, match="1 first showings but 2 repeats"):
        ir.rater_agreement("x", [grid({})], [grid({}), grid({})])
    with pytest.raises(ValueError, match="non-negative whole numbers"):
        ir.rater_agreement("x", [grid({(1, 0): -1})], [grid({})])
    with pytest.raises(ValueError, match="scope must be one of"):
        ir.scope_values([grid({})], "category 7")
