"""CT-RATE's 18 chest CT abnormalities and three ways to label a report with them.

CT-RATE (Hamamci et al., 2024) labels each chest CT report with 18 abnormalities
(:data:`CTRATE_LABELS`, in the order of the dataset and of its released classifier). The CRG
score was evaluated on CT-RATE with those labels; ``crg`` uses them with ``labels=ctrate`` and
one of three labelers (``labeler=``):

* ``rules`` (:class:`CtRateRuleLabeler`): written for this project, offline, no download.
  Phrase lists per abnormality, then negation and uncertainty cues in the mention's sentence
  (CT-RATE's reports are translated and say "X was not observed" more often than "no X", so
  cues after a mention matter as much as cues before it). Values ``1`` positive, ``0``
  negative, ``-1`` uncertain (``possible``, ``suspected``, ``cannot be excluded`` ...), ``None``
  not mentioned; aggregated per abnormality as positive > uncertain > negative > blank.
  Accuracy on the hand-labelled sentences in ``tests/fixtures/ctrate_sentences.jsonl`` is
  pinned in ``tests/unit/test_ctrate_rules.py`` and printed by
  ``bench/bench_ctrate_labeler.py``.
* ``classifier`` (:class:`CtRateClassifier`): CT-RATE's released report classifier
  (``text_classifier/`` of ibrahimethemhamamci/CT-CLIP): the ``zzxslp/RadBERT-RoBERTa-4m``
  encoder, a linear layer over its pooler output with 18 outputs, a sigmoid and a threshold of
  0.5 (``>= 0.5`` is positive). The weights (``models/RadBertClassifier.pth``, a state dict with
  ``model.*`` encoder and ``classifier.*`` head keys) are in the gated CT-RATE dataset on the
  Hugging Face hub; they are read from a path or ``$RADCONCORD_MODEL_DIR``, never fetched
  behind the user's back (the dataset needs its terms accepted).
* ``llm`` (:class:`CtRateLLMLabeler`): any chat model through the LLM backends (in-process
  transformers or an OpenAI-compatible endpoint), asked for the 18 labels as JSON and, with
  ``structured=True``, each finding's type, location and laterality. :func:`parse_labels` never
  raises; a label it cannot read is ``nan`` with the reason in the reading's flags (never
  silently absent).

Binarisation for CRG follows :data:`~backend.metrics.labels.BINARISATION`: positive and
uncertain are 1, negative and not mentioned are 0.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import (
    MetricResult,
    MetricSpec,
    OutputSpec,
    Resources,
)
from radconcord.backend.metrics.labels import NEGATIVE, POSITIVE, UNCERTAIN
from radconcord.backend.metrics.llm import truncate_words
from radconcord.backend.metrics.llm_backends import (
    BACKEND_DEFAULTS,
    LLMMetric,
    Message,
    prompt_hash,
)
from radconcord.backend.metrics.llm_json import json_objects, loads_lenient
from radconcord.backend.util import cached_file_sha256

#: The 18 abnormalities in CT-RATE's order (the classifier's output order).
CTRATE_LABELS: tuple[str, ...] = (
    "Medical material",
    "Arterial wall calcification",
    "Cardiomegaly",
    "Pericardial effusion",
    "Coronary artery wall calcification",
    "Hiatal hernia",
    "Lymphadenopathy",
    "Emphysema",
    "Atelectasis",
    "Lung nodule",
    "Lung opacity",
    "Pulmonary fibrotic sequela",
    "Pleural effusion",
    "Mosaic attenuation pattern",
    "Peribronchial thickening",
    "Consolidation",
    "Bronchiectasis",
    "Interlobular septal thickening",
)
LABELERS = ("rules", "classifier", "llm")

#: A label as read: 1, 0, -1, None (not mentioned) or ``nan`` (an LLM answer left it unread).
CtLabel = int | float | None


@dataclass
class Reading:
    """The labels of one report and what went wrong reading them.

    Attributes:
        labels: One value per :data:`CTRATE_LABELS` entry: 1, 0, -1, None or ``nan``.
        flags: Why a label is ``nan`` (``missing: Emphysema``); empty when all were read.
        notes: Things ignored without harm (unknown keys, a malformed structured finding).
        findings: Structured findings (``label``, ``type``, ``location``, ``laterality``)
            when the labeler gives them (the LLM labeler with ``structured=True``).
    """

    labels: tuple[CtLabel, ...]
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    findings: list[dict[str, str | None]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every label was read (no ``nan``)."""
        return not any(isinstance(v, float) and math.isnan(v) for v in self.labels)


def binarize_reading(labels: Sequence[CtLabel]) -> list[int] | None:
    """Positive and uncertain -> 1, negative and blank -> 0; ``None`` if any label is ``nan``.

    Raises:
        ValueError: for a value outside ``{1, 0, -1, None, nan}`` or a wrong length.
    """
    if len(labels) != len(CTRATE_LABELS):
        raise ValueError(f"expected {len(CTRATE_LABELS)} CT-RATE labels, got {len(labels)}")
    out = []
    for i, v in enumerate(labels):
        if isinstance(v, float) and math.isnan(v):
            return None
        if v is None or (v == NEGATIVE and not isinstance(v, bool)):
            out.append(0)
        elif v in (POSITIVE, UNCERTAIN) and not isinstance(v, bool):
            out.append(1)
        else:
            raise ValueError(f"label {i} is {v!r}; expected 1, 0, -1, None or nan")
    return out


# =========================================================================== rules

RULES_NAME = "radconcord-ct-rules"
#: Bump whenever a phrase list or rule changes a label: it is part of the metric signature.
RULES_VERSION = "1"

_W = r"(?:[\w-]+ )"  # one word and its space, for bounded gaps ("{0,6}?")
_CALC = r"(?:calcif\w*|atheroscler\w*|atherom\w*|plaques?)"
# Vessels whose wall calcification is "arterial"; "coronary" is its own label and the aortic
# valve is not an arterial wall.
_VESSEL = (r"(?:aort\w*(?! valve)|arcus|carotid\w*|subclavian|brachiocephalic|iliac|"
           r"(?<!coronary )arter(?:y|ies|ial)|vascular|vessels?)")

_MENTIONS: dict[str, list[str]] = {
    "Medical material": [
        r"pacemakers?", r"pacing (?:leads?|wires?)", r"(?:sternotomy|sternal|surgical) wires?",
        r"(?:surgical|vascular|metallic) clips?", r"stents?", r"catheters?", r"port",
        r"prosthe\w*(?: \w+)? valves?", r"valve replacement", r"(?:chest|endotracheal|"
        r"tracheostomy|nasogastric|orogastric|feeding|thoracostomy|drainage) tubes?",
        r"intubated", r"tracheostomy", r"prosthes[ie]s", r"(?:embolization )?coils?",
        r"implants?", r"icd", r"defibrillators?", r"drains?",
        r"(?:(?:medical|surgical|metallic|foreign|prosthetic) )+(?:materials?|bod(?:y|ies))",
    ],
    "Arterial wall calcification": [
        _CALC + r" " + _W + r"{0,8}?" + _VESSEL,
        _VESSEL + r" " + _W + r"{0,3}?" + _CALC,
    ],
    "Cardiomegaly": [
        r"cardiomegal\w*", r"cardiac enlargement", r"enlarged heart",
        r"(?:heart|cardiac)(?: (?:size|sizes|dimensions?|silhouette|contour))? "
        r"(?:(?:is|are|was|were|appears?) )?" + _W + r"{0,2}?(?:increased|enlarged)",
    ],
    "Pericardial effusion": [
        r"pericardial " + _W + r"{0,2}?(?:effusions?|fluid)", r"fluid in the pericardi\w*",
        r"hemopericardium",
    ],
    "Coronary artery wall calcification": [
        _CALC + r" " + _W + r"{0,8}?coronar\w*",
        r"coronar\w* " + _W + r"{0,3}?" + _CALC,
    ],
    "Hiatal hernia": [
        r"hiat(?:al|us) hernia", r"hernia\w* of the stomach through the (?:\w+ )?hiatus",
        r"herniation " + _W + r"{0,6}?hiatus",
    ],
    "Lymphadenopathy": [
        r"(?:lymph)?adenopath\w*",
        r"(?:enlarged|pathologic\w*(?: enlarged)?|prominent|conglomerate|bulky) " + _W
        + r"{0,3}?lymph nodes?",
        r"lymph nodes? " + _W + r"{0,5}?(?:of|in|with|at|reaching) " + _W
        + r"{0,2}?pathologic\w* (?:size|sizes|dimensions?)",
        r"lymph nodes? (?:(?:is|are|was|were) )?(?:\w+ )?enlarged",
    ],
    "Emphysema": [r"emphysem\w*", r"bullae", r"bullous"],
    "Atelectasis": [r"(?:fibro)?atelecta\w*", r"collapsed?"],
    "Lung nodule": [
        r"(?:micro)?nodul\w*", r"(?<!node )(?<!nodal )masse?s?(?: lesions?)?",
    ],
    "Lung opacity": [
        r"ground[- ]?glass(?: (?:opacit\w*|densit\w*|areas?|attenuation))?",
        r"(?<!nodular )opacit(?:y|ies)", r"opacification", r"infiltrat\w*",
        r"increased density(?: areas?)?", r"density increase\w*",
        r"increased density areas",
    ],
    "Pulmonary fibrotic sequela": [
        r"fibro(?:sis|tic|us)\w*", r"fibroatelecta\w*", r"sequel(?:ae|a)\w*",
        r"parenchymal bands?", r"scar(?:s|ring)?",
    ],
    "Pleural effusion": [
        r"(?<!pericardial )(?<!joint )effusions?", r"pleural fluid", r"hydrothorax",
        r"fluid " + _W + r"{0,3}?(?:in|within) (?:the )?(?:\w+ )?pleural "
        r"(?:spaces?|cavit(?:y|ies))",
    ],
    "Mosaic attenuation pattern": [r"mosaic (?:attenuation|perfusion|pattern|oligemia)\w*"],
    "Peribronchial thickening": [
        r"peribronchial (?:wall )?(?:thickening|cuffing)",
        r"bronch\w* walls? " + _W + r"{0,2}?thicken\w*",
        r"thicken\w* of the bronch\w* walls?",
    ],
    "Consolidation": [r"consolidat\w*"],
    "Bronchiectasis": [r"bronchiecta\w*"],
    "Interlobular septal thickening": [
        r"(?:interlobular )?septal thickening", r"thicken\w* of (?:the )?(?:interlobular )?septa",
        r"interlobular sept(?:a|al)\w* (?:(?:are|were|is) )?thickened", r"crazy[- ]paving",
    ],
}

# Phrases whose value the phrase itself fixes ("heart size is normal" -> Cardiomegaly 0).
_FIXED: dict[str, list[tuple[str, int]]] = {
    "Cardiomegaly": [
        (r"heart (?:contours?|sizes?)(?:,? and (?:the )?(?:contour|size))? "
         r"(?:is|are|was|were) (?:within )?normal(?: limits)?", NEGATIVE),
        (r"(?:heart|cardiac) (?:contours?|size|dimensions?)(?: and (?:heart )?(?:contour|size))?"
         r" (?:(?:is|are) )?(?:normal|within normal limits)", NEGATIVE),
        (r"normal (?:heart|cardiac) size", NEGATIVE),
        (r"(?:heart|cardiac) (?:size )?(?:(?:is|are) )?(?:at )?the upper limits? of normal"
         r"(?: size)?", NEGATIVE),
    ],
    "Lymphadenopathy": [
        (r"(?:millimetric|subcentimetric|small|\w+-sized) lymph nodes? " + _W
         + r"{0,4}?not reaching pathologic\w* (?:size|sizes|dimensions?)", NEGATIVE),
        (r"lymph nodes? " + _W + r"{0,5}?(?:within|in|of) normal (?:size|limits|dimensions?)"
         + r"(?: limits)?", NEGATIVE),
    ],
}

# Coordinated modifiers share one head noun: "pleural or pericardial effusion" names two.
_EXPAND = [
    (re.compile(r"\b(pleural|pericardial)( (?:or|and|and/or) |/| ?- ?)(pleural|pericardial) "
                r"(effusions?)"), r"\1 \4\2\3 \4"),
    # "pericardial thickening and minimal effusion": the effusion is pericardial too.
    (re.compile(r"\bpericardial (thickening|fluid) (and|with) ((?:\w+ )?)(effusions?)"),
     r"pericardial \1 \2 \3pericardial \4"),
]

_CUES: list[tuple[str, str]] = [
    # Masked: their "no" is not a negation of what follows.
    ("mask", r"\bno (?:(?:significant|substantial|appreciable|interval|marked) )*(?:change|"
             r"increase|decrease|progression|regression|difference)\b"),
    ("mask", r"\bwithout (?:(?:significant|interval) )*change\b"),
    ("mask", r"\bnot (?:significantly )?(?:changed|increased|decreased)\b"),
    # Uncertainty after the mention.
    ("unc_post", r"\b(?:cannot|can not|could not) (?:be )?(?:entirely |completely )?"
                 r"(?:excluded|ruled out)\b"),
    ("unc_post", r"\b(?:is|are|was|were) not (?:excluded|ruled out)\b"),
    ("unc_post", r"\b(?:is|are|was|were) (?:suspected|questionable|possible|likely|probable)\b"),
    ("unc_post", r"\?"),
    # Uncertainty before the mention.
    ("unc_pre", r"\b(?:cannot|can not|could not) (?:entirely |completely )?(?:exclude|rule out)"
                r"\b"),
    ("unc_pre", r"\b(?:may|might|could|possible|possibly|probable|probably|likely|"
                r"questionable|suspicious(?: (?:for|of))?|suspected|suspicion (?:for|of)|"
                r"suggest(?:s|ed|ing|ive of)?|differential|indeterminate|equivocal|"
                r"versus|vs|rule out|concern(?:ing)? for)\b"),
    # Negation after the mention ("hiatal hernia was not observed").
    ("neg_post", r"\b(?:(?:is|are|was|were|has|have|had) )?(?:been )?(?:not|no longer) "
                 r"(?:been )?(?:\w+ )?(?:observed|detected|seen|identified|present|noted|"
                 r"evident|visualized|found|demonstrated|apparent|appreciated)\b"),
    ("neg_post", r"\b(?:(?:has|have) )?(?:completely )?(?:resolved|disappeared)\b"),
    ("neg_post", r"\b(?:(?:has|have|had|was|were) )?(?:been )?removed\b"),
    ("neg_post", r"\b(?:is|are|was|were) absent\b"),
    # Negation before the mention.
    ("neg_pre", r"\b(?:no|without|absence of|negative for|free of|neither|nor|"
                r"resolution of|resolved|rather than|removal of)\b"),
    # Scope terminators: a cue before a mention does not reach across these.
    ("term", r"\b(?:but|however|although|though|whereas|while|except|apart from|other than|"
             r"which|otherwise|there (?:is|are|was|were)|and (?=(?:the|there|a|an)\b)|"
             r"(?:is|are|was|were) (?:not )?(?:\w+ )?(?:detected|observed|seen|noted|"
             r"identified|present))\b"),
]

# A cue after a mention reaches back over a subject phrase only, not over another predicate.
_VERB = re.compile(
    r"\b(?:is|are|was|were|has|have|seen|observed|noted|present|detected|with|shows?)\b"
)
_POST_REACH = 80  # characters
_INNER_NEG = re.compile(r"\b(?:not|no longer)\b")
_SENT_END = re.compile(r"(?<!\d)\.(?!\d)|[;:!\n]")
_SPACES = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class _Sentences:
    text: str
    ends: list[int]
    cues: list[tuple[int, int, str]]
    cue_starts: list[int]


class CtRateRuleLabeler:
    """Rule-based labeler for the 18 CT-RATE abnormalities; thread-safe after init."""

    version = f"{RULES_NAME}-v{RULES_VERSION}"

    def __init__(self) -> None:
        self._mentions: list[tuple[int, re.Pattern[str], re.Pattern[str] | None, list[int]]] = []
        for i, name in enumerate(CTRATE_LABELS):
            mention = re.compile("|".join(f"\\b(?:{p})\\b" for p in _MENTIONS[name]))
            fixed_list = _FIXED.get(name, [])
            fixed = (re.compile(r"\b(?:" + "|".join(f"(?P<f{k}>{p})"
                                                    for k, (p, _) in enumerate(fixed_list))
                                + r")\b") if fixed_list else None)
            self._mentions.append((i, mention, fixed, [v for _, v in fixed_list]))
        self._cues = re.compile("|".join(f"(?P<{k}{i}>{p})" for i, (k, p) in enumerate(_CUES)))
        self._kind = {f"{k}{i}": k for i, (k, _) in enumerate(_CUES)}

    @staticmethod
    def normalize(text: str) -> str:
        """Lowercase, single spaces, coordinated effusions expanded, line breaks kept."""
        text = text.lower().replace("\r", "\n")
        lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
        text = "\n".join(line for line in lines if line)
        for pattern, repl in _EXPAND:
            text = pattern.sub(repl, text)
        return text

    def label(self, report: str) -> tuple[int | None, ...]:
        """Label one report: one value (1, 0, -1 or None) per :data:`CTRATE_LABELS` entry."""
        text = self.normalize(report)
        ends = [m.start() for m in _SENT_END.finditer(text)]
        cues = [(m.start(), m.end(), self._kind[m.lastgroup])
                for m in self._cues.finditer(text) if m.lastgroup is not None]
        ctx = _Sentences(text, ends, cues, [c[0] for c in cues])
        out: list[int | None] = []
        for _i, mention_re, fixed_re, fixed_values in self._mentions:
            found: list[int] = []
            taken: list[tuple[int, int]] = []
            if fixed_re is not None:
                for m in fixed_re.finditer(text):
                    found.append(fixed_values[int((m.lastgroup or "f0")[1:])])
                    taken.append(m.span())
            for m in mention_re.finditer(text):
                s, e = m.span()
                if not any(s < te and ts < e for ts, te in taken):
                    found.append(_classify(ctx, s, e))
            out.append(_aggregate(found))
        return tuple(out)

    def read(self, reports: Sequence[str]) -> list[Reading]:
        """:class:`Reading` of each report (identical texts are labelled once)."""
        cache: dict[str, tuple[int | None, ...]] = {}
        out = []
        for text in reports:
            if text not in cache:
                cache[text] = self.label(text)
            out.append(Reading(cache[text]))
        return out


def _classify(ctx: _Sentences, start: int, end: int) -> int:
    text = ctx.text
    if _INNER_NEG.search(text, start, end):
        return NEGATIVE
    k = bisect.bisect_left(ctx.ends, start)
    sent_start = ctx.ends[k - 1] + 1 if k > 0 else 0
    sent_end = ctx.ends[k] if k < len(ctx.ends) else len(text)
    first_after = bisect.bisect_left(ctx.cue_starts, end)
    # Cues after the mention ("... was not observed") reach back over a verb-free gap.
    for cs, _ce, kind in ctx.cues[first_after:]:
        if cs >= sent_end or cs - end > _POST_REACH:
            break
        if kind in ("neg_post", "unc_post"):
            if _VERB.search(text, end, cs):
                break
            return NEGATIVE if kind == "neg_post" else UNCERTAIN
    # Cues before the mention: the nearest one in the same scope wins.
    for cs, ce, kind in reversed(ctx.cues[:first_after]):
        if ce > start:
            continue
        if cs < sent_start or kind == "term":
            break
        if kind == "neg_pre":
            return NEGATIVE
        if kind == "unc_pre":
            return UNCERTAIN
    return POSITIVE


def _aggregate(values: list[int]) -> int | None:
    # Any positive mention wins, then uncertain, then negative (as the CheXpert labeler does).
    if not values:
        return None
    for v in (POSITIVE, UNCERTAIN):
        if v in values:
            return v
    return NEGATIVE


_RULES: CtRateRuleLabeler | None = None
_RULES_LOCK = threading.Lock()


def rule_labeler() -> CtRateRuleLabeler:
    """The process-wide compiled rule labeler."""
    global _RULES
    with _RULES_LOCK:
        if _RULES is None:
            _RULES = CtRateRuleLabeler()
        return _RULES


def label_report(report: str) -> tuple[int | None, ...]:
    """Label one report with the rule labeler."""
    return rule_labeler().label(report)


# =========================================================================== classifier

CLASSIFIER_REPO = "ibrahimhamamci/CT-RATE"  # a gated *dataset* repository on the hub
CLASSIFIER_FILE = "RadBertClassifier.pth"  # stored there as models/RadBertClassifier.pth
#: The encoder (config + tokenizer) the released head was trained on.
CLASSIFIER_ENCODER = "zzxslp/RadBERT-RoBERTa-4m"
CLASSIFIER_THRESHOLD = 0.5  # CT-CLIP's ModelTrainer: sigmoid(logit) >= 0.5 is positive
CLASSIFIER_MAX_LENGTH = 512


def locate_classifier_checkpoint(checkpoint: str | None) -> tuple[Path | None, str | None]:
    """Find the CT-RATE classifier weights without downloading.

    Order: an explicit path; ``$RADCONCORD_MODEL_DIR/RadBertClassifier.pth``,
    ``.../ibrahimhamamci--CT-RATE/RadBertClassifier.pth`` or ``.../models/RadBertClassifier.pth``.

    Returns:
        ``(path, None)`` when found, else ``(None, reason)``.
    """
    if checkpoint:
        p = Path(checkpoint).expanduser()
        if p.is_file():
            return p.resolve(), None
        return None, f"CT-RATE classifier checkpoint {p} does not exist"
    found = (hf.model_dir_file(CLASSIFIER_REPO, CLASSIFIER_FILE)
             or hf.model_dir_file(CLASSIFIER_REPO, f"models/{CLASSIFIER_FILE}"))
    if found is not None:
        return found, None
    return None, (
        f"CT-RATE classifier weights not found: download models/{CLASSIFIER_FILE} from the"
        f" gated Hugging Face dataset {CLASSIFIER_REPO} (accept its terms first) and pass"
        f" --set crg.checkpoint=/path/{CLASSIFIER_FILE} or put it in $RADCONCORD_MODEL_DIR"
    )


class CtRateClassifierModel:
    """The released classifier loaded for inference: encoder + linear head on the pooler.

    Args:
        encoder_dir: Folder with the encoder's ``config.json`` and tokenizer files (its
            weights, if any, are replaced by the checkpoint's).
        checkpoint: ``torch.save`` of the classifier's state dict (``model.*`` encoder keys,
            ``classifier.weight``/``classifier.bias``; a ``module.`` prefix or a
            ``state_dict``/``model_state_dict`` wrapper is accepted).
        device: Torch device string.
        threshold: Probability at or above which a label is positive.

    Raises:
        ValueError: when the checkpoint does not fit the encoder or has not 18 outputs.
    """

    def __init__(self, *, encoder_dir: Path, checkpoint: Path, device: str,
                 threshold: float = CLASSIFIER_THRESHOLD) -> None:
        import torch
        from torch import nn
        from transformers import AutoConfig, AutoModel

        config = AutoConfig.from_pretrained(str(encoder_dir), local_files_only=True)
        net = nn.Module()
        net.model = AutoModel.from_config(config)
        net.classifier = nn.Linear(config.hidden_size, len(CTRATE_LABELS))
        state = torch.load(str(checkpoint), map_location="cpu", weights_only=True)
        for key in ("state_dict", "model_state_dict"):
            if isinstance(state, dict) and isinstance(state.get(key), dict):
                state = state[key]
        state = {k.removeprefix("module."): v for k, v in state.items()}
        head = state.get("classifier.weight")
        if head is None or tuple(head.shape) != (len(CTRATE_LABELS), config.hidden_size):
            got = None if head is None else tuple(head.shape)
            raise ValueError(f"{checkpoint} is not the 18-label CT-RATE classifier"
                             f" (classifier.weight {got})")
        missing, unexpected = net.load_state_dict(state, strict=False)
        # position_ids is a buffer older checkpoints saved and newer encoders do not keep.
        unexpected = [k for k in unexpected if not k.endswith("position_ids")]
        missing = [k for k in missing if not k.endswith("position_ids")]
        if missing or unexpected:
            raise ValueError(f"{checkpoint} does not fit encoder {encoder_dir}"
                             f" (missing {missing[:3]}, unexpected {unexpected[:3]})")
        self.net = net.to(device).eval()
        # CT-CLIP's dataset builds the tokenizer with do_lower_case=True.
        self.tokenizer = hf.load_tokenizer(encoder_dir, do_lower_case=True)
        self.device = device
        self.threshold = float(threshold)
        self._lock = threading.Lock()

    def probabilities(self, texts: Sequence[str], batch_size: int = 32) -> list[list[float]]:
        """Sigmoid of the 18 logits of each text, in :data:`CTRATE_LABELS` order."""
        import torch

        def run(batch: list[str]) -> list[list[float]]:
            enc = self.tokenizer(batch, padding=True, truncation=True,
                                 max_length=CLASSIFIER_MAX_LENGTH, return_tensors="pt")
            with self._lock, torch.inference_mode():
                out = self.net.model(input_ids=enc["input_ids"].to(self.device),
                                     attention_mask=enc["attention_mask"].to(self.device))
                logits = self.net.classifier(out.pooler_output)
                probs = torch.sigmoid(logits.float()).cpu().tolist()
            return probs

        if not texts:
            return []
        return hf.map_sorted_by_length(list(texts), run, lengths=[len(t) for t in texts],
                                       batch_size=int(batch_size))

    def label(self, texts: Sequence[str], batch_size: int = 32) -> list[tuple[int, ...]]:
        """1 where the probability is ``>= threshold``, else 0 (the classifier has no blank)."""
        return [tuple(int(p >= self.threshold) for p in row)
                for row in self.probabilities(texts, batch_size)]


class CtRateClassifier:
    """The ``classifier`` labeler: checkpoint + encoder located, loaded once per resources.

    Args:
        checkpoint: Path of ``RadBertClassifier.pth`` (else looked up, see
            :func:`locate_classifier_checkpoint`).
        model: Encoder hub id or local folder (default :data:`CLASSIFIER_ENCODER`).
        revision: Encoder revision (commit); ``None`` pins the hub's current commit on first
            use and the signature names it.
        batch_size: Reports per forward batch.
        resources: Where the loaded network is shared.
    """

    def __init__(self, *, checkpoint: str | None = None, model: str | None = None,
                 revision: str | None = None, batch_size: int = 32,
                 resources: Resources | None = None) -> None:
        self.checkpoint = checkpoint
        self.encoder = hf.ModelRef(model or CLASSIFIER_ENCODER, revision)
        self.batch_size = int(batch_size)
        self.resources = resources or Resources()
        self._model: CtRateClassifierModel | None = None

    def availability(self) -> str | None:
        """``None`` when weights and encoder are at hand (or the encoder can be fetched)."""
        _, reason = locate_classifier_checkpoint(self.checkpoint)
        if reason:
            return reason
        _, reason = hf.resolve_or_reason(self.encoder)
        if reason:
            return f"CT-RATE classifier encoder/tokenizer: {reason}"
        return None

    def load(self, device: str = "cpu") -> None:
        """Load the network (once per resources, checkpoint and device)."""
        ckpt, reason = locate_classifier_checkpoint(self.checkpoint)
        if ckpt is None:
            raise hf.ModelNotAvailable(reason)
        encoder_dir = hf.resolve(self.encoder)
        key = ("ctrate-classifier", str(encoder_dir), str(ckpt), device)
        self._model = self.resources.get(key, lambda: CtRateClassifierModel(
            encoder_dir=encoder_dir, checkpoint=ckpt, device=device))

    def read(self, reports: Sequence[str]) -> list[Reading]:
        """:class:`Reading` of each report."""
        if self._model is None:
            self.load()
        assert self._model is not None
        uniq = list(dict.fromkeys(reports))
        got = dict(zip(uniq, self._model.label(uniq, self.batch_size), strict=True))
        return [Reading(got[t]) for t in reports]

    def signature(self) -> str:
        """Checkpoint hash, encoder identity, threshold and input length."""
        ckpt, _ = locate_classifier_checkpoint(self.checkpoint)
        sha = cached_file_sha256(ckpt)[:16] if ckpt is not None else "missing"
        return (f"ctrate-classifier|ckpt:sha256:{sha}|enc:{hf.identity(self.encoder)}"
                f"|sigmoid>={CLASSIFIER_THRESHOLD}|maxlen:{CLASSIFIER_MAX_LENGTH}")


# =========================================================================== LLM

LLM_PROMPT_VERSION = 1
LLM_PARSER_VERSION = 1
LLM_MAX_WORDS = 600  # CT reports are long; the findings section alone runs to 300 words
LATERALITIES = ("left", "right", "bilateral")

LLM_SYSTEM = ("You are an expert radiologist. You read chest CT reports and record which"
              " abnormalities they describe, exactly as written.")


def build_messages(report: str, *, structured: bool = False) -> list[Message]:
    """The chat messages asking for the 18 labels (and structured findings) of one report."""
    names = "\n".join(f"- {n}" for n in CTRATE_LABELS)
    shape = "{" + ", ".join(f'"{n}": "present|absent|uncertain"' for n in CTRATE_LABELS[:2])
    shape += ", ...}"
    user = (
        "Read the chest CT report below. For each of these 18 abnormalities decide whether the"
        " report states it as present, absent or uncertain (hedged: possible, suspected,"
        " cannot be excluded). An abnormality the report does not mention is absent.\n"
        f"{names}\n\n"
    )
    if structured:
        user += (
            "Answer with one JSON object only, with two keys: \"labels\", an object whose keys"
            " are exactly the 18 names above and whose values are \"present\", \"absent\" or"
            " \"uncertain\"; and \"findings\", a list with one object per present or uncertain"
            " abnormality: {\"label\": one of the 18 names, \"type\": its subtype as written"
            " (e.g. \"centrilobular\", \"ground-glass\", \"subsegmental\") or null,"
            " \"location\": the lobe, segment or structure or null, \"laterality\": \"left\","
            " \"right\", \"bilateral\" or null}.\n\n"
        )
    else:
        user += ("Answer with one JSON object only, whose keys are exactly the 18 names above"
                 f" and whose values are \"present\", \"absent\" or \"uncertain\": {shape}\n\n")
    user += f"Report: {report}\nAnswer:"
    return [{"role": "system", "content": LLM_SYSTEM}, {"role": "user", "content": user}]


LLM_PROMPT_HASH = prompt_hash(build_messages("{report}"))
LLM_STRUCTURED_PROMPT_HASH = prompt_hash(build_messages("{report}", structured=True))



def _norm_key(key: Any) -> str:
    return re.sub(r"[^a-z0-9]+", " ", str(key).lower()).strip()


_LABEL_KEYS = {_norm_key(n): n for n in CTRATE_LABELS}
_VALUE_WORDS = {
    "present": POSITIVE, "positive": POSITIVE, "yes": POSITIVE, "true": POSITIVE,
    "absent": NEGATIVE, "negative": NEGATIVE, "no": NEGATIVE, "false": NEGATIVE,
    "not mentioned": NEGATIVE, "not present": NEGATIVE, "none": NEGATIVE,
    "uncertain": UNCERTAIN, "possible": UNCERTAIN, "equivocal": UNCERTAIN,
    "indeterminate": UNCERTAIN, "suspected": UNCERTAIN,
}




def _label_value(value: Any) -> tuple[int | None, str]:
    """1/0/-1 from an answer's value, or ``(None, why)``."""
    if isinstance(value, dict):
        for k in ("value", "status", "label", "present"):
            if k in value:
                return _label_value(value[k])
        return None, "an object without a value"
    if isinstance(value, bool):
        return (POSITIVE if value else NEGATIVE), ""
    if isinstance(value, int):
        if value in (POSITIVE, NEGATIVE, UNCERTAIN):
            return value, ""
        return None, f"not a label value ({value!r})"
    if isinstance(value, float):
        if math.isfinite(value) and value in (1.0, 0.0, -1.0):
            return int(value), ""
        return None, f"not a label value ({value!r})"
    if isinstance(value, str):
        if value.strip() in ("1", "0", "-1"):  # before _norm_key, which drops the minus
            return int(value.strip()), ""
        s = _norm_key(value)
        if s in _VALUE_WORDS:
            return _VALUE_WORDS[s], ""
        return None, f"not a label value ({value[:30]!r})"
    return None, f"not a label value ({type(value).__name__})"


def _text_or_none(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "null",
                                                                              "none", "n/a")):
        return None
    return str(value).strip() if isinstance(value, (str, int, float)) else None


def _read_findings(raw: Any, out: Reading) -> None:
    if raw is None:
        return
    if not isinstance(raw, list):
        out.notes.append(f"findings is {type(raw).__name__}, not a list (ignored)")
        return
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            out.notes.append(f"finding {i} is not an object (ignored)")
            continue
        name = _LABEL_KEYS.get(_norm_key(item.get("label", "")))
        if name is None:
            out.notes.append(f"finding {i} names no known label ({item.get('label')!r})")
            continue
        side = _text_or_none(item.get("laterality"))
        if side is not None and side.lower() not in LATERALITIES:
            out.notes.append(f"finding {i}: laterality {side!r} is not left/right/bilateral")
            side = None
        out.findings.append({"label": name, "type": _text_or_none(item.get("type")),
                             "location": _text_or_none(item.get("location")),
                             "laterality": side.lower() if side else None})


def _read_object(obj: dict[str, Any]) -> Reading | None:
    """Labels from one decoded object; ``None`` when it holds no label key at all."""
    section: Any = obj
    for key in ("labels", "abnormalities", "answer", "result"):
        if isinstance(obj.get(key), dict):
            section = obj[key]
            break
    values: dict[str, CtLabel] = {}
    out = Reading(labels=())
    for key, value in section.items():
        name = _LABEL_KEYS.get(_norm_key(key))
        if name is None:
            if section is obj and key == "findings":
                continue
            out.notes.append(f"ignored key: {key}")
            continue
        if name in values:
            out.notes.append(f"duplicate: {name} (first kept)")
            continue
        v, why = _label_value(value)
        if v is None:
            out.flags.append(f"unreadable: {name}: {why}")
            values[name] = math.nan
        else:
            values[name] = v
    if not values:
        return None
    for name in CTRATE_LABELS:
        if name not in values:
            out.flags.append(f"missing: {name}")
    out.labels = tuple(values.get(n, math.nan) for n in CTRATE_LABELS)
    _read_findings(obj.get("findings"), out)
    return out


def parse_labels(text: Any) -> Reading:
    """Read the 18 labels (and structured findings) from an LLM answer; never raises.

    Reads JSON in code fences or prose, with trailing commas, single quotes or Python
    literals, a ``labels`` wrapper or a flat object, keys in any case and spacing, values as
    words (``present``/``absent``/``uncertain`` and synonyms), booleans or 1/0/-1. A label that
    is missing or unreadable is ``nan`` and named in ``flags``: nothing is taken as absent
    without the answer saying so.
    """
    nan_labels = tuple(math.nan for _ in CTRATE_LABELS)
    if not isinstance(text, str) or not text.strip():
        return Reading(nan_labels, flags=["empty answer"])
    for blob in json_objects(text):
        obj = loads_lenient(blob)
        if isinstance(obj, dict):
            got = _read_object(obj)
            if got is not None:
                return got
    return Reading(nan_labels, flags=["no JSON object with CT-RATE labels found"])


class CtRateLLMLabeler(LLMMetric):
    """The ``llm`` labeler: 18 labels (and optional structured findings) from a chat model.

    Not a registered family: ``crg`` creates it with its LLM options. Options are those of the
    LLM families (``model``, ``revision``, ``backend``, ``base_url`` ...), plus ``structured``
    and ``max_words``.
    """

    spec = MetricSpec(
        name="crg_ctrate_llm",
        outputs=(OutputSpec("crg_ctrate_llm_read", True, "fraction of labels read"),),
        needs_model=True,
        citation="CT-RATE labels (Hamamci et al. 2024) read by an LLM",
    )
    model_label: ClassVar[str] = "CT-RATE LLM labeler"
    defaults: ClassVar[dict[str, Any]] = {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "revision": None,
        **BACKEND_DEFAULTS,
        "max_new_tokens": 512,
        "batch_size": 8,
        "dtype": "auto",
        "max_words": LLM_MAX_WORDS,
        "structured": False,
    }

    def prompts(self, reports: Sequence[str]) -> list[list[Message]]:
        """The chat messages of each report."""
        n = int(self.options["max_words"])
        return [build_messages(truncate_words(r, n), structured=bool(self.options["structured"]))
                for r in reports]

    def read(self, reports: Sequence[str]) -> list[Reading]:
        """:class:`Reading` of each report (identical texts are asked once)."""
        uniq = list(dict.fromkeys(reports))
        tokens = int(self.options["max_new_tokens"])
        answers = self.chat(self.prompts(uniq), max_new_tokens=tokens)
        got = {t: parse_labels(a) for t, a in zip(uniq, answers, strict=True)}
        return [got[t] for t in reports]

    def _score(self, *, references: list[str], candidates: list[str], images: Any) -> MetricResult:
        # Only a labeler, but a BaseMetric must score: the fraction of labels read per pair.
        readings = self.read([*references, *candidates])
        n = len(references)
        values = []
        for r, c in zip(readings[:n], readings[n:], strict=True):
            read = sum(not (isinstance(v, float) and math.isnan(v)) for v in (*r.labels,
                                                                              *c.labels))
            values.append(read / (2 * len(CTRATE_LABELS)))
        return MetricResult({"crg_ctrate_llm_read": values})

    def signature(self) -> str:
        o = self.options
        structured = bool(o["structured"])
        ph = LLM_STRUCTURED_PROMPT_HASH if structured else LLM_PROMPT_HASH
        return (f"ctrate-llm|{self.backend_signature()}|greedy|max_new:{o['max_new_tokens']}"
                f"|words:{o['max_words']}|structured:{int(structured)}"
                f"|prompt:v{LLM_PROMPT_VERSION}-{ph}|parser:v{LLM_PARSER_VERSION}")


class CtRateRules:
    """The ``rules`` labeler behind the same interface as the other two."""

    def availability(self) -> str | None:
        """Always available (no download)."""
        return None

    def load(self, device: str = "cpu") -> None:
        """Compile the rules (once per process)."""
        rule_labeler()

    def read(self, reports: Sequence[str]) -> list[Reading]:
        """:class:`Reading` of each report."""
        return rule_labeler().read(reports)

    def signature(self) -> str:
        """The rules' name and version."""
        return f"ctrate-rules|{CtRateRuleLabeler.version}"


#: Options of ``crg`` that configure a CT-RATE labeler, with their defaults.
LABELER_OPTIONS: dict[str, Any] = {
    "model": None,
    "revision": None,
    "checkpoint": None,
    "structured": False,
    **BACKEND_DEFAULTS,
    "max_new_tokens": 512,
    "batch_size": None,
    "dtype": "auto",
    "max_words": LLM_MAX_WORDS,
}


def make_labeler(kind: str, options: dict[str, Any], resources: Resources) -> Any:
    """The CT-RATE labeler ``kind`` configured from ``crg``'s options.

    Args:
        kind: ``rules`` | ``classifier`` | ``llm``.
        options: ``crg``'s options (the keys of :data:`LABELER_OPTIONS` are read).
        resources: Where loaded models are shared.

    Raises:
        ValueError: for an unknown kind or an option that does not apply to it.
    """
    set_opts = {k for k, v in LABELER_OPTIONS.items() if options.get(k, v) != v}
    if not isinstance(options.get("structured", False), bool):
        raise ValueError(f"crg: structured must be true or false, got {options['structured']!r}")
    if kind == "rules":
        if set_opts:
            raise ValueError(f"crg: option(s) {', '.join(sorted(set_opts))} do not apply to"
                             " labeler=rules")
        return CtRateRules()
    if kind == "classifier":
        stray = set_opts - {"model", "revision", "checkpoint", "batch_size"}
        if stray:
            raise ValueError(f"crg: option(s) {', '.join(sorted(stray))} do not apply to"
                             " labeler=classifier")
        return CtRateClassifier(checkpoint=options.get("checkpoint"),
                                model=options.get("model"), revision=options.get("revision"),
                                batch_size=int(options.get("batch_size") or 32),
                                resources=resources)
    if kind == "llm":
        if "checkpoint" in set_opts:
            raise ValueError("crg: option checkpoint does not apply to labeler=llm")
        llm_opts = {k: options[k] for k in LABELER_OPTIONS
                    if k in options and k != "checkpoint" and options[k] is not None}
        llm_opts.setdefault("model", CtRateLLMLabeler.defaults["model"])
        labeler = CtRateLLMLabeler(**llm_opts)
        labeler.use_resources(resources)
        return labeler
    raise ValueError(f"crg: unknown CT-RATE labeler {kind!r} (use {', '.join(LABELERS)})")
