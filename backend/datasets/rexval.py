"""Read and write ReXVal's public file layout (the ReXVal dataset on PhysioNet, v1.0.0).

- ``50_samples_gt_and_candidates.csv``: ``study_id, gt_report`` then one column per candidate
  type (ReXVal: ``radgraph, bertscore, s_emb, bleu``). A leading unnamed pandas index column
  is accepted and remembered.
- ``6_valid_raters_per_rater_error_categories.csv``: ``study_number, candidate_type,
  error_category, rater_index, clinically_significant, num_errors``; ``study_number`` is the
  0-based row index in the first file; ``clinically_significant`` is ``True``/``False``.

Writers produce pandas-style CSV (minimal quoting, the line terminator read from the input,
``\\n`` by default) so that a canonical file reads and writes back byte for byte. A text cell
that a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, tab or CR)
is written with a leading ``'`` (OWASP; ``backend.util.csv_safe``) and the readers remove that
``'`` again, so an export imports back to the same texts. A report may hold at most
``MAX_REPORT_BYTES`` bytes. The dataset itself is access-controlled: only user-supplied files
are read, never shipped.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from radconcord.backend.errors import InvalidInput
from radconcord.backend.util import SafeCsvWriter, csv_unescape

GT_FILENAME = "50_samples_gt_and_candidates.csv"
RATINGS_FILENAME = "6_valid_raters_per_rater_error_categories.csv"
CANDIDATE_TYPES = ("radgraph", "bertscore", "s_emb", "bleu")
GT_KEY_COLUMNS = ("study_id", "gt_report")
RATINGS_COLUMNS = (
    "study_number",
    "candidate_type",
    "error_category",
    "rater_index",
    "clinically_significant",
    "num_errors",
)
# Longest report accepted, in UTF-8 bytes: a chest X-ray report is a few kB, and the csv
# module's own field limit (131,072 characters, process-global) stays above it.
MAX_REPORT_BYTES = 100_000
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


@dataclass(frozen=True)
class GtRow:
    """One row of the ground-truth file: a study, its reference and its candidates."""

    study_id: str
    gt_report: str
    candidates: tuple[str, ...]  # in ``GtFile.candidate_types`` order; "" = missing


@dataclass(frozen=True)
class GtFile:
    """The ground-truth/candidates file."""

    candidate_types: tuple[str, ...]
    rows: tuple[GtRow, ...]
    index_column: str | None = None  # header of a leading pandas index column, if any
    line_terminator: str = "\n"


@dataclass(frozen=True)
class RatingRow:
    """One row of the ratings file."""

    study_number: int
    candidate_type: str
    error_category: int
    rater_index: int
    clinically_significant: bool
    num_errors: int


@dataclass(frozen=True)
class RatingsFile:
    """The per-rater error-category file."""

    rows: tuple[RatingRow, ...]
    line_terminator: str = "\n"


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read file ({exc.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InvalidInput(f"{path}: line {line}: not valid UTF-8") from None


def _line_terminator(text: str) -> str:
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def read_csv_header(reader: Iterator[list[str]], path: Path) -> list[str]:
    """The first record of a ``csv.reader``, or a clear error naming ``path``.

    Args:
        reader: A ``csv.reader`` positioned at the start of the file.
        path: File name used in error messages.

    Raises:
        InvalidInput: The file is empty or its header line is not valid CSV.
    """
    try:
        return [csv_unescape(cell) for cell in next(reader)]
    except StopIteration:
        raise InvalidInput(f"{path}: empty file (no header row)") from None
    except csv.Error as exc:
        raise InvalidInput(f"{path}: line 1: malformed CSV header ({exc})") from None


def _records(path: Path, text: str) -> tuple[list[str], list[tuple[int, int, list[str]]]]:
    """Header and (row number, start line, values) for each non-blank record."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header = read_csv_header(reader, path)
    out = []
    number = 0
    while True:
        start = reader.line_num + 1
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            where = f"{path}: row {number} (line {start})"
            if "field larger than field limit" in str(exc):
                raise InvalidInput(f"{where}: a field is larger than the CSV field limit; "
                                   f"reports are limited to {MAX_REPORT_BYTES} bytes") from None
            raise InvalidInput(f"{where}: malformed CSV ({exc})") from None
        if not values or not any(v.strip() for v in values):
            continue
        values = [csv_unescape(v) for v in values]
        if len(values) != len(header):
            raise InvalidInput(
                f"{path}: row {number} (line {start}): {len(values)} fields, the header has "
                f"{len(header)}"
            )
        out.append((number, start, values))
        number += 1
    return header, out


def read_gt(path: str | Path) -> GtFile:
    """Read ``50_samples_gt_and_candidates.csv``.

    Args:
        path: The file.

    Returns:
        The parsed file; rows are numbered from 0 (``study_number``) in messages.

    Raises:
        InvalidInput: Missing columns, empty reports, duplicate study ids, bad encoding.
    """
    path = Path(path)
    text = _read_text(path)
    header, records = _records(path, text)
    index_column = None
    if header and header[0] in ("", "Unnamed: 0") and len(header) > 1:
        index_column = header[0]
    cols = header[1:] if index_column is not None else header
    for name in GT_KEY_COLUMNS:
        if name not in cols:
            raise InvalidInput(f"{path}: header: missing column {name!r}")
    if list(cols[:2]) != list(GT_KEY_COLUMNS):
        raise InvalidInput(f"{path}: header: the first columns must be study_id, gt_report")
    types = tuple(c.strip() for c in cols[2:])
    if not types:
        raise InvalidInput(f"{path}: header: no candidate columns after gt_report")
    if len(set(types)) != len(types) or any(not t for t in types):
        raise InvalidInput(f"{path}: header: candidate columns must be unique and named")
    rows = []
    seen: dict[str, int] = {}
    offset = 1 if index_column is not None else 0
    for number, start, values in records:
        where = f"row {number} (line {start})"
        if index_column is not None and values[0].strip() != str(number):
            raise InvalidInput(
                f"{path}: {where}, field {index_column or 'index'!r}: expected {number}"
            )
        values = values[offset:]
        study_id = values[0].strip()
        if not study_id:
            raise InvalidInput(f"{path}: {where}, field 'study_id': empty")
        if study_id in seen:
            raise InvalidInput(
                f"{path}: {where}, field 'study_id': {study_id!r} repeats row {seen[study_id]}"
            )
        seen[study_id] = number
        if not values[1].strip():
            raise InvalidInput(f"{path}: {where}, field 'gt_report': empty report")
        for name, report in zip(("gt_report", *types), values[1:], strict=True):
            size = len(report.encode("utf-8"))
            if size > MAX_REPORT_BYTES:
                raise InvalidInput(f"{path}: {where}, field {name!r}: report is {size} bytes; "
                                   f"the limit is {MAX_REPORT_BYTES} bytes")
        candidates = tuple(values[2:])
        if not any(c.strip() for c in candidates):
            raise InvalidInput(f"{path}: {where}: no candidate report")
        rows.append(GtRow(study_id=study_id, gt_report=values[1], candidates=candidates))
    if not rows:
        raise InvalidInput(f"{path}: no data rows")
    return GtFile(types, tuple(rows), index_column, _line_terminator(text))


def _parse_int(path: Path, where: str, field: str, value: str) -> int:
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        raise InvalidInput(f"{path}: {where}, field {field!r}: {value!r} is not a number") \
            from None
    if not number.is_integer():
        raise InvalidInput(f"{path}: {where}, field {field!r}: {value!r} is not an integer")
    return int(number)


def read_ratings(path: str | Path, gt: GtFile) -> RatingsFile:
    """Read ``6_valid_raters_per_rater_error_categories.csv`` and check it against ``gt``.

    Args:
        path: The file.
        gt: The ground-truth file it refers to.

    Returns:
        The rows, in file order.

    Raises:
        InvalidInput: Missing columns, out-of-range values, unknown candidate types,
            duplicate cells; the message names file, row and field.
    """
    path = Path(path)
    text = _read_text(path)
    header, records = _records(path, text)
    header = [h.strip() for h in header]
    if header and header[0] in ("", "Unnamed: 0") and len(header) > len(RATINGS_COLUMNS):
        raise InvalidInput(f"{path}: header: drop the leading index column")
    for name in RATINGS_COLUMNS:
        if name not in header:
            raise InvalidInput(f"{path}: header: missing column {name!r}")
    idx = {name: header.index(name) for name in RATINGS_COLUMNS}
    types = set(gt.candidate_types)
    rows = []
    seen: dict[tuple[int, str, int, int, bool], int] = {}
    for number, start, values in records:
        where = f"row {number} (line {start})"
        study_number = _parse_int(path, where, "study_number", values[idx["study_number"]])
        if not 0 <= study_number < len(gt.rows):
            raise InvalidInput(
                f"{path}: {where}, field 'study_number': {study_number} is not a row of the "
                f"ground-truth file (0..{len(gt.rows) - 1})"
            )
        ctype = values[idx["candidate_type"]].strip()
        if ctype not in types:
            raise InvalidInput(
                f"{path}: {where}, field 'candidate_type': {ctype!r} is not one of "
                f"{', '.join(gt.candidate_types)}"
            )
        if not gt.rows[study_number].candidates[gt.candidate_types.index(ctype)].strip():
            raise InvalidInput(
                f"{path}: {where}, field 'candidate_type': study {study_number} has no "
                f"{ctype!r} candidate"
            )
        category = _parse_int(path, where, "error_category", values[idx["error_category"]])
        if not 1 <= category <= 6:
            raise InvalidInput(f"{path}: {where}, field 'error_category': {category} not in 1..6")
        rater = _parse_int(path, where, "rater_index", values[idx["rater_index"]])
        if rater < 0:
            raise InvalidInput(f"{path}: {where}, field 'rater_index': negative")
        sig_text = values[idx["clinically_significant"]].strip().lower()
        if sig_text in _TRUE:
            significant = True
        elif sig_text in _FALSE:
            significant = False
        else:
            raise InvalidInput(
                f"{path}: {where}, field 'clinically_significant': expected True or False"
            )
        count = _parse_int(path, where, "num_errors", values[idx["num_errors"]])
        if count < 0:
            raise InvalidInput(f"{path}: {where}, field 'num_errors': negative")
        key = (study_number, ctype, category, rater, significant)
        if key in seen:
            raise InvalidInput(f"{path}: {where}: same cell as row {seen[key]}")
        seen[key] = number
        rows.append(RatingRow(study_number, ctype, category, rater, significant, count))
    return RatingsFile(tuple(rows), _line_terminator(text))


def _write_csv(path: Path, header: Iterable[str], rows: Iterable[Iterable[object]],
               line_terminator: str) -> None:
    # newline="" so that the csv module's terminator is written as is.
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = SafeCsvWriter(fh, lineterminator=line_terminator, quoting=csv.QUOTE_MINIMAL)
        writer.writerow(header)
        writer.writerows(rows)


def write_gt(path: str | Path, gt: GtFile) -> None:
    """Write the ground-truth/candidates file."""
    header = list(GT_KEY_COLUMNS) + list(gt.candidate_types)
    rows: list[list[object]] = [[r.study_id, r.gt_report, *r.candidates] for r in gt.rows]
    if gt.index_column is not None:
        header = [gt.index_column, *header]
        rows = [[i, *row] for i, row in enumerate(rows)]
    _write_csv(Path(path), header, rows, gt.line_terminator)


def write_ratings(path: str | Path, ratings: RatingsFile) -> None:
    """Write the per-rater error-category file (booleans as ``True``/``False``)."""
    rows = (
        [r.study_number, r.candidate_type, r.error_category, r.rater_index,
         "True" if r.clinically_significant else "False", r.num_errors]
        for r in ratings.rows
    )
    _write_csv(Path(path), RATINGS_COLUMNS, rows, ratings.line_terminator)
