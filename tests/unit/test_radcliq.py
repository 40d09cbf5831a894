"""RadCliQ: the regression constants and the composite over its four input families.

References: the published reference points of Yu et al. 2023 (all inputs 1 -> -1.4407, all 0 ->
2.4501 for v1; 4 decimals as published) and a scikit-learn ``StandardScaler`` + ``LinearRegression``
whose fitted attributes are set to the constants, as CXR-Report-Metric stores them
(tolerance 1e-12).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression
from sklearn.preprocessing import StandardScaler

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
)
from radconcord.backend.metrics.radcliq import (
    BERTSCORE_RADCLIQ_OPTIONS,
    CONSTANTS,
    INPUTS,
    RadCliQ,
    radcliq,
)


def _sklearn_model(version: str) -> tuple[StandardScaler, LinearRegression]:
    c = CONSTANTS[version]
    scaler = StandardScaler()
    scaler.mean_ = np.array(c.mean)
    scaler.scale_ = np.array(c.scale)
    scaler.var_ = np.array(c.scale) ** 2
    scaler.n_features_in_ = 4
    model = LinearRegression()
    model.coef_ = np.array(c.coef)
    model.intercept_ = c.intercept
    model.n_features_in_ = 4
    return scaler, model


def test_v1_reference_points():
    assert round(radcliq("v1", 1, 1, 1, 1), 4) == -1.4407
    assert round(radcliq("v1", 0, 0, 0, 0), 4) == 2.4501


@pytest.mark.parametrize("version", ["v0", "v1"])
def test_matches_sklearn_pipeline(version):
    scaler, model = _sklearn_model(version)
    rng = np.random.default_rng(1)
    x = rng.random((50, 4))
    expected = model.predict(scaler.transform(x))
    got = radcliq(version, x[:, 0], x[:, 1], x[:, 2], x[:, 3])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_v0_constants_as_published():
    c = CONSTANTS["v0"]
    assert c.intercept == 1.6416666667
    assert c.coef == (-0.4796252645, -0.6762170542, -0.4636657516, 0.2165861905)
    # At the feature means the prediction is the intercept.
    assert radcliq("v0", *c.mean) == pytest.approx(c.intercept, abs=1e-12)


def test_vectorised_broadcast_and_nan():
    out = radcliq("v1", [0.2, 0.8], 0.5, 0.5, np.array([0.1, math.nan]))
    assert isinstance(out, np.ndarray) and out.shape == (2,)
    assert not math.isnan(out[0]) and math.isnan(out[1])
    assert isinstance(radcliq("v0", 0.5, 0.5, 0.5, 0.5), float)
    with pytest.raises(ValueError, match="unknown RadCliQ version"):
        radcliq("v2", 1, 1, 1, 1)


# --- composite with stub inputs ----------------------------------------------------------------


def _stub(family: str, key: str, fn, reason: str | None = None) -> BaseMetric:
    class Stub(BaseMetric):
        spec: ClassVar[MetricSpec] = MetricSpec(name=family, outputs=(OutputSpec(key),))
        defaults: ClassVar[dict[str, Any]] = {}
        loaded_on: str | None = None

        def availability(self) -> str | None:
            return reason

        def _load(self) -> None:
            self.loaded_on = self.device

        def _score(self, *, references, candidates, images):
            return MetricResult(values={key: [fn(r, c) for r, c in zip(references, candidates,
                                                                        strict=True)]})

        def signature(self) -> str:
            return f"stub-{family}"

    return Stub()


def _overlap(r: str, c: str) -> float:
    a, b = set(r.split()), set(c.split())
    return len(a & b) / max(len(a | b), 1)


def _stubs(reason_for: str | None = None) -> dict[str, BaseMetric]:
    fns = {
        "radgraph_combined": _overlap,
        "bertscore_f": lambda r, c: 0.5 + 0.5 * _overlap(r, c),
        "semb": lambda r, c: 1.0 - abs(len(r) - len(c)) / max(len(r), len(c), 1),
        "bleu2_radcliq": lambda r, c: _overlap(r, c) ** 2,
    }
    return {
        family: _stub(family, key, fns[key], "weights missing" if family == reason_for else None)
        for family, key in INPUTS
    }


REFS = ["no acute process", "mild cardiomegaly and small left effusion", "x"]
CANDS = ["no acute process", "small left effusion", "completely different words"]


def test_composite_combines_its_inputs():
    stubs = _stubs()
    metric = RadCliQ(inputs=stubs)
    assert metric.availability() is None
    res = metric.score(references=REFS, candidates=CANDS)
    cols = [
        [stubs[f].score(references=REFS, candidates=CANDS).values[k][i] for i in range(3)]
        for f, k in INPUTS
    ]
    np.testing.assert_allclose(res.values["radcliq_v0"], radcliq("v0", *cols), atol=1e-12)
    np.testing.assert_allclose(res.values["radcliq_v1"], radcliq("v1", *cols), atol=1e-12)
    # A perfect pair is predicted to have fewer errors than a disjoint one.
    assert res.values["radcliq_v1"][0] < res.values["radcliq_v1"][2]
    assert res.details is not None and res.details[1]["radgraph_combined"] == cols[0][1]
    assert res.corpus["radcliq_v1_mean"] == pytest.approx(float(np.mean(res.values["radcliq_v1"])))
    assert all(s.loaded_on == "cpu" for s in stubs.values())


def test_composite_signature_embeds_input_signatures():
    sig = RadCliQ(inputs=_stubs()).signature()
    assert sig == (
        "radcliq|v0,v1|constants:CXR-Report-Metric|radgraph=[stub-radgraph]"
        "|bertscore=[stub-bertscore]|semb=[stub-semb]|bleu2_radcliq=[stub-bleu2_radcliq]"
    )


def test_composite_reports_the_missing_input():
    metric = RadCliQ(inputs=_stubs(reason_for="semb"))
    assert metric.availability() == "needs semb: weights missing"
    with pytest.raises(MetricUnavailable, match="needs semb"):
        metric.load()
    with pytest.raises(MetricUnavailable, match="needs semb"):
        metric.signature()


def test_default_composite_never_crashes_on_missing_modules():
    # radgraph (and possibly semb) do not exist yet: a reason, never an exception.
    reason = registry.availability("radcliq")
    assert reason is not None and reason.startswith("needs ")


def test_partial_injection_and_options():
    stubs = _stubs()
    del stubs["radgraph"]
    metric = RadCliQ(inputs=stubs)
    # The family that was not injected is judged by the registry, prefixed with its name.
    expected = registry.availability("radgraph")
    assert metric.availability() == (None if expected is None else f"needs radgraph: {expected}")
    with pytest.raises(ValueError, match="unknown input"):
        RadCliQ(inputs={"rouge": _stub("rouge", "rougeL", _overlap)})
    with pytest.raises(ValueError, match="unknown input"):
        RadCliQ(input_options={"nope": {}})
    assert BERTSCORE_RADCLIQ_OPTIONS == {"num_layers": 5, "idf": False, "rescale": True}
    assert RadCliQ()._options_for("bertscore") == BERTSCORE_RADCLIQ_OPTIONS
    assert RadCliQ(input_options={"bertscore": {"batch_size": 8}})._options_for("bertscore") == {
        **BERTSCORE_RADCLIQ_OPTIONS, "batch_size": 8
    }


def test_direction_is_lower_is_better():
    spec = RadCliQ.spec
    assert spec.keys == ("radcliq_v0", "radcliq_v1", "radcliq_v1_inv")
    assert spec.direction("radcliq_v0") is False and spec.direction("radcliq_v1") is False
    assert spec.direction("radcliq_v1_inv") is True
    assert registry.ENTRIES["radcliq"].keys == spec.keys
