"""The one reader of PAIRS files (CSV or JSONL): records, numbering, checks and errors.

``score --input`` (:func:`backend.scoring.io.read_pairs`) and ``import-pairs``
(:func:`backend.datasets.pairs.parse_cases`) read the same files through this module, so a
file is accepted or refused the same way by both and every problem is named the same way.

Numbering: a CSV record is ``row N (line L)``, N counting data rows (1 = the first row after
the header; rows whose cells are all blank are skipped and not counted) and L the physical
line where the record starts (they differ when a quoted field spans lines); problems with the
header say ``header``. A JSONL record is ``line L`` (only LF ends a line; blank lines are
skipped). Every problem raises :class:`backend.errors.InvalidInput` with one line,
``FILE: WHERE: message`` or ``FILE: WHERE, field 'name': message``.

Checks shared by both readers: the file is UTF-8 (an optional BOM is dropped); CSV is parsed
strictly (a stray or unclosed quote is an error, never silently merged text); a CSV header has
no duplicate names and a cell that our writers neutralised against spreadsheet formulas (a
leading ``'``, see :func:`backend.util.csv_unescape`) is read back without it; a JSONL line
nests arrays/objects at most ``MAX_JSON_DEPTH`` (32) levels (checked before parsing: the json
module would overflow the stack) and holds one object; text fields must be text (not objects,
arrays, numbers, booleans or null) without NUL characters (PostgreSQL cannot store them); a
report holds at most ``MAX_REPORT_BYTES`` bytes of UTF-8; ids, sources and views hold at most
``MAX_LABEL_CHARS`` characters (integers are accepted and read as text); image paths resolve
inside an allowed folder, links included.

Imports only the standard library and the bottom layer (errors, types, util), so every layer
from scoring up may use it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radconcord.backend.errors import InvalidInput
from radconcord.backend.types import ImageInput
from radconcord.backend.util import MAX_JSON_DEPTH, csv_unescape, json_too_deep, json_type

# Largest file read by default: import-pairs loads it whole into one transaction's worth of
# cases; the score command passes ``max_bytes=None`` (it streams nothing to the database).
MAX_FILE_BYTES = 512 * 1024 * 1024
# Longest report, in UTF-8 bytes: a chest X-ray report is a few kB. The limit stops a pasted
# file or a runaway generation from reaching a model (tokenizers, O(n^2) metrics) or the
# database, and stays below the csv module's own (process-global) field limit.
MAX_REPORT_BYTES = 100_000
# Longest id, source or view: the database stores them in 128 characters.
MAX_LABEL_CHARS = 128
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
IMAGE_FIELDS = ("images", "image")
# In a CSV cell (or a JSONL string), several images are separated by this character.
IMAGE_SEPARATOR = ";"


@dataclass(frozen=True)
class Record:
    """One data record of a PAIRS file.

    Attributes:
        number: 1-based data row (blank rows and lines are not counted).
        line: Physical line of the file where the record starts.
        where: ``"row N (line L)"`` (CSV) or ``"line L"`` (JSONL), for messages.
        fields: Column name -> value: strings in CSV, decoded JSON values in JSONL.
    """

    number: int
    line: int
    where: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class RecordFile:
    """The records of one file, in file order."""

    path: Path
    format: str  # "csv" | "jsonl"
    header: tuple[str, ...] | None  # CSV column names; None for JSONL
    records: list[Record]


def detect_format(path: str | os.PathLike[str]) -> str:
    """``"csv"`` or ``"jsonl"`` from the extension, else from the first non-blank byte."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    with p.open("rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return "jsonl" if head.startswith(b"{") else "csv"


def field_error(path: str | os.PathLike[str], where: str, field: str,
                message: str) -> InvalidInput:
    """The error for one field of one record: ``FILE: WHERE, field 'name': message``."""
    return InvalidInput(f"{path}: {where}, field {field!r}: {message}")


def read_records(
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    max_bytes: int | None = MAX_FILE_BYTES,
) -> RecordFile:
    """Read the records of a CSV or JSONL file, checking what every reader of it needs.

    Args:
        path: The file.
        fmt: ``"csv"`` or ``"jsonl"``; detected from the name or content when ``None``.
        max_bytes: Largest file accepted, or ``None`` for no limit.

    Returns:
        The records (an empty list for a file with no data rows).

    Raises:
        InvalidInput: A missing or unreadable file, a file over ``max_bytes``, bytes that are
            not UTF-8, malformed CSV or JSON, a duplicate CSV column, a CSV row whose field
            count differs from the header's, a JSONL line nested too deep or not an object.
    """
    p = Path(path)
    if not p.exists():
        raise InvalidInput(f"{path}: file not found")
    if not p.is_file():
        raise InvalidInput(f"{path}: not a file")
    try:
        size = p.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise InvalidInput(f"{path}: file is {size} bytes; the limit is {max_bytes}")
        fmt = fmt or detect_format(p)
        data = p.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read file ({exc.strerror})") from None
    if fmt not in ("csv", "jsonl"):
        raise InvalidInput(f"{path}: unknown format {fmt!r} (expected csv or jsonl)")
    text, bad = _decode(data)
    if fmt == "jsonl":
        return RecordFile(p, fmt, None, _jsonl_records(path, text, bad))
    header, records = _csv_records(path, text, bad)
    return RecordFile(p, fmt, header, records)


@dataclass(frozen=True)
class _BadByte:
    offset: int  # in the file, a BOM included
    value: int


def _decode(data: bytes) -> tuple[str, _BadByte | None]:
    """The text, and the first byte that is not UTF-8 (``None`` when all are).

    Undecodable bytes become lone surrogates (``surrogateescape``), which valid UTF-8 never
    produces, so the parsers can name the row or line that holds the first one.
    """
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        return data[bom:].decode("utf-8"), None
    except UnicodeDecodeError as exc:
        bad = _BadByte(exc.start + bom, data[exc.start + bom])
        return data[bom:].decode("utf-8", errors="surrogateescape"), bad


_SURROGATE = re.compile("[\udc80-\udcff]")
_SURROGATE_ANY = re.compile("[\ud800-\udfff]")


def _not_utf8(path: str | os.PathLike[str], where: str, bad: _BadByte) -> InvalidInput:
    return InvalidInput(f"{path}: {where}: not valid UTF-8 (byte 0x{bad.value:02x} at offset "
                        f"{bad.offset}); save the file as UTF-8")


def _jsonl_records(path: str | os.PathLike[str], text: str,
                   bad: _BadByte | None) -> list[Record]:
    records = []
    # Only LF ends a JSONL line: str.splitlines would also split at U+2028, U+0085 and other
    # characters that JSON strings may hold unescaped (our own export writes them raw).
    for line_no, line in enumerate(text.split("\n"), start=1):
        where = f"line {line_no}"
        if bad is not None and _SURROGATE.search(line):
            raise _not_utf8(path, where, bad)
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        too_deep = f"{path}: {where}: nesting deeper than {MAX_JSON_DEPTH} levels"
        if json_too_deep(line):
            raise InvalidInput(too_deep)
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(
                f"{path}: {where}: invalid JSON ({exc.msg}, column {exc.colno})"
            ) from None
        except RecursionError:  # the scan above should have caught it; never a traceback
            raise InvalidInput(too_deep) from None
        if not isinstance(obj, dict):
            raise InvalidInput(f"{path}: {where}: expected a JSON object, got {json_type(obj)}")
        records.append(Record(len(records) + 1, line_no, where, obj))
    return records


class _Lines:
    """Physical lines fed to ``csv.reader``, counted, with the current record's raw text."""

    def __init__(self, text: str) -> None:
        # newline="": lines end at LF, CR or CRLF, as the csv module expects.
        self._lines = iter(io.StringIO(text, newline=""))
        self.line_no = 0
        self.raw: list[str] = []

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.line_no += 1
        self.raw.append(line)
        return line


def _csv_records(path: str | os.PathLike[str], text: str,
                 bad: _BadByte | None) -> tuple[tuple[str, ...] | None, list[Record]]:
    lines = _Lines(text)
    reader = csv.reader(lines, strict=True)
    header: list[str] | None = None
    records: list[Record] = []
    while True:
        lines.raw = []
        start = lines.line_no + 1
        where = (f"row {len(records) + 1} (line {start})" if header is not None
                 else f"header (line {start})")
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise _csv_error(path, where, exc, "".join(lines.raw), header) from None
        if bad is not None and any(_SURROGATE.search(raw) for raw in lines.raw):
            raise _not_utf8(path, where, bad)
        if not any(v.strip() for v in values):
            continue
        if header is None:
            # A header cell our writers neutralised (a leading "'") names the plain column.
            header = [csv_unescape(h).strip() for h in values]
            dup = next((h for h in header if header.count(h) > 1), None)
            if dup is not None:
                raise InvalidInput(f"{path}: header: duplicate column {dup!r}")
            continue
        if len(values) != len(header):
            raise InvalidInput(
                f"{path}: {where}: {len(values)} fields, the header has {len(header)}"
            )
        records.append(Record(len(records) + 1, start, where,
                              dict(zip(header, values, strict=True))))
    if header is None:
        raise InvalidInput(f"{path}: empty file (no header row)")
    return tuple(header), records


# One CSV field of a raw record: quoted (doubled quotes inside) or bare up to the next comma.
_CSV_FIELD = re.compile(r'"(?:[^"]|"")*"|[^,\r\n]*')


def _overlong_column(raw: str, header: Sequence[str] | None, limit: int) -> str | None:
    """Name the first field of a raw CSV record longer than ``limit`` (error path only)."""
    pos, index = 0, 0
    while pos <= len(raw):
        match = _CSV_FIELD.match(raw, pos)
        if match is None:
            return None
        if match.end() - match.start() > limit:
            if header is not None and index < len(header):
                return header[index]
            return f"column {index + 1}"
        if raw[match.end() : match.end() + 1] != ",":
            return None
        pos, index = match.end() + 1, index + 1
    return None


def _csv_error(path: str | os.PathLike[str], where: str, exc: csv.Error, raw: str,
               header: Sequence[str] | None) -> InvalidInput:
    if "field larger than field limit" in str(exc):
        column = _overlong_column(raw, header, csv.field_size_limit())
        limit = f"larger than the CSV field limit; reports are limited to {MAX_REPORT_BYTES} bytes"
        if column is not None:
            return field_error(path, where, column, limit)
        return InvalidInput(f"{path}: {where}: a field is {limit}")
    reason = str(exc)
    if reason == "unexpected end of data":
        reason += ": a quoted field is not closed"
    return InvalidInput(f"{path}: {where}: malformed CSV ({reason})")


def require_columns(path: str | os.PathLike[str], header: Sequence[str],
                    required: Sequence[str | tuple[str, ...]]) -> None:
    """Refuse a CSV header without one of ``required`` (a tuple: any one of its names).

    Raises:
        InvalidInput: ``FILE: header: missing column 'x' (found: 'a', 'b')``; for a tuple,
            ``missing column 'case_id' (or 'id')``.
    """
    for names in required:
        options = (names,) if isinstance(names, str) else names
        if not any(name in header for name in options):
            wanted = repr(options[0]) + "".join(f" (or {n!r})" for n in options[1:])
            found = ", ".join(repr(h) for h in header) or "nothing"
            raise InvalidInput(f"{path}: header: missing column {wanted} (found: {found})")


def check_text(path: str | os.PathLike[str], where: str, field: str, value: Any) -> str:
    """Refuse a non-text value (object, array, number, boolean, null) or text with NUL.

    Args:
        path: The file, for the message.
        where: The record (:attr:`Record.where`), for the message.
        field: Field name, for the message.
        value: The raw value.

    Returns:
        ``value`` unchanged.

    Raises:
        InvalidInput: ``value`` is not a string, or contains a NUL character or an unpaired
            surrogate (a JSON ``\\udXXX`` escape that is not Unicode text).
    """
    if not isinstance(value, str):
        raise field_error(path, where, field, f"expected text, got {json_type(value)}")
    if "\x00" in value:
        raise field_error(path, where, field, "contains a NUL character")
    if _SURROGATE_ANY.search(value):
        # A JSON escape such as "\ud800" without its pair: not Unicode text, which neither
        # UTF-8 nor the database can hold.
        raise field_error(path, where, field, "contains an unpaired surrogate escape")
    return value


def check_report(path: str | os.PathLike[str], where: str, field: str, value: Any) -> str:
    """Check one report: text, no NUL, at most ``MAX_REPORT_BYTES`` bytes of UTF-8.

    An absent field (``None`` from a missing key) is refused as ``expected text, got null``;
    blank text is accepted here, each reader decides what an empty report means.

    Returns:
        ``value`` unchanged (texts are hashed and scored exactly as given).

    Raises:
        InvalidInput: Not text, NUL inside, or too large; file, record and field named.
    """
    value = check_text(path, where, field, value)
    if len(value) > MAX_REPORT_BYTES // 4:  # only long texts can be over the byte limit
        size = len(value.encode("utf-8"))
        if size > MAX_REPORT_BYTES:
            raise field_error(path, where, field, f"report is {size} bytes; the limit is "
                                                  f"{MAX_REPORT_BYTES} bytes")
    return value


def check_label(path: str | os.PathLike[str], where: str, field: str,
                value: Any) -> str | None:
    """Check an id, source or view: text or an integer, at most ``MAX_LABEL_CHARS``.

    Returns:
        The stripped text (an integer as its decimal text); ``None`` when absent or blank.

    Raises:
        InvalidInput: Another type, NUL inside, or longer than ``MAX_LABEL_CHARS``.
    """
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # JSONL ids and labels may be integers
    text = check_text(path, where, field, value).strip()
    if len(text) > MAX_LABEL_CHARS:
        raise field_error(path, where, field, f"longer than {MAX_LABEL_CHARS} characters")
    return text or None


def resolve_image_path(path: str | os.PathLike[str], where: str, field: str, raw: str,
                       base: Path, *, folders: bool = False) -> Path:
    """Resolve an image path inside ``base``; refuse anything that escapes it.

    ``resolve()`` follows links, so a link inside ``base`` that points outside it is refused.

    Args:
        path: The input file, for the message.
        where: The record, for the message.
        field: The field naming the image, for the message.
        raw: The path as written in the file (relative to ``base``, or absolute).
        base: The folder images must lie in.
        folders: Accept an existing folder too (a volume's series folder).

    Returns:
        The absolute, resolved path of an existing file (or folder, with ``folders``).

    Raises:
        InvalidInput: The path escapes ``base`` or the file does not exist.
    """
    base = base.resolve()
    candidate = (base / raw).resolve()
    if not candidate.is_relative_to(base):
        raise field_error(path, where, field,
                          f"{raw!r} lies outside the allowed folder {base}")
    if folders and candidate.is_dir():
        return candidate  # a volume's folder (a DICOM series); the importer classifies it
    if not candidate.is_file():
        raise field_error(path, where, field, f"no such file {raw!r}")
    return candidate


def record_images(path: str | os.PathLike[str], record: Record, base: Path, *,
                  missing: list[str] | None = None, folders: bool = False) -> list[ImageInput]:
    """The images a record names in ``images`` (or ``image``), resolved inside ``base``.

    The value is paths separated by ``;`` (a CSV cell or a JSON string) or a JSON list whose
    items are paths or ``{"path": ..., "view": ...}`` objects. Blank items are skipped.

    Args:
        path: The input file, for messages.
        record: The record.
        base: The folder images must lie in.
        missing: When given, a path that stays inside ``base`` but names no file is appended
            to it (as written in the file) and left out, instead of refused: a dry run lists
            every missing image at once. A path escaping ``base`` is always refused.
        folders: Accept a folder too (a case import: a DICOM series folder is one volume).

    Raises:
        InvalidInput: A value of another type, a non-text item, or a path outside ``base``
            or missing; file, record and field named.
    """
    field, raw = next(((name, record.fields[name]) for name in IMAGE_FIELDS
                       if record.fields.get(name) not in (None, "")), ("images", None))
    if raw is None:
        return []
    items: list[tuple[str, str | None]] = []
    if isinstance(raw, str):
        check_text(path, record.where, field, raw)
        items = [(p.strip(), None) for p in raw.split(IMAGE_SEPARATOR)]
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            view = None
            if isinstance(item, dict):
                view = check_label(path, record.where, f"{field}[{i}].view", item.get("view"))
                item = check_text(path, record.where, f"{field}[{i}].path", item.get("path"))
            else:
                item = check_text(path, record.where, f"{field}[{i}]", item)
            items.append((item.strip(), view))
    else:
        raise field_error(path, record.where, field, "expected ';'-separated paths or a list, "
                                                     f"got {json_type(raw)}")
    out: list[ImageInput] = []
    root = base.resolve()
    for p, view in items:
        if not p:
            continue
        if missing is not None:
            candidate = (root / p).resolve()
            if candidate.is_relative_to(root) and not candidate.is_file() and not (
                    folders and candidate.is_dir()):
                missing.append(p)
                continue
        out.append(ImageInput(path=resolve_image_path(path, record.where, field, p, base,
                                                      folders=folders),
                              view=view))
    return out
