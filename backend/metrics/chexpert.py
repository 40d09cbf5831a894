"""Rule-based CheXpert-style labeler and the ``chexpert`` metric family.

The labeler is written for this project (no NegBio, no parser; compiled regular expressions
only), following the CheXpert labeler's three stages:

1. **Mention extraction**: phrase lists per observation (synonyms, stems, a few patterns with a
   fixed value such as "heart size is normal" -> Cardiomegaly negative).
2. **Classification** of each mention by cues in its sentence: negation (``no``, ``without``,
   ``free of``, ``negative for``, ``resolved``, ``removed`` ...) and uncertainty (``may``,
   ``possible``, ``cannot exclude``, ``suggest``, ``versus``, ``?`` ...). Cues before a mention
   reach forward to the end of the sentence or to a scope terminator (``but``, ``however``,
   ``which``, ``there is`` ...), the nearest cue wins. Cues after a mention ("... has
   resolved", "... cannot be excluded") reach back over a subject phrase that holds no other
   verb. Phrases such as "no change in" or "to suggest" are masked so that their ``no`` or
   ``suggest`` does not act as a cue.
3. **Aggregation** per observation: positive over uncertain over negative over blank;
   No Finding is positive when no observation other than Support Devices is positive or
   uncertain, blank otherwise.

Known limits: no syntax, so negation scope is lexical; phrases outside the lists are missed;
hedges such as "unlikely" count as uncertain. Accuracy on the project's hand-labelled sentences
is measured in ``tests/unit/test_chexpert_labeler.py`` and ``bench/bench_chexpert_accuracy.py``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from radconcord.backend.metrics.base import BaseMetric, MetricResult, MetricSpec, OutputSpec
from radconcord.backend.metrics.labels import (
    BINARISATION,
    NEGATIVE,
    OBSERVATIONS,
    POSITIVE,
    UNCERTAIN,
    Label,
    binarize,
    corpus_keys,
    corpus_scores,
    pair_accuracy,
    pair_f1,
)
from radconcord.backend.metrics.regex_gate import GateTable

LABELER_NAME = "radconcord-rules"
#: Bump whenever a phrase list or rule changes a label: it is part of the metric signature.
LABELER_VERSION = "1"

# --- mention phrases --------------------------------------------------------------------------
# Each observation: cue-classified phrases, and phrases whose value is fixed by the phrase
# itself ("heart size is normal"). Patterns run on lowercased text with single spaces.

_DEG = r"(?:(?:mildly|moderately|markedly|slightly|severely|substantially|significantly|" \
       r"somewhat|minimally|again|still|also|now|borderline|at least) )*"
_COPULA = r"(?:(?:is|are|appears?|remains?|seems?) )?"
_NEG_INNER = r"(?:(?:not|no longer) )?"
_HEART = r"(?:heart(?: size)?|cardiac (?:silhouette|shadow|size|contours?)(?: size)?)"
_MEDIA = r"(?:cardio)?mediastin(?:um|al)(?: (?:silhouettes?|contours?|width|shadow))?"
_NORMAL = (
    r"(?:normal(?: in (?:size|contour|width))?|unremarkable|within normal limits|"
    r"(?:top|upper)[- ]normal(?: in size)?|(?:at )?(?:the )?upper limits? of normal)"
)

_MENTIONS: dict[str, list[str]] = {
    "Enlarged Cardiomediastinum": [
        r"(?:widen(?:ed|ing)|wide|enlarged|prominent) (?:superior )?" + _MEDIA,
        r"(?:widening|enlargement) of the (?:superior )?mediastinum",
        _MEDIA + r" (?:widening|enlargement)",
        _MEDIA + " " + _COPULA + _NEG_INNER + _DEG + r"(?:widened|wide|enlarged|prominent)",
    ],
    "Cardiomegaly": [
        r"cardiomegaly",
        r"cardiac enlargement",
        r"(?:enlarged|enlargement of the|large|prominent) (?:size of the )?"
        r"(?:heart|cardiac (?:silhouette|shadow|size|contours?))",
        _HEART + " " + _COPULA + _NEG_INNER + _DEG + r"(?:enlarged|large|prominent|increased)",
    ],
    "Lung Lesion": [
        r"nodul(?:es?|ar (?:opacit(?:y|ies)|densit(?:y|ies)|opacification))",
        r"masse?s?\b",
        r"(?:cavitary )?lesions?",
        r"tumou?rs?",
        r"neoplasms?",
        r"carcinomas?",
        r"malignanc(?:y|ies)",
        r"metasta(?:sis|ses|tic disease)",
    ],
    "Lung Opacity": [
        r"air[- ]?space (?:disease|process|opacit(?:y|ies)|opacification)",
        r"(?<!nodular )(?<!pleural )opaci(?:ty|ties|fication|fied)",
        r"infiltrat(?:es?|ion|ive)",
        r"ground[- ]glass",
        r"haz(?:e|y|iness)",
        r"reticula(?:r|tion)(?: (?:opacities|markings|pattern))?",
        r"interstitial (?:markings?|pattern|opacit(?:y|ies)|lung disease|disease|prominence)",
        r"increased (?:lung |interstitial )?markings",
    ],
    "Edema": [
        r"(?<!soft tissue )(?<!subcutaneous )(?<!wall )edema",
        r"(?:vascular|pulmonary|venous) congestion",
        r"(?:congestive )?heart failure",
        r"chf",
        r"vascular (?:engorgement|redistribution)",
        r"cephalization",
        r"kerley b lines?",
        r"fluid overload",
    ],
    "Consolidation": [r"consolidat(?:ions?|ive|ed)"],
    "Pneumonia": [
        r"(?:broncho)?pneumonias?",
        r"pneumonitis",
        r"infectio(?:n|us process|us)",
        r"aspiration",
    ],
    "Atelectasis": [r"atelecta(?:sis|ses|tic)", r"collapsed?"],
    # "~" drops the leading word boundary: "hydropneumothorax" is a pneumothorax too.
    "Pneumothorax": [r"~pneumothora(?:x|ces)", r"ptx"],
    "Pleural Effusion": [
        r"hydropneumothorax",
        r"(?<!pericardial )(?<!joint )effusions?",
        r"pleural fluid",
        r"hydrothorax",
        r"blunt(?:ing|ed)? (?:of )?(?:the )?(?:(?:left|right|bilateral) )?costophrenic angles?",
        r"costophrenic (?:angle )?blunting",
        r"costophrenic angles? (?:is |are )?(?:again )?blunted",
    ],
    "Pleural Other": [
        r"pleural (?:thickening|plaques?|calcifications?|scarring|fibrosis)",
        r"fibrothorax",
    ],
    "Fracture": [r"fractur(?:es?|ed)", r"fx"],
    "Support Devices": [
        r"(?:lines?|tubes?) (?:and|or) (?:lines?|tubes?)",
        r"endotracheal",
        r"et tube",
        r"ett",
        r"tracheostomy",
        r"(?:naso|oro)gastric",
        r"(?:ng|og|enteric|feeding|chest|mediastinal|pleural) tubes?",
        r"dobhoff",
        r"(?:chest|mediastinal|pleural|pigtail|surgical) drains?",
        r"catheters?",
        r"picc",
        r"port-?a-?cath",
        r"(?:central|venous|arterial|midline|dialysis|ij|jugular|subclavian|femoral) "
        r"(?:venous )?(?:line|catheter)s?",
        r"line placement",
        r"swan[- ]ganz",
        r"pacemaker",
        r"pacing (?:device|wires?|leads?)",
        r"pacer",
        r"icd",
        r"defibrillator",
        r"(?:sternotomy|sternal) wires",
        r"stents?",
        r"prosthetic valve",
        r"valve replacement",
        r"tubes?",
    ],
}

_FIXED: dict[str, list[tuple[str, int]]] = {
    "Enlarged Cardiomediastinum": [
        (r"normal " + _MEDIA, NEGATIVE),
        (_MEDIA + r"(?: and hilar contours)? " + _COPULA + _NORMAL, NEGATIVE),
    ],
    "Cardiomegaly": [
        (r"normal (?:heart|cardiac) (?:size|silhouette)", NEGATIVE),
        (_HEART + " " + _COPULA + _NORMAL, NEGATIVE),
        (
            r"(?:heart|cardiac)(?: size)? and (?:the )?mediastin(?:um|al)"
            r"(?: (?:silhouettes?|contours?))? (?:are |is |appear |remain )?" + _NORMAL,
            NEGATIVE,
        ),
    ],
    "Pleural Effusion": [
        (r"(?:sharp|clear) costophrenic angles?", NEGATIVE),
        (r"costophrenic angles? (?:is |are |remain )?(?:clear|sharp|preserved|normal)", NEGATIVE),
    ],
}

# --- cues ----------------------------------------------------------------------------------------
_END = r"(?=\s*(?:[.,;:!?]|$|\b(?:but|however|although|though)\b))"
_BE = r"(?:(?:is|are|was|were|seems?|appears?) )"

_CUES: list[tuple[str, str]] = [
    # Masked phrases: their "no"/"suggest" must not act as a cue; they carry no value.
    ("mask", r"\bno (?:(?:significant|substantial|appreciable|definite|interval|further|other|"
             r"major|marked|overall) )*(?:change|increase|decrease|progression|worsening|"
             r"improvement|difference)\b"),
    ("mask", r"\bwithout (?:(?:significant|substantial|appreciable|interval) )*change\b"),
    ("mask", r"\bnot (?:significantly |substantially )?(?:changed|increased|decreased|"
             r"improved|worsened)\b"),
    ("mask", r"\bto (?:suggest|indicate|support)\b"),
    # Uncertainty, after the mention ("pneumonia cannot be excluded").
    ("unc_post", r"\b(?:cannot|can not|can't|could not) (?:be )?(?:entirely |completely )?"
                 r"(?:excluded|ruled out)\b"),
    ("unc_post", r"\b(?:(?:is|are|was|were) )?not (?:be )?(?:entirely |completely )?"
                 r"(?:excluded|ruled out)\b"),
    ("unc_post", r"\b(?:is|are) difficult to exclude" + _END),
    ("unc_post", r"\b" + _BE + r"(?:also |more |most |quite |very )?(?:possible|likely|"
                 r"probable|suspected|questioned|unlikely|a consideration|considered)" + _END),
    ("unc_post", r"\b(?:would|could|may|might) be (?:a consideration|considered)" + _END),
    # Uncertainty in both directions ("atelectasis versus pneumonia").
    ("unc_both", r"\b(?:versus|vs)\b"),
    ("unc_both", r"\?"),
    # Uncertainty, before the mention.
    ("unc_pre", r"\b(?:cannot|can not|can't|could not|difficult to|not) (?:entirely |"
                r"completely )?(?:exclude|rule out)\b"),
    ("unc_pre", r"\b(?:may|might|could|possible|possibly|probable|probably|likely|unlikely|"
                r"presumably|presumed|perhaps|questionable|questionably|equivocal|"
                r"indeterminate|borderline|suspected|suspect|suggests?|suggested|suggesting|"
                r"suggestive of|suspicious (?:for|of)|suspicion (?:for|of)|"
                r"concern(?:ing)? (?:for|of)|question of|differential|consider|considered|"
                r"r/o|rule out|evaluate for|assess for|raising the possibility of)\b"),
    # Negation, after the mention ("pneumothorax has resolved").
    ("neg_post", r"\b(?:(?:is|are|was|were|has|have|had) )?(?:been )?(?:not|no longer) "
                 r"(?:been )?(?:(?:clearly|definitely|convincingly|well) )?(?:seen|identified|"
                 r"visualized|visible|appreciated|demonstrated|present|evident|detected|noted|"
                 r"apparent)\b"),
    ("neg_post", r"\b(?:(?:has|have|had) )?(?:(?:since|now|completely|nearly|almost|"
                 r"interval(?:ly)?) )?resolved\b"),
    ("neg_post", r"\b(?:(?:has|have|had|was|were) )?(?:been )?(?:interval )?removed\b"),
    ("neg_post", r"\bremoval\b(?! of)"),
    ("neg_post", r"\b(?:(?:is|are) )?absent\b"),
    ("neg_post", r"\b(?:(?:is|are|was|were|has been|have been) )?(?:ruled out|excluded)\b"),
    # Negation, before the mention.
    ("neg_pre", r"\b(?:no|without|free of|negative for|absence of|absent|resolution of|"
                r"resolved|clear of|neither|nor|(?:interval )?removal of|"
                r"(?:does|do|did) not (?:demonstrate|show|reveal|see|identify))\b"),
    # Scope terminators: a cue does not reach across these.
    ("term", r"\b(?:but|however|although|though|whereas|while|except|apart from|aside from|"
             r"other than|which|who|otherwise|following|after|"
             r"there (?:is|are|was|were|has been|have been)|and (?=(?:the|there|a|an)\b))"),
]

# A post cue reaches back only over a subject phrase: another predicate in between stops it.
_VERB = re.compile(
    r"\b(?:is|are|was|were|has|have|had|remains?|appears?|seen|noted|present|with|increased|"
    r"decreased|improved|worsened|unchanged|stable|persists?)\b"
)
_POST_REACH = 80  # characters

_ABBREV = re.compile(r"\b(?:vs|e\.g|i\.e|approx|dr)\.(?=\s*[a-z0-9])")
_SENT_END = re.compile(r"(?<!\d)\.(?!\d)|[;:!\n]")
_SPACES = re.compile(r"\s+")


def _compile_mentions() -> list[tuple[int, re.Pattern[str], re.Pattern[str] | None, list[int]]]:
    out = []
    for obs_index, name in enumerate(OBSERVATIONS):
        phrases = _MENTIONS.get(name)
        if not phrases:
            continue
        mention = re.compile(
            "|".join(f"(?:{p[1:]})\\b" if p.startswith("~") else f"\\b(?:{p})\\b"
                     for p in phrases)
        )
        fixed_list = _FIXED.get(name, [])
        if fixed_list:
            fixed = re.compile(
                r"\b(?:" + "|".join(f"(?P<f{i}>{p})" for i, (p, _) in enumerate(fixed_list))
                + r")\b"
            )
            values = [v for _, v in fixed_list]
        else:
            fixed, values = None, []
        out.append((obs_index, mention, fixed, values))
    return out


class RuleLabeler:
    """Compiled rule-based CheXpert-style labeler. Thread-safe and stateless after init."""

    version = f"{LABELER_NAME}-v{LABELER_VERSION}"

    def __init__(self) -> None:
        self._mentions = _compile_mentions()
        # Per observation, the prefixes its mention and fixed patterns can begin with: a
        # sentence holding none of them is not scanned for it (same labels, a third the time).
        self._gates = GateTable([
            p for _obs, m, f, _values in self._mentions
            for p in (m.pattern, None if f is None else f.pattern)
        ])
        # One leading word boundary for all word cues: the engine then tries the alternatives
        # only at word starts, which makes this scan several times faster.
        word = [f"(?P<{k}{i}>{p[2:]})" for i, (k, p) in enumerate(_CUES) if p.startswith(r"\b")]
        other = [f"(?P<{k}{i}>{p})" for i, (k, p) in enumerate(_CUES) if not p.startswith(r"\b")]
        self._cues = re.compile(r"\b(?:" + "|".join(word) + ")|" + "|".join(other))
        self._cue_kind = {f"{kind}{i}": kind for i, (kind, _) in enumerate(_CUES)}
        self._no_finding = OBSERVATIONS.index("No Finding")
        self._support = OBSERVATIONS.index("Support Devices")

    @staticmethod
    def normalize(text: str) -> str:
        """Lowercase, collapse whitespace (keeping line breaks as sentence ends)."""
        text = text.lower().replace("\r", "\n")
        text = _ABBREV.sub(lambda m: m.group(0)[:-1].replace(".", ""), text)
        lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
        return "\n".join(line for line in lines if line)

    def _context(self, text: str) -> _Context:
        ends = [m.start() for m in _SENT_END.finditer(text)]
        cues = [
            (m.start(), m.end(), self._cue_kind[m.lastgroup])
            for m in self._cues.finditer(text)
            if m.lastgroup is not None
        ]
        return _Context(text, ends, cues, [c[0] for c in cues])

    def label(self, report: str) -> tuple[Label, ...]:
        """Label one report.

        Args:
            report: Free-text report (any case, any whitespace).

        Returns:
            One value per observation in :data:`~backend.metrics.labels.OBSERVATIONS` order:
            1 positive, 0 negative, -1 uncertain, None blank.
        """
        text = self.normalize(report)
        may = self._gates.candidates(text)  # bit 2j: mention list j, 2j+1: its fixed list
        ctx: _Context | None = None  # the cues, read only once a mention needs them

        found: list[list[int]] = [[] for _ in OBSERVATIONS]
        for j, (obs, mention_re, fixed_re, fixed_values) in enumerate(self._mentions):
            taken: list[tuple[int, int]] = []
            if fixed_re is not None and may >> (2 * j + 1) & 1:
                for m in fixed_re.finditer(text):
                    found[obs].append(fixed_values[int((m.lastgroup or "f0")[1:])])
                    taken.append(m.span())
            if not may >> (2 * j) & 1:
                continue
            for m in mention_re.finditer(text):
                s, e = m.span()
                if any(s < te and ts < e for ts, te in taken):
                    continue
                if ctx is None:
                    ctx = self._context(text)
                found[obs].append(_classify(ctx, s, e))
        labels: list[Label] = [_aggregate(v) for v in found]
        has_finding = any(
            labels[i] in (POSITIVE, UNCERTAIN)
            for i in range(len(OBSERVATIONS))
            if i not in (self._no_finding, self._support)
        )
        labels[self._no_finding] = None if has_finding else POSITIVE
        return tuple(labels)


@dataclass(frozen=True)
class _Context:
    text: str
    ends: list[int]  # sentence-end offsets
    cues: list[tuple[int, int, str]]  # (start, end, kind), sorted by start
    cue_starts: list[int]


def _classify(ctx: _Context, start: int, end: int) -> int:
    text = ctx.text
    if _INNER_NEG.search(text, start, end):
        return NEGATIVE
    k = bisect.bisect_left(ctx.ends, start)
    sent_start = ctx.ends[k - 1] + 1 if k > 0 else 0
    sent_end = ctx.ends[k] if k < len(ctx.ends) else len(text)
    first_after = bisect.bisect_left(ctx.cue_starts, end)

    # Cues after the mention reach back over a verb-free subject phrase.
    for cs, _ce, kind in ctx.cues[first_after:]:
        if cs >= sent_end or cs - end > _POST_REACH or kind == "term":
            break
        if kind not in ("neg_post", "unc_post", "unc_both"):
            continue
        gap = text[end:cs]
        if kind == "unc_both" and ("," in gap or len(gap) > 30):
            # "opacity, atelectasis versus pneumonia": versus binds its neighbours only.
            break
        if _VERB.search(gap):
            break
        return NEGATIVE if kind == "neg_post" else UNCERTAIN

    # Cues before the mention: the nearest one in the same scope wins.
    for cs, ce, kind in reversed(ctx.cues[:first_after]):
        if ce > start:
            continue  # overlaps the mention itself
        if cs < sent_start or kind == "term":
            break
        if kind == "neg_pre":
            return NEGATIVE
        if kind in ("unc_pre", "unc_both"):
            return UNCERTAIN
    return POSITIVE


# Negation written inside a mention ("the heart is not enlarged").
_INNER_NEG = re.compile(r"\b(?:not|no longer)\b")


def _aggregate(values: list[int]) -> Label:
    # CheXpert aggregation: any positive mention wins, then uncertain, then negative.
    if not values:
        return None
    if POSITIVE in values:
        return POSITIVE
    if UNCERTAIN in values:
        return UNCERTAIN
    return NEGATIVE


_LABELER: RuleLabeler | None = None


def get_labeler() -> RuleLabeler:
    """The process-wide compiled labeler (compiled once, on first use)."""
    global _LABELER
    if _LABELER is None:
        _LABELER = RuleLabeler()
    return _LABELER


def label_report(report: str) -> tuple[Label, ...]:
    """Label one report with the process-wide :class:`RuleLabeler`."""
    return get_labeler().label(report)


class ChexpertLabels(BaseMetric):
    """Agreement of CheXpert observation labels between reference and candidate.

    Per pair: ``chexpert_acc`` (fraction of the 14 binarised labels that agree) and
    ``chexpert_f1`` (F1 over positive binarised labels; 1.0 when neither report has one).
    Corpus: micro/macro/weighted F1 over the 14 and over the 5 competition observations.
    Details per pair hold both label vectors in ``OBSERVATIONS`` order.
    """

    spec = MetricSpec(
        name="chexpert",
        outputs=(
            OutputSpec("chexpert_acc", True, "Agreement of the 14 binarised CheXpert labels"),
            OutputSpec("chexpert_f1", True, "F1 over positive CheXpert labels (14)"),
        ),
        needs_model=False,
        citation="Irvin et al., CheXpert, AAAI 2019 (labeling scheme); rules: RadConcord",
        corpus_outputs=corpus_keys("chexpert"),
    )
    defaults: dict[str, Any] = {}

    def label_reports(self, reports: Sequence[str]) -> list[tuple[Label, ...]]:
        """Label reports; identical texts are labelled once."""
        labeler = get_labeler()
        cache: dict[str, tuple[Label, ...]] = {}
        out = []
        for text in reports:
            labels = cache.get(text)
            if labels is None:
                labels = cache[text] = labeler.label(text)
            out.append(labels)
        return out

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        labelled = self.label_reports([*references, *candidates])
        ref_labels, cand_labels = labelled[: len(references)], labelled[len(references):]
        acc, f1, details = [], [], []
        for r, c in zip(ref_labels, cand_labels, strict=True):
            rb, cb = binarize(r), binarize(c)
            acc.append(pair_accuracy(rb, cb))
            f1.append(pair_f1(rb, cb))
            details.append({"reference_labels": list(r), "candidate_labels": list(c)})
        return MetricResult(
            values={"chexpert_acc": acc, "chexpert_f1": f1},
            corpus=corpus_scores(ref_labels, cand_labels, "chexpert"),
            details=details,
        )

    def signature(self) -> str:
        return (
            f"chexpert|labeler:{RuleLabeler.version}|bin:{BINARISATION}|labels:14"
            "|acc:label-agreement|f1:positive-labels,empty=1"
        )
