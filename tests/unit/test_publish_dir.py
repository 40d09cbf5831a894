"""backend.util.publish_dir: one staging + manifest + os.replace for every folder export."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from radconcord.backend.errors import InvalidInput
from radconcord.backend.util import free_output_dir, publish_dir


def test_manifest_lists_the_given_files_in_order_with_sha256_and_size(tmp_path):
    out = tmp_path / "sub" / "export"

    def write(tmp):
        (tmp / "images").mkdir()
        (tmp / "images" / "a.png").write_bytes(b"png bytes")
        (tmp / "pairs.jsonl").write_text("{}\n", encoding="utf-8")
        return {"format": "jsonl", "files": ["pairs.jsonl", "images/a.png"], "counts": {"n": 1}}

    files = publish_dir(out, write)
    assert files == ["pairs.jsonl", "images/a.png", "manifest.json"]
    text = (out / "manifest.json").read_text(encoding="utf-8")
    assert text.endswith("}\n")
    manifest = json.loads(text)
    # "files" is filled in where it stood; the other keys keep their order.
    assert list(manifest) == ["format", "files", "counts"]
    assert manifest["files"] == {
        "pairs.jsonl": {"sha256": hashlib.sha256(b"{}\n").hexdigest(), "bytes": 3},
        "images/a.png": {"sha256": hashlib.sha256(b"png bytes").hexdigest(), "bytes": 9},
    }
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["export"]


def test_without_files_every_file_is_listed_sorted_and_none_means_no_manifest(tmp_path):
    def write(tmp):
        (tmp / "b.txt").write_text("b")
        (tmp / "a").mkdir()
        (tmp / "a" / "z.txt").write_text("z")
        return {"study": "s"}

    assert publish_dir(tmp_path / "one", write) == ["a/z.txt", "b.txt", "manifest.json"]
    assert list(json.loads((tmp_path / "one" / "manifest.json").read_text())["files"]) == [
        "a/z.txt", "b.txt"]

    def bare(tmp):
        write(tmp)
        return None

    assert publish_dir(tmp_path / "two", bare) == ["a/z.txt", "b.txt"]
    assert not (tmp_path / "two" / "manifest.json").exists()


def test_a_failure_leaves_no_folder_and_no_staging_behind(tmp_path):
    out = tmp_path / "export"
    out.mkdir()  # an empty target is allowed and stays as it was on failure

    def write(tmp):
        (tmp / "half.csv").write_text("id\n")
        raise InvalidInput("study cannot be written")

    with pytest.raises(InvalidInput, match="cannot be written"):
        publish_dir(out, write)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    assert list(out.iterdir()) == []

    def interrupted(tmp):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        publish_dir(tmp_path / "other", interrupted)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_a_taken_target_is_refused_before_and_after_writing(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    called = []
    with pytest.raises(InvalidInput, match=r"full: output folder exists and is not empty"):
        publish_dir(full, lambda tmp: called.append(tmp))
    assert called == [] and (full / "keep.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput, match="not empty"):
        free_output_dir(tmp_path / "file")

    # Another process fills the target while the export is being written: nothing is lost.
    racy = tmp_path / "racy"

    def write(tmp):
        racy.mkdir()
        (racy / "theirs.txt").write_text("theirs")
        (tmp / "ours.txt").write_text("ours")
        return None

    with pytest.raises(InvalidInput, match="not empty"):
        publish_dir(racy, write)
    assert [p.name for p in racy.iterdir()] == ["theirs.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "full", "racy"]


def test_the_published_folder_has_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        publish_dir(tmp_path / "out", lambda tmp: None)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o755
