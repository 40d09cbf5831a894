"""The metric registry: cards for every family, lazy imports, consistent keys."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from radconcord.backend.metrics import plugins, registry

REPO = Path(__file__).resolve().parent.parent.parent
CARDS = REPO / "backend" / "metrics" / "cards"


def test_every_registered_family_has_a_complete_card():
    """Built-in cards are files in backend/metrics/cards; a plug-in's come from its ``card``
    attribute (registry.card_text); both must have plugins.CARD_SECTIONS."""
    problems: list[str] = []
    for family, entry in registry.ENTRIES.items():
        if entry.error is not None:
            continue  # a plug-in that could not be loaded: listed unavailable, no card known
        text = registry.card_text(family)
        if text is None:
            where = (CARDS / f"{family}.md").relative_to(REPO) if entry.origin is None \
                else entry.origin
            problems.append(f"{family}: no card ({where})")
            continue
        problems.extend(f"{family}: {p}" for p in plugins.card_problems(text, entry.keys))
    assert not problems, "metric cards incomplete:\n  " + "\n  ".join(problems)


def test_every_family_resolves_to_a_class_with_the_registered_keys():
    problems: list[str] = []
    for family, entry in registry.ENTRIES.items():
        if entry.error is not None:
            continue  # a plug-in that could not be loaded (tests/plugins)
        module_name, _, cls_name = entry.target.partition(":")
        if importlib.util.find_spec(module_name) is None:
            problems.append(f"{family}: module {module_name} does not exist")
            continue
        try:
            cls = registry.load_class(family)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{family}: cannot load {entry.target}: {exc}")
            continue
        spec = cls.spec
        if spec.name != family:
            problems.append(f"{family}: spec.name is {spec.name!r}")
        if tuple(spec.keys) != entry.keys:
            problems.append(f"{family}: spec keys {spec.keys} != registry keys {entry.keys}")
    assert not problems, "registry and metric classes disagree:\n  " + "\n  ".join(problems)


def test_keys_belong_to_exactly_one_family():
    seen: dict[str, str] = {}
    for family, entry in registry.ENTRIES.items():
        for key in entry.keys:
            assert key not in seen, f"{key} is in {seen.get(key)} and {family}"
            seen[key] = family
    assert seen == registry.KEY_TO_FAMILY


def test_resolve_keeps_request_order_and_rejects_unknown_names():
    assert registry.resolve(["rougeL", "bleu4", "bleu1", "bleu4"]) == {
        "rouge": ["rougeL"],
        "bleu": ["bleu4", "bleu1"],
    }
    assert registry.resolve(["bleu"])["bleu"] == ["bleu1", "bleu2", "bleu3", "bleu4"]
    with pytest.raises(registry.UnknownMetric, match="unknown metric 'bleu9'"):
        registry.resolve(["bleu9"])


def test_importing_the_backend_and_cli_loads_no_model_library():
    code = (
        "import sys\n"
        "import radconcord.backend, radconcord.backend.metrics.registry, radconcord.backend.cli\n"
        "radconcord.backend.cli.build_parser()\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_registry_knows_every_direction_and_agrees_with_the_classes():
    """One place knows a key's direction: the registry. It must say what each spec says."""
    problems: list[str] = []
    for family, entry in registry.ENTRIES.items():
        if entry.error is not None:
            continue
        spec = registry.load_class(family).spec
        for key in entry.keys:
            if registry.higher_is_better(key) != spec.direction(key):
                problems.append(f"{key}: registry says higher_is_better="
                                f"{registry.higher_is_better(key)}, {family}'s spec says"
                                f" {spec.direction(key)}")
    assert not problems, "\n  ".join(problems)
    assert registry.directions(["bleu4", "radcliq_v1", "vl_sphere", "green_sig_a", "smas_var"]) \
        == {"bleu4": True, "radcliq_v1": False, "vl_sphere": False, "green_sig_a": False,
            "smas_var": False}
    with pytest.raises(registry.UnknownMetric, match="unknown metric 'radcliq_refit'"):
        registry.higher_is_better("radcliq_refit")
    with pytest.raises(ValueError, match="lower_is_better names keys it does not have"):
        registry.Entry("x", "m:C", ("a",), "lexical", lower_is_better=("b",))


def test_corpus_dependence_is_declared_and_matches_the_instances():
    """Declared per family (a rule over the options where an option decides), and the same
    answer the instances give."""
    from radconcord.backend.metrics.bertscore import BertScore
    from radconcord.backend.metrics.vlscore import VLScore

    declared = {f for f in registry.ENTRIES if registry.corpus_dependent(f)}
    assert declared == {"cider", "vlscore"}  # vlscore: C calibrated on the set by default
    for idf in (False, True):
        assert registry.corpus_dependent("bertscore", {"idf": idf}) is idf
        assert BertScore(idf=idf).corpus_dependent is idf
    for c in (None, 0.5):
        assert registry.corpus_dependent("vlscore", {"c": c}) is (c is None)
        assert VLScore(model="m", c=c).corpus_dependent is (c is None)
    assert registry.corpus_dependent("radcliq", {}) is False
    assert registry.corpus_dependent("radcliq", {"bertscore.idf": True}) is True
    assert registry.corpus_dependent(
        "radcliq", {"input_options": {"bertscore": {"idf": True}}}) is True
    with pytest.raises(registry.UnknownMetric):
        registry.corpus_dependent("nope")


def test_directions_and_corpus_dependence_import_no_metric_code():
    """No built-in metric module; a plug-in's module is imported at discovery by design (its
    keys are known from its class only), so installed plug-ins are left out of the check."""
    code = (
        "import sys\n"
        "from radconcord.backend.metrics import registry\n"
        "registry.directions(list(registry.KEY_TO_FAMILY))\n"
        "[registry.corpus_dependent(f, {}) for f in registry.ENTRIES]\n"
        "mods = {e.target.partition(':')[0] for e in registry.ENTRIES.values()\n"
        "        if e.origin is None}\n"
        "print(sorted(m for m in [*mods, 'torch', 'transformers'] if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
