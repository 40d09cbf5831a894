"""BERTScore (Zhang et al., 2020) with bert_score's greedy-matching semantics.

Each token of the candidate is matched to its most similar token of the reference (cosine of
contextual embeddings from one layer) and vice versa; precision/recall are the (idf-)weighted
means of those maxima, F is their harmonic mean. Defaults follow RadCliQ: ``distilroberta-base``
at layer 5, no idf, rescaled with bert_score's baseline for that model and layer.

Semantics copied from ``bert_score`` 0.3.13 (checked by ``tests/parity/test_bertscore.py``):

* text is stripped, then encoded with special tokens, truncated to ``model_max_length``;
  RoBERTa/GPT-2 tokenizers add a prefix space (bert_score's ``add_prefix_space=True``);
* similarities include the other side's special tokens as match targets, but the special
  tokens' own weights are 0 ([CLS]/[SEP] without idf; idf 0 with idf, as they occur in every
  reference);
* idf(t) = log((M + 1) / (df(t) + 1)) over the M references of the scored set (unseen tokens:
  log(M + 1)), computed once per call (or once via :meth:`BertScore.fit_idf`), never per pair;
* an empty side scores raw P = R = F = 0 before rescaling;
* rescaling is (x - b) / (1 - b) with the baseline row of the chosen layer;
* layers above ``num_layers`` are cut off as bert_score cuts them (``encoder.layer``,
  ``transformer.layer``, or a top-level ``layers`` stack such as ModernBERT's, whose last
  hidden state then comes after its final norm). ``model="IAMJB/RadEvalModernBERT"`` is
  RadEval's ``radeval_bertscore``: layer 22, no idf, no baseline (model and layer in the
  signature).

Deviations, on purpose: padded positions never take part in the max (bert_score lets a padded
position contribute a similarity of 0 to the max, which makes a score depend on its batch when
every real similarity is negative); when all weights of a side are 0 (idf on, every token in
every reference) P, R and F are NaN rather than bert_score's P = R = NaN, F = 0.

Speed: each distinct text is tokenised and embedded once per call, in batches of similar
length (little padding), under ``torch.inference_mode``. Embeddings are also kept between
calls in a bounded cache (``cache_mb``) shared by every instance on the same weights, layer,
device and dtype in one :class:`~backend.metrics.base.Resources` (a scoring pool): the runner
scores a study in small batches, and a reference repeats across the candidates of several
systems, so later batches (and RadCliQ's BERTScore input) reuse it instead of running the
encoder again. The forward pass itself is the same work as bert_score's in fp32, which bounds
the gain of a single call on CPU; ``dtype="bf16"`` (CUDA, or a CPU with native bf16) trades
about 1e-3 on P/R/F for a much faster forward and is opt-in, named in the signature.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.metadata
import importlib.util
import logging
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricInputError,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
)

logger = logging.getLogger(__name__)

IMPL_VERSION = "1"

# RadCliQ's BERTScore model; the hub moved it under the distilbert organisation. Pinned commit.
DEFAULT_MODEL = hf.ModelRef(
    "distilbert/distilroberta-base", "fb53ab8802853c8e4fbdbcd0529f21fc6f459b2b"
)
DEFAULT_LAYER = 5
# bert_score 0.3.13, rescale_baseline/en/distilroberta-base.tsv, row LAYER=5: (P, R, F).
DISTILROBERTA_L5_BASELINE = (0.84732, 0.84759504, 0.8473319)

FALLBACK_LABEL = "all-MiniLM-L6-v2(packaged-fallback)"
FALLBACK_LAYER = 6

#: RadEval's radiology ModernBERT (jbdel/RadEval 2.2, ``radeval_bertscore``): scored at layer
#: 22 (its last), no idf, no baseline rescaling.
RADEVAL_MODERNBERT = "IAMJB/RadEvalModernBERT"

# Layers bert_score tuned on WMT16 for common models (its ``model2layers``), used when the
# user names one of them without ``num_layers``; any other model uses its last layer.
# RadEval's ModernBERT is listed with the layer RadEval uses.
KNOWN_LAYERS: dict[str, int] = {
    "distilroberta-base": 5,
    "roberta-base": 10,
    "roberta-large": 17,
    "bert-base-uncased": 9,
    "bert-large-uncased": 18,
    "distilbert-base-uncased": 5,
    "microsoft/deberta-xlarge-mnli": 40,
    RADEVAL_MODERNBERT: 22,
}

_PAD_SIM = -2.0  # below any cosine, so a padded position never wins a max

DEFAULT_CACHE_MB = 256


class EmbeddingCache:
    """Normalised token embeddings by token ids, least recently used first out.

    Bounded by bytes (the tensors' storage), thread-safe: a scoring pool may share one cache
    between families scored from several threads.

    Args:
        max_bytes: Most bytes held; 0 keeps nothing.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(int(max_bytes), 0)
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple[int, ...]) -> Any:
        """The embedding under ``key`` (now most recent), or ``None``."""
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: tuple[int, ...], value: Any) -> None:
        """Keep ``value`` (a tensor), evicting the least recently used beyond the bound."""
        size = int(value.element_size() * value.nelement())
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= int(old.element_size() * old.nelement())
            self._items[key] = value
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self.bytes -= int(dropped.element_size() * dropped.nelement())


def resolve_dtype(device: str, preference: str) -> Any:
    """Torch dtype for the encoder: :func:`hf.pick_dtype`, plus bf16 on a CPU that has it.

    ``auto`` stays fp32 on CPU (exact parity by default). ``bf16`` on CPU is accepted only
    where oneDNN reports native bf16 (AVX512-BF16/AMX); elsewhere it would be emulated and
    slower than fp32.

    Raises:
        ValueError: for an unknown preference, fp16 on CPU, or bf16 on a CPU without it.
    """
    import torch

    pref = str(preference).strip().lower()
    if pref == "bf16" and not device.startswith("cuda"):
        if not cpu_has_native_bf16():
            raise ValueError(
                f"dtype bf16 needs CUDA or a CPU with native bf16 (AVX512-BF16/AMX); device"
                f" {device} has none, use fp32"
            )
        return torch.bfloat16
    return hf.pick_dtype(device, pref)


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN runs bf16 natively on this CPU (so a bf16 forward is faster)."""
    import torch

    try:
        return bool(
            torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
        )
    except (AttributeError, RuntimeError):
        return False


@dataclass(frozen=True)
class _Plan:
    """What will be loaded, decided cheaply (no weights)."""

    ref: hf.ModelRef
    path: Path | None  # None: download the pinned revision at load time
    label: str
    num_layers: int | None  # None: last layer, known after reading config.json
    baseline: tuple[float, float, float] | None
    fallback: bool


def _short(model: str) -> str:
    return model.rstrip("/").split("/")[-1]


def _known_layer(model: str) -> int | None:
    return KNOWN_LAYERS.get(model) or KNOWN_LAYERS.get(_short(model))


def read_baseline(path: str | Path, num_layers: int) -> tuple[float, float, float]:
    """Read one layer's (P, R, F) from a bert_score baseline file (``LAYER,P,R,F``).

    Row ``num_layers`` (0 = embeddings) is used, as bert_score does.

    Raises:
        MetricInputError: when the file is missing, malformed or has no such row.
    """
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise MetricInputError(f"baseline file {p}: {exc}") from exc
    if not rows or [c.strip().upper() for c in rows[0][:4]] != ["LAYER", "P", "R", "F"]:
        raise MetricInputError(f"baseline file {p}: header must be LAYER,P,R,F")
    body = rows[1:]
    if not 0 <= num_layers < len(body):
        raise MetricInputError(f"baseline file {p}: no row for layer {num_layers}")
    row = body[num_layers]
    try:
        values = tuple(float(x) for x in row[1:4])
    except ValueError as exc:
        raise MetricInputError(f"baseline file {p}, row {num_layers + 2}: {exc}") from exc
    if len(values) != 3 or any(not math.isfinite(v) or v >= 1.0 for v in values):
        raise MetricInputError(f"baseline file {p}, row {num_layers + 2}: need P,R,F below 1")
    return values[0], values[1], values[2]


def _bert_score_baseline_file(model: str) -> Path | None:
    """bert_score's shipped English baseline for ``model``, located without importing it."""
    try:
        spec = importlib.util.find_spec("bert_score")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    base = Path(spec.origin).parent / "rescale_baseline" / "en"
    for name in (model, _short(model)):
        f = base / f"{name}.tsv"
        if f.is_file():
            return f
    return None


def _transformers_version() -> str:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return "missing"


class BertScore(BaseMetric):
    """BERTScore precision, recall and F1 per pair.

    Options:
        model: Hub id or folder; ``None`` = RadCliQ's ``distilroberta-base`` (pinned), or the
            packaged all-MiniLM-L6-v2 at layer 6 without rescaling where that is absent.
        revision: Commit for a hub ``model``.
        num_layers: Layer whose output is used (0 = embeddings); ``None`` = model default.
        idf: Weight tokens by idf over all references of the scored set.
        rescale: Rescale with a baseline; ``None`` = when a baseline is known.
        baseline: bert_score-style ``LAYER,P,R,F`` file; overrides the built-in baseline.
        batch_size: Sentences per forward pass.
        device: ``auto`` | ``cpu`` | ``cuda``; ``None`` = the device given to ``load``.
        dtype: ``fp32`` (default, exact parity) | ``bf16`` (CUDA, or a CPU with native bf16)
            | ``fp16`` (CUDA) | ``auto`` (bf16/fp16 on CUDA, fp32 on CPU).
        cache_mb: Megabytes of token embeddings kept between calls (0 = none); shared with
            the other instances on the same weights in one ``Resources``.
    """

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="bertscore",
        outputs=(
            OutputSpec("bertscore_p", True, "BERTScore precision (candidate tokens matched)"),
            OutputSpec("bertscore_r", True, "BERTScore recall (reference tokens matched)"),
            OutputSpec("bertscore_f", True, "BERTScore F1"),
        ),
        needs_model=True,
        citation="Zhang et al., BERTScore: Evaluating Text Generation with BERT, ICLR 2020",
        corpus_outputs=("bertscore_p_mean", "bertscore_r_mean", "bertscore_f_mean"),
    )
    defaults: ClassVar[dict[str, Any]] = {
        "model": None,
        "revision": None,
        "num_layers": None,
        "idf": False,
        "rescale": None,
        "baseline": None,
        "batch_size": 64,
        "device": None,
        "dtype": "fp32",
        "cache_mb": DEFAULT_CACHE_MB,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        o = self.options
        if o["num_layers"] is not None and (
            isinstance(o["num_layers"], bool)
            or int(o["num_layers"]) != o["num_layers"]
            or o["num_layers"] < 0
        ):
            raise ValueError(
                f"bertscore: num_layers must be an integer >= 0, got {o['num_layers']!r}"
            )
        if int(o["batch_size"]) < 1:
            raise ValueError("bertscore: batch_size must be >= 1")
        if (
            isinstance(o["cache_mb"], bool)
            or not isinstance(o["cache_mb"], int | float)
            or not math.isfinite(o["cache_mb"])
            or o["cache_mb"] < 0
        ):
            raise ValueError(f"bertscore: cache_mb must be a number >= 0, got {o['cache_mb']!r}")
        self._plan_cache: tuple[_Plan | None, str | None] | None = None
        self._tok: Any = None
        self._model: Any = None
        self._layer: int | None = None
        self._hidden_state_index: int | None = None
        self._max_len: int = 512
        self._special_weight0: set[int] = set()
        self._n_special_empty = 2
        self._fitted_idf: dict[int, float] | None = None
        self._fitted_idf_default = 0.0
        self._fitted_idf_hash: str | None = None
        self._torch_dtype: Any = None
        self._pad_id = 0
        self._cache: EmbeddingCache | None = None

    # ------------------------------------------------------------------ planning

    def _plan(self) -> tuple[_Plan | None, str | None]:
        if self._plan_cache is None:
            self._plan_cache = self._make_plan()
        return self._plan_cache

    def _make_plan(self) -> tuple[_Plan | None, str | None]:
        o = self.options
        if (
            importlib.util.find_spec("torch") is None
            or importlib.util.find_spec("transformers") is None
        ):
            return None, "bertscore needs torch and transformers (pip install -r requirements.txt)"
        baseline_file = o["baseline"]
        if o["model"] is None:
            path, reason = hf.resolve_or_reason(DEFAULT_MODEL)
            if reason is None:
                layer = DEFAULT_LAYER if o["num_layers"] is None else int(o["num_layers"])
                base = None
                if o["rescale"] is not False:
                    if baseline_file is not None:
                        base = read_baseline(baseline_file, layer)
                    elif layer == DEFAULT_LAYER:
                        base = DISTILROBERTA_L5_BASELINE
                    else:
                        f = _bert_score_baseline_file("distilroberta-base")
                        if f is not None:
                            base = read_baseline(f, layer)
                if o["rescale"] is True and base is None:
                    return None, f"bertscore: no baseline for distilroberta-base layer {layer}"
                return _Plan(DEFAULT_MODEL, path, "distilroberta-base", layer, base, False), None
            packaged = hf.packaged_minilm_dir()
            if packaged is None:
                return None, (
                    f"bertscore: default model unavailable ({reason}) and the packaged"
                    f" all-MiniLM-L6-v2 fallback is not installed (pip install"
                    f" {hf.PACKAGED_MINILM_DIST})"
                )
            layer = FALLBACK_LAYER if o["num_layers"] is None else int(o["num_layers"])
            base = read_baseline(baseline_file, layer) if baseline_file is not None else None
            if o["rescale"] is True and base is None:
                return None, (
                    "bertscore: rescale=True but distilroberta-base is unavailable and the"
                    " packaged all-MiniLM-L6-v2 fallback has no baseline; give baseline=<file>"
                    f" ({reason})"
                )
            logger.info("bertscore: %s; using %s", reason, FALLBACK_LABEL)
            ref = hf.ModelRef(hf.PACKAGED_MINILM_ID)
            return _Plan(ref, packaged, FALLBACK_LABEL, layer, base, True), None

        ref = hf.ModelRef(str(o["model"]), o["revision"])
        path, reason = hf.resolve_or_reason(ref)
        if reason is not None:
            return None, f"bertscore: {reason}"
        layer = o["num_layers"]
        if layer is None:
            layer = _known_layer(ref.model)
        base = None
        if o["rescale"] is not False:
            if baseline_file is not None:
                if layer is None:
                    layer = self._last_layer(path)
                base = read_baseline(baseline_file, int(layer))
            elif layer is not None:
                f = _bert_score_baseline_file(ref.model)
                if f is not None:
                    base = read_baseline(f, int(layer))
        if o["rescale"] is True and base is None:
            return (
                None,
                f"bertscore: rescale=True but no baseline is known for '{ref.model}';"
                " give baseline=<file>",
            )
        label = Path(ref.model).name if ref.looks_like_path else ref.model
        return _Plan(ref, path, label, None if layer is None else int(layer), base, False), None

    @staticmethod
    def _last_layer(path: Path | None) -> int | None:
        if path is None:
            return None
        import json

        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
        for key in ("num_hidden_layers", "n_layers", "num_layers", "n_layer"):
            if isinstance(cfg.get(key), int):
                return int(cfg[key])
        return None

    # ------------------------------------------------------------------ contract

    def availability(self) -> str | None:
        try:
            plan, reason = self._plan()
        except MetricInputError as exc:
            return str(exc)
        return reason if plan is None else None

    @property
    def label(self) -> str:
        """Plain name of the model in use, e.g. ``all-MiniLM-L6-v2(packaged-fallback)``."""
        plan, reason = self._plan()
        if plan is None:
            raise MetricUnavailable(reason or "bertscore unavailable")
        return plan.label

    @property
    def is_fallback(self) -> bool:
        """Whether the packaged MiniLM stands in for the default distilroberta-base."""
        plan, _ = self._plan()
        return bool(plan and plan.fallback)

    def _layer_for(self, plan: _Plan) -> int:
        if plan.num_layers is not None:
            return plan.num_layers
        if self._layer is not None:
            return self._layer
        last = self._last_layer(plan.path)
        if last is None:
            raise MetricUnavailable(f"bertscore: cannot tell the number of layers of {plan.ref}")
        return last

    @property
    def corpus_dependent(self) -> bool:
        """With idf fitted per call, every value depends on all references of the scored set.

        The scoring runner reads the registry's rule (``idf`` on), which is this property for
        instances made from options; an instance given :meth:`fit_idf` is not dependent.
        """
        return bool(self.options["idf"]) and self._fitted_idf is None

    def signature(self) -> str:
        plan, reason = self._plan()
        if plan is None:
            raise MetricUnavailable(reason or "bertscore unavailable")
        if plan.path is not None:
            ident = "sha256:" + hf.fingerprint(plan.path)[:16]
        else:
            # Not downloaded yet: the pinned revision, or the commit an unpinned hub id was
            # pinned to when the plan located it (backend.metrics.hf).
            ident = f"rev:{hf.pinned(plan.ref).revision}"
        parts = [
            "bertscore",
            f"model:{plan.label}@{ident}",
            f"L{self._layer_for(plan)}",
        ]
        if not self.options["idf"]:
            parts.append("no-idf")
        elif self._fitted_idf_hash is not None:
            parts.append(f"idf:refs-{self._fitted_idf_hash}")
        else:
            parts.append("idf:scored-set")
        if plan.baseline is None:
            parts.append("no-rescale")
        else:
            p, r, f = plan.baseline
            parts.append(f"rescale:P={p!r},R={r!r},F={f!r}")
        if str(self.options["dtype"]).lower() != "fp32":
            parts.append(f"dtype:{self.options['dtype']}")
        parts.append(f"version:{IMPL_VERSION}(transformers={_transformers_version()})")
        return "|".join(parts)

    def load(self, device: str = "cpu") -> None:
        chosen = self.options["device"] if self.options["device"] is not None else device
        super().load(hf.pick_device(chosen))

    def _load(self) -> None:
        from transformers import GPT2Tokenizer, RobertaTokenizer

        plan, reason = self._plan()
        if plan is None:
            raise MetricUnavailable(reason or "bertscore unavailable")
        path = plan.path if plan.path is not None else hf.resolve(plan.ref)
        tok = hf.load_tokenizer(path)
        if isinstance(tok, GPT2Tokenizer | RobertaTokenizer) and not getattr(
            tok, "add_prefix_space", False
        ):
            # bert_score encodes with add_prefix_space=True; transformers 5 ignores that flag
            # at encode time, so it has to be set when the tokenizer is built.
            tok = hf.load_tokenizer(path, add_prefix_space=True)
        try:
            self._torch_dtype = resolve_dtype(self.device, str(self.options["dtype"]))
        except ValueError as exc:
            raise ValueError(f"bertscore: {exc}") from None
        layer = self._layer_for(plan)

        def build() -> tuple[Any, int | None]:
            model = hf.load_model(path, device=self.device, dtype=self._torch_dtype)
            if (
                getattr(model, "encoder", None) is not None
                and getattr(model, "decoder", None) is not None
            ):
                model = model.encoder
            return model, self._truncate(model, layer)

        # Keyed by the layer too, since the model is cut above it: in a scoring pool the
        # bertscore family and RadCliQ's BERTScore input on the same weights share one copy.
        model, self._hidden_state_index = self.resources.get(
            ("bertscore-encoder", str(path), self.device, str(self._torch_dtype), layer), build
        )
        self._layer = layer
        self._tok = tok
        self._model = model
        # One cache per encoder (weights, layer, device, dtype): embeddings are only
        # interchangeable between instances that would compute the same ones. The first
        # instance's cache_mb sets its bound.
        self._cache = self.resources.get(
            ("bertscore-embeddings", str(path), self.device, str(self._torch_dtype), layer),
            lambda: EmbeddingCache(int(float(self.options["cache_mb"]) * 2**20)),
        )

        max_len = int(getattr(tok, "model_max_length", 512) or 512)
        if max_len > 100_000:  # transformers' "no limit" sentinel
            max_pos = int(getattr(model.config, "max_position_embeddings", 512))
            offset = (tok.pad_token_id + 1) if isinstance(tok, RobertaTokenizer) else 0
            max_len = max_pos - offset
        self._max_len = max_len
        self._special_weight0 = {i for i in (tok.cls_token_id, tok.sep_token_id) if i is not None}
        self._n_special_empty = len(tok("", add_special_tokens=True)["input_ids"])
        self._pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0

    @staticmethod
    def _truncate(model: Any, layer: int) -> int | None:
        """Drop layers above ``layer`` where the architecture allows it (as bert_score does).

        Returns ``None`` when the model now outputs layer ``layer`` as its last hidden state,
        else the index into ``hidden_states`` to read.
        """
        import torch

        for owner_name in ("encoder", "transformer"):
            owner = getattr(model, owner_name, None)
            stack = getattr(owner, "layer", None) if owner is not None else None
            if isinstance(stack, torch.nn.ModuleList):
                if not 0 <= layer <= len(stack):
                    raise MetricUnavailable(
                        f"bertscore: num_layers={layer} outside 0..{len(stack)} for this model"
                    )
                owner.layer = torch.nn.ModuleList(list(stack)[:layer])
                return None
        stack = getattr(model, "layers", None)
        if isinstance(stack, torch.nn.ModuleList):
            # ModernBERT (BART-style stack): bert_score and RadEval cut ``layers`` and read the
            # last hidden state, which ModernBERT takes after its final norm; its
            # ``hidden_states[layer]`` comes before that norm and would give other numbers.
            if not 0 <= layer <= len(stack):
                raise MetricUnavailable(
                    f"bertscore: num_layers={layer} outside 0..{len(stack)} for this model"
                )
            model.layers = torch.nn.ModuleList(list(stack)[:layer])
            return None
        n = BertScore._last_layer_from_config(model.config)
        if n is not None and not 0 <= layer <= n:
            raise MetricUnavailable(f"bertscore: num_layers={layer} outside 0..{n} for this model")
        return layer

    @staticmethod
    def _last_layer_from_config(config: Any) -> int | None:
        for key in ("num_hidden_layers", "n_layers", "num_layers", "n_layer"):
            v = getattr(config, key, None)
            if isinstance(v, int):
                return v
        return None

    # ------------------------------------------------------------------ idf

    def _encode(self, texts: Sequence[str]) -> list[list[int]]:
        stripped = [t.strip() for t in texts]
        enc = self._tok(
            stripped, add_special_tokens=True, truncation=True, max_length=self._max_len
        )
        return [list(ids) for ids in enc["input_ids"]]

    def fit_idf(self, *, references: Sequence[str]) -> None:
        """Fix the idf weights to those of ``references`` (the whole scored set).

        Use when a set is scored in several ``score`` calls; without it, idf is computed over
        the references of each call. Requires ``idf=True``.

        Raises:
            ValueError: when ``idf`` is off or ``references`` is empty.
        """
        if not self.options["idf"]:
            raise ValueError("bertscore: fit_idf needs idf=True")
        refs = list(references)
        if not refs:
            raise ValueError("bertscore: fit_idf needs at least one reference")
        if not self._loaded:
            self.load(self.device)
        self._fitted_idf, self._fitted_idf_default = self._idf_dict(self._encode(refs))
        h = hashlib.sha256()
        for r in refs:
            h.update(r.encode("utf-8") + b"\x00")
        self._fitted_idf_hash = h.hexdigest()[:16]

    def corpus_statistics(
        self,
        *,
        references: Sequence[str],
        candidates: Sequence[str],
        images: Sequence[Any] | None = None,
    ) -> tuple[dict[int, float], float]:
        """The idf weights of the whole scored set's references, for scoring it in chunks.

        ``score(..., corpus=stats)`` uses them instead of the references of its own call, so
        a chunk's values equal those of the one call over the whole set (see
        :class:`~backend.metrics.base.CorpusStatistics`). Loads the tokenizer (and model).

        Args:
            references: The references of every pair of the set, duplicates included.
            candidates: Unused (idf counts references only).
            images: Unused.

        Returns:
            ``(token id -> idf, idf of an unseen token)``.

        Raises:
            ValueError: when ``idf`` is off.
        """
        if not self.options["idf"]:
            raise ValueError("bertscore: corpus statistics need idf=True")
        if not self._loaded:
            self.load(self.device)
        # Each distinct text once, as _score tokenises it; df counts every pair's reference.
        refs = [t.strip() for t in references]
        distinct = list(dict.fromkeys(refs))
        ids = dict(zip(distinct, self._encode(distinct), strict=True))
        return self._idf_dict([ids[t] for t in refs])

    @staticmethod
    def _idf_dict(ref_ids: list[list[int]]) -> tuple[dict[int, float], float]:
        m = len(ref_ids)
        df: Counter[int] = Counter()
        for ids in ref_ids:
            df.update(set(ids))
        return {t: math.log((m + 1) / (c + 1)) for t, c in df.items()}, math.log(m + 1)

    # ------------------------------------------------------------------ scoring

    def _embed(self, unique_ids: list[list[int]]) -> list[Any]:
        """Normalised token embeddings of each sequence (fp32, on the model's device).

        Sequences already in the cache are not run again; the others are run in batches of
        similar length and kept.
        """
        import torch

        out: list[Any] = [None] * len(unique_ids)
        cache = self._cache
        todo: list[int] = []
        for i, ids in enumerate(unique_ids):
            hit = cache.get(tuple(ids)) if cache is not None and cache.max_bytes else None
            if hit is None:
                todo.append(i)
            else:
                out[i] = hit
        if not todo:
            return out
        lengths = [len(unique_ids[i]) for i in todo]
        bs = int(self.options["batch_size"])
        with torch.inference_mode():
            for batch in hf.length_sorted_batches(lengths, bs, max_tokens=bs * 128):
                idx = [todo[b] for b in batch]
                longest = lengths[batch[0]]
                ids = torch.full((len(idx), longest), self._pad_id, dtype=torch.long)
                mask = torch.zeros((len(idx), longest), dtype=torch.long)
                for row, i in enumerate(idx):
                    n = len(unique_ids[i])
                    ids[row, :n] = torch.tensor(unique_ids[i], dtype=torch.long)
                    mask[row, :n] = 1
                ids = ids.to(self.device)
                mask = mask.to(self.device)
                if self._hidden_state_index is None:
                    hidden = self._model(ids, attention_mask=mask)[0]
                else:
                    res = self._model(ids, attention_mask=mask, output_hidden_states=True)
                    hidden = res.hidden_states[self._hidden_state_index]
                hidden = hidden.float()
                hidden = hidden / hidden.norm(dim=-1, keepdim=True)
                for row, i in enumerate(idx):
                    # clone: a view would keep the whole padded batch alive in the cache.
                    emb = hidden[row, : len(unique_ids[i])].clone()
                    out[i] = emb
                    if cache is not None and cache.max_bytes:
                        cache.put(tuple(unique_ids[i]), emb)
        return out

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
        corpus: tuple[dict[int, float], float] | None = None,
    ) -> MetricResult:
        import torch
        from torch.nn.utils.rnn import pad_sequence

        plan, _ = self._plan()
        assert plan is not None  # load() succeeded

        # Tokenise each distinct text once; duplicates share one forward pass.
        texts = list(dict.fromkeys(t.strip() for t in references + candidates))
        pos = {t: i for i, t in enumerate(texts)}
        all_ids = self._encode(texts)
        ref_idx = [pos[t.strip()] for t in references]
        cand_idx = [pos[t.strip()] for t in candidates]

        if self.options["idf"]:
            if corpus is not None:
                idf, unseen = corpus
            elif self._fitted_idf is not None:
                idf, unseen = self._fitted_idf, self._fitted_idf_default
            else:
                idf, unseen = self._idf_dict([all_ids[i] for i in ref_idx])
            weights = [[idf.get(t, unseen) for t in ids] for ids in all_ids]
        else:
            zero = self._special_weight0
            weights = [[0.0 if t in zero else 1.0 for t in ids] for ids in all_ids]

        # Only texts that occur in a pair are embedded (all of them here, but cheaply checked).
        emb = self._embed(all_ids)
        w_t = [torch.tensor(w, dtype=torch.float64) for w in weights]
        empty = [len(ids) <= self._n_special_empty for ids in all_ids]

        n = len(references)
        p_out = [0.0] * n
        r_out = [0.0] * n
        worst: list[dict[str, Any]] = [{} for _ in range(n)]
        chunk = max(int(self.options["batch_size"]), 1) * 4
        order = sorted(range(n), key=lambda k: len(all_ids[ref_idx[k]]) + len(all_ids[cand_idx[k]]))
        with torch.inference_mode():
            for start in range(0, n, chunk):
                ks = order[start : start + chunk]
                h_e = pad_sequence([emb[cand_idx[k]] for k in ks], batch_first=True)
                r_e = pad_sequence([emb[ref_idx[k]] for k in ks], batch_first=True)
                h_w = pad_sequence([w_t[cand_idx[k]] for k in ks], batch_first=True)
                r_w = pad_sequence([w_t[ref_idx[k]] for k in ks], batch_first=True)
                h_len = torch.tensor([len(all_ids[cand_idx[k]]) for k in ks])
                r_len = torch.tensor([len(all_ids[ref_idx[k]]) for k in ks])
                h_mask = torch.arange(h_e.shape[1])[None, :] < h_len[:, None]
                r_mask = torch.arange(r_e.shape[1])[None, :] < r_len[:, None]
                sim = torch.bmm(h_e, r_e.transpose(1, 2))
                valid = (h_mask[:, :, None] & r_mask[:, None, :]).to(sim.device)
                sim = sim.masked_fill(~valid, _PAD_SIM)
                wp = sim.max(dim=2).values.double().cpu()
                wr = sim.max(dim=1).values.double().cpu()
                # Padded rows carry weight 0, so their -2 never reaches a sum.
                p = (wp * h_w).sum(dim=1) / h_w.sum(dim=1)
                r = (wr * r_w).sum(dim=1) / r_w.sum(dim=1)
                # Worst best-match of a weighted token: shows weak alignment, and flags pairs
                # where bert_score's padding rule (a padded 0 joins the max) would differ.
                min_p = wp.masked_fill(h_w == 0, math.inf).min(dim=1).values
                min_r = wr.masked_fill(r_w == 0, math.inf).min(dim=1).values
                for j, k in enumerate(ks):
                    p_out[k] = float(p[j])
                    r_out[k] = float(r[j])
                    worst[k] = {
                        "min_match_p": float(min_p[j]) if math.isfinite(min_p[j]) else None,
                        "min_match_r": float(min_r[j]) if math.isfinite(min_r[j]) else None,
                    }

        f_out = [0.0] * n
        for k in range(n):
            if empty[cand_idx[k]] or empty[ref_idx[k]]:
                p_out[k] = r_out[k] = 0.0
            p, r = p_out[k], r_out[k]
            if math.isnan(p) or math.isnan(r):
                f_out[k] = math.nan
            elif p + r == 0.0:
                f_out[k] = 0.0
            else:
                f_out[k] = 2.0 * p * r / (p + r)

        if plan.baseline is not None:
            bp, br, bf = plan.baseline
            p_out = [(x - bp) / (1.0 - bp) for x in p_out]
            r_out = [(x - br) / (1.0 - br) for x in r_out]
            f_out = [(x - bf) / (1.0 - bf) for x in f_out]

        def mean(xs: list[float]) -> float:
            finite = [x for x in xs if not math.isnan(x)]
            return math.fsum(finite) / len(finite) if finite else math.nan

        return MetricResult(
            values={"bertscore_p": p_out, "bertscore_r": r_out, "bertscore_f": f_out},
            corpus={
                "bertscore_p_mean": mean(p_out),
                "bertscore_r_mean": mean(r_out),
                "bertscore_f_mean": mean(f_out),
            },
            details=worst,
        )
