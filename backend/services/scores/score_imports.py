"""Import a metric's values computed elsewhere into a study (admin only).

For metrics that run behind an API, on another cluster or in someone's notebook: their
per-pair values come in as a file and are then shown by every view of the study like a
computed metric, marked as imported (``backend.analysis.data``: ``MetricColumn.imported``).

The file (CSV or JSONL, read by :mod:`backend.scoring.pairs_reader`, so it is checked and its
problems are named as for ``import-pairs``) names each pair by

- ``pair_number``: the 1-based number of the study's JSONL export and of the pages
  (``Pair.position + 1`` of a study pair), and/or
- ``pair_id`` (or ``pair``): the opaque pair id the export writes (``Pair.opaque_id``).

A row giving both must name the same pair. An optional ``case_id`` is checked against the
pair's case (a misaligned file is refused instead of imported); the other columns the
study's exports write (``position``, ``source``, ``reference``, ``candidate``, ``images``,
``input_hash``, ``study_number``, ``candidate_type``) are ignored, so an export with a column
added imports as it is. The values come in one of two layouts:

- **one metric**: a ``value`` column; the key is given (``metric``, CLI ``--metric KEY``).
- **several metrics** ("wide"): no ``value`` column, one column per metric key. Every such
  column is imported, or only those ``metric`` names (one key or a comma-separated list: a
  filter; the other columns are then not read).

A value is a number (a JSON number; in CSV a decimal such as ``0.5``, ``-1e-3``). A blank
cell, ``NaN``/``NA``/``null``/``None`` (CSV) or ``null``/``NaN`` (JSON) is a missing value,
refused unless ``allow_missing``; a missing value is stored as NULL (undefined, as a
computed metric's NaN). Study pairs without a row are refused unless ``allow_missing`` too,
and then have no value. Everything is checked before anything is written, and the first
problem is one :class:`~backend.errors.InvalidInput` naming the file, row and field
(``FILE: row N (line L), field 'value': ...``): an unknown pair, a pair given twice, a value
that is not a number or not finite, a missing value or missing pairs, two pairs with the same
content (reference, candidate, images: the score cache's key) given different values.

Keys. A key must be new to the metric registry (neither a registered key nor a family name,
:func:`backend.metrics.registry.resolve`), so an imported value is never read as a computed
one; it is 1-64 letters, digits, ``_``, ``-`` or ``.``, starting with a letter.

Storage. Each key's values are ``MetricScore`` rows (``input_hash`` of the pair, family
``external``, the key, signature ``external:<key>|sha256:<file digest>`` and its hash computed
as the runner computes it: :func:`backend.metrics.base.signature_hash`), written insert-or-ignore
as the runner writes, and a ``ScoreImport`` row records the study, key, direction,
description, source, file name and sha256, pairs with and without a value, time and admin.
Importing another file for a key gives a new signature, so nothing is overwritten: the study
reads the latest import of each key, and the older imports' rows stay in ``metric_scores``
(listed by :func:`list_score_imports`, in the export with scores as rows whose ``chosen`` is
false). Importing an older file again makes it the latest again (its rows are already there,
so nothing new is stored; its direction, description and source are the new import's).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from radconcord.backend import clock
from radconcord.backend.analysis.data import EXTERNAL_FAMILY, ScoreImportInfo
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import signature_hash
from radconcord.backend.scoring import cache
from radconcord.backend.scoring.pairs_reader import Record, field_error, read_records
from radconcord.backend.services.evaluation.study_data import study_imports
from radconcord.backend.services.repo import get_study
from radconcord.backend.types import Actor
from radconcord.backend.util import file_sha256, json_type
from radconcord.db.models import PAIR_STUDY, Case, MetricScore, Pair, ScoreImport
from radconcord.db.session import Database

__all__ = ["IGNORED_FIELDS", "KEY_PATTERN", "PAIR_FIELDS", "ScoreImportSummary",
           "check_key", "import_scores", "list_score_imports", "scores_signature"]

PAIR_NUMBER = "pair_number"
#: Columns that may hold the opaque pair id, in the order they are read.
PAIR_ID_FIELDS = ("pair_id", "pair")
PAIR_FIELDS = (PAIR_NUMBER, *PAIR_ID_FIELDS)
VALUE = "value"
CASE_ID = "case_id"
#: Other columns the study's exports write: read and ignored.
IGNORED_FIELDS = ("position", "source", "reference", "candidate", "images", "input_hash",
                  "study_number", "candidate_type")
RESERVED_FIELDS = frozenset({*PAIR_FIELDS, VALUE, CASE_ID, *IGNORED_FIELDS})
KEY_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")
#: CSV cells read as a missing value (compared case-insensitively, after stripping).
MISSING_TEXT = frozenset({"", "nan", "na", "n/a", "null", "none"})
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_WHOLE = re.compile(r"\d+(?:\.0*)?")
_ALLOW = "missing values are refused unless allowed (--allow-missing)"
# Pair numbers listed in a message before "...".
_LISTED = 10
# Score rows per insert: well below every backend's bound-parameter limit.
_CHUNK = 500


@dataclass(frozen=True)
class ScoreImportSummary:
    """What an import stored.

    Attributes:
        study_name: The study.
        file_name: The file as recorded.
        file_sha256: Its sha256.
        layout: ``"value"`` (one metric) or ``"wide"`` (one column per key).
        imports: One record per imported key (what the study now reads).
        n_study_pairs: Study pairs.
        missing: ``key -> `` numbers of the study pairs without a value.
        n_rows_written: New ``metric_scores`` rows (0 when the same file was imported before).
    """

    study_name: str
    file_name: str
    file_sha256: str
    layout: str
    imports: tuple[ScoreImportInfo, ...]
    n_study_pairs: int
    missing: dict[str, tuple[int, ...]]
    n_rows_written: int

    def lines(self) -> list[str]:
        """One line per key, for the command line and the page."""
        out = []
        for imp in self.imports:
            direction = "higher is better" if imp.higher_is_better else "lower is better"
            line = (f"imported {imp.key!r} ({direction}) for {imp.n_pairs} of "
                    f"{self.n_study_pairs} pairs of study {self.study_name!r}")
            if imp.n_missing:
                line += f"; {imp.n_missing} missing ({_numbers(self.missing[imp.key])})"
            out.append(f"{line}; signature {imp.signature}")
        if not self.n_rows_written:
            out.append("this file was imported before: its stored values are used again")
        return out


@dataclass(frozen=True)
class _StudyPair:
    number: int
    opaque_id: str
    case: str
    input_hash: str


@dataclass(frozen=True)
class _Cell:
    value: float  # NaN for a missing value
    where: str
    field: str
    number: int


def scores_signature(key: str, digest: str) -> str:
    """The signature of ``key``'s values imported from a file with sha256 ``digest``."""
    return f"{EXTERNAL_FAMILY}:{key}|sha256:{digest}"


def check_key(key: str) -> str:
    """Refuse a key that is malformed or belongs to the metric registry.

    Args:
        key: The key to import values under.

    Returns:
        ``key`` unchanged.

    Raises:
        InvalidInput: not 1-64 letters, digits, ``_``, ``-``, ``.`` starting with a letter, or
            a registered key or family (named with its family).
    """
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        raise InvalidInput(f"metric key {key!r}: use 1-64 letters, digits, '_', '-' or '.', "
                           "starting with a letter")
    try:
        resolved = registry.resolve([key])
    except registry.UnknownMetric:
        return key
    family = next(iter(resolved))
    what = (f"a registered metric family (keys {', '.join(resolved[family])})"
            if key == family else f"a registered metric key (family {family!r})")
    raise InvalidInput(f"metric key {key!r} is {what}: imported scores need a key of their "
                       f"own, such as '{key}_ext'")


def _numbers(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:_LISTED])
    return f"pair{'s' if len(numbers) > 1 else ''} {shown}" + (
        f" and {len(numbers) - _LISTED} more" if len(numbers) > _LISTED else "")


def _columns(records: Sequence[Record], header: Sequence[str] | None) -> list[str]:
    if header is not None:
        return list(header)
    seen: dict[str, None] = {}
    for r in records:
        seen.update(dict.fromkeys(r.fields))
    return list(seen)


def _keys_wanted(metric: str | Sequence[str] | None) -> list[str] | None:
    if metric is None:
        return None
    names = metric.split(",") if isinstance(metric, str) else list(metric)
    if not all(isinstance(n, str) for n in names):
        raise InvalidInput(f"metric: expected metric keys, got {metric!r}")
    keys = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not keys:
        raise InvalidInput("metric: no metric key given")
    return keys


def _layout(where: str, columns: Sequence[str], wanted: list[str] | None
            ) -> tuple[str, list[tuple[str, str]]]:
    """``(layout, [(column, key), ...])`` for a file with ``columns``."""
    found = ", ".join(repr(c) for c in columns) or "nothing"
    if not any(c in columns for c in PAIR_FIELDS):
        raise InvalidInput(f"{where}: header: missing column 'pair_number' (or 'pair_id', "
                           f"'pair') (found: {found})")
    extra = [c for c in columns if c not in RESERVED_FIELDS]
    if VALUE in columns:
        if extra:
            raise InvalidInput(
                f"{where}: header: a 'value' column holds one metric, named by --metric; "
                f"other columns are not read as metrics: {', '.join(repr(c) for c in extra)}"
                " (leave out 'value' to import one column per metric key)")
        if wanted is None:
            raise InvalidInput(f"{where}: header: a 'value' column needs its metric key "
                               "(--metric KEY)")
        if len(wanted) > 1:
            raise InvalidInput(f"{where}: header: a 'value' column holds one metric; "
                               f"--metric names {len(wanted)} keys")
        return "value", [(VALUE, wanted[0])]
    if not extra:
        raise InvalidInput(f"{where}: header: no metric column: give 'value' (with --metric "
                           f"KEY) or one column per metric key (found: {found})")
    if wanted is None:
        return "wide", [(c, c) for c in extra]
    absent = [k for k in wanted if k not in extra]
    if absent:
        raise InvalidInput(
            f"{where}: header: no column {', '.join(repr(k) for k in absent)} (metric "
            f"columns in the file: {', '.join(repr(c) for c in extra)})")
    return "wide", [(k, k) for k in wanted]


def _value(path: str, fmt: str, r: Record, column: str, allow_missing: bool) -> float:
    """The value of ``column`` in ``r``: a finite float, or NaN when missing (and allowed)."""
    raw = r.fields.get(column)
    missing = raw is None or (isinstance(raw, float) and math.isnan(raw))
    if isinstance(raw, str):
        text = raw.strip()
        if fmt == "jsonl":
            # A JSON number is a number; text is never read as one.
            raise field_error(path, r.where, column, f"expected a number, got text {raw!r}")
        missing = text.lower() in MISSING_TEXT
        if not missing:
            if not _NUMBER.fullmatch(text):
                if text.lower().lstrip("+-") in ("inf", "infinity"):
                    raise field_error(path, r.where, column, f"not a finite number: {raw!r}")
                raise field_error(path, r.where, column, f"not a number: {raw!r}")
            raw = float(text)
    elif not missing and (isinstance(raw, bool) or not isinstance(raw, int | float)):
        raise field_error(path, r.where, column, f"expected a number, got {json_type(raw)}")
    if missing:
        if not allow_missing:
            raise field_error(path, r.where, column, f"no value (blank or NaN); {_ALLOW}")
        return math.nan
    value = float(raw)
    if not math.isfinite(value):
        raise field_error(path, r.where, column, f"not a finite number: {raw!r}")
    return value


def _pair_of(path: str, r: Record, study: str, by_number: dict[int, _StudyPair],
             by_opaque: dict[str, _StudyPair]) -> tuple[_StudyPair, str]:
    """The study pair a record names, and the field that named it."""
    pair = None
    named_by = PAIR_NUMBER
    raw = r.fields.get(PAIR_NUMBER)
    if raw is not None and not (isinstance(raw, str) and not raw.strip()):
        number = None
        if isinstance(raw, str) and _WHOLE.fullmatch(raw.strip()):
            number = int(float(raw.strip()))
        elif isinstance(raw, int | float) and not isinstance(raw, bool) and \
                math.isfinite(raw) and float(raw).is_integer():
            number = int(raw)
        if number is None:
            shown = repr(raw) if isinstance(raw, str) else json_type(raw)
            raise field_error(path, r.where, PAIR_NUMBER, f"expected a whole pair number, "
                                                          f"got {shown}")
        pair = by_number.get(number)
        if pair is None:
            raise field_error(path, r.where, PAIR_NUMBER, f"no pair {number} in study "
                                                          f"{study!r}")
    for id_field in PAIR_ID_FIELDS:
        raw = r.fields.get(id_field)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            continue
        if not isinstance(raw, str):
            raise field_error(path, r.where, id_field, f"expected a pair id (text), got "
                                                       f"{json_type(raw)}")
        by_id = by_opaque.get(raw.strip())
        if by_id is None:
            raise field_error(path, r.where, id_field, f"no pair {raw.strip()!r} in study "
                                                       f"{study!r}")
        if pair is not None and by_id is not pair:
            raise field_error(path, r.where, id_field,
                              f"{raw.strip()!r} is pair {by_id.number}, but pair_number says "
                              f"{pair.number}")
        if pair is None:
            pair, named_by = by_id, id_field
    if pair is None:
        raise field_error(path, r.where, PAIR_NUMBER, "no pair named (give the pair's number "
                                                      "or its pair_id)")
    case = r.fields.get(CASE_ID)
    if case is None:
        return pair, named_by
    if isinstance(case, bool) or not isinstance(case, str | int):
        raise field_error(path, r.where, CASE_ID, f"expected a case id, got {json_type(case)}")
    # A case id beside the pair catches a file whose rows were shifted or sorted elsewhere.
    if str(case).strip() and str(case).strip() != pair.case:
        raise field_error(path, r.where, CASE_ID, f"pair {pair.number} is case {pair.case!r}, "
                                                  f"not {str(case).strip()!r}")
    return pair, named_by


def import_scores(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    path: str | os.PathLike[str],
    metric: str | Sequence[str] | None = None,
    lower_is_better: bool | Sequence[str] = False,
    description: str = "",
    source: str = "",
    allow_missing: bool = False,
    file_name: str | None = None,
) -> ScoreImportSummary:
    """Import a file of per-pair values computed elsewhere into a study (admin only).

    See the module docstring for the file, the checks and how the values are stored.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: The study whose pairs the file names.
        path: The CSV or JSONL file.
        metric: The key of a ``value`` column; for a file with one column per key, ``None``
            (every column) or the keys to import (a list or one comma-separated string).
        lower_is_better: ``True``: every imported key is better when lower; or the keys that
            are (the others are better when higher).
        description: What the metric is (shown with the import).
        source: Where the values come from: a URL or free text.
        allow_missing: Accept missing values and study pairs without a row (they get no
            value; the summary counts them).
        file_name: The name to record and to show (the page passes the uploaded name);
            default the file's own name.

    Returns:
        What was imported, one record per key.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: a bad file, key or option; the message names the file, row and field.
            Nothing is written.
    """
    require_admin(actor)
    if not isinstance(description, str) or not isinstance(source, str):
        raise InvalidInput("description and source must be text")
    wanted = _keys_wanted(metric)
    p = Path(path)
    where = str(path)
    if not p.is_file():
        raise InvalidInput(f"{where}: file not found" if not p.exists() else
                           f"{where}: not a file")
    digest = file_sha256(p)
    parsed = read_records(p)
    if file_sha256(p) != digest:
        # The signature must name the bytes whose values are stored.
        raise InvalidInput(f"{where}: the file changed while it was read; import it again")
    if not parsed.records:
        raise InvalidInput(f"{where}: no data rows")
    layout, columns = _layout(where, _columns(parsed.records, parsed.header), wanted)
    try:
        keys = [check_key(key) for _, key in columns]
    except InvalidInput as exc:
        if layout == "value":  # the key came from --metric, not from the file
            raise
        raise InvalidInput(f"{where}: header: {exc}") from None
    lower = _lower_keys(lower_is_better, keys)

    with db.read() as s:
        study = get_study(s, study_name)
        study_id, name = study.id, study.name
        pairs = [_StudyPair(pos + 1, oid, case, ih) for pos, oid, case, ih in s.execute(
            select(Pair.position, Pair.opaque_id, Case.external_id, Pair.input_hash)
            .join(Case, Case.id == Pair.case_id)
            .where(Pair.study_id == study_id, Pair.kind == PAIR_STUDY)
            .order_by(Pair.position))]
    if not pairs:
        raise InvalidInput(f"study {name!r} has no pairs")
    by_number = {sp.number: sp for sp in pairs}
    by_opaque = {sp.opaque_id: sp for sp in pairs}

    cells: dict[str, dict[str, _Cell]] = {key: {} for key in keys}  # key -> input hash -> cell
    first_row: dict[int, Record] = {}
    for r in parsed.records:
        pair, named_by = _pair_of(where, r, name, by_number, by_opaque)
        if pair.number in first_row:
            before = first_row[pair.number]
            raise field_error(where, r.where, named_by,
                              f"pair {pair.number} is also on {before.where}")
        first_row[pair.number] = r
        for column, key in columns:
            value = _value(where, parsed.format, r, column, allow_missing)
            twin = cells[key].get(pair.input_hash)
            if twin is not None and not _same(twin.value, value):
                raise field_error(
                    where, r.where, column,
                    f"pair {pair.number} has the same reference, candidate and images as pair "
                    f"{twin.number} ({twin.where}) but another value; scores are stored per "
                    "pair content, so identical pairs need one value")
            cells[key][pair.input_hash] = _Cell(value, r.where, column, pair.number)

    absent = [sp.number for sp in pairs if sp.number not in first_row]
    if absent and not allow_missing:
        raise InvalidInput(f"{where}: {len(absent)} of the {len(pairs)} pairs of study {name!r} "
                           f"{'has' if len(absent) == 1 else 'have'} no row: "
                           f"{_numbers(absent)}; {_ALLOW}")
    missing: dict[str, tuple[int, ...]] = {}
    for key in keys:
        have = {h for h, c in cells[key].items() if not math.isnan(c.value)}
        if not have:
            raise InvalidInput(f"{where}: no pair has a value for {key!r}")
        missing[key] = tuple(sp.number for sp in pairs if sp.input_hash not in have)

    now = clock.utcnow()
    records: list[ScoreImport] = []
    written = 0
    with db.begin() as s:
        for key in keys:
            signature = scores_signature(key, digest)
            sig_hash = signature_hash(signature)
            _check_stored(s, where, key, sig_hash, signature, cells[key])
            rows = [cache.ScoreRow(input_hash=h, family=EXTERNAL_FAMILY, key=key,
                                   signature_hash=sig_hash, signature=signature,
                                   value=c.value, details=None, device=EXTERNAL_FAMILY,
                                   seconds=0.0)
                    for h, c in cells[key].items()]
            written += _store_new(s, rows)
            record = ScoreImport(
                study_id=study_id, key=key, signature=signature, signature_hash=sig_hash,
                higher_is_better=key not in lower, description=description.strip(),
                source=source.strip(), file_name=(file_name or p.name)[:255],
                file_sha256=digest, n_pairs=len(pairs) - len(missing[key]),
                n_missing=len(missing[key]), imported_at=now,
                imported_by=actor.username[:64])
            s.add(record)
            records.append(record)
        s.flush()
        ids = [rec.id for rec in records]
        history = {imp.id: imp for imp in study_imports(s, study_id).history}
    return ScoreImportSummary(
        study_name=name, file_name=file_name or p.name, file_sha256=digest, layout=layout,
        imports=tuple(history[i] for i in ids), n_study_pairs=len(pairs), missing=missing,
        n_rows_written=written)


def _lower_keys(lower_is_better: bool | Sequence[str], keys: list[str]) -> set[str]:
    if isinstance(lower_is_better, bool):
        return set(keys) if lower_is_better else set()
    names = (lower_is_better.split(",") if isinstance(lower_is_better, str)
             else list(lower_is_better))
    if not all(isinstance(n, str) for n in names):
        raise InvalidInput(f"lower-is-better: expected True/False or metric keys, got "
                           f"{lower_is_better!r}")
    chosen = {n.strip() for n in names if n.strip()}
    stray = sorted(chosen - set(keys))
    if stray:
        raise InvalidInput(f"lower-is-better: {', '.join(repr(k) for k in stray)} "
                           f"{'is' if len(stray) == 1 else 'are'} not imported from this file "
                           f"(keys: {', '.join(repr(k) for k in keys)})")
    return chosen


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _check_stored(s: Session, where: str, key: str, sig_hash: str, signature: str,
                  cells: dict[str, _Cell]) -> None:
    """Refuse values that differ from rows this signature already holds.

    The same file imported for pairs of the same content but other numbers (another study)
    would give one content two values under one signature; the cache keeps one.
    """
    hashes = list(cells)
    for start in range(0, len(hashes), _CHUNK):
        for ih, value in s.execute(
            select(MetricScore.input_hash, MetricScore.value).where(
                MetricScore.key == key, MetricScore.signature_hash == sig_hash,
                MetricScore.input_hash.in_(hashes[start:start + _CHUNK]))):
            cell = cells[ih]
            stored = math.nan if value is None else float(value)
            if not _same(stored, cell.value):
                raise field_error(
                    where, cell.where, cell.field,
                    f"pair {cell.number} has the content of a pair an earlier import of this "
                    f"same file gave {value!r} ({signature}); one file cannot give one "
                    "content two values")


def _store_new(s: Session, rows: list[cache.ScoreRow]) -> int:
    """Store rows not there yet (insert-or-ignore, as the runner); returns how many were new."""
    if not rows:
        return 0
    before = _count(s, rows[0])
    cache.store(s, rows)
    return _count(s, rows[0]) - before


def _count(s: Session, row: cache.ScoreRow) -> int:
    return int(s.scalar(select(func.count(MetricScore.id)).where(
        MetricScore.key == row.key, MetricScore.signature_hash == row.signature_hash)) or 0)


def list_score_imports(db: Database, actor: Actor, *, study_name: str
                       ) -> tuple[ScoreImportInfo, ...]:
    """Every score import of a study, newest first (admin only).

    The latest import of each key is what the study reads; the older ones' values stay
    stored (see the module docstring).

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        study_id = get_study(s, study_name).id
        return tuple(reversed(study_imports(s, study_id).history))
