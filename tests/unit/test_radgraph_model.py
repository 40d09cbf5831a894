"""The RadGraph metric end to end on a tiny random-weight checkpoint in the public archive format.

The archive (``tests/helpers_radgraph.py``) holds ``config.json``, ``weights.th`` and
``vocabulary/`` like ``radgraph.tar.gz`` of ``StanfordAIMI/RRG_scorers``, with a DyGIE++ model
built by the radgraph package's own classes on a tiny BERT. Scores are arbitrary; what is
checked is the loading path, determinism, identity of identical reports and exact agreement of
our annotations with the package's own ``radgraph.RadGraph`` inference on the same archive.
"""

from __future__ import annotations

import json
import math
import shutil
import tarfile

import pytest

from radconcord.backend.metrics import radgraph as rg
from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import MetricUnavailable, signature_hash
from tests.helpers_models import CORPUS
from tests.helpers_radgraph import build_tiny_radgraph, extract_for_package

REPORTS = [
    *CORPUS[:6],
    "Normal",
    "No acute process. Heart size normal.",
    "Small left effusion.",
]


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return build_tiny_radgraph(tmp_path_factory.mktemp("rg"))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Private data dir (extraction cache), no model dir, empty HF cache, hub off."""
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("RADCONCORD_MODEL_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_scores_are_finite_deterministic_and_one_for_identical_reports(archive):
    refs = [REPORTS[0], REPORTS[0], REPORTS[1], REPORTS[3], REPORTS[0]]
    cands = [REPORTS[0], REPORTS[2], REPORTS[1], REPORTS[4], REPORTS[5]]
    m1 = rg.RadGraph(checkpoint=str(archive), batch_size=3)
    first = m1.score(references=refs, candidates=cands)
    # Instances outside a scoring pool own their model: the second one loads afresh.
    m2 = rg.RadGraph(checkpoint=str(archive), batch_size=2)
    second = m2.score(references=refs, candidates=cands)
    assert m1._model is not m2._model
    assert first.values == second.values
    for key in rg.KEYS:
        assert len(first.values[key]) == len(refs)
        assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in first.values[key])
    for i in (0, 2):  # identical reports
        assert first.details[i]["reference_entities"] > 0
        for key in ("radgraph_simple", "radgraph_partial", "radgraph_complete"):
            assert first.values[key][i] == 1.0
        expected = 1.0 if first.details[i]["reference_relations"] else 0.5
        assert first.values["radgraph_combined"][i] == expected
    # Different reports do not all score 1 (the model really reads the text).
    assert min(first.values["radgraph_simple"][j] for j in (1, 3, 4)) < 1.0
    assert set(first.corpus) == {f"{k}_mean" for k in rg.KEYS}


def test_annotations_equal_the_radgraph_package_inference(archive, tmp_path):
    """Our batched inference vs ``radgraph.RadGraph`` (one report per forward) on the same
    archive: identical entity dicts (exact)."""
    from radgraph import RadGraph

    metric = rg.RadGraph(checkpoint=str(archive), batch_size=8)
    ours = metric.annotate(REPORTS)
    cache = tmp_path / "pkg-cache"
    extract_for_package(archive, cache)
    package = RadGraph(model_type="radgraph", model_cache_dir=str(cache), cuda=-1)
    out = package(REPORTS)
    theirs = [out[str(i)]["entities"] for i in range(len(REPORTS))]
    assert ours == theirs
    assert any(a for a in ours) and any(e["relations"] for a in ours for e in a.values())


def test_batch_size_does_not_change_annotations(archive):
    a1 = rg.RadGraph(checkpoint=str(archive), batch_size=1).annotate(REPORTS)
    a5 = rg.RadGraph(checkpoint=str(archive), batch_size=5).annotate(REPORTS)
    assert a1 == a5


def test_each_distinct_report_is_annotated_once(archive, monkeypatch):
    metric = rg.RadGraph(checkpoint=str(archive))
    metric.load("cpu")
    seen: list[str] = []
    real = metric._model.annotate

    def spy(texts, batch_size=8):
        seen.extend(texts)
        return real(texts, batch_size)

    monkeypatch.setattr(metric._model, "annotate", spy)
    metric.score(references=[REPORTS[0]] * 3, candidates=[REPORTS[1], REPORTS[0], REPORTS[2]])
    assert sorted(seen) == sorted({REPORTS[0], REPORTS[1], REPORTS[2]})


def test_blank_reports_get_no_entities_and_zero(archive):
    res = rg.RadGraph(checkpoint=str(archive)).score(
        references=["   ", REPORTS[0]], candidates=["", "\n"]
    )
    for key in rg.KEYS:
        assert res.values[key] == [0.0, 0.0]
    assert res.details[0]["no_entities"] == "both"
    assert res.details[1]["no_entities"] == "candidate"


def test_extracted_folder_and_model_dir_load_the_same_model(archive, tmp_path, monkeypatch):
    folder = tmp_path / "extracted"
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    from_folder = rg.RadGraph(checkpoint=str(folder)).annotate(REPORTS[:4])
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(archive, models / "radgraph.tar.gz")
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(models))
    metric = rg.RadGraph()
    assert metric.availability() is None
    assert metric.annotate(REPORTS[:4]) == from_folder
    assert registry.availability("radgraph") is None


def test_hub_encoder_name_resolves_through_the_encoder_option(archive, tmp_path):
    """A config naming a hub encoder (as the public archives do) needs a local copy offline."""
    folder = tmp_path / "hubname"
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    config = json.loads((folder / "config.json").read_text())
    local_bert = config["dataset_reader"]["token_indexers"]["bert"]["model_name"]
    for section in (config["dataset_reader"]["token_indexers"],
                    config["model"]["embedder"]["token_embedders"]):
        section["bert"]["model_name"] = "example-org/BiomedBERT-test"
    (folder / "config.json").write_text(json.dumps(config))

    reason = rg.RadGraph(checkpoint=str(folder)).availability()
    assert reason is not None and "example-org/BiomedBERT-test" in reason
    assert "HF_HUB_OFFLINE" in reason
    metric = rg.RadGraph(checkpoint=str(folder), encoder=local_bert)
    assert metric.availability() is None
    expected = rg.RadGraph(checkpoint=str(archive)).annotate(REPORTS[:3])
    assert metric.annotate(REPORTS[:3]) == expected


def test_unavailable_without_weights_gives_a_reason_and_never_downloads(tmp_path, monkeypatch):
    metric = rg.RadGraph()
    reason = metric.availability()
    assert reason is not None
    assert "radgraph.tar.gz" in reason and "HF_HUB_OFFLINE" in reason
    assert "RADCONCORD_MODEL_DIR" in reason
    with pytest.raises(MetricUnavailable):
        metric.load("cpu")
    xl = rg.RadGraph(model_type="radgraph-xl").availability()
    assert xl is not None and "radgraph-xl.tar.gz" in xl
    missing = rg.RadGraph(checkpoint=str(tmp_path / "nope.tar.gz")).availability()
    assert missing is not None and "does not exist" in missing
    # Hub reachable or not, an offline flag short-circuits before any probe.
    monkeypatch.setattr(rg.hf, "hub_reachable", lambda *a, **k: pytest.fail("probed the hub"))
    assert rg.RadGraph().availability() is not None


def test_not_an_archive_is_a_clear_reason(tmp_path):
    bad = tmp_path / "radgraph.tar.gz"
    bad.write_bytes(b"not a tarball")
    reason = rg.RadGraph(checkpoint=str(bad)).availability()
    assert reason is not None and "not a RadGraph archive" in reason


def test_signature_names_model_checkpoint_hash_and_f1_version(archive, tmp_path):
    sig = rg.RadGraph(checkpoint=str(archive)).signature()
    sha = rg._file_sha256(archive)[:16]
    assert sig.startswith(f"radgraph|model:radgraph|ckpt:sha256:{sha}|f1:v1|")
    assert "prep:radgraph-0.1.18" in sig
    # Settings that do not change numbers stay out of it.
    assert rg.RadGraph(checkpoint=str(archive), batch_size=1).signature() == sig
    other = build_tiny_radgraph(tmp_path, seed=1, name="other")
    assert signature_hash(rg.RadGraph(checkpoint=str(other)).signature()) != signature_hash(sig)


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="model_type"):
        rg.RadGraph(model_type="echograph")
    with pytest.raises(ValueError, match="batch_size"):
        rg.RadGraph(batch_size=0)
