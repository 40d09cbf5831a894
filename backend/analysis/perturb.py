"""Perturbation probes (VLScore paper, Tables 2-3): controlled edits of reference reports.

Each probe takes a reference report and changes it in one known way; a metric then scores the
perturbed text against the original. A metric that follows radiologists should penalise the
clinically significant edits more than the insignificant ones.

Perturbation types (``KINDS``):

* ``remove_finding`` (significant): remove one *clinical* sentence.
* ``remove_nonclinical`` (insignificant): remove one *non-clinical* sentence.
* ``swap_laterality`` (significant): exchange ``left`` and ``right`` (case kept) in every
  sentence that names exactly one side; a sentence naming both sides ("left and right lungs")
  is left alone because mirroring it may not change its meaning.
* ``change_severity`` (significant): exchange severity words both ways through a fixed table
  (``small <-> large``, ``mild <-> severe``, ``minimal <-> moderate``, ...), every occurrence.
* ``reword`` (insignificant): one meaning-preserving edit chosen among the places where a
  rewording rule applies (``there is no -> no evidence of``, ``is seen -> is noted``,
  ``demonstrates -> shows``, ``unremarkable <-> within normal limits``, a final full stop
  dropped, ``;`` -> ``.`` ...). Hedges ("there appears") are deliberately not used: they mark
  uncertainty, which the CheXpert labeler and radiologists read as a change.

Clinical vs non-clinical sentences. A sentence is clinical when the project's rule-based
CheXpert labeler (``backend.metrics.chexpert``) finds any positive, uncertain or negative
mention of an observation other than "No Finding" in it (so "No pleural effusion." and
"Heart size is normal." are clinical, and so is a support-device mention). Everything else is
non-clinical: normal boilerplate the labeler has no observation for ("Osseous structures are
unremarkable.", "The lungs are clear."), technique and comparison lines. The sole sentence
of a report is never removed (an empty candidate is not a report).

Sentences end at ``.``, ``!`` or ``?`` followed by whitespace or the end of the text, or at a
line break; decimal points ("1.5 cm") do not end a sentence.

Determinism: the random choices (which sentence, which rewording site) come from
``random.Random`` seeded with the string ``"{seed}:{report index}:{kind}"``, so a probe set
depends only on the seed and the reports, and one kind's choice does not shift another's.
When a kind has nothing to act on, no perturbation is produced and the reason is reported
in :attr:`ProbeSet.skipped`; an unchanged copy is never passed off as a perturbation.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from radconcord.backend.metrics.concord import rules

__all__ = [
    "KINDS",
    "KIND_LABELS",
    "SIGNIFICANT",
    "Perturbation",
    "ProbeSet",
    "Skipped",
    "change_severity",
    "generate",
    "is_clinical",
    "perturb",
    "remove_sentence",
    "reword",
    "split_sentences",
    "swap_laterality",
]

KINDS: tuple[str, ...] = (
    "remove_finding",
    "remove_nonclinical",
    "swap_laterality",
    "change_severity",
    "reword",
)
SIGNIFICANT: dict[str, bool] = {
    "remove_finding": True,
    "remove_nonclinical": False,
    "swap_laterality": True,
    "change_severity": True,
    "reword": False,
}
KIND_LABELS: dict[str, str] = {
    "remove_finding": "Remove a finding sentence",
    "remove_nonclinical": "Remove a non-clinical sentence",
    "swap_laterality": "Swap left/right",
    "change_severity": "Change severity",
    "reword": "Reword non-informative words",
}

_SIDE = re.compile(r"\b(left|right)\b", re.IGNORECASE)

_SEVERITY_PAIRS: tuple[tuple[str, str], ...] = (
    ("small", "large"),
    ("smaller", "larger"),
    ("mild", "severe"),
    ("mildly", "severely"),
    ("minimal", "moderate"),
    ("minimally", "moderately"),
    ("slight", "marked"),
    ("slightly", "markedly"),
    ("tiny", "extensive"),
)
_SEVERITY: dict[str, str] = {
    **{a: b for a, b in _SEVERITY_PAIRS},
    **{b: a for a, b in _SEVERITY_PAIRS},
}
_SEVERITY_RE = re.compile(r"\b(" + "|".join(sorted(_SEVERITY, key=len, reverse=True)) + r")\b",
                          re.IGNORECASE)

# (pattern, replacement): each keeps the sentence's clinical content.
_REWORD_RULES: tuple[tuple[str, str], ...] = (
    (r"\bthere is no\b", "no evidence of"),
    (r"\bthere are no\b", "no evidence of"),
    (r"\bno evidence of\b", "no"),
    (r"\bis seen\b", "is noted"),
    (r"\bare seen\b", "are noted"),
    (r"\bis noted\b", "is seen"),
    (r"\bare noted\b", "are seen"),
    (r"\bdemonstrates\b", "shows"),
    (r"\bshows\b", "demonstrates"),
    (r"\bidentified\b", "seen"),
    (r"\bunremarkable\b", "within normal limits"),
    (r"\bwithin normal limits\b", "unremarkable"),
    (r"\bthe lungs\b", "both lungs"),
    (r"\bis again\b", "is once more"),
    (r";", "."),
    (r"\.(?=\s*$)", ""),
)
_REWORD = tuple((re.compile(p, re.IGNORECASE), r) for p, r in _REWORD_RULES)


@dataclass(frozen=True)
class Perturbation:
    """One perturbed report.

    Attributes:
        index: Index of the original report in the input.
        kind: One of :data:`KINDS`.
        significant: Whether the change is clinically significant.
        original: The original report.
        perturbed: The changed report.
        detail: What changed (e.g. the removed sentence).
    """

    index: int
    kind: str
    significant: bool
    original: str
    perturbed: str
    detail: str


@dataclass(frozen=True)
class Skipped:
    """A (report, kind) for which nothing could be perturbed, and why."""

    index: int
    kind: str
    reason: str


@dataclass(frozen=True)
class ProbeSet:
    """The perturbations of :func:`generate` and the (report, kind) combinations skipped."""

    seed: int
    perturbations: tuple[Perturbation, ...]
    skipped: tuple[Skipped, ...]


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans ``(start, end)`` of ``text``; each span includes trailing whitespace.

    Spans cover the text after its leading whitespace without gaps, so removing one span and
    stripping the result leaves the other sentences exactly as they were. The sentences are
    concord's (:func:`backend.metrics.concord.rules.split_sentences`), so the perturbations,
    the synthetic errors and the metric cut a report the same way; each is extended to the
    next sentence's start.
    """
    spans = rules.split_sentences(text)
    return [(start, spans[i + 1][0] if i + 1 < len(spans) else len(text))
            for i, (start, _) in enumerate(spans)]


def is_clinical(sentence: str) -> bool:
    """Whether the CheXpert labeler finds a mention other than "No Finding" in ``sentence``."""
    from radconcord.backend.metrics.chexpert import label_report
    from radconcord.backend.metrics.labels import OBSERVATIONS

    no_finding = OBSERVATIONS.index("No Finding")
    return any(v is not None for i, v in enumerate(label_report(sentence)) if i != no_finding)


def remove_sentence(text: str, span: tuple[int, int]) -> str:
    """``text`` without the sentence ``span`` (from :func:`split_sentences`), stripped."""
    start, end = span
    return (text[:start] + text[end:]).strip()


def _match_case(word: str, replacement: str) -> str:
    if word.isupper() and len(word) > 1:
        return replacement.upper()
    if word[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def swap_laterality(text: str) -> str | None:
    """Exchange left/right in sentences naming exactly one side; ``None`` when none does."""
    out: list[str] = []
    changed = False
    last = 0
    for start, end in split_sentences(text):
        sentence = text[start:end]
        sides = {m.group(1).lower() for m in _SIDE.finditer(sentence)}
        if len(sides) == 1:
            sentence = _SIDE.sub(
                lambda m: _match_case(m.group(1),
                                      "right" if m.group(1).lower() == "left" else "left"),
                sentence,
            )
            changed = True
        out.append(text[last:start] + sentence)
        last = end
    out.append(text[last:])
    return "".join(out) if changed else None


def change_severity(text: str) -> str | None:
    """Exchange every severity word through the fixed table; ``None`` when there is none."""
    if not _SEVERITY_RE.search(text):
        return None
    return _SEVERITY_RE.sub(
        lambda m: _match_case(m.group(1), _SEVERITY[m.group(1).lower()]), text
    )


def reword_sites(text: str) -> list[tuple[int, int, str]]:
    """Every place a rewording rule applies: ``(start, end, replacement)`` in text order."""
    sites: list[tuple[int, int, str]] = []
    for pattern, replacement in _REWORD:
        for m in pattern.finditer(text):
            sites.append((m.start(), m.end(), _match_case(m.group(0), replacement)
                          if m.group(0)[:1].isalpha() else replacement))
    sites.sort()
    return sites


def reword(text: str, rng: random.Random) -> tuple[str, str] | None:
    """Apply one rewording rule at a site chosen by ``rng``; ``None`` when no rule applies.

    Returns:
        ``(new text, "old -> new")``.
    """
    sites = reword_sites(text)
    if not sites:
        return None
    start, end, replacement = sites[rng.randrange(len(sites))]
    new = text[:start] + replacement + text[end:]
    return new, f"{text[start:end]!r} -> {replacement!r}"


def _rng(seed: int, index: int, kind: str) -> random.Random:
    # String seeds are hashed with SHA-512 by random.Random: stable across runs and platforms.
    return random.Random(f"{seed}:{index}:{kind}")


def perturb(text: str, kind: str, *, seed: int = 0, index: int = 0) -> Perturbation | Skipped:
    """Apply one perturbation type to one report.

    Args:
        text: The reference report.
        kind: One of :data:`KINDS`.
        seed: Seed of the random choices.
        index: The report's index (part of the random stream, see the module docstring).

    Raises:
        ValueError: for an unknown kind.
    """
    if kind not in SIGNIFICANT:
        raise ValueError(f"unknown perturbation '{kind}' (known: {', '.join(KINDS)})")
    rng = _rng(seed, index, kind)

    def done(new: str, detail: str) -> Perturbation:
        return Perturbation(index, kind, SIGNIFICANT[kind], text, new, detail)

    if kind in ("remove_finding", "remove_nonclinical"):
        spans = split_sentences(text)
        if len(spans) < 2:
            return Skipped(index, kind, "fewer than two sentences")
        want = kind == "remove_finding"
        eligible = [sp for sp in spans if is_clinical(text[sp[0]:sp[1]]) == want]
        if not eligible:
            what = "clinical" if want else "non-clinical"
            return Skipped(index, kind, f"no {what} sentence")
        span = eligible[rng.randrange(len(eligible))]
        return done(remove_sentence(text, span), f"removed: {text[span[0]:span[1]].strip()}")
    if kind == "swap_laterality":
        new = swap_laterality(text)
        if new is None:
            return Skipped(index, kind, "no sentence names exactly one side")
        return done(new, "left <-> right")
    if kind == "change_severity":
        new = change_severity(text)
        if new is None:
            return Skipped(index, kind, "no severity word")
        return done(new, "severity words exchanged")
    result = reword(text, rng)
    if result is None:
        return Skipped(index, kind, "no rewording rule applies")
    return done(*result)


def generate(
    reports: Sequence[str], *, seed: int = 0, kinds: Sequence[str] = KINDS
) -> ProbeSet:
    """Every requested perturbation of every report (see the module docstring).

    Args:
        reports: Reference reports.
        seed: Seed of the random choices.
        kinds: Perturbation types, a subset of :data:`KINDS`.

    Raises:
        ValueError: for an unknown kind.
    """
    unknown = [k for k in kinds if k not in SIGNIFICANT]
    if unknown:
        raise ValueError(f"unknown perturbation(s) {', '.join(unknown)} (known:"
                         f" {', '.join(KINDS)})")
    made: list[Perturbation] = []
    skipped: list[Skipped] = []
    for i, text in enumerate(reports):
        for kind in kinds:
            result = perturb(text, kind, seed=seed, index=i)
            (made if isinstance(result, Perturbation) else skipped).append(result)
    return ProbeSet(seed=seed, perturbations=tuple(made), skipped=tuple(skipped))
