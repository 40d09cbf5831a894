"""SRR-BERT: structured radiology report labels of both reports, compared label by label.

As RadEval 2.2 computes it (``radeval/metrics/SRRBert``, Delbrouck et al. 2025): each report
is cut into sentences (RadEval's clean-up of list numbers, then NLTK's Punkt), every sentence
goes through a BERT multi-label classifier (``BertForSequenceClassification``, sigmoid > 0.5)
over the labels of the chosen SRR-BERT model (163 "leaves with statuses" by default, e.g.
``Edema (Present)``), and a report's labels are the union over its sentences. Per pair:
precision, recall and F1 of each label present in either report, averaged over those labels
(``multilabel_prf_per_sample`` with ``aggregate="mean", include="union"``; 1.0 when neither
report has a label). Over the scored set: scikit-learn's support-weighted averages
(``classification_report(..., zero_division=0)["weighted avg"]``), which is the number RadEval
prints.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
)

#: Classifier checkpoint per model type (RadEval's ``SRRBert.MODEL_CONFIGS``).
MODELS: dict[str, str] = {
    "leaves": "StanfordAIMI/SRR-BERT-Leaves",
    "upper": "StanfordAIMI/SRR-BERT-Upper",
    "leaves_with_statuses": "StanfordAIMI/SRR-BERT-Leaves-with-Statuses",
    "upper_with_statuses": "StanfordAIMI/SRRG-BERT-Upper-with-Statuses",
}
#: RadEval's default (its ``srrbert`` adapter).
DEFAULT_MODEL_TYPE = "leaves_with_statuses"
#: The tokenizer every SRR-BERT checkpoint is used with.
TOKENIZER = "microsoft/BiomedVLP-CXR-BERT-general"
THRESHOLD = 0.5
MAX_LENGTH = 512
#: The per-pair precision/recall/F1 smoothing of RadEval's ``multilabel_prf_per_sample``.
PRF_EPS = 1e-8
SPLITTERS = ("punkt", "punkt-untrained")

_LABELS_FILE = Path(__file__).with_name("srrbert_labels.json")


@cache
def label_mapping(model_type: str) -> dict[str, int]:
    """``label -> output index`` of an SRR-BERT model type (RadEval's mapping files).

    Raises:
        ValueError: for an unknown model type.
    """
    mappings = json.loads(_LABELS_FILE.read_text(encoding="utf-8"))["mappings"]
    if model_type not in mappings:
        raise ValueError(
            f"srrbert: unknown model_type {model_type!r} (known: {', '.join(sorted(mappings))})"
        )
    return dict(mappings[model_type])


def label_names(model_type: str) -> list[str]:
    """Labels of ``model_type`` in output order."""
    mapping = label_mapping(model_type)
    return sorted(mapping, key=mapping.__getitem__)


# --------------------------------------------------------------------------- sentences


def clean_numbering(text: str) -> str:
    """RadEval's clean-up before sentence splitting: list numbers (``1.``, ``word2.``) become
    sentence ends, a period glued to a capital gets a space, and the text ends with a period.

    Decimals (``3.5 cm``) are left alone.
    """
    text = re.sub(r"^\s*\d+\.(?!\d)\s*", "", text)
    text = re.sub(r"(\w)\.(\d+)\.(?!\d)\s*", r"\1. ", text)
    text = re.sub(r"(\w)(\d+)\.(?!\d)\s*", r"\1. ", text)
    text = re.sub(r"(\w)\s+\d+\.(?!\d)\s*", r"\1. ", text)
    text = re.sub(r"([.!?])\s*\d+\.(?!\d)\s*", r"\1 ", text)
    text = re.sub(r"\.([A-Z])", r". \1", text)
    if not text.strip().endswith((".", "!", "?")):
        text = text.strip() + "."
    return text


def punkt_missing() -> str | None:
    """Why NLTK's English Punkt model (``punkt_tab``) cannot be used here, or ``None``."""
    if importlib.util.find_spec("nltk") is None:
        return "NLTK is not installed (pip install nltk)"
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        return (
            "NLTK's punkt_tab data is not installed (python -m nltk.downloader punkt_tab),"
            " or use srrbert.splitter=punkt-untrained"
        )
    return None


def sentence_splitter(name: str) -> Callable[[str], list[str]]:
    """A function from a cleaned report to its sentences.

    Args:
        name: ``punkt`` (``nltk.sent_tokenize``, English Punkt as RadEval uses it) or
            ``punkt-untrained`` (NLTK's Punkt algorithm with no trained abbreviations: needs no
            data download; it splits after every ``.``/``!``/``?`` followed by a space).
    """
    import nltk
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    if name == "punkt":
        return nltk.sent_tokenize
    if name == "punkt-untrained":
        return PunktSentenceTokenizer().tokenize
    raise ValueError(f"srrbert: unknown splitter {name!r} (known: {', '.join(SPLITTERS)})")


# --------------------------------------------------------------------------- aggregation


def per_pair_prf(
    y_true: np.ndarray, y_pred: np.ndarray, eps: float = PRF_EPS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-pair precision, recall and F1 over the labels either report has.

    Per label ``p = tp / (tp + fp + eps)``, ``r = tp / (tp + fn + eps)``,
    ``f1 = 2 tp / (2 tp + fp + fn + eps)`` (each 0 or 1 - eps here, one report per side), then
    the mean over the labels present in the reference or the candidate; 1.0 when none is.

    Args:
        y_true: ``(N, K)`` 0/1 reference labels.
        y_pred: ``(N, K)`` 0/1 candidate labels.
        eps: Smoothing, RadEval's 1e-8.
    """
    t = np.asarray(y_true, dtype=int) == 1
    p_ = np.asarray(y_pred, dtype=int) == 1
    tp = (t & p_).astype(int)
    fp = (~t & p_).astype(int)
    fn = (t & ~p_).astype(int)
    prec = tp / (tp + fp + eps)
    rec = tp / (tp + fn + eps)
    f1 = (2 * tp) / (2 * tp + fp + fn + eps)
    union = t | p_
    out = [np.ones(t.shape[0]) for _ in range(3)]
    for i in range(t.shape[0]):
        m = union[i]
        if m.any():
            out[0][i] = float(prec[i][m].mean())
            out[1][i] = float(rec[i][m].mean())
            out[2][i] = float(f1[i][m].mean())
    return out[0], out[1], out[2]


def weighted_prf(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """Support-weighted precision, recall and F1 over labels, with 0 for undefined ratios.

    What ``sklearn.metrics.classification_report(y_true, y_pred, zero_division=0,
    output_dict=True)["weighted avg"]`` gives for multi-label 0/1 matrices; 0.0 for all three
    when no reference has any label.
    """
    t = np.asarray(y_true, dtype=int) == 1
    p_ = np.asarray(y_pred, dtype=int) == 1
    tp = (t & p_).sum(axis=0).astype(float)
    fp = (~t & p_).sum(axis=0).astype(float)
    fn = (t & ~p_).sum(axis=0).astype(float)
    support = t.sum(axis=0).astype(float)

    def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)

    per_label = {
        "precision": ratio(tp, tp + fp),
        "recall": ratio(tp, tp + fn),
        "f1": ratio(2 * tp, 2 * tp + fp + fn),
    }
    total = support.sum()
    if total == 0:
        return {k: 0.0 for k in per_label}
    return {k: float(np.average(v, weights=support)) for k, v in per_label.items()}


# --------------------------------------------------------------------------- model


class SrrBertClassifier:
    """A loaded SRR-BERT sentence classifier (weights, tokenizer, label names)."""

    def __init__(self, model_path: Path, tokenizer_path: Path, n_labels: int, device: str,
                 batch_size: int) -> None:
        import torch
        from transformers import BertForSequenceClassification, BertTokenizer

        self._torch = torch
        try:
            self.model = hf.load_model(model_path, device=device,
                                       model_class=BertForSequenceClassification,
                                       num_labels=n_labels)
        except (OSError, ValueError, RuntimeError) as exc:
            raise MetricUnavailable(
                f"srrbert: cannot load a {n_labels}-label BERT classifier from {model_path}:"
                f" {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            ) from exc
        out = getattr(getattr(self.model, "classifier", None), "out_features", None)
        if out != n_labels:
            raise MetricUnavailable(
                f"srrbert: the checkpoint at {model_path} has {out} outputs, its label mapping"
                f" {n_labels}"
            )
        self.tokenizer = BertTokenizer.from_pretrained(str(tokenizer_path), local_files_only=True)
        self.device = device
        self.batch_size = batch_size

    def predict(self, sentences: list[str]) -> np.ndarray:
        """``(len(sentences), K)`` 0/1 labels: sigmoid(logits) > 0.5 per sentence."""
        torch = self._torch
        lengths = [len(s) for s in sentences]

        def run(batch: list[str]) -> list[np.ndarray]:
            enc = self.tokenizer(batch, add_special_tokens=True, max_length=MAX_LENGTH,
                                 padding=True, truncation=True, return_attention_mask=True,
                                 return_tensors="pt")
            enc = {k: v.to(self.device) for k, v in enc.items()}
            with torch.inference_mode():
                logits = self.model(**enc).logits.float()
            return list((torch.sigmoid(logits) > THRESHOLD).cpu().numpy().astype(int))

        rows = hf.map_sorted_by_length(sentences, run, lengths=lengths,
                                       batch_size=self.batch_size)
        return np.stack(rows) if rows else np.zeros((0, self.model.config.num_labels), int)


class SrrBert(BaseMetric):
    """SRR-BERT label agreement per pair (RadEval's ``srrbert``).

    Options:
        model_type: ``leaves_with_statuses`` (RadEval's default), ``leaves``, ``upper`` or
            ``upper_with_statuses``: picks the checkpoint and its label mapping.
        model: Hub id or folder of the classifier (default: the model type's checkpoint).
        revision: Hub commit of ``model`` (none pinned: the hub's current one, recorded).
        tokenizer: Hub id or folder of the tokenizer (CXR-BERT-general).
        tokenizer_revision: Hub commit of ``tokenizer``.
        splitter: ``punkt`` (RadEval's; needs NLTK's punkt_tab data) or ``punkt-untrained``.
        batch_size: Sentences per forward pass.
    """

    spec = MetricSpec(
        name="srrbert",
        outputs=(
            OutputSpec("srrbert_weighted_f1", True,
                       "SRR-BERT label F1 (per pair: mean over the labels of either report)"),
            OutputSpec("srrbert_weighted_precision", True, "SRR-BERT label precision"),
            OutputSpec("srrbert_weighted_recall", True, "SRR-BERT label recall"),
        ),
        needs_model=True,
        citation="Delbrouck et al., Automated structured radiology report generation "
        "(SRR-BERT), via RadEval 2.2",
        corpus_outputs=("srrbert_weighted_f1_corpus", "srrbert_weighted_precision_corpus",
                        "srrbert_weighted_recall_corpus"),
    )
    defaults: dict[str, Any] = {
        "model_type": DEFAULT_MODEL_TYPE,
        "model": None,
        "revision": None,
        "tokenizer": TOKENIZER,
        "tokenizer_revision": None,
        "splitter": "punkt",
        "batch_size": 32,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        label_mapping(str(self.options["model_type"]))  # unknown type: fail now
        if self.options["splitter"] not in SPLITTERS:
            raise ValueError(f"srrbert: splitter must be one of {', '.join(SPLITTERS)}"
                             f" (got {self.options['splitter']!r})")
        bs = self.options["batch_size"]
        if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
            raise ValueError(f"srrbert: batch_size must be a positive integer (got {bs!r})")
        self._classifier: SrrBertClassifier | None = None

    def _model_ref(self) -> hf.ModelRef:
        model = self.options["model"] or MODELS[self.options["model_type"]]
        return hf.ModelRef(str(model), self.options["revision"])

    def _tokenizer_ref(self) -> hf.ModelRef:
        return hf.ModelRef(str(self.options["tokenizer"]), self.options["tokenizer_revision"])

    def availability(self) -> str | None:
        if importlib.util.find_spec("nltk") is None:
            return "srrbert needs NLTK (pip install nltk)"
        if self.options["splitter"] == "punkt":
            reason = punkt_missing()
            if reason is not None:
                return f"srrbert sentence splitter: {reason}"
        for what, ref in (("classifier", self._model_ref()), ("tokenizer", self._tokenizer_ref())):
            _, reason = hf.resolve_or_reason(ref)
            if reason is not None:
                return f"SRR-BERT {what} not available: {reason}"
        return None

    def _load(self) -> None:
        model_path = hf.resolve(self._model_ref())
        tok_path = hf.resolve(self._tokenizer_ref())
        n = len(label_mapping(self.options["model_type"]))
        bs = int(self.options["batch_size"])
        self._classifier = self.resources.get(
            ("srrbert", str(model_path), str(tok_path), n, self.device),
            lambda: SrrBertClassifier(model_path, tok_path, n, self.device, bs),
        )
        self._classifier.batch_size = bs

    def split(self, report: str) -> list[str]:
        """A report's sentences as RadEval cuts them."""
        return sentence_splitter(self.options["splitter"])(clean_numbering(report))

    def report_labels(self, reports: list[str]) -> np.ndarray:
        """``(len(reports), K)`` 0/1: the union of each report's sentence labels."""
        if not self._loaded:
            self.load(self.device)
        assert self._classifier is not None
        sentences: list[str] = []
        bounds: list[tuple[int, int]] = []
        for report in reports:
            parts = self.split(report)
            bounds.append((len(sentences), len(sentences) + len(parts)))
            sentences.extend(parts)
        preds = self._classifier.predict(sentences)
        k = len(label_mapping(self.options["model_type"]))
        out = np.zeros((len(reports), k), dtype=int)
        for i, (a, b) in enumerate(bounds):
            if b > a:
                out[i] = preds[a:b].any(axis=0)
        return out

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        labels = self.report_labels([*references, *candidates])
        y_true, y_pred = labels[: len(references)], labels[len(references):]
        p, r, f1 = per_pair_prf(y_true, y_pred)
        corpus = weighted_prf(y_true, y_pred)
        names = label_names(self.options["model_type"])
        details = [
            {
                "reference_labels": [names[j] for j in np.flatnonzero(y_true[i])],
                "candidate_labels": [names[j] for j in np.flatnonzero(y_pred[i])],
            }
            for i in range(len(references))
        ]
        return MetricResult(
            values={
                "srrbert_weighted_f1": f1.tolist(),
                "srrbert_weighted_precision": p.tolist(),
                "srrbert_weighted_recall": r.tolist(),
            },
            corpus={
                "srrbert_weighted_f1_corpus": corpus["f1"],
                "srrbert_weighted_precision_corpus": corpus["precision"],
                "srrbert_weighted_recall_corpus": corpus["recall"],
            },
            details=details,
        )

    def signature(self) -> str:
        o = self.options
        try:
            model, tok = hf.identity(self._model_ref()), hf.identity(self._tokenizer_ref())
        except hf.ModelNotAvailable as exc:
            raise MetricUnavailable(f"SRR-BERT not available: {exc}") from None
        return (
            f"srrbert|type:{o['model_type']}|model:{model}|tok:{tok}|split:{o['splitter']}"
            f"|thr:{THRESHOLD}|max_len:{MAX_LENGTH}|pair:mean-union|corpus:weighted"
        )
