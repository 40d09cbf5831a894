"""``length_agreement``: a metric family written as one decorated function."""

from __future__ import annotations

import math
import re

from radconcord.plugins import metric

_WORD = re.compile(r"\w+")


@metric(name="length_agreement", higher_is_better=True, version="1",
        card="cards/length_agreement.md", kind="lexical",
        description="shorter word count over longer word count of the two reports")
def length_agreement(references: list[str], candidates: list[str]) -> list[float]:
    """Shorter over longer word count of each pair: 1.0 for equal lengths, toward 0 apart.

    Args:
        references: Reference reports.
        candidates: Candidate reports, aligned with ``references``.

    Returns:
        One value per pair in [0, 1]; ``nan`` when neither report has a word.
    """
    out = []
    for ref, cand in zip(references, candidates, strict=True):
        n_ref, n_cand = len(_WORD.findall(ref)), len(_WORD.findall(cand))
        longer = max(n_ref, n_cand)
        out.append(min(n_ref, n_cand) / longer if longer else math.nan)
    return out
