"""RadPref files (CRIMSON project, MIT licence): parse, validate, map to ReXVal counts, write.

RadPref is a reader-preference set: for each case a reference report and two candidate reports
(``C1``, ``C2``) from different generators; each radiologist annotator marked the candidate
findings that are wrong (``finding_errors``) and the reference findings a candidate misses
(``missing_findings``), and rated each candidate 1-5. The files are supplied by the user and
never shipped with RadConcord.

Layout (as published, commit 07e3331 of rajpurkarlab/CRIMSON):

``preference_data.json``
    A list of cases ``{id, ground_truth_report, ground_truth_findings[], C1_report,
    C1_findings[], C1_source, C2_report, C2_findings[], C2_source, PatientAge, PatientSex,
    Indication, Comparison, StudyDescription}``. The keys up to ``C2_source`` are required;
    the patient fields and any other key are kept verbatim.

``radiologist_annotations/user_N.json``
    ``{user_id, annotations: {case id: {C1: {finding_errors: {"<index into C1_findings>":
    {error_type: "false"|"attribute", clinical_significance?, attributes?: {name:
    "significant"|"negligible"}, explanation?}}, missing_findings: {"<index into
    ground_truth_findings>": {clinical_significance, explanation?}}, rating: 1-5,
    rating_explanation?}, C2: {...}, new_finding_indices?: {C1: [...], C2: [...], GT:
    [...]}}}}``.

Nothing is normalised: every object is kept as parsed (key order included), so an export
writes back JSON-equal files. Keys the format does not name are kept too.

Mapping to the ReXVal 6x2 counts (``category:significant``), used for the per-error records
and the derived counts of each annotator and candidate. RadPref's errors are finer or coarser
than ReXVal's in places; the mapping takes the nearest ReXVal category:

=====================================  ===================================================
RadPref                                ReXVal category
=====================================  ===================================================
finding error ``false``                1 false prediction of finding
missing finding                        2 omission of finding
attribute ``location``                 3 incorrect location/position of finding
attribute ``severity``                 4 incorrect severity of finding
attribute ``measurement``              4 (a wrong size is a wrong severity/extent)
attribute ``descriptor``               4 (a wrong characterisation of a present finding)
attribute ``certainty``                4 (over- or under-stated certainty of a finding)
attribute ``unspecific``               4 (a finding described too vaguely)
attribute ``overinterpretation``       1 (a finding claimed beyond what the image shows)
attribute ``temporal``                 5 mention of comparison that is not present/wrong
=====================================  ===================================================

An ``attribute`` error with several attributes is one error per attribute (a wrong location
and a wrong severity are two ReXVal errors). Significance:

=====================================================  ==============================
RadPref                                                ReXVal significance
=====================================================  ==============================
``urgent``, ``actionable_not_urgent``, ``significant``  clinically significant
``not_actionable_not_urgent``, ``benign_expected``,    not clinically significant
``negligible``
=====================================================  ==============================

A ``false`` error and a missing finding take their ``clinical_significance``; an attribute
error takes each attribute's own value.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radconcord.backend.errors import InvalidInput

PREFERENCES_FILE = "preference_data.json"
ANNOTATIONS_DIR = "radiologist_annotations"
CANDIDATES = ("C1", "C2")
#: Case keys every case must have, with their JSON type.
CASE_TEXT_KEYS = ("id", "ground_truth_report", "C1_report", "C1_source", "C2_report",
                  "C2_source")
CASE_LIST_KEYS = ("ground_truth_findings", "C1_findings", "C2_findings")
#: Case keys stored in columns (case id, report texts, sources); the rest go to the
#: comparison's ``meta`` verbatim.
CASE_COLUMN_KEYS = ("id", "ground_truth_report", "C1_report", "C1_source", "C2_report",
                    "C2_source")
CANDIDATE_KEYS = ("finding_errors", "missing_findings", "rating")
ERROR_TYPES = ("false", "attribute")
SIGNIFICANT = {"urgent": True, "actionable_not_urgent": True,
               "not_actionable_not_urgent": False, "benign_expected": False}
ATTRIBUTE_SIGNIFICANT = {"significant": True, "negligible": False}
ATTRIBUTE_CATEGORY = {"location": 3, "severity": 4, "measurement": 4, "descriptor": 4,
                      "certainty": 4, "unspecific": 4, "overinterpretation": 1, "temporal": 5}
CATEGORY_FALSE = 1
CATEGORY_MISSING = 2
NEW_FINDING_KEYS = {"C1": "C1_findings", "C2": "C2_findings", "GT": "ground_truth_findings"}
#: What an annotator's ``user_id`` may hold to become a RadConcord account name.
USER_ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,48}")
_INDEX = re.compile(r"0|[1-9][0-9]*")
_USER_FILE = re.compile(r"user_(.+)\.json")


def _problem(file: str, case: str | None, field: str | None, message: str) -> InvalidInput:
    """One error naming the file, then the case and field where known."""
    where = ", ".join(part for part in (
        f"case {case!r}" if case is not None else "",
        f"field {field!r}" if field is not None else "") if part)
    return InvalidInput(f"{file}: {where}: {message}" if where else f"{file}: {message}")


def _no_duplicates(file: str) -> Any:  # noqa: ANN401 - the hook's JSON object
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise _problem(file, None, key, "appears twice in one JSON object")
            out[key] = value
        return out
    return hook


def _load_json(data: bytes, file: str) -> Any:  # noqa: ANN401 - any JSON value
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _problem(file, None, None, f"not UTF-8 text ({exc.reason} at byte "
                                         f"{exc.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates(file))
    except json.JSONDecodeError as exc:
        raise _problem(file, None, None, f"not valid JSON (line {exc.lineno}, column "
                                         f"{exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise _problem(file, None, None, "JSON nested too deeply") from None


@dataclass(frozen=True)
class Annotator:
    """One ``user_N.json`` file, validated; ``raw`` is the parsed object as it was."""

    file: str
    raw: dict[str, Any]
    warnings: tuple[str, ...] = ()
    style: dict[str, Any] | None = None

    @property
    def user_id(self) -> str:
        """The annotator's id as text (the file may give a number)."""
        return str(self.raw["user_id"])

    @property
    def annotations(self) -> dict[str, dict[str, Any]]:
        """Case id -> that case's annotation, in file order."""
        return self.raw["annotations"]


@dataclass(frozen=True)
class RadPrefData:
    """A validated RadPref set: the cases (file order) and the annotator files."""

    preferences_file: str
    cases: tuple[dict[str, Any], ...]
    annotators: tuple[Annotator, ...]
    preferences_style: dict[str, Any] | None = None
    #: File name -> sha256 of its bytes (recorded in the study's provenance).
    sha256: dict[str, str] = field(default_factory=dict)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Every annotator file's warnings, in file order."""
        return tuple(w for a in self.annotators for w in a.warnings)


def parse_preferences(data: bytes, file: str = PREFERENCES_FILE) -> list[dict[str, Any]]:
    """Parse and check ``preference_data.json``.

    Args:
        data: The file's bytes.
        file: Its name as the user knows it (named in every error).

    Returns:
        The cases as parsed, in file order.

    Raises:
        InvalidInput: Not JSON, not a list of cases, a required key missing or of the wrong
            type, or a case id given twice (file, case and field named).
    """
    cases = _load_json(data, file)
    if not isinstance(cases, list):
        raise _problem(file, None, None, "must hold a JSON list of cases")
    if not cases:
        raise _problem(file, None, None, "holds no case")
    seen: set[str] = set()
    for number, case in enumerate(cases, start=1):
        if not isinstance(case, dict):
            raise _problem(file, f"#{number}", None, "a case must be a JSON object")
        case_id = case.get("id")
        label = case_id if isinstance(case_id, str) and case_id.strip() else f"#{number}"
        for key in CASE_TEXT_KEYS:
            if key not in case:
                raise _problem(file, label, key, "missing")
            if not isinstance(case[key], str):
                raise _problem(file, label, key, f"must be text, got {type(case[key]).__name__}")
            if not case[key].strip():
                raise _problem(file, label, key, "is empty")
        if len(case_id) > 128:
            raise _problem(file, label, "id", "longer than 128 characters")
        if len(case["C1_source"]) > 128 or len(case["C2_source"]) > 128:
            raise _problem(file, label, "C1_source/C2_source", "longer than 128 characters")
        for key in CASE_LIST_KEYS:
            if key not in case:
                raise _problem(file, label, key, "missing")
            value = case[key]
            if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
                raise _problem(file, label, key, "must be a list of texts")
        if case_id in seen:
            raise _problem(file, label, "id", "appears in two cases")
        seen.add(case_id)
    return cases


def _out_of_range(file: str, case_id: str, field: str, index: int, size: int, of: str,
                  strict: bool, warnings: list[str]) -> None:
    message = str(_problem(file, case_id, field, f"index {index} is out of range: {of} has "
                                                 f"{size} item{'s' if size != 1 else ''}"))
    if strict:
        raise InvalidInput(message)
    warnings.append(message + " (kept; the finding's text is unknown)")


def _index(file: str, case_id: str, field: str, key: str, size: int, of: str,
           strict: bool, warnings: list[str]) -> None:
    if not _INDEX.fullmatch(key):
        raise _problem(file, case_id, field, f"key {key!r} is not an index into {of}")
    if int(key) >= size:
        _out_of_range(file, case_id, field, int(key), size, of, strict, warnings)


def _significance(file: str, case_id: str, field: str, entry: Mapping[str, Any],
                  required: bool) -> None:
    if "clinical_significance" not in entry:
        if required:
            raise _problem(file, case_id, f"{field}.clinical_significance", "missing")
        return
    value = entry["clinical_significance"]
    if value not in SIGNIFICANT:
        raise _problem(file, case_id, f"{field}.clinical_significance",
                       f"unknown value {value!r} (known: {', '.join(SIGNIFICANT)})")


def _optional_text(file: str, case_id: str, field: str, entry: Mapping[str, Any],
                   key: str) -> None:
    if key in entry and not isinstance(entry[key], str):
        raise _problem(file, case_id, f"{field}.{key}", "must be text")


def _check_candidate(file: str, case_id: str, name: str, value: Any,  # noqa: ANN401
                     case: Mapping[str, Any], strict: bool, warnings: list[str]) -> None:
    if not isinstance(value, dict):
        raise _problem(file, case_id, name, "must be a JSON object")
    for key in CANDIDATE_KEYS:
        if key not in value:
            raise _problem(file, case_id, f"{name}.{key}", "missing")
    rating = value["rating"]
    if isinstance(rating, bool) or not isinstance(rating, int) or not 1 <= rating <= 5:
        raise _problem(file, case_id, f"{name}.rating",
                       f"must be a whole number from 1 to 5, got {rating!r}")
    _optional_text(file, case_id, name, value, "rating_explanation")
    findings = case[f"{name}_findings"]
    errors = value["finding_errors"]
    if not isinstance(errors, dict):
        raise _problem(file, case_id, f"{name}.finding_errors", "must be a JSON object")
    for key, entry in errors.items():
        field = f"{name}.finding_errors.{key}"
        _index(file, case_id, field, key, len(findings), f"{name}_findings", strict,
               warnings)
        if not isinstance(entry, dict):
            raise _problem(file, case_id, field, "must be a JSON object")
        if "error_type" not in entry:
            raise _problem(file, case_id, f"{field}.error_type", "missing")
        kind = entry["error_type"]
        if kind not in ERROR_TYPES:
            raise _problem(file, case_id, f"{field}.error_type",
                           f"unknown error type {kind!r} (known: {', '.join(ERROR_TYPES)})")
        _significance(file, case_id, field, entry, required=kind == "false")
        _optional_text(file, case_id, field, entry, "explanation")
        if kind == "attribute" or "attributes" in entry:
            attributes = entry.get("attributes")
            if not isinstance(attributes, dict) or not attributes:
                raise _problem(file, case_id, f"{field}.attributes",
                               "an attribute error needs a non-empty object of attributes")
            for attribute, level in attributes.items():
                if attribute not in ATTRIBUTE_CATEGORY:
                    raise _problem(file, case_id, f"{field}.attributes.{attribute}",
                                   f"unknown attribute (known: {', '.join(ATTRIBUTE_CATEGORY)})")
                if level not in ATTRIBUTE_SIGNIFICANT:
                    raise _problem(file, case_id, f"{field}.attributes.{attribute}",
                                   f"must be 'significant' or 'negligible', got {level!r}")
    missing = value["missing_findings"]
    if not isinstance(missing, dict):
        raise _problem(file, case_id, f"{name}.missing_findings", "must be a JSON object")
    for key, entry in missing.items():
        field = f"{name}.missing_findings.{key}"
        _index(file, case_id, field, key, len(case["ground_truth_findings"]),
               "ground_truth_findings", strict, warnings)
        if not isinstance(entry, dict):
            raise _problem(file, case_id, field, "must be a JSON object")
        _significance(file, case_id, field, entry, required=True)
        _optional_text(file, case_id, field, entry, "explanation")


def parse_annotations(data: bytes, file: str, cases: Mapping[str, Mapping[str, Any]],
                      *, strict: bool = False) -> Annotator:
    """Parse and check one annotator file against the cases.

    Args:
        data: The file's bytes.
        file: Its name as the user knows it (named in every error).
        cases: Case id -> case, from :func:`parse_preferences`.
        strict: Refuse an index past the end of its findings list instead of warning.

    Returns:
        The annotator with its warnings. The published files index findings past the end
        of the lists in one case (findings the annotators added, see
        ``new_finding_indices``); such an entry is kept, with a warning, unless ``strict``.

    Raises:
        InvalidInput: Any malformed part, named by file, case id and field: a missing key, a
            rating outside 1-5, an index outside its findings list, an unknown error type,
            significance or attribute, or an annotation of a case the preferences lack.
    """
    warnings: list[str] = []
    raw = _load_json(data, file)
    if not isinstance(raw, dict):
        raise _problem(file, None, None, "must hold a JSON object {user_id, annotations}")
    for key in ("user_id", "annotations"):
        if key not in raw:
            raise _problem(file, None, key, "missing")
    user_id = raw["user_id"]
    if isinstance(user_id, bool) or not isinstance(user_id, str | int):
        raise _problem(file, None, "user_id", "must be text or a whole number")
    if not USER_ID_PATTERN.fullmatch(str(user_id)):
        raise _problem(file, None, "user_id", f"{user_id!r} must be 1-48 letters, digits, "
                                              "'_', '.' or '-'")
    annotations = raw["annotations"]
    if not isinstance(annotations, dict):
        raise _problem(file, None, "annotations", "must be a JSON object keyed by case id")
    for case_id, annotation in annotations.items():
        if case_id not in cases:
            raise _problem(file, case_id, None, "annotation of a case that the preferences "
                                                "file does not have")
        case = cases[case_id]
        if not isinstance(annotation, dict):
            raise _problem(file, case_id, None, "the annotation must be a JSON object")
        for name in CANDIDATES:
            if name not in annotation:
                raise _problem(file, case_id, name, "missing")
            _check_candidate(file, case_id, name, annotation[name], case, strict, warnings)
        if "new_finding_indices" in annotation:
            indices = annotation["new_finding_indices"]
            if not isinstance(indices, dict):
                raise _problem(file, case_id, "new_finding_indices", "must be a JSON object")
            for key, values in indices.items():
                field = f"new_finding_indices.{key}"
                if key not in NEW_FINDING_KEYS:
                    raise _problem(file, case_id, field,
                                   f"unknown key (known: {', '.join(NEW_FINDING_KEYS)})")
                size = len(case[NEW_FINDING_KEYS[key]])
                if not isinstance(values, list) or not all(
                        isinstance(v, int) and not isinstance(v, bool) for v in values):
                    raise _problem(file, case_id, field, "must be a list of whole numbers")
                for v in values:
                    if v < 0:
                        raise _problem(file, case_id, field, f"index {v} is negative")
                    if v >= size:
                        _out_of_range(file, case_id, field, v, size, NEW_FINDING_KEYS[key],
                                      strict, warnings)
    return Annotator(file=file, raw=raw, warnings=tuple(warnings), style=file_style(data))


def _user_file_key(name: str) -> tuple[int, int | str, str]:
    match = _USER_FILE.fullmatch(name)
    tail = match.group(1) if match else name
    # user_2 before user_10, as a person would list them.
    return (0, int(tail), name) if tail.isascii() and tail.isdigit() else (1, tail, name)


def parse(preferences: tuple[str, bytes], annotations: Sequence[tuple[str, bytes]],
          *, strict: bool = False) -> RadPrefData:
    """Parse and check a whole RadPref set given as (file name, bytes).

    Annotator files are ordered ``user_1, user_2, ..., user_10`` by name.

    Raises:
        InvalidInput: Any malformed file (see :func:`parse_preferences` and
            :func:`parse_annotations`), no annotator file, two files with one name, or two
            files with the same ``user_id``.
    """
    pref_name, pref_data = preferences
    cases = parse_preferences(pref_data, pref_name)
    by_id = {case["id"]: case for case in cases}
    if not annotations:
        raise InvalidInput("no annotator file (user_N.json) given")
    names = [name for name, _ in annotations]
    for name in names:
        if names.count(name) > 1:
            raise _problem(name, None, None, "given twice")
    annotators: list[Annotator] = []
    owner: dict[str, str] = {}
    for name, data in sorted(annotations, key=lambda item: _user_file_key(item[0])):
        annotator = parse_annotations(data, name, by_id, strict=strict)
        if annotator.user_id in owner:
            raise _problem(name, None, "user_id",
                           f"{annotator.user_id!r} is also the user_id of "
                           f"{owner[annotator.user_id]}")
        owner[annotator.user_id] = name
        annotators.append(annotator)
    return RadPrefData(preferences_file=pref_name, cases=tuple(cases),
                       annotators=tuple(annotators), preferences_style=file_style(pref_data),
                       sha256={name: hashlib.sha256(data).hexdigest()
                               for name, data in [preferences, *annotations]})


def read(preferences_path: Path, annotations_dir: Path, *, strict: bool = False
         ) -> RadPrefData:
    """Read ``preference_data.json`` and every ``user_*.json`` of a folder.

    Raises:
        InvalidInput: A file or folder missing, or any malformed file.
    """
    preferences_path, annotations_dir = Path(preferences_path), Path(annotations_dir)
    if not preferences_path.is_file():
        raise InvalidInput(f"{preferences_path}: no such file")
    if not annotations_dir.is_dir():
        raise InvalidInput(f"{annotations_dir}: no such folder")
    files = [p for p in annotations_dir.iterdir() if p.is_file() and _USER_FILE.fullmatch(p.name)]
    if not files:
        raise InvalidInput(f"{annotations_dir}: no annotator file (user_N.json) in it")
    return parse((preferences_path.name, preferences_path.read_bytes()),
                 [(p.name, p.read_bytes()) for p in files], strict=strict)


# --------------------------------------------------------------------- mapping to ReXVal


@dataclass(frozen=True)
class MappedError:
    """One ReXVal error derived from a RadPref entry.

    Attributes:
        kind: ``span`` (a candidate finding) or ``omission`` (a reference finding).
        category: ReXVal category 1-6.
        significant: Clinically significant.
        section: ``finding_errors`` or ``missing_findings``.
        index: The entry's key (index into the findings list, as text).
        attribute: The attribute this error stands for (``None`` unless an attribute error).
        entry: The RadPref entry as parsed.
    """

    kind: str
    category: int
    significant: bool
    section: str
    index: str
    attribute: str | None
    entry: dict[str, Any]


def map_candidate(candidate: Mapping[str, Any]) -> list[MappedError]:
    """The ReXVal errors of one annotated candidate, in file order (see module docstring)."""
    out: list[MappedError] = []
    for key, entry in candidate["finding_errors"].items():
        if entry["error_type"] == "false":
            out.append(MappedError("span", CATEGORY_FALSE,
                                   SIGNIFICANT[entry["clinical_significance"]],
                                   "finding_errors", key, None, entry))
            continue
        for attribute, level in entry["attributes"].items():
            out.append(MappedError("span", ATTRIBUTE_CATEGORY[attribute],
                                   ATTRIBUTE_SIGNIFICANT[level], "finding_errors", key,
                                   attribute, entry))
    for key, entry in candidate["missing_findings"].items():
        out.append(MappedError("omission", CATEGORY_MISSING,
                               SIGNIFICANT[entry["clinical_significance"]],
                               "missing_findings", key, None, entry))
    return out


def counts(errors: Iterable[tuple[int, bool]]) -> dict[str, int]:
    """All twelve ``"<category>:<0|1>"`` cells from (category, significant) errors."""
    cells = {f"{c}:{s}": 0 for c in range(1, 7) for s in (0, 1)}
    for category, significant in errors:
        cells[f"{category}:{int(significant)}"] += 1
    return cells


def span_of(text: str, report: str) -> tuple[int, int] | None:
    """Where ``text`` occurs verbatim in ``report`` (first place), end exclusive."""
    start = report.find(text) if text else -1
    return None if start < 0 else (start, start + len(text))


# ------------------------------------------------------------------------------ writing


DEFAULT_STYLE = {"indent": 2, "ascii": False, "newline": True}


def file_style(data: bytes) -> dict[str, Any]:
    """How a JSON file was written (indent, ``\\u`` escapes, final newline), so an export can
    write it back byte for byte. The published files differ: ``preference_data.json`` ends
    with a newline, the annotator files escape non-ASCII text and do not."""
    lines = data.split(b"\n", 2)
    indent = 2
    if len(lines) > 1 and lines[1].startswith(b" "):
        indent = len(lines[1]) - len(lines[1].lstrip(b" "))
    return {"indent": indent, "ascii": data.isascii(), "newline": data.endswith(b"\n")}


def dumps(value: Any, style: Mapping[str, Any] | None = None) -> bytes:  # noqa: ANN401
    """JSON written in a file's style (:func:`file_style`; default: two-space indent, UTF-8
    text, final newline)."""
    style = {**DEFAULT_STYLE, **(style or {})}
    text = json.dumps(value, indent=style["indent"], ensure_ascii=bool(style["ascii"]))
    return (text + ("\n" if style["newline"] else "")).encode("utf-8")


def user_file_name(user_id: str) -> str:
    """The file an annotator is written to: ``user_<user_id>.json``."""
    return f"user_{user_id}.json"


def files_of(cases: Sequence[Mapping[str, Any]],
             annotators: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any] | None]],
             preferences_style: Mapping[str, Any] | None = None) -> dict[str, bytes]:
    """The files of a RadPref set: relative path -> bytes.

    Args:
        cases: The preference cases.
        annotators: (file name, ``{user_id, annotations}``, style or None) per annotator.
        preferences_style: How to write ``preference_data.json`` (None: the default).
    """
    out = {PREFERENCES_FILE: dumps(list(cases), preferences_style)}
    for name, raw, style in annotators:
        out[f"{ANNOTATIONS_DIR}/{name}"] = dumps(raw, style)
    return out


def write_dir(files: Mapping[str, bytes], out_dir: Path) -> list[Path]:
    """Write :func:`files_of`'s files under ``out_dir``; returns the paths written."""
    out_dir = Path(out_dir)
    written = []
    for rel, data in files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def zip_bytes(files: Mapping[str, bytes], folder: str = "RadPref") -> bytes:
    """:func:`files_of`'s files as a zip, under one folder."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for rel, data in files.items():
            archive.writestr(f"{folder}/{rel}", data)
    return buffer.getvalue()
