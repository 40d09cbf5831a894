"""Small stdlib-only helpers shared across the backend (file hashing, atomic writes, safe
CSV cells, bounded JSON nesting).

Imports nothing outside the standard library (and ``backend.errors``, itself stdlib-only) so
any module, including the CLI command modules, may use it without pulling in heavy
dependencies.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from radconcord.backend.errors import InvalidInput

_CHUNK = 1 << 20

_SHA_CACHE: dict[tuple[str, int, int], str] = {}
_SHA_LOCK = threading.Lock()


#: Row ids are SQL BIGINTs; a larger int overflows SQLite's INTEGER and PostgreSQL's BIGINT.
MAX_DB_ID = 2**63 - 1


def is_db_id(value: object) -> bool:
    """Whether ``value`` is an int that a row id can equal (``1..2**63-1``).

    An id outside that range names no row; services answer it exactly as an unknown id,
    instead of letting the database driver raise ``OverflowError`` while binding it.
    """
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_DB_ID


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


MANIFEST = "manifest.json"


def free_output_dir(out_dir: str | os.PathLike[str]) -> Path:
    """The resolved ``out_dir``, refused unless it is missing or an empty folder.

    Call it before slow work so a taken target fails at once; :func:`publish_dir` checks
    again before moving its result into place.

    Args:
        out_dir: Folder an export or dataset is about to be written to.

    Raises:
        InvalidInput: ``out_dir`` is a file or a folder that is not empty.
    """
    target = Path(out_dir).resolve()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidInput(f"{target}: output folder exists and is not empty")
    return target


def publish_dir(
    out_dir: str | os.PathLike[str],
    write: Callable[[Path], Mapping[str, Any] | None],
    *,
    manifest: str = MANIFEST,
) -> list[str]:
    """Build a folder beside ``out_dir`` and move it into place whole, with a manifest.

    ``write`` fills a fresh staging folder (``.<name>.tmp-<hex>`` in ``out_dir``'s parent,
    so the final ``os.replace`` is a rename on one file system) and returns the manifest, or
    ``None`` for none. The manifest's ``"files"`` entry, when given, lists the files to
    describe (relative paths, in the order wanted); when absent, every file is listed in
    sorted order. Either way it is replaced by ``{path: {"sha256": ..., "bytes": ...}}``
    and written as indented UTF-8 JSON under ``manifest``. On any error, or an interrupt,
    the staging folder is removed: ``out_dir`` is complete or untouched.

    Args:
        out_dir: Target folder; must be missing or empty (see :func:`free_output_dir`).
        write: Fills the staging folder it is given; returns the manifest body or ``None``.
        manifest: File name of the manifest inside the folder.

    Returns:
        The files described by the manifest followed by the manifest itself; without a
        manifest, every file of the folder in sorted order. Paths are relative to
        ``out_dir``, with ``/`` separators.

    Raises:
        InvalidInput: ``out_dir`` is taken (a file or a non-empty folder).
    """
    target = free_output_dir(out_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    # A plain mkdir, not mkdtemp: the folder becomes the published one and keeps the
    # usual permissions (mkdtemp's 0700 would hide an export from its group).
    tmp = target.parent / f".{target.name}.tmp-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        body = write(tmp)
        if body is None:
            files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
        else:
            body = dict(body)
            listed = body.get("files")  # replaced where it stands, else added last
            names = (list(listed) if listed is not None else
                     sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*")
                            if p.is_file()))
            body["files"] = {name: {"sha256": file_sha256(tmp / name),
                                    "bytes": (tmp / name).stat().st_size} for name in names}
            with open(tmp / manifest, "w", encoding="utf-8", newline="\n") as fh:
                json.dump(body, fh, indent=2, ensure_ascii=False, default=str)
                fh.write("\n")
            files = [*names, manifest]
        free_output_dir(target)
        if target.exists():
            target.rmdir()  # empty (checked above); os.replace needs the name free
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return files


# OWASP "CSV injection": a spreadsheet runs a cell as a formula when its text starts with one
# of these; tab and carriage return can hide such a start from a first look at the file.
CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CSV_ESCAPE = "'"


def csv_safe(value: Any) -> Any:
    """A CSV cell that no spreadsheet will evaluate as a formula.

    Text starting with ``=``, ``+``, ``-``, ``@``, tab or carriage return gets a leading
    ``'`` (OWASP's recommendation); everything else, numbers included, is returned as is.
    The decision is made on the value's type: ``-0.5`` as a float stays a number, while the
    text ``"-0.5"`` is prefixed, so callers must pass numbers as numbers.

    Args:
        value: The cell as it would be handed to ``csv.writer``.
    """
    if isinstance(value, str) and value.startswith(CSV_FORMULA_STARTS):
        return CSV_ESCAPE + value
    return value


def csv_unescape(text: str) -> str:
    """Undo :func:`csv_safe` on a cell read back from a file this application wrote.

    Only a ``'`` followed by one of :data:`CSV_FORMULA_STARTS` is removed, so ordinary text
    (``'tis``) is left alone.

    Args:
        text: The cell as read by ``csv.reader``.
    """
    if text.startswith(CSV_ESCAPE) and text[1:].startswith(CSV_FORMULA_STARTS):
        return text[1:]
    return text


def csv_safe_row(row: Iterable[Any]) -> list[Any]:
    """:func:`csv_safe` applied to every cell of one row."""
    return [csv_safe(value) for value in row]


class SafeCsvWriter:
    """A ``csv.writer`` whose cells are formula-safe and whose line breaks are always quoted.

    Every cell goes through :func:`csv_safe`. A cell holding a carriage return or line feed
    is always quoted: the csv module quotes only the characters of its line terminator, so
    with ``"\\n"`` a lone CR was written bare and split the record on reading. Rows without
    such cells come out byte for byte as from ``csv.writer`` with the same settings.

    Args:
        fh: Text file opened with ``newline=""``.
        lineterminator: Written after each row.
        fmtparams: Other ``csv.writer`` settings (quoting, delimiter...).
    """

    def __init__(self, fh: IO[str], *, lineterminator: str = "\n", **fmtparams: Any) -> None:
        self._fh = fh
        self._terminator = lineterminator
        self._buffer = io.StringIO(newline="")
        # Rows are formatted with CRLF, so the writer quotes any cell holding CR or LF, and
        # that CRLF is swapped for the wanted terminator.
        self._writer = csv.writer(self._buffer, lineterminator="\r\n", **fmtparams)

    def writerow(self, row: Iterable[Any]) -> None:
        """Write one row (header or data)."""
        self._buffer.seek(0)
        self._buffer.truncate()
        self._writer.writerow(csv_safe_row(row))
        self._fh.write(self._buffer.getvalue()[:-2] + self._terminator)

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        """Write several rows."""
        for row in rows:
            self.writerow(row)


def records_to_csv(
    records: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None
) -> str:
    """CSV text (header + one line per record) with formula-safe cells, for downloads.

    Args:
        records: One mapping per row; a missing key is an empty cell, ``None`` too.
        columns: Column order (default: the keys in order of first appearance).
    """
    if columns is None:
        seen: dict[str, None] = {}
        for record in records:
            seen.update(dict.fromkeys(record))
        columns = list(seen)
    buffer = io.StringIO(newline="")
    writer = SafeCsvWriter(buffer)
    writer.writerow(columns)
    writer.writerows([record.get(c) for c in columns] for record in records)
    return buffer.getvalue()


# Deepest JSON nesting accepted in an input line. Our records are at most three levels deep;
# the json module recurses once per level and overflows the interpreter's stack on hostile
# lines (RecursionError), so depth is checked before parsing.
MAX_JSON_DEPTH = 32
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text nests arrays/objects deeper than ``limit`` levels.

    Brackets inside strings are ignored. Runs in linear time without recursion or parsing;
    the text need not be valid JSON, the parser reports that afterwards.

    Args:
        text: One JSON document (a JSONL line).
        limit: Deepest nesting allowed.
    """
    if text.count("[") + text.count("{") <= limit:
        return False  # the common case: too few brackets to be deep, nothing to scan
    # Drop escaped backslashes, then escaped quotes: every quote left delimits a string
    # (left-to-right, as a JSON lexer reads escapes), so every other piece is outside strings.
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(unescaped.split('"')[0::2])
    if outside.count("[") + outside.count("{") <= limit:
        return False
    depth = 0
    for match in _JSON_BRACKET.finditer(outside):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (``object``, ``array``, ``number``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
