"""The trained-folder format of ``concord`` (shared by the ``gbm`` and ``ce`` variants).

A trained folder holds ``concord.json`` (:data:`META_FILE`) and the variant's files:
``gbm.json`` for ``gbm``; the encoder files and ``head.safetensors`` for ``ce``. The metadata
keys are :data:`META_KEYS`; :func:`read_meta` checks them and names the file and field of any
problem. The folder's identity in signatures is :func:`folder_sha256`, over every file
(relative names and contents) in sorted order.

A folder is named by a path, or by ``hub:owner/name@revision`` (a Hugging Face repository at a
pinned revision, looked up in the local cache, else downloaded at load time when the hub can be
reached); see :func:`locate_model` and :func:`resolve_model`.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from radconcord.backend.util import atomic_write

__all__ = [
    "FORMAT_VERSION",
    "HUB_PREFIX",
    "META_FILE",
    "META_KEYS",
    "VARIANTS",
    "check_meta",
    "folder_sha256",
    "locate_model",
    "read_meta",
    "resolve_model",
    "write_meta",
]

META_FILE = "concord.json"
FORMAT_VERSION = 1
#: The variants a trained folder may hold.
VARIANTS: tuple[str, ...] = ("gbm", "ce")
HUB_PREFIX = "hub:"

#: Metadata keys and what each holds. ``feature_names`` is required for ``gbm`` only.
META_KEYS: dict[str, str] = {
    "format_version": "int, this layout's version (1)",
    "variant": "'gbm' or 'ce'",
    "feature_names": "list of feature names in column order (gbm; also read as 'features')",
    "seed": "int, the training seed",
    "trained_on": "str, what the training pairs were made from",
    "recipe_weights": "dict recipe -> weight of the synthetic mix",
    "n_train": "int, training pairs",
    "heldout": "dict metric -> value on the held-out synthetic split",
    "created_by": "str, the command that made the folder",
}
_REQUIRED = ("format_version", "variant", "seed", "trained_on", "n_train", "created_by")


def _fail(path: Path, what: str) -> ValueError:
    return ValueError(f"{path}: {what}")


def read_meta(path: str | Path) -> dict[str, Any]:
    """Read and check the metadata of a trained folder.

    Args:
        path: The folder (or its ``concord.json``).

    Returns:
        The metadata dict.

    Raises:
        FileNotFoundError: when the folder or its ``concord.json`` is missing.
        ValueError: for malformed JSON or a missing/ill-typed field (the message names the
            file and the field).
    """
    p = Path(path).expanduser()
    file = p if p.name == META_FILE else p / META_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found (not a trained concord folder)")
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(file, f"not valid JSON ({exc})") from exc
    check_meta(meta, file)
    return meta


def check_meta(meta: Any, file: Path | str = META_FILE) -> None:
    """Check metadata as :func:`read_meta` does.

    Args:
        meta: The parsed metadata.
        file: What to name in messages.

    Raises:
        ValueError: for a missing or ill-typed field (the message names the file and field).
    """
    file = Path(file)
    if not isinstance(meta, dict):
        raise _fail(file, "must hold a JSON object")
    for key in _REQUIRED:
        if key not in meta:
            raise _fail(file, f"field '{key}' is missing ({META_KEYS[key]})")
    if meta["format_version"] != FORMAT_VERSION:
        raise _fail(file, f"field 'format_version' is {meta['format_version']!r}; this version"
                          f" reads {FORMAT_VERSION}")
    if meta["variant"] not in VARIANTS:
        raise _fail(file, f"field 'variant' is {meta['variant']!r}, expected one of"
                          f" {', '.join(VARIANTS)}")
    if isinstance(meta["seed"], bool) or not isinstance(meta["seed"], int):
        raise _fail(file, f"field 'seed' must be an integer, got {meta['seed']!r}")
    if isinstance(meta["n_train"], bool) or not isinstance(meta["n_train"], int):
        raise _fail(file, f"field 'n_train' must be an integer, got {meta['n_train']!r}")
    if meta["variant"] == "gbm":
        # "features" is read as another name of the field.
        names = meta.get("feature_names", meta.get("features"))
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _fail(file, "field 'feature_names' must be a list of strings for a gbm folder")
    for key, kind in (("heldout", dict), ("recipe_weights", dict)):
        if key in meta and not isinstance(meta[key], kind):
            raise _fail(file, f"field '{key}' must be a JSON object")


def write_meta(path: str | Path, meta: Mapping[str, Any]) -> Path:
    """Write ``concord.json`` into folder ``path`` (created if needed), checked on the way.

    Args:
        path: The trained folder.
        meta: The metadata; ``format_version`` defaults to :data:`FORMAT_VERSION`.

    Returns:
        The file written.

    Raises:
        ValueError: when the metadata would not pass :func:`read_meta` (nothing is written).
    """
    folder = Path(path).expanduser()
    data = {"format_version": FORMAT_VERSION, **dict(meta)}
    file = folder / META_FILE
    # JSON round trip first, so the check sees what read_meta will read.
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    check_meta(json.loads(text), file)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_write(file) as fh:
        fh.write(text)
    return file


_SHA_CACHE: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}
_SHA_LOCK = threading.Lock()


def folder_sha256(path: str | Path) -> str:
    """sha256 (hex) over a folder's files: each relative name (POSIX form) and contents.

    Files are taken in sorted order of their relative names; hidden files and folders are
    left out. The result is cached per process, keyed on every file's size and mtime.

    Raises:
        FileNotFoundError: when ``path`` is not a folder.
    """
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder")
    files = sorted(
        (f.relative_to(root).as_posix(), f)
        for f in root.rglob("*")
        if f.is_file() and not any(part.startswith(".") for part in f.relative_to(root).parts)
    )
    stats = tuple((rel, st.st_size, st.st_mtime_ns) for rel, f in files for st in (f.stat(),))
    key = (str(root), stats)
    with _SHA_LOCK:
        hit = _SHA_CACHE.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    for rel, f in files:
        h.update(rel.encode("utf-8") + b"\x00")
        with f.open("rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\x00")
    digest = h.hexdigest()
    with _SHA_LOCK:
        _SHA_CACHE[key] = digest
    return digest


_HUB = re.compile(r"^hub:(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w.-]+))?$")


def _parse_hub(model: str) -> tuple[str, str | None]:
    m = _HUB.match(model.strip())
    if m is None:
        raise ValueError(f"'{model}' is not of the form hub:owner/name@revision")
    return m.group("repo"), m.group("rev")


def locate_model(model: str) -> tuple[Path | None, str | None]:
    """Where a trained folder is, without downloading or loading anything.

    Args:
        model: A folder path or ``hub:owner/name@revision``.

    Returns:
        ``(folder, None)`` when it is local; ``(None, None)`` for a hub folder that is not
        cached but can be downloaded now; ``(None, reason)`` otherwise.
    """
    if model.startswith(HUB_PREFIX):
        try:
            repo, rev = _parse_hub(model)
        except ValueError as exc:
            return None, str(exc)
        if rev is None:
            return None, (f"'{model}' has no pinned revision: write it as"
                          f" hub:{repo}@<commit sha>")
        from radconcord.backend.metrics import hf

        cached = hf.hf_cache_file(repo, META_FILE, rev)
        if cached is not None:
            return cached.parent, None
        reason = hf.hub_unavailable_reason(
            f"trained concord folder {repo}@{rev}",
            f"download it elsewhere and give its folder path ({model} -> a path)",
        )
        return None, reason
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return None, f"trained concord folder {folder} does not exist"
    if not (folder / META_FILE).is_file():
        return None, f"{folder} has no {META_FILE} (not a trained concord folder)"
    return folder.resolve(), None


def resolve_model(model: str) -> Path:
    """A local folder for ``model`` (a hub folder is downloaded at its pinned revision).

    Raises:
        FileNotFoundError: when it can be neither found nor fetched (the message says why).
    """
    folder, reason = locate_model(model)
    if folder is not None:
        return folder
    if reason is not None:
        raise FileNotFoundError(reason)
    repo, rev = _parse_hub(model)
    from huggingface_hub import snapshot_download

    try:
        return Path(str(snapshot_download(repo, revision=rev)))
    except Exception as exc:  # noqa: BLE001 - surface any hub failure as one clear reason
        raise FileNotFoundError(f"could not download {model}: {exc}") from exc
