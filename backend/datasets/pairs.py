"""Parse CSV or JSONL files of cases into :class:`backend.services.types.CaseInput`.

Accepted layouts (one file, UTF-8, optional BOM):

- **long**: columns ``case_id`` (or ``id``), ``reference``, ``candidate`` and optionally
  ``source``; several rows per case (one per candidate), the reference repeated identically.
- **wide**: ``case_id`` (or ``id``), ``reference`` and one column per generator; the column
  name is the candidate's source. Empty cells mean "no candidate from that source".
- JSONL lines hold the same keys; a line may also carry ``candidates`` as
  ``{source: text}`` or ``[{"text": ..., "source": ...}]``.

Optional ``images`` (or ``image``): paths separated by ``;`` (a list in JSONL, whose items
may be ``{"path": ..., "view": ...}`` objects), relative to the images folder if one is given,
else to the file's folder. A path that resolves outside that folder is rejected. Errors raise
:class:`backend.services.errors.InvalidInput` naming the file, the row (1 = first data row; CSV
errors also give the line) and the field.

Limits and types: a report may hold at most ``MAX_REPORT_BYTES`` bytes of UTF-8; a JSONL line
may nest arrays/objects at most ``MAX_JSON_DEPTH`` (32) levels deep. Text fields (reports,
sources, image paths and views) must be JSON strings; ids may be strings or integers. No text
may contain a NUL character (PostgreSQL cannot store it). With an images folder, a case whose
rows name no image is looked up by its id, so that id must be a plain name: not absolute,
without path separators, not ``.``/``..`` and not resolving outside the folder.
"""

from __future__ import annotations

import csv
import glob
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.datasets.rexval import MAX_REPORT_BYTES, read_csv_header
from backend.errors import InvalidInput
from backend.types import CandidateInput, CaseInput, ImageInput
from backend.util import MAX_JSON_DEPTH, json_too_deep, json_type

MAX_FILE_BYTES = 512 * 1024 * 1024
ID_FIELDS = ("case_id", "id")
IMAGE_FIELDS = ("images", "image")
RESERVED_FIELDS = {"case_id", "id", "reference", "candidate", "source", "images", "image",
                   "notes", "view", "views", "candidates"}
DEFAULT_SOURCE = "unspecified"


@dataclass(frozen=True)
class _Row:
    number: int  # 1-based data row
    where: str  # "row 3 (line 4)" or "line 3"
    fields: dict[str, Any]


def _decode(path: Path, data: bytes, *, jsonl: bool) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        prefix = data[: exc.start].decode("utf-8", errors="replace")
        line = prefix.count("\n") + 1
        if jsonl:
            where = f"line {line}"
        else:
            # The number of records started before the bad byte, minus the header.
            records = len(list(csv.reader(io.StringIO(prefix)))) if prefix else 1
            where = f"row {max(records - 1, 1)} (line {line})"
        raise InvalidInput(
            f"{path}: {where}: not valid UTF-8 (byte {exc.start}); save the file as UTF-8"
        ) from None


def _read_rows(path: Path) -> list[_Row]:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read file ({exc.strerror})") from None
    if size > MAX_FILE_BYTES:
        raise InvalidInput(f"{path}: file is {size} bytes; the limit is {MAX_FILE_BYTES}")
    data = path.read_bytes()
    jsonl = path.suffix.lower() in (".jsonl", ".ndjson", ".json")
    text = _decode(path, data, jsonl=jsonl)
    if jsonl:
        return _read_jsonl(path, text)
    return _read_csv(path, text)


def _read_jsonl(path: Path, text: str) -> list[_Row]:
    rows = []
    number = 0
    # Only LF ends a JSONL line: str.splitlines would also split at U+2028, U+0085 and other
    # characters that JSON strings may hold unescaped (our own export writes them raw).
    for line_no, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        number += 1
        where = f"line {line_no}"
        too_deep = f"{path}: {where}: nesting deeper than {MAX_JSON_DEPTH} levels"
        if json_too_deep(line):
            raise InvalidInput(too_deep)
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path}: {where}: invalid JSON ({exc.msg})") from None
        except RecursionError:  # the scan above should have caught it; never a traceback
            raise InvalidInput(too_deep) from None
        if not isinstance(obj, dict):
            raise InvalidInput(f"{path}: {where}: expected a JSON object")
        rows.append(_Row(number, where, obj))
    return rows


def _read_csv(path: Path, text: str) -> list[_Row]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = read_csv_header(reader, path)
    header = [h.strip() for h in header]
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise InvalidInput(f"{path}: header: duplicate column {dup!r}")
    rows = []
    number = 0
    while True:
        start_line = reader.line_num + 1
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            where = f"row {number + 1} (line {start_line})"
            if "field larger than field limit" in str(exc):
                raise InvalidInput(
                    f"{path}: {where}: a field is larger than the CSV field limit; reports "
                    f"are limited to {MAX_REPORT_BYTES} bytes"
                ) from None
            raise InvalidInput(f"{path}: {where}: malformed CSV ({exc})") from None
        if not any(v.strip() for v in values):
            continue
        number += 1
        where = f"row {number} (line {start_line})"
        if len(values) != len(header):
            raise InvalidInput(
                f"{path}: {where}: {len(values)} fields, the header has {len(header)}"
            )
        rows.append(_Row(number, where, dict(zip(header, values, strict=True))))
    return rows


def check_report(path: Path, where: str, field: str, value: Any) -> str:
    """Validate one report text (non-empty string within the size limit).

    Args:
        path: The file, for the message.
        where: Row description, for the message.
        field: Field name, for the message.
        value: The raw value.

    Returns:
        The text, stripped of surrounding whitespace.

    Raises:
        InvalidInput: Not a string, empty, or larger than ``MAX_REPORT_BYTES``.
    """
    value = check_text(path, where, field, value)
    size = len(value.encode("utf-8"))
    if size > MAX_REPORT_BYTES:
        raise InvalidInput(
            f"{path}: {where}, field {field!r}: report is {size} bytes; the limit is "
            f"{MAX_REPORT_BYTES} bytes"
        )
    text = value.strip()
    if not text:
        raise InvalidInput(f"{path}: {where}, field {field!r}: empty report")
    return text


def check_text(path: Path, where: str, field: str, value: Any) -> str:
    """Refuse a non-text value (object, array, number, boolean, null) or text with NUL.

    Args:
        path: The file, for the message.
        where: Row description, for the message.
        field: Field name, for the message.
        value: The raw value.

    Returns:
        ``value`` unchanged.

    Raises:
        InvalidInput: ``value`` is not a string or contains a NUL character.
    """
    if not isinstance(value, str):
        raise InvalidInput(f"{path}: {where}, field {field!r}: expected text, got "
                           f"{json_type(value)}")
    if "\x00" in value:
        raise InvalidInput(f"{path}: {where}, field {field!r}: contains a NUL character")
    return value


def _optional_text(path: Path, where: str, field: str, value: Any) -> str | None:
    """A stripped optional text (source, view): ``None`` when absent or blank."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # a numeric label, as the score command accepts for ids
    text = check_text(path, where, field, value).strip()
    if len(text) > 128:
        raise InvalidInput(f"{path}: {where}, field {field!r}: longer than 128 characters")
    return text or None


def resolve_image_path(path: Path, where: str, raw: str, base: Path) -> Path:
    """Resolve an image path inside ``base``; reject anything that escapes it.

    Args:
        path: The input file, for the message.
        where: Row description, for the message.
        raw: The path as written in the file.
        base: The folder images must lie in.

    Returns:
        The absolute, resolved path of an existing file.

    Raises:
        InvalidInput: The path escapes ``base`` or the file does not exist.
    """
    base = base.resolve()
    candidate = (base / raw).resolve()
    if not candidate.is_relative_to(base):
        raise InvalidInput(
            f"{path}: {where}, field 'images': {raw!r} lies outside the allowed folder {base}"
        )
    if not candidate.is_file():
        raise InvalidInput(f"{path}: {where}, field 'images': no such file {raw!r}")
    return candidate


def _image_list(path: Path, row: _Row, base: Path) -> list[ImageInput]:
    raw: Any = None
    for name in IMAGE_FIELDS:
        if name in row.fields and row.fields[name] not in (None, ""):
            raw = row.fields[name]
            break
    if raw is None:
        return []
    items: list[tuple[str, str | None]] = []
    if isinstance(raw, str):
        check_text(path, row.where, "images", raw)
        items = [(p.strip(), None) for p in raw.split(";")]
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            view = None
            if isinstance(item, dict):
                view = _optional_text(path, row.where, f"images[{i}].view", item.get("view"))
                item = check_text(path, row.where, f"images[{i}].path", item.get("path"))
            else:
                item = check_text(path, row.where, f"images[{i}]", item)
            items.append((item.strip(), view))
    else:
        raise InvalidInput(f"{path}: {row.where}, field 'images': expected ';'-separated paths "
                           f"or a list, got {json_type(raw)}")
    return [ImageInput(path=resolve_image_path(path, row.where, p, base), view=view)
            for p, view in items if p]


def _case_id(path: Path, row: _Row) -> str:
    for name in ID_FIELDS:
        value = row.fields.get(name)
        if value not in (None, ""):
            if isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # JSONL ids may be integers, as for the score command
            text = check_text(path, row.where, name, value).strip()
            if len(text) > 128:
                raise InvalidInput(f"{path}: {row.where}, field {name!r}: longer than 128")
            if text:
                return text
    raise InvalidInput(f"{path}: {row.where}, field 'case_id': missing case id")


def _candidates(path: Path, row: _Row, wide_columns: list[str]) -> list[CandidateInput]:
    f = row.fields
    out: list[CandidateInput] = []
    if "candidates" in f and f["candidates"] not in (None, ""):
        cands = f["candidates"]
        if isinstance(cands, dict):
            for source, text in cands.items():
                label = _optional_text(path, row.where, f"candidates.{source}", source)
                out.append(CandidateInput(
                    check_report(path, row.where, f"candidates.{source}", text),
                    label or DEFAULT_SOURCE,
                ))
        elif isinstance(cands, list):
            for i, item in enumerate(cands):
                if not isinstance(item, dict):
                    raise InvalidInput(
                        f"{path}: {row.where}, field 'candidates[{i}]': expected an object"
                    )
                text = check_report(path, row.where, f"candidates[{i}].text", item.get("text"))
                source = _optional_text(path, row.where, f"candidates[{i}].source",
                                        item.get("source"))
                out.append(CandidateInput(text, source or DEFAULT_SOURCE))
        else:
            raise InvalidInput(f"{path}: {row.where}, field 'candidates': expected an object "
                               f"or a list, got {json_type(cands)}")
        return out
    if "candidate" in f:
        text = check_report(path, row.where, "candidate", f["candidate"])
        source = _optional_text(path, row.where, "source", f.get("source"))
        return [CandidateInput(text, source or DEFAULT_SOURCE)]
    for column in wide_columns:
        value = f.get(column)
        if value in (None, ""):
            continue
        if len(column) > 128 or "\x00" in column:
            # The column name becomes the candidate's source, stored in 128 characters.
            raise InvalidInput(f"{path}: {row.where}, field {column[:40]!r}...: a source "
                               "column name must be at most 128 characters, without NUL")
        out.append(CandidateInput(check_report(path, row.where, column, value), column))
    return out


IMAGE_SUFFIXES = (".dcm", ".dicom", ".png", ".jpg", ".jpeg")


def unusable_lookup_id(case_id: str) -> str | None:
    """Why ``case_id`` cannot name files in an images folder, or ``None`` if it can.

    A lookup id is used as a file or folder name inside the images folder, so it must not
    be able to point anywhere else: no absolute path, drive, separator or ``..``.
    """
    if "\x00" in case_id:
        return "it contains a NUL character"
    if case_id.startswith(("/", "\\")):
        return "it is an absolute path"
    if "/" in case_id or "\\" in case_id:
        return "it contains a path separator"
    if case_id == ".":
        return "it is '.', the images folder itself"
    if ".." in case_id:
        return "it contains '..'"
    return None


def images_in_folder(base: Path, case_id: str) -> list[ImageInput]:
    """Images of ``case_id`` found by name in an images folder.

    A case's images are every image file in ``base/<case_id>/`` (DICOM, PNG, JPEG; sorted by
    name, nested folders included), else the files ``base/<case_id>.<ext>`` and
    ``base/<case_id>_*.<ext>``. Files without one of those suffixes are ignored. Glob
    characters in the id (``*``, ``?``, ``[``) match themselves only.

    Raises:
        ValueError: ``case_id`` is not a plain name (see :func:`unusable_lookup_id`), or a
            matching folder or file resolves (through a link) outside ``base``; the message
            says which.
    """
    problem = unusable_lookup_id(case_id)
    if problem:
        raise ValueError(problem)
    root = base.resolve()
    folder = base / case_id
    found: list[Path] = []
    if folder.is_dir():
        if not folder.resolve().is_relative_to(root):
            raise ValueError(f"its folder {case_id!r} resolves outside the images folder")
        found = [p for p in sorted(folder.rglob("*")) if p.is_file()
                 and p.suffix.lower() in IMAGE_SUFFIXES]
    if not found:
        found = [p for p in sorted(base.glob(f"{glob.escape(case_id)}*")) if p.is_file()
                 and p.suffix.lower() in IMAGE_SUFFIXES
                 and (p.stem == case_id or p.stem.startswith(f"{case_id}_"))]
    for p in found:
        if not p.resolve().is_relative_to(root):
            raise ValueError(f"image {str(p.relative_to(base))!r} resolves outside the images "
                             "folder")
    return [ImageInput(path=p.resolve()) for p in found]


def parse_cases(path: str | Path, *, images_dir: str | Path | None = None) -> list[CaseInput]:
    """Read a CSV or JSONL file of cases.

    Args:
        path: The file (``.csv``, or ``.jsonl``/``.ndjson``).
        images_dir: Folder that image paths are relative to (default: the file's folder);
            images must lie inside it. When given, a case whose rows name no image takes the
            images found for it by name in this folder (see :func:`images_in_folder`), so a
            folder of DICOM/PNG/JPEG files organised by case id imports without listing files.

    Returns:
        Cases in order of first appearance, candidates in row/column order.

    Raises:
        InvalidInput: Any problem, naming the file, row and field.
    """
    path = Path(path)
    base = Path(images_dir) if images_dir is not None else path.resolve().parent
    if images_dir is not None and not base.is_dir():
        raise InvalidInput(f"{base}: images folder does not exist")
    rows = _read_rows(path)
    if not rows:
        raise InvalidInput(f"{path}: no data rows")
    columns = list(rows[0].fields) if path.suffix.lower() == ".csv" else []
    if columns:
        if not any(c in columns for c in ID_FIELDS):
            raise InvalidInput(f"{path}: header: missing column 'case_id' (or 'id')")
        if "reference" not in columns:
            raise InvalidInput(f"{path}: header: missing column 'reference'")
        if "candidate" not in columns and not (set(columns) - RESERVED_FIELDS):
            raise InvalidInput(
                f"{path}: header: no candidate column ('candidate', or one column per source)"
            )
    cases: dict[str, CaseInput] = {}
    seen_images: dict[str, set[Path]] = {}
    first_row: dict[str, _Row] = {}
    for row in rows:
        wide = [c for c in row.fields if c not in RESERVED_FIELDS]
        case_id = _case_id(path, row)
        if "reference" not in row.fields:
            raise InvalidInput(f"{path}: {row.where}, field 'reference': missing")
        reference = check_report(path, row.where, "reference", row.fields["reference"])
        candidates = _candidates(path, row, wide)
        images = _image_list(path, row, base)
        case = cases.get(case_id)
        if case is None:
            case = CaseInput(case_id=case_id, reference=reference, candidates=[], images=[])
            cases[case_id] = case
            seen_images[case_id] = set()
            first_row[case_id] = row
        elif case.reference != reference:
            raise InvalidInput(
                f"{path}: {row.where}, field 'reference': differs from the reference given "
                f"earlier for case {case_id!r}"
            )
        case.candidates.extend(candidates)
        for image in images:
            if image.path not in seen_images[case_id]:
                seen_images[case_id].add(image.path)
                case.images.append(image)
    for case in cases.values():
        if not case.candidates:
            raise InvalidInput(f"{path}: case {case.case_id!r}: no candidate report")
        if images_dir is not None and not case.images:
            try:
                case.images.extend(images_in_folder(base, case.case_id))
            except (ValueError, OSError) as exc:
                row = first_row[case.case_id]
                name = next((n for n in ID_FIELDS if row.fields.get(n) not in (None, "")),
                            "case_id")
                reason = exc.strerror if isinstance(exc, OSError) else str(exc)
                raise InvalidInput(
                    f"{path}: {row.where}, field {name!r}: case id {case.case_id!r} cannot be "
                    f"looked up in the images folder: {reason}"
                ) from None
    return list(cases.values())
