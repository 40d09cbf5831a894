"""Temporal entity F1 against RadEval's reference function, regex path, exactly.

Reference: jbdel/RadEval@e0a39097e7788b6d0a229432add96c63ea60d62f
``radeval/metrics/f1temporal/f1temporal.py`` (RadEval 2.2.0, from X-iZhang/Libra), replicated
without its stanza pipeline by ``tests/fixtures/generators/temporal_f1_reference.py``, whose
output ``tests/fixtures/temporal_f1_reference.json`` is committed. Tolerance: none (``==`` on
every float, entity set and the mean).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import MetricUnavailable
from radconcord.backend.metrics.temporal import (
    KEYWORDS,
    TemporalF1,
    clean_text,
    entities,
    tem_score,
)

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "temporal_f1_reference.json"


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_vocabulary_is_biovil_t_44_words():
    assert len(KEYWORDS) == 44
    assert {"bigger", "change", "cleared", "worsening", "unaltered"} <= KEYWORDS


def test_scores_equal_the_reference_exactly(reference):
    cases = reference["cases"]
    assert len(cases) >= 20
    metric = TemporalF1(stanza="off")
    result = metric.score(references=[c["reference"] for c in cases],
                          candidates=[c["candidate"] for c in cases])
    assert result.values["temporal_f1"] == [c["f1"] for c in cases]
    assert result.corpus["temporal_f1_mean"] == reference["mean_f1"]
    assert result.details is not None
    for got, case in zip(result.details, cases, strict=True):
        assert got["reference_entities"] == case["reference_entities"]
        assert got["candidate_entities"] == case["candidate_entities"]


def test_the_edge_cases_the_reference_defines():
    # Both empty: 1.0; only the reference empty: epsilon; only the candidate empty: ~0.
    assert tem_score(set(), set()) == 1.0
    assert tem_score(set(), {"new"}) == 1e-10
    assert tem_score({"new"}, set()) < 1e-9
    assert tem_score({"new"}, {"new"}) == pytest.approx(1.0, abs=1e-9)
    assert tem_score({"new"}, {"new"}, epsilon=1e-3) == pytest.approx(2 / (2 + 1e-3))


def test_whole_words_after_cleaning_and_case_folding():
    assert entities("NEW, Stable; worse/better, re-demonstrated unchanged_tube") == {
        "new", "stable", "unchanged"}  # worse/better glued into one word by the cleaning
    assert entities("renewed, newly, changes, decreases") == set()
    assert clean_text("a\n\nb --  c__d (e) x/y") == "a b c d (e) xy"


def test_ner_entities_join_only_when_they_are_keywords_of_the_tagged_types():
    ner = [("Worsening", "OBSERVATION_MODIFIER"), ("effusion", "OBSERVATION"),
           ("new", "ANATOMY"), ("Stable", "OBSERVATION")]
    # "worsening" hidden from the regex by a glued slash, found by NER; "new" has a type
    # the reference ignores.
    assert entities("effusion worsening/larger", ner) == {"worsening", "stable"}


def test_options_signature_and_registry():
    m = TemporalF1(stanza="off")
    assert m.signature() == "temporal_f1|keywords:biovil-t-44|clean:libra|ner:none|eps:1e-10"
    assert TemporalF1(stanza="off", epsilon=1e-6).signature() != m.signature()
    assert registry.ENTRIES["temporal_f1"].keys == ("temporal_f1",)
    assert registry.higher_is_better("temporal_f1")
    assert isinstance(registry.create("temporal_f1", stanza="off"), TemporalF1)
    with pytest.raises(ValueError, match="stanza must be one of"):
        TemporalF1(stanza="maybe")
    with pytest.raises(ValueError, match="epsilon"):
        TemporalF1(epsilon=0)


def test_stanza_on_is_unavailable_with_a_reason_when_stanza_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("STANZA_RESOURCES_DIR", str(tmp_path))
    m = TemporalF1(stanza="on")
    reason = m.availability()
    assert reason is not None and reason.startswith("temporal_f1 with stanza=on:")
    assert "stanza" in reason
    with pytest.raises(MetricUnavailable):
        m.score(references=["new"], candidates=["new"])
    # auto without stanza's model falls back to the regex path and says so.
    auto = TemporalF1()
    assert auto.availability() is None
    assert "ner:none" in auto.signature()
    assert auto.score(references=["Stable."], candidates=["Stable."]).values[
        "temporal_f1"] == [pytest.approx(1.0, abs=1e-9)]


def test_empty_batch_and_nan_free_output():
    m = TemporalF1(stanza="off")
    assert m.score(references=[], candidates=[]).values == {"temporal_f1": []}
    out = m.score(references=["", "new"], candidates=["", ""]).values["temporal_f1"]
    assert not any(math.isnan(v) for v in out)
