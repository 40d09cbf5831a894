"""Small stdlib-only helpers shared across the backend (file hashing, atomic writes).

Imports nothing outside the standard library so any module, including the CLI command
modules, may use it without pulling in heavy dependencies.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

_CHUNK = 1 << 20

_SHA_CACHE: dict[tuple[str, int, int], str] = {}
_SHA_LOCK = threading.Lock()


def file_sha256(path: str | os.PathLike[str], *, chunk_size: int = _CHUNK) -> str:
    """Hex sha256 of a file's bytes, read in chunks (images and weights can be large).

    Args:
        path: Path of the file.
        chunk_size: Bytes read at a time.
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


def cached_file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, cached per (resolved path, size, mtime) for this process.

    Model signatures hash multi-GB weight files on every call; the cache makes repeated calls
    free while a changed file (new size or mtime) is hashed again.

    Args:
        path: Path of the file.
    """
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    with _SHA_LOCK:
        if key in _SHA_CACHE:
            return _SHA_CACHE[key]
    digest = file_sha256(p)
    with _SHA_LOCK:
        _SHA_CACHE[key] = digest
    return digest


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str],
    *,
    encoding: str = "utf-8",
    newline: str | None = None,
    fsync: bool = False,
) -> Iterator[IO[str]]:
    """Open a text file for writing so that ``path`` is either the old file or the new one.

    The text goes to a temporary file in the same folder (``.<name>.*.tmp``), which replaces
    ``path`` with ``os.replace`` when the block exits normally and is removed otherwise.

    Args:
        path: Destination file; its folder must exist.
        encoding: Text encoding.
        newline: As for :func:`open`.
        fsync: Flush to disk before the rename (for files other processes read back).
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline=newline) as fh:
            yield fh
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def staging_dir(parent: str | os.PathLike[str], prefix: str) -> Iterator[Path]:
    """A fresh temporary folder inside ``parent``, removed on exit unless moved away.

    Callers fill it and ``os.replace`` it onto the final name inside the block, so a crash
    never leaves a half-written folder under the final name.

    Args:
        parent: Folder to create it in (created when missing).
        prefix: Name prefix of the temporary folder.
    """
    Path(parent).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def user_errors(*types: type[BaseException]) -> Iterator[None]:
    """Turn the given exceptions raised in the block into ``backend.cli.UserError``.

    For CLI handlers: the error's message becomes the one-line ``error: ...`` the CLI prints.

    Args:
        types: Exception classes whose message is meant for the user.
    """
    # Imported here: backend.cli imports the command modules, which import this module.
    from backend.cli import UserError

    try:
        yield
    except types as exc:
        raise UserError(str(exc)) from None
