"""The ``radeval`` family: RadEval's own code, called through its API, as a RadConcord family.

Reference: jbdel/RadEval@e0a3909 (RadEval 2.2.0), its regression pairs and expected per-pair
values (``tests/fixtures/radeval_lexical_reference.json``, made by the committed generator
``tests/fixtures/generators/radeval_lexical_reference.py``). The test environment installs
radeval 2.2.1 from PyPI with ``--no-deps`` (``scripts/bootstrap.sh test``): its BLEU and ROUGE
files are identical to e0a3909's, and their dependencies (rouge-score, nltk, numpy) are ours.
Its model metrics need RadEval's full dependency set (torchvision among them) and are not run
here.

Tolerances: the bridge stores what RadEval's own code returns, so the values are RadEval's
float64 results bit for bit (``==``) on this machine; against the snapshot, written on another
machine, BLEU gets relative 1e-12 (``**`` and ``exp`` come from the C library, a few ulp at
most, see ``test_radeval_lexical.py``) and ROUGE, ratios of counts, is exact.
"""

from __future__ import annotations

import json
import os
import warnings
from importlib.metadata import version
from pathlib import Path

import pytest

from radconcord.backend.metrics import radeval_bridge, registry
from radconcord.backend.metrics.lexical import Bleu

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "radeval_lexical_reference.json"
REF = json.loads(FIXTURE.read_text())


def test_radeval_is_installed_for_the_tests():
    assert radeval_bridge.radeval_version() == version("radeval")
    assert radeval_bridge.RadEvalBridge(metric="bleu").availability() is None


def test_bleu_through_radeval_equals_the_snapshot_and_our_radeval_tokenizer():
    metric = registry.create("radeval", metric="bleu")
    got = metric.score(references=REF["references"], candidates=REF["candidates"])
    values = got.values["radeval"]
    assert values == pytest.approx(REF["per_pair"]["bleu"], rel=1e-12, abs=0)
    ours = Bleu(tokenize="radeval").score(references=REF["references"],
                                          candidates=REF["candidates"]).values["bleu4"]
    assert values == ours  # same float64 operations in the same order: identical bits


@pytest.mark.parametrize("key", ["rouge1", "rouge2", "rougeL"])
def test_rouge_keys_through_radeval_equal_the_snapshot(key):
    metric = registry.create("radeval", metric="rouge", key=key)
    got = metric.score(references=REF["references"], candidates=REF["candidates"])
    assert got.values["radeval"] == REF["per_pair"][key]


def test_the_default_key_is_the_metrics_first_and_the_signature_names_all():
    first = registry.create("radeval", metric="rouge")
    assert first.signature() == f"radeval|metric:rouge|key:default|version:{version('radeval')}"
    values = first.score(references=REF["references"],
                         candidates=REF["candidates"]).values["radeval"]
    assert values == REF["per_pair"]["rouge1"]
    named = registry.create("radeval", metric="rouge", key="rougeL")
    assert named.signature() == f"radeval|metric:rouge|key:rougeL|version:{version('radeval')}"


def test_radeval_leaves_the_process_warning_filters_and_environment_alone():
    filters = list(warnings.filters)
    env = os.environ.get("TOKENIZERS_PARALLELISM")
    registry.create("radeval", metric="bleu").load()
    assert warnings.filters == filters
    assert os.environ.get("TOKENIZERS_PARALLELISM") == env


def test_unknown_metric_or_key_is_a_reason_not_a_crash():
    reason = registry.availability("radeval", metric="no_such_metric")
    assert reason.startswith("radeval has no metric 'no_such_metric' (it has: ")
    bad_key = registry.create("radeval", metric="bleu", key="bleu9")
    with pytest.raises(radeval_bridge.MetricUnavailable,
                       match="radeval metric 'bleu' has no key 'bleu9' \\(it has: bleu\\)"):
        bad_key.load()
    with pytest.raises(ValueError, match="radeval: metric must be a RadEval metric name"):
        registry.create("radeval", metric="")


def test_without_radeval_the_family_is_unavailable_with_the_install_and_the_conflict(
        monkeypatch):
    monkeypatch.setattr(radeval_bridge, "radeval_version", lambda: None)
    reason = registry.availability("radeval")
    assert reason == radeval_bridge.NOT_INSTALLED
    assert "radconcord[radeval]" in reason and "torchvision" in reason


def test_a_radeval_older_than_the_api_this_speaks_is_named(monkeypatch):
    monkeypatch.setattr(radeval_bridge, "radeval_version", lambda: "2.1.0")
    assert registry.availability("radeval") == (
        "radeval 2.1.0 is installed; this bridge needs radeval >= 2.2 "
        "(pip install -U 'radconcord[radeval]')")
