"""Krippendorff's alpha and ICC(2,1)/(2,k) of backend.analysis.agreement."""

from __future__ import annotations

import krippendorff
import numpy as np
import pytest

from radconcord.backend.analysis.agreement import (
    agreement_summary,
    complete_block,
    icc2,
    icc_from_reliability,
    krippendorff_alpha,
)

NAN = np.nan
# Krippendorff (2011), "Computing Krippendorff's alpha-reliability", section C: 4 observers x
# 12 units with missing values. Published: interval 0.849, ratio 0.797.
K2011 = np.array([
    [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
    [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
])
# Shrout & Fleiss (1979), Table 2: 6 targets x 4 judges. Published: ICC(2,1) = .29,
# ICC(2,4) = .62.
SF1979 = np.array([
    [9, 2, 5, 8],
    [6, 1, 3, 2],
    [8, 4, 6, 8],
    [7, 1, 2, 6],
    [10, 5, 6, 9],
    [6, 2, 4, 7],
], dtype=float)


def test_alpha_hand_worked_example():
    """Reference: Krippendorff (2011) worked example, published to 3 decimals (abs 5e-4),
    and the `krippendorff` package on the same data (abs 1e-12)."""
    assert krippendorff_alpha(K2011, "interval") == pytest.approx(0.849, abs=5e-4)
    assert krippendorff_alpha(K2011, "ratio") == pytest.approx(0.797, abs=5e-4)
    for level in ("interval", "ratio"):
        assert krippendorff_alpha(K2011, level) == pytest.approx(
            krippendorff.alpha(K2011, level_of_measurement=level), abs=1e-12
        )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("level", ["interval", "ratio"])
def test_alpha_matches_krippendorff_package_on_counts_with_missing(seed, level):
    """Reference: krippendorff.alpha(level_of_measurement=level) on error counts of 5 raters
    x 60 pairs with 30 % missing and correlated raters; abs 1e-12."""
    rng = np.random.default_rng(seed)
    truth = rng.poisson(2.0, 60)
    data = (truth + rng.poisson(0.7, (5, 60)) - rng.poisson(0.3, (5, 60))).clip(0)
    data = data.astype(float)
    data[rng.random(data.shape) < 0.3] = np.nan
    ours = krippendorff_alpha(data, level)
    assert ours == pytest.approx(krippendorff.alpha(data, level_of_measurement=level), abs=1e-12)
    assert 0.0 < ours < 1.0


def test_alpha_edge_cases():
    """Perfect agreement gives 1; a single value everywhere is undefined (NaN; the package
    raises); units with one rating are ignored; ratio alpha rejects negative values."""
    perfect = np.array([[0, 1, 2, 3], [0, 1, 2, 3]], dtype=float)
    assert krippendorff_alpha(perfect, "interval") == pytest.approx(1.0)
    assert krippendorff_alpha(perfect, "ratio") == pytest.approx(1.0)
    assert np.isnan(krippendorff_alpha(np.ones((3, 4))))
    assert np.isnan(krippendorff_alpha(np.array([[1.0, NAN], [NAN, 2.0]])))
    with pytest.raises(ValueError):
        krippendorff_alpha(np.array([[-1.0, 2.0], [1.0, 2.0]]), "ratio")
    with pytest.raises(ValueError):
        krippendorff_alpha(perfect, "nominal")


def test_icc_shrout_fleiss_table_2():
    """Reference: Shrout & Fleiss (1979) Table 4 values for the Table 2 data, published to 2
    decimals: ICC(2,1) = 0.29, ICC(2,4) = 0.62 (abs 5e-3)."""
    res = icc2(SF1979)
    assert res.icc2_1 == pytest.approx(0.29, abs=5e-3)
    assert res.icc2_k == pytest.approx(0.62, abs=5e-3)
    assert (res.n_targets, res.k) == (6, 4)


def test_icc_mean_squares_match_least_squares_anova():
    """Reference: two-way ANOVA mean squares from numpy.linalg.lstsq fits of nested design
    matrices (targets + judges) on the Shrout & Fleiss data; abs 1e-10."""
    x = SF1979
    n, k = x.shape
    y = x.ravel()
    rows = np.repeat(np.eye(n), k, axis=0)
    cols = np.tile(np.eye(k), (n, 1))
    ones = np.ones((n * k, 1))

    def sse(design):
        beta, *_ = np.linalg.lstsq(design, y, rcond=None)
        return ((y - design @ beta) ** 2).sum()

    sse_full = sse(np.hstack([ones, rows[:, 1:], cols[:, 1:]]))
    sse_no_rows = sse(np.hstack([ones, cols[:, 1:]]))
    sse_no_cols = sse(np.hstack([ones, rows[:, 1:]]))
    bms = (sse_no_rows - sse_full) / (n - 1)
    jms = (sse_no_cols - sse_full) / (k - 1)
    ems = sse_full / ((n - 1) * (k - 1))
    res = icc2(x)
    assert (res.bms, res.jms, res.ems) == pytest.approx((bms, jms, ems), abs=1e-10)
    expected_1 = (bms - ems) / (bms + (k - 1) * ems + k * (jms - ems) / n)
    assert res.icc2_1 == pytest.approx(expected_1, abs=1e-10)


def test_icc_rejects_incomplete_or_tiny_input():
    with pytest.raises(ValueError):
        icc2(np.array([[1.0, NAN], [2.0, 3.0]]))
    with pytest.raises(ValueError):
        icc2(np.array([[1.0, 2.0]]))


def test_complete_block_and_icc_on_missing_data():
    """The largest complete block is chosen (most units, then most raters) and the ICC on it
    equals icc2 on that sub-matrix."""
    data = np.full((3, 6), NAN)
    data[:2, :] = SF1979[:, :2].T  # raters 0, 1 rate all 6 targets
    data[2, :2] = [1, 2]  # rater 2 only the first two
    raters, units = complete_block(data)
    assert raters.tolist() == [0, 1] and units.tolist() == [2, 3, 4, 5]
    res = icc_from_reliability(data)
    assert res.icc2_1 == pytest.approx(icc2(SF1979[2:, :2]).icc2_1)
    assert icc_from_reliability(np.array([[1.0, NAN], [NAN, 2.0]])) is None


def test_agreement_summary_plain_data():
    s = agreement_summary(K2011)
    assert s["krippendorff_alpha_interval"] == pytest.approx(0.849, abs=5e-4)
    assert s["n_pairs_pairable"] == 11
    assert s["n_ratings"] == int(np.isfinite(K2011).sum())
    assert s["icc_k"] == 4 and s["icc_n_pairs"] == 8
