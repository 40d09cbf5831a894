"""Any RadEval metric as a RadConcord family (``radeval``), through RadEval's own API.

RadEval (``pip install radeval``, jbdel/RadEval) is what much of the field runs. When it is
installed (extra ``radconcord[radeval]``), ``--set radeval.metric=<name>`` runs RadEval's
metric ``<name>`` with ``RadEval(metrics=[name], per_sample=True)`` and stores its per-pair
values under the one output key ``radeval``; ``--set radeval.key=<key>`` picks one of the
metric's own keys (default: the first it lists, e.g. ``bleu`` for ``bleu``, ``rouge1`` for
``rouge``). RadEval's package version is in the signature, so a new RadEval release never
reuses cached values.

Two things RadEval does to its process are undone here: constructing ``RadEval`` turns every
Python warning off (``warnings.filterwarnings("ignore")``) and sets
``TOKENIZERS_PARALLELISM``; both are restored after construction, so the worker's own warnings
and settings are unchanged.

Direction: the key is registered higher-is-better, which holds for RadEval's similarity
metrics; for its error-like ones (RadCliQ) use RadConcord's own ``radcliq`` family, whose
direction is right.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
import warnings
from collections.abc import Sequence
from typing import Any, ClassVar

from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
)

#: The oldest RadEval whose API (``RadEval(metrics=..., per_sample=...)``) this bridge speaks.
MIN_VERSION = (2, 2)
NOT_INSTALLED = (
    "not installed: pip install 'radconcord[radeval]'. RadEval 2.2 requires torchvision and "
    "transformers>=5, and pip resolves torchvision to the torch build it was made for: on a "
    "CPU-only machine install the matching torch and torchvision pair first (see "
    "docs/metrics.md), or `pip install --no-deps radeval` for its lexical metrics alone"
)


def radeval_version() -> str | None:
    """The installed RadEval's version, or ``None`` when it is not installed."""
    if importlib.util.find_spec("radeval") is None:
        return None
    try:
        return importlib.metadata.version("radeval")
    except importlib.metadata.PackageNotFoundError:
        return None


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isascii() and ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


class RadEvalBridge(BaseMetric):
    """One RadEval metric, per pair, through ``radeval.RadEval``.

    Options:
        metric: RadEval's name of the metric (``bleu``, ``rouge``, ``bertscore``,
            ``radgraph``, ``green``, ...: ``radeval.metrics._registry.METRIC_REGISTRY``).
        key: Which of the metric's per-sample keys to store (default: its first).
    """

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="radeval",
        outputs=(OutputSpec("radeval", True, "a RadEval metric's per-pair value "
                                              "(radeval.metric, radeval.key)"),),
        needs_model=True,
        citation="Xu et al., RadEval, 2025 (jbdel/RadEval)",
    )
    defaults: ClassVar[dict[str, Any]] = {"metric": "bleu", "key": None}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        metric = self.options["metric"]
        if not isinstance(metric, str) or not metric:
            raise ValueError(f"radeval: metric must be a RadEval metric name, got {metric!r}")
        key = self.options["key"]
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError(f"radeval: key must be one of the metric's keys, got {key!r}")
        self._evaluator: Any = None
        self._key: str | None = key

    def availability(self) -> str | None:
        """Why RadEval cannot run here (not installed, too old, unknown metric), else None."""
        version = radeval_version()
        if version is None:
            return NOT_INSTALLED
        if _version_tuple(version) < MIN_VERSION:
            return (f"radeval {version} is installed; this bridge needs radeval >= "
                    f"{'.'.join(map(str, MIN_VERSION))} (pip install -U 'radconcord[radeval]')")
        from radeval.metrics._registry import METRIC_REGISTRY  # a dict: imports no metric

        if self.options["metric"] not in METRIC_REGISTRY:
            return (f"radeval has no metric {self.options['metric']!r} (it has: "
                    f"{', '.join(sorted(METRIC_REGISTRY))})")
        return None

    def _load(self) -> None:
        from radeval import RadEval

        saved_env = os.environ.get("TOKENIZERS_PARALLELISM")
        with warnings.catch_warnings():  # RadEval() calls warnings.filterwarnings("ignore")
            try:
                evaluator = RadEval(metrics=[self.options["metric"]], per_sample=True,
                                    show_progress=False)
            except ImportError as exc:  # a dependency of this metric is missing
                raise MetricUnavailable(
                    f"radeval metric {self.options['metric']!r} cannot load: {exc}") from exc
            finally:
                if saved_env is None:
                    os.environ.pop("TOKENIZERS_PARALLELISM", None)
                else:
                    os.environ["TOKENIZERS_PARALLELISM"] = saved_env
        keys = list(evaluator.metric_keys)
        if self._key is None:
            self._key = keys[0]
        elif self._key not in keys:
            raise MetricUnavailable(f"radeval metric {self.options['metric']!r} has no key "
                                    f"{self._key!r} (it has: {', '.join(keys)})")
        self._evaluator = evaluator

    def signature(self) -> str:
        """``radeval|metric:<name>|key:<key>|version:<radeval version>``.

        ``key:default`` when no key was asked for: the metric's first key, fixed by the metric
        and the RadEval version (both in the signature), and known without loading it.
        """
        key = self.options["key"] or "default"
        return (f"radeval|metric:{self.options['metric']}|key:{key}|"
                f"version:{radeval_version() or 'missing'}")

    def _score(self, *, references: list[str], candidates: list[str],
               images: Sequence[Any] | None) -> MetricResult:
        out = self._evaluator(refs=list(references), hyps=list(candidates))
        values = out.get(self._key)
        if not isinstance(values, list) or len(values) != len(references):
            raise MetricUnavailable(f"radeval metric {self.options['metric']!r} returned no "
                                    f"per-pair list for {self._key!r}")
        return MetricResult(values={"radeval": [_finite(v) for v in values]})


def _finite(value: Any) -> float:  # noqa: ANN401 - whatever RadEval returns per sample
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan
