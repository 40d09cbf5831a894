"""CheXpert observation labels and the agreement statistics shared by every labeler.

A labeler (the rule-based one in ``chexpert.py``, a CheXbert one later) turns a report into
one value per observation in :data:`OBSERVATIONS` order:

* ``1`` positive, ``0`` negative, ``-1`` uncertain, ``None`` blank (not mentioned).

Agreement between a reference and a candidate is measured on *binarised* labels. The field's
convention for report-generation metrics (CheXbert F1 as used by the RRG scorers, "uncertain
as positive") is followed: positive and uncertain become 1, negative and blank become 0.

Edge cases, chosen once here so every labeler agrees:

* Per-pair F1 over positive labels when *neither* report has a positive label: ``1.0``. Both
  reports assert the same thing (nothing found among these observations), so the pair is in
  full agreement; scoring it 0 would punish a correct "normal" candidate. This equals
  ``sklearn.metrics.f1_score(ref, cand, zero_division=1.0)`` on one sample.
* Corpus F1 (micro/macro/weighted): scikit-learn's default semantics with
  ``zero_division=0.0`` (an observation with no positive in references and candidates
  contributes 0 to the macro mean; weighted F1 weights by reference support). These are the
  numbers published for CheXbert F1 (computed with scikit-learn), so ours stay comparable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

Label = int | None

POSITIVE = 1
NEGATIVE = 0
UNCERTAIN = -1
BLANK: None = None

OBSERVATIONS: tuple[str, ...] = (
    "No Finding",
    "Enlarged Cardiomediastinum",
    "Cardiomegaly",
    "Lung Lesion",
    "Lung Opacity",
    "Edema",
    "Consolidation",
    "Pneumonia",
    "Atelectasis",
    "Pneumothorax",
    "Pleural Effusion",
    "Pleural Other",
    "Fracture",
    "Support Devices",
)
OBSERVATIONS_5: tuple[str, ...] = (
    "Cardiomegaly",
    "Edema",
    "Consolidation",
    "Atelectasis",
    "Pleural Effusion",
)
INDEX_5: tuple[int, ...] = tuple(OBSERVATIONS.index(o) for o in OBSERVATIONS_5)

#: Name of the binarisation rule; goes into metric signatures.
BINARISATION = "uncertain=positive"

_VALID = (POSITIVE, NEGATIVE, UNCERTAIN, BLANK)


@runtime_checkable
class ReportLabeler(Protocol):
    """A metric family that can also label single reports (used by CRG and comparisons)."""

    def label_reports(self, reports: Sequence[str]) -> list[tuple[Label, ...]]:
        """Return one label tuple in :data:`OBSERVATIONS` order per report."""


def _check(labels: Sequence[Label], n: int | None = None) -> None:
    if n is not None and len(labels) != n:
        raise ValueError(f"expected {n} labels, got {len(labels)}")
    for i, v in enumerate(labels):
        if v not in _VALID or isinstance(v, bool):
            raise ValueError(f"label {i} is {v!r}; expected 1, 0, -1 or None")


def binarize(labels: Sequence[Label]) -> list[int]:
    """Map labels to 0/1 with uncertain counted as positive (the field's convention).

    Args:
        labels: Values in ``{1, 0, -1, None}``.

    Returns:
        ``1`` for positive or uncertain, ``0`` for negative or blank.

    Raises:
        ValueError: on any other value.
    """
    _check(labels)
    return [1 if v in (POSITIVE, UNCERTAIN) else 0 for v in labels]


def binarize_matrix(rows: Iterable[Sequence[Label]], n: int = len(OBSERVATIONS)) -> np.ndarray:
    """Binarise many label vectors into an ``(len(rows), n)`` int8 matrix."""
    out = []
    for i, r in enumerate(rows):
        try:
            _check(r, n)
        except ValueError as exc:
            raise ValueError(f"row {i}: {exc}") from None
        out.append([1 if v in (POSITIVE, UNCERTAIN) else 0 for v in r])
    return np.asarray(out, dtype=np.int8).reshape(len(out), n)


def pair_counts(reference: Sequence[int], candidate: Sequence[int]) -> tuple[int, int, int, int]:
    """Return ``(tp, fp, fn, tn)`` for two binarised vectors (reference is the truth)."""
    if len(reference) != len(candidate):
        raise ValueError(f"label vectors differ in length: {len(reference)} vs {len(candidate)}")
    tp = fp = fn = tn = 0
    for r, c in zip(reference, candidate, strict=True):
        if r and c:
            tp += 1
        elif c:
            fp += 1
        elif r:
            fn += 1
        else:
            tn += 1
    return tp, fp, fn, tn


def pair_accuracy(reference: Sequence[int], candidate: Sequence[int]) -> float:
    """Fraction of observations on which two binarised vectors agree."""
    tp, fp, fn, tn = pair_counts(reference, candidate)
    total = tp + fp + fn + tn
    return (tp + tn) / total if total else float("nan")


def pair_f1(reference: Sequence[int], candidate: Sequence[int], empty: float = 1.0) -> float:
    """F1 over positive labels of one pair of binarised vectors.

    Args:
        reference: Binarised reference labels (the truth).
        candidate: Binarised candidate labels.
        empty: Value when neither vector has a positive (see module docstring: 1.0).

    Returns:
        ``2 tp / (2 tp + fp + fn)``, or ``empty`` when that is ``0 / 0``.
    """
    tp, fp, fn, _ = pair_counts(reference, candidate)
    denom = 2 * tp + fp + fn
    return 2 * tp / denom if denom else empty


def _f1_per_label(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tp = (y_true & y_pred).sum(axis=0).astype(float)
    fp = ((1 - y_true) & y_pred).sum(axis=0).astype(float)
    fn = (y_true & (1 - y_pred)).sum(axis=0).astype(float)
    denom = 2 * tp + fp + fn
    f1 = np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)
    support = y_true.sum(axis=0).astype(float)
    return f1, support


def corpus_f1(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """Micro, macro and support-weighted F1 over label columns (scikit-learn semantics).

    Args:
        y_true: ``(n_pairs, n_labels)`` 0/1 reference matrix.
        y_pred: Same shape, candidate.

    Returns:
        ``{"micro": .., "macro": .., "weighted": ..}``; ill-defined parts count as 0 like
        ``sklearn.metrics.f1_score(..., zero_division=0)``.
    """
    yt = np.asarray(y_true, dtype=np.int64)
    yp = np.asarray(y_pred, dtype=np.int64)
    if yt.shape != yp.shape or yt.ndim != 2:
        raise ValueError(f"label matrices must share a 2-D shape: {yt.shape} vs {yp.shape}")
    if yt.shape[0] == 0:
        return {"micro": float("nan"), "macro": float("nan"), "weighted": float("nan")}
    f1, support = _f1_per_label(yt, yp)
    tp = float((yt & yp).sum())
    fp = float(((1 - yt) & yp).sum())
    fn = float((yt & (1 - yp)).sum())
    micro = 2 * tp / (2 * tp + fp + fn) if (2 * tp + fp + fn) else 0.0
    macro = float(f1.mean())
    total = support.sum()
    weighted = float((f1 * support).sum() / total) if total else 0.0
    return {"micro": float(micro), "macro": macro, "weighted": weighted}


def corpus_scores(
    references: Sequence[Sequence[Label]], candidates: Sequence[Sequence[Label]], prefix: str
) -> dict[str, float]:
    """Corpus F1 for all 14 observations and for the 5 competition observations.

    Args:
        references: Label vectors of the reference reports.
        candidates: Label vectors of the candidate reports.
        prefix: Key prefix (``chexpert`` -> ``chexpert_micro_f1_14`` ...).

    Returns:
        ``{prefix}_{micro|macro|weighted}_f1_{14|5}`` -> value.
    """
    yt = binarize_matrix(references)
    yp = binarize_matrix(candidates)
    out: dict[str, float] = {}
    for suffix, cols in (("14", slice(None)), ("5", list(INDEX_5))):
        scores = corpus_f1(yt[:, cols], yp[:, cols])
        for avg, value in scores.items():
            out[f"{prefix}_{avg}_f1_{suffix}"] = value
    return out


def corpus_keys(prefix: str) -> tuple[str, ...]:
    """Names of the corpus outputs produced by :func:`corpus_scores`."""
    return tuple(
        f"{prefix}_{avg}_f1_{suffix}"
        for suffix in ("14", "5")
        for avg in ("micro", "macro", "weighted")
    )
