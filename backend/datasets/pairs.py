"""Parse CSV or JSONL files of cases into :class:`backend.types.CaseInput`.

Accepted layouts (one file, UTF-8, optional BOM):

- **long**: columns ``case_id`` (or ``id``), ``reference``, ``candidate`` and optionally
  ``source``; several rows per case (one per candidate), the reference repeated identically.
  JSONL lines may instead carry ``candidates`` as ``{source: text}`` or
  ``[{"text": ..., "source": ...}]``.
- **wide**: ``case_id`` (or ``id``), ``reference`` and one column per generator; the column
  name is the candidate's source. Empty cells mean "no candidate from that source".
- JSONL lines hold the same keys.

The layout is chosen by the caller (``layout="long"`` or ``"wide"``) or detected
(``"auto"``) only when the columns leave no doubt: a ``candidate`` (or ``candidates``) column
means long; no such column, no ``source`` column and at least one other column means wide,
each other column a generator. Everything else is refused before a row is read, naming the
columns: a long file with unknown columns (``candidat``, ``Source``), a ``source`` column
without ``candidate``, a wide file whose generator column looks like a misspelt column name
(``candidat``: "did you mean 'candidate'?"), a wide file with long-layout columns. So a typo
never becomes a generator called ``candidat`` with the ``source`` column silently dropped.
Columns written by this app's own JSONL export (``position``, ``pair_number``, ``pair_id``,
``input_hash``) are known and ignored, so an export re-imports as it is.

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

import difflib
import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radconcord.backend.errors import InvalidInput
from radconcord.backend.imaging.volume import (
    NIFTI_SUFFIXES,
    VolumeError,
    classify_entry,
    is_nifti_name,
    may_hold_series,
)
from radconcord.backend.scoring.pairs_reader import (
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
from radconcord.backend.types import CandidateInput, CaseInput, ImageInput
from radconcord.backend.util import json_type

__all__ = ["LAYOUTS", "MAX_FILE_BYTES", "MAX_REPORT_BYTES", "CasesFile", "images_in_folder",
           "parse_cases", "read_cases", "unusable_lookup_id"]

ID_FIELDS = ("case_id", "id")
#: Columns of either layout.
COMMON_FIELDS = ("case_id", "id", "reference", "images", "image", "notes", "view", "views")
#: Columns only the long layout has (``candidates``: JSONL only).
LONG_FIELDS = ("candidate", "source", "candidates")
#: Columns our own JSONL export writes besides the import's: read back and ignored.
EXPORT_FIELDS = ("position", "pair_number", "pair_id", "input_hash")
RESERVED_FIELDS = {*COMMON_FIELDS, *LONG_FIELDS, *EXPORT_FIELDS}
#: Names a misspelt column is compared with ("did you mean ...?").
_SUGGESTIBLE = ("case_id", "id", "reference", "candidate", "candidates", "source", "images",
                "image", "notes", "view", "views")
DEFAULT_SOURCE = "unspecified"
#: ``auto`` detects the layout when the columns leave no doubt.
LAYOUTS = ("auto", "long", "wide")


@dataclass(frozen=True)
class CasesFile:
    """A parsed cases file and how it was read.

    Attributes:
        cases: The cases, in order of first appearance.
        layout: ``long`` or ``wide``.
        layout_reason: Why that layout (``"chosen"`` when the caller named it).
        columns: The columns (CSV header, or every JSONL key in order of appearance).
        ignored: Known columns that are read and not used (export bookkeeping).
        missing_images: ``(where, path)`` of image paths naming no file (only when parsed
            with ``collect_missing=True``; otherwise a missing image is an error).
    """

    cases: list[CaseInput]
    layout: str
    layout_reason: str
    columns: tuple[str, ...]
    ignored: tuple[str, ...] = ()
    missing_images: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def suggest_column(name: str) -> str | None:
    """The known column ``name`` looks like a misspelling of (``candidat`` -> ``candidate``)."""
    low = name.strip().lower()
    if low in _SUGGESTIBLE:
        return low  # a case or spacing difference: ``Candidate``, ``source ``
    match = difflib.get_close_matches(low, _SUGGESTIBLE, n=1, cutoff=0.8)
    return match[0] if match else None


def _unknown(columns: list[str]) -> str:
    parts = []
    for c in columns:
        hint = suggest_column(c)
        parts.append(f"{c!r}" + (f" (did you mean {hint!r}?)" if hint else ""))
    return ", ".join(parts)


def choose_layout(path: Path, columns: list[str], layout: str = "auto") -> tuple[str, str]:
    """Decide (or check) the layout of a file with ``columns``; refuse doubtful files.

    Args:
        path: The file, for messages.
        columns: Its columns (CSV header or JSONL keys).
        layout: ``auto``, ``long`` or ``wide``.

    Returns:
        ``(layout, reason)``, layout ``long`` or ``wide``.

    Raises:
        InvalidInput: an unknown layout; unknown or misspelt columns, named (with the known
            column each looks like); a file whose layout cannot be told.
    """
    if layout not in LAYOUTS:
        raise InvalidInput(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    where = f"{path}: header"
    extra = [c for c in columns if c not in RESERVED_FIELDS]
    has_long = [c for c in LONG_FIELDS if c in columns]
    has_candidate = "candidate" in columns or "candidates" in columns
    if layout == "auto":
        if has_candidate:
            layout, reason = "long", "it has a 'candidate' column"
        elif "source" in columns:
            raise InvalidInput(
                f"{where}: column 'source' belongs to the long layout (one row per candidate), "
                "but there is no 'candidate' column"
                + (f"; unknown column(s) {_unknown(extra)}" if extra else "")
                + "; fix the header, or choose the layout explicitly")
        elif not extra:
            raise InvalidInput(
                f"{where}: no candidate column ('candidate', or one column per generator)")
        else:
            misspelt = [c for c in extra if suggest_column(c)]
            if misspelt:
                raise InvalidInput(
                    f"{where}: unknown column(s) {_unknown(misspelt)}; without a 'candidate' "
                    "column every other column would become a generator, so the layout is "
                    "not clear: fix the header")
            return "wide", (f"no 'candidate' column, so every other column is a generator: "
                            f"{', '.join(extra)}")
    else:
        reason = "chosen"
    if layout == "long":
        if not has_candidate:
            raise InvalidInput(
                f"{where}: long layout: missing column 'candidate'"
                + (f"; unknown column(s) {_unknown(extra)}" if extra else ""))
        if extra:
            raise InvalidInput(
                f"{where}: unknown column(s) {_unknown(extra)}; the long layout takes "
                "case_id (or id), reference, candidate, source, images and notes")
        return "long", reason
    # wide
    if has_long:
        raise InvalidInput(
            f"{where}: wide layout: column(s) {', '.join(repr(c) for c in has_long)} belong "
            "to the long layout (one row per candidate); in the wide layout each generator "
            "has its own column")
    misspelt = [c for c in extra if suggest_column(c)]
    if misspelt:
        raise InvalidInput(
            f"{where}: wide layout: column(s) {_unknown(misspelt)} look like misspelt column "
            "names, not generators; rename them")
    if not extra:
        raise InvalidInput(f"{where}: wide layout: no generator column (one column per "
                           "generator, besides case_id, reference and images)")
    return "wide", reason


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


def _candidates(path: Path, row: Record, layout: str) -> list[CandidateInput]:
    f = row.fields
    out: list[CandidateInput] = []
    if layout == "wide":
        return _wide_candidates(path, row)
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
    raise field_error(path, row.where, "candidate", "missing (long layout: one candidate per "
                                                    "row, or 'candidates' in JSONL)")


def _wide_candidates(path: Path, row: Record) -> list[CandidateInput]:
    out: list[CandidateInput] = []
    for column in (c for c in row.fields if c not in RESERVED_FIELDS):
        value = row.fields.get(column)
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

    A case's images are every image file in ``base/<case_id>/`` (DICOM, PNG, JPEG, NIfTI;
    sorted by name, nested folders included), else the files ``base/<case_id>.<ext>`` and
    ``base/<case_id>_*.<ext>``. Files without one of those suffixes are ignored. A folder in
    the case folder (or the case folder itself) holding the slices of a DICOM series is one
    image, a volume: the folder is returned instead of its files (see
    :func:`_series_folders`; an ambiguous folder is refused with the reason). Glob
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
        series = _series_folders(folder)
        found = sorted([*series, *(
            p for p in folder.rglob("*") if p.is_file()
            and (p.suffix.lower() in IMAGE_SUFFIXES or is_nifti_name(p))
            and not any(p.is_relative_to(s) for s in series))])
    if not found:
        found = [p for p in sorted(base.glob(f"{glob.escape(case_id)}*")) if p.is_file()
                 and (p.suffix.lower() in IMAGE_SUFFIXES or is_nifti_name(p))
                 and (_stem(p) == case_id or _stem(p).startswith(f"{case_id}_"))]
    for p in found:
        if not p.resolve().is_relative_to(root):
            raise ValueError(f"image {str(p.relative_to(base))!r} resolves outside the images "
                             "folder")
    return [ImageInput(path=p.resolve()) for p in found]


def _stem(path: Path) -> str:
    """The name without its image suffix (``c1.nii.gz`` -> ``c1``)."""
    name = path.name
    for suffix in NIFTI_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _series_folders(folder: Path) -> list[Path]:
    """The folders in a case folder (itself included) that hold a DICOM series.

    A folder whose own files look like slices of a series
    (:func:`backend.imaging.volume.may_hold_series`) is classified with
    :func:`backend.imaging.volume.classify_entry`, which refuses an ambiguous folder (two
    series, a series beside films, a subfolder) with the reason; other folders keep their
    files as 2-D films.

    Raises:
        ValueError: An ambiguous folder, with the reason (it names the folder).
    """
    out = []
    for d in [folder, *sorted(p for p in folder.rglob("*") if p.is_dir())]:
        if not may_hold_series(d):
            continue
        try:
            kind = classify_entry(d)
        except VolumeError as exc:
            raise ValueError(str(exc)) from None
        if kind == "series":
            out.append(d)
    return out


def parse_cases(path: str | Path, *, images_dir: str | Path | None = None,
                layout: str = "auto") -> list[CaseInput]:
    """Read a CSV or JSONL file of cases (see :func:`read_cases`); the cases only."""
    return read_cases(path, images_dir=images_dir, layout=layout).cases


def _columns(parsed: Any) -> list[str]:
    if parsed.header is not None:
        return list(parsed.header)
    seen: dict[str, None] = {}
    for row in parsed.records:
        for key in row.fields:
            seen.setdefault(key, None)
    return list(seen)


def read_cases(path: str | Path, *, images_dir: str | Path | None = None,
               layout: str = "auto", collect_missing: bool = False) -> CasesFile:
    """Read a CSV or JSONL file of cases, its layout chosen or detected (module docstring).

    Args:
        path: The file (``.csv``, or ``.jsonl``/``.ndjson``).
        images_dir: Folder that image paths are relative to (default: the file's folder);
            images must lie inside it. When given, a case whose rows name no image takes the
            images found for it by name in this folder (see :func:`images_in_folder`), so a
            folder of DICOM/PNG/JPEG files organised by case id imports without listing files.
        layout: ``auto`` (detected only when unambiguous), ``long`` or ``wide``.
        collect_missing: List image paths that name no file in
            :attr:`CasesFile.missing_images` instead of refusing the first (a dry run).

    Returns:
        The cases (in order of first appearance, candidates in row/column order) and the
        layout with the reason it was chosen.

    Raises:
        InvalidInput: Any problem, naming the file, row and field; unknown or misspelt
            columns are named with the column each looks like.
    """
    path = Path(path)
    base = Path(images_dir) if images_dir is not None else path.resolve().parent
    if images_dir is not None and not base.is_dir():
        raise InvalidInput(f"{base}: images folder does not exist")
    parsed = read_records(path, max_bytes=MAX_FILE_BYTES)
    rows = parsed.records
    columns = _columns(parsed)
    if parsed.header is not None:
        require_columns(path, columns, [ID_FIELDS, "reference"])
    if not rows:
        raise InvalidInput(f"{path}: no data rows")
    layout, reason = choose_layout(path, columns, layout)
    missing: list[tuple[str, str]] = []
    cases: dict[str, CaseInput] = {}
    seen_images: dict[str, set[Path]] = {}
    first_row: dict[str, Record] = {}
    named_images: set[str] = set()
    for row in rows:
        case_id = _case_id(path, row)
        if "reference" not in row.fields:
            raise field_error(path, row.where, "reference", "missing")
        reference = _report(path, row.where, "reference", row.fields["reference"])
        candidates = _candidates(path, row, layout)
        lost: list[str] | None = [] if collect_missing else None
        images = record_images(path, row, base, missing=lost, folders=True)
        missing.extend((row.where, p) for p in lost or ())
        if lost:
            named_images.add(case_id)  # it names images (missing ones): no lookup by id
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
        if images_dir is not None and not case.images and case.case_id not in named_images:
            try:
                case.images.extend(images_in_folder(base, case.case_id))
            except (ValueError, OSError) as exc:
                row = first_row[case.case_id]
                name = next((n for n in ID_FIELDS if row.fields.get(n) not in (None, "")),
                            "case_id")
                reason_text = exc.strerror if isinstance(exc, OSError) else str(exc)
                raise InvalidInput(
                    f"{path}: {row.where}, field {name!r}: case id {case.case_id!r} cannot be "
                    f"looked up in the images folder: {reason_text}"
                ) from None
    return CasesFile(
        cases=list(cases.values()),
        layout=layout,
        layout_reason=reason,
        columns=tuple(columns),
        ignored=tuple(c for c in columns if c in EXPORT_FIELDS),
        missing_images=tuple(missing),
    )
