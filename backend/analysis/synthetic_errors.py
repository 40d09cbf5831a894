"""Synthetic (reference, candidate) pairs with ReXVal error counts fixed by construction.

Training data for the ``concord`` metric (issue 27): every pair carries the 12 ReXVal counts
(:data:`COUNT_KEYS`: categories 1-6 of ``backend.types.CATEGORIES``, each clinically
significant or not). No human rating is used anywhere; the counts follow from the edit that
made the candidate. :func:`recipe_card` renders every recipe with its assumptions for the
metric card.

How a pair is made (:func:`generate_pairs`). A reference is drawn from the de-duplicated
reports. The first recipe is drawn by weight among all :data:`RECIPES`:

* a *neighbour* recipe makes a candidate from another patient's report (whole or mixed with
  the reference's sentences), and the counts come from the unmatched abnormal observations
  on either side (approximate by nature, see :func:`observation_counts`);
* any other recipe starts an *edit* pair: 1-4 edits are drawn by weight among the edit
  recipes and applied to the reference's sentences, error edits first, then the zero-error
  rewordings. Each edit adds the count it claims; an edit that cannot apply is skipped,
  never faked, and another is drawn in its place (at most three times).

Edits do not interfere: each works only on sentences no earlier edit has touched, on
observations no earlier edit has claimed, and a pair gets at most one comparison edit, so the
sum of the edits' counts is the pair's count.

Sentence analysis. Sentences come from :func:`perturb.split_sentences`. Each is analysed
once (cached): the rule CheXpert labeler gives the 13 observations (No Finding aside); a
small lexicon adds the findings of IU-style reports the labeler has no observation for
(granuloma, degenerative change, hyperinflation, hiatal hernia, ...). An observation is
*abnormal* when positive or uncertain, *negated* when only negative. Minor (incidental)
findings, whose errors are counted as clinically insignificant, are listed in
:data:`MINOR_FINDINGS`; where a minor phrase explains a labeler observation ("calcified
nodule" is a Lung Lesion, "old rib fracture" a Fracture, "sternotomy wires" a Support
Device), the minor finding replaces it in that sentence.

Determinism: pair ``i`` uses ``random.Random(f"{seed}:{i}")``; the result depends only on the
seed, the reports and the weights. References and candidates are whitespace-normalised (one
space between sentences) so that whitespace never tells an edited pair from an unedited one.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from radconcord.backend.analysis.perturb import reword as perturb_reword
from radconcord.backend.analysis.perturb import split_sentences
from radconcord.backend.metrics.chexpert import label_report
from radconcord.backend.metrics.concord.rules import EXTRA_FINDINGS as RULE_PHRASES
from radconcord.backend.metrics.labels import NEGATIVE, OBSERVATIONS, POSITIVE, UNCERTAIN

__all__ = [
    "COUNT_KEYS",
    "DEFAULT_WEIGHTS",
    "MINOR_FINDINGS",
    "RECIPES",
    "SyntheticPair",
    "generate_pairs",
    "normalise_report",
    "observation_counts",
    "recipe_card",
    "split_reports",
]

COUNT_KEYS: tuple[str, ...] = tuple(
    f"c{cat}_{sig}" for cat in range(1, 7) for sig in ("sig", "insig")
)

RECIPES: tuple[str, ...] = (
    "insert_finding",
    "affirm_finding",
    "drop_finding",
    "negate_finding",
    "swap_location",
    "change_severity",
    "add_comparison",
    "drop_comparison",
    "drop_normal",
    "reword",
    "shuffle",
    "neighbour_replace",
    "neighbour_mix",
)

_NEIGHBOUR = ("neighbour_replace", "neighbour_mix")
_ZERO = ("drop_normal", "reword", "shuffle")

#: Default relative frequencies of the recipes (see :func:`generate_pairs`).
DEFAULT_WEIGHTS: dict[str, float] = {
    "insert_finding": 1.0,
    "affirm_finding": 0.8,
    "drop_finding": 1.0,
    "negate_finding": 0.5,
    "swap_location": 1.0,
    "change_severity": 1.2,
    "add_comparison": 0.7,
    "drop_comparison": 0.6,
    "drop_normal": 0.5,
    "reword": 1.0,
    "shuffle": 0.4,
    "neighbour_replace": 1.5,
    "neighbour_mix": 2.0,
}

# (category, significant) -> position in COUNT_KEYS
_SLOT = {(cat, sig): (cat - 1) * 2 + (0 if sig else 1) for cat in range(1, 7)
         for sig in (True, False)}


@dataclass(frozen=True)
class SyntheticPair:
    """One synthetic pair.

    Attributes:
        reference: The reference report (whitespace-normalised).
        candidate: The candidate report.
        counts: 12 error counts in :data:`COUNT_KEYS` order, fixed by construction.
        recipes: The recipes applied, in order (empty for an unchanged copy).
    """

    reference: str
    candidate: str
    counts: tuple[int, ...]
    recipes: tuple[str, ...]


# --- findings lexicon ----------------------------------------------------------------------------

_NO_FINDING = OBSERVATIONS.index("No Finding")


@dataclass(frozen=True)
class _Extra:
    name: str
    pattern: re.Pattern[str]
    minor: bool
    overrides: tuple[str, ...]  # labeler observations this phrase explains in its sentence
    canon: str  # noun phrase for "No ..." sentences


def _rule_phrase(name: str) -> str:
    """The phrase list concord's rules use for finding ``name``, as a whole-word pattern: one
    definition, so that the errors made here and the errors the rules count cannot drift."""
    return rf"\b(?:{RULE_PHRASES[name]})\b"


def _extra(name: str, pattern: str, minor: bool, canon: str,
           overrides: tuple[str, ...] = ()) -> _Extra:
    return _Extra(name, re.compile(pattern), minor, overrides, canon)


# Findings frequent in IU reports that the CheXpert observations do not cover, or cover with a
# significance radiologists would not give them. Patterns run on lowercased text.
_EXTRAS: tuple[_Extra, ...] = (
    _extra("granuloma",
           r"\bgranulom\w*|\bcalcified (?:pulmonary |lung |hilar |mediastinal |right |left )?"
           r"(?:nodul\w*|densit\w*|lymph nodes?|nodes?|foc(?:us|i))\b|\bcalcific densit\w*",
           True, "calcified granuloma", ("Lung Lesion", "Lung Opacity")),
    _extra("degenerative",
           r"\bdegenerative\b|\bspondylos[ie]s\b|\bosteophyt\w*|\bdish\b|\barthriti\w*",
           True, "degenerative change"),
    _extra("spine_curvature",
           r"\bscolio\w*|\bkyphos\w*|\bkyphotic\b|\bcurvature of the \w+ spine|"
           r"\bspinal curvature\b", True, "scoliosis"),
    _extra("aorta_calcification",
           r"\btortuous\w*|\btortuosity\b|\bectatic\b|\bectasia\b|\bunfold\w*|"
           r"\batherosclero\w*|\baortic (?:arch |knob )?calcifications?|\bcalcified aort\w*|"
           r"\bcalcifications? (?:of|in|within) the (?:thoracic )?aort\w*|"
           r"\bannul(?:ar|us) calcification|\bvascular calcifications?", True, "aortic tortuosity"),
    _extra("scarring",
           r"\bscar(?:s|ring|red)?\b|\bfibrotic\b|\bapical (?:pleural )?(?:thickening|capping)|"
           r"\bpleural[- ]parenchymal (?:scarring|thickening)",
           True, "scarring", ("Lung Opacity", "Pleural Other")),
    _extra("nipple_shadow", r"\bnipple\b", True, "nipple shadow",
           ("Lung Lesion", "Lung Opacity")),
    _extra("old_fracture",
           r"\b(?:old|healed|healing|remote|chronic) (?:\w+ ){0,4}?fractur\w*|"
           r"\bfractur\w* (?:\w+ ){0,3}?(?:of indeterminate age|"
           r"(?:are|is|appears?) (?:old|healed|chronic|remote))",
           True, "old rib fracture", ("Fracture",)),
    _extra("surgical_change",
           r"\b(?:surgical|cholecystectomy|vascular|axillary|mediastinal) clips?\b|"
           r"\bsternotomy\b|\bcabg\b|\bpost-?(?:surgical|operative|op) changes?\b|"
           r"\bsternal wires?\b", True, "surgical clips", ("Support Devices",)),
    _extra("minor_atelectasis", _rule_phrase("Minor Atelectasis"), True,
           "subsegmental atelectasis", ("Atelectasis",)),
    _extra("hiatal_hernia", r"\bhiatal hernia\b|\bhiatus hernia\b|\bhernia\b",
           True, "hiatal hernia"),
    _extra("low_volumes", _rule_phrase("Low Lung Volumes"), True, "low lung volumes"),
    _extra("osteopenia", _rule_phrase("Osteopenia"), True, "osteopenia"),
    _extra("hyperinflation",
           r"(?<!subcutaneous )\bemphysema\w*|\bcopd\b|\bchronic obstructive\b|"
           r"\bhyperinflat\w*|\bhyperexpan\w*|\bover-?inflat\w*|\bhyperaerat\w*|"
           r"\bflatten\w* (?:of )?(?:the )?(?:hemi)?diaphragm\w*|"
           r"\b(?:hemi)?diaphragms? (?:are |is )?flattened|\bbullae\b|\bbullous\b",
           False, "hyperinflation"),
    _extra("adenopathy",
           r"\b(?:lymph)?adenopathy\b|\benlarged (?:\w+ )?(?:lymph )?nodes\b|"
           r"\bhilar (?:enlargement|prominence|fullness)", False, "hilar adenopathy"),
    _extra("elevated_hemidiaphragm",
           r"\belevat\w* (?:of )?(?:the )?(?:left |right )?(?:hemi-?)?diaphragm\w*|"
           r"\b(?:hemi-?)?diaphragm\w* (?:is |are |remains? )?(?:mildly |moderately |markedly |"
           r"slightly )?elevated|\beventration\b", False, "elevated hemidiaphragm"),
    _extra("pulmonary_artery",
           r"\bpulmonary (?:arterial )?hypertension\b|\benlarged (?:central )?pulmonary arter\w*|"
           r"\bpulmonary arter\w* (?:are |is )?(?:enlarged|prominent)", False,
           "enlarged pulmonary arteries"),
    _extra("extrapulmonary_air",
           r"\bfree (?:intraperitoneal |subdiaphragmatic |intra-abdominal )?air\b|"
           r"\bpneumoperitoneum\b|\bpneumomediastinum\b|\bsubcutaneous emphysema\b",
           False, "free air"),
)
_EXTRA_BY_NAME = {e.name: e for e in _EXTRAS}

#: Findings whose errors count as clinically insignificant (name -> what it covers).
MINOR_FINDINGS: dict[str, str] = {
    "granuloma": "calcified granuloma, calcified nodule or lymph node",
    "degenerative": "degenerative change, spondylosis, osteophytes, DISH, arthritis",
    "spine_curvature": "scoliosis, kyphosis, spinal curvature",
    "aorta_calcification": "tortuous/ectatic/unfolded aorta, atherosclerotic or annular "
                           "calcification",
    "scarring": "scarring, fibrotic change, apical pleural thickening/capping",
    "nipple_shadow": "nipple shadows or markers",
    "old_fracture": "old, healed, remote or chronic fracture",
    "surgical_change": "surgical clips, sternotomy wires, post-surgical change",
    "minor_atelectasis": "linear, platelike, discoid or subsegmental atelectasis",
    "hiatal_hernia": "hiatal hernia",
    "low_volumes": "low lung volumes, poor inspiration",
    "osteopenia": "osteopenia, demineralisation",
}
_MINOR = frozenset(MINOR_FINDINGS)

_NEG_CUE = re.compile(r"\b(?:no|not|without|negative for|free of|absence of|resolution of|"
                      r"resolved|no evidence of)\b")
_TERM = re.compile(r"\b(?:but|however|although|though|whereas|while|except|which|"
                   r"there (?:is|are|was|were))\b|;")

# Canonical phrases of the labeler's observations: negative lists and positive templates.
_NEG_CANON: dict[str, str] = {
    "Enlarged Cardiomediastinum": "mediastinal widening",
    "Cardiomegaly": "cardiomegaly",
    "Lung Lesion": "pulmonary nodule",
    "Lung Opacity": "focal airspace opacity",
    "Edema": "pulmonary edema",
    "Consolidation": "focal consolidation",
    "Pneumonia": "pneumonia",
    "Atelectasis": "atelectasis",
    "Pneumothorax": "pneumothorax",
    "Pleural Effusion": "pleural effusion",
    "Pleural Other": "pleural thickening",
    "Fracture": "acute fracture",
    **{e.name: e.canon for e in _EXTRAS},
}
_POS_TEMPLATES: dict[str, tuple[str, ...]] = {
    "Enlarged Cardiomediastinum": ("The mediastinum is widened.",),
    "Cardiomegaly": ("Mild cardiomegaly.", "The heart is moderately enlarged."),
    "Lung Lesion": ("There is a {side} upper lobe pulmonary nodule.", "{Side} lower lobe mass."),
    "Lung Opacity": ("Patchy opacity in the {side} lung base.",
                     "{Side} upper lobe airspace opacity."),
    "Edema": ("Mild interstitial pulmonary edema.", "Moderate pulmonary edema."),
    "Consolidation": ("{Side} lower lobe consolidation.",
                      "Focal consolidation in the {side} lower lobe."),
    "Pneumonia": ("Findings consistent with {side} lower lobe pneumonia.",),
    "Atelectasis": ("{Side} basilar atelectasis.",),
    "Pneumothorax": ("Small {side} apical pneumothorax.", "There is a small {side} pneumothorax."),
    "Pleural Effusion": ("Small {side} pleural effusion.", "Moderate {side} pleural effusion."),
    "Pleural Other": ("{Side} pleural thickening.",),
    "Fracture": ("Acute fracture of the {side} sixth rib.",),
}

# --- sentence features ---------------------------------------------------------------------------

_SIDE = re.compile(r"\b(left|right)\b", re.IGNORECASE)
_BILATERAL = re.compile(r"\b(?:bilateral\w*|bibasilar|bibasal|biapical|both)\b", re.IGNORECASE)
_NO_SIDE_SWAP = re.compile(r"\b(?:middle lobe|lingula\w*)\b", re.IGNORECASE)

# Location classes: each maps a word to its opposite within one sentence.
_LOCATION_CLASSES: dict[str, dict[str, str]] = {
    "side": {"left": "right", "right": "left"},
    "vertical": {"upper": "lower", "lower": "upper"},
    "apex_base": {"apex": "base", "base": "apex", "apices": "bases", "bases": "apices",
                  "apical": "basilar", "basilar": "apical", "basal": "apical"},
}
_LOCATION_RE = {k: re.compile(r"\b(" + "|".join(v) + r")\b", re.IGNORECASE)
                for k, v in _LOCATION_CLASSES.items()}

# Severity scales: (word -> level). A change of one level is insignificant, two or more
# significant (mild <-> severe, small <-> large).
_DEGREE = {"minimal": 0, "mild": 1, "slight": 1, "moderate": 2, "severe": 3, "marked": 3}
_DEGREE_ADV = {"minimally": 0, "mildly": 1, "slightly": 1, "moderately": 2, "severely": 3,
               "markedly": 3}
_SIZE = {"tiny": 0, "trace": 0, "small": 1, "moderate": 2, "large": 3}
_LEVEL_WORD = {
    "degree": {0: "minimal", 1: "mild", 2: "moderate", 3: "severe"},
    "degree_adv": {0: "minimally", 1: "mildly", 2: "moderately", 3: "severely"},
    "size": {0: "tiny", 1: "small", 2: "moderate", 3: "large"},
}
_SEVERITY_WORDS = sorted({*_DEGREE, *_DEGREE_ADV, *_SIZE}, key=len, reverse=True)
# "small bowel", "large body habitus" are not severities of a finding.
_SEVERITY_RE = re.compile(r"\b(" + "|".join(_SEVERITY_WORDS) + r")\b"
                          r"(?! (?:bowel|airways?|body|bore|caliber|vessels?|amount of air))",
                          re.IGNORECASE)
_SIZE_NOUN = re.compile(r"\b(?:effusions?|pneumothora\w*|nodul\w*|mass\w*|hernia|fluid|"
                        r"opacit\w*|consolidation|granulom\w*|lesions?)\b", re.IGNORECASE)

# Comparison: a change from the prior study, or a statement of stability.
_CMP_CONTEXT = (r"\b(?:compar\w*|(?:the |a )?(?:prior|previous|earlier|recent|last) "
                r"(?:study|studies|exam\w*|film\w*|radiograph\w*|chest|x-?rays?|cxr|imaging|ct)|"
                r"since|interval\w*|from prior|to prior|redemonstrat\w*|re-demonstrat\w*)\b")
_CMP_CONTEXT_RE = re.compile(_CMP_CONTEXT, re.IGNORECASE)
_CMP_CHANGE_RE = re.compile(
    r"\b(?:improv\w*|worsen\w*|progress(?:ed|ion|ing|ive|ively)?|resolv\w*|resolution|"
    r"newly|no longer|re-?expan\w*|clearing|cleared|developed|development of|"
    r"has (?:increased|decreased|enlarged|developed|cleared)|"
    r"have (?:increased|decreased|enlarged|developed|cleared))\b|(?<!\bno )\bnew\b",
    re.IGNORECASE)
_CMP_INCREASE_RE = re.compile(r"\b(?:increas\w*|decreas\w*|enlarging|smaller|larger)\b",
                              re.IGNORECASE)
_CMP_STABLE_RE = re.compile(
    r"\b(?:stable|stably|unchanged|no (?:(?:significant|appreciable|definite|interval|"
    r"substantial|overall) )*(?:change|progression|difference)|not (?:significantly )?changed|"
    r"without (?:(?:significant|interval|appreciable) )*change|persist\w*|"
    r"again (?:seen|noted|demonstrated|visualized|identified)|redemonstrat\w*|"
    r"re-demonstrat\w*|remains?|remained|no new)\b", re.IGNORECASE)

# Sentences that lean on another sentence ("This is unchanged", "Otherwise clear"): neither
# moved by a shuffle nor lent to another report.
_ANAPHORA = re.compile(r"^(?:\d|it\b|this\b|these\b|they\b|otherwise\b|also\b|however\b|"
                       r"but\b|additionally\b)|\b(?:otherwise|also|this|these|which|"
                       r"aforementioned)\b", re.IGNORECASE)
_WORDS = re.compile(r"[a-z]+")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class _Sent:
    """What one sentence asserts, as far as the counting rules need it."""

    text: str
    abnormal: frozenset[str]
    negated: frozenset[str]
    side: str | None  # "left"/"right" when exactly one side is named and nothing bilateral
    severity: tuple[str, int] | None  # (scale, level) when exactly one severity word
    comparison: str | None  # "change", "stable" or None

    @property
    def features(self) -> tuple[object, ...]:
        """Everything the counts depend on (a rewording must keep it)."""
        return (self.abnormal, self.negated, self.side, self.severity, self.comparison)


def _extra_findings(low: str) -> tuple[set[str], set[str]]:
    abnormal: set[str] = set()
    negated: set[str] = set()
    for extra in _EXTRAS:
        for m in extra.pattern.finditer(low):
            # A negation cue earlier in the same clause negates the finding (lists such as
            # "no pneumonia, effusions, adenopathy or masses" are one clause).
            start = 0
            for t in _TERM.finditer(low, 0, m.start()):
                start = t.end()
            if _NEG_CUE.search(low, start, m.start()):
                negated.add(extra.name)
            else:
                abnormal.add(extra.name)
    return abnormal, negated - abnormal


def _severity(text: str) -> tuple[str, int, str, int, int] | None:
    """(scale, level, word, start, end) of the only severity word, else None."""
    matches = list(_SEVERITY_RE.finditer(text))
    if len(matches) != 1:
        return None
    m = matches[0]
    word = m.group(1).lower()
    if word in _DEGREE_ADV:
        return "degree_adv", _DEGREE_ADV[word], word, m.start(1), m.end(1)
    if word == "moderate":
        scale = "size" if _SIZE_NOUN.search(text) else "degree"
    else:
        scale = "size" if word in _SIZE else "degree"
    level = (_SIZE if scale == "size" else _DEGREE)[word]
    return scale, level, word, m.start(1), m.end(1)


def _comparison(text: str) -> str | None:
    if _CMP_CHANGE_RE.search(text):
        return "change"
    context = _CMP_CONTEXT_RE.search(text) is not None
    if context and _CMP_INCREASE_RE.search(text):
        return "change"
    if _CMP_STABLE_RE.search(text) or context:
        return "stable"
    return None


@functools.lru_cache(maxsize=1 << 17)
def _analyse(text: str) -> _Sent:
    labels = label_report(text)
    abnormal = {OBSERVATIONS[i] for i, v in enumerate(labels)
                if i != _NO_FINDING and v in (POSITIVE, UNCERTAIN)}
    negated = {OBSERVATIONS[i] for i, v in enumerate(labels)
               if i != _NO_FINDING and v == NEGATIVE}
    low = _SPACE.sub(" ", text.lower())
    extra_abn, extra_neg = _extra_findings(low)
    for name in extra_abn:
        # The minor phrase explains the labeler's observation here ("calcified nodule").
        abnormal.difference_update(_EXTRA_BY_NAME[name].overrides)
    abnormal |= extra_abn
    negated = (negated | extra_neg) - abnormal
    sides = {m.group(1).lower() for m in _SIDE.finditer(text)}
    side = next(iter(sides)) if len(sides) == 1 and not _BILATERAL.search(text) else None
    sev = _severity(text)
    return _Sent(text, frozenset(abnormal), frozenset(negated), side,
                 (sev[0].replace("_adv", ""), sev[1]) if sev else None, _comparison(text))


def normalise_report(text: str) -> str:
    """The de-duplication key of a report: lowercase, single spaces, no edge punctuation."""
    return _SPACE.sub(" ", text.lower()).strip(" .")


_ENUMERATOR = re.compile(r"^\(?\d{1,2}[.)]$")


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    prefix = ""
    for a, b in split_sentences(text):
        sentence = _SPACE.sub(" ", text[a:b]).strip()
        if _ENUMERATOR.match(sentence):
            # "1." belongs to the sentence it numbers: dropping one must drop the other.
            prefix += sentence + " "
            continue
        sentence, prefix = prefix + sentence, ""
        # A sentence ended by a line break or the end of the text gets its full stop, so
        # that moving or inserting sentences never runs two of them together.
        if sentence[-1:] not in (".", "!", "?"):
            sentence += "."
        out.append(sentence)
    if prefix:
        out.append(prefix.strip())
    return out


def _is_minor(concept: str) -> bool:
    return concept in _MINOR


# --- split ---------------------------------------------------------------------------------------


def split_reports(
    reports: Sequence[str], *, heldout: float, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Split reports into a training and a held-out part, by report.

    Reports are de-duplicated on :func:`normalise_report` first (the first text of each key
    is kept), so the same normalised text is never on both sides; the keys are sorted and then
    shuffled with ``random.Random(seed)``, so the split does not depend on the input order.

    Args:
        reports: Report texts (empty ones are dropped).
        heldout: Fraction of the unique reports held out, in ``[0, 1]``.
        seed: Seed of the shuffle.

    Returns:
        ``(train, heldout)`` lists of report texts.

    Raises:
        ValueError: when ``heldout`` is outside ``[0, 1]``.
    """
    if not 0.0 <= heldout <= 1.0:
        raise ValueError(f"heldout must be in [0, 1], got {heldout}")
    first: dict[str, str] = {}
    for text in reports:
        key = normalise_report(text)
        if key and key not in first:
            first[key] = text
    keys = sorted(first)
    random.Random(seed).shuffle(keys)
    n_held = round(heldout * len(keys))
    if 0.0 < heldout < 1.0 and len(keys) >= 2:
        n_held = min(max(n_held, 1), len(keys) - 1)  # both sides non-empty
    return [first[k] for k in keys[n_held:]], [first[k] for k in keys[:n_held]]


# --- counting by unmatched observations ---------------------------------------------------------


@dataclass(frozen=True)
class _Profile:
    """A report's abnormal observations with their side and severity, and its comparisons."""

    sides: dict[str, frozenset[str]]
    severities: dict[str, frozenset[tuple[str, int]]]
    comparisons: frozenset[str]


def _profile(sents: Sequence[_Sent]) -> _Profile:
    sides: dict[str, set[str]] = {}
    severities: dict[str, set[tuple[str, int]]] = {}
    for s in sents:
        single = len(s.abnormal) == 1  # side and severity are attributed only when unambiguous
        for c in s.abnormal:
            sides.setdefault(c, set())
            severities.setdefault(c, set())
            if single and s.side:
                sides[c].add(s.side)
            if single and s.severity:
                severities[c].add(s.severity)
    return _Profile({c: frozenset(v) for c, v in sides.items()},
                    {c: frozenset(v) for c, v in severities.items()},
                    frozenset(s.comparison for s in sents if s.comparison))


def _profile_counts(ref: _Profile, cand: _Profile) -> list[int]:
    counts = [0] * 12
    for c in cand.sides.keys() - ref.sides.keys():
        counts[_SLOT[1, not _is_minor(c)]] += 1
    for c in ref.sides.keys() - cand.sides.keys():
        counts[_SLOT[2, not _is_minor(c)]] += 1
    for c in ref.sides.keys() & cand.sides.keys():
        rs, cs = ref.sides[c], cand.sides[c]
        if len(rs) == 1 and len(cs) == 1 and rs != cs:
            counts[_SLOT[3, not _is_minor(c)]] += 1
        rv, cv = ref.severities[c], cand.severities[c]
        if len(rv) == 1 and len(cv) == 1 and rv != cv:
            (rscale, rlevel), (cscale, clevel) = next(iter(rv)), next(iter(cv))
            if rscale == cscale:
                big = abs(rlevel - clevel) >= 2 and not _is_minor(c)
                counts[_SLOT[4, big]] += 1
    if "change" in cand.comparisons and "change" not in ref.comparisons:
        counts[_SLOT[5, True]] += 1
    elif cand.comparisons and not ref.comparisons:
        counts[_SLOT[5, False]] += 1
    if "change" in ref.comparisons and "change" not in cand.comparisons:
        counts[_SLOT[6, True]] += 1
    elif ref.comparisons and not cand.comparisons:
        counts[_SLOT[6, False]] += 1
    return counts


def observation_counts(reference: str, candidate: str) -> tuple[int, ...]:
    """Approximate ReXVal counts of any pair from its unmatched abnormal observations.

    The rule the neighbour recipes use (see :func:`recipe_card`): an abnormal observation of
    the candidate absent from the reference's abnormal ones is category 1, the reverse
    category 2; a shared observation named on one side only, a different side in each
    report, is category 3; one with a single severity level in each, different, category 4
    (significant for two levels or more); a change comparison in the candidate only is
    category 5 significant, any comparison where the reference has none category 5
    insignificant; the reverse gives category 6. Errors on :data:`MINOR_FINDINGS` are
    insignificant. At most one count per observation and category.

    Args:
        reference: The reference report.
        candidate: The candidate report.

    Returns:
        12 counts in :data:`COUNT_KEYS` order.
    """
    ref = _profile([_analyse(s) for s in _sentences(reference)])
    cand = _profile([_analyse(s) for s in _sentences(candidate)])
    return tuple(_profile_counts(ref, cand))


# --- the corpus ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Report:
    text: str
    sents: tuple[_Sent, ...]
    tokens: frozenset[str]
    abnormal: frozenset[str]
    profile: _Profile


@dataclass(frozen=True)
class _Corpus:
    reports: tuple[_Report, ...]
    donors: dict[str, tuple[str, ...]]  # observation -> single-finding sentences to insert
    donor_keys: tuple[str, ...]


def _build_corpus(texts: Sequence[str]) -> _Corpus:
    seen: set[str] = set()
    reports: list[_Report] = []
    donors: dict[str, set[str]] = {}
    for text in texts:
        key = normalise_report(text)
        if not key or key in seen:
            continue
        seen.add(key)
        sents = tuple(_analyse(s) for s in _sentences(text))
        if not sents:
            continue
        abnormal = frozenset().union(*(s.abnormal for s in sents))
        tokens = frozenset(_WORDS.findall(text.lower())) - {"xxxx"}
        reports.append(_Report(" ".join(s.text for s in sents), sents, tokens, abnormal,
                               _profile(sents)))
        for s in sents:
            # A donor asserts exactly one finding, no comparison, no redaction, and ends
            # like a sentence, so inserting it adds exactly that one finding.
            if (len(s.abnormal) == 1 and s.comparison is None and "XXXX" not in s.text
                    and 12 <= len(s.text) <= 140 and s.text[-1:] == "."
                    and s.text[:1].isupper() and not _ANAPHORA.search(s.text)):
                donors.setdefault(next(iter(s.abnormal)), set()).add(s.text)
    frozen = {k: tuple(sorted(v)) for k, v in donors.items()}
    return _Corpus(tuple(reports), frozen, tuple(sorted(frozen)))


# --- edit state ------------------------------------------------------------------------------


@dataclass
class _Slot:
    sent: _Sent
    touched: bool = False


@dataclass
class _State:
    ref: _Report
    slots: list[_Slot]
    counts: list[int] = field(default_factory=lambda: [0] * 12)
    claimed: set[str] = field(default_factory=set)
    comparison_done: bool = False

    def live_abnormal(self) -> set[str]:
        return set().union(*(s.sent.abnormal for s in self.slots))

    def add(self, cat: int, significant: bool, n: int = 1) -> None:
        self.counts[_SLOT[cat, significant]] += n


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


def _match_case(word: str, replacement: str) -> str:
    if word.isupper() and len(word) > 1:
        return replacement.upper()
    if word[:1].isupper():
        return _capitalise(replacement)
    return replacement


def _no_sentence(concepts: Sequence[str]) -> _Sent | None:
    """A "No a, b or c." sentence negating exactly ``concepts``; None when it would not."""
    names = [_NEG_CANON[c] for c in concepts]
    if not names:
        return None
    body = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    sent = _analyse(f"No {body}.")
    if sent.abnormal or not set(concepts) <= sent.negated:
        return None
    return sent


def _ordered(concepts: set[str] | frozenset[str]) -> list[str]:
    order = {c: i for i, c in enumerate((*OBSERVATIONS, *_EXTRA_BY_NAME))}
    return sorted(concepts, key=lambda c: order.get(c, len(order)))


def _without_negation(state: _State, concept: str) -> list[_Slot] | None:
    """The slots with every negation of ``concept`` removed, or None when that is unsafe.

    A sentence negating ``concept`` is rewritten as a "No ..." list of its other negated
    observations (dropped when there is none), which changes no abnormal finding; a sentence
    that also asserts a finding or a comparison is not rewritten, so the edit is skipped.
    """
    out: list[_Slot] = []
    for slot in state.slots:
        s = slot.sent
        if concept not in s.negated:
            out.append(slot)
            continue
        if s.abnormal or s.comparison:
            return None
        rest = [c for c in _ordered(s.negated - {concept}) if c in _NEG_CANON]
        if rest:
            new = _no_sentence(rest)
            if new is None:
                return None
            out.append(_Slot(new, touched=True))
    if not out:
        return None
    return out


# --- error recipes -------------------------------------------------------------------------------


def _insert_finding(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    live = state.live_abnormal()
    forbidden = live | state.claimed | state.ref.abnormal
    keys = [k for k in corpus.donor_keys if k not in forbidden]
    if not keys:
        return False
    concept = keys[rng.randrange(len(keys))]
    donor = _analyse(rng.choice(corpus.donors[concept]))
    if donor.negated & (live | state.claimed):
        return False  # the donor would deny a finding the candidate keeps
    slots = _without_negation(state, concept)
    if slots is None:
        return False
    slots.insert(rng.randrange(len(slots) + 1), _Slot(donor, touched=True))
    state.slots = slots
    state.claimed.add(concept)
    state.add(1, not _is_minor(concept))
    return True


def _affirm_finding(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    live = state.live_abnormal()
    options = sorted({c for s in state.slots if not s.touched for c in s.sent.negated
                      if c in _POS_TEMPLATES} - live - state.claimed - state.ref.abnormal)
    if not options:
        return False
    concept = options[rng.randrange(len(options))]
    at = next(i for i, s in enumerate(state.slots) if concept in s.sent.negated)
    side = rng.choice(("left", "right"))
    template = rng.choice(_POS_TEMPLATES[concept])
    positive = _analyse(template.format(side=side, Side=_capitalise(side)))
    if positive.abnormal != {concept}:
        return False
    slots = _without_negation(state, concept)
    if slots is None:
        return False
    # The positive sentence takes the place of the first sentence that denied the finding
    # (no sentence before it was removed, so its index still holds).
    slots.insert(at, _Slot(positive, touched=True))
    state.slots = slots
    state.claimed.add(concept)
    state.add(1, True)
    return True


def _finding_group(state: _State, concepts: set[str]) -> list[int] | None:
    """Indices of every slot asserting any of ``concepts`` (closed over shared findings)."""
    concepts = set(concepts)
    while True:
        idx = [i for i, s in enumerate(state.slots) if s.sent.abnormal & concepts]
        grown = set().union(*(state.slots[i].sent.abnormal for i in idx))
        if grown <= concepts:
            return idx
        concepts |= grown


def _drop_finding(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    options = [i for i, s in enumerate(state.slots)
               if s.sent.abnormal and not s.touched and s.sent.comparison is None
               and not s.sent.abnormal & state.claimed]
    if not options:
        return False
    start = options[rng.randrange(len(options))]
    group = _finding_group(state, set(state.slots[start].sent.abnormal))
    if not group or len(group) >= len(state.slots):
        return False
    lost = set().union(*(state.slots[i].sent.abnormal for i in group))
    if any(state.slots[i].touched or state.slots[i].sent.comparison for i in group) \
            or lost & state.claimed:
        return False  # the repeat in the impression carries a comparison or an edit
    dropped = set(group)
    state.slots = [s for i, s in enumerate(state.slots) if i not in dropped]
    for c in lost:
        state.add(2, not _is_minor(c))
    state.claimed |= lost
    return True


def _negate_finding(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    options = sorted(c for c in state.live_abnormal() - state.claimed if c in _NEG_CANON)
    rng.shuffle(options)
    for concept in options[:3]:
        idx = [i for i, s in enumerate(state.slots) if concept in s.sent.abnormal]
        if any(state.slots[i].touched or state.slots[i].sent.abnormal != {concept}
               or state.slots[i].sent.comparison for i in idx):
            continue
        neg = _no_sentence([concept])
        if neg is None:
            continue
        keep = [s for i, s in enumerate(state.slots) if i not in idx[1:]]
        keep[idx[0]] = _Slot(neg, touched=True)
        state.slots = keep
        state.claimed.add(concept)
        state.add(2, not _is_minor(concept))
        return True
    return False


def _swap_words(text: str, pattern: re.Pattern[str], table: dict[str, str]) -> str:
    return pattern.sub(lambda m: _match_case(m.group(1), table[m.group(1).lower()]), text)


def _single_finding_slots(state: _State, concept: str) -> list[int] | None:
    idx = [i for i, s in enumerate(state.slots) if concept in s.sent.abnormal]
    if any(state.slots[i].touched or state.slots[i].sent.abnormal != {concept} for i in idx):
        return None
    return idx


def _swap_location(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    options: list[tuple[int, str]] = []
    for i, s in enumerate(state.slots):
        if s.touched or len(s.sent.abnormal) != 1 or s.sent.abnormal & state.claimed:
            continue
        for cls, pattern in _LOCATION_RE.items():
            words = {m.group(1).lower() for m in pattern.finditer(s.sent.text)}
            if cls == "side" and (s.sent.side is None or _NO_SIDE_SWAP.search(s.sent.text)):
                continue
            if len(words) == 1:  # one direction only, so the swap changes the meaning
                options.append((i, cls))
    if not options:
        return False
    i, cls = options[rng.randrange(len(options))]
    concept = next(iter(state.slots[i].sent.abnormal))
    idx = _single_finding_slots(state, concept)
    if idx is None:
        return False
    found = _LOCATION_RE[cls].search(state.slots[i].sent.text)
    if found is None:
        return False
    word = found.group(1).lower()
    for j, other in enumerate(state.slots):
        # Another finding sentence naming the same place (an impression the lexicon reads
        # as a different finding) would keep the old location: ambiguous, skip.
        if j not in idx and other.sent.abnormal and word in {
                m.group(1).lower() for m in _LOCATION_RE[cls].finditer(other.sent.text)}:
            return False
    new_slots = list(state.slots)
    for j in idx:
        # The repeat of the finding (impression) moves with it when it names the same place.
        text = state.slots[j].sent.text
        words = {m.group(1).lower() for m in _LOCATION_RE[cls].finditer(text)}
        if j != i and words != {word}:
            if words:
                return False  # another location of the same finding: ambiguous
            continue
        new = _analyse(_swap_words(text, _LOCATION_RE[cls], _LOCATION_CLASSES[cls]))
        if new.abnormal != state.slots[j].sent.abnormal or new.comparison != \
                state.slots[j].sent.comparison:
            return False
        new_slots[j] = _Slot(new, touched=True)
    state.slots = new_slots
    state.claimed.add(concept)
    state.add(3, not _is_minor(concept))
    return True


def _change_severity(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    options = [i for i, s in enumerate(state.slots)
               if not s.touched and len(s.sent.abnormal) == 1 and s.sent.severity
               and not s.sent.abnormal & state.claimed]
    if not options:
        return False
    i = options[rng.randrange(len(options))]
    concept = next(iter(state.slots[i].sent.abnormal))
    idx = _single_finding_slots(state, concept)
    sev = _severity(state.slots[i].sent.text)
    if idx is None or sev is None:
        return False
    scale, level, word = sev[0], sev[1], sev[2]
    # Half the time a jump of two levels or more (significant) where the scale allows one:
    # the most common words (mild, small) would otherwise jump far only one time in three.
    far = [lv for lv in range(4) if abs(lv - level) >= 2]
    near = [lv for lv in range(4) if abs(lv - level) == 1]
    target = rng.choice(far if far and rng.random() < 0.5 else near)
    new_word = _LEVEL_WORD[scale][target]
    new_slots = list(state.slots)
    for j in idx:
        text = state.slots[j].sent.text
        sj = _severity(text)
        if sj is None or sj[2] != word:
            if j != i and sj is None:
                continue  # the repeat names no severity: it stays true of any level
            return False
        new_text = text[:sj[3]] + _match_case(text[sj[3]:sj[4]], new_word) + text[sj[4]:]
        new = _analyse(new_text)
        if new.abnormal != state.slots[j].sent.abnormal:
            return False
        new_slots[j] = _Slot(new, touched=True)
    state.slots = new_slots
    state.claimed.add(concept)
    state.add(4, abs(target - level) >= 2 and not _is_minor(concept))
    return True


_CHANGE_PHRASES = (
    "increased since the prior study",
    "new since the prior examination",
    "decreased compared to the previous exam",
    "improved from the prior radiograph",
    "worsened since the previous study",
)
_STABLE_SENTENCES = (
    "No interval change.",
    "Unchanged from the prior study.",
    "Stable appearance of the chest compared to the prior exam.",
    "No significant change since the previous radiograph.",
    "Compared to the previous exam, there is no interval change.",
)


def _add_comparison(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    if state.comparison_done or state.ref.profile.comparisons \
            or any(s.sent.comparison for s in state.slots):
        return False
    options = [i for i, s in enumerate(state.slots)
               if not s.touched and s.sent.abnormal and s.sent.text.endswith(".")]
    if options and rng.random() < 0.6:
        # A change asserted of a finding the reference reports without comparison.
        i = options[rng.randrange(len(options))]
        old = state.slots[i].sent
        new = _analyse(old.text[:-1] + ", " + rng.choice(_CHANGE_PHRASES) + ".")
        if new.comparison != "change" or new.abnormal != old.abnormal \
                or new.negated != old.negated:
            return False
        state.slots[i] = _Slot(new, touched=True)
        state.add(5, True)
    else:
        # A bare stability statement: nothing about any finding changes.
        new = _analyse(rng.choice(_STABLE_SENTENCES))
        if new.comparison != "stable" or new.abnormal:
            return False
        state.slots.insert(rng.randrange(len(state.slots) + 1), _Slot(new, touched=True))
        state.add(5, False)
    state.comparison_done = True
    return True


_STRIP_COMPARISON: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), r) for p, r in (
        (r",? (?:which (?:is|are) |and (?:is|are) |and )?(?:(?:is|are) )?(?:stable|unchanged|"
         r"not significantly changed|increased|decreased|improved|worsened|new)"
         r"(?: (?:in appearance|in size))?(?: (?:from|since|compared (?:to|with)|"
         r"when compared (?:to|with)|relative to) (?:the |a )?(?:prior|previous|comparison|"
         r"recent|earlier)(?: (?:study|exam|examination|radiograph|film|chest x-ray|x-ray|"
         r"xxxx))?)?(?=[.;]|$)", ""),
        (r"^(?:interval )?(?:stable|unchanged|persistent|persisting|increased|increasing|"
         r"decreased|decreasing|improved|improving|worsened|worsening|new) ", ""),
        (r"^interval (?:increase|decrease|improvement|worsening|development) (?:in|of) "
         r"(?:the )?", ""),
        (r"\bagain (?=(?:seen|noted|demonstrated|visualized|identified)\b)", ""),
    )
)


def _drop_comparison(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    if state.comparison_done:
        return False
    options = [i for i, s in enumerate(state.slots) if not s.touched and s.sent.comparison]
    if not options:
        return False
    i = options[rng.randrange(len(options))]
    old = state.slots[i].sent
    if old.abnormal:
        # Keep the finding, remove only the comparison phrase.
        text = old.text
        for pattern, repl in _STRIP_COMPARISON:
            text = pattern.sub(repl, text)
        text = _capitalise(_SPACE.sub(" ", text).strip())
        if not text.endswith((".", "!", "?")):
            text += "."
        new = _analyse(text)
        if new.comparison or new.abnormal != old.abnormal or len(text) < 4:
            return False
        state.slots[i] = _Slot(new, touched=True)
    else:
        if len(state.slots) < 2:
            return False
        del state.slots[i]
    state.add(6, old.comparison == "change")
    state.comparison_done = True
    return True


# --- zero-error recipes ------------------------------------------------------------------------


def _drop_normal(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    options = [i for i, s in enumerate(state.slots)
               if not s.touched and not s.sent.abnormal and s.sent.comparison is None]
    if not options or len(state.slots) < 2:
        return False
    del state.slots[options[rng.randrange(len(options))]]
    return True


# Meaning-preserving synonyms beyond perturb's rules (both directions are listed).
_SYNONYMS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), r) for p, r in (
        (r"^heart size (?:is )?normal\b", "The cardiac silhouette is within normal limits"),
        (r"^normal heart size\b", "Heart size is normal"),
        (r"^the cardiac silhouette is within normal limits\b", "Heart size is normal"),
        (r"^(?:the )?heart is normal in size\b", "Normal heart size"),
        (r"\bno acute cardiopulmonary (?:process|disease|findings?)\b",
         "no acute cardiopulmonary abnormality"),
        (r"\bno acute cardiopulmonary abnormality\b", "no acute cardiopulmonary process"),
        (r"\bno active disease\b", "no acute cardiopulmonary disease"),
        (r"\bthe lungs are clear\b", "both lungs are clear"),
        (r"\blungs are clear\b(?! bilaterally)", "lungs are clear bilaterally"),
        (r"\bosseous structures\b", "bony structures"),
        (r"\bbony structures\b", "osseous structures"),
        (r"\bmediastinal silhouette\b", "mediastinal contours"),
        (r"\bmediastinal contours\b", "mediastinal silhouette"),
        (r"\bpulmonary vascularity\b", "pulmonary vasculature"),
        (r"\bpulmonary vasculature\b", "pulmonary vascularity"),
        (r"\bfocal airspace disease\b", "focal air space disease"),
        (r"\bairspace\b", "air space"),
        (r"\bis present\b", "is seen"),
        (r"\bare present\b", "are seen"),
        (r"\bvisualized\b", "visible"),
        (r"\bintact\b", "unremarkable"),
    )
)


def _reword(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    order = list(range(len(state.slots)))
    rng.shuffle(order)
    for i in order:
        old = state.slots[i].sent
        sites = [(p, r) for p, r in _SYNONYMS if p.search(old.text)]
        candidates: list[str] = []
        if sites:
            p, r = sites[rng.randrange(len(sites))]
            candidates.append(p.sub(lambda m, r=r: _match_case(m.group(0), r), old.text, 1))
        done = perturb_reword(old.text, rng)
        if done is not None:
            candidates.append(done[0])
        rng.shuffle(candidates)
        for text in candidates:
            text = text.strip()
            # A dropped final stop would merge this sentence with the next one.
            if not text or text == old.text or (i < len(state.slots) - 1
                                                and not text.endswith((".", "!", "?"))):
                continue
            new = _analyse(text)
            if new.features == old.features:
                state.slots[i] = _Slot(new, touched=state.slots[i].touched)
                return True
    return False


def _shuffle(state: _State, corpus: _Corpus, rng: random.Random) -> bool:
    ok = [not s.sent.comparison and not _ANAPHORA.search(s.sent.text)
          and s.sent.text.endswith((".", "!", "?")) for s in state.slots]
    options = [i for i in range(len(state.slots) - 1) if ok[i] and ok[i + 1]]
    if not options:
        return False
    i = options[rng.randrange(len(options))]
    state.slots[i], state.slots[i + 1] = state.slots[i + 1], state.slots[i]
    return True


_EDITS: dict[str, Callable[[_State, _Corpus, random.Random], bool]] = {
    "insert_finding": _insert_finding,
    "affirm_finding": _affirm_finding,
    "drop_finding": _drop_finding,
    "negate_finding": _negate_finding,
    "swap_location": _swap_location,
    "change_severity": _change_severity,
    "add_comparison": _add_comparison,
    "drop_comparison": _drop_comparison,
    "drop_normal": _drop_normal,
    "reword": _reword,
    "shuffle": _shuffle,
}

# --- neighbour recipes -----------------------------------------------------------------------

_NEIGHBOUR_SAMPLE = 32


def _neighbour(corpus: _Corpus, ref_index: int, rng: random.Random) -> _Report | None:
    n = len(corpus.reports)
    if n < 2:
        return None
    picks = rng.sample(range(n), min(_NEIGHBOUR_SAMPLE + 1, n))
    ref = corpus.reports[ref_index]
    best, best_score = None, -1.0
    for j in picks:
        if j == ref_index:
            continue
        other = corpus.reports[j]
        union = len(ref.tokens | other.tokens) or 1
        score = len(ref.tokens & other.tokens) / union
        shared = ref.abnormal | other.abnormal
        if shared:
            # Retrieval by label overlap as well as by words: abnormal references get
            # abnormal neighbours, as a metric-retrieved candidate would be.
            score += 0.2 * len(ref.abnormal & other.abnormal) / len(shared)
        if score > best_score:
            best, best_score = other, score
    return best


def _neighbour_pair(corpus: _Corpus, ref_index: int, recipe: str,
                    rng: random.Random) -> tuple[list[_Sent], list[int]] | None:
    ref = corpus.reports[ref_index]
    other = _neighbour(corpus, ref_index, rng)
    if other is None:
        return None
    if recipe == "neighbour_replace":
        sents = list(other.sents)
    else:
        keep, add = rng.uniform(0.3, 0.8), rng.uniform(0.3, 0.8)
        kept = [(i / len(ref.sents), 0, s) for i, s in enumerate(ref.sents) if rng.random() < keep]
        added = [(i / len(other.sents), 1, s) for i, s in enumerate(other.sents)
                 if rng.random() < add]
        if not kept or not added:
            return None
        seen: set[str] = set()
        sents = []
        for _, _, s in sorted(kept + added, key=lambda t: (t[0], t[1])):
            key = normalise_report(s.text)
            if key not in seen:
                seen.add(key)
                sents.append(s)
    if " ".join(s.text for s in sents) == ref.text:
        return None
    return sents, _profile_counts(ref.profile, _profile(sents))


# --- generation --------------------------------------------------------------------------------


def _resolve_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    merged = dict(DEFAULT_WEIGHTS)
    if weights:
        unknown = sorted(set(weights) - set(RECIPES))
        if unknown:
            raise ValueError(f"unknown recipe(s) {', '.join(unknown)} (known: "
                             f"{', '.join(RECIPES)})")
        merged.update({k: float(v) for k, v in weights.items()})
    if any(v < 0 for v in merged.values()) or not any(merged.values()):
        raise ValueError("recipe weights must be >= 0 and not all 0")
    return merged


def _draw(rng: random.Random, names: Sequence[str], weights: dict[str, float]) -> str | None:
    w = [weights[k] for k in names]
    if not any(w):
        return None
    return rng.choices(list(names), weights=w)[0]


_EDIT_COUNTS = (1, 2, 3, 4)
_EDIT_COUNT_WEIGHTS = (0.35, 0.3, 0.2, 0.15)


def _make_pair(corpus: _Corpus, rng: random.Random, weights: dict[str, float]) -> SyntheticPair:
    edit_names = [k for k in RECIPES if k not in _NEIGHBOUR]
    ref = corpus.reports[0]
    for _attempt in range(4):
        ref_index = rng.randrange(len(corpus.reports))
        ref = corpus.reports[ref_index]
        first = _draw(rng, RECIPES, weights)
        if first in _NEIGHBOUR:
            made = _neighbour_pair(corpus, ref_index, first, rng)
            if made is not None:
                sents, counts = made
                applied = [first]
                state = _State(ref, [_Slot(s) for s in sents])
                if weights["reword"] > 0 and rng.random() < 0.3 and _reword(state, corpus, rng):
                    applied.append("reword")
                return SyntheticPair(ref.text, " ".join(s.sent.text for s in state.slots),
                                     tuple(counts), tuple(applied))
            first = _draw(rng, edit_names, weights)
        if first is None:
            continue
        k = rng.choices(_EDIT_COUNTS, weights=_EDIT_COUNT_WEIGHTS)[0]
        drawn = [first] + [d for d in (_draw(rng, edit_names, weights) for _ in range(k - 1))
                           if d is not None]
        # Error edits first: a rewording never hides a later edit's target.
        drawn.sort(key=lambda name: name in _ZERO)
        state = _State(ref, [_Slot(s) for s in ref.sents])
        applied: list[str] = []
        for name in drawn:
            pool = _ZERO if name in _ZERO else [e for e in edit_names if e not in _ZERO]
            for _retry in range(3):
                if _EDITS[name](state, corpus, rng):
                    applied.append(name)
                    break
                # Skipped (cannot apply): draw another recipe of the same kind instead.
                redrawn = _draw(rng, pool, weights)
                if redrawn is None:
                    break
                name = redrawn
        candidate = " ".join(s.sent.text for s in state.slots)
        if applied and candidate != ref.text:
            return SyntheticPair(ref.text, candidate, tuple(state.counts), tuple(applied))
    return SyntheticPair(ref.text, ref.text, (0,) * 12, ())


def generate_pairs(
    reports: Sequence[str],
    *,
    n: int,
    seed: int = 0,
    weights: Mapping[str, float] | None = None,
) -> list[SyntheticPair]:
    """Generate ``n`` synthetic pairs with ReXVal counts fixed by construction.

    References are drawn (with replacement) from the reports de-duplicated on
    :func:`normalise_report`; neighbours and inserted findings come from the same reports, so
    generate from a training split only (:func:`split_reports`).

    Args:
        reports: Report texts (IU-style chest X-ray reports).
        n: Number of pairs.
        seed: Seed; pair ``i`` draws from ``random.Random(f"{seed}:{i}")``.
        weights: Relative frequencies overriding :data:`DEFAULT_WEIGHTS` for the recipes
            named (0 disables one; the others keep their default).

    Returns:
        ``n`` pairs. A pair on which no recipe could apply, after four references were
        tried, is an unchanged copy with zero counts and no recipe (rare).

    Raises:
        ValueError: for ``n < 0``, no usable report, or invalid weights.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    resolved = _resolve_weights(weights)
    corpus = _build_corpus(reports)
    if not corpus.reports:
        raise ValueError("no non-empty report to generate from")
    return [_make_pair(corpus, random.Random(f"{seed}:{i}"), resolved) for i in range(n)]


# --- card ----------------------------------------------------------------------------------------

_CARD_ROWS: tuple[tuple[str, str, str], ...] = (
    ("insert_finding", "1: significant; insignificant for a minor finding",
     "Inserts, at a random place, a sentence of another report that asserts exactly one "
     "abnormal observation, which the reference neither asserts nor claims elsewhere, without "
     "comparison or redaction. Sentences of the candidate that deny that observation are "
     "rewritten as a 'No ...' list of their other negations (skipped if such a sentence also "
     "asserts a finding or a comparison). Counts 1."),
    ("affirm_finding", "1: significant",
     "Negation flip to positive: an observation the reference denies ('No pleural effusion') "
     "is asserted by a fixed template ('Small left pleural effusion.') in place of the first "
     "denial; the other denials of it are removed as above. Counts 1."),
    ("drop_finding", "2: significant; insignificant for a minor finding",
     "Drops a sentence asserting an abnormal finding together with every other sentence "
     "asserting any of the same observations (the impression's repeat). One count per "
     "observation lost. Skipped when a dropped sentence has a comparison or would leave the "
     "candidate empty."),
    ("negate_finding", "2: significant; insignificant for a minor finding",
     "Negation flip to negative: the sentence asserting one observation becomes 'No "
     "<observation>.', its repeats are dropped. Only for sentences asserting that one "
     "observation and no comparison. Counts 1."),
    ("swap_location", "3: significant; insignificant for a minor finding",
     "In a sentence asserting one finding, swaps left<->right (only when one side is named, "
     "nothing bilateral, no middle lobe or lingula), upper<->lower or apex<->base (only when "
     "one direction is named); the impression's repeat naming the same place moves with it. "
     "Counts 1."),
    ("change_severity", "4: significant for two levels or more; insignificant for one level "
     "or a minor finding",
     "Scales: degree minimal(0) < mild/slight(1) < moderate(2) < severe/marked(3) (adverbs "
     "alike), size tiny/trace(0) < small(1) < moderate(2) < large(3). So mild<->severe and "
     "small<->large are significant, mild<->moderate and small<->moderate insignificant. "
     "Only sentences asserting one finding with exactly one severity word. Counts 1."),
    ("add_comparison", "5: significant when it asserts a change, insignificant for bare "
     "stability",
     "Only when the reference has no comparison. Either appends a change to a finding "
     "sentence ('..., increased since the prior study.') or inserts a bare stability "
     "sentence ('No interval change.'). Counts 1."),
    ("drop_comparison", "6: significant for a change, insignificant for a stability statement",
     "Removes a comparison of the reference: the whole sentence when it asserts no finding "
     "('No interval change.', 'Interval resolution of the effusion.'), else only the phrase "
     "('Stable cardiomegaly.' -> 'Cardiomegaly.'); skipped when the finding would change or a "
     "comparison would remain. Counts 1."),
    ("drop_normal", "none (0 errors)",
     "Drops a sentence that asserts no abnormal finding and no comparison: normal "
     "boilerplate, technique, negated findings. Omitting a negative finding is not counted."),
    ("reword", "none (0 errors)",
     "One rewording of one sentence: perturb.reword's rules or a synonym ('Heart size normal' "
     "<-> 'The cardiac silhouette is within normal limits', 'no acute cardiopulmonary "
     "process' <-> 'abnormality', 'osseous' <-> 'bony', ...), kept only when the sentence's "
     "observations, negations, side, severity and comparison are unchanged."),
    ("shuffle", "none (0 errors)",
     "Swaps two adjacent sentences without comparison, numbering or anaphora ('it', 'this', "
     "'otherwise', 'also')."),
    ("neighbour_replace", "1-6 from unmatched observations",
     "The candidate is the closest of 32 other reports drawn at random (token Jaccard + 0.2 x "
     "overlap of abnormal observations). Counted by the observation rule below."),
    ("neighbour_mix", "1-6 from unmatched observations",
     "Keeps each reference sentence with probability p and adds each neighbour sentence with "
     "probability q (p, q uniform in 0.3-0.8), merged by relative position, duplicates "
     "dropped. Counted by the observation rule below."),
)


def recipe_card() -> str:
    """Markdown describing every recipe, its category and significance, and its assumptions.

    Returns:
        The section of the ``concord`` metric card on synthetic training data.
    """
    lines = [
        "## Synthetic training pairs",
        "",
        "Pairs are built from public IU X-ray reports by edits whose ReXVal error counts are "
        "fixed by construction (`backend/analysis/synthetic_errors.py`); no human rating is "
        "used. A pair is either a neighbour pair or 1-4 edits (error edits first, then "
        "rewordings); an edit that cannot apply is skipped, never faked. Edits never touch "
        "a sentence or an observation an earlier edit touched, and a pair has at most one "
        "comparison edit, so the counts add up.",
        "",
        "| recipe | category: significance | what it does and assumes |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {cat} | {text} |" for name, cat, text in _CARD_ROWS]
    lines += [
        "",
        "**Observations.** A sentence's observations are the rule CheXpert labeler's 13 "
        "(No Finding aside) plus a lexicon of IU findings it lacks (" +
        ", ".join(e.name.replace("_", " ") for e in _EXTRAS if not e.minor) +
        ", and the minor findings below). Positive or uncertain is abnormal; a lexicon "
        "finding is negated by a cue (no, without, not, ...) earlier in its clause. Where a "
        "minor phrase explains a labeler observation in the same sentence ('calcified "
        "nodule', 'old rib fracture', 'sternotomy wires'), the minor finding replaces it.",
        "",
        "**Minor findings** (their errors are clinically insignificant): " +
        "; ".join(f"{k.replace('_', ' ')} ({v})" for k, v in MINOR_FINDINGS.items()) + ".",
        "",
        "**Observation rule** (neighbour pairs; approximate by nature): each abnormal "
        "observation of the candidate absent from the reference's abnormal ones counts "
        "category 1, each abnormal observation of the reference absent from the candidate "
        "category 2 (a negated mention does not match an abnormal one); a shared observation "
        "whose sentences name one side each, different, counts category 3; one with one "
        "severity level each on the same scale, different, category 4 (significant for two "
        "levels or more). A change comparison in the candidate only counts category 5 "
        "significant, else any comparison where the reference has none category 5 "
        "insignificant; the reverse gives category 6. Errors on minor findings are "
        "insignificant.",
        "",
        "**Assumptions and limits.** Counting is per observation, not per lesion: two "
        "atelectases in different lobes are one observation, so omitting both counts 1. A "
        "finding repeated in the impression counts once. Positive and uncertain mentions "
        "match each other ('possible pneumonia' vs 'pneumonia' is no error). Support devices "
        "are findings (significant), surgical clips and sternotomy wires minor ones. A "
        "finding claimed stable without a prior ('Stable cardiomegaly' added) is never "
        "generated, its significance being unclear. The observation rule counts comparisons "
        "once per report, the comparison edits once per sentence edited, so dropping one of "
        "two stability statements counts 1 there and 0 by the rule. Omitting a negative finding or "
        "normal boilerplate is 0 errors, as is stating one ('No pneumothorax.' added by a "
        "rewrite). Side and severity are read only from sentences asserting one finding. "
        "Contradictions between an inserted finding and normal boilerplate ('The lungs are "
        "clear.') are left in place, as a poor generator would. The labeler's lexical "
        "negation and phrase lists bound the accuracy of every count. Chest X-ray, English, "
        "IU-style reports only.",
    ]
    return "\n".join(lines) + "\n"
