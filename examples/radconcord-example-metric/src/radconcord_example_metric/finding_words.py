"""``finding_words``: does the candidate mention the findings the reference names?

A class-based plug-in: the same contract as RadConcord's built-in families (``spec``,
keyword-only ``score``, ``load``, ``signature``) by subclassing ``BaseMetric``, plus ``card``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from radconcord.plugins import BaseMetric, MetricResult, MetricSpec, OutputSpec

#: Canonical finding -> the word forms that name it (lower case, whole words).
FINDINGS: dict[str, tuple[str, ...]] = {
    "atelectasis": ("atelectasis", "atelectatic"),
    "calcification": ("calcification", "calcifications", "calcified"),
    "cardiomegaly": ("cardiomegaly",),
    "congestion": ("congestion",),
    "consolidation": ("consolidation", "consolidations", "consolidative"),
    "edema": ("edema", "oedema"),
    "effusion": ("effusion", "effusions"),
    "emphysema": ("emphysema", "emphysematous"),
    "fibrosis": ("fibrosis", "fibrotic"),
    "fracture": ("fracture", "fractures"),
    "hernia": ("hernia",),
    "infiltrate": ("infiltrate", "infiltrates"),
    "lesion": ("lesion", "lesions"),
    "mass": ("mass", "masses"),
    "nodule": ("nodule", "nodules", "nodular"),
    "opacity": ("opacity", "opacities", "opacification"),
    "pneumonia": ("pneumonia",),
    "pneumothorax": ("pneumothorax", "pneumothoraces"),
    "scarring": ("scar", "scarring"),
}

_WORD = re.compile(r"[a-z]+")


class FindingWords(BaseMetric):
    """Share of the reference's finding words that the candidate mentions too.

    Options:
        extra_words: Comma-separated extra finding words (each its own finding).
    """

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="finding_words",
        outputs=(
            OutputSpec("finding_recall", True,
                       "share of the reference's findings the candidate names"),
            OutputSpec("finding_missed", False,
                       "reference findings the candidate does not name"),
        ),
        citation="radconcord-example-metric (a teaching example, not a published metric)",
    )
    defaults: ClassVar[dict[str, Any]] = {"extra_words": ""}
    kind: ClassVar[str] = "lexical"
    card: ClassVar[str] = "cards/finding_words.md"  # relative to this module's folder

    def _vocabulary(self) -> dict[str, str]:
        forms = {form: name for name, words in FINDINGS.items() for form in words}
        for word in str(self.options["extra_words"]).split(","):
            word = word.strip().lower()
            if word:
                forms.setdefault(word, word)
        return forms

    def findings(self, text: str) -> set[str]:
        """The canonical findings named in ``text`` (negation is not looked at)."""
        vocabulary = self._vocabulary()
        return {vocabulary[w] for w in _WORD.findall(text.lower()) if w in vocabulary}

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        recall: list[float] = []
        missed: list[float] = []
        for ref, cand in zip(references, candidates, strict=True):
            wanted = self.findings(ref)
            found = wanted & self.findings(cand)
            # No finding word in the reference: nothing to recall, the share is undefined.
            recall.append(len(found) / len(wanted) if wanted else math.nan)
            missed.append(float(len(wanted - found)))
        return MetricResult(values={"finding_recall": recall, "finding_missed": missed})

    def signature(self) -> str:
        """Version and vocabulary: what changes the numbers (the registry adds the release)."""
        words = ",".join(f"{form}>{name}" for form, name in sorted(self._vocabulary().items()))
        vocab = hashlib.sha256(words.encode("utf-8")).hexdigest()[:12]
        return f"finding_words|version:1|vocab:{vocab}"
