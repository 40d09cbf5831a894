"""Analysis reads metric directions from the registry only: no import of the metric's code,
no hand-kept fallback table, and a clear error for a key nobody registered."""

from __future__ import annotations

import pytest

from radconcord.backend.analysis import data
from radconcord.backend.analysis.data import AnalysisInputError, metric_direction
from radconcord.backend.metrics import registry


def test_directions_come_from_the_registry_without_importing_metric_code(monkeypatch):
    def refuse(family):
        raise AssertionError(f"imported the class of {family}")

    monkeypatch.setattr(registry, "load_class", refuse)
    assert metric_direction("bleu4", "bleu") is True
    assert metric_direction("radcliq_v1", "radcliq") is False
    assert metric_direction("green_sig_c") is False
    assert metric_direction("vl_sphere") is False
    # Score rows may carry a family name that is not a registry family (old imports): the
    # key decides.
    assert metric_direction("bleu4", "bleu4") is True


def test_an_unknown_key_is_an_error_naming_it_not_a_guess():
    assert not hasattr(data, "LOWER_IS_BETTER")
    with pytest.raises(AnalysisInputError,
                       match=r"metric key 'mystery_score' \(scored as family 'mystery'\) is not"
                             r" in the metric registry"):
        metric_direction("mystery_score", "mystery")
    with pytest.raises(AnalysisInputError, match="metric key 'radcliq_refit' is not"):
        metric_direction("radcliq_refit")
