"""The ``gbm`` variant of ``concord``: gradient-boosted trees over :mod:`.features`.

Training (:func:`fit_gbm`) fits one scikit-learn ``GradientBoostingRegressor`` (squared error)
per count of the 12 ReXVal cells; scikit-learn is imported inside the function only (extra
``radconcord[train]``). The fitted trees are exported as plain arrays (per node: feature,
threshold, left child, right child, value; a leaf has feature ``-1``) with the initial values
and the learning rate, so inference (:meth:`GbmModel.predict`) needs numpy alone and the model
travels as one JSON file (``gbm.json``).

Numerics: scikit-learn casts inputs to float32 before walking a tree and compares them with
float64 thresholds (``x <= t`` goes left); :meth:`GbmModel.predict` compares the same float32
inputs with each threshold rounded down to the largest float32 not above it, which gives the
same answer for every float32 input, so every row reaches the same leaf. The sum
``init + sum(learning_rate * leaf value)`` is taken tree by tree in boosting order, as
scikit-learn does, so the predictions equal scikit-learn's (the test allows 1e-12 in case a
numpy or scikit-learn version reorders the float64 additions), and a row's prediction never
depends on the other rows of its batch. Predictions are clipped at 0 (a count is never
negative).

Speed: all trees are evaluated at once (every node test of a block of rows in one vectorised
comparison, then one gather per tree level), about 10k rows/s for 12 x 200 trees of depth 3
on one core.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["GBM_FILE", "GBM_FORMAT", "GbmModel", "Tree", "export_sklearn", "fit_gbm"]

#: The model file inside a trained gbm folder.
GBM_FILE = "gbm.json"
#: Version of the JSON layout.
GBM_FORMAT = 1


@dataclass(frozen=True)
class Tree:
    """One regression tree as arrays (index 0 is the root).

    Attributes:
        feature: Split feature per node, ``-1`` at a leaf.
        threshold: Split threshold per node (``x <= threshold`` goes left).
        left: Left child per node (``-1`` at a leaf).
        right: Right child per node (``-1`` at a leaf).
        value: Value per node (the prediction at a leaf).
    """

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray

    @property
    def depth(self) -> int:
        """Longest root-to-leaf path, in edges."""
        depth = np.zeros(len(self.feature), dtype=np.int64)
        for i in range(len(self.feature)):  # children always come after their parent
            if self.left[i] >= 0:
                depth[self.left[i]] = depth[self.right[i]] = depth[i] + 1
        return int(depth.max()) if len(depth) else 0

    def as_dict(self) -> dict[str, list[Any]]:
        """JSON form."""
        return {
            "feature": self.feature.tolist(),
            "threshold": self.threshold.tolist(),
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "value": self.value.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tree:
        """Inverse of :meth:`as_dict`.

        Raises:
            ValueError: when the arrays differ in length or name nodes that do not exist.
        """
        t = cls(
            np.asarray(d["feature"], dtype=np.int64),
            np.asarray(d["threshold"], dtype=np.float64),
            np.asarray(d["left"], dtype=np.int64),
            np.asarray(d["right"], dtype=np.int64),
            np.asarray(d["value"], dtype=np.float64),
        )
        n = len(t.feature)
        if n == 0 or any(len(a) != n for a in (t.threshold, t.left, t.right, t.value)):
            raise ValueError("tree arrays are empty or differ in length")
        inner = t.feature >= 0
        if (t.left[inner] <= np.nonzero(inner)[0]).any() or (t.left[inner] >= n).any() \
                or (t.right[inner] >= n).any() or (t.right[inner] <= 0).any():
            raise ValueError("tree children must follow their parent and exist")
        return t


@dataclass
class GbmModel:
    """A fitted gradient-boosted model of the 12 counts, usable without scikit-learn.

    Attributes:
        init: Initial value per output (``n_outputs``).
        learning_rate: Shrinkage applied to every tree's value.
        trees: Per output, its trees in boosting order.
        feature_names: Names of the input columns, in order.
        params: The training settings (recorded, not used by inference).
    """

    init: np.ndarray
    learning_rate: float
    trees: list[list[Tree]]
    feature_names: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.init = np.asarray(self.init, dtype=np.float64)
        if len(self.trees) != len(self.init):
            raise ValueError(f"{len(self.trees)} tree lists for {len(self.init)} outputs")
        self._pack()

    @property
    def n_outputs(self) -> int:
        """Number of predicted counts."""
        return len(self.init)

    def _pack(self) -> None:
        # Every tree padded to a perfect tree of the deepest tree's depth D, laid out level by
        # level: level k holds 2**k nodes per tree. A leaf above level D becomes a node whose
        # test always goes left (threshold +inf) and whose leaves below all carry its value,
        # so a row's leaf index is found with D vectorised steps over all trees at once.
        flat = [t for per_output in self.trees for t in per_output]
        n_trees = len(flat)
        depth = max((t.depth for t in flat), default=0)
        feats = [np.zeros((n_trees, 2**k), dtype=np.int64) for k in range(depth)]
        thrs = [np.full((n_trees, 2**k), np.inf) for k in range(depth)]
        leaves = np.zeros((n_trees, 2**depth), dtype=np.float64)
        for i, t in enumerate(flat):
            stack = [(0, 0, 0)]  # (node, level, position in level)
            while stack:
                node, level, pos = stack.pop()
                if t.feature[node] < 0:
                    width = 2 ** (depth - level)
                    leaves[i, pos * width:(pos + 1) * width] = t.value[node]
                    continue
                feats[level][i, pos] = t.feature[node]
                thrs[level][i, pos] = t.threshold[node]
                stack.append((int(t.left[node]), level + 1, 2 * pos))
                stack.append((int(t.right[node]), level + 1, 2 * pos + 1))
        self._depth = depth
        self._n_trees = n_trees
        self._columns = (np.concatenate([f.ravel() for f in feats]) if depth
                         else np.zeros(0, dtype=np.int64))
        thr = np.concatenate([t.ravel() for t in thrs]) if depth else np.zeros(0)
        # float32 x <= float64 t  <=>  x <= (largest float32 <= t): compare in float32.
        t32 = thr.astype(np.float32)
        too_big = t32.astype(np.float64) > thr
        t32[too_big] = np.nextafter(t32[too_big], np.float32(-np.inf))
        self._thresholds = t32
        self._leaves = leaves
        # Trees of output k are the columns [start, end) of the leaf values, in boosting order.
        bounds = np.cumsum([0, *(len(per) for per in self.trees)])
        self._spans = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
        # With as many trees per output (what fit_gbm makes), step t of every output is one
        # (outputs, rows) slice: the same additions in the same order, 12 times fewer calls.
        sizes = {len(per) for per in self.trees}
        self._per_output = sizes.pop() if len(sizes) == 1 else None

    def predict(self, X: np.ndarray, *, clip: bool = True,  # noqa: N803
                chunk: int = 128) -> np.ndarray:
        """Predicted counts.

        Args:
            X: ``(n, n_features)`` features (cast to float32, as scikit-learn does).
            clip: Clip at 0.
            chunk: Rows evaluated at once (bounds the memory of the node tests).

        Returns:
            ``(n, n_outputs)`` float64 array.

        Raises:
            ValueError: for a feature count other than the model's.
        """
        x = np.asarray(X, dtype=np.float32)
        if x.ndim != 2:
            raise ValueError(f"X must be 2-dimensional, got shape {x.shape}")
        if self.feature_names and x.shape[1] != len(self.feature_names):
            raise ValueError(
                f"X has {x.shape[1]} features, the model was trained on {len(self.feature_names)}"
            )
        n = x.shape[0]
        out = np.tile(self.init, (n, 1))
        if n and self._n_trees:
            trees = np.arange(self._n_trees)[:, None]
            thresholds = self._thresholds[:, None]
            for start in range(0, n, chunk):
                cols = np.ascontiguousarray(x[start:start + chunk].T)  # (features, rows)
                # Every node's test for every row: (nodes, rows), one row of tests per node.
                tests = np.less_equal(np.take(cols, self._columns, axis=0), thresholds)
                # Level 0 has one node per tree: its tests are the first positions directly.
                pos = ((~tests[:self._n_trees]).astype(np.int64) if self._depth
                       else np.zeros((self._n_trees, cols.shape[1]), dtype=np.int64))
                offset = self._n_trees
                for k in range(1, self._depth):
                    width = 2**k
                    level = tests[offset:offset + self._n_trees * width]
                    went_left = np.take_along_axis(level, trees * width + pos, axis=0)
                    pos = 2 * pos + (~went_left)
                    offset += self._n_trees * width
                leaf = self._leaves[trees, pos]  # (n_trees, rows)
                block = out[start:start + cols.shape[1]]
                # Tree by tree, as scikit-learn adds them: a row's sum never depends on the
                # other rows of the batch (a matrix product's blocking would).
                if self._per_output is not None:
                    steps = leaf.reshape(self.n_outputs, self._per_output, -1)
                    acc = block.T.copy()  # (outputs, rows)
                    for t in range(self._per_output):
                        acc += self.learning_rate * steps[:, t]
                    block[:] = acc.T
                    continue
                for k, (first, last) in enumerate(self._spans):
                    acc = block[:, k].copy()
                    for t in range(first, last):
                        acc += self.learning_rate * leaf[t]
                    block[:, k] = acc
        return np.maximum(out, 0.0) if clip else out

    def to_json(self) -> str:
        """The model as JSON text (see :meth:`from_json`)."""
        return json.dumps(
            {
                "format": GBM_FORMAT,
                "kind": "sklearn.GradientBoostingRegressor",
                "n_outputs": self.n_outputs,
                "learning_rate": self.learning_rate,
                "init": self.init.tolist(),
                "feature_names": list(self.feature_names),
                "params": self.params,
                "trees": [[t.as_dict() for t in per] for per in self.trees],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> GbmModel:
        """Read a model written by :meth:`to_json`.

        Raises:
            ValueError: for malformed JSON or a layout this version cannot read.
        """
        try:
            d = json.loads(text)
            if d.get("format") != GBM_FORMAT:
                raise ValueError(f"format {d.get('format')!r}, expected {GBM_FORMAT}")
            return cls(
                init=np.asarray(d["init"], dtype=np.float64),
                learning_rate=float(d["learning_rate"]),
                trees=[[Tree.from_dict(t) for t in per] for per in d["trees"]],
                feature_names=tuple(d.get("feature_names", ())),
                params=dict(d.get("params", {})),
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a gbm model: {exc}") from exc

    def save(self, folder: Path) -> Path:
        """Write ``gbm.json`` into ``folder``; returns its path."""
        path = Path(folder) / GBM_FILE
        path.write_text(self.to_json(), encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: Path) -> GbmModel:
        """Read ``gbm.json`` from ``folder``.

        Raises:
            FileNotFoundError: when the file is missing.
            ValueError: when it is not a model (the message names the file).
        """
        path = Path(folder) / GBM_FILE
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc


def export_sklearn(estimator: Any) -> tuple[float, list[Tree]]:
    """Initial value and trees of a fitted single-output ``GradientBoostingRegressor``.

    Args:
        estimator: The fitted regressor (squared-error loss, constant init).
    """
    init = float(np.asarray(estimator.init_.constant_).ravel()[0])
    trees = []
    for stage in estimator.estimators_[:, 0]:
        t = stage.tree_
        trees.append(Tree(
            feature=np.where(t.children_left < 0, -1, t.feature).astype(np.int64),
            threshold=np.asarray(t.threshold, dtype=np.float64),
            left=np.asarray(t.children_left, dtype=np.int64),
            right=np.asarray(t.children_right, dtype=np.int64),
            value=np.asarray(t.value[:, 0, 0], dtype=np.float64),
        ))
    return init, trees


def fit_gbm(
    X: np.ndarray,  # noqa: N803
    Y: np.ndarray,  # noqa: N803
    *,
    seed: int = 0,
    n_estimators: int = 200,
    max_depth: int = 3,
    learning_rate: float = 0.1,
    subsample: float = 1.0,
    min_samples_leaf: int = 5,
    feature_names: Sequence[str] = (),
) -> GbmModel:
    """Fit one gradient-boosted regressor per output column of ``Y``.

    Args:
        X: ``(n, n_features)`` features.
        Y: ``(n, n_outputs)`` target counts.
        seed: ``random_state`` of every regressor (deterministic given the seed).
        n_estimators: Boosting stages per output.
        max_depth: Depth of each tree.
        learning_rate: Shrinkage.
        subsample: Row fraction per stage (1.0: no subsampling).
        min_samples_leaf: Smallest leaf.
        feature_names: Column names recorded with the model.

    Returns:
        The exported model (no scikit-learn object is kept).

    Raises:
        MetricUnavailable: when scikit-learn is not installed (``pip install
            radconcord[train]``).
        ValueError: for mismatched shapes.
    """
    try:
        from sklearn.ensemble import GradientBoostingRegressor
    except ImportError as exc:
        from radconcord.backend.metrics.base import MetricUnavailable

        raise MetricUnavailable(
            "training the concord gbm needs scikit-learn: pip install 'radconcord[train]'"
        ) from exc
    x = np.asarray(X, dtype=np.float32)
    y = np.asarray(Y, dtype=np.float64)
    if y.ndim == 1:
        y = y[:, None]
    if x.ndim != 2 or y.shape[0] != x.shape[0]:
        raise ValueError(f"X {x.shape} and Y {y.shape} do not align")
    if feature_names and len(feature_names) != x.shape[1]:
        raise ValueError(f"{len(feature_names)} feature names for {x.shape[1]} columns")
    params = {"seed": seed, "n_estimators": n_estimators, "max_depth": max_depth,
              "learning_rate": learning_rate, "subsample": subsample,
              "min_samples_leaf": min_samples_leaf, "loss": "squared_error"}
    inits, trees = [], []
    for k in range(y.shape[1]):
        est = GradientBoostingRegressor(
            loss="squared_error", n_estimators=n_estimators, max_depth=max_depth,
            learning_rate=learning_rate, subsample=subsample,
            min_samples_leaf=min_samples_leaf, random_state=seed,
        )
        est.fit(x, y[:, k])
        init, per = export_sklearn(est)
        inits.append(init)
        trees.append(per)
    return GbmModel(np.array(inits), float(learning_rate), trees, tuple(feature_names), params)
