"""Read PAIRS files (CSV or JSONL) and write SCORES.csv files.

PAIRS has the columns ``id``, ``reference``, ``candidate`` and optionally ``image``,
``case_id`` and ``source``. Every problem raises :class:`ScoreInputError` with one line of the
form ``FILE:ROW: field 'x' ...`` (ROW is the 1-based line of the file where the record starts,
the CSV header being line 1), so the command line can print it as is.

Empty-report policy: a pair whose reference or candidate is empty or whitespace only is kept;
it is listed in :attr:`PairFile.empty_ids` (the CLI prints a warning naming them) and the
scoring runner gives it ``nan`` for every metric without calling any metric on it. An empty
report is real data (a generator that produced nothing) but no metric is defined on it.

A JSONL line may nest arrays/objects at most ``MAX_JSON_DEPTH`` (32) levels deep; deeper
lines are refused before parsing (the json module would overflow the stack).

Scores files are written atomically (temporary file in the same folder, then ``os.replace``)
with full-precision floats (``repr``), so a failure never leaves a partial output. Text cells
(ids and column names) that a spreadsheet would run as a formula (starting with ``=``, ``+``,
``-``, ``@``, tab or CR) are written with a leading ``'`` (see ``backend.util.csv_safe``);
numbers are never prefixed.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.scoring.hashing import input_hash
from backend.util import (
    MAX_JSON_DEPTH,
    SafeCsvWriter,
    atomic_write,
    file_sha256,
    json_too_deep,
    json_type,
)

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("id", "reference", "candidate")
OPTIONAL_COLUMNS = ("image", "case_id", "source")
# Longest report accepted, in characters. Real chest X-ray reports are a few thousand
# characters; the limit stops a pasted file or a runaway generation from reaching a model
# (tokenizers and O(n^2) metrics). It stays below the csv module's default field limit
# (131,072) so that limit, which is process-global, never needs changing.
MAX_REPORT_CHARS = 100_000
# A physical line longer than this is refused before parsing, so memory stays bounded.
MAX_LINE_BYTES = 64 * 1024 * 1024
# In CSV, several images of one pair are separated by this character.
IMAGE_SEPARATOR = ";"


class ScoreInputError(ValueError):
    """A PAIRS file problem; ``str(exc)`` is one line naming file, row and field."""


@dataclass(frozen=True)
class PairRecord:
    """One pair read from a PAIRS file.

    Attributes:
        id: The pair's id (unique in the file).
        reference: Reference report text, exactly as in the file.
        candidate: Candidate report text, exactly as in the file.
        images: Resolved image paths (inside the allowed image folder).
        image_sha256s: Hex sha256 of each image file, same order as ``images``.
        case_id: Optional case identifier.
        source: Optional generator name.
        row: Line of the file where the record starts.
    """

    id: str
    reference: str
    candidate: str
    images: tuple[Path, ...] = ()
    image_sha256s: tuple[str, ...] = ()
    case_id: str | None = None
    source: str | None = None
    row: int = 0

    @property
    def input_hash(self) -> str:
        """The pair's score-cache key (see :mod:`backend.scoring.hashing`)."""
        return input_hash(self.reference, self.candidate, self.image_sha256s)

    @property
    def is_empty(self) -> bool:
        """Whether the reference or the candidate is empty or whitespace only."""
        return not self.reference.strip() or not self.candidate.strip()


@dataclass
class PairFile:
    """The pairs of one file, in file order."""

    path: Path
    format: str  # "csv" | "jsonl"
    pairs: list[PairRecord] = field(default_factory=list)

    @property
    def empty_ids(self) -> list[str]:
        """Ids of pairs with an empty reference or candidate (scored as ``nan``)."""
        return [p.id for p in self.pairs if p.is_empty]


def detect_format(path: Path) -> str:
    """``"csv"`` or ``"jsonl"`` from the extension, else from the first non-blank byte."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return "jsonl" if head.startswith(b"{") else "csv"


def read_pairs(
    path: str | os.PathLike[str],
    *,
    image_base: str | os.PathLike[str] | None = None,
    max_chars: int = MAX_REPORT_CHARS,
    fmt: str | None = None,
) -> PairFile:
    """Read and validate a PAIRS file.

    Args:
        path: CSV or JSONL file.
        image_base: Folder image paths are relative to and must stay inside (default: the
            file's folder).
        max_chars: Longest accepted report, in characters.
        fmt: Force ``"csv"`` or ``"jsonl"`` instead of detecting it.

    Returns:
        The pairs in file order.

    Raises:
        ScoreInputError: on the first problem, naming file, row and field.
    """
    p = Path(path)
    name = str(path)
    if not p.exists():
        raise ScoreInputError(f"{name}: file not found")
    if not p.is_file():
        raise ScoreInputError(f"{name}: not a file")
    fmt = fmt or detect_format(p)
    if fmt not in ("csv", "jsonl"):
        raise ScoreInputError(f"{name}: unknown format '{fmt}' (expected csv or jsonl)")
    base = Path(image_base) if image_base is not None else p.parent
    builder = _Builder(name=name, image_base=base.resolve(), max_chars=max_chars)
    with p.open("rb") as fh:
        lines = _decoded_lines(fh, name)
        if fmt == "csv":
            _read_csv(lines, builder)
        else:
            _read_jsonl(lines, builder)
    out = PairFile(path=p, format=fmt, pairs=builder.pairs)
    if out.empty_ids:
        # Callers decide how to tell the user (the CLI prints the ids once).
        log.debug("%s: %d pair(s) with an empty report", name, len(out.empty_ids))
    return out


class _Lines:
    """Physical lines of a binary file, decoded strictly as UTF-8, with their numbers."""

    def __init__(self, fh: Any, name: str) -> None:
        self._fh = fh
        self._name = name
        self.line_no = 0  # number of the last line handed out
        self._offset = 0

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        raw = self._fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            raise StopIteration
        self.line_no += 1
        start = self._offset
        self._offset += len(raw)
        if len(raw) > MAX_LINE_BYTES:
            raise ScoreInputError(
                f"{self._name}:{self.line_no}: line is longer than"
                f" {MAX_LINE_BYTES // (1024 * 1024)} MiB (a report may hold at most"
                f" {MAX_REPORT_CHARS:,} characters)"
            )
        if self.line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
            start += 3
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = raw[exc.start : exc.start + 1].hex()
            raise ScoreInputError(
                f"{self._name}:{self.line_no}: invalid UTF-8 byte 0x{bad} at byte offset"
                f" {start + exc.start} of the file (save the file as UTF-8)"
            ) from None


def _decoded_lines(fh: Any, name: str) -> _Lines:
    return _Lines(fh, name)


@dataclass
class _Builder:
    """Validates fields, resolves images and checks id uniqueness across rows."""

    name: str
    image_base: Path
    max_chars: int
    pairs: list[PairRecord] = field(default_factory=list)
    _seen: dict[str, int] = field(default_factory=dict)
    _sha_cache: dict[Path, str] = field(default_factory=dict)

    def err(self, row: int, msg: str) -> ScoreInputError:
        return ScoreInputError(f"{self.name}:{row}: {msg}")

    def text(self, row: int, fname: str, value: Any) -> str:
        if value is None:
            raise self.err(row, f"field '{fname}' is missing")
        if not isinstance(value, str):
            raise self.err(row, f"field '{fname}' must be a string, got {json_type(value)}")
        if len(value) > self.max_chars:
            raise self.err(
                row,
                f"field '{fname}' has {len(value):,} characters, over the limit of"
                f" {self.max_chars:,} for one report",
            )
        return value

    def ident(self, row: int, fname: str, value: Any, *, required: bool) -> str | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            if required:
                raise self.err(row, f"field '{fname}' is empty")
            return None
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.err(
                row, f"field '{fname}' must be a string or integer, got {json_type(value)}"
            )
        value = str(value).strip()
        if len(value) > 256:
            raise self.err(row, f"field '{fname}' is longer than 256 characters")
        return value

    def images(self, row: int, value: Any) -> tuple[tuple[Path, ...], tuple[str, ...]]:
        if value is None:
            return (), ()
        if isinstance(value, str):
            items = [v.strip() for v in value.split(IMAGE_SEPARATOR)]
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            items = [v.strip() for v in value]
        else:
            raise self.err(
                row,
                f"field 'image' must be a path or a list of paths, got {json_type(value)}",
            )
        paths: list[Path] = []
        shas: list[str] = []
        for item in items:
            if not item:
                continue
            candidate = Path(item)
            if not candidate.is_absolute():
                candidate = self.image_base / candidate
            resolved = candidate.resolve()
            # resolve() follows symlinks, so a link inside the base that points outside it
            # is refused too.
            if not resolved.is_relative_to(self.image_base):
                raise self.err(
                    row,
                    f"field 'image' path '{item}' is outside the allowed image folder"
                    f" {self.image_base}",
                )
            if not resolved.is_file():
                raise self.err(row, f"field 'image' file not found: '{item}'")
            if resolved not in self._sha_cache:
                self._sha_cache[resolved] = file_sha256(resolved)
            paths.append(resolved)
            shas.append(self._sha_cache[resolved])
        return tuple(paths), tuple(shas)

    def add(self, row: int, rec: Mapping[str, Any]) -> None:
        pair_id = self.ident(row, "id", rec.get("id"), required=True)
        assert pair_id is not None
        if pair_id in self._seen:
            raise self.err(
                row, f"field 'id' duplicates id '{pair_id}' of row {self._seen[pair_id]}"
            )
        reference = self.text(row, "reference", rec.get("reference"))
        candidate = self.text(row, "candidate", rec.get("candidate"))
        images, shas = self.images(row, rec.get("image"))
        self._seen[pair_id] = row
        self.pairs.append(
            PairRecord(
                id=pair_id,
                reference=reference,
                candidate=candidate,
                images=images,
                image_sha256s=shas,
                case_id=self.ident(row, "case_id", rec.get("case_id"), required=False),
                source=self.ident(row, "source", rec.get("source"), required=False),
                row=row,
            )
        )


class _RecordingLines:
    """Feeds lines to ``csv.reader`` and remembers the current record's raw text."""

    def __init__(self, lines: _Lines) -> None:
        self.lines = lines
        self.raw: list[str] = []

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = next(self.lines)
        self.raw.append(line)
        return line


_CSV_FIELD = re.compile(r'"(?:[^"]+|"")*"|[^,\r\n]*')


def _overlong_column(raw: str, header: list[str], limit: int) -> str | None:
    """Name the first column of a raw CSV record longer than ``limit`` (error path only)."""
    pos, idx = 0, 0
    while pos <= len(raw):
        m = _CSV_FIELD.match(raw, pos)
        if m is None:
            return None
        if m.end() - m.start() > limit:
            return header[idx] if idx < len(header) else f"column {idx + 1}"
        pos = m.end() + 1  # skip the comma
        idx += 1
        if pos > len(raw) or raw[m.end() : m.end() + 1] != ",":
            return None
    return None


def _read_csv(lines: _Lines, b: _Builder) -> None:
    source = _RecordingLines(lines)
    reader = csv.reader(source, strict=True)
    header: list[str] | None = None
    while True:
        source.raw = []
        start = lines.line_no + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            if "field larger than field limit" in str(exc):
                col = _overlong_column("".join(source.raw), header or [], b.max_chars)
                what = f"field '{col}'" if col else "a field"
                raise b.err(
                    start,
                    f"{what} is over the limit of {b.max_chars:,} characters for one report",
                ) from None
            raise b.err(start, f"malformed CSV: {exc}") from None
        if not row or (len(row) == 1 and not row[0].strip() and header is not None):
            continue  # blank line
        if header is None:
            header = [h.strip() for h in row]
            dupes = sorted({h for h in header if header.count(h) > 1})
            if dupes:
                raise b.err(start, f"duplicate column(s) in header: {', '.join(dupes)}")
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise ScoreInputError(
                    f"{b.name}:{start}: missing column(s) {', '.join(repr(m) for m in missing)}"
                    f" (found: {', '.join(repr(h) for h in header) or 'nothing'})"
                )
            continue
        if len(row) != len(header):
            raise b.err(start, f"row has {len(row)} fields but the header has {len(header)}")
        rec = dict(zip(header, row, strict=True))
        # An empty CSV cell means "no value" for the optional columns.
        for col in OPTIONAL_COLUMNS:
            if col in rec and not rec[col].strip():
                rec[col] = None
        b.add(start, rec)
    if header is None:
        raise ScoreInputError(
            f"{b.name}: empty file (expected a header with id,reference,candidate)"
        )


def _read_jsonl(lines: _Lines, b: _Builder) -> None:
    for line in lines:
        row = lines.line_no
        if not line.strip():
            continue
        too_deep = f"nesting deeper than {MAX_JSON_DEPTH} levels"
        if json_too_deep(line):
            raise b.err(row, too_deep)
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise b.err(row, f"malformed JSON: {exc.msg} (column {exc.colno})") from None
        except RecursionError:  # the scan above should have caught it; never a traceback
            raise b.err(row, too_deep) from None
        if not isinstance(rec, dict):
            raise b.err(row, f"expected a JSON object, got {json_type(rec)}")
        for col in REQUIRED_COLUMNS:
            if col not in rec:
                raise b.err(row, f"field '{col}' is missing")
        b.add(row, rec)
    if not b.pairs:
        raise ScoreInputError(f"{b.name}: no pairs in file")


def write_scores_csv(
    path: str | os.PathLike[str],
    ids: Sequence[str],
    columns: Mapping[str, Sequence[float | None]],
) -> None:
    """Write ``id`` then one column per key, atomically, with full-precision floats.

    Floats are written with ``repr`` (shortest round-tripping form); ``None`` and NaN are
    written as ``nan``. The file appears complete or not at all: it is written to a
    temporary file in the same folder and moved into place with ``os.replace``.

    Args:
        path: Output file.
        ids: Pair ids, one per row.
        columns: Output key -> one value per id, in column order.

    Raises:
        ValueError: when a column's length differs from ``ids`` or a value is not a number.
        FileNotFoundError: when the output folder does not exist.
    """
    target = Path(path)
    for key, values in columns.items():
        if len(values) != len(ids):
            raise ValueError(f"column '{key}' has {len(values)} values for {len(ids)} ids")
    if not target.parent.is_dir():
        raise FileNotFoundError(f"output folder does not exist: {target.parent}")
    with atomic_write(target, newline="", fsync=True) as fh:
        writer = SafeCsvWriter(fh, lineterminator="\n")
        keys = list(columns)
        writer.writerow(["id", *keys])
        cols = [columns[k] for k in keys]
        for i, pair_id in enumerate(ids):
            writer.writerow([pair_id, *(_number(col[i]) for col in cols)])


def _number(value: float | None) -> float:
    # A float cell, never text: the csv module writes it with repr (full precision), and
    # csv_safe leaves numbers alone, so -0.5 is not taken for a formula.
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(value)  # numpy scalars
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a number: {value!r}") from exc
    return float(value)
