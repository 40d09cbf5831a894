"""RadCliQ refit: the RadCliQ regression refitted on a study's own radiologist error counts.

RadCliQ is ``StandardScaler`` followed by ``LinearRegression`` on (radgraph_combined,
bertscore_f, semb, bleu2_radcliq), predicting the number of errors (lower is better). Here the
same model is fitted with numpy alone: the scaler uses the population standard deviation
(``ddof=0``, a zero deviation becomes 1, as scikit-learn does), the regression is ordinary
least squares with an intercept solved by ``numpy.linalg.lstsq`` (minimum-norm solution when
columns are collinear, as scikit-learn's ``scipy.linalg.lstsq``).

Generalisation is measured by cross-validated Kendall tau-b between out-of-fold predictions
and the radiologists' counts (both are error counts, so a positive tau means agreement):
leave-one-study-out when pairs come from several studies, else k-fold over pairs, with folds
drawn over groups (e.g. cases) when given so that pairs sharing a reference stay together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from radconcord.backend.analysis.stats import kendall_tau_b

RADCLIQ_INPUTS: tuple[str, ...] = ("radgraph_combined", "bertscore_f", "semb", "bleu2_radcliq")
DEFAULT_FOLDS = 5


@dataclass(frozen=True)
class LinearModel:
    """A fitted StandardScaler + LinearRegression.

    Attributes:
        mean: Per-column mean of the training inputs.
        scale: Per-column population standard deviation (1 where it was 0).
        coef: Coefficients on the standardised inputs.
        intercept: Intercept.
    """

    mean: NDArray[np.float64]
    scale: NDArray[np.float64]
    coef: NDArray[np.float64]
    intercept: float

    def predict(self, x: ArrayLike) -> NDArray[np.float64]:
        """Predicted error counts for ``(n, p)`` inputs.

        Args:
            x: Inputs in the training column order.
        """
        z = (np.asarray(x, dtype=np.float64) - self.mean) / self.scale
        return z @ self.coef + self.intercept


def fit_scaled_linear(x: ArrayLike, y: ArrayLike) -> LinearModel:
    """Fit StandardScaler + LinearRegression with numpy.

    Args:
        x: ``(n, p)`` finite inputs.
        y: ``(n,)`` finite targets.
    """
    xm = np.asarray(x, dtype=np.float64)
    yv = np.asarray(y, dtype=np.float64)
    if xm.ndim != 2 or yv.shape != (xm.shape[0],):
        raise ValueError(f"x must be (n, p) and y (n,), got {xm.shape} and {yv.shape}")
    if xm.shape[0] < 2:
        raise ValueError("need at least 2 rows to fit")
    if not (np.all(np.isfinite(xm)) and np.all(np.isfinite(yv))):
        raise ValueError("inputs to the fit must be finite")
    mean = xm.mean(axis=0)
    scale = xm.std(axis=0)
    scale = np.where(scale == 0.0, 1.0, scale)
    z = (xm - mean) / scale
    z_mean = z.mean(axis=0)
    y_mean = float(yv.mean())
    coef, *_ = np.linalg.lstsq(z - z_mean, yv - y_mean, rcond=None)
    intercept = y_mean - float(z_mean @ coef)
    return LinearModel(mean=mean, scale=scale, coef=coef, intercept=intercept)


def r_squared(y: ArrayLike, pred: ArrayLike) -> float:
    """Coefficient of determination ``1 - SS_res / SS_tot`` (NaN when ``y`` is constant).

    Args:
        y: Observed values.
        pred: Predictions.
    """
    yv, pv = np.asarray(y, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    ss_tot = float(((yv - yv.mean()) ** 2).sum())
    if ss_tot == 0.0:
        return float("nan")
    return 1.0 - float(((yv - pv) ** 2).sum()) / ss_tot


def kfold_indices(
    n: int, k: int, seed: int, groups: ArrayLike | None
) -> tuple[list[NDArray[np.int64]], str]:
    """Test-index arrays of a shuffled k-fold, over groups when given.

    Units (pairs, or groups) are permuted with ``default_rng(seed)`` and dealt round-robin into
    ``min(k, units)`` folds.

    Args:
        n: Rows.
        k: Folds wanted.
        seed: Shuffle seed.
        groups: Optional ``(n,)`` labels kept in one fold.

    Returns:
        ``(test index arrays, scheme name)``.
    """
    if groups is None:
        units = np.arange(n)
        unit_of_row = units
    else:
        _, unit_of_row = np.unique(np.asarray(groups), return_inverse=True)
        unit_of_row = unit_of_row.ravel()
        units = np.arange(unit_of_row.max() + 1)
    k = min(k, units.size)
    if k < 2:
        raise ValueError("cross-validation needs at least 2 pairs (or groups)")
    order = np.random.default_rng(seed).permutation(units.size)
    fold_of_unit = np.empty(units.size, dtype=np.int64)
    fold_of_unit[order] = np.arange(units.size) % k
    fold_of_row = fold_of_unit[unit_of_row]
    scheme = f"{k}-fold" + ("" if groups is None else " by group")
    return [np.flatnonzero(fold_of_row == f) for f in range(k)], scheme


@dataclass(frozen=True)
class RefitResult:
    """Outcome of a RadCliQ-style refit.

    Attributes:
        columns: Input metric keys, in order.
        model: The model fitted on all rows.
        r2: In-sample R^2.
        n: Rows used.
        cv_scheme: ``"leave-one-study-out"``, ``"5-fold"``, ``"5-fold by group"``.
        cv_kendall_tau_b: Kendall tau-b of pooled out-of-fold predictions vs the target.
        cv_fold_kendall: Per-fold tau-b (NaN for folds too small or constant).
        cv_fold_n: Pairs in each fold of ``cv_fold_kendall`` (a page judges each fold's tau
            by it: a 5-fold split of 16 pairs gives taus from 3 or 4 pairs).
        cv_r2: R^2 of the pooled out-of-fold predictions.
        seed: Seed of the fold shuffle.
    """

    columns: tuple[str, ...]
    model: LinearModel
    r2: float
    n: int
    cv_scheme: str
    cv_kendall_tau_b: float
    cv_fold_kendall: tuple[float, ...] = field(default_factory=tuple)
    cv_fold_n: tuple[int, ...] = field(default_factory=tuple)
    cv_r2: float = float("nan")
    seed: int = 0

    def as_dict(self) -> dict[str, object]:
        """Plain, JSON-able data."""
        return {
            "columns": list(self.columns),
            "n": self.n,
            "r2": self.r2,
            "coef": dict(zip(self.columns, self.model.coef.tolist(), strict=True)),
            "intercept": self.model.intercept,
            "scaler_mean": dict(zip(self.columns, self.model.mean.tolist(), strict=True)),
            "scaler_scale": dict(zip(self.columns, self.model.scale.tolist(), strict=True)),
            "cv_scheme": self.cv_scheme,
            "cv_kendall_tau_b": self.cv_kendall_tau_b,
            "cv_fold_kendall_tau_b": list(self.cv_fold_kendall),
            "cv_fold_n": list(self.cv_fold_n),
            "cv_r2": self.cv_r2,
            "seed": self.seed,
        }


def refit(
    x: ArrayLike,
    y: ArrayLike,
    columns: Sequence[str] = RADCLIQ_INPUTS,
    *,
    k: int = DEFAULT_FOLDS,
    seed: int = 0,
    groups: ArrayLike | None = None,
    studies: ArrayLike | None = None,
) -> RefitResult:
    """Fit the regression on all rows, then cross-validate its ranking of the pairs.

    Args:
        x: ``(n, p)`` metric values, one column per entry of ``columns`` (finite).
        y: ``(n,)`` radiologist error counts (mean over raters).
        columns: Metric keys naming the columns.
        k: Folds when not leaving studies out.
        seed: Seed of the fold shuffle.
        groups: Optional ``(n,)`` labels kept together in k-fold (e.g. case ids).
        studies: Optional ``(n,)`` study labels; two or more distinct values switch to
            leave-one-study-out.
    """
    xm = np.asarray(x, dtype=np.float64)
    yv = np.asarray(y, dtype=np.float64)
    if xm.ndim != 2 or xm.shape[1] != len(columns):
        raise ValueError(f"x has shape {xm.shape}, expected (n, {len(columns)}) for {columns}")
    model = fit_scaled_linear(xm, yv)
    r2 = r_squared(yv, model.predict(xm))
    if studies is not None and np.unique(np.asarray(studies)).size >= 2:
        labels = np.asarray(studies)
        folds = [np.flatnonzero(labels == s) for s in np.unique(labels)]
        scheme = "leave-one-study-out"
    else:
        folds, scheme = kfold_indices(len(yv), k, seed, groups)
    oof = np.full(len(yv), np.nan)
    fold_taus: list[float] = []
    fold_n: list[int] = []
    for test in folds:
        train = np.setdiff1d(np.arange(len(yv)), test)
        if train.size < 2:
            continue
        fold_model = fit_scaled_linear(xm[train], yv[train])
        oof[test] = fold_model.predict(xm[test])
        fold_taus.append(kendall_tau_b(oof[test], yv[test]) if test.size >= 2 else float("nan"))
        fold_n.append(int(test.size))
    ok = np.isfinite(oof)
    return RefitResult(
        columns=tuple(columns),
        model=model,
        r2=r2,
        n=int(len(yv)),
        cv_scheme=scheme,
        cv_kendall_tau_b=kendall_tau_b(oof[ok], yv[ok]),
        cv_fold_kendall=tuple(fold_taus),
        cv_fold_n=tuple(fold_n),
        cv_r2=r_squared(yv[ok], oof[ok]) if ok.sum() >= 2 else float("nan"),
        seed=seed,
    )
