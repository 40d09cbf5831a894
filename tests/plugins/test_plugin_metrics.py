"""Metric plug-ins (issue 23, section 1): the example package installed with pip, seen by the
registry, ``radconcord metrics``, ``radconcord score`` (with the cache), the Python API and the
TRL rewards; broken and clashing plug-ins listed or refused without breaking anything else.

Expected values are worked by hand from the texts below (see each pair's comment).
"""

from __future__ import annotations

import csv
import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import select

import radconcord
from radconcord.backend.cli import main
from radconcord.backend.metrics import plugins, registry
from radconcord.backend.metrics.base import MetricUnavailable
from radconcord.backend.scoring.runner import ScorePair, score
from radconcord.backend.services.scores.scoring import metric_catalog
from radconcord.db.models import MetricScore
from radconcord.rewards import reward_fn
from tests.plugins.conftest import EXAMPLE_DIST, EXAMPLE_VERSION, TAG

pytestmark = pytest.mark.usefixtures("plugin_site")

REFS = [
    "Small left pleural effusion. No pneumothorax.",
    "Mild cardiomegaly.",
    "Normal chest.",
]
CANDS = [
    "Small left effusion.",
    "Mild cardiomegaly with pulmonary edema.",
    "Normal chest radiograph.",
]
# Pair 1: reference findings {effusion, pneumothorax}, candidate {effusion}: recall 1/2, one
#   missed; 6 words vs 3: length agreement 3/6.
# Pair 2: {cardiomegaly} all named (edema is extra): recall 1, none missed; 2 vs 5 words.
# Pair 3: no finding word in the reference: recall undefined (nan), none missed; 2 vs 3 words.
RECALL = [0.5, 1.0, math.nan]
MISSED = [1.0, 0.0, 0.0]
LENGTH = [0.5, 0.4, 2 / 3]
SIG_RECALL_PREFIX = "finding_words|version:1|vocab:"
SIG_LENGTH = f"length_agreement|version:1|{TAG}"


def _same(got, expected) -> bool:
    return all((math.isnan(g) and math.isnan(e)) or g == pytest.approx(e, abs=1e-12)
               for g, e in zip(got, expected, strict=True))


def _pairs_file(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for i, (ref, cand) in enumerate(zip(REFS, CANDS, strict=True)):
            fh.write(json.dumps({"id": f"p{i + 1}", "reference": ref, "candidate": cand}) + "\n")
    return path


# -- the registry ---------------------------------------------------------------------------


def test_the_registry_sees_the_plugins_keys_directions_and_cards():
    from radconcord_example_metric.finding_words import FindingWords
    from radconcord_example_metric.length_agreement import length_agreement

    assert list(registry.ENTRIES)[-2:] == ["finding_words", "length_agreement"]
    entry = registry.ENTRIES["finding_words"]
    assert entry.keys == ("finding_recall", "finding_missed")
    assert entry.kind == "lexical" and entry.error is None
    assert entry.origin == (f"package {EXAMPLE_DIST} {EXAMPLE_VERSION} (entry point"
                            " finding_words = radconcord_example_metric.finding_words"
                            ":FindingWords)")
    assert registry.KEY_TO_FAMILY["finding_missed"] == "finding_words"
    assert registry.resolve(["finding_missed", "length_agreement", "bleu4"]) == {
        "finding_words": ["finding_missed"], "length_agreement": ["length_agreement"],
        "bleu": ["bleu4"]}
    assert registry.directions(["finding_recall", "finding_missed", "length_agreement"]) == {
        "finding_recall": True, "finding_missed": False, "length_agreement": True}
    assert registry.entry_of_key("length_agreement").family == "length_agreement"
    assert registry.corpus_dependent("finding_words") is False
    assert registry.availability("finding_words") is None
    assert set(registry.plugin_families()) == {"finding_words", "length_agreement"}
    assert registry.ignored_plugins() == ()

    # The class handed out is the plug-in's own, with the release pinned in the signature.
    cls = registry.load_class("finding_words")
    assert issubclass(cls, FindingWords)
    metric = registry.create("finding_words")
    assert metric.signature().startswith(SIG_RECALL_PREFIX)
    assert metric.signature().endswith(f"|{TAG}")
    assert registry.create("length_agreement").signature() == SIG_LENGTH
    # The decorated function is still a plain function.
    assert length_agreement(["a b"], ["a b c d"]) == [0.5]

    for family in ("finding_words", "length_agreement"):
        card = registry.card_text(family)
        assert card is not None and plugins.card_problems(card, registry.ENTRIES[family].keys) \
            == []
    assert "Values from papers" in registry.card_text("length_agreement")


def test_option_changes_the_signature_and_an_unknown_option_is_refused():
    plain = registry.create("finding_words")
    extra = registry.create("finding_words", extra_words="radiograph")
    assert plain.signature() != extra.signature()
    assert extra.findings("Normal chest radiograph.") == {"radiograph"}
    with pytest.raises(ValueError, match="unknown option"):
        registry.create("finding_words", stemmer="porter")


# -- radconcord metrics ---------------------------------------------------------------------


def test_radconcord_metrics_lists_the_plugins_in_a_fresh_process(plugin_site, tmp_path):
    """The console script, as a user runs it: entry points read in a new interpreter."""
    script = Path(sys.executable).parent / "radconcord"
    env = {**plugin_site.env, "DATABASE_URL": f"sqlite:///{tmp_path}/m.db"}
    res = subprocess.run([str(script), "metrics", "--json"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    listed = {m["family"]: m for m in json.loads(res.stdout)}
    recall = listed["finding_words"]
    assert recall["available"] and recall["reason"] is None
    assert recall["kind"] == "lexical"
    assert [(k["key"], k["direction"]) for k in recall["keys"]] == [
        ("finding_recall", "higher"), ("finding_missed", "lower")]
    assert recall["plugin"].startswith(f"package {EXAMPLE_DIST} {EXAMPLE_VERSION} ")
    assert recall["signature"].startswith(SIG_RECALL_PREFIX)
    assert listed["length_agreement"]["signature"] == SIG_LENGTH
    assert listed["bleu"]["plugin"] is None

    text = subprocess.run([str(script), "metrics"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert text.returncode == 0, text.stderr
    assert "finding_missed" in text.stdout and "length_agreement" in text.stdout
    assert (f"plug-in finding_words: package {EXAMPLE_DIST} {EXAMPLE_VERSION} (entry point"
            " finding_words = radconcord_example_metric.finding_words:FindingWords)"
            in text.stdout)


# -- radconcord score and the cache ---------------------------------------------------------


def test_score_command_computes_then_reads_the_cache(db, tmp_path, capsys):
    pairs = _pairs_file(tmp_path / "pairs.jsonl")
    out = tmp_path / "scores.csv"
    args = ["score", "--input", str(pairs), "--metrics", "finding_words,length_agreement",
            "--output", str(out)]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "finding_words: 3 computed, 0 from cache" in first
    assert "length_agreement: 3 computed, 0 from cache" in first
    with out.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["id", "finding_recall", "finding_missed", "length_agreement"]
    assert _same([float(r["finding_recall"]) for r in rows], RECALL)
    assert _same([float(r["finding_missed"]) for r in rows], MISSED)
    assert _same([float(r["length_agreement"]) for r in rows], LENGTH)

    with db.read() as s:
        stored = {(r.key, r.signature) for r in s.scalars(select(MetricScore))}
    assert {k for k, _ in stored} == {"finding_recall", "finding_missed", "length_agreement"}
    assert ("length_agreement", SIG_LENGTH) in stored
    assert all(sig.endswith(f"|{TAG}") for _, sig in stored)

    out2 = tmp_path / "again.csv"
    assert main([*args[:-1], str(out2)]) == 0
    second = capsys.readouterr().out
    assert "finding_words: 0 computed, 3 from cache" in second
    assert "length_agreement: 0 computed, 3 from cache" in second
    assert out2.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")

    # A different option is a different signature: computed again, old cells kept.
    assert main([*args[:-1], str(tmp_path / "extra.csv"), "--set",
                 "finding_words.extra_words=radiograph"]) == 0
    assert "finding_words: 3 computed, 0 from cache" in capsys.readouterr().out


def test_a_new_release_of_the_plugin_does_not_reuse_cached_scores(db, monkeypatch):
    """The signature names the release: the same metric under another version is another
    cache key (as after `pip install -U`)."""
    pairs = [ScorePair(id=str(i), reference=r, candidate=c)
             for i, (r, c) in enumerate(zip(REFS, CANDS, strict=True))]
    first = score(pairs, ["length_agreement"], db=db)
    assert first.families["length_agreement"].computed == 3
    original = registry.load_class("length_agreement").__mro__[1]  # under the pinned class
    newer = plugins._pin(original, tag=f"plugin:{EXAMPLE_DIST}==0.2.0", where="test")
    monkeypatch.setitem(registry._REGISTRY.classes, "length_agreement", newer)
    again = score(pairs, ["length_agreement"], db=db)
    assert again.families["length_agreement"].computed == 3
    assert again.families["length_agreement"].signature == \
        f"length_agreement|version:1|plugin:{EXAMPLE_DIST}==0.2.0"
    assert _same(again.columns["length_agreement"], LENGTH)


# -- Python API and rewards -----------------------------------------------------------------


def test_python_api_score_and_metrics(tmp_path):
    frame = radconcord.score(references=REFS, candidates=CANDS,
                             metrics=["finding_words", "length_agreement"],
                             cache=tmp_path / "api.db")
    assert list(frame.columns) == ["finding_recall", "finding_missed", "length_agreement"]
    assert _same(list(frame["finding_recall"]), RECALL)
    assert _same(list(frame["finding_missed"]), MISSED)
    assert _same(list(frame["length_agreement"]), LENGTH)
    assert frame.attrs["signatures"]["length_agreement"] == SIG_LENGTH
    assert frame.attrs["signatures"]["finding_missed"].endswith(f"|{TAG}")
    # Options by key, as --set takes them.
    opt = radconcord.score(references=REFS, candidates=CANDS, metrics=["finding_words"],
                           options={"finding_missed": {"extra_words": "radiograph"}})
    assert opt.attrs["signatures"]["finding_recall"] != frame.attrs["signatures"][
        "finding_recall"]

    table = radconcord.metrics()
    rows = table[table["family"].isin(["finding_words", "length_agreement"])]
    assert list(rows["key"]) == ["finding_recall", "finding_missed", "length_agreement"]
    assert list(rows["higher_is_better"]) == [True, False, True]
    assert rows["available"].all()
    assert rows["plugin"].str.startswith(f"package {EXAMPLE_DIST} {EXAMPLE_VERSION} ").all()
    assert table.attrs["ignored_plugins"] == []


def test_trl_reward_functions_on_plugin_keys():
    recall = reward_fn("finding_recall", empty_value=None)
    values = recall(prompts=["p"] * 3, completions=CANDS, reference=REFS)
    assert values[:2] == [0.5, 1.0] and values[2] is None  # nan: TRL's missing reward
    missed = reward_fn("finding_missed")  # lower is better: negated so that higher is better
    assert missed.higher_is_better is False
    assert missed(completions=[[{"role": "assistant", "content": c}] for c in CANDS],
                  reference=REFS) == [-1.0, -0.0, -0.0]
    length = pickle.loads(pickle.dumps(reward_fn("length_agreement")))
    assert _same(length(completions=CANDS, reference=REFS), LENGTH)
    assert length.__name__ == "radconcord_length_agreement"
    with pytest.raises(radconcord.InputError, match="gives 2 keys"):
        reward_fn("finding_words")  # a family of two keys: name one


# -- broken and clashing plug-ins -----------------------------------------------------------

LOAD_FAILS = '''
from radconcord.plugins import BaseMetric, MetricResult, MetricSpec, OutputSpec

CARD = """# load_fails
## Description
Fails to load its weights.
## Inputs
texts
## Outputs
- `load_fails` (higher is better)
## Values from papers
none
## Limitations
always fails
## Citation
test
"""


class LoadFails(BaseMetric):
    spec = MetricSpec("load_fails", (OutputSpec("load_fails"),), needs_model=True)
    card = CARD

    def _load(self):
        raise RuntimeError("checkpoint is corrupt")

    def _score(self, *, references, candidates, images):
        return MetricResult(values={"load_fails": [1.0] * len(references)})

    def signature(self):
        return "load_fails|v1"


class NoCard(LoadFails):
    spec = MetricSpec("no_card", (OutputSpec("no_card"),))
    card = None


class MyBleu(LoadFails):
    spec = MetricSpec("my_bleu", (OutputSpec("bleu4"),))
'''


def test_broken_plugins_are_listed_unavailable_and_the_others_still_work(
        fake_plugins, db, tmp_path, capsys):
    fake_plugins("fake-broken", "0.1", {
        "broken_import": "no_such_module_for_radconcord:Metric",
        "raises_at_import": "fake_raises_mod:Metric",
        "load_fails": "fake_loadfail_mod:LoadFails",
        "no_card": "fake_loadfail_mod:NoCard",
    }, {"fake_raises_mod": "raise RuntimeError('boom at import')\n",
        "fake_loadfail_mod": LOAD_FAILS})
    origin = "package fake-broken 0.1 (entry point broken_import = " \
             "no_such_module_for_radconcord:Metric)"

    catalog = {m.family: m for m in metric_catalog()}
    broken = catalog["broken_import"]
    assert not broken.available and broken.keys == () and broken.origin == origin
    assert broken.reason == (f"plug-in from {origin} could not be loaded: ModuleNotFoundError:"
                             " No module named 'no_such_module_for_radconcord'")
    assert "RuntimeError: boom at import" in catalog["raises_at_import"].reason
    assert "no card" in catalog["no_card"].reason and not catalog["no_card"].available
    # Loading happens in the worker only: the catalogue cannot know, scoring tells.
    assert catalog["load_fails"].available
    assert catalog["finding_words"].available and catalog["bleu"].available

    # radconcord metrics and the Python API list them with their error.
    assert main(["metrics"]) == 0
    listing = capsys.readouterr().out
    assert "broken_import" in listing and "No module named 'no_such_module_for_radconcord'" \
        in listing
    table = radconcord.metrics()
    row = table[table["family"] == "broken_import"].iloc[0]
    # A missing key: None, which pandas' string column holds as NaN.
    assert pd.isna(row["key"]) and not row["available"] and "could not be loaded" in row["reason"]
    with pytest.raises(MetricUnavailable, match="could not be loaded"):
        registry.create("broken_import")

    # Scoring: the broken ones are unavailable with their error, the others are scored.
    pairs = _pairs_file(tmp_path / "pairs.jsonl")
    out = tmp_path / "scores.csv"
    rc = main(["score", "--input", str(pairs), "--metrics",
               "broken_import,load_fails,raises_at_import,length_agreement,bleu4",
               "--output", str(out), "--skip-unavailable"])
    err = capsys.readouterr()
    assert rc == 0, err.err
    assert ("skipped metric 'load_fails': could not load: RuntimeError: checkpoint is corrupt"
            in err.err)
    assert "skipped metric 'broken_import': plug-in from package fake-broken 0.1" in err.err
    assert "skipped metric 'raises_at_import'" in err.err
    assert "status length_agreement: done" in err.out and "status bleu: done" in err.out
    with out.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["id", "length_agreement", "bleu4"]
    assert _same([float(r["length_agreement"]) for r in rows], LENGTH)
    # Without --skip-unavailable the request stops with the reason.
    assert main(["score", "--input", str(pairs), "--metrics", "load_fails", "--output",
                 str(tmp_path / "x.csv")]) == 2
    assert "checkpoint is corrupt" in capsys.readouterr().err

    api = radconcord.score(references=REFS, candidates=CANDS,
                           metrics=["broken_import", "length_agreement"], skip_unavailable=True)
    assert list(api.columns) == ["length_agreement"]
    assert "could not be loaded" in api.attrs["unavailable"]["broken_import"]


def test_a_clashing_plugin_is_refused_with_both_origins(fake_plugins, capsys):
    # Between two plug-ins the distribution whose name sorts first is kept ("zz-" sorts after
    # the example), so which one wins never depends on sys.path order.
    fake_plugins("zz-clash", "1.0", {
        "bleu": "fake_clash_family:Bleu",
        "my_bleu": "fake_clash_keys:MyBleu",
        "finding_words": "fake_clash_family:Recall",
    }, {"fake_clash_keys": LOAD_FAILS})
    expected = [
        "plug-in family 'bleu' from package zz-clash 1.0 (entry point bleu ="
        " fake_clash_family:Bleu) clashes with the built-in family 'bleu'"
        " (radconcord.backend.metrics.lexical:Bleu); ignored",
        "plug-in family 'finding_words' from package zz-clash 1.0 (entry point"
        " finding_words = fake_clash_family:Recall) clashes with the plug-in family"
        f" 'finding_words' from package {EXAMPLE_DIST} {EXAMPLE_VERSION} (entry point"
        " finding_words = radconcord_example_metric.finding_words:FindingWords); ignored",
        "plug-in family 'my_bleu' from package zz-clash 1.0 (entry point my_bleu ="
        " fake_clash_keys:MyBleu) declares the output key 'bleu4', which clashes with the"
        " output key 'bleu4' of the built-in family 'bleu'"
        " (radconcord.backend.metrics.lexical:Bleu); ignored",
    ]
    assert sorted(registry.ignored_plugins()) == expected
    # Refused by name before any import; nothing of theirs is registered.
    assert "fake_clash_family" not in sys.modules
    assert registry.ENTRIES["bleu"].origin is None
    assert registry.ENTRIES["finding_words"].origin.startswith(f"package {EXAMPLE_DIST}")
    assert "my_bleu" not in registry.ENTRIES and registry.KEY_TO_FAMILY["bleu4"] == "bleu"

    assert main(["metrics"]) == 0
    text = capsys.readouterr().out
    assert all(f"ignored: {m}" in text for m in expected)
    assert main(["metrics", "--json"]) == 0
    res = capsys.readouterr()
    assert [m["family"] for m in json.loads(res.out)].count("bleu") == 1
    assert all(f"warning: {m}" in res.err for m in expected)
    assert sorted(radconcord.metrics().attrs["ignored_plugins"]) == expected
    # The other families are untouched.
    frame = radconcord.score(references=REFS, candidates=CANDS,
                             metrics=["bleu4", "finding_words"])
    assert _same(list(frame["finding_recall"]), RECALL)


def test_the_metrics_page_lists_plugins_and_refused_ones(fake_plugins, db, tmp_path,
                                                         monkeypatch):
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from radconcord.backend.services.accounts import auth
    from radconcord.backend.types import Actor

    fake_plugins("fake-clash", "1.0", {"bleu": "fake_clash_family:Bleu",
                                       "broken_import": "no_such_module_for_radconcord:M"})
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'radconcord.db'}")  # db's file
    monkeypatch.setenv("RADCONCORD_SEED_DEMO", "0")
    info = auth.create_user(db, Actor.system(), username="boss", password="boss-password-1",
                            role="admin")
    st.cache_data.clear()  # the page caches the catalogue for a minute
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "webapp" / "views"
                               / "metrics.py"), default_timeout=120)
    at.session_state["actor"] = Actor(user_id=info.user_id, username="boss", role="admin")
    at.run()
    assert not at.exception
    catalog = at.dataframe[0].value
    rows = catalog.set_index("Family")
    assert rows.loc["finding_words", "Outputs"] == "finding_recall ↑, finding_missed ↓"
    assert rows.loc["finding_words", "Plug-in"].startswith(f"package {EXAMPLE_DIST}")
    assert rows.loc["length_agreement", "Available"]
    assert not rows.loc["broken_import", "Available"]
    assert "No module named 'no_such_module_for_radconcord'" in rows.loc["broken_import",
                                                                          "Why not"]
    assert rows.loc["bleu", "Plug-in"] == ""
    warnings = [w.value for w in at.warning]
    assert any("Metric plug-in not registered: plug-in family 'bleu' from package fake-clash"
               in w and "radconcord.backend.metrics.lexical:Bleu" in w for w in warnings)


# -- discovery cost, and the decorator's options ---------------------------------------------


def test_discovery_is_lazy_runs_once_and_loads_no_model_library(plugin_site):
    """Built-in names are answered without reading the entry points; the first unknown
    name or listing reads them once, importing the plug-in's module and no model library."""
    code = (
        "import sys\n"
        "from importlib import metadata\n"
        "calls = []\n"
        "real = metadata.entry_points\n"
        "metadata.entry_points = lambda **kw: calls.append(kw) or real(**kw)\n"
        "from radconcord.backend.metrics import registry\n"
        "from radconcord.backend.scoring.runner import requested_keys\n"
        "requested_keys(['bleu4', 'rouge', 'meteor'])\n"
        "registry.higher_is_better('radcliq_v1'), registry.corpus_dependent('cider')\n"
        "print('before', len(calls), 'radconcord_example_metric' in sys.modules)\n"
        "requested_keys(['finding_recall', 'length_agreement'])\n"
        "list(registry.ENTRIES), registry.directions(list(registry.KEY_TO_FAMILY))\n"
        "print('after', len(calls), 'radconcord_example_metric.finding_words' in sys.modules)\n"
        "print('heavy', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=plugin_site.env, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["before 0 False", "after 1 True", "heavy []"]


CHAR_RATIO = '''
from radconcord.plugins import metric

CARD = """# char_ratio
## Description
Character count ratio.
## Inputs
texts; option lowercase
## Outputs
- `char_gap` (lower is better)
## Values from papers
none
## Limitations
length only
## Citation
test
"""


@metric(name="char_gap", higher_is_better=False, version="2", card=CARD)
def char_gap(references, candidates, *, lowercase=True):
    if any(c == "WRONG COUNT" for c in candidates):
        return [0.0]
    return [abs(len(r) - len(c)) for r, c in zip(references, candidates)]
'''


def test_a_decorated_function_gets_options_direction_and_its_signature(fake_plugins):
    fake_plugins("fake-fn", "0.5", {"char_gap": "fake_char_gap:char_gap"},
                 {"fake_char_gap": CHAR_RATIO})
    assert registry.ENTRIES["char_gap"].keys == ("char_gap",)
    assert registry.higher_is_better("char_gap") is False
    assert registry.create("char_gap").signature() == \
        "char_gap|version:2|lowercase:True|plugin:fake-fn==0.5"
    assert registry.create("char_gap", lowercase=False).signature() == \
        "char_gap|version:2|lowercase:False|plugin:fake-fn==0.5"
    with pytest.raises(ValueError, match="unknown option.*known: lowercase"):
        registry.create("char_gap", casefold=True)
    pairs = [ScorePair(id="a", reference="abcd", candidate="ab"),
             ScorePair(id="b", reference="x", candidate="WRONG COUNT")]
    table = score(pairs[:1], ["char_gap"])
    assert table.columns["char_gap"] == [2.0]
    # A function that returns the wrong number of values fails its family, not the run.
    table = score(pairs, ["char_gap", "length_agreement"], keep_going=True)
    assert "returned 1 values for 2 pairs" in table.failed["char_gap"]
    assert table.families["length_agreement"].status == "done"
