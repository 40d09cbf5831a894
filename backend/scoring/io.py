"""Read PAIRS files (CSV or JSONL) and write SCORES.csv files.

PAIRS has the columns ``id``, ``reference``, ``candidate`` and optionally ``image`` (or
``images``), ``case_id`` and ``source``. It is read by the one PAIRS reader,
:mod:`backend.scoring.pairs_reader`, which ``import-pairs`` uses too: every problem raises
:class:`backend.errors.InvalidInput` (``ScoreInputError`` is the same class) with one line
naming the file, the record (``row N (line L)`` in CSV, ``line L`` in JSONL) and the field,
so the command line can print it as is. Ids, sources and case ids hold at most 128
characters, reports at most ``MAX_REPORT_BYTES`` bytes, and no text may hold NUL.

Empty-report policy: a pair whose reference or candidate is empty or whitespace only is kept;
it is listed in :attr:`PairFile.empty_ids` (the CLI prints a warning naming them) and the
scoring runner gives it ``nan`` for every metric without calling any metric on it. An empty
report is real data (a generator that produced nothing) but no metric is defined on it.

Scores files are written atomically (temporary file in the same folder, then ``os.replace``)
with full-precision floats (``repr``), so a failure never leaves a partial output. Text cells
(ids and column names) that a spreadsheet would run as a formula (starting with ``=``, ``+``,
``-``, ``@``, tab or CR) are written with a leading ``'`` (see ``backend.util.csv_safe``);
numbers are never prefixed.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from radconcord.backend.errors import InvalidInput
from radconcord.backend.scoring.hashing import input_hash
from radconcord.backend.scoring.pairs_reader import (
    IMAGE_SEPARATOR,
    MAX_REPORT_BYTES,
    Record,
    check_label,
    check_report,
    detect_format,
    field_error,
    read_records,
    record_images,
    require_columns,
)
from radconcord.backend.util import SafeCsvWriter, atomic_write, file_sha256

__all__ = ["IMAGE_SEPARATOR", "MAX_REPORT_BYTES", "PairFile", "PairRecord", "ScoreInputError",
           "detect_format", "read_pairs", "write_scores_csv"]

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("id", "reference", "candidate")
OPTIONAL_COLUMNS = ("image", "images", "case_id", "source")

# The PAIRS reader's error; one class for every reader of input files, so the import and
# score commands (and callers catching either name) see the same errors.
ScoreInputError = InvalidInput


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
        where: ``"row N (line L)"`` (CSV) or ``"line L"`` (JSONL), for messages.
    """

    id: str
    reference: str
    candidate: str
    images: tuple[Path, ...] = ()
    image_sha256s: tuple[str, ...] = ()
    case_id: str | None = None
    source: str | None = None
    row: int = 0
    where: str = ""

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


def read_pairs(
    path: str | os.PathLike[str],
    *,
    image_base: str | os.PathLike[str] | None = None,
    fmt: str | None = None,
) -> PairFile:
    """Read and validate a PAIRS file.

    Args:
        path: CSV or JSONL file (format from the extension, else from the content).
        image_base: Folder image paths are relative to and must stay inside (default: the
            file's folder).
        fmt: Force ``"csv"`` or ``"jsonl"`` instead of detecting it.

    Returns:
        The pairs in file order; texts exactly as in the file.

    Raises:
        InvalidInput: on the first problem, naming file, row and field (also caught as
            ``ScoreInputError``).
    """
    p = Path(path)
    # No size limit here: scoring stores nothing in the database and a corpus may be large.
    parsed = read_records(path, fmt=fmt, max_bytes=None)
    if parsed.header is not None:
        require_columns(path, parsed.header, REQUIRED_COLUMNS)
    if not parsed.records:
        raise InvalidInput(f"{path}: no data rows")
    base = (Path(image_base) if image_base is not None else p.parent).resolve()
    pairs: list[PairRecord] = []
    first: dict[str, Record] = {}
    sha_cache: dict[Path, str] = {}
    for rec in parsed.records:
        if parsed.format == "csv":
            # An empty CSV cell means "no value" for the optional columns.
            rec = Record(rec.number, rec.line, rec.where,
                         {k: (None if k in OPTIONAL_COLUMNS and not v.strip() else v)
                          for k, v in rec.fields.items()})
        pairs.append(_pair(path, rec, base, first, sha_cache))
    out = PairFile(path=p, format=parsed.format, pairs=pairs)
    if out.empty_ids:
        # Callers decide how to tell the user (the CLI prints the ids once).
        log.debug("%s: %d pair(s) with an empty report", path, len(out.empty_ids))
    return out


def _pair(path: str | os.PathLike[str], rec: Record, base: Path, first: dict[str, Record],
          sha_cache: dict[Path, str]) -> PairRecord:
    """One pair: checked fields, resolved images, an id not seen before in the file."""
    fields = rec.fields
    for name in REQUIRED_COLUMNS:
        if name not in fields:
            raise field_error(path, rec.where, name, "missing")
    pair_id = check_label(path, rec.where, "id", fields["id"])
    if pair_id is None:
        raise field_error(path, rec.where, "id", "missing pair id")
    if pair_id in first:
        raise field_error(path, rec.where, "id",
                          f"duplicates id {pair_id!r} of {first[pair_id].where}")
    reference = check_report(path, rec.where, "reference", fields["reference"])
    candidate = check_report(path, rec.where, "candidate", fields["candidate"])
    images = [i.path for i in record_images(path, rec, base)]
    for image in images:
        if image not in sha_cache:
            sha_cache[image] = file_sha256(image)
    first[pair_id] = rec
    return PairRecord(
        id=pair_id,
        reference=reference,
        candidate=candidate,
        images=tuple(images),
        image_sha256s=tuple(sha_cache[i] for i in images),
        case_id=check_label(path, rec.where, "case_id", fields.get("case_id")),
        source=check_label(path, rec.where, "source", fields.get("source")),
        row=rec.line,
        where=rec.where,
    )


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
