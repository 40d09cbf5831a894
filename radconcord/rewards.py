"""Report metrics as reward functions for RL fine-tuning (TRL's ``GRPOTrainer`` and friends).

:func:`reward_fn` returns a callable with TRL's reward-function signature::

    reward(prompts=..., completions=..., **dataset_columns) -> list[float]

``GRPOTrainer`` calls each reward function with ``prompts``, ``completions`` and
``completion_ids`` plus every other dataset column as a keyword argument (one value per
completion, repeated for the completions of one prompt) and ``trainer_state``. The reward
reads the reference reports from the column named ``reference_column`` (default
``"reference"``). Completions are strings (standard datasets) or lists of chat messages
(conversational datasets: ``[{"role": "assistant", "content": "..."}]``).

Warm models: the callable keeps one :class:`backend.scoring.runner.MetricPool`, so a model
metric (BERTScore, RadGraph, ...) loads its weights on the first call and reuses them for every
later step. Nothing is written to a database.

Example (GRPO)::

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from radconcord.rewards import reward_fn

    data = Dataset.from_dict({"prompt": prompts, "reference": reports})
    trainer = GRPOTrainer(
        model="Qwen/Qwen2.5-0.5B-Instruct",
        reward_funcs=[reward_fn("bertscore_f"), reward_fn("radgraph_combined")],
        args=GRPOConfig(output_dir="out", num_generations=4),
        train_dataset=data,
    )
    trainer.train()
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from radconcord.api import InputError

__all__ = ["MetricReward", "completion_text", "reward_fn"]


def completion_text(completion: Any) -> str:  # noqa: ANN401 - str or chat messages
    """The report text of one completion, as TRL passes it.

    Args:
        completion: A string, or a list of chat messages (dicts with ``role`` and
            ``content``; ``content`` a string or a list of ``{"type": "text", "text": ...}``
            parts). The assistant messages' text is joined; without roles, every message's.

    Raises:
        InputError: Anything else (the message names the type found).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence) and all(isinstance(m, Mapping) for m in completion):
        messages = list(completion)
        if any("role" in m for m in messages):
            messages = [m for m in messages if m.get("role") == "assistant"]
        return "\n".join(_content_text(m.get("content")) for m in messages).strip("\n")
    raise InputError(
        "completion: expected a string or a list of chat messages"
        f" ({{'role': 'assistant', 'content': ...}}), got {type(completion).__name__}"
    )


def _content_text(content: Any) -> str:  # noqa: ANN401 - message content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise InputError(f"message content: expected text, got {type(content).__name__}")


class MetricReward:
    """One metric key as a reward function (build it with :func:`reward_fn`).

    Attributes:
        key: The output key rewarded (``bleu4``, ``bertscore_f``, ...).
        family: Its metric family.
        options: The family's options (part of the metric's signature).
        __name__: ``radconcord_<key>``, the name TRL logs the reward under.
    """

    def __init__(
        self,
        key: str,
        family: str,
        options: Mapping[str, Any],
        *,
        reference_column: str,
        device: str,
        batch_size: int,
        empty_value: float | None,
        orient: bool,
        higher_is_better: bool,
    ) -> None:
        """Use :func:`reward_fn`; arguments as documented there."""
        self.key = key
        self.family = family
        self.options = dict(options)
        self.reference_column = reference_column
        self.device = device
        self.batch_size = batch_size
        self.empty_value = empty_value
        self.orient = orient
        self.higher_is_better = higher_is_better
        self.__name__ = f"radconcord_{key}"
        self._pool: Any = None
        self.calls = 0

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the warm models (a copy in another process loads its own)."""
        state = dict(self.__dict__)
        state["_pool"] = None
        return state

    @property
    def pool(self) -> Any:  # noqa: ANN401 - backend.scoring.runner.MetricPool
        """The warm metric instances and models kept between calls."""
        if self._pool is None:
            from radconcord.backend.scoring.runner import MetricPool

            self._pool = MetricPool()
        return self._pool

    def close(self) -> None:
        """Free the models held between calls (the next call loads them again)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """Score each completion against its reference; TRL's reward-function signature.

        Args:
            prompts: The prompts (unused: the reward compares with the reference).
            completions: One completion per reward (string or chat messages).
            **kwargs: Dataset columns, one value per completion; the references are in
                ``kwargs[reference_column]`` (or ``references=``). Others (``trainer_state``,
                ``completion_ids``, ...) are ignored.

        Returns:
            One float per completion: the metric value (negated for a lower-is-better key
            when ``orient``), ``empty_value`` where the completion or reference is empty.

        Raises:
            InputError: No reference column, or lengths that differ.
        """
        from radconcord.api import score

        if completions is None:
            raise InputError(f"{self.__name__}: called without completions")
        refs = kwargs.get("references", kwargs.get(self.reference_column))
        if refs is None:
            given = ", ".join(sorted(k for k in kwargs if k not in ("trainer_state",))) or "none"
            raise InputError(
                f"{self.__name__}: no '{self.reference_column}' column among the reward"
                f" function's keyword arguments (got: {given}); name the dataset column that"
                " holds the reference reports with reward_fn(..., reference_column=NAME)"
            )
        texts = [completion_text(c) for c in completions]
        refs = [completion_text(r) for r in refs]
        if len(refs) != len(texts):
            raise InputError(
                f"{self.__name__}: {len(texts)} completions but {len(refs)} references"
            )
        frame = score(references=refs, candidates=texts, metrics=[self.key],
                      options={self.family: self.options} if self.options else None,
                      device=self.device, batch_size=self.batch_size, pool=self.pool)
        self.calls += 1
        sign = -1.0 if self.orient and not self.higher_is_better else 1.0
        out: list[float | None] = []
        for value in frame[self.key].tolist():
            if math.isnan(value):
                out.append(self.empty_value)
            else:
                out.append(sign * float(value))
        return out


def reward_fn(
    metric: str,
    *,
    reference_column: str = "reference",
    device: str = "auto",
    batch_size: int = 32,
    empty_value: float | None = 0.0,
    orient: bool = True,
    **options: Any,
) -> MetricReward:
    """A reward function scoring completions against reference reports with one metric key.

    Args:
        metric: One output key (``"bleu4"``, ``"rougeL"``, ``"bertscore_f"``,
            ``"radgraph_combined"``, ...) or a family with a single key (``"meteor"``).
        reference_column: Dataset column with the reference report of each prompt.
        device: ``"auto"``, ``"cpu"`` or ``"cuda[:N]"`` for model metrics.
        batch_size: Completions per metric call.
        empty_value: Reward of an empty completion (or reference), where the metric is
            undefined; ``None`` gives TRL a missing reward (NaN, ignored in its sum).
        orient: Negate lower-is-better keys (``radcliq_v1``) so that higher is always better.
        **options: The metric family's options, e.g. ``reward_fn("bertscore_f",
            model="/path/to/encoder")``; as ``--set family.option=value``.

    Returns:
        A picklable callable ``reward(prompts=None, completions=..., **columns) ->
        list[float]`` that keeps its models warm between calls (``.close()`` frees them).

    Raises:
        InputError: Unknown metric, a family with several keys, a metric that does not score
            pairs, or an unknown option (checked now, not at the first training step).
    """
    from radconcord.backend.metrics import registry
    from radconcord.backend.scoring.runner import ScoringError, requested_keys

    try:
        keys = requested_keys([metric])
    except ScoringError as exc:
        raise InputError(f"reward_fn: {exc}") from None
    if len(keys) != 1:
        raise InputError(
            f"reward_fn: '{metric}' gives {len(keys)} keys ({', '.join(keys)}); name one of them"
        )
    key = keys[0]
    family = registry.KEY_TO_FAMILY[key]
    if batch_size < 1:
        raise InputError(f"reward_fn: batch_size must be at least 1 (got {batch_size})")
    from radconcord.backend.metrics.base import MetricUnavailable

    try:
        registry.create(family, **options)
    except (ImportError, MetricUnavailable):
        pass  # reported at the first call, with what to install
    except (TypeError, ValueError, registry.UnknownMetric) as exc:
        raise InputError(f"reward_fn: metric '{family}': {exc}") from None
    return MetricReward(
        key, family, options, reference_column=reference_column, device=device,
        batch_size=batch_size, empty_value=empty_value, orient=orient,
        higher_is_better=registry.higher_is_better(key),
    )
