"""RaTEScore (Zhao et al., EMNLP 2024): entity-aware radiology report similarity.

Pipeline, as the reference code computes it:

1. each report is split into sentences; a sentence with no word or fewer than 3 characters
   is dropped;
2. a token classifier (default ``Angelakeke/RaTE-NER-Deberta``, DeBERTa-v3, BIO labels over
   ABNORMALITY, NON-ABNORMALITY, DISEASE, NON-DISEASE, ANATOMY) tags every sentence; the
   argmax labels are turned into entity spans by the reference's BIO rules (reproduced with
   their quirks in :func:`bio_spans`) and each span's text is the tokenizer's
   ``convert_tokens_to_string`` of its tokens;
3. every entity string is embedded by an encoder (default ``FremyCompany/BioLORD-2023-C``) as
   the last hidden state of its first token (``[CLS]``/``<s>``; the reference's pooling, not
   the sentence-transformers mean), input cut to 30 tokens;
4. for each entity of one side, the most cosine-similar entity of the other side is found;
   its similarity is weighted by the affinity matrix entry of (this type, matched type) and,
   when the two types are a negation pair (DISEASE vs NON-DISEASE ...), multiplied by the
   matrix's ``neg_weight``; the side's score is sum(sim * w * neg) / sum(w) (0 when the
   weights sum to 0);
5. RaTEScore = 2 * S_ref * S_cand / (S_ref + S_cand) with S_ref the reference's entities
   matched into the candidate and S_cand the converse; 0 when S_ref + S_cand == 0; 0.5 when
   either report has no entity.

Reference: the ``RaTEScore`` package 0.6.0 on PyPI (``RaTEScore/scorer.py``, ``score.py``,
``utils.py``; github.com/Angelakeke/RaTEScore, MIT), whose code RadEval 2.2 vendors unchanged
in jbdel/RadEval@e0a39097e7788b6d0a229432add96c63ea60d62f ``radeval/metrics/RaTEScore/``.
The affinity matrices and the negation pairs below are that code's constants.

Sentence splitting is the one step not reproduced by default: the reference uses medspaCy's
PyRuSH segmenter, which needs spaCy < 3.8 and numpy < 2 on Python 3.11, so it cannot be a
dependency here. ``sentence_splitter="medspacy"`` uses it exactly when it is installed;
the default ``"simple"`` is the rule splitter :func:`split_sentences` (documented below and in
the card), recorded in the signature. One deliberate difference from the reference: a report
with no sentence kept (empty, or under 3 characters) has no entity and scores 0.5, where the
reference silently drops it and misaligns the pairs that follow.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
)

logger = logging.getLogger(__name__)

IMPL_VERSION = "1"
DEFAULT_NER_MODEL = "Angelakeke/RaTE-NER-Deberta"
DEFAULT_EMBED_MODEL = "FremyCompany/BioLORD-2023-C"
#: No commit of either hub model could be verified offline, so none is pinned here: give
#: ``ratescore.ner_revision=<sha>`` / ``ratescore.embed_revision=<sha>`` or local folders.
DEFAULT_NER_REVISION: str | None = None
DEFAULT_EMBED_REVISION: str | None = None

ENTITY_TYPES: tuple[str, ...] = (
    "ABNORMALITY",
    "NON-ABNORMALITY",
    "DISEASE",
    "NON-DISEASE",
    "ANATOMY",
)
#: Score of a pair where either report has no entity (reference: scorer.py).
EMPTY_SCORE = 0.5
#: Token limits of the reference: NER input (score.py run_ner), entity input (process_embedding).
NER_MAX_LENGTH = 512
ENTITY_MAX_LENGTH = 30
#: Sentences shorter than this (characters, after strip) are dropped (utils.sentence_split).
MIN_SENTENCE_CHARS = 3
#: The token strings the reference's BIO decoder skips (utils.post_process).
SKIPPED_TOKENS = ("[CLS]", "[SEP]")

# Affinity matrices of RaTEScore 0.6.0 (RaTEScore/scorer.py DEFAULT_MATRIX_LONG / _SHORT,
# identical in jbdel/RadEval@e0a39097 radeval/metrics/RaTEScore/scorer.py). Key "a_b" is the
# weight of an entity of type a whose best match has type b; "neg_weight" multiplies a match
# across a negation pair. "long" is the reference's default (tuned on paragraph-level ratings).
AFFINITY_LONG: dict[str, float] = {
    "abnormality_abnormality": 0.4276119164393705,
    "abnormality_anatomy": 0.6240929990607657,
    "abnormality_disease": 0.0034478181112993847,
    "abnormality_non-abnormality": 0.5431049700217344,
    "abnormality_non-disease": 0.27005425386213877,
    "anatomy_abnormality": 0.7487824274337533,
    "anatomy_anatomy": 0.2856134859160784,
    "anatomy_disease": 0.4592143222158069,
    "anatomy_non-abnormality": 0.02097055139911715,
    "anatomy_non-disease": 0.00013736314126696204,
    "disease_abnormality": 0.8396510075734789,
    "disease_anatomy": 0.9950209388542061,
    "disease_disease": 0.8460555030578727,
    "disease_non-abnormality": 0.9820689020512646,
    "disease_non-disease": 0.3789136708096537,
    "non-abnormality_abnormality": 0.16546764653692908,
    "non-abnormality_anatomy": 0.018670610691852826,
    "non-abnormality_disease": 0.719397354576018,
    "non-abnormality_non-abnormality": 0.0009357166071730684,
    "non-abnormality_non-disease": 0.0927333564267591,
    "non-disease_abnormality": 0.7759420231214385,
    "non-disease_anatomy": 0.1839139293714062,
    "non-disease_disease": 0.10073046076318157,
    "non-disease_non-abnormality": 0.03860183811876373,
    "non-disease_non-disease": 0.34065681486566446,
    "neg_weight": 0.8716553966489615,
}
AFFINITY_SHORT: dict[str, float] = {
    "abnormality_abnormality": 0.4070293318365468,
    "abnormality_anatomy": 0.6952639610605605,
    "abnormality_disease": 0.28342529466226446,
    "abnormality_non-abnormality": 0.9479148658006686,
    "abnormality_non-disease": 0.23875064111146294,
    "anatomy_abnormality": 0.5829759950441763,
    "anatomy_anatomy": 0.7709590751917746,
    "anatomy_disease": 0.0006059634829551632,
    "anatomy_non-abnormality": 0.794672584951181,
    "anatomy_non-disease": 0.27982942400798977,
    "disease_abnormality": 0.8840397619834857,
    "disease_anatomy": 0.9637659445696822,
    "disease_disease": 0.19018958438059513,
    "disease_non-abnormality": 0.6962283914800402,
    "disease_non-disease": 0.943727057946997,
    "non-abnormality_abnormality": 0.1712744286898638,
    "non-abnormality_anatomy": 0.4485149671497294,
    "non-abnormality_disease": 0.00045065329822896076,
    "non-abnormality_non-abnormality": 0.0007887930317199857,
    "non-abnormality_non-disease": 0.8555432840895761,
    "non-disease_abnormality": 0.9555801066212176,
    "non-disease_anatomy": 0.13122106162635216,
    "non-disease_disease": 0.6072996585919443,
    "non-disease_non-abnormality": 0.05650711141169969,
    "non-disease_non-disease": 0.3214769399791204,
    "neg_weight": 0.3611577852354489,
}
AFFINITY_PRESETS: dict[str, dict[str, float]] = {"long": AFFINITY_LONG, "short": AFFINITY_SHORT}

#: (type of the entity, type of its best match) pairs that take ``neg_weight``
#: (RaTEScore/utils.py compute ``neg_class``).
NEGATION_PAIRS: frozenset[tuple[str, str]] = frozenset(
    {
        ("NON-DISEASE", "DISEASE"),
        ("NON-ABNORMALITY", "ABNORMALITY"),
        ("DISEASE", "NON-DISEASE"),
        ("ABNORMALITY", "NON-ABNORMALITY"),
        ("NON-DISEASE", "ABNORMALITY"),
        ("NON-ABNORMALITY", "DISEASE"),
        ("DISEASE", "NON-ABNORMALITY"),
        ("ABNORMALITY", "NON-DISEASE"),
    }
)

Entity = tuple[str, str]  # (text, type)


# --------------------------------------------------------------------------- affinity


@dataclass(frozen=True)
class Affinity:
    """A type-affinity table.

    Attributes:
        weights: ``(type of entity, type of its match) -> weight`` over the 25 type pairs.
        neg_weight: Factor of a match across a negation pair.
        label: ``long`` | ``short`` | ``file:<sha256 prefix>`` for the signature.
    """

    weights: Mapping[tuple[str, str], float]
    neg_weight: float
    label: str


def affinity_from_mapping(raw: Mapping[str, Any], *, label: str, where: str) -> Affinity:
    """Build an :class:`Affinity` from the reference's JSON layout (``"a_b": w``, ``neg_weight``).

    Keys are split on ``_`` and upper-cased as the reference does; every one of the 25 type
    pairs and ``neg_weight`` must be present with a finite number.

    Raises:
        ValueError: naming ``where`` and the missing or bad key.
    """
    weights: dict[tuple[str, str], float] = {}
    neg: float | None = None
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise ValueError(f"{where}: affinity '{key}' is not a number ({value!r})")
        if key == "neg_weight":
            neg = float(value)
            continue
        parts = key.split("_")
        if len(parts) != 2 or any(p.upper() not in ENTITY_TYPES for p in parts):
            raise ValueError(
                f"{where}: affinity key '{key}' is not '<type>_<type>' over"
                f" {', '.join(t.lower() for t in ENTITY_TYPES)} (or 'neg_weight')"
            )
        weights[(parts[0].upper(), parts[1].upper())] = float(value)
    missing = [f"{a.lower()}_{b.lower()}" for a in ENTITY_TYPES for b in ENTITY_TYPES
               if (a, b) not in weights]
    if neg is None:
        missing.append("neg_weight")
    if missing:
        raise ValueError(f"{where}: affinity misses {', '.join(missing)}")
    assert neg is not None
    return Affinity(weights, neg, label)


def load_affinity(option: str) -> Affinity:
    """The affinity of option ``long`` | ``short`` | a JSON file in the reference's layout.

    Raises:
        ValueError: for an unreadable or incomplete file.
    """
    name = str(option).strip()
    preset = AFFINITY_PRESETS.get(name.lower())
    if preset is not None:
        return affinity_from_mapping(preset, label=name.lower(), where=f"affinity '{name}'")
    path = Path(name).expanduser()
    if not path.is_file():
        raise ValueError(
            f"ratescore: affinity must be 'long', 'short' or a JSON file; {path} does not exist"
        )
    data = path.read_bytes()
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"ratescore: affinity file {path} is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"ratescore: affinity file {path} must hold a JSON object")
    digest = hashlib.sha256(data).hexdigest()[:16]
    return affinity_from_mapping(raw, label=f"file:{digest}", where=f"affinity file {path}")


# --------------------------------------------------------------------------- sentences

# Words after which a period does not end a sentence: titles and a few clinical
# abbreviations. PyRuSH (the reference's splitter) also keeps "R. upper" and "1. Stable" whole.
_ABBREVIATIONS = frozenset({"dr", "mr", "mrs", "ms", "prof", "approx", "e.g", "fig", "st"})
_PERIOD_BREAK = re.compile(r"\.[\"')\]]*(?=\s+\S)")
_WORD = re.compile(r"\S+$")


def split_sentences(text: str) -> list[str]:
    """Split a report the ``simple`` way and keep what the reference keeps.

    Rules (close to PyRuSH on ordinary reports): a line break always ends a sentence; a
    period (plus closing quotes or brackets) followed by whitespace ends one, except after a
    single letter (``R.``), a bare number (list numbering ``2.``) or a word of
    :data:`_ABBREVIATIONS`; ``!`` and ``?`` do not end a sentence (PyRuSH does not split on
    them either). Pieces are stripped and kept when they hold a word and at least
    :data:`MIN_SENTENCE_CHARS` characters.
    """
    out: list[str] = []
    for line in re.split(r"[\r\n]+", text):
        start = 0
        for m in _PERIOD_BREAK.finditer(line):
            before = _WORD.search(line, start, m.start())
            word = before.group(0).lower().lstrip("(\"'[") if before else ""
            if len(word) == 1 or word.isdigit() or word in _ABBREVIATIONS:
                continue
            out.append(line[start : m.end()])
            start = m.end()
        out.append(line[start:])
    return [s for s in (p.strip() for p in out) if keep_sentence(s)]


def keep_sentence(sentence: str) -> bool:
    """The reference's filter on a stripped sentence: a word and >= 3 characters."""
    return bool(sentence.split()) and len(sentence) >= MIN_SENTENCE_CHARS


def medspacy_splitter() -> Callable[[str], list[str]]:
    """The reference's splitter: medspaCy with PyRuSH, then :func:`keep_sentence`.

    Raises:
        MetricUnavailable: when medspaCy is not installed.
    """
    try:
        import medspacy
    except ImportError as exc:
        raise MetricUnavailable(
            "ratescore sentence_splitter=medspacy needs medspacy (pip install"
            " medspacy; on Python 3.11 it requires spaCy < 3.8 and numpy < 2)"
        ) from exc
    nlp = medspacy.load(medspacy_enable=["medspacy_pyrush"])

    def split(text: str) -> list[str]:
        return [s for s in (str(x).strip() for x in nlp(text).sents) if keep_sentence(s)]

    return split


# --------------------------------------------------------------------------- BIO decoding


def bio_spans(tokens: Sequence[str], labels: Sequence[str]) -> list[tuple[int, int, str]]:
    """Entity spans ``(first, last, type)`` (token indices, inclusive) from BIO labels.

    Reproduces the reference's decoder (RaTEScore/utils.py ``post_process``) with its quirks,
    which change which entities exist:

    * ``[CLS]``/``[SEP]`` tokens are skipped by their string; a tag's successor is read from
      ``labels`` (so the label predicted on ``[SEP]`` can close or extend an entity);
    * ``B`` followed by ``I`` opens an entity; ``B`` followed by ``B`` or ``O`` makes a one-token
      entity; ``I`` followed by ``B`` or ``O`` closes the open entity (an ``I`` with nothing
      open closes nothing, and before a ``B`` it reopens at itself with its own type);
      ``I`` followed by ``I`` continues;
    * an entity still open at the end is kept up to the token before last only if no entity
      was closed earlier in the sentence (the reference tests ``end is None``).

    Args:
        tokens: Token strings of one sentence with special tokens, no padding.
        labels: Predicted label per position (at least ``len(tokens)``).
    """
    spans: list[tuple[int, int, str]] = []
    start: int | None = None
    end: int | None = None
    etype: str | None = None
    last = len(labels) - 1
    for i, (token, label) in enumerate(zip(tokens, labels[: len(tokens)], strict=False)):
        if token in SKIPPED_TOKENS or label == "O" or i >= last:
            continue
        nxt = labels[i + 1]
        if label.startswith("B-"):
            if nxt.startswith("I-"):
                start, etype = i, label[2:]
            elif nxt.startswith("B-"):
                end = i
                spans.append((i, i, label[2:]))
                start, etype = i, label[2:]
            elif nxt.startswith("O"):
                spans.append((i, i, label[2:]))
                start = end = etype = None
        elif label.startswith("I-"):
            if nxt.startswith("B-"):
                end = i
                if start is not None:
                    spans.append((start, i, etype or ""))
                start, etype = i, label[2:]
            elif nxt.startswith("O"):
                end = i
                if start is not None:
                    spans.append((start, i, etype or ""))
                start = end = etype = None
    if start is not None and end is None:
        spans.append((start, len(tokens) - 2, etype or ""))
    return spans


# --------------------------------------------------------------------------- matching


def directional_score(
    query: Any,
    query_types: Sequence[str],
    target: Any,
    target_types: Sequence[str],
    affinity: Affinity,
) -> float:
    """Match each query entity to its most similar target entity (reference ``compute``).

    score = sum_i cos_i * w(t_i, t_match) * n_i / sum_i w(t_i, t_match), with ``n_i`` the
    affinity's ``neg_weight`` for a negation pair and 1 otherwise; 0 when the weights sum to
    0. Cosines are computed in float32 with torch exactly as the reference does (so ties
    between equally similar targets are broken the same way).

    Args:
        query: ``(n, d)`` float tensor of the query side's entity vectors (n >= 1).
        query_types: Type of each query entity.
        target: ``(m, d)`` float tensor of the other side (m >= 1).
        target_types: Type of each target entity.
        affinity: The type-affinity table.
    """
    import torch
    import torch.nn.functional as F  # noqa: N812 - the usual alias

    q = F.normalize(query, p=2, dim=1)
    t = F.normalize(target, p=2, dim=1)
    num = 0.0
    den = 0.0
    for row, qt in zip(q, query_types, strict=True):
        # One matrix-vector product and topk per entity, as the reference: which of several
        # equally similar targets wins is topk's choice (not always the first), and the type
        # of the winner changes the weight.
        value, index = torch.topk(torch.matmul(t, row), 1, largest=True)
        sim = float(value[0])
        pair = (qt, target_types[int(index[0])])
        w = affinity.weights[pair]
        num += sim * w * (affinity.neg_weight if pair in NEGATION_PAIRS else 1)
        den += w
    return num / den if den != 0 else 0.0


def combine(ref_to_cand: float, cand_to_ref: float) -> float:
    """Harmonic combination of the two directions; 0 when they sum to 0 (reference)."""
    total = ref_to_cand + cand_to_ref
    return 0.0 if total == 0 else 2 * ref_to_cand * cand_to_ref / total


# --------------------------------------------------------------------------- metric


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def check_labels(id2label: Mapping[Any, str], where: str) -> str | None:
    """Why a token classifier's labels are not RaTE-NER's BIO scheme, or ``None``."""
    bad = [
        str(v) for v in id2label.values()
        if v != "O" and not (str(v)[:2] in ("B-", "I-") and str(v)[2:] in ENTITY_TYPES)
    ]
    if not id2label or bad:
        return (
            f"ratescore {where} has labels {sorted(map(str, id2label.values()))}"
            f" that are not 'O' or B-/I- of {', '.join(ENTITY_TYPES)}"
            f" (bad: {', '.join(bad[:5]) or 'none'})"
        )
    return None


@dataclass(frozen=True)
class _Plan:
    ner: hf.ModelRef
    ner_path: Path | None
    embed: hf.ModelRef
    embed_path: Path | None


class RaTEScore(BaseMetric):
    """RaTEScore per pair (see the module docstring for the computation).

    Options:
        ner_model: Hub id or folder of the token classifier (``Angelakeke/RaTE-NER-Deberta``).
        ner_revision: Hub commit for ``ner_model``.
        embed_model: Hub id or folder of the entity encoder (``FremyCompany/BioLORD-2023-C``).
        embed_revision: Hub commit for ``embed_model``.
        affinity: ``long`` (the reference's default) | ``short`` | JSON file in its layout.
        sentence_splitter: ``simple`` (ours, no dependency) | ``medspacy`` (the reference's).
        batch_size: Sentences per NER batch (length-sorted).
        embed_batch_size: Entity strings per encoder batch (length-sorted).
        device: ``auto`` | ``cpu`` | ``cuda[:N]``; overrides the device given to ``load``.
    """

    spec = MetricSpec(
        name="ratescore",
        outputs=(
            OutputSpec(
                "ratescore",
                True,
                "RaTEScore: type-weighted entity matching, harmonic mean of both directions",
            ),
        ),
        needs_model=True,
        citation="Zhao et al., RaTEScore, EMNLP 2024",
        corpus_outputs=("ratescore_mean",),
    )
    defaults: ClassVar[dict[str, Any]] = {
        "ner_model": DEFAULT_NER_MODEL,
        "ner_revision": DEFAULT_NER_REVISION,
        "embed_model": DEFAULT_EMBED_MODEL,
        "embed_revision": DEFAULT_EMBED_REVISION,
        "affinity": "long",
        "sentence_splitter": "simple",
        "batch_size": 32,
        "embed_batch_size": 256,
        "device": None,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        for key in ("batch_size", "embed_batch_size"):
            if int(self.options[key]) < 1:
                raise ValueError(f"ratescore: {key} must be >= 1 (got {self.options[key]!r})")
        splitter = str(self.options["sentence_splitter"]).strip().lower()
        if splitter not in ("simple", "medspacy"):
            raise ValueError(
                f"ratescore: sentence_splitter must be 'simple' or 'medspacy' (got {splitter!r})"
            )
        self._splitter_name = splitter
        self.affinity = load_affinity(str(self.options["affinity"]))
        self._plan_cache: tuple[_Plan | None, str | None] | None = None
        self._split: Callable[[str], list[str]] = split_sentences
        self._ner: Any = None
        self._ner_tok: Any = None
        self._enc: Any = None
        self._enc_tok: Any = None
        self._id2label: dict[int, str] = {}

    # ------------------------------------------------------------------ plan

    def _plan(self) -> tuple[_Plan | None, str | None]:
        if self._plan_cache is not None:
            return self._plan_cache
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            self._plan_cache = (
                None, f"ratescore needs {' and '.join(missing)} (pip install)")
            return self._plan_cache
        if self._splitter_name == "medspacy" and importlib.util.find_spec("medspacy") is None:
            self._plan_cache = (
                None,
                "ratescore sentence_splitter=medspacy needs medspacy (pip install"
                " medspacy; on Python 3.11 it requires spaCy < 3.8 and numpy < 2)",
            )
            return self._plan_cache
        o = self.options
        ner = hf.ModelRef(str(o["ner_model"]), o["ner_revision"])
        embed = hf.ModelRef(str(o["embed_model"]), o["embed_revision"])
        ner_path, reason = hf.resolve_or_reason(ner)
        if reason is not None:
            self._plan_cache = (None, f"ratescore NER model: {reason}")
            return self._plan_cache
        embed_path, reason = hf.resolve_or_reason(embed)
        if reason is not None:
            self._plan_cache = (None, f"ratescore entity encoder: {reason}")
            return self._plan_cache
        if ner_path is not None:
            reason = _labels_reason(ner_path)
            if reason is not None:
                self._plan_cache = (None, reason)
                return self._plan_cache
        self._plan_cache = (_Plan(ner, ner_path, embed, embed_path), None)
        return self._plan_cache

    def availability(self) -> str | None:
        plan, reason = self._plan()
        return reason if plan is None else None

    def signature(self) -> str:
        plan, reason = self._plan()
        if plan is None:
            raise MetricUnavailable(reason or "ratescore unavailable")

        def ident(ref: hf.ModelRef, path: Path | None) -> str:
            label = Path(ref.model).name if ref.looks_like_path else ref.model
            tag = f"sha256:{hf.fingerprint(path)[:16]}" if path is not None else (
                f"rev:{ref.revision}")
            return f"{label}@{tag}"

        if self._splitter_name == "medspacy":
            split = f"medspacy-{_version('medspacy')}+pyrush-{_version('PyRuSH')}"
        else:
            split = "simple-v1"
        return (
            f"ratescore|ner:{ident(plan.ner, plan.ner_path)}|"
            f"emb:{ident(plan.embed, plan.embed_path)}|pool:first-token|"
            f"affinity:{self.affinity.label}|split:{split}|version:{IMPL_VERSION}"
            f"(transformers={_version('transformers')})"
        )

    # ------------------------------------------------------------------ loading

    def load(self, device: str = "cpu") -> None:
        chosen = self.options["device"] if self.options["device"] is not None else device
        super().load(hf.pick_device(chosen))

    def _load(self) -> None:
        plan, reason = self._plan()
        if plan is None:
            raise MetricUnavailable(reason or "ratescore unavailable")
        from transformers import AutoModel, AutoModelForTokenClassification

        ner_path = plan.ner_path if plan.ner_path is not None else hf.resolve(plan.ner)
        reason = _labels_reason(ner_path)
        if reason is not None:
            raise MetricUnavailable(reason)
        embed_path = plan.embed_path if plan.embed_path is not None else hf.resolve(plan.embed)
        self._ner_tok, self._ner = self.resources.get(
            ("ratescore-ner", str(ner_path), self.device),
            lambda: (
                hf.load_tokenizer(ner_path),
                hf.load_model(
                    ner_path, device=self.device, model_class=AutoModelForTokenClassification
                ),
            ),
        )
        self._enc_tok, self._enc = self.resources.get(
            ("ratescore-encoder", str(embed_path), self.device),
            lambda: (
                hf.load_tokenizer(embed_path),
                hf.load_model(embed_path, device=self.device, model_class=AutoModel),
            ),
        )
        # From now on the signature names the files actually loaded (fingerprints), also
        # when they were downloaded at load time.
        self._plan_cache = (_Plan(plan.ner, Path(ner_path), plan.embed, Path(embed_path)), None)
        self._id2label = {int(k): str(v) for k, v in self._ner.config.id2label.items()}
        if self._splitter_name == "medspacy":
            self._split = self.resources.get(("ratescore-medspacy",), medspacy_splitter)
        else:
            self._split = split_sentences

    # ------------------------------------------------------------------ stages

    def sentences(self, text: str) -> list[str]:
        """The kept sentences of one report with the configured splitter."""
        return self._split(text)

    def entities_of_sentences(self, sentences: Sequence[str]) -> list[list[Entity]]:
        """Entities ``(text, type)`` of each sentence, in order; each distinct sentence once.

        Sentences are tagged in length-sorted batches of ``batch_size`` (right padding); the
        labels of a sentence are read over its own tokens only.
        """
        import torch

        if not self._loaded:
            self.load(self.device)
        uniq = list(dict.fromkeys(sentences))
        if not uniq:
            return [[] for _ in sentences]
        tok = self._ner_tok
        ids = tok(uniq, max_length=NER_MAX_LENGTH, truncation=True)["input_ids"]
        found: dict[str, list[Entity]] = {}
        bs = int(self.options["batch_size"])
        with torch.inference_mode():
            for idx in hf.length_sorted_batches([len(x) for x in ids], bs):
                batch = [uniq[i] for i in idx]
                enc = tok(batch, max_length=NER_MAX_LENGTH, padding=True, truncation=True,
                          return_tensors="pt").to(self.device)
                pred = self._ner(**enc).logits.argmax(dim=2).cpu().tolist()
                for row, i in enumerate(idx):
                    n = len(ids[i])
                    tokens = tok.convert_ids_to_tokens(ids[i])
                    labels = [self._id2label[k] for k in pred[row][:n]]
                    found[uniq[i]] = [
                        (tok.convert_tokens_to_string(tokens[a : b + 1]), t)
                        for a, b, t in bio_spans(tokens, labels)
                    ]
        return [found[s] for s in sentences]

    def report_entities(self, texts: Sequence[str]) -> list[list[Entity]]:
        """Entities of each report: its sentences' entities, concatenated in order."""
        split = [self.sentences(t) for t in texts]
        flat = [s for sents in split for s in sents]
        per_sentence = iter(self.entities_of_sentences(flat))
        out: list[list[Entity]] = []
        for sents in split:
            ents: list[Entity] = []
            for _ in sents:
                ents.extend(next(per_sentence))
            out.append(ents)
        return out

    def embed(self, strings: Sequence[str]) -> dict[str, Any]:
        """First-token vector (float32, CPU) of each distinct entity string."""
        import torch

        if not self._loaded:
            self.load(self.device)
        uniq = list(dict.fromkeys(strings))
        out: dict[str, Any] = {}
        if not uniq:
            return out
        tok = self._enc_tok
        lengths = [len(x) for x in tok(uniq, max_length=ENTITY_MAX_LENGTH, truncation=True)[
            "input_ids"]]
        bs = int(self.options["embed_batch_size"])
        with torch.inference_mode():
            for idx in hf.length_sorted_batches(lengths, bs):
                batch = [uniq[i] for i in idx]
                enc = tok(batch, max_length=ENTITY_MAX_LENGTH, padding=True, truncation=True,
                          return_tensors="pt").to(self.device)
                first = self._enc(**enc).last_hidden_state[:, 0, :].float().cpu()
                for row, i in enumerate(idx):
                    out[uniq[i]] = first[row]
        return out

    def score_entities(
        self,
        reference_entities: Sequence[Sequence[Entity]],
        candidate_entities: Sequence[Sequence[Entity]],
    ) -> MetricResult:
        """RaTEScore from already extracted entities (one list per report)."""
        import torch

        vectors = self.embed(
            [e for side in (reference_entities, candidate_entities) for ents in side
             for e, _ in ents]
        )
        values: list[float] = []
        details: list[dict[str, Any]] = []
        for ref, cand in zip(reference_entities, candidate_entities, strict=True):
            detail: dict[str, Any] = {
                "reference_entities": [list(e) for e in ref],
                "candidate_entities": [list(e) for e in cand],
            }
            if not ref or not cand:
                side = "both" if not ref and not cand else ("reference" if not ref else
                                                             "candidate")
                detail["no_entities"] = side
                values.append(EMPTY_SCORE)
                details.append(detail)
                continue
            rv = torch.stack([vectors[e] for e, _ in ref])
            cv = torch.stack([vectors[e] for e, _ in cand])
            rt = [t for _, t in ref]
            ct = [t for _, t in cand]
            r2c = directional_score(rv, rt, cv, ct, self.affinity)
            c2r = directional_score(cv, ct, rv, rt, self.affinity)
            detail["ref_to_cand"] = r2c
            detail["cand_to_ref"] = c2r
            values.append(combine(r2c, c2r))
            details.append(detail)
        corpus = {"ratescore_mean": sum(values) / len(values)} if values else {}
        return MetricResult(values={"ratescore": values}, corpus=corpus, details=details)

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        texts = list(dict.fromkeys([*references, *candidates]))
        ents = dict(zip(texts, self.report_entities(texts), strict=True))
        return self.score_entities([ents[t] for t in references], [ents[t] for t in candidates])


def _labels_reason(path: Path) -> str | None:
    """Check a local token classifier's ``id2label`` against the RaTE-NER scheme."""
    config = Path(path) / "config.json"
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return f"ratescore cannot read {config}: {exc}"
    return check_labels(raw.get("id2label") or {}, f"NER model {path}")
