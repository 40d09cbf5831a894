"""RadCliQ refit (numpy StandardScaler + LinearRegression) against scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.linear_model import LinearRegression
from sklearn.preprocessing import StandardScaler

from radconcord.backend.analysis.refit import (
    RADCLIQ_INPUTS,
    LinearModel,
    fit_scaled_linear,
    kfold_indices,
    r_squared,
    refit,
)


def _data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    errors = rng.poisson(2.0, n).astype(float)
    x = np.column_stack([
        1 / (1 + errors) + rng.normal(scale=0.2, size=n),
        0.6 - 0.05 * errors + rng.normal(scale=0.1, size=n),
        rng.uniform(size=n),
        rng.uniform(size=n) ** 2,
    ])
    return x, errors


def _sklearn(x, y):
    scaler = StandardScaler().fit(x)
    reg = LinearRegression().fit(scaler.transform(x), y)
    return scaler, reg


def test_fit_matches_sklearn():
    """Reference: sklearn StandardScaler + LinearRegression; coefficients, intercept, scaler
    parameters, predictions and R^2 to abs 1e-10."""
    x, y = _data()
    model = fit_scaled_linear(x, y)
    scaler, reg = _sklearn(x, y)
    assert model.mean == pytest.approx(scaler.mean_, abs=1e-12)
    assert model.scale == pytest.approx(scaler.scale_, abs=1e-12)
    assert model.coef == pytest.approx(reg.coef_, abs=1e-10)
    assert model.intercept == pytest.approx(reg.intercept_, abs=1e-10)
    pred = model.predict(x)
    assert pred == pytest.approx(reg.predict(scaler.transform(x)), abs=1e-10)
    assert r_squared(y, pred) == pytest.approx(reg.score(scaler.transform(x), y), abs=1e-10)


def test_constant_and_collinear_columns_match_sklearn():
    """A constant column (scale 1, like sklearn) and a duplicated column (minimum-norm lstsq
    solution, like sklearn's scipy.linalg.lstsq): predictions to abs 1e-8."""
    x, y = _data(40, seed=3)
    x = np.column_stack([x[:, 0], x[:, 0] * 2 + 1, np.full(40, 0.5), x[:, 1]])
    model = fit_scaled_linear(x, y)
    scaler, reg = _sklearn(x, y)
    assert model.scale[2] == 1.0 == scaler.scale_[2]
    assert model.predict(x) == pytest.approx(reg.predict(scaler.transform(x)), abs=1e-8)


def test_published_radcliq_v1_constants_reproduce_metrics_md():
    """Reference: the published RadCliQ-v1 constants (Yu et al. 2023); all inputs 1 -> -1.4407,
    all 0 -> 2.4501 (published to 4 decimals, abs 1e-4)."""
    v1 = LinearModel(
        mean=np.array([0.5379231241, 0.6175725628, 0.7647942121, 0.4473833540]),
        scale=np.array([0.3028258411, 0.2243093846, 0.2539439110, 0.2989271671]),
        coef=np.array([-0.3770836826, -0.3703000997, -0.2526162179, 4.315e-12]),
        intercept=2.4666e-10,
    )
    assert v1.predict(np.ones((1, 4)))[0] == pytest.approx(-1.4407, abs=1e-4)
    assert v1.predict(np.zeros((1, 4)))[0] == pytest.approx(2.4501, abs=1e-4)


def test_kfold_indices_partition_and_groups():
    folds, scheme = kfold_indices(23, 5, seed=1, groups=None)
    assert scheme == "5-fold"
    assert sorted(np.concatenate(folds).tolist()) == list(range(23))
    groups = np.repeat(np.arange(8), 3)
    folds, scheme = kfold_indices(24, 5, seed=1, groups=groups)
    assert scheme == "5-fold by group"
    for f in folds:
        for g in np.unique(groups[f]):
            assert set(np.flatnonzero(groups == g)) <= set(f.tolist())
    with pytest.raises(ValueError):
        kfold_indices(1, 5, 0, None)


def test_cv_tau_matches_sklearn_loop():
    """Reference: per-fold sklearn fits on the same folds, out-of-fold predictions pooled,
    scipy.stats.kendalltau(pred, errors); abs 1e-10."""
    x, y = _data(60, seed=4)
    groups = np.repeat(np.arange(20), 3)
    res = refit(x, y, RADCLIQ_INPUTS, k=4, seed=7, groups=groups)
    folds, _ = kfold_indices(60, 4, 7, groups)
    oof = np.empty(60)
    for test in folds:
        train = np.setdiff1d(np.arange(60), test)
        scaler, reg = _sklearn(x[train], y[train])
        oof[test] = reg.predict(scaler.transform(x[test]))
    assert res.cv_kendall_tau_b == pytest.approx(stats.kendalltau(oof, y).statistic, abs=1e-10)
    assert res.cv_scheme == "4-fold by group" and len(res.cv_fold_kendall) == 4
    assert res.cv_kendall_tau_b > 0  # inputs were built to predict the errors
    d = res.as_dict()
    assert list(d["coef"]) == list(RADCLIQ_INPUTS)
    assert d["r2"] == pytest.approx(_sklearn(x, y)[1].score(_sklearn(x, y)[0].transform(x), y))


def test_leave_one_study_out():
    """Two studies: each is predicted by a model fitted on the other (sklearn reference)."""
    x, y = _data(50, seed=5)
    studies = np.array(["s1"] * 20 + ["s2"] * 30)
    res = refit(x, y, RADCLIQ_INPUTS, studies=studies)
    assert res.cv_scheme == "leave-one-study-out"
    oof = np.empty(50)
    for s in ("s1", "s2"):
        test, train = studies == s, studies != s
        scaler, reg = _sklearn(x[train], y[train])
        oof[test] = reg.predict(scaler.transform(x[test]))
    assert res.cv_kendall_tau_b == pytest.approx(stats.kendalltau(oof, y).statistic, abs=1e-10)


def test_bad_shapes():
    x, y = _data(10)
    with pytest.raises(ValueError):
        refit(x[:, :3], y)
    with pytest.raises(ValueError):
        fit_scaled_linear(np.array([[np.nan, 1.0], [1.0, 2.0]]), np.array([1.0, 2.0]))
