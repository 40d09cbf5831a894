"""CheXbert labels (chexbert_*) and CheXbert embedding similarity (semb).

Architecture (Smit et al., 2020): a ``bert-base-uncased`` encoder whose [CLS] vector of the last
hidden state feeds 13 four-way heads (blank, positive, negative, uncertain) and one two-way
head for "No Finding" (blank, positive). The public checkpoint ``chexbert.pth`` (repository
``StanfordAIMI/RRG_scorers``) is a ``torch.save`` of ``{"model_state_dict": ...}`` written
from a ``DataParallel`` wrapper, so its keys start with ``module.``.

s_emb (Yu et al., 2023, CXR-Report-Metric) is the cosine similarity of the two reports'
CheXbert [CLS] vectors (last hidden state, no dropout, no head).

One loaded network per (checkpoint, encoder, device, dtype) per process is shared by every
metric instance (``chexbert``, ``semb``, ``crg`` with ``labeler=chexbert``, RadCliQ).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from radconcord.backend.metrics import hf, labels
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    OutputSpec,
    Resources,
)
from radconcord.backend.util import cached_file_sha256

logger = logging.getLogger(__name__)

#: Head order of the public checkpoint (CheXbert's ``CONDITIONS``); it differs from
#: :data:`labels.OBSERVATIONS`, so outputs are reordered after prediction.
CHEXBERT_CONDITIONS: tuple[str, ...] = (
    "Enlarged Cardiomediastinum",
    "Cardiomegaly",
    "Lung Opacity",
    "Lung Lesion",
    "Edema",
    "Consolidation",
    "Pneumonia",
    "Atelectasis",
    "Pneumothorax",
    "Pleural Effusion",
    "Pleural Other",
    "Fracture",
    "Support Devices",
    "No Finding",
)
#: Class index -> label value of the four-way heads; the two-way head uses the first two.
_CLASS_TO_LABEL: tuple[labels.Label, ...] = (
    labels.BLANK,
    labels.POSITIVE,
    labels.NEGATIVE,
    labels.UNCERTAIN,
)
_REORDER = tuple(CHEXBERT_CONDITIONS.index(o) for o in labels.OBSERVATIONS)

CHECKPOINT_REPO = "StanfordAIMI/RRG_scorers"
CHECKPOINT_FILE = "chexbert.pth"
CHECKPOINT_REVISION = "d97745aa136e5beb927da7e768e99de6ae807902"
#: sha256 of the public ``chexbert.pth``; a different file is still usable (its own hash
#: goes into the signature) but is logged as not the published checkpoint.
CHECKPOINT_SHA256 = "6550703c92d640e1e04d8105a7a185d76ece0f25fcbf033d292785bf22c0fde1"
ENCODER = hf.ModelRef("google-bert/bert-base-uncased", "86b5e0934494bd15c9632b12f734a8a67f723594")
MAX_LENGTH = 512
_WS = re.compile(r"\s+")


def preprocess(text: str) -> str:
    """CheXbert's report cleaning: strip, newlines to spaces, collapse whitespace."""
    return _WS.sub(" ", text.replace("\n", " ")).strip()


# --------------------------------------------------------------------------- files


# Kept under this name for importers; cached per (path, size, mtime).
file_sha256 = cached_file_sha256


def locate_checkpoint(checkpoint: str | None) -> tuple[Path | None, str | None]:
    """Find ``chexbert.pth`` without downloading.

    Order: an explicit path; ``$RADCONCORD_MODEL_DIR/chexbert.pth`` or
    ``$RADCONCORD_MODEL_DIR/StanfordAIMI--RRG_scorers/chexbert.pth``; the Hugging Face cache
    at the pinned revision; otherwise the hub at load time when it is reachable.

    Returns:
        ``(path, None)`` when local, ``(None, None)`` when downloadable, else
        ``(None, reason)``.
    """
    if checkpoint:
        p = Path(checkpoint).expanduser()
        if p.is_file():
            return p.resolve(), None
        return None, f"CheXbert checkpoint {p} does not exist"
    found = hf.model_dir_file(CHECKPOINT_REPO, CHECKPOINT_FILE) or hf.hf_cache_file(
        CHECKPOINT_REPO, CHECKPOINT_FILE, CHECKPOINT_REVISION
    )
    if found is not None:
        return found, None
    return None, hf.hub_unavailable_reason(
        f"CheXbert weights ({CHECKPOINT_REPO}/{CHECKPOINT_FILE})",
        f"put {CHECKPOINT_FILE} in $RADCONCORD_MODEL_DIR or pass"
        f" --set chexbert.checkpoint=/path/{CHECKPOINT_FILE}",
    )


def _download_checkpoint() -> Path:
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(CHECKPOINT_REPO, CHECKPOINT_FILE, revision=CHECKPOINT_REVISION))


# --------------------------------------------------------------------------- network


class ChexbertModel:
    """A loaded CheXbert network with its tokenizer; thread-safe inference."""

    def __init__(self, *, encoder_dir: Path, checkpoint: Path, device: str, dtype: Any) -> None:
        import torch
        from torch import nn
        from transformers import BertConfig, BertModel

        self.device = device
        self.tokenizer = hf.load_tokenizer(encoder_dir)
        config = BertConfig.from_pretrained(str(encoder_dir), local_files_only=True)

        class _Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = BertModel(config)
                self.dropout = nn.Dropout(0.1)
                hidden = config.hidden_size
                heads = [nn.Linear(hidden, 4) for _ in range(13)] + [nn.Linear(hidden, 2)]
                self.linear_heads = nn.ModuleList(heads)

        net = _Net()
        state = torch.load(str(checkpoint), map_location="cpu", weights_only=True)
        if isinstance(state, dict) and "model_state_dict" in state:
            state = state["model_state_dict"]
        state = {k.removeprefix("module."): v for k, v in state.items()}
        missing, unexpected = net.load_state_dict(state, strict=False)
        # Older checkpoints store the position_ids buffer, which newer BertModel keeps
        # non-persistent; anything else missing means this is not a CheXbert checkpoint.
        unexpected = [k for k in unexpected if not k.endswith("position_ids")]
        missing = [k for k in missing if not k.startswith("bert.pooler.")]
        if missing or unexpected:
            raise ValueError(
                f"{checkpoint} is not a CheXbert checkpoint (missing {missing[:3]},"
                f" unexpected {unexpected[:3]})"
            )
        self.net = net.to(device=device, dtype=dtype).eval()
        self.dtype = dtype
        self._lock = threading.Lock()

    def _encode(self, texts: list[str]) -> Any:
        import torch

        enc = self.tokenizer(
            [preprocess(t) for t in texts],
            padding=True,
            truncation=True,
            max_length=MAX_LENGTH,
            return_tensors="pt",
        ).to(self.device)
        with torch.inference_mode():
            hidden = self.net.bert(
                input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]
            )[0]
        return hidden[:, 0, :]

    def _batched(self, texts: Sequence[str], batch_size: int, fn: Any) -> list[Any]:
        lengths = [len(t) for t in texts]
        return hf.map_sorted_by_length(
            list(texts), fn, lengths=lengths, batch_size=batch_size
        )

    def cls_vectors(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Last-hidden-state [CLS] vectors, float64, shape (n, hidden)."""
        if not texts:
            return np.zeros((0, self.net.bert.config.hidden_size))

        def run(batch: list[str]) -> list[np.ndarray]:
            with self._lock:
                cls = self._encode(batch).float().cpu().numpy().astype(np.float64)
            return list(cls)

        return np.stack(self._batched(texts, batch_size, run))

    def label(self, texts: Sequence[str], batch_size: int = 32) -> list[tuple[labels.Label, ...]]:
        """CheXbert labels in :data:`labels.OBSERVATIONS` order."""
        import torch

        def run(batch: list[str]) -> list[tuple[labels.Label, ...]]:
            with self._lock:
                cls = self._encode(batch)
                with torch.inference_mode():
                    heads = self.net.linear_heads
                    preds = [h(cls).argmax(dim=1).cpu().numpy() for h in heads]
            out = []
            for i in range(len(batch)):
                raw = [_CLASS_TO_LABEL[int(p[i])] for p in preds]
                out.append(tuple(raw[j] for j in _REORDER))
            return out

        return self._batched(texts, batch_size, run)


def shared_model(
    resources: Resources, *, encoder_dir: Path, checkpoint: Path, device: str, dtype: Any
) -> ChexbertModel:
    """The model of ``resources`` for these settings (loaded on first use).

    ``chexbert`` and ``semb`` instances of one scoring pool share one ``resources``, so the
    checkpoint is loaded once for both.
    """
    key = ("chexbert", str(encoder_dir), str(checkpoint), device, str(dtype))
    return resources.get(
        key,
        lambda: ChexbertModel(
            encoder_dir=encoder_dir, checkpoint=checkpoint, device=device, dtype=dtype
        ),
    )


# --------------------------------------------------------------------------- metrics


class _ChexbertBase(BaseMetric):
    defaults: dict[str, Any] = {
        "checkpoint": None,
        "encoder": ENCODER.model,
        "encoder_revision": ENCODER.revision,
        "batch_size": 32,
        "dtype": "fp32",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._model: ChexbertModel | None = None

    def _encoder_ref(self) -> hf.ModelRef:
        rev = self.options["encoder_revision"] if self.options["encoder"] == ENCODER.model else None
        return hf.ModelRef(self.options["encoder"], rev)

    def availability(self) -> str | None:
        ckpt, reason = locate_checkpoint(self.options["checkpoint"])
        if reason:
            return reason
        _, reason = hf.resolve_or_reason(self._encoder_ref())
        if reason:
            return f"CheXbert encoder/tokenizer: {reason}"
        return None

    def _load(self) -> None:
        ckpt, _ = locate_checkpoint(self.options["checkpoint"])
        ckpt = ckpt or _download_checkpoint()
        encoder_dir = hf.resolve(self._encoder_ref())
        dtype = hf.pick_dtype(self.device, self.options["dtype"])
        self._ckpt = ckpt
        self._model = shared_model(
            self.resources,
            encoder_dir=encoder_dir, checkpoint=ckpt, device=self.device, dtype=dtype
        )

    def _identity(self) -> str:
        ckpt, reason = locate_checkpoint(self.options["checkpoint"])
        if ckpt is None:
            sha = CHECKPOINT_SHA256[:16] + "(expected)"
        else:
            sha = file_sha256(ckpt)[:16]
        enc, _ = hf.resolve_or_reason(self._encoder_ref())
        tok = hf.fingerprint(enc)[:12] if enc is not None else str(self._encoder_ref())
        return f"ckpt:sha256:{sha}|tok:{tok}|maxlen:{MAX_LENGTH}|dtype:{self.options['dtype']}"


class ChexbertLabels(_ChexbertBase):
    """CheXbert label agreement per pair, plus corpus micro/macro/weighted F1 (14 and 5)."""

    spec = MetricSpec(
        name="chexbert",
        outputs=(
            OutputSpec("chexbert_acc", True, "accuracy over the 14 binarised CheXbert labels"),
            OutputSpec("chexbert_f1", True, "F1 over positive (incl. uncertain) labels"),
        ),
        needs_model=True,
        citation="Smit et al., CheXbert, EMNLP 2020",
        corpus_outputs=labels.corpus_keys("chexbert"),
    )

    def label_reports(self, reports: Sequence[str]) -> list[tuple[labels.Label, ...]]:
        """Labels of each report (``labels.ReportLabeler`` protocol)."""
        if not self._loaded:
            self.load(self.device)
        assert self._model is not None
        return self._model.label(list(reports), self.options["batch_size"])

    def _score(self, *, references: list[str], candidates: list[str], images: Any) -> MetricResult:
        ref_labels = self.label_reports(references)
        cand_labels = self.label_reports(candidates)
        acc, f1, details = [], [], []
        for r, c in zip(ref_labels, cand_labels, strict=True):
            rb, cb = labels.binarize(r), labels.binarize(c)
            acc.append(labels.pair_accuracy(rb, cb))
            f1.append(labels.pair_f1(rb, cb))
            details.append({"reference_labels": list(r), "candidate_labels": list(c)})
        corpus = labels.corpus_scores(ref_labels, cand_labels, "chexbert")
        return MetricResult({"chexbert_acc": acc, "chexbert_f1": f1}, corpus, details)

    def signature(self) -> str:
        return f"chexbert|{self._identity()}|bin:{labels.BINARISATION}|version:1"


class SEmb(_ChexbertBase):
    """s_emb: cosine similarity of CheXbert [CLS] embeddings of reference and candidate."""

    spec = MetricSpec(
        name="semb",
        outputs=(OutputSpec("semb", True, "cosine of CheXbert CLS embeddings"),),
        needs_model=True,
        citation="Yu et al., Patterns 2023 (RadCliQ)",
    )

    def _score(self, *, references: list[str], candidates: list[str], images: Any) -> MetricResult:
        assert self._model is not None
        # Encode each distinct text once: references repeat across candidates in a study.
        uniq = list(dict.fromkeys([*references, *candidates]))
        vecs = self._model.cls_vectors(uniq, self.options["batch_size"])
        index = {t: i for i, t in enumerate(uniq)}
        r = vecs[[index[t] for t in references]]
        c = vecs[[index[t] for t in candidates]]
        denom = np.linalg.norm(r, axis=1) * np.linalg.norm(c, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.where(denom > 0, (r * c).sum(axis=1) / denom, np.nan)
        return MetricResult({"semb": [float(x) for x in cos]})

    def signature(self) -> str:
        return f"semb|{self._identity()}|layer:last|pool:cls|sim:cosine|version:1"

