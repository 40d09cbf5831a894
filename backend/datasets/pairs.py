"""Parse CSV or JSONL files of cases into :class:`backend.types.CaseInput`.

Accepted layouts (one file, UTF-8, optional BOM):

- **long**: columns ``case_id`` (or ``id``), ``reference``, ``candidate`` and optionally
  ``source``; several rows per case (one per candidate), the reference repeated identically.
- **wide**: ``case_id`` (or ``id``), ``reference`` and one column per generator; the column
  name is the candidate's source. Empty cells mean "no candidate from that source".
- JSONL lines hold the same keys; a line may also carry ``candidates`` as
  ``{source: text}`` or ``[{"text": ..., "source": ...}]``.

Optional ``images`` (or ``image``): paths separated by ``;`` (a list in JSONL, whose items
may be ``{"path": ..., "view": ...}`` objects), relative to the images folder if one is given,
else to the file's folder. A path that resolves outside that folder is rejected.

The file is read by the one PAIRS reader, :mod:`backend.scoring.pairs_reader`, which the
``score`` command uses too: the same numbering (``row N (line L)`` in CSV, ``line L`` in
JSONL), the same :class:`backend.errors.InvalidInput` messages naming file, row and field, and
the same limits and types: a report holds at most ``MAX_REPORT_BYTES`` bytes of UTF-8, ids
and sources at most 128 characters; a JSONL line nests at most ``MAX_JSON_DEPTH`` (32) levels;
text fields (reports, sources, image paths and views) must be JSON strings, ids may be strings
or integers; no text may contain a NUL character. Here reports are also stripped and must not
be empty, and a file may hold at most ``MAX_FILE_BYTES`` bytes. With an images folder, a case
whose rows name no image is looked up by its id, so that id must be a plain name: not
absolute, without path separators, not ``.``/``..`` and not resolving outside the folder.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from backend.errors import InvalidInput
from backend.scoring.pairs_reader import (
    MAX_FILE_BYTES,
    MAX_LABEL_CHARS,
    MAX_REPORT_BYTES,
    Record,
    check_label,
    check_report,
    field_error,
    read_records,
    record_images,
    require_columns,
)
from backend.types import CandidateInput, CaseInput, ImageInput
from backend.util import json_type

__all__ = ["MAX_FILE_BYTES", "MAX_REPORT_BYTES", "images_in_folder", "parse_cases",
           "unusable_lookup_id"]

ID_FIELDS = ("case_id", "id")
RESERVED_FIELDS = {"case_id", "id", "reference", "candidate", "source", "images", "image",
                   "notes", "view", "views", "candidates"}
DEFAULT_SOURCE = "unspecified"


def _report(path: Path, where: str, field: str, value: Any) -> str:
    """A report for a study: checked, stripped, and not empty."""
    text = check_report(path, where, field, value).strip()
    if not text:
        raise field_error(path, where, field, "empty report")
    return text


def _case_id(path: Path, row: Record) -> str:
    for name in ID_FIELDS:
        value = row.fields.get(name)
        if value not in (None, ""):
            text = check_label(path, row.where, name, value)
            if text:
                return text
    raise field_error(path, row.where, "case_id", "missing case id")


def _candidates(path: Path, row: Record, wide_columns: list[str]) -> list[CandidateInput]:
    f = row.fields
    out: list[CandidateInput] = []
    if "candidates" in f and f["candidates"] not in (None, ""):
        cands = f["candidates"]
        if isinstance(cands, dict):
            for source, text in cands.items():
                label = check_label(path, row.where, f"candidates.{source}", source)
                out.append(CandidateInput(
                    _report(path, row.where, f"candidates.{source}", text),
                    label or DEFAULT_SOURCE,
                ))
        elif isinstance(cands, list):
            for i, item in enumerate(cands):
                if not isinstance(item, dict):
                    raise field_error(path, row.where, f"candidates[{i}]", "expected an object")
                text = _report(path, row.where, f"candidates[{i}].text", item.get("text"))
                source = check_label(path, row.where, f"candidates[{i}].source",
                                     item.get("source"))
                out.append(CandidateInput(text, source or DEFAULT_SOURCE))
        else:
            raise field_error(path, row.where, "candidates",
                              f"expected an object or a list, got {json_type(cands)}")
        return out
    if "candidate" in f:
        text = _report(path, row.where, "candidate", f["candidate"])
        source = check_label(path, row.where, "source", f.get("source"))
        return [CandidateInput(text, source or DEFAULT_SOURCE)]
    for column in wide_columns:
        value = f.get(column)
        if value in (None, ""):
            continue
        if len(column) > MAX_LABEL_CHARS or "\x00" in column:
            # The column name becomes the candidate's source, stored in 128 characters.
            raise InvalidInput(f"{path}: {row.where}, field {column[:40]!r}...: a source "
                               f"column name must be at most {MAX_LABEL_CHARS} characters, "
                               "without NUL")
        out.append(CandidateInput(_report(path, row.where, column, value), column))
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
    parsed = read_records(path, max_bytes=MAX_FILE_BYTES)
    rows = parsed.records
    columns = list(parsed.header or ())
    if parsed.header is not None:
        require_columns(path, columns, [ID_FIELDS, "reference"])
        if "candidate" not in columns and not (set(columns) - RESERVED_FIELDS):
            raise InvalidInput(
                f"{path}: header: no candidate column ('candidate', or one column per source)"
            )
    if not rows:
        raise InvalidInput(f"{path}: no data rows")
    cases: dict[str, CaseInput] = {}
    seen_images: dict[str, set[Path]] = {}
    first_row: dict[str, Record] = {}
    for row in rows:
        wide = [c for c in row.fields if c not in RESERVED_FIELDS]
        case_id = _case_id(path, row)
        if "reference" not in row.fields:
            raise field_error(path, row.where, "reference", "missing")
        reference = _report(path, row.where, "reference", row.fields["reference"])
        candidates = _candidates(path, row, wide)
        images = record_images(path, row, base)
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
