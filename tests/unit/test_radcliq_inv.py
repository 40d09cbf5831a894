"""radcliq_v1_inv: 1/RadCliQ-v1 as ReXrank ranks by it (higher is better).

Definition followed: ReXrank (Zhang et al., "ReXrank: A Public Leaderboard for AI-Powered
Radiology Report Generation", arXiv:2411.15122; rajpurkarlab/ReXrank) lists the column
"1/RadCliQ-v1 (higher is better)", the inverse of the mean RadCliQ-v1 over a system's test
reports, which is how RadEval computes its aggregate (jbdel/RadEval@e0a39097,
radeval/metrics/RadCliQv1/radcliq.py: ``return 1/scores.mean(), scores``). Per pair the key is
``1 / radcliq_v1``. Tolerance: 1e-12 (the same float operations). RadCliQ v0/v1 values are
checked unchanged against the pure function.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.radcliq import RadCliQ, inverse, radcliq
from tests.unit.test_radcliq import CANDS, INPUTS, REFS, _stubs


def test_per_pair_and_system_inverse_as_rexrank_defines_them():
    stubs = _stubs()
    res = RadCliQ(inputs=stubs).score(references=REFS, candidates=CANDS)
    cols = [stubs[f].score(references=REFS, candidates=CANDS).values[k] for f, k in INPUTS]
    v1 = np.asarray(radcliq("v1", *cols))
    # v0 and v1 are what they were before the inverse existed.
    np.testing.assert_allclose(res.values["radcliq_v1"], v1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.values["radcliq_v0"], radcliq("v0", *cols), rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.values["radcliq_v1_inv"], 1.0 / v1, rtol=0, atol=1e-12)
    # ReXrank's system value: 1 / mean(RadCliQ-v1), not the mean of the inverses.
    rexrank = 1 / v1.mean()
    assert res.corpus["radcliq_v1_inv_of_mean"] == pytest.approx(rexrank, rel=0, abs=1e-12)
    assert res.corpus["radcliq_v1_mean"] == pytest.approx(v1.mean(), rel=0, abs=1e-12)
    assert not math.isclose(rexrank, float(np.mean(1.0 / v1)))


def test_higher_is_better_where_rexrank_uses_it():
    # For systems with positive mean RadCliQ-v1 (every ReXrank entry), fewer predicted errors
    # means a larger inverse.
    assert inverse(0.8) > inverse(1.2) > 0
    assert registry.higher_is_better("radcliq_v1_inv") is True
    assert registry.higher_is_better("radcliq_v1") is False
    assert registry.KEY_TO_FAMILY["radcliq_v1_inv"] == "radcliq"
    assert registry.resolve(["radcliq_v1_inv"]) == {"radcliq": ["radcliq_v1_inv"]}


def test_undefined_at_zero_and_nan():
    assert math.isnan(inverse(0.0))
    assert math.isnan(inverse(math.nan))
    assert inverse(-2.0) == -0.5  # a pair predicted below zero errors keeps its sign


def test_signature_is_unchanged_so_cached_v0_v1_stay_valid():
    assert RadCliQ(inputs=_stubs()).signature().startswith("radcliq|v0,v1|constants:")
