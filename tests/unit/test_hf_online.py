"""Model loading for a user who is online: an unpinned hub id is pinned to the hub's current
commit, asked once, downloaded at that commit and named by it in signatures.

The hub is a local fake: ``HfApi.model_info`` answers a fixed sha and ``snapshot_download``
copies a tiny model saved by the test into a cache laid out like the Hugging Face cache
(``models--<id>/snapshots/<sha>``, ``refs/main``), honouring ``local_files_only``. Nothing
leaves the machine.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest

from radconcord.backend.metrics import hf
from tests.helpers_llm import build_tiny_llama
from tests.helpers_models import build_tiny_bert

SHA = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Answers model_info and snapshot_download for the models it was given."""

    def __init__(self, root: Path, models: dict[str, Path], sha: str = SHA) -> None:
        self.root, self.models, self.sha = root, models, sha
        self.info_calls: list[str] = []
        self.downloads: list[tuple[str, str | None]] = []
        self.fail_info: Exception | None = None

    def _repo(self, model: str) -> Path:
        return self.root / f"models--{model.replace('/', '--')}"

    def model_info(self, repo_id, *, timeout=None, **_):
        self.info_calls.append(repo_id)
        if self.fail_info is not None:
            raise self.fail_info
        if repo_id not in self.models:
            raise FileNotFoundError(f"404 Client Error: Repository Not Found for {repo_id}")
        return SimpleNamespace(id=repo_id, sha=self.sha)

    def snapshot_download(self, repo_id, *, revision=None, local_files_only=False, **_):
        repo = self._repo(repo_id)
        if local_files_only:
            rev = revision
            if rev is None:
                main = repo / "refs" / "main"
                if not main.is_file():
                    raise FileNotFoundError(f"{repo_id} is not in the cache")
                rev = main.read_text().strip()
            snap = repo / "snapshots" / rev
            if not snap.is_dir():
                raise FileNotFoundError(f"{repo_id}@{rev} is not in the cache")
            return str(snap)
        if hf.hub_offline():
            raise RuntimeError("download attempted while offline")
        assert revision == self.sha, f"download of {revision!r}, the hub serves {self.sha}"
        self.downloads.append((repo_id, revision))
        snap = repo / "snapshots" / revision
        shutil.copytree(self.models[repo_id], snap)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
        return str(snap)


@pytest.fixture
def online(monkeypatch, tmp_path):
    """Online (no HF_HUB_OFFLINE, hub reachable), no model dir, a fake hub."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("RADCONCORD_MODEL_DIR", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://fake-hub.invalid")
    monkeypatch.setattr(hf, "hub_reachable", lambda timeout=1.5: True)
    models = {"acme/tiny-bert": build_tiny_bert(tmp_path / "src", own_vocab=True)}
    hub = FakeHub(tmp_path / "hf-cache", models)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info",
                        lambda api, repo_id, **kw: hub.model_info(repo_id, **kw))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
    hf._HUB_SHA.clear()
    yield hub
    hf._HUB_SHA.clear()


def test_unpinned_id_is_pinned_to_the_hub_commit_once(online):
    ref = hf.ModelRef("acme/tiny-bert")
    assert hf.resolve_or_reason(ref) == (None, None)  # downloadable, not local yet
    found, reason = hf.locate(ref)
    assert reason is None and found.source == "hub" and found.ref == hf.ModelRef(ref.model, SHA)
    assert hf.pinned(ref).revision == SHA
    assert hf.identity(ref) == f"acme/tiny-bert@{SHA}"
    path = hf.resolve(ref)
    assert online.downloads == [("acme/tiny-bert", SHA)]
    assert path.name == SHA and hf.is_model_folder(path)
    # After the download: found in the cache at that commit, same identity, no new download.
    found, _ = hf.locate(ref)
    assert found.source == "hf_cache" and found.path == path
    assert hf.identity(ref) == f"acme/tiny-bert@{SHA}"
    assert hf.resolve(ref) == path and len(online.downloads) == 1
    assert online.info_calls == ["acme/tiny-bert"]  # asked once per process
    hf.load_model(path)  # the downloaded commit loads


def test_a_pinned_revision_is_not_asked_for(online):
    ref = hf.ModelRef("acme/tiny-bert", SHA)
    assert hf.resolve_or_reason(ref) == (None, None)
    assert hf.identity(ref) == f"acme/tiny-bert@{SHA}"
    assert online.info_calls == []


def test_hub_failure_is_a_reason_asked_once(online):
    online.fail_info = ConnectionError("Max retries exceeded")
    _, reason = hf.resolve_or_reason(hf.ModelRef("acme/tiny-bert"))
    assert "could not ask the Hugging Face hub for the current commit" in reason
    assert "ConnectionError" in reason and "revision=<commit sha>" in reason
    _, again = hf.resolve_or_reason(hf.ModelRef("acme/tiny-bert"))
    assert again == reason and len(online.info_calls) == 1  # failure remembered for a while
    with pytest.raises(hf.ModelNotAvailable, match="current commit"):
        hf.resolve(hf.ModelRef("acme/tiny-bert"))
    online.fail_info = None
    _, missing = hf.resolve_or_reason(hf.ModelRef("acme/absent"))
    assert "acme/absent" in missing and "Not Found" in missing


def test_offline_later_uses_the_cached_commit(online, monkeypatch):
    hf.resolve(hf.ModelRef("acme/tiny-bert"))
    asked = len(online.info_calls)
    hf._HUB_SHA.clear()  # a new process
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    found, reason = hf.locate(hf.ModelRef("acme/tiny-bert"))
    assert reason is None and found.source == "hf_cache"
    assert found.ref.revision == SHA and found.path.name == SHA
    assert hf.identity(hf.ModelRef("acme/tiny-bert")) == f"acme/tiny-bert@{SHA}"
    assert len(online.info_calls) == asked  # offline: the hub is not asked


def test_offline_or_unreachable_without_cache_keeps_its_reason(online, monkeypatch):
    monkeypatch.setattr(hf, "hub_reachable", lambda timeout=1.5: False)
    _, reason = hf.resolve_or_reason(hf.ModelRef("acme/tiny-bert"))
    assert "no pinned revision" in reason and "cannot be reached" in reason
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _, reason = hf.resolve_or_reason(hf.ModelRef("acme/tiny-bert"))
    assert "no pinned revision" in reason and "HF_HUB_OFFLINE" in reason
    assert online.info_calls == [] and online.downloads == []
    with pytest.raises(hf.ModelNotAvailable):
        hf.identity(hf.ModelRef("acme/tiny-bert"))


def test_local_folders_are_untouched(online, tmp_path):
    folder = build_tiny_bert(tmp_path / "local", own_vocab=True)
    assert hf.resolve_or_reason(hf.ModelRef(str(folder))) == (folder.resolve(), None)
    assert hf.identity(hf.ModelRef(str(folder))).startswith("tiny-bert@sha256:")
    assert online.info_calls == []


def test_green_is_available_online_without_a_pinned_revision(online, tmp_path):
    """GREEN's default has no pinned commit: online it is pinned to the hub's and downloaded."""
    from radconcord.backend.metrics.green import Green

    online.models["acme/green-tiny"] = build_tiny_llama(tmp_path / "lm")
    metric = Green(model="acme/green-tiny", max_new_tokens=4, batch_size=2)
    assert metric.availability() is None
    assert hf.pinned(hf.ModelRef("acme/green-tiny")).revision == SHA
    # Before the download the signature names the commit (llm.identity via hf.pinned).
    assert f"model:ref:acme/green-tiny@{SHA}|" in metric.signature()
    res = metric.score(references=["No effusion."], candidates=["Small effusion."])
    assert len(res) == 1
    assert online.downloads == [("acme/green-tiny", SHA)]
    snapshot = online.root / "models--acme--green-tiny" / "snapshots" / SHA
    # Loaded from the downloaded commit; the signature names that folder's content.
    assert f"fp:{hf.fingerprint(snapshot)[:16]}" in metric.signature()


def test_bertscore_names_the_commit_before_and_the_weights_after_the_download(online):
    from radconcord.backend.metrics.bertscore import BertScore

    metric = BertScore(model="acme/tiny-bert", num_layers=1)
    assert metric.availability() is None
    assert f"|model:acme/tiny-bert@rev:{SHA}|L1|" in metric.signature()
    metric.score(references=["no effusion"], candidates=["small effusion"])
    assert online.downloads == [("acme/tiny-bert", SHA)]
    snapshot = online.root / "models--acme--tiny-bert" / "snapshots" / SHA
    fresh = BertScore(model="acme/tiny-bert", num_layers=1)  # a new plan finds it local
    assert f"@sha256:{hf.fingerprint(snapshot)[:16]}|" in fresh.signature()
