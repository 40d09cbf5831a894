"""CRG score: a distribution-aware clinical metric over observation labels.

With ``X`` label slots (labels per exam x exams), ``A`` reference positives, ``N = X - A``:

    r = N / (2A),  U = N / 2,  s = r*TP - r*FN - FP,  CRG = U / (2U - s)

True negatives are ignored. Since ``TP + FN = A`` this equals
``1 / (1 + 2*FN/A + 2*FP/N)``: 1 for a perfect prediction, 1/3 when every positive is missed
and nothing is over-called (or when everything is called positive), 0.2 when every label is
wrong. The closed form shows how the two error rates are balanced and gives the edge cases:

* ``A = 0`` (no reference positive): the published formula divides by zero; its limit as
  ``A -> 0`` (with ``TP + FN = A -> 0`` and ``r*TP -> N/2``) is ``N / (N + 2*FP)``, i.e. 1 when
  nothing is over-called. (The authors' reference script raises an error here; a per-pair
  score for a normal reference must exist, so the limit is used.)
* ``N = 0`` (every label positive): ``U = 0`` and the formula is ``0/0``; its limit as
  ``N -> 0`` (``FP <= N -> 0``) is ``A / (A + 2*FN)``.
* ``X = 0`` (nothing to score): ``nan``.

Per pair, ``X`` is the number of labels of that pair (14 by default); the corpus value pools
TP/FN/FP and ``X`` over all pairs.

Label sets (``labels=``): CheXpert's 14 observations (``14``, also spelt ``chexpert``; the
default, numbers unchanged) or the competition five (``5``), labelled by a registered family;
or CT-RATE's 18 chest CT abnormalities (``ctrate``, :mod:`backend.metrics.ctrate`), the setting
the CRG paper was evaluated in, labelled by ``labeler=rules`` (offline, the default),
``classifier`` (CT-RATE's released RadBERT classifier) or ``llm`` (any chat model). An LLM
label it could not read makes that pair ``nan`` (the reason is in the pair's details) and the
pair is left out of the corpus pool. CRG over structured labels (type, location, laterality)
is not implemented: the paper's short version names the variant without defining how a
partial match counts, and its code was not released, so only label-level CRG is computed;
the LLM labeler's structured findings are reported in the details.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from radconcord.backend.metrics import ctrate, registry
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
    Resources,
)
from radconcord.backend.metrics.labels import (
    BINARISATION,
    INDEX_5,
    OBSERVATIONS,
    ReportLabeler,
    binarize_matrix,
)

_SUBSETS: dict[str, tuple[int, ...]] = {
    "14": tuple(range(len(OBSERVATIONS))),
    "5": INDEX_5,
}
#: ``labels`` values: the CheXpert subsets, their alias, and CT-RATE's 18.
LABEL_SETS = ("14", "5", "chexpert", "ctrate")


def crg(tp: int, fn: int, fp: int, num_labels: int, num_positives: int) -> float:
    """CRG score from counts.

    Args:
        tp: Reference positives predicted positive.
        fn: Reference positives predicted negative.
        fp: Reference negatives predicted positive.
        num_labels: ``X``, all label slots (labels per exam x exams).
        num_positives: ``A``, reference positives (must equal ``tp + fn``).

    Returns:
        The CRG score in ``[0.2, 1]``; see the module docstring for ``A = 0`` and ``N = 0``;
        ``nan`` when ``num_labels`` is 0.

    Raises:
        ValueError: when counts are negative or inconsistent.
    """
    for name, v in (("tp", tp), ("fn", fn), ("fp", fp), ("num_labels", num_labels),
                    ("num_positives", num_positives)):
        if v < 0:
            raise ValueError(f"crg: {name} must be >= 0, got {v}")
    x, a = num_labels, num_positives
    n = x - a
    if n < 0:
        raise ValueError(f"crg: num_positives ({a}) exceeds num_labels ({x})")
    if tp + fn != a:
        raise ValueError(f"crg: tp + fn ({tp} + {fn}) must equal num_positives ({a})")
    if fp > n:
        raise ValueError(f"crg: fp ({fp}) exceeds the reference negatives ({n})")
    if x == 0:
        return math.nan
    if a == 0:
        return n / (n + 2 * fp)
    if n == 0:
        return a / (a + 2 * fn)
    r = n / (2 * a)
    u = n / 2
    s = r * tp - r * fn - fp
    return u / (2 * u - s)


def _counts(ref: Sequence[int], cand: Sequence[int]) -> tuple[int, int, int, int]:
    tp = fn = fp = 0
    for r, c in zip(ref, cand, strict=True):
        if r:
            tp += c
            fn += 1 - c
        else:
            fp += c
    return tp, fn, fp, sum(ref)


class Crg(BaseMetric):
    """CRG score over CheXpert labels (default) or CT-RATE's 18 CT abnormalities.

    Options:
        labels: ``"14"`` (all CheXpert observations; ``"chexpert"`` is the same), ``"5"``
            (the competition five) or ``"ctrate"`` (CT-RATE's 18).
        labeler: For CheXpert labels, a registered family whose class offers
            ``label_reports`` (``chexpert``, ``chexbert``); for ``ctrate``, ``rules``
            (default), ``classifier`` or ``llm``.
        model, revision: The classifier's encoder or the LLM (hub id + commit, or a folder).
        checkpoint: The CT-RATE classifier's ``RadBertClassifier.pth``.
        structured: Ask the LLM for each finding's type, location and laterality too.
        backend, base_url, endpoint_model, api_key, concurrency, timeout, max_retries,
        max_new_tokens, batch_size, dtype, max_words: LLM (and classifier batch) settings, as
            for the LLM families.
    """

    spec = MetricSpec(
        name="crg",
        outputs=(OutputSpec("crg", True, "CRG score over binarised observation labels"),),
        needs_model=False,
        citation="Hamamci et al., CRG Score: A Distribution-Aware Clinical Metric for "
        "Radiology Report Generation, 2025",
        corpus_outputs=("crg_corpus",),
    )
    defaults: dict[str, Any] = {"labeler": "chexpert", "labels": "14", **ctrate.LABELER_OPTIONS}

    def __init__(self, **options: Any) -> None:
        labels = str(options.get("labels", "14")).strip().lower()
        if labels == "ctrate" and "labeler" not in options:
            options = {**options, "labeler": "rules"}  # the CT default needs no download
        super().__init__(**options)
        if labels not in LABEL_SETS:
            raise ValueError(f"unknown labels {self.options['labels']!r} for metric 'crg'"
                             f" (known: {', '.join(LABEL_SETS)})")
        # "chexpert" is spelt "14" from here on, so its signature (and cached scores) is the
        # one the default always had.
        self.options["labels"] = "14" if labels == "chexpert" else labels
        self.ct = labels == "ctrate"
        self._labeler: Any = None
        if self.ct:
            if self.options["labeler"] not in ctrate.LABELERS:
                raise ValueError(f"crg: unknown labeler {self.options['labeler']!r} for"
                                 f" labels=ctrate (use {', '.join(ctrate.LABELERS)})")
            # Checks the options against the labeler now; the model is not loaded yet.
            self._labeler = ctrate.make_labeler(self.options["labeler"], self.options,
                                                self.resources)
            return
        if self.options["labeler"] not in registry.ENTRIES:
            raise ValueError(f"crg: unknown labeler family {self.options['labeler']!r}")
        stray = sorted(k for k, v in ctrate.LABELER_OPTIONS.items() if self.options[k] != v)
        if stray:
            raise ValueError(f"crg: option(s) {', '.join(stray)} apply to labels=ctrate only")

    def _get_labeler(self) -> Any:
        if self._labeler is None and self.ct:
            self._labeler = ctrate.make_labeler(self.options["labeler"], self.options,
                                                self.resources)
        if self._labeler is None:
            # From the resources: in a scoring pool, crg over chexbert uses the pool's
            # chexbert instance and its loaded model.
            self._labeler = registry.shared_instance(self.resources, self.options["labeler"], {})
        return self._labeler

    def use_resources(self, resources: Resources) -> None:
        """Take the labeler from ``resources`` (call before ``load``)."""
        super().use_resources(resources)
        self._labeler = None

    def availability(self) -> str | None:
        if self.ct:
            reason = self._get_labeler().availability()
            return None if reason is None else f"crg (ctrate, {self.options['labeler']}): {reason}"
        family = self.options["labeler"]
        try:
            reason = registry.availability(family)
            if reason is not None:
                return f"needs {family}: {reason}"
            labeler = self._get_labeler()
        except (ImportError, AttributeError, ValueError) as exc:
            return f"needs {family}: cannot create it: {exc}"
        if not isinstance(labeler, ReportLabeler):
            return f"labeler family {family!r} cannot label single reports (no label_reports)"
        return None

    def _load(self) -> None:
        self._get_labeler().load(self.device)

    def _score_ctrate(self, references: list[str], candidates: list[str]) -> MetricResult:
        readings = self._get_labeler().read([*references, *candidates])
        refs, cands = readings[: len(references)], readings[len(references):]
        x = len(ctrate.CTRATE_LABELS)
        values: list[float] = []
        details: list[dict[str, Any]] = []
        totals = [0, 0, 0, 0]
        pooled = 0
        for ref, cand in zip(refs, cands, strict=True):
            rb, cb = ctrate.binarize_reading(ref.labels), ctrate.binarize_reading(cand.labels)
            detail: dict[str, Any] = {"reference_labels": list(ref.labels),
                                      "candidate_labels": list(cand.labels), "num_labels": x}
            if ref.findings or cand.findings:
                detail["reference_findings"] = ref.findings
                detail["candidate_findings"] = cand.findings
            if rb is None or cb is None:
                values.append(math.nan)
                detail["reason"] = "; ".join(
                    [f"reference {f}" for f in ref.flags] + [f"candidate {f}" for f in cand.flags]
                )
                details.append(detail)
                continue
            tp, fn, fp, a = _counts(rb, cb)
            values.append(crg(tp, fn, fp, x, a))
            detail.update({"tp": tp, "fn": fn, "fp": fp, "num_positives": a})
            details.append(detail)
            for i, v in enumerate((tp, fn, fp, a)):
                totals[i] += v
            pooled += 1
        tp, fn, fp, a = totals
        corpus = {"crg_corpus": crg(tp, fn, fp, x * pooled, a)}
        return MetricResult(values={"crg": values}, corpus=corpus, details=details)

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        if self.ct:
            return self._score_ctrate(references, candidates)
        cols = list(_SUBSETS[self.options["labels"]])
        labelled = self._get_labeler().label_reports([*references, *candidates])
        matrix = binarize_matrix(labelled)[:, cols]
        refs, cands = matrix[: len(references)], matrix[len(references):]
        x = len(cols)
        values, details = [], []
        totals = [0, 0, 0, 0]
        for ref, cand in zip(refs.tolist(), cands.tolist(), strict=True):
            tp, fn, fp, a = _counts(ref, cand)
            values.append(crg(tp, fn, fp, x, a))
            details.append({"tp": tp, "fn": fn, "fp": fp, "num_positives": a, "num_labels": x})
            for i, v in enumerate((tp, fn, fp, a)):
                totals[i] += v
        tp, fn, fp, a = totals
        corpus = {"crg_corpus": crg(tp, fn, fp, x * len(values), a)}
        return MetricResult(values={"crg": values}, corpus=corpus, details=details)

    def signature(self) -> str:
        reason = self.availability()
        if reason is not None:
            raise MetricUnavailable(reason)
        return (
            f"crg|labels:{self.options['labels']}|bin:{BINARISATION}"
            f"|labeler:[{self._get_labeler().signature()}]"
        )
