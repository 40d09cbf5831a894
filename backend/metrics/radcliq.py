"""RadCliQ: a linear model of four metrics that predicts the number of errors in a report.

``z = (x - mean) / scale`` on ``x = (radgraph_combined, bertscore_f, semb, bleu2_radcliq)``,
``RadCliQ = z . coef + intercept`` (scikit-learn ``StandardScaler`` + ``LinearRegression``,
constants of the public CXR-Report-Metric release). Lower is better. The four inputs come from
their own families through the registry; RadCliQ is available only when all four are.

``radcliq_v1_inv`` is ``1/RadCliQ-v1``, the direction-flipped form ReXrank (Zhang et al. 2024)
ranks systems by, higher is better: per pair ``1 / radcliq_v1``, and as ReXrank and RadEval
compute a system's value, the corpus aggregate ``radcliq_v1_inv_of_mean = 1 / mean(RadCliQ-v1)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import (
    BaseMetric,
    Metric,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
    Resources,
)


@dataclass(frozen=True)
class RadCliQConstants:
    """Scaler and regression constants of one RadCliQ version (feature order as INPUTS)."""

    mean: tuple[float, float, float, float]
    scale: tuple[float, float, float, float]
    coef: tuple[float, float, float, float]
    intercept: float


CONSTANTS: dict[str, RadCliQConstants] = {
    "v0": RadCliQConstants(
        mean=(0.5398376019, 0.6312549595, 0.7716797867, 0.4607372065),
        scale=(0.3018344441, 0.2246695075, 0.2475033381, 0.3033667094),
        coef=(-0.4796252645, -0.6762170542, -0.4636657516, 0.2165861905),
        intercept=1.6416666667,
    ),
    "v1": RadCliQConstants(
        mean=(0.5379231241, 0.6175725628, 0.7647942121, 0.4473833540),
        scale=(0.3028258411, 0.2243093846, 0.2539439110, 0.2989271671),
        coef=(-0.3770836826, -0.3703000997, -0.2526162179, 4.315e-12),
        intercept=2.4666e-10,
    ),
}

#: (family, output key) of each input, in the regression's feature order.
INPUTS: tuple[tuple[str, str], ...] = (
    ("radgraph", "radgraph_combined"),
    ("bertscore", "bertscore_f"),
    ("semb", "semb"),
    ("bleu2_radcliq", "bleu2_radcliq"),
)

#: BERTScore as RadCliQ computed it: distilroberta-base layer 5, no idf, baseline-rescaled.
#: ``rescale=True`` makes the family unavailable rather than silently fall back to a model
#: the regression was not fitted on.
BERTSCORE_RADCLIQ_OPTIONS: dict[str, Any] = {"num_layers": 5, "idf": False, "rescale": True}


def radcliq(
    version: str,
    radgraph_combined: float | Sequence[float] | np.ndarray,
    bertscore_f: float | Sequence[float] | np.ndarray,
    semb: float | Sequence[float] | np.ndarray,
    bleu2: float | Sequence[float] | np.ndarray,
) -> float | np.ndarray:
    """RadCliQ prediction (lower is better) for scalars or arrays of input scores.

    Args:
        version: ``"v0"`` or ``"v1"``.
        radgraph_combined: RadGraph (entity F1 + relation F1) / 2.
        bertscore_f: BERTScore F1 with RadCliQ settings.
        semb: CheXbert embedding cosine.
        bleu2: BLEU-2 with RadCliQ tokenisation.

    Returns:
        A float for scalar inputs, else an array broadcast over the inputs; ``nan`` wherever
        an input is ``nan``.

    Raises:
        ValueError: for an unknown version.
    """
    try:
        c = CONSTANTS[version]
    except KeyError:
        raise ValueError(f"unknown RadCliQ version {version!r} (known: v0, v1)") from None
    x = np.stack(
        np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in
                              (radgraph_combined, bertscore_f, semb, bleu2))),
        axis=-1,
    )
    z = (x - np.asarray(c.mean)) / np.asarray(c.scale)
    out = z @ np.asarray(c.coef) + c.intercept
    return float(out) if out.ndim == 0 else out


class RadCliQ(BaseMetric):
    """RadCliQ v0 and v1 composed from the radgraph, bertscore, semb and bleu2_radcliq families.

    Options:
        inputs: ``family -> metric instance`` replacing the registry's instance for that
            family (for tests and for sharing warmed instances); its signature still enters
            RadCliQ's signature.
        input_options: ``family -> options`` passed to ``registry.create``; bertscore gets
            :data:`BERTSCORE_RADCLIQ_OPTIONS` merged under them.
        <family>.<option>: the same per input, in the form the command line can carry
            (``--set radcliq.semb.checkpoint=/path/chexbert.pth``).
    """

    spec = MetricSpec(
        name="radcliq",
        outputs=(
            OutputSpec("radcliq_v0", False, "RadCliQ-v0 predicted error count (lower is better)"),
            OutputSpec("radcliq_v1", False, "RadCliQ-v1 predicted error count (lower is better)"),
            OutputSpec("radcliq_v1_inv", True,
                       "1/RadCliQ-v1 as ReXrank reports it (higher is better; see the card)"),
        ),
        needs_model=True,
        citation="Yu et al., Evaluating progress in automatic chest X-ray radiology report "
        "generation, Patterns 2023",
        corpus_outputs=("radcliq_v0_mean", "radcliq_v1_mean", "radcliq_v1_inv_of_mean"),
    )
    defaults: dict[str, Any] = {"inputs": None, "input_options": None}

    def __init__(self, **options: Any) -> None:
        families = {f for f, _ in INPUTS}
        dotted = {k: options.pop(k) for k in [k for k in options if "." in k]}
        if dotted:
            merged = {f: dict(o) for f, o in (options.get("input_options") or {}).items()}
            for name, value in dotted.items():
                family, _, opt = name.partition(".")
                if family not in families:
                    raise ValueError(
                        f"radcliq: option {name!r} names unknown input {family!r}"
                        f" (known: {', '.join(sorted(families))})"
                    )
                merged.setdefault(family, {})[opt] = value
            options["input_options"] = merged
        super().__init__(**options)
        for opt in ("inputs", "input_options"):
            given = self.options[opt] or {}
            if not isinstance(given, Mapping):
                raise ValueError(f"radcliq: {opt} must map family -> value")
            unknown = set(given) - families
            if unknown:
                raise ValueError(
                    f"radcliq: {opt} names unknown input(s) {sorted(unknown)}"
                    f" (known: {', '.join(sorted(families))})"
                )
        self._instances: dict[str, Metric] = dict(self.options["inputs"] or {})

    def _options_for(self, family: str) -> dict[str, Any]:
        given = dict((self.options["input_options"] or {}).get(family, {}))
        if family == "bertscore":
            return {**BERTSCORE_RADCLIQ_OPTIONS, **given}
        return given

    def _input(self, family: str) -> Metric:
        inst = self._instances.get(family)
        if inst is None:
            inst = self._instances[family] = registry.shared_instance(
                self.resources, family, self._options_for(family)
            )
        return inst

    def use_resources(self, resources: Resources) -> None:
        """Take the inputs from ``resources`` too: in a scoring pool, RadCliQ's semb or
        radgraph input is the very instance (and model) the pool scores those families with."""
        super().use_resources(resources)
        given = set(self.options["inputs"] or {})
        self._instances = {f: m for f, m in self._instances.items() if f in given}

    def availability(self) -> str | None:
        for family, _ in INPUTS:
            try:
                if family in self._instances:
                    reason = self._instances[family].availability()
                else:
                    reason = registry.availability(family, **self._options_for(family))
                    if reason is None:
                        self._input(family)
            except (ImportError, AttributeError, ValueError) as exc:
                # A module that exists but is incomplete, or options it rejects.
                reason = f"cannot create it: {type(exc).__name__}: {exc}"
            if reason is not None:
                return f"needs {family}: {reason}"
        return None

    def _load(self) -> None:
        for family, _ in INPUTS:
            self._input(family).load(self.device)

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        columns: list[np.ndarray] = []
        for family, key in INPUTS:
            result = self._input(family).score(references=references, candidates=candidates)
            if key not in result.values:
                raise RuntimeError(f"radcliq: input family {family!r} returned no {key!r}")
            col = np.asarray(result.values[key], dtype=np.float64)
            if col.shape != (len(references),):
                raise RuntimeError(
                    f"radcliq: input {key!r} has {col.shape[0]} values for {len(references)} pairs"
                )
            columns.append(col)
        v0 = np.asarray(radcliq("v0", *columns))
        v1 = np.asarray(radcliq("v1", *columns))
        keys = [k for _, k in INPUTS]
        details = [
            {k: float(col[i]) for k, col in zip(keys, columns, strict=True)}
            for i in range(len(references))
        ]
        v1_mean = _nanmean(v1)
        corpus = {
            "radcliq_v0_mean": _nanmean(v0),
            "radcliq_v1_mean": v1_mean,
            "radcliq_v1_inv_of_mean": inverse(v1_mean),
        }
        return MetricResult(
            values={"radcliq_v0": v0.tolist(), "radcliq_v1": v1.tolist(),
                    "radcliq_v1_inv": [inverse(x) for x in v1.tolist()]},
            corpus=corpus,
            details=details,
        )

    def signature(self) -> str:
        # radcliq_v1_inv is a function of radcliq_v1 alone, so it needs no signature change:
        # values cached before it existed stay valid and it is computed where missing.
        reason = self.availability()
        if reason is not None:
            raise MetricUnavailable(reason)
        parts = [f"{family}=[{self._input(family).signature()}]" for family, _ in INPUTS]
        return "radcliq|v0,v1|constants:CXR-Report-Metric|" + "|".join(parts)


def inverse(value: float) -> float:
    """``1 / value`` as ReXrank reports RadCliQ-v1 (higher is better); ``nan`` at 0 or ``nan``.

    Args:
        value: A RadCliQ-v1 value (per pair, or a mean over a system's reports).
    """
    if math.isnan(value) or value == 0.0:
        return math.nan
    return 1.0 / value


def _nanmean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else math.nan
