"""ER2Score (Liu et al., 2024): a causal-LM reward model with one sub-reward per error category.

Model. A causal LM backbone (its base transformer, no LM head) with a LoRA adapter (peft
``LoraConfig`` on the attention projections) reads ``reward_text(reference, candidate)``; the
final hidden state of the last non-padding token goes through a linear head ``hidden -> 6``.
Output ``k`` is the sub-reward ``r_k`` for ReXVal category ``k`` (1-6, see
``backend.types.CATEGORIES``); ER2Score = ``sum_k r_k``. Every reward is "higher is
better": training pushes a candidate with fewer errors in category ``k`` to a higher ``r_k``.

Training (:func:`train_reward_model`) uses (accepted, rejected) candidates of the same reference.
With ``E`` the mean total error count and ``e_k`` the mean count of category ``k`` (clinically
significant plus insignificant, mean over raters), accepted has the smaller ``E`` and

* total margin ``m = s * (E_rej - E_acc)`` (> 0), sub-margins ``m_k = s * (e_k,rej - e_k,acc)``
  with ``s = margin_scale`` (default 0.25);
* ``L_total = -log sigmoid(R_acc - R_rej - m)`` with ``R = sum_k r_k``;
* for ``m_k != 0``: ``L_k = -log sigmoid(sign(m_k) * (r_k,acc - r_k,rej) - |m_k|)`` (the
  sub-reward of the candidate with fewer category-k errors must win by ``|m_k|``);
  for ``m_k = 0``: ``L_k = max(0, |r_k,acc - r_k,rej| - eps)^2`` with ``eps = 1e-2`` (equal
  counts hold the sub-rewards within ``eps``);
* ``L = mean over pairs of (L_total + lambda * sum_k L_k)``, ``lambda = 1``.

Memory. The backbone is frozen, but LoRA sits in every attention layer, so a backward pass
runs through all of them and autograd keeps each layer's activations: for SmolLM2-135M (30
layers) and a step of 8 pairs (16 texts of ~250 tokens, padded to the longest) that was most
of a 10 GB peak. A step therefore runs its pairs in micro-batches of ``micro_batch`` pairs
(accepted and rejected together, padded to the longest of the micro-batch only), each scaled
by its share of the step and back-propagated at once, so gradients accumulate to those of the
whole step (same time per step: padding to the longest of 4 texts instead of 16 saves what
the smaller matrix products lose); with ``gradient_checkpointing`` (opt-in) each layer's
activations are also recomputed in the backward pass instead of kept (about 40 % more time,
less memory again). Neither changes the loss beyond float rounding. Measured on SmolLM2-135M,
steps of 8 pairs (``bench/bench_er2train_memory.py``): peak RSS 8.9 GiB and 6.3 s/step before,
2.3 GiB and 5.8 s/step with micro-batches, 1.5 GiB and 8.2 s/step with checkpointing too.

Saved adapter folder (``save_pretrained`` of peft) also holds ``reward_head.safetensors`` and
``er2score.json`` (base model ref and fingerprint, categories, study, seed, hyperparameters).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from radconcord.backend.metrics import hf, llm
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    OutputSpec,
    Resources,
)
from radconcord.backend.util import staging_dir

logger = logging.getLogger(__name__)

N_REWARDS = 6
CATEGORY_KEYS = tuple(f"er2_cat{i}" for i in range(1, N_REWARDS + 1))
META_FILE = "er2score.json"
HEAD_FILE = "reward_head.safetensors"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
EPS = 1e-2
LAMBDA = 1.0
DEFAULT_MARGIN_SCALE = 0.25
MAX_WORDS = 300
FORMAT_VERSION = 1
#: Attention projection names LoRA is attached to, by architecture family.
_ATTENTION_TARGETS = (
    ("q_proj", "k_proj", "v_proj", "o_proj"),
    ("c_attn", "c_proj"),
    ("query_key_value", "dense"),
    ("Wqkv", "out_proj"),
)


def reward_text(reference: str, candidate: str) -> str:
    """The text the reward model reads (reports cut to :data:`MAX_WORDS` words)."""
    ref = llm.truncate_words(reference, MAX_WORDS)
    cand = llm.truncate_words(candidate, MAX_WORDS)
    return f"Reference report: {ref}\nCandidate report: {cand}\nEnd of candidate."


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class RatedCandidate:
    """A rated pair: texts and the mean error count per category (1-6 at index 0-5).

    Attributes:
        pair_id: Identifier for messages (opaque pair id).
        group: Pairs with the same group share a reference (the case).
        reference: Reference report.
        candidate: Candidate report.
        errors: Mean errors per category over the counted raters.
    """

    pair_id: str
    group: str
    reference: str
    candidate: str
    errors: tuple[float, ...]

    @property
    def total(self) -> float:
        """Mean total errors."""
        return float(sum(self.errors))


@dataclass(frozen=True)
class PreferencePair:
    """Accepted (fewer total errors) and rejected candidates of one reference, with margins."""

    accepted: RatedCandidate
    rejected: RatedCandidate
    margin: float
    sub_margins: tuple[float, ...]


def preference_pairs(
    items: Sequence[RatedCandidate], margin_scale: float = DEFAULT_MARGIN_SCALE
) -> list[PreferencePair]:
    """Every pair of candidates of the same reference whose mean total errors differ.

    Candidates with equal totals give no preference and are skipped.
    """
    groups: dict[str, list[RatedCandidate]] = {}
    for it in items:
        groups.setdefault(it.group, []).append(it)
    out: list[PreferencePair] = []
    for key in sorted(groups):
        members = groups[key]
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                a, b = members[i], members[j]
                if a.total == b.total:
                    continue
                acc, rej = (a, b) if a.total < b.total else (b, a)
                out.append(
                    PreferencePair(
                        acc,
                        rej,
                        margin_scale * (rej.total - acc.total),
                        tuple(
                            margin_scale * (r - c)
                            for c, r in zip(acc.errors, rej.errors, strict=True)
                        ),
                    )
                )
    return out


def split_groups(
    items: Sequence[RatedCandidate], heldout: float, seed: int
) -> tuple[list[RatedCandidate], list[RatedCandidate]]:
    """Split by reference (group) so no reference is in both parts.

    Args:
        items: Rated candidates.
        heldout: Fraction of groups held out (0 <= heldout < 1).
        seed: Shuffle seed.

    Returns:
        ``(train, heldout)`` item lists.
    """
    if not 0.0 <= heldout < 1.0:
        raise ValueError(f"heldout must be in [0, 1), got {heldout}")
    groups = sorted({it.group for it in items})
    random.Random(seed).shuffle(groups)
    n_held = int(round(heldout * len(groups)))
    if heldout > 0 and len(groups) > 1:
        n_held = min(max(n_held, 1), len(groups) - 1)
    held = set(groups[:n_held])
    return [it for it in items if it.group not in held], [it for it in items if it.group in held]


# --------------------------------------------------------------------------- loss


def reward_loss(
    r_acc: Any,
    r_rej: Any,
    margin: Any,
    sub_margins: Any,
    *,
    eps: float = EPS,
    lam: float = LAMBDA,
) -> Any:
    """The reward-control loss (see the module docstring), averaged over the batch.

    Args:
        r_acc: ``(B, K)`` sub-rewards of the accepted candidates.
        r_rej: ``(B, K)`` sub-rewards of the rejected candidates.
        margin: ``(B,)`` total margins.
        sub_margins: ``(B, K)`` sub-margins.
        eps: Tolerance for categories with equal counts.
        lam: Weight of the sub-reward term.
    """
    import torch
    from torch.nn import functional as F  # noqa: N812

    total = -F.logsigmoid(r_acc.sum(dim=1) - r_rej.sum(dim=1) - margin)
    diff = r_acc - r_rej
    nonzero = sub_margins != 0
    directed = -F.logsigmoid(torch.sign(sub_margins) * diff - sub_margins.abs())
    held = torch.clamp(diff.abs() - eps, min=0.0) ** 2
    sub = torch.where(nonzero, directed, held).sum(dim=1)
    return (total + lam * sub).mean()


# --------------------------------------------------------------------------- model


def _lora_targets(model: Any) -> list[str]:
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    for group in _ATTENTION_TARGETS:
        found = [t for t in group if t in names]
        if found:
            return found
    raise ValueError("no known attention projection modules to attach LoRA to")


class RewardModel:
    """Backbone (+ LoRA) + linear multi-reward head; ``rewards(texts)`` -> ``(n, 6)`` tensor."""

    def __init__(
        self,
        base_folder: Path,
        *,
        device: str = "cpu",
        dtype: Any = None,
        adapter: Path | None = None,
        lora_r: int = 8,
        lora_alpha: int = 16,
        seed: int = 0,
        max_length: int = 512,
    ) -> None:
        import torch
        from peft import LoraConfig, PeftModel, get_peft_model
        from safetensors.torch import load_file
        from transformers import AutoModel

        self.device = device
        self.max_length = max_length
        self.tokenizer = hf.load_tokenizer(base_folder)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "right"
        backbone = hf.load_model(base_folder, device="cpu", dtype=dtype, model_class=AutoModel)
        hidden = int(backbone.config.hidden_size)
        torch.manual_seed(seed)
        if adapter is not None:
            self.backbone = PeftModel.from_pretrained(backbone, str(adapter), is_trainable=False)
        else:
            cfg = LoraConfig(
                r=lora_r,
                lora_alpha=lora_alpha,
                lora_dropout=0.0,
                bias="none",
                target_modules=_lora_targets(backbone),
            )
            self.backbone = get_peft_model(backbone, cfg)
        self.head = torch.nn.Linear(hidden, N_REWARDS)
        torch.nn.init.normal_(self.head.weight, std=1.0 / math.sqrt(hidden))
        torch.nn.init.zeros_(self.head.bias)
        if adapter is not None:
            state = load_file(str(Path(adapter) / HEAD_FILE))
            self.head.load_state_dict(state)
        self.backbone.to(device)
        self.head.to(device=device, dtype=next(self.backbone.parameters()).dtype)
        self.lock = threading.Lock()

    def enable_gradient_checkpointing(self) -> bool:
        """Recompute layer activations in backward passes (training mode only).

        Returns:
            Whether the backbone supports it (architectures without it train as before).
        """
        base = self.backbone.get_base_model() if hasattr(self.backbone, "get_base_model") else (
            self.backbone
        )
        if not getattr(base, "supports_gradient_checkpointing", False):
            return False
        # Non-reentrant: works although the frozen embeddings' output needs no gradient.
        kwargs = {"use_reentrant": False}
        if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5 name
            base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        return True

    def trainable_parameters(self) -> list[Any]:
        """LoRA and head parameters (the backbone stays frozen)."""
        params = [p for p in self.backbone.parameters() if p.requires_grad]
        return params + list(self.head.parameters())

    def forward(self, texts: Sequence[str]) -> Any:
        """``(n, 6)`` sub-rewards with gradients (no ``inference_mode``)."""
        import torch

        enc = self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        ).to(self.device)
        out = self.backbone(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        hidden = out.last_hidden_state
        mask = enc["attention_mask"]
        # Index of the last attended position: correct for right and left padding alike.
        positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
        last = (positions * mask).argmax(dim=1)
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return self.head(pooled).float()

    def rewards(self, texts: Sequence[str], batch_size: int = 16) -> list[list[float]]:
        """Sub-rewards per text (inference), in input order."""
        import torch

        self.backbone.eval()

        def run(batch: list[str]) -> list[list[float]]:
            with self.lock, torch.inference_mode():
                return self.forward(batch).cpu().tolist()

        return hf.map_sorted_by_length(
            list(texts), run, lengths=[len(t) for t in texts], batch_size=batch_size
        )

    def save(self, folder: Path) -> None:
        """Write the LoRA adapter and head weights into ``folder``."""
        from safetensors.torch import save_file

        self.backbone.save_pretrained(str(folder))
        head = self.head.state_dict()
        state = {k: v.detach().float().cpu().contiguous() for k, v in head.items()}
        save_file(state, str(folder / HEAD_FILE))


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters recorded with a trained adapter."""

    epochs: int = 3
    lr: float = 1e-4
    seed: int = 0
    batch_size: int = 8
    lora_r: int = 8
    lora_alpha: int = 16
    margin_scale: float = DEFAULT_MARGIN_SCALE
    eps: float = EPS
    lam: float = LAMBDA
    max_length: int = 512
    max_steps: int | None = None
    #: Pairs per forward/backward pass within a step (gradients accumulate over the step).
    micro_batch: int = 2
    #: Recompute each layer's activations in the backward pass instead of keeping them
    #: (SmolLM2-135M, steps of 8 pairs: 2.3 -> 1.5 GiB peak RSS, about 40 % more time).
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.micro_batch, bool) or not isinstance(self.micro_batch, int):
            raise ValueError(f"micro_batch must be an integer >= 1, got {self.micro_batch!r}")
        if self.micro_batch < 1:
            raise ValueError(f"micro_batch must be an integer >= 1, got {self.micro_batch}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


@dataclass
class TrainResult:
    """What a training run produced."""

    output: Path
    n_train_items: int
    n_train_pairs: int
    n_heldout_items: int
    steps: int
    seconds: float
    losses: list[float] = field(default_factory=list)
    tau_untrained: float = math.nan
    tau_trained: float = math.nan


def kendall_tau_vs_errors(scores: Sequence[float], items: Sequence[RatedCandidate]) -> float:
    """Kendall tau-b between ER2Score and the negated mean total errors (higher = agrees)."""
    from scipy.stats import kendalltau

    if len(items) < 2:
        return math.nan
    tau = kendalltau(list(scores), [-it.total for it in items]).statistic
    return float(tau)


def adapter_fingerprint(folder: Path) -> str:
    """sha256 over the adapter's weight, config and head files (hex)."""
    h = hashlib.sha256()
    for name in (*ADAPTER_FILES, HEAD_FILE):
        p = Path(folder) / name
        h.update(name.encode() + b"\x00")
        h.update(llm.file_sha256(p).encode())
    return h.hexdigest()


def _micro_loss(model: RewardModel, micro: Sequence[PreferencePair], config: TrainConfig) -> Any:
    """Mean loss of ``micro`` (accepted and rejected texts in one padded forward pass)."""
    import torch

    texts = [reward_text(p.accepted.reference, p.accepted.candidate) for p in micro]
    texts += [reward_text(p.rejected.reference, p.rejected.candidate) for p in micro]
    r = model.forward(texts)
    n = len(micro)
    margin = torch.tensor([p.margin for p in micro], device=r.device)
    sub = torch.tensor([p.sub_margins for p in micro], device=r.device)
    return reward_loss(r[:n], r[n:], margin, sub, eps=config.eps, lam=config.lam)


def train_reward_model(
    *,
    base: llm.LMRef,
    train_items: Sequence[RatedCandidate],
    heldout_items: Sequence[RatedCandidate] = (),
    output: Path,
    config: TrainConfig = TrainConfig(),  # noqa: B008 - frozen dataclass, safe default
    study: str = "",
    device: str = "cpu",
    progress: Callable[[int, int, float], None] | None = None,
    phase: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train LoRA + head on preference pairs of ``train_items`` and save to ``output``.

    Held-out Kendall tau is measured before training (LoRA is the identity at init, so this
    is the base model with an untrained head) and after.

    Args:
        base: Backbone causal LM.
        train_items: Rated candidates to build preference pairs from.
        heldout_items: Rated candidates for the before/after tau.
        output: New folder for the adapter (must not exist or be empty).
        config: Hyperparameters.
        study: Training study name (metadata).
        device: Torch device.
        progress: Called with ``(step, total_steps, loss)`` after each optimiser step.
        phase: Called with a short message when a stage without steps starts (loading the
            backbone, scoring the held-out pairs before and after training, saving), so a
            caller can show what the minutes outside the steps are spent on.

    Raises:
        ValueError: no preference pairs, or ``output`` is a non-empty folder.
    """
    import torch

    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"output folder {output} already exists and is not empty")
    pairs = preference_pairs(train_items, config.margin_scale)
    if not pairs:
        raise ValueError(
            "no training pairs: need references with at least two rated candidates whose"
            " total error counts differ"
        )
    started = time.monotonic()

    def say(message: str) -> None:
        if phase is not None:
            phase(message)

    say(f"loading the backbone {base.model}")
    folder = llm.resolve_folder(base)
    torch.manual_seed(config.seed)
    model = RewardModel(
        folder,
        device=device,
        lora_r=config.lora_r,
        lora_alpha=config.lora_alpha,
        seed=config.seed,
        max_length=config.max_length,
    )

    def held_tau(when: str) -> float:
        if len(heldout_items) < 2:
            return math.nan
        say(f"scoring {len(heldout_items)} held-out pairs {when} training")
        r = model.rewards([reward_text(i.reference, i.candidate) for i in heldout_items])
        return kendall_tau_vs_errors([sum(x) for x in r], heldout_items)

    result = TrainResult(
        output=output,
        n_train_items=len(train_items),
        n_train_pairs=len(pairs),
        n_heldout_items=len(heldout_items),
        steps=0,
        seconds=0.0,
    )
    result.tau_untrained = held_tau("before")
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=config.lr, weight_decay=0.0)
    rng = random.Random(config.seed)
    steps_per_epoch = math.ceil(len(pairs) / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    step = 0
    say(f"training: {total_steps} steps of up to {config.batch_size} preference pairs")
    if config.gradient_checkpointing and not model.enable_gradient_checkpointing():
        logger.info("er2score: %s has no gradient checkpointing; training without", base.model)
    model.backbone.train()
    while step < total_steps:
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for b in range(0, len(order), config.batch_size):
            if step >= total_steps:
                break
            batch = [pairs[i] for i in order[b : b + config.batch_size]]
            opt.zero_grad(set_to_none=True)
            step_loss = 0.0
            for m in range(0, len(batch), config.micro_batch):
                micro = batch[m : m + config.micro_batch]
                loss = _micro_loss(model, micro, config) * (len(micro) / len(batch))
                loss.backward()
                step_loss += float(loss.detach())
                # Free this micro-batch's graph before the next forward.
                del loss
            opt.step()
            step += 1
            result.losses.append(step_loss)
            if progress is not None:
                progress(step, total_steps, step_loss)
    result.steps = step
    result.tau_trained = held_tau("after")

    # Write everything into a temporary sibling and rename, so a failure leaves nothing.
    say("saving the adapter")
    with staging_dir(output.parent, ".er2-") as tmp:
        model.save(tmp)
        meta = {
            "format": FORMAT_VERSION,
            "base": {
                "model": base.model,
                "revision": base.revision,
                "fingerprint": llm.identity(base),
            },
            "categories": list(CATEGORY_KEYS),
            "study": study,
            "hyperparameters": asdict(config),
            "text_template": "v1",
            "n_train_pairs": len(pairs),
            "steps": step,
            "heldout_tau": {"untrained": result.tau_untrained, "trained": result.tau_trained},
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if output.exists():
            output.rmdir()
        os.replace(tmp, output)
    result.seconds = time.monotonic() - started
    return result


# --------------------------------------------------------------------------- metric


def read_metadata(adapter: str | Path) -> dict[str, Any]:
    """The ``er2score.json`` of an adapter folder.

    Raises:
        FileNotFoundError: when the folder or a required file is missing.
        ValueError: when the metadata is not valid JSON.
    """
    folder = Path(adapter).expanduser()
    for name in (META_FILE, HEAD_FILE, *ADAPTER_FILES):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"ER2Score adapter folder {folder} has no {name}")
    try:
        return json.loads((folder / META_FILE).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{folder / META_FILE}: invalid JSON ({exc})") from exc


def shared_reward_model(
    resources: Resources,
    base_folder: Path,
    adapter: Path,
    *,
    device: str,
    dtype: Any,
    max_length: int,
) -> RewardModel:
    """The reward model of ``resources`` for (base, adapter, device, dtype, max length)."""
    key = ("er2score", str(base_folder), adapter_fingerprint(adapter), device, str(dtype),
           max_length)
    return resources.get(
        key,
        lambda: RewardModel(
            base_folder, device=device, dtype=dtype, adapter=adapter, max_length=max_length
        ),
    )


class ER2Score(BaseMetric):
    """ER2Score and its six sub-rewards (all higher = fewer errors).

    Options:
        adapter: Folder written by ``python -m backend train-er2score`` (required).
        base: Override of the base model recorded in the adapter (same weights expected).
        base_revision: Revision for ``base``.
        batch_size: Texts per forward batch.
        dtype: ``fp32`` | ``bf16`` | ``fp16`` (half types on CUDA only).
        max_length: Token limit of the reward input.
    """

    spec = MetricSpec(
        name="er2score",
        outputs=(
            OutputSpec("er2score", True, "sum of the six sub-rewards"),
            *(
                OutputSpec(k, True, f"sub-reward for ReXVal category {i} (higher = fewer)")
                for i, k in enumerate(CATEGORY_KEYS, start=1)
            ),
        ),
        needs_model=True,
        citation="Liu et al., ER2Score, arXiv:2411.17301 (2024)",
    )
    defaults: dict[str, Any] = {
        "adapter": None,
        "base": None,
        "base_revision": None,
        "batch_size": 16,
        "dtype": "fp32",
        "max_length": 512,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._model: RewardModel | None = None

    def _meta(self) -> dict[str, Any]:
        return read_metadata(self.options["adapter"])

    def _base_ref(self, meta: dict[str, Any]) -> llm.LMRef:
        if self.options["base"]:
            return llm.LMRef(str(self.options["base"]), self.options["base_revision"])
        b = meta.get("base") or {}
        return llm.LMRef(str(b.get("model", "")), b.get("revision"))

    def availability(self) -> str | None:
        if not self.options["adapter"]:
            return (
                "ER2Score needs a trained adapter: train one with `python -m backend"
                " train-er2score --study NAME --base MODEL --output DIR` and pass"
                " er2score.adapter=DIR"
            )
        try:
            meta = self._meta()
        except (FileNotFoundError, ValueError) as exc:
            return str(exc)
        ref = self._base_ref(meta)
        reason = llm.availability(ref)
        if reason:
            return f"ER2Score base model: {reason}"
        want = (meta.get("base") or {}).get("fingerprint")
        have = llm.identity(ref)
        if want and want != have:
            return (
                f"ER2Score base model {ref.model} ({have}) is not the one the adapter was"
                f" trained on ({want})"
            )
        return None

    def _load(self) -> None:
        meta = self._meta()
        folder = llm.resolve_folder(self._base_ref(meta))
        dtype = hf.pick_dtype(self.device, self.options["dtype"])
        self._model = shared_reward_model(
            self.resources,
            folder,
            Path(self.options["adapter"]).expanduser().resolve(),
            device=self.device,
            dtype=dtype,
            max_length=int(self.options["max_length"]),
        )

    def _score(self, *, references: list[str], candidates: list[str], images: Any) -> MetricResult:
        assert self._model is not None
        texts = [reward_text(r, c) for r, c in zip(references, candidates, strict=True)]
        rewards = self._model.rewards(texts, int(self.options["batch_size"]))
        values: dict[str, list[float]] = {"er2score": [float(sum(r)) for r in rewards]}
        for k, key in enumerate(CATEGORY_KEYS):
            values[key] = [float(r[k]) for r in rewards]
        return MetricResult(values)

    def signature(self) -> str:
        adapter = self.options["adapter"]
        try:
            meta = self._meta()
            base = llm.identity(self._base_ref(meta))
            afp = adapter_fingerprint(Path(adapter).expanduser())[:16]
        except (FileNotFoundError, ValueError, TypeError):
            base, afp = "missing", f"missing:{adapter}"
        return (
            f"er2score|base:{base}|adapter:sha256:{afp}|dtype:{self.options['dtype']}"
            f"|maxlen:{self.options['max_length']}|words:{MAX_WORDS}|text:v1|version:1"
        )
