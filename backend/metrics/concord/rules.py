"""The ``rules`` variant of ``concord``: ReXVal error counts from the rule labeler and text rules.

No training and no model: every predicted error names the sentence(s) that drove it.

Analysis of one report (:func:`analyze_report`):

1. **Sentences**: a sentence ends at ``.``, ``!`` or ``?`` followed by white space or the end,
   or at a line break; decimal points ("1.5 cm") do not end one (the rule of
   ``backend/analysis/perturb.py``, written again here because metrics may not import
   analysis).
2. **Findings per sentence**: the 13 CheXpert observations other than No Finding, labelled by
   the rule CheXpert labeler (:mod:`backend.metrics.chexpert`) on the sentence alone
   (positive or uncertain = *present*, negative = *absent*), plus the extra findings of
   :data:`EXTRA_FINDINGS` (granuloma, degenerative change, scarring ...) found by phrase, absent
   when a negation cue precedes them in the sentence. A sentence naming several findings is cut
   into clauses (commas, ``and``, ``with`` ...) so that each finding gets the laterality,
   location and severity words of its own clause. Two findings are not counted twice for one
   thing: a generic opacity in a sentence that names atelectasis, consolidation, pneumonia,
   edema, a lung lesion or an effusion is that finding's description, and so is a
   consolidation beside a pneumonia; an extra finding absorbs the CheXpert observation its own
   clause names ("calcified nodule" is a granuloma, not a lung lesion; see ``_ABSORBS``).
   Heart chambers ("right atrium") are anatomy, not a side.
3. **Attributes of a present finding**: sides (``left``/``right``; ``bilateral``, ``both``,
   ``bibasilar`` = both), zones (upper: upper/apex/apical; middle: middle/mid/lingula/perihilar/
   hilar; lower: lower/base/basal/basilar/retrocardiac/costophrenic) and severity level (1:
   mild/small/minimal/trace/tiny/slight/subtle, 2: moderate, 3: large/severe/marked/extensive/
   massive/substantial).
4. **Comparison statements**: a sentence with a comparison phrase (:data:`STABLE_WORDS`,
   :data:`CHANGE_UP_WORDS`, :data:`CHANGE_DOWN_WORDS`, :data:`CHANGE_WORDS`, or a reference to
   the prior study such as "compared to prior", "since the previous") is a claim of kind
   ``stable``, ``up``, ``down`` or ``change`` about the findings the sentence names (none: a
   general claim).

Errors of a pair (:func:`compare`), one per finding or claim:

* **c1** (false finding): a finding present in the candidate, not present in the reference.
* **c2** (omission): a finding present in the reference, not present in the candidate.
* **c3** (location): a finding present in both whose sides, or zones, are given in both and
  differ (at most one c3 per finding).
* **c4** (severity): a finding present in both whose severity level is given in both and
  differs.
* **c5** (comparison not in the reference): a candidate claim the reference does not match.
* **c6** (omitted comparison): a reference claim the candidate does not match.

A claim is matched by a claim of the other report about a shared finding (or either is
general) when it is ``stable``, or when both describe a change in the same direction
(``change`` matches either direction).

Significance: findings of :data:`MINOR_FINDINGS` (incidental, chronic) and findings whose
clause calls them old, healed, remote or calcified are *insignificant*; every other abnormal
finding (support devices included) is *significant*. A severity error is significant only
when the levels are two apart (mild vs severe) on a significant finding. A comparison claim
is insignificant when it is a bare statement of stability, significant when it describes a
change. Since ``RULES_VERSION`` 2 the minor list and the severity rule are those of the
synthetic-error generator (:data:`backend.analysis.synthetic_errors.MINOR_FINDINGS`: hiatal
hernia, linear/subsegmental atelectasis, low lung volumes and osteopenia added), so the rules
count what the training pairs were built to mean.

Known limits: lexical negation and attribution; findings outside the phrase lists are missed;
a finding named twice with different attributes is merged; the direction of a change is not
checked against the finding's status.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from radconcord.backend.metrics.chexpert import label_report
from radconcord.backend.metrics.labels import NEGATIVE, OBSERVATIONS, POSITIVE, UNCERTAIN
from radconcord.backend.metrics.regex_gate import GateTable

__all__ = [
    "CHANGE_DOWN_WORDS",
    "CHANGE_UP_WORDS",
    "CHANGE_WORDS",
    "COUNT_NAMES",
    "EXTRA_FINDINGS",
    "FINDINGS",
    "MINOR_FINDINGS",
    "RULES_VERSION",
    "STABLE_WORDS",
    "Claim",
    "Finding",
    "ReportAnalysis",
    "RuleError",
    "Sentence",
    "analyze_report",
    "analyze_reports",
    "compare",
    "count_vector",
    "rule_counts",
    "split_sentences",
]

#: Bump whenever a phrase list or rule changes a count: it is part of the signature.
RULES_VERSION = "2"

#: The 12 count names in the order used everywhere: c1_sig, c1_insig, ..., c6_insig.
COUNT_NAMES: tuple[str, ...] = tuple(
    f"c{k}_{lvl}" for k in range(1, 7) for lvl in ("sig", "insig")
)

_CHEXPERT = tuple(o for o in OBSERVATIONS if o != "No Finding")

#: Findings outside the CheXpert observations: name -> phrase pattern (lowercase text).
EXTRA_FINDINGS: dict[str, str] = {
    "Granuloma": r"granulomas?|granulomata|granulomatous (?:disease|changes?|process)"
                 r"|calcified (?:nodules?|nodular densit(?:y|ies)|(?:hilar |mediastinal )?"
                 r"(?:lymph )?nodes?)",
    "Degenerative Change": r"degenerative (?:changes?|disease|spurring|endplate changes?)"
                           r"|spondylosis|osteophytes?|osteophytosis|arthropathy|arthritis"
                           r"|(?:dish|diffuse idiopathic skeletal hyperostosis)",
    "Nipple Shadow": r"nipple shadows?",
    "Tortuous Aorta": r"tortuous (?:thoracic |descending )?aorta|aorta is tortuous"
                      r"|tortuosity of the (?:thoracic )?aorta|aortic tortuosity"
                      r"|(?:ectatic|unfolded|unfolding of the) aorta"
                      r"|(?:aortic|atherosclerotic|vascular) calcifications?"
                      r"|calcifi(?:ed|cation of the) aort(?:a|ic knob|ic arch)"
                      r"|atherosclero(?:sis|tic (?:changes?|disease))",
    "Scarring": r"scar(?:s|ring)?|fibrotic (?:changes?|scarring)|apical (?:pleural )?capping",
    "Scoliosis": r"scoliosis|kyphosis|dextroscoliosis|levoscoliosis",
    "Postsurgical Change": r"(?:surgical |cholecystectomy |mediastinal |vascular )?clips?"
                           r"|(?:post-?surgical|post-?operative) changes?",
    "Hyperinflation": r"hyperinflat(?:ed|ion)|hyperexpan(?:ded|sion)|emphysema(?:tous)?"
                      r"|copd|chronic obstructive (?:pulmonary|lung) disease",
    "Hiatal Hernia": r"hiatal hernia|hiatus hernia",
    "Minor Atelectasis": r"(?:linear|platelike|plate-like|discoid|subsegmental|bandlike"
                         r"|band-like|streaky) (?:\w+ ){0,2}?atelecta\w*",
    "Low Lung Volumes": r"low (?:lung )?volumes?|hypoinflat\w*|hypoventilat\w*"
                        r"|(?:poor|shallow) inspiration"
                        r"|lung volumes are (?:low|diminished|reduced)",
    "Osteopenia": r"osteopeni\w*|demineraliz\w*|osteoporo\w*",
}

#: Every finding the rules know, in a fixed order (CheXpert's 13, then the extras).
FINDINGS: tuple[str, ...] = (*_CHEXPERT, *EXTRA_FINDINGS)

#: Incidental or chronic findings whose addition, omission or misdescription is insignificant.
MINOR_FINDINGS: frozenset[str] = frozenset(
    {"Granuloma", "Degenerative Change", "Nipple Shadow", "Tortuous Aorta", "Scarring",
     "Scoliosis", "Postsurgical Change", "Hiatal Hernia", "Minor Atelectasis",
     "Low Lung Volumes", "Osteopenia"}
)

#: A finding named as old/healed/remote/calcified in its clause is insignificant.
_MINOR_MODIFIER = re.compile(r"\b(?:old|healed|healing|remote|chronic-appearing|calcified)\b")

#: An extra finding absorbs these CheXpert observations in its clause ("calcified nodule" is
#: a granuloma, not a lung lesion; "apical pleural thickening" scarring, not pleural other).
_ABSORBS: dict[str, tuple[str, ...]] = {
    "Granuloma": ("Lung Lesion",),
    "Nipple Shadow": ("Lung Lesion", "Lung Opacity"),
    "Scarring": ("Lung Opacity", "Pleural Other", "Atelectasis"),
    "Postsurgical Change": ("Support Devices",),
    "Hiatal Hernia": ("Lung Opacity",),
    "Minor Atelectasis": ("Atelectasis", "Lung Opacity"),
}

#: A descriptive finding in a sentence that also names one of the interpreting findings is
#: taken as that finding's description ("bibasilar opacities likely reflect atelectasis",
#: "consolidation concerning for pneumonia"), so it is not counted twice.
_FOLDED_INTO: dict[str, tuple[str, ...]] = {
    "Lung Opacity": ("Atelectasis", "Consolidation", "Pneumonia", "Edema", "Lung Lesion",
                     "Pleural Effusion"),
    "Consolidation": ("Pneumonia",),
}

_EXTRA_RE = {name: re.compile(rf"\b(?:{p})\b") for name, p in EXTRA_FINDINGS.items()}
_EXTRA_GATE = GateTable([rx.pattern for rx in _EXTRA_RE.values()])
_NEG_CUE = re.compile(
    r"\b(?:no|without|free of|negative for|absence of|resolution of|resolved|not|neither|nor"
    r"|clear of)\b"
)
_NEG_TERM = re.compile(r"\b(?:but|however|although|though|whereas|except|which|there (?:is|are))\b")

# --- attributes -----------------------------------------------------------------------------
# Sides of the heart are anatomy, not the laterality of a finding.
_CHAMBER = re.compile(r"\b(?:left|right)(?:-sided)? (?:atri(?:um|al)|ventric(?:le|ular)|heart)\b")
_SIDE_RE = re.compile(r"\b(left|right|bilateral(?:ly)?|both|bibasilar|bibasal|biapical)\b")
_ZONE_WORDS: dict[str, str] = {
    "upper": "upper", "apex": "upper", "apices": "upper", "apical": "upper", "biapical": "upper",
    "middle": "middle", "mid": "middle", "lingula": "middle", "lingular": "middle",
    "perihilar": "middle", "hilar": "middle", "hilum": "middle",
    "lower": "lower", "base": "lower", "bases": "lower", "basal": "lower", "basilar": "lower",
    "bibasilar": "lower", "bibasal": "lower", "retrocardiac": "lower",
    "costophrenic": "lower",
}
_ZONE_RE = re.compile(r"\b(" + "|".join(sorted(_ZONE_WORDS, key=len, reverse=True)) + r")\b")
_SEVERITY_WORDS: dict[str, int] = {
    **dict.fromkeys(("mild", "mildly", "small", "minimal", "minimally", "trace",
                     "tiny", "slight", "slightly", "subtle", "minor"), 1),
    **dict.fromkeys(("moderate", "moderately", "moderate-sized", "medium"), 2),
    **dict.fromkeys(("large", "severe", "severely", "marked", "markedly",
                     "extensive", "massive", "substantial", "substantially", "huge"), 3),
}
_SEVERITY_RE = re.compile(
    r"\b(" + "|".join(sorted(_SEVERITY_WORDS, key=len, reverse=True)) + r")\b"
)

# --- comparison ----------------------------------------------------------------------------
#: Bare stability phrases (an insignificant comparison).
STABLE_WORDS: tuple[str, ...] = (
    "unchanged", "stable", "stably", "no change", "no significant change", "no interval change",
    "not changed", "without change", "without interval change", "similar",
    "again seen", "again noted", "again demonstrated", "redemonstrated", "redemonstrates",
    "redemonstration",
    "persistent", "persists", "persisting", "remains?", "grossly stable",
)
#: Phrases of a change towards more disease (a significant comparison).
CHANGE_UP_WORDS: tuple[str, ...] = (
    "increased", "increasing", "increase", "worsened", "worsening", "worse", "progressed",
    "progression", "progressive", "enlarging", "larger", "new", "newly", "interval development",
    "developed", "developing", "more prominent",
)
#: Phrases of a change towards less disease (a significant comparison).
CHANGE_DOWN_WORDS: tuple[str, ...] = (
    "decreased", "decreasing", "decrease", "improved", "improving", "improvement",
    "resolved", "resolving", "resolution", "diminished", "smaller", "less prominent",
    "interval removal", "removed", "cleared", "clearing",
)
#: A described change without direction, or a reference to the previous study.
CHANGE_WORDS: tuple[str, ...] = ("changed", "interval change", "has changed")
_PRIOR = (
    r"(?:compared|comparison) (?:to|with)(?: the)? (?:prior|previous|earlier|last|recent)"
    r"|since(?: the)? (?:prior|previous|last|earlier)|from(?: the)? (?:prior|previous)"
    r"|(?:prior|previous|earlier|old) (?:study|studies|exam|examination|radiographs?|films?"
    r"|chest (?:x-?rays?|radiographs?)|imaging)|in the interval"
)
_NOT_COMPARISON = re.compile(
    r"\b(?:increased (?:lung |interstitial |bronchovascular |pulmonary )?(?:markings|opacity"
    r"|density|densities|lucency|attenuation)|new york"
    r"|no (?:other )?new\b[^.;]*"
    r"|remains? (?:within normal|normal|clear|unremarkable))\b"
)


def _words(items: Iterable[str]) -> str:
    return "|".join(sorted(items, key=len, reverse=True))


_STABLE_RE = re.compile(rf"\b(?:{_words(STABLE_WORDS)})\b")
_UP_RE = re.compile(rf"\b(?:{_words(CHANGE_UP_WORDS)})\b")
_DOWN_RE = re.compile(rf"\b(?:{_words(CHANGE_DOWN_WORDS)})\b")
_CHANGE_RE = re.compile(rf"\b(?:{_words(CHANGE_WORDS)})\b")
_PRIOR_RE = re.compile(rf"\b(?:{_PRIOR})\b")
# Masks the negated change phrases before the change words are looked for.
_NEGATED_CHANGE = re.compile(
    r"\bno (?:(?:significant|substantial|appreciable|interval|definite) )*(?:change|increase"
    r"|decrease|progression|worsening|improvement)\b|\bnot (?:significantly )?"
    r"(?:changed|increased|decreased|improved|worsened)\b|\bwithout (?:interval )?change\b"
)

# --- sentences and clauses -----------------------------------------------------------------
_SENTENCE = re.compile(r"[^\n]*?(?:[.!?](?=\s|$)|(?=\n)|$)")
_CLAUSE_SPLIT = re.compile(r"[,;]|\b(?:and|with|but|while|whereas|as well as|also)\b")
_SPACES = re.compile(r"\s+")
_TOKEN = re.compile(r"[a-z0-9]+")
_NORMAL_FOR = re.compile(r"\bnormal (?:in |for )?(?:size|caliber|contour)\b")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans ``(start, end)`` of ``text``, trailing white space excluded.

    Args:
        text: A report.

    Returns:
        The spans in text order; empty sentences are left out.
    """
    spans: list[tuple[int, int]] = []
    pos = len(text) - len(text.lstrip())
    n = len(text)
    while pos < n:
        m = _SENTENCE.match(text, pos)
        end = m.end() if m else n
        if end == pos:  # a bare line break
            end = pos + 1
        chunk = text[pos:end]
        if chunk.strip():
            lead = len(chunk) - len(chunk.lstrip())
            spans.append((pos + lead, pos + len(chunk.rstrip())))
        pos = end
        while pos < n and text[pos].isspace():
            pos += 1
    return spans


# --- data ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sentence:
    """One sentence of a report.

    Attributes:
        text: The sentence as written.
        start: Offset of its first character in the report.
        end: Offset just past its last character.
    """

    text: str
    start: int
    end: int

    def evidence(self) -> dict[str, Any]:
        """JSON form: ``{"text", "span": [start, end]}``."""
        return {"text": self.text, "span": [self.start, self.end]}


@dataclass(slots=True)
class Finding:
    """One finding of a report, merged over its mentions.

    Attributes:
        name: One of :data:`FINDINGS`.
        present: Whether some mention is positive or uncertain.
        uncertain: Whether every present mention is uncertain.
        sides: ``left``/``right`` named with the present mentions.
        zones: ``upper``/``middle``/``lower`` named with the present mentions.
        severity: Highest severity level named with the present mentions (1-3), or None.
        minor: Whether the finding is insignificant (see :data:`MINOR_FINDINGS`).
        sentences: Indices of the sentences mentioning it, in text order.
    """

    name: str
    present: bool = False
    uncertain: bool = True
    sides: set[str] = field(default_factory=set)
    zones: set[str] = field(default_factory=set)
    severity: int | None = None
    minor: bool = True
    sentences: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Claim:
    """A comparison statement with the previous study.

    Attributes:
        sentence: Index of its sentence.
        kind: ``stable``, ``up``, ``down`` or ``change``.
        findings: The findings its sentence names (empty: a general claim).
    """

    sentence: int
    kind: str
    findings: frozenset[str]

    @property
    def significant(self) -> bool:
        """A described change is significant, a bare stability statement is not."""
        return self.kind != "stable"


@dataclass(slots=True)
class _SentenceInfo:
    """What one sentence says (cached by sentence text within a call)."""

    status: dict[str, int]  # finding -> POSITIVE/UNCERTAIN/NEGATIVE (mentioned ones)
    attrs: dict[str, tuple[frozenset[str], frozenset[str], int | None, bool]]
    claim_kind: str | None
    n_side: int
    n_zone: int
    n_severity: int
    n_negation: int
    tokens: tuple[str, ...]
    present: frozenset[str] = frozenset()
    token_set: frozenset[str] = frozenset()
    mentioned: frozenset[str] = frozenset()
    key: str = ""

    def __post_init__(self) -> None:
        self.key = " ".join(self.tokens)
        self.present = frozenset(n for n, v in self.status.items() if v in (POSITIVE, UNCERTAIN))
        self.token_set = frozenset(self.tokens)
        self.mentioned = frozenset(self.status)


@dataclass
class ReportAnalysis:
    """Everything the rules and the features know of one report.

    Attributes:
        text: The report.
        sentences: Its sentences.
        findings: Finding name -> merged finding (mentioned findings only).
        claims: Its comparison statements.
        sentence_findings: Per sentence, the findings present in it.
        sentence_tokens: Per sentence, its set of lowercase word tokens.
        tokens: Lowercase word tokens of the report.
        n_side, n_zone, n_severity, n_negation: Counts of such words.
        present: Names of the present findings.
        token_counts, token_set, bigrams: Token statistics of the report.
        sentence_keys: Its sentences as lowercase token strings (to count shared sentences).
    """

    text: str
    sentences: list[Sentence]
    findings: dict[str, Finding]
    claims: list[Claim]
    sentence_findings: list[frozenset[str]]
    sentence_tokens: list[frozenset[str]]
    tokens: tuple[str, ...]
    n_side: int = 0
    n_zone: int = 0
    n_severity: int = 0
    n_negation: int = 0
    present: frozenset[str] = frozenset()
    sentence_keys: frozenset[str] = frozenset()  # filled by analyze_report

    def __post_init__(self) -> None:
        self.present = frozenset(n for n, f in self.findings.items() if f.present)

    # The token statistics serve the gbm features only: computed on first use, so that the
    # rules variant does not pay for them.
    @cached_property
    def token_counts(self) -> Counter[str]:
        """Token -> occurrences in the report."""
        return Counter(self.tokens)

    @cached_property
    def token_set(self) -> frozenset[str]:
        """The report's distinct tokens."""
        return frozenset(self.token_counts)

    @cached_property
    def bigrams(self) -> frozenset[tuple[str, str]]:
        """The report's distinct pairs of adjacent tokens."""
        return frozenset(zip(self.tokens, self.tokens[1:], strict=False))

    @property
    def n_uncertain(self) -> int:
        """Present findings named only with uncertainty."""
        return sum(1 for f in self.findings.values() if f.present and f.uncertain)


@dataclass(frozen=True)
class RuleError:
    """One predicted error and its evidence.

    Attributes:
        category: ReXVal category 1-6.
        significant: Clinically significant or not.
        finding: The finding concerned (``None`` for a general comparison).
        reason: A short explanation.
        reference: The reference sentence that drove it, if any.
        candidate: The candidate sentence that drove it, if any.
    """

    category: int
    significant: bool
    finding: str | None
    reason: str
    reference: Sentence | None = None
    candidate: Sentence | None = None

    @property
    def index(self) -> int:
        """Position of this error's cell in the 12-count vector."""
        return 2 * (self.category - 1) + (0 if self.significant else 1)

    def as_dict(self) -> dict[str, Any]:
        """JSON form for ``details``."""
        return {
            "category": self.category,
            "significant": self.significant,
            "finding": self.finding,
            "reason": self.reason,
            "reference": None if self.reference is None else self.reference.evidence(),
            "candidate": None if self.candidate is None else self.candidate.evidence(),
        }


# --- analysis --------------------------------------------------------------------------------


def _normalize(text: str) -> str:
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return _SPACES.sub(" ", text.lower()).strip()


def _extra_status(text: str) -> dict[str, tuple[int, int]]:
    """Extra finding -> (status, match start) in a lowercase sentence or clause."""
    out: dict[str, tuple[int, int]] = {}
    may = _EXTRA_GATE.candidates(text)
    for i, (name, rx) in enumerate(_EXTRA_RE.items()):
        if not may >> i & 1:
            continue  # none of its first three characters occurs: it cannot match
        m = rx.search(text)
        if m is None:
            continue
        before = text[: m.start()]
        negated = False
        for cue in _NEG_CUE.finditer(before):
            if not _NEG_TERM.search(before, cue.end()):
                negated = True
        out[name] = (NEGATIVE if negated else POSITIVE, m.start())
    return out


def _attributes(text: str) -> tuple[frozenset[str], frozenset[str], int | None, bool]:
    sides: set[str] = set()
    for m in _SIDE_RE.finditer(_CHAMBER.sub(" ", text)):
        w = m.group(1)
        if w in ("left", "right"):
            sides.add(w)
        else:
            sides.update(("left", "right"))
    zones = frozenset(_ZONE_WORDS[m.group(1)] for m in _ZONE_RE.finditer(text))
    levels = [_SEVERITY_WORDS[m.group(1)] for m in _SEVERITY_RE.finditer(_mask_size(text))]
    minor = bool(_MINOR_MODIFIER.search(text))
    return frozenset(sides), zones, (max(levels) if levels else None), minor


def _mask_size(text: str) -> str:
    # "normal in size", "smaller/larger than": size words that are no severity of a finding.
    return _NORMAL_FOR.sub(" ", text)


def _mentioned(text: str, memo: MutableMapping[Any, Any] | None = None) -> dict[str, int]:
    """Finding -> status for one sentence or clause (CheXpert rules + extras), unabsorbed.

    ``memo`` (the call's sentence cache) keeps each distinct text's answer: clauses such as
    "no pneumothorax" recur across sentences. The caller gets its own copy to edit.
    """
    if memo is not None:
        key = ("mentioned", text)  # a tuple: never equal to a sentence's text key
        known = memo.get(key)
        if known is None:
            known = memo[key] = _mentioned(text)
        return dict(known)
    labels = label_report(text)
    status: dict[str, int] = {}
    for name, value in zip(OBSERVATIONS, labels, strict=True):
        if name != "No Finding" and value is not None:
            status[name] = value
    for name, (value, _) in _extra_status(text).items():
        status[name] = value
    return status


def _absorbers(status: dict[str, int], name: str) -> bool:
    """Whether a present extra finding in ``status`` absorbs observation ``name``."""
    return any(name in _ABSORBS.get(extra, ()) and status.get(extra) in (POSITIVE, UNCERTAIN)
               for extra in _ABSORBS)


def _claim_kind(text: str) -> str | None:
    masked = _NOT_COMPARISON.sub(" ", text)
    stable = bool(_NEGATED_CHANGE.search(masked))
    masked = _NEGATED_CHANGE.sub(" ", masked)
    if _UP_RE.search(masked):
        return "up"
    if _DOWN_RE.search(masked):
        return "down"
    if _CHANGE_RE.search(masked):
        return "change"
    if stable or _STABLE_RE.search(masked) or _PRIOR_RE.search(masked):
        return "stable"
    return None


def _sentence_info(text: str, memo: MutableMapping[Any, Any] | None = None) -> _SentenceInfo:
    low = _normalize(text)
    status = _mentioned(low, memo)
    attrs: dict[str, tuple[frozenset[str], frozenset[str], int | None, bool]] = {}
    for generic, specific in _FOLDED_INTO.items():
        if status.get(generic) in (POSITIVE, UNCERTAIN) and any(
            status.get(s) in (POSITIVE, UNCERTAIN) for s in specific
        ):
            del status[generic]
    if len(status) > 1:
        clauses = [c for c in _CLAUSE_SPLIT.split(low) if c.strip()]
        where: dict[str, list[tuple[str, dict[str, int]]]] = {}
        for clause in clauses:
            clause_status = _mentioned(clause, memo)
            for name in clause_status:
                where.setdefault(name, []).append((clause, clause_status))
        for name in list(status):
            named = where.get(name)
            absorbed = (all(_absorbers(cs, name) for _, cs in named) if named
                        else _absorbers(status, name))
            if absorbed:
                del status[name]
                continue
            if status[name] not in (POSITIVE, UNCERTAIN):
                continue
            if not named:
                # Named across clauses ("heart and mediastinum are enlarged"): whole sentence.
                attrs[name] = _attributes(low)
                continue
            parts = [_attributes(c) for c, _ in named]
            levels = [p[2] for p in parts if p[2] is not None]
            attrs[name] = (
                frozenset().union(*(p[0] for p in parts)),
                frozenset().union(*(p[1] for p in parts)),
                max(levels) if levels else None,
                any(p[3] for p in parts),
            )
    else:
        for name, value in status.items():
            if value in (POSITIVE, UNCERTAIN):
                attrs[name] = _attributes(low)
    masked = _mask_size(low)
    return _SentenceInfo(
        status=status,
        attrs=attrs,
        claim_kind=_claim_kind(low),
        n_side=len(_SIDE_RE.findall(low)),
        n_zone=len(_ZONE_RE.findall(low)),
        n_severity=len(_SEVERITY_RE.findall(masked)),
        n_negation=len(_NEG_CUE.findall(low)),
        tokens=tuple(_TOKEN.findall(low)),
    )


def analyze_report(
    text: str, cache: MutableMapping[str, Any] | None = None
) -> ReportAnalysis:
    """Analyse one report.

    Args:
        text: The report.
        cache: Optional sentence-text -> analysis cache shared across reports of one call
            (IU-style reports repeat many sentences).

    Returns:
        Its sentences, findings and comparison claims.
    """
    spans = split_sentences(text)
    sentences = [Sentence(text[s:e], s, e) for s, e in spans]
    findings: dict[str, Finding] = {}
    claims: list[Claim] = []
    sent_findings: list[frozenset[str]] = []
    sent_tokens: list[frozenset[str]] = []
    tokens: list[str] = []
    n_side = n_zone = n_sev = n_neg = 0
    infos: list[_SentenceInfo] = []
    for i, sent in enumerate(sentences):
        key = sent.text
        info = cache.get(key) if cache is not None else None
        if info is None:
            info = _sentence_info(sent.text, cache)
            if cache is not None:
                cache[key] = info
        infos.append(info)
        for name, value in info.status.items():
            f = findings.get(name)
            if f is None:
                f = findings[name] = Finding(name)
            if value in (POSITIVE, UNCERTAIN):
                sides, zones, level, minor_mod = info.attrs.get(
                    name, (frozenset(), frozenset(), None, False)
                )
                f.minor = (name in MINOR_FINDINGS or minor_mod) and (f.minor or not f.present)
                f.present = True
                f.uncertain = f.uncertain and value == UNCERTAIN
                f.sides.update(sides)
                f.zones.update(zones)
                if level is not None:
                    f.severity = level if f.severity is None else max(f.severity, level)
            f.sentences.append(i)
        if info.claim_kind is not None:
            claims.append(Claim(i, info.claim_kind, info.mentioned))
        sent_findings.append(info.present)
        sent_tokens.append(info.token_set)
        tokens.extend(info.tokens)
        n_side += info.n_side
        n_zone += info.n_zone
        n_sev += info.n_severity
        n_neg += info.n_negation
    for f in findings.values():
        if not f.present:
            f.minor = f.name in MINOR_FINDINGS
    keys = [info.key for info in infos]
    return ReportAnalysis(
        sentence_keys=frozenset(keys),
        text=text,
        sentences=sentences,
        findings=findings,
        claims=claims,
        sentence_findings=sent_findings,
        sentence_tokens=sent_tokens,
        tokens=tuple(tokens),
        n_side=n_side,
        n_zone=n_zone,
        n_severity=n_sev,
        n_negation=n_neg,
    )


def analyze_reports(
    texts: Iterable[str], cache: MutableMapping[str, Any] | None = None
) -> list[ReportAnalysis]:
    """Analyse reports; identical texts are analysed once.

    Args:
        texts: Reports.
        cache: Optional sentence cache (see :func:`analyze_report`); one is made when omitted.

    Returns:
        One analysis per report, in input order.
    """
    cache = {} if cache is None else cache
    done: dict[str, ReportAnalysis] = {}
    out = []
    for t in texts:
        a = done.get(t)
        if a is None:
            a = done[t] = analyze_report(t, cache)
        out.append(a)
    return out


# --- comparison of two reports -------------------------------------------------------------


def _first_present(a: ReportAnalysis, name: str) -> Sentence | None:
    for i, names in enumerate(a.sentence_findings):
        if name in names:
            return a.sentences[i]
    return None


def _first_mention(a: ReportAnalysis, name: str) -> Sentence | None:
    f = a.findings.get(name)
    if f is None or not f.sentences:
        return None
    return a.sentences[min(f.sentences)]


def _matches(claim: Claim, others: list[Claim]) -> Claim | None:
    for other in others:
        related = (not claim.findings or not other.findings
                   or bool(claim.findings & other.findings))
        if not related:
            continue
        if claim.kind == "stable":
            return other
        if other.kind != "stable" and (
            claim.kind == other.kind or "change" in (claim.kind, other.kind)
        ):
            return other
    return None


def _side_text(values: Iterable[str]) -> str:
    return "/".join(sorted(values)) or "-"


def compare(reference: ReportAnalysis, candidate: ReportAnalysis) -> list[RuleError]:
    """The errors of ``candidate`` against ``reference``.

    Args:
        reference: Analysis of the reference report.
        candidate: Analysis of the candidate report.

    Returns:
        The predicted errors, by finding order then comparison claims.
    """
    errors: list[RuleError] = []
    ref_present, cand_present = reference.present, candidate.present
    for name in FINDINGS:
        in_ref, in_cand = name in ref_present, name in cand_present
        if not in_ref and not in_cand:
            continue
        if in_cand and not in_ref:
            f = candidate.findings[name]
            errors.append(RuleError(
                1, not f.minor, name, f"{name} in the candidate only",
                _first_mention(reference, name), _first_present(candidate, name)))
            continue
        if in_ref and not in_cand:
            f = reference.findings[name]
            errors.append(RuleError(
                2, not f.minor, name, f"{name} in the reference only",
                _first_present(reference, name), _first_mention(candidate, name)))
            continue
        rf, cf = reference.findings[name], candidate.findings[name]
        significant = not (rf.minor and cf.minor)
        r_sent, c_sent = _first_present(reference, name), _first_present(candidate, name)
        side_diff = bool(rf.sides and cf.sides and rf.sides != cf.sides)
        zone_diff = bool(rf.zones and cf.zones and rf.zones != cf.zones)
        if side_diff or zone_diff:
            what = []
            if side_diff:
                what.append(f"side {_side_text(rf.sides)} -> {_side_text(cf.sides)}")
            if zone_diff:
                what.append(f"zone {_side_text(rf.zones)} -> {_side_text(cf.zones)}")
            errors.append(RuleError(3, significant, name, f"{name}: " + ", ".join(what),
                                    r_sent, c_sent))
        if rf.severity is not None and cf.severity is not None and rf.severity != cf.severity:
            # One level apart (mild vs moderate) is a matter of degree, insignificant; two
            # (mild vs severe) changes management, as the generator's severity recipe counts.
            errors.append(RuleError(
                4, significant and abs(rf.severity - cf.severity) >= 2, name,
                f"{name}: severity {rf.severity} -> {cf.severity} (1 mild, 2 moderate, 3 severe)",
                r_sent, c_sent))
    for claim in candidate.claims:
        if _matches(claim, reference.claims) is None:
            errors.append(RuleError(
                5, claim.significant, _claim_finding(claim),
                f"comparison ({claim.kind}) in the candidate only",
                None, candidate.sentences[claim.sentence]))
    for claim in reference.claims:
        if _matches(claim, candidate.claims) is None:
            errors.append(RuleError(
                6, claim.significant, _claim_finding(claim),
                f"comparison ({claim.kind}) in the reference only",
                reference.sentences[claim.sentence], None))
    return errors


def _claim_finding(claim: Claim) -> str | None:
    for name in FINDINGS:
        if name in claim.findings:
            return name
    return None


def count_vector(errors: Iterable[RuleError]) -> list[int]:
    """The 12 counts (:data:`COUNT_NAMES` order) of a list of errors."""
    counts = [0] * 12
    for e in errors:
        counts[e.index] += 1
    return counts


def rule_counts(reference: str, candidate: str) -> list[int]:
    """The 12 rule counts of one pair (convenience for tests and notebooks).

    Args:
        reference: Reference report.
        candidate: Candidate report.
    """
    ref, cand = analyze_reports([reference, candidate])
    return count_vector(compare(ref, cand))
