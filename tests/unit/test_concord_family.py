"""The ``concord`` family: registry contract, availability, signatures, trained folders, the
numpy gradient-boosting inference and the features."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import MetricUnavailable, Resources
from radconcord.backend.metrics.concord import family, folder, gbm
from radconcord.backend.metrics.concord.features import FEATURE_NAMES, feature_matrix
from radconcord.backend.metrics.concord.rules import COUNT_NAMES

REPO = Path(__file__).resolve().parent.parent.parent
PAIRS = [json.loads(line) for line in
         (REPO / "tests" / "fixtures" / "report_pairs.jsonl").read_text().splitlines()]
REFS = [p["reference"] for p in PAIRS]
CANDS = [p["candidate"] for p in PAIRS]


def _meta(variant: str = "gbm", **extra):
    meta = {"variant": variant, "seed": 0, "trained_on": "unit test", "n_train": 3,
            "created_by": "pytest", "heldout": {}, "recipe_weights": {}}
    if variant == "gbm":
        meta["feature_names"] = list(FEATURE_NAMES)
    return {**meta, **extra}


@pytest.fixture(scope="module")
def gbm_folder(tmp_path_factory):
    """A tiny trained gbm folder (rule counts as targets, so the model has something to fit)."""
    import sklearn  # noqa: F401 - the train extra, in the test install: missing must fail
    x = feature_matrix(REFS, CANDS)
    y = x[:, :12] + (np.arange(len(REFS))[:, None] % 2)
    model = gbm.fit_gbm(x, y, n_estimators=8, max_depth=2, min_samples_leaf=2,
                        feature_names=FEATURE_NAMES)
    out = tmp_path_factory.mktemp("gbm")
    model.save(out)
    folder.write_meta(out, _meta())
    return out


# -- registry and contract -------------------------------------------------------------------


def test_registry_entry_matches_the_class_and_every_key_is_lower_is_better():
    cls = registry.load_class("concord")
    assert cls.spec.keys == registry.ENTRIES["concord"].keys == family.CONCORD_KEYS
    assert family.CONCORD_KEYS[2:] == tuple(f"concord_{n}" for n in COUNT_NAMES)
    assert COUNT_NAMES[:4] == ("c1_sig", "c1_insig", "c2_sig", "c2_insig")
    assert not any(registry.higher_is_better(k) for k in family.CONCORD_KEYS)
    assert not registry.corpus_dependent("concord")
    assert "concord" in registry.resolve(["concord_c3_sig"])


def test_options_are_checked():
    with pytest.raises(ValueError, match="variant must be one of rules, gbm, ce"):
        registry.create("concord", variant="bert")
    with pytest.raises(ValueError, match="batch_size"):
        registry.create("concord", batch_size=0)
    with pytest.raises(ValueError, match="unknown option"):
        registry.create("concord", nope=1)


def test_rules_scores_with_totals_and_evidence():
    m = registry.create("concord")
    assert m.availability() is None
    res = m.score(references=["Small left pleural effusion. Stable cardiomegaly."],
                  candidates=["Large right pleural effusion."])
    v = {k: vals[0] for k, vals in res.values.items()}
    assert v["concord_c2_sig"] == v["concord_c3_sig"] == v["concord_c4_sig"] == 1
    assert v["concord_c6_insig"] == 1
    assert v["concord_total"] == 4 and v["concord_sig"] == 3
    d = res.details[0]
    assert d["variant"] == "rules" and sum(d["counts"]) == 4
    assert {e["category"] for e in d["errors"]} == {2, 3, 4, 6}
    c3 = next(e for e in d["errors"] if e["category"] == 3)
    assert c3["reference"] == {"text": "Small left pleural effusion.", "span": [0, 28]}
    assert c3["candidate"]["text"] == "Large right pleural effusion."
    assert m.signature() == "concord:v1|variant:rules|rules:v2|labeler:radconcord-rules-v1"
    empty = m.score(references=[], candidates=[])
    assert empty.values["concord_total"] == []


def test_rules_and_gbm_never_import_torch(gbm_folder):
    code = (
        "import sys\n"
        "import radconcord.backend\n"
        "import radconcord.backend.metrics.concord\n"
        "assert 'radconcord.backend.metrics.concord.rules' not in sys.modules\n"
        "from radconcord.backend.metrics import registry\n"
        "for v, m in (('rules', None), ('gbm', sys.argv[1])):\n"
        "    registry.create('concord', variant=v, model=m).score(\n"
        "        references=['Small effusion.'], candidates=['No effusion.'])\n"
        "print(sorted(x for x in ('torch', 'transformers', 'sklearn') if x in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(gbm_folder)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- availability -----------------------------------------------------------------------------


def test_ce_is_unavailable_until_trained_and_says_how():
    reason = registry.availability("concord", variant="ce")
    assert "radconcord train-concord --variant ce --output DIR" in reason
    assert "--set concord.model=DIR" in reason


def test_gbm_without_a_folder_is_unavailable_with_the_reason(tmp_path, monkeypatch):
    missing = tmp_path / "nope"
    reason = registry.availability("concord", variant="gbm", model=str(missing))
    assert "does not exist" in reason and "train-concord --variant gbm" in reason
    monkeypatch.setattr(family, "DEFAULT_GBM_DIR", missing)
    reason = registry.availability("concord", variant="gbm")
    assert "none is packaged" in reason
    with pytest.raises(MetricUnavailable, match="train-concord"):
        registry.create("concord", variant="gbm").load()
    assert "missing" in registry.create("concord", variant="gbm").signature()


def test_a_folder_of_the_other_variant_is_refused(gbm_folder):
    reason = registry.availability("concord", variant="ce", model=str(gbm_folder))
    assert "holds a concord gbm model" in reason


def test_hub_models_need_a_pinned_revision():
    path, reason = folder.locate_model("hub:owner/name")
    assert path is None and "no pinned revision" in reason
    path, reason = folder.locate_model("hub:not a repo")
    assert path is None and "hub:owner/name@revision" in reason


# -- gbm end to end ---------------------------------------------------------------------------


def test_gbm_family_scores_with_the_trained_folder(gbm_folder):
    m = registry.create("concord", variant="gbm", model=str(gbm_folder))
    assert m.availability() is None
    res = m.score(references=REFS, candidates=CANDS)
    model = gbm.GbmModel.load(gbm_folder)
    raw = model.predict(feature_matrix(REFS, CANDS))
    # By default the predicted counts are whole errors, as a rater counts them.
    expected = np.rint(raw)
    got = np.array([res.values[f"concord_{n}"] for n in COUNT_NAMES]).T
    np.testing.assert_array_equal(got, expected)
    assert (got >= 0).all()
    np.testing.assert_array_equal(res.values["concord_total"], expected.sum(axis=1))
    np.testing.assert_array_equal(res.values["concord_sig"], expected[:, 0::2].sum(axis=1))
    assert res.details[0]["variant"] == "gbm" and "errors" in res.details[0]
    assert res.details[0]["counts"] == [int(c) for c in expected[0]]
    np.testing.assert_allclose(res.details[0]["predicted"], raw[0], atol=5e-5)  # 4 decimals
    sha = folder.folder_sha256(gbm_folder)[:16]
    assert m.signature() == (f"concord:v1|variant:gbm|model:sha256:{sha}|features:v2"
                             "|round:1|rules:v2|labeler:radconcord-rules-v1")

    unrounded = registry.create("concord", variant="gbm", model=str(gbm_folder), round=False)
    res = unrounded.score(references=REFS, candidates=CANDS)
    got = np.array([res.values[f"concord_{n}"] for n in COUNT_NAMES]).T
    np.testing.assert_array_equal(got, raw)
    np.testing.assert_allclose(res.values["concord_total"], raw.sum(axis=1))
    assert "|round:0|" in unrounded.signature()
    with pytest.raises(ValueError, match="round must be true or false"):
        registry.create("concord", variant="gbm", round="yes")


def test_gbm_signature_follows_the_folder_contents(gbm_folder, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(gbm_folder, copy)
    sig = registry.create("concord", variant="gbm", model=str(copy)).signature()
    assert sig == registry.create("concord", variant="gbm", model=str(gbm_folder)).signature()
    meta = folder.read_meta(copy)
    folder.write_meta(copy, {**meta, "n_train": 4})
    assert registry.create("concord", variant="gbm", model=str(copy)).signature() != sig


def test_a_gbm_folder_with_other_features_is_refused(gbm_folder, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(gbm_folder, bad)
    folder.write_meta(bad, _meta(feature_names=["a", "b"]))
    m = registry.create("concord", variant="gbm", model=str(bad))
    with pytest.raises(MetricUnavailable, match="lists features other than"):
        m.load()


def test_a_gbm_folder_trained_on_older_feature_definitions_is_refused(gbm_folder, tmp_path):
    # Same feature names, other definitions (the rules behind them changed): refused.
    import shutil

    old = tmp_path / "old"
    shutil.copytree(gbm_folder, old)
    meta = folder.read_meta(old)
    meta["features_version"] = "1"
    folder.write_meta(old, meta)
    m = registry.create("concord", variant="gbm", model=str(old))
    with pytest.raises(MetricUnavailable, match=r"trained on features v1, this version computes"):
        m.load()


def test_ce_goes_through_load_ce(tmp_path, monkeypatch):
    """The family calls ce.load_ce(folder, device, resources) and reads (n, 12) counts."""
    from radconcord.backend.metrics.concord import ce

    folder.write_meta(tmp_path, _meta("ce"))
    calls = []

    class Fake:
        def predict(self, references, candidates, batch_size):
            calls.append(batch_size)
            return np.tile(np.arange(12, dtype=np.float32), (len(references), 1))

    def fake_load(path, device, resources):
        assert Path(path) == tmp_path.resolve() and isinstance(resources, Resources)
        return Fake()

    monkeypatch.setattr(ce, "load_ce", fake_load)
    m = registry.create("concord", variant="ce", model=str(tmp_path), batch_size=7)
    assert m.availability() is None
    res = m.score(references=["a", "b"], candidates=["c", "d"])
    assert calls == [7]
    assert res.values["concord_total"] == [66.0, 66.0]
    assert res.values["concord_sig"] == [30.0, 30.0]
    assert res.values["concord_c6_insig"] == [11.0, 11.0]
    assert m.signature().startswith("concord:v1|variant:ce|model:sha256:")


# -- numpy inference against scikit-learn ------------------------------------------------------


def test_numpy_predict_equals_sklearn():
    """Same leaves (float32 inputs against float64 thresholds, as sklearn compares) and the
    same float64 additions in the same order, so the values agree to the last bit here; 1e-12
    leaves room for a library version that reorders the additions (a few ulps)."""
    from sklearn import ensemble
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6)).astype(np.float32)
    x[:, 5] = rng.integers(0, 4, size=400)  # small counts, like most features
    y = np.stack([x[:, 0] ** 2 + x[:, 5], np.abs(x[:, 1]) * 2, (x[:, 2] > 0) * 3.0], axis=1)
    model = gbm.fit_gbm(x, y, n_estimators=25, max_depth=3, seed=1)
    test = np.concatenate([rng.normal(size=(300, 6)), x.astype(np.float64)])
    test[:7, 5] = [0, 0.5, 1, 1.5, 2, 3, 2.5]  # on and beside thresholds
    expected = np.stack([
        ensemble.GradientBoostingRegressor(n_estimators=25, max_depth=3, min_samples_leaf=5,
                                           random_state=1).fit(x, y[:, k]).predict(test)
        for k in range(3)], axis=1)
    np.testing.assert_allclose(model.predict(test, clip=False), expected, rtol=0, atol=1e-12)
    assert (model.predict(test) >= 0).all()
    again = gbm.GbmModel.from_json(model.to_json())
    np.testing.assert_array_equal(again.predict(test), model.predict(test))
    np.testing.assert_array_equal(model.predict(test, chunk=7), model.predict(test))


def test_gbm_json_is_checked():
    with pytest.raises(ValueError, match="not a gbm model"):
        gbm.GbmModel.from_json('{"format": 1}')
    with pytest.raises(ValueError, match="format"):
        gbm.GbmModel.from_json('{"format": 99}')
    leaf = gbm.Tree.from_dict({"feature": [-1], "threshold": [0], "left": [-1], "right": [-1],
                               "value": [2.5]})
    model = gbm.GbmModel(np.array([1.0]), 0.5, [[leaf]])
    np.testing.assert_array_equal(model.predict(np.zeros((3, 4))), [[2.25]] * 3)


# -- folders ------------------------------------------------------------------------------------


def test_meta_round_trip_and_clear_errors(tmp_path):
    folder.write_meta(tmp_path, _meta())
    meta = folder.read_meta(tmp_path)
    assert meta["format_version"] == folder.FORMAT_VERSION and meta["variant"] == "gbm"
    with pytest.raises(FileNotFoundError, match="concord.json"):
        folder.read_meta(tmp_path / "none")
    with pytest.raises(ValueError, match=r"concord\.json: field 'seed' is missing"):
        folder.write_meta(tmp_path / "x", {k: v for k, v in _meta().items() if k != "seed"})
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="field 'feature_names'"):
        folder.write_meta(tmp_path / "x", _meta(feature_names=None))
    with pytest.raises(ValueError, match="field 'variant'"):
        folder.write_meta(tmp_path / "x", _meta("rules"))
    (tmp_path / folder.META_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=rf"{folder.META_FILE}: not valid JSON"):
        folder.read_meta(tmp_path)


def test_folder_sha256_covers_names_and_contents(tmp_path):
    (tmp_path / "a.json").write_text("1")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"\x00\x01")
    first = folder.folder_sha256(tmp_path)
    assert len(first) == 64 and folder.folder_sha256(tmp_path) == first
    (tmp_path / ".hidden").write_text("ignored")
    assert folder.folder_sha256(tmp_path) == first
    (tmp_path / "a.json").write_text("2")
    assert folder.folder_sha256(tmp_path) != first
    (tmp_path / "a.json").write_text("1")
    assert folder.folder_sha256(tmp_path) == first
    (tmp_path / "a.json").rename(tmp_path / "c.json")
    assert folder.folder_sha256(tmp_path) != first


# -- features -----------------------------------------------------------------------------------


def test_feature_matrix_shape_names_and_reuse():
    assert 40 <= len(FEATURE_NAMES) <= 60 and len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert FEATURE_NAMES[:12] == tuple(f"rule_{n}" for n in COUNT_NAMES)
    x = feature_matrix(REFS, CANDS)
    assert x.shape == (len(REFS), len(FEATURE_NAMES)) and x.dtype == np.float32
    assert np.isfinite(x).all()
    assert feature_matrix([], []).shape == (0, len(FEATURE_NAMES))
    # One pair alone gives the same row as inside a batch (the caches change no value).
    np.testing.assert_array_equal(feature_matrix(REFS[5:6], CANDS[5:6])[0], x[5])
    same = feature_matrix(["Small left pleural effusion."], ["Small left pleural effusion."])[0]
    col = dict(zip(FEATURE_NAMES, same, strict=True))
    assert col["rule_total"] == 0 and col["token_jaccard"] == 1 and col["bleu1"] == 1
    assert col["ref_n_present"] == col["cand_n_present"] == 1
    with pytest.raises(ValueError, match="differ in length"):
        feature_matrix(["a"], [])
