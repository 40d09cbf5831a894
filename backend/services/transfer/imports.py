"""Import cases, reports, images and pairs into a new study (admin only).

An import never holds the database for long: a rater's save must not wait behind it.

1. Everything that needs no database is checked first (names, case lists, image paths), so
   most bad inputs are refused before anything is written.
2. The study is created with status ``importing`` (``db.models.STUDY_STAGING``): no listing or
   query for raters or admins shows it (``repo.get_study``, ``study_status.HIDDEN_STATUSES``,
   ``studies.list_studies``, ``backend.analysis.data``).
3. Cases are written in batches of about ``BATCH_PAIRS`` pairs, one short transaction each
   (bulk INSERTs; image files are prepared before the batch's transaction opens). Each batch
   refreshes a heartbeat kept in the staging study's provenance.
4. The ReXVal ratings, assignments and rater accounts are written in batches too, still
   invisible; then one short final transaction sets the requested status and the final
   provenance, so the whole study appears at once.

If anything fails (a bad image found late, an exception, Ctrl-C), the staging study and all its
rows are deleted in short batches and the image files this import created, and nothing else
references, are removed: nothing a user can see has changed. A process killed outright leaves
its staging study behind; :func:`cleanup_stale_imports` deletes it. It runs at the start of
every import and deletes a staging study whose importing process is gone (same host, dead pid)
or whose heartbeat is older than ``STALE_IMPORT_AFTER`` (another host, a hung process).

Image files are content-addressed (``<data dir>/images/<sha256>.<ext>``, written via a
temporary name and an atomic rename). DICOM files are de-identified on the way in
(``backend.imaging.deid``, one salted UID mapping per import); PNG and JPEG pixels are
re-encoded without metadata. Every image is decoded once before it is accepted, so a corrupt
file is rejected at import time.

Volumes (issue 25). Each image entry of a case is classified with
:func:`backend.imaging.volume.classify_entry`: a PNG/JPEG/single-frame DICOM file is a 2-D
film as above; a DICOM series folder (named in the ``image`` column, or found in the case
folder by ``backend.datasets.pairs.images_in_folder``), a multi-frame DICOM file or a NIfTI
file is a volume. Before anything is written every volume's headers are read
(:func:`backend.imaging.volume.open_volume`: geometry, the volume limit), so an ambiguous
folder, a refused geometry or a volume over the limit fails the whole import with one message
naming the case and the path. A volume is then de-identified into a staging folder
(``backend.imaging.volume_deid``: every slice through the films' allow-list with the import's
UID mapping, NIfTI header text and extensions dropped), read back from that cleaned copy
slice by slice into ``<data dir>/volumes/<random id>/`` (``backend.imaging.volume_store``:
the values and a header without identifiers), and the cleaned copy is deleted. Its image row
has ``kind`` ``volume``, ``format`` ``volume``, ``width``/``height`` of an axial slice and
``meta["volume"]`` with the shape ``(slices, rows, cols)`` and spacing ``(z, y, x)`` mm. A
NIfTI file has no modality: it is taken as CT (values in HU) unless the entry's view names
another modality (``MR``, ``PT``, ``NM``).

Cases belong to their study: an import always creates its own cases, so importing study B
with a case id that study A also uses never changes A's images, reports or export.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from sqlalchemy import delete, exists, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from radconcord.backend import clock, config
from radconcord.backend.datasets import rexval
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.imaging.deid import (
    BURNED_IN_WARNING,
    DEID_PROFILE,
    DeidentificationError,
    UidMapper,
    clean_raster,
    deidentify_file,
)
from radconcord.backend.imaging.load import ImageLoadError, file_sha256, load_image, sniff_format
from radconcord.backend.imaging.volume import (
    VolumeError,
    classify_entry,
    is_nifti_name,
    open_volume,
)
from radconcord.backend.imaging.volume_deid import (
    deidentify_multiframe,
    deidentify_nifti,
    deidentify_series,
)
from radconcord.backend.imaging.volume_store import VolumeStore
from radconcord.backend.scoring.hashing import input_hash
from radconcord.backend.types import Actor, CandidateInput, CaseInput
from radconcord.backend.util import staging_dir
from radconcord.db.models import (
    STUDY_STAGING,
    Assignment,
    Case,
    Image,
    Pair,
    Rating,
    RatingEvent,
    Report,
    Study,
    User,
)
from radconcord.db.session import Database

logger = logging.getLogger(__name__)

# argon2id with the library's defaults, as for accounts created by hand.
_hasher = PasswordHasher()

IMAGES_SUBDIR = "images"
VOLUMES_SUBDIR = "volumes"
# Image kinds (``Image.kind``) and the entry kinds of classify_entry that are volumes.
KIND_FILM = "film"
KIND_VOLUME = "volume"
VOLUME_ENTRIES = ("series", "multiframe", "nifti")
# A NIfTI file's modality when the entry's view names none (CT-RATE ships CT in HU).
NIFTI_MODALITIES = ("CT", "MR", "PT", "NM")
EXTENSIONS = {"dicom": "dcm", "png": "png", "jpeg": "jpg"}
REXVAL_RATER_PREFIX = "rexval_rater_"
# Pairs per import transaction: a batch commits in tens of milliseconds, so a rater's save
# waits at most that long for the import (SQLite admits one writer at a time).
BATCH_PAIRS = 250
# Images per batch: their de-identified bytes are held in memory until written.
BATCH_IMAGES = 32
# Rows per transaction when ReXVal ratings are written or a staging study is deleted.
BATCH_ROWS = 2000
# A staging study whose heartbeat is older than this is taken as abandoned and deleted.
STALE_IMPORT_AFTER = dt.timedelta(hours=2)
# Provenance key holding the staging state (heartbeat, owner, accounts it created); removed
# when the study becomes visible.
IMPORT_STATE_KEY = "import_state"
# Statuses an import may give the finished study.
FINAL_STATUSES = ("open", "draft")
_VIEW_ALIASES = {
    "PA": "PA",
    "AP": "AP",
    "LL": "LATERAL",
    "RL": "LATERAL",
    "LAT": "LATERAL",
    "LATERAL": "LATERAL",
    "FRONTAL": "FRONTAL",
}


@dataclass(frozen=True)
class ImportSummary:
    """What an import created."""

    study_id: int
    study_name: str
    n_cases: int
    n_cases_reused: int
    n_reports: int
    n_images: int
    n_pairs: int
    n_raters: int = 0
    n_ratings: int = 0
    warnings: tuple[str, ...] = ()


@dataclass
class _PreparedImage:
    sha256: str
    source_sha256: str
    format: str
    rel_path: str
    view: str | None
    width: int
    height: int
    meta: dict[str, Any]
    kind: str = KIND_FILM


def remove_stored(path: Path) -> bool:
    """Remove a stored image: a film's file or a volume's folder. False when it was gone."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return False
    return True


@dataclass
class _FileWriter:
    """Writes content-addressed image files and remembers which ones it created."""

    root: Path
    created: list[Path] = field(default_factory=list)

    def write(self, data: bytes, ext: str) -> tuple[str, Path]:
        sha = hashlib.sha256(data).hexdigest()
        folder = self.root / IMAGES_SUBDIR
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{sha}.{ext}"
        if not final.exists():
            tmp = folder / f".{sha}.{secrets.token_hex(4)}.tmp"
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            self.created.append(final)
        return sha, final

    def rollback(self, db: Database | None = None) -> None:
        """Remove the files this import created that no image row (of another study) uses."""
        paths = list(self.created)
        self.created.clear()
        if db is not None:
            paths = [self.root / rel for rel in _unreferenced(
                db, [p.relative_to(self.root).as_posix() for p in paths])]
        for path in paths:
            remove_stored(path)


def _unreferenced(db: Database, rel_paths: Sequence[str]) -> list[str]:
    """The paths among ``rel_paths`` that no ``Image`` row refers to."""
    out: list[str] = []
    with db.read() as s:
        for start in range(0, len(rel_paths), 500):
            chunk = list(rel_paths[start:start + 500])
            used = set(s.scalars(select(Image.path).where(Image.path.in_(chunk))))
            out.extend(p for p in chunk if p not in used)
    return out


def view_from_name(path: Path) -> str | None:
    """A view hint from a file name (``..._pa.png`` -> PA, ``lat``/``lateral`` -> LATERAL)."""
    tokens = re.split(r"[^a-z]+", path.stem.lower())
    for token in reversed(tokens):
        view = _VIEW_ALIASES.get(token.upper())
        if view:
            return view
    return None


def _normalise_view(value: str | None) -> str | None:
    if not value:
        return None
    text = value.strip().upper()
    return _VIEW_ALIASES.get(text, text[:32] or None)


@dataclass
class _CleanImage:
    """An image de-identified in memory, not yet written."""

    case_id: str
    src: Path
    view: str | None
    data: bytes
    format: str
    source_sha256: str
    burned_in: bool = False

    @property
    def rel_path(self) -> str:
        sha = hashlib.sha256(self.data).hexdigest()
        return f"{IMAGES_SUBDIR}/{sha}.{EXTENSIONS[self.format]}"


def _clean_image(
    case_id: str, src: Path, view: str | None, mapper: UidMapper, warnings: list[str]
) -> _CleanImage:
    fmt = sniff_format(src)
    burned_in = False
    try:
        source_sha = file_sha256(src)
        if fmt == "dicom":
            data, report, _ = deidentify_file(src, mapper)
            warnings.extend(f"case {case_id}: {src.name}: {w}" for w in report.warnings)
            burned_in = any(BURNED_IN_WARNING in w for w in report.warnings)
        elif fmt in ("png", "jpeg"):
            # Pixels re-encoded alone; a JPEG comes back as PNG, so the stored format (and
            # the file's extension) is the one returned.
            data, fmt = clean_raster(src.read_bytes(), fmt)
        else:
            raise InvalidInput(f"case {case_id}: {src}: not a DICOM, PNG or JPEG file")
    except DeidentificationError as exc:
        raise InvalidInput(f"case {case_id}: {src}: {exc}") from None
    except OSError as exc:
        raise InvalidInput(f"case {case_id}: {src}: cannot read ({exc.strerror})") from None
    return _CleanImage(case_id, src, view, data, fmt, source_sha, burned_in)


def _store_image(clean: _CleanImage, writer: _FileWriter) -> _PreparedImage:
    """Write a cleaned image (content-addressed) and decode it once to reject bad files."""
    src, case_id = clean.src, clean.case_id
    sha, stored = writer.write(clean.data, EXTENSIONS[clean.format])
    try:
        loaded = load_image(stored)
    except ImageLoadError as exc:
        # Name the user's file, not the content-addressed copy.
        message = str(exc).replace(str(stored), str(src))
        raise InvalidInput(f"case {case_id}: {message}") from None
    chosen = _normalise_view(clean.view) or _normalise_view(loaded.view) or view_from_name(src)
    meta = dict(loaded.meta)
    # De-identification uses a fresh salt per import, so the stored bytes differ between
    # imports of one file; the source digest still identifies the original image.
    meta["source_sha256"] = clean.source_sha256
    return _PreparedImage(
        sha256=sha,
        source_sha256=clean.source_sha256,
        format=clean.format,
        rel_path=f"{IMAGES_SUBDIR}/{stored.name}",
        view=chosen,
        width=loaded.width,
        height=loaded.height,
        meta=meta,
    )


def _check_cases(cases: list[CaseInput]) -> None:
    if not cases:
        raise InvalidInput("no cases to import")
    seen: set[str] = set()
    for case in cases:
        if not case.case_id or not str(case.case_id).strip():
            raise InvalidInput("a case has an empty case id")
        if case.case_id in seen:
            raise InvalidInput(f"case {case.case_id!r} appears twice")
        seen.add(case.case_id)
        if not case.reference or not case.reference.strip():
            raise InvalidInput(f"case {case.case_id!r}: empty reference report")
        if not case.candidates:
            raise InvalidInput(f"case {case.case_id!r}: no candidate report")
        keys = set()
        for cand in case.candidates:
            if not cand.text or not cand.text.strip():
                raise InvalidInput(
                    f"case {case.case_id!r}: empty candidate from source {cand.source!r}"
                )
            key = (cand.text, cand.source)
            if key in keys:
                raise InvalidInput(
                    f"case {case.case_id!r}: the same candidate from source {cand.source!r} "
                    "is given twice"
                )
            keys.add(key)


def entry_kind(case_id: str, src: Path, view: str | None = None) -> str:
    """What a case's image entry is: ``film``, or ``series``/``multiframe``/``nifti``.

    A folder, a NIfTI file or a DICOM file is classified with
    :func:`backend.imaging.volume.classify_entry` (headers only); a volume's headers are then
    checked with :func:`backend.imaging.volume.open_volume` (geometry, the volume limit), so
    nothing is written for an import that would fail on a volume. A DICOM file whose header
    cannot be read stays a film here: the film import refuses it with its own message.

    Raises:
        InvalidInput: An ambiguous folder, a refused geometry or a volume over the limit;
            the message names the case and the path.
    """
    if src.is_file() and not is_nifti_name(src) and sniff_format(src) != "dicom":
        return KIND_FILM
    try:
        kind = classify_entry(src)
    except VolumeError as exc:
        if src.is_file() and not is_nifti_name(src):
            return KIND_FILM
        raise InvalidInput(f"case {case_id}: {exc}") from None
    if kind == KIND_FILM:
        if src.is_dir():
            raise InvalidInput(f"case {case_id}: {src}: a folder of 2-D films is not one "
                               "image; list its files, or give the case folder")
        return KIND_FILM
    try:
        open_volume(src, modality=_nifti_modality(view))
    except VolumeError as exc:
        raise InvalidInput(f"case {case_id}: {exc}") from None
    return kind


def _nifti_modality(view: str | None) -> str:
    text = (view or "").strip().upper()
    return text if text in NIFTI_MODALITIES else "CT"


def _resolve_images(
    cases: list[CaseInput], image_base: Path | None
) -> dict[str, list[tuple[Path, str | None, str]]]:
    """Every case's image entries, checked to exist (and to stay in ``image_base``), each
    with its kind (:func:`entry_kind`: volumes' headers are checked here).

    Runs before anything is written, so a missing or escaping path, an ambiguous folder or a
    refused volume is refused up front.
    """
    base = image_base.resolve() if image_base is not None else None
    out: dict[str, list[tuple[Path, str | None, str]]] = {}
    for case in cases:
        files: list[tuple[Path, str | None, str]] = []
        for image in case.images:
            src = Path(image.path)
            if base is not None:
                src = (base / src).resolve()
                if not src.is_relative_to(base):
                    raise InvalidInput(
                        f"case {case.case_id}: image {image.path} lies outside {base}"
                    )
            if not src.is_file() and not src.is_dir():
                raise InvalidInput(f"case {case.case_id}: no such image file {src}")
            files.append((src, image.view, entry_kind(case.case_id, src, image.view)))
        if files:
            out[case.case_id] = files
    return out


@dataclass
class _VolumeEntry:
    """A volume of a case, to be de-identified and stored at ``rel_path``."""

    case_id: str
    src: Path
    view: str | None
    kind: str  # series | multiframe | nifti
    rel_path: str


def _entry_sha256(src: Path) -> str:
    """The source's digest: a file's, or of a folder's files (relative names and digests)."""
    if src.is_file():
        return file_sha256(src)
    digest = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        digest.update(path.relative_to(src).as_posix().encode("utf-8") + b"\0")
        digest.update(bytes.fromhex(file_sha256(path)))
    return digest.hexdigest()


def _store_sha256(folder: Path) -> str:
    """Digest of a volume store (its header, then its values), streamed."""
    digest = hashlib.sha256()
    for name in ("volume.json", "volume.npy"):
        with open(folder / name, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def _store_volume(entry: _VolumeEntry, writer: _FileWriter, mapper: UidMapper,
                  warnings: list[str]) -> _PreparedImage:
    """De-identify a volume into a staging folder and store it from that cleaned copy."""
    case_id, src = entry.case_id, entry.src
    dest = writer.root / entry.rel_path
    cleaned: Path | None = None
    try:
        source_sha = _entry_sha256(src)
        with staging_dir(writer.root / VOLUMES_SUBDIR, ".deid.") as tmp:
            if entry.kind == "series":
                cleaned = tmp / "series"
                result = deidentify_series(src, cleaned, mapper=mapper)
                notes = list(result.warnings)
            elif entry.kind == "multiframe":
                cleaned = tmp / "volume.dcm"
                notes = list(deidentify_multiframe(src, cleaned, mapper=mapper).warnings)
            else:
                cleaned = tmp / ("volume.nii.gz" if src.name.lower().endswith(".gz")
                                 else "volume.nii")
                deidentify_nifti(src, cleaned)
                notes = []
            source = open_volume(cleaned, modality=_nifti_modality(entry.view))
            notes.extend(source.header.warnings)
            # Named before it exists: a failure while writing removes it with the rest.
            writer.created.append(dest)
            store = VolumeStore.write(source, dest)
    except (VolumeError, DeidentificationError) as exc:
        message = str(exc)
        if cleaned is not None:
            message = message.replace(str(cleaned), str(src))
        raise InvalidInput(f"case {case_id}: {message}") from None
    except OSError as exc:
        raise InvalidInput(f"case {case_id}: {src}: cannot read ({exc.strerror})") from None
    if cleaned is not None:
        warnings.extend(f"case {case_id}: volume: {w.replace(str(cleaned), 'volume')}"
                        for w in notes)
    slices, rows, cols = store.shape
    meta = {
        "modality": store.meta.get("modality"),
        "hounsfield": bool(store.meta.get("hounsfield")),
        "volume": {
            "source": entry.kind,
            "shape": [slices, rows, cols],
            "spacing": [float(v) for v in store.spacing],
            "dtype": store.meta.get("dtype"),
        },
        "source_sha256": source_sha,
    }
    return _PreparedImage(
        sha256=_store_sha256(dest),
        source_sha256=source_sha,
        format=KIND_VOLUME,
        rel_path=entry.rel_path,
        view=_normalise_view(entry.view),
        width=cols,
        height=rows,
        meta=meta,
        kind=KIND_VOLUME,
    )


def _batches(
    cases: list[CaseInput], max_pairs: int, max_images: int = BATCH_IMAGES
) -> Iterator[list[CaseInput]]:
    """Consecutive runs of whole cases with about ``max_pairs`` pairs or ``max_images``
    images each (a batch's cleaned images are held in memory until written)."""
    batch: list[CaseInput] = []
    n_pairs = n_images = 0
    for case in cases:
        batch.append(case)
        n_pairs += len(case.candidates)
        n_images += len(case.images)
        if n_pairs >= max_pairs or n_images >= max_images:
            yield batch
            batch, n_pairs, n_images = [], 0, 0
    if batch:
        yield batch


@dataclass(frozen=True)
class _PairRef:
    """A pair written by the import, as later steps (ReXVal ratings) need it."""

    pair_id: int
    external_id: str
    source: str
    position: int


@dataclass
class _Staging:
    """The state of one import while its study is invisible."""

    study_id: int
    state: dict[str, Any]
    pairs: list[_PairRef] = field(default_factory=list)
    n_cases: int = 0
    n_reports: int = 0
    n_images: int = 0
    # Column values the final transaction sets on the study besides its status.
    final: dict[str, Any] = field(default_factory=dict)

    def beat(self, s: Session) -> None:
        """Refresh the heartbeat in the caller's transaction (proof the import is alive)."""
        self.state["heartbeat"] = clock.utcnow().isoformat()
        s.execute(
            update(Study).where(Study.id == self.study_id)
            .values(provenance={IMPORT_STATE_KEY: dict(self.state)})
        )


def _create_staging(db: Database, study_name: str, **values: Any) -> _Staging:
    state = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": clock.utcnow().isoformat(),
        "heartbeat": clock.utcnow().isoformat(),
        "created_users": [],
    }
    try:
        with db.begin() as s:
            status = s.scalar(select(Study.status).where(Study.name == study_name))
            if status == STUDY_STAGING:
                raise InvalidInput(f"study {study_name!r} is being imported right now; "
                                   "wait for that import or choose another name")
            if status is not None:
                raise InvalidInput(f"study {study_name!r} already exists; choose another name")
            study = Study(name=study_name, status=STUDY_STAGING,
                          provenance={IMPORT_STATE_KEY: state}, **values)
            s.add(study)
            s.flush()
            return _Staging(study.id, state)
    except IntegrityError:
        # Another import took the name between the check and the insert.
        raise InvalidInput(f"study {study_name!r} already exists; choose another name") from None


def _write_batch(
    s: Session, staging: _Staging, batch: list[CaseInput],
    images: dict[str, list[_PreparedImage]],
) -> None:
    """Insert one batch of cases with their images, reports and pairs (bulk statements)."""
    now = clock.utcnow()
    case_ids = s.scalars(
        insert(Case).returning(Case.id, sort_by_parameter_order=True),
        [{"study_id": staging.study_id, "external_id": c.case_id, "created_at": now}
         for c in batch],
    ).all()
    image_rows: list[dict[str, Any]] = []
    report_rows: list[dict[str, Any]] = []
    shas_of: list[list[str]] = []
    for case, case_id in zip(batch, case_ids, strict=True):
        shas: list[str] = []
        for p in images.get(case.case_id, []):
            if p.sha256 in shas:
                continue  # the same file listed twice for one case is stored once
            shas.append(p.sha256)
            image_rows.append({
                "case_id": case_id, "path": p.rel_path, "format": p.format, "view": p.view,
                "sha256": p.sha256, "width": p.width, "height": p.height, "meta": p.meta,
                "kind": p.kind,
            })
        shas_of.append(shas)
        report_rows.append({"case_id": case_id, "role": "reference", "source": None,
                            "text": case.reference, "created_at": now})
        report_rows.extend(
            {"case_id": case_id, "role": "candidate", "source": cand.source, "text": cand.text,
             "created_at": now}
            for cand in case.candidates
        )
    if image_rows:
        s.execute(insert(Image), image_rows)
    report_ids = iter(s.scalars(
        insert(Report).returning(Report.id, sort_by_parameter_order=True), report_rows
    ).all())
    pair_rows: list[dict[str, Any]] = []
    keys: list[tuple[str, str, int]] = []
    position = len(staging.pairs)
    for case, case_id, shas in zip(batch, case_ids, shas_of, strict=True):
        reference_id = next(report_ids)
        for cand in case.candidates:
            pair_rows.append({
                "study_id": staging.study_id, "case_id": case_id, "reference_id": reference_id,
                "candidate_id": next(report_ids), "source": cand.source,
                "opaque_id": secrets.token_hex(8), "position": position,
                # The pair shows every image of its case, so all of them key its scores.
                "input_hash": input_hash(case.reference, cand.text, shas),
            })
            keys.append((case.case_id, cand.source, position))
            position += 1
    pair_ids = s.scalars(
        insert(Pair).returning(Pair.id, sort_by_parameter_order=True), pair_rows
    ).all()
    staging.pairs.extend(
        _PairRef(pid, ext, src, pos) for pid, (ext, src, pos) in zip(pair_ids, keys, strict=True)
    )
    staging.n_cases += len(batch)
    staging.n_reports += len(report_rows)
    staging.n_images += len(image_rows)


def _yield_lock(db: Database, held: float) -> None:
    """After a batch, leave SQLite's write lock free for a moment so raters' saves get in.

    SQLite does not queue writers: without a pause the import would take the lock again
    before a waiting save polls. A quarter of the time the batch held it (at most 20 ms)
    costs the import about a fifth of its speed. PostgreSQL needs no pause.
    """
    if db.engine.dialect.name == "sqlite":
        time.sleep(min(max(held / 4, 0.003), 0.02))


def _delete_study_rows(db: Database, study_id: int, user_ids: Sequence[int] = ()) -> list[str]:
    """Delete a staging study in short transactions; return the image paths it referenced.

    Pairs go first (their ratings, events and assignments cascade), then cases (reports and
    images cascade), then the study and the accounts its import created that nothing else
    uses. Each step is its own transaction of at most ``BATCH_ROWS`` cases.
    """
    with db.read() as s:
        case_ids = list(s.scalars(select(Case.id).where(Case.study_id == study_id)))
        paths = list(s.scalars(
            select(Image.path).join(Case, Case.id == Image.case_id)
            .where(Case.study_id == study_id).distinct()
        ))
    step = max(1, BATCH_ROWS // 4)
    for start in range(0, len(case_ids), step):
        chunk = case_ids[start:start + step]
        with db.begin() as s:
            s.execute(delete(Pair).where(Pair.case_id.in_(chunk)))
            s.execute(delete(Case).where(Case.id.in_(chunk)))
    with db.begin() as s:
        s.execute(delete(Pair).where(Pair.study_id == study_id))
        s.execute(delete(Assignment).where(Assignment.study_id == study_id))
        s.execute(delete(Study).where(Study.id == study_id, Study.status == STUDY_STAGING))
        for user_id in user_ids:
            used = s.scalar(select(exists().where(Assignment.rater_id == user_id))) or s.scalar(
                select(exists().where(Rating.rater_id == user_id)))
            if not used:
                s.execute(delete(User).where(User.id == user_id))
    return paths


def delete_staged_study(db: Database, study_id: int) -> int:
    """Delete a study already set to the staging status, then its now unused image files.

    Used by an admin's delete (``studies.delete_study``): the study is first made a staging
    study (invisible everywhere, its import state naming this process), so a delete
    interrupted half-way is finished by :func:`cleanup_stale_imports` instead of leaving a
    half-deleted study in view.

    Returns:
        How many image files were removed.
    """
    paths = _delete_study_rows(db, study_id)
    root = config.data_dir()
    removed = 0
    for rel in _unreferenced(db, paths):
        removed += remove_stored(root / rel)
    return removed


def staging_state() -> dict[str, Any]:
    """A fresh import state (host, pid, heartbeat) for a study about to be staged."""
    now = clock.utcnow().isoformat()
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": now,
            "heartbeat": now, "created_users": []}


def _discard(db: Database, staging: _Staging, writer: _FileWriter) -> None:
    """Undo a failed import: its rows, then the files it created that nothing else uses."""
    try:
        _delete_study_rows(db, staging.study_id, staging.state.get("created_users", []))
    except Exception:
        # The staging study stays invisible; cleanup_stale_imports removes it later.
        logger.exception("could not delete the staging study %d; it is cleaned up later",
                         staging.study_id)
        writer.created.clear()
        return
    writer.rollback(db)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return True
    return True


def _abandoned(state: dict[str, Any], created_at: dt.datetime | None, now: dt.datetime,
               older_than: dt.timedelta) -> bool:
    """Whether a staging study's import is gone: its process died, or no heartbeat lately."""
    pid = state.get("pid")
    if state.get("host") == socket.gethostname() and isinstance(pid, int) and not _pid_alive(pid):
        return True
    try:
        beat = dt.datetime.fromisoformat(str(state["heartbeat"]))
    except (KeyError, ValueError):
        beat = created_at
    if beat is None:
        return True
    if beat.tzinfo is None:
        beat = beat.replace(tzinfo=dt.UTC)
    return now - beat > older_than


def cleanup_stale_imports(
    db: Database, *, older_than: dt.timedelta = STALE_IMPORT_AFTER,
    now: dt.datetime | None = None,
) -> list[str]:
    """Delete staging studies left by imports that died (killed process, power loss, hang).

    A staging study is abandoned when it was started on this host by a process that no
    longer exists, or when its heartbeat (refreshed by every batch) is older than
    ``older_than``. Its rows are deleted in short transactions, then the image files that no
    remaining image row refers to, and the staging folders of volume imports (under
    ``volumes/``) untouched for ``older_than``. Runs at the start of every import; safe to
    call any time.

    Args:
        db: The database.
        older_than: Heartbeat age after which an import on another host counts as dead.
        now: The current time (tests).

    Returns:
        The names of the staging studies deleted.
    """
    now = now or clock.utcnow()
    with db.read() as s:
        rows = s.execute(
            select(Study.id, Study.name, Study.provenance, Study.created_at)
            .where(Study.status == STUDY_STAGING)
        ).all()
    removed: list[str] = []
    root = config.data_dir()
    for study_id, name, provenance, created_at in rows:
        state = (provenance or {}).get(IMPORT_STATE_KEY) or {}
        if not _abandoned(state, created_at, now, older_than):
            continue
        paths = _delete_study_rows(db, study_id, state.get("created_users", []))
        paths = sorted(set(paths) | set(state.get("pending_files", [])))
        for rel in _unreferenced(db, paths):
            remove_stored(root / rel)
        logger.warning("deleted the unfinished import of study %r (import started %s)",
                       name, state.get("started", "?"))
        removed.append(name)
    _remove_stale_volume_staging(root / VOLUMES_SUBDIR, now - older_than)
    return removed


def _remove_stale_volume_staging(folder: Path, before: dt.datetime) -> None:
    """Remove staging folders of volume imports (de-identified copies, half-written stores:
    hidden names under ``volumes/``) not touched since ``before``: a killed import's."""
    if not folder.is_dir():
        return
    for child in folder.iterdir():
        if not child.name.startswith(".") or not child.is_dir() or child.is_symlink():
            continue
        try:
            touched = dt.datetime.fromtimestamp(child.stat().st_mtime, dt.UTC)
        except OSError:
            continue
        if touched < before:
            shutil.rmtree(child, ignore_errors=True)
            logger.warning("removed the staging folder %s of an unfinished volume import",
                           child.name)


_After = Callable[[Database, _Staging], Any]
ProgressFn = Callable[[int, int, str], None]


def _run_import(
    db: Database,
    *,
    study_name: str,
    cases: list[CaseInput],
    description: str,
    raters_per_pair: int,
    seed: int,
    provenance: dict[str, Any],
    image_base: Path | None,
    status: str = "open",
    after: _After | None = None,
    batch_pairs: int | None = None,
    progress: ProgressFn | None = None,
) -> tuple[ImportSummary, Any]:
    study_name = (study_name or "").strip()
    if not study_name:
        raise InvalidInput("study name is empty")
    if len(study_name) > 128:
        raise InvalidInput("study name is longer than 128 characters")
    if raters_per_pair < 1:
        raise InvalidInput("raters per pair must be at least 1")
    if status not in FINAL_STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(FINAL_STATUSES)}, got {status!r}")
    _check_cases(cases)
    sources = _resolve_images(cases, image_base)
    try:
        cleanup_stale_imports(db)
    except Exception:  # cleanup is housekeeping; it must never block an import
        logger.exception("cleanup of unfinished imports failed")
    staging = _create_staging(db, study_name, description=description, scheme="rexval",
                              raters_per_pair=raters_per_pair, seed=seed)
    writer = _FileWriter(config.data_dir())
    mapper = UidMapper()
    warnings: list[str] = []
    n_stored = 0
    # The import report: images whose header says burned-in text (by case and stored file,
    # never the source file name, which may itself identify the patient).
    burned_in: list[dict[str, str]] = []
    n_pairs_total = sum(len(case.candidates) for case in cases)
    n_pairs_done = 0
    try:
        if progress is not None:
            progress(0, n_pairs_total, f"importing {n_pairs_total} pairs")
        for batch in _batches(cases, batch_pairs or BATCH_PAIRS):
            # Films are de-identified in memory now; volumes later, slice by slice, into
            # their own folders (a random name, known now for the pending list).
            cleaned: list[_CleanImage | _VolumeEntry] = [
                _clean_image(case.case_id, src, view, mapper, warnings) if kind == KIND_FILM
                else _VolumeEntry(case.case_id, src, view, kind,
                                  f"{VOLUMES_SUBDIR}/{secrets.token_hex(16)}")
                for case in batch for src, view, kind in sources.get(case.case_id, [])
            ]
            n_stored += len(cleaned)
            if cleaned:
                # Named in the staging study before they exist: if this process is killed
                # while writing them, the cleanup knows which files were its own.
                with db.begin() as s:
                    staging.state["pending_files"] = sorted({c.rel_path for c in cleaned})
                    staging.beat(s)
            # Files are written (and decoded) before the batch's transaction opens, so the
            # write lock is held only for the INSERTs.
            prepared: dict[str, list[_PreparedImage]] = {}
            for clean in cleaned:
                if isinstance(clean, _VolumeEntry):
                    stored = _store_volume(clean, writer, mapper, warnings)
                    prepared.setdefault(clean.case_id, []).append(stored)
                    continue
                stored = _store_image(clean, writer)
                prepared.setdefault(clean.case_id, []).append(stored)
                if clean.burned_in:
                    burned_in.append({"case_id": clean.case_id, "image": stored.rel_path})
            t0 = time.monotonic()
            with db.begin() as s:
                _write_batch(s, staging, batch, prepared)
                staging.state["pending_files"] = []
                staging.beat(s)
            _yield_lock(db, time.monotonic() - t0)
            n_pairs_done += sum(len(case.candidates) for case in batch)
            if progress is not None:
                # May raise to stop the import: the staging study is discarded below.
                progress(n_pairs_done, n_pairs_total, f"imported {n_pairs_done} pairs")
        extra = after(db, staging) if after is not None else None
        final_provenance = dict(provenance)
        final_provenance.setdefault("imported_at", clock.utcnow().isoformat())
        if n_stored:
            final_provenance["deidentification"] = {
                **DEID_PROFILE,
                # Identifies this import's UID salt without revealing it.
                "uid_salt_id": hashlib.sha256(mapper.salt.encode()).hexdigest()[:12],
            }
            final_provenance["import_report"] = {
                "images": n_stored,
                "burned_in_annotation": burned_in,
            }
        with db.begin() as s:
            # The one moment the study becomes visible, with everything in it.
            res = s.execute(
                update(Study)
                .where(Study.id == staging.study_id, Study.status == STUDY_STAGING)
                .values(status=status, provenance=final_provenance, **staging.final)
            )
            if res.rowcount != 1:
                raise InvalidInput(f"the import of study {study_name!r} was cancelled "
                                   "(its unfinished study was removed); run it again")
    except IntegrityError as exc:
        _discard(db, staging, writer)
        raise InvalidInput(f"import conflicts with existing data ({exc.orig})") from None
    except BaseException:
        _discard(db, staging, writer)
        raise
    summary = ImportSummary(
        study_id=staging.study_id,
        study_name=study_name,
        n_cases=staging.n_cases,
        n_cases_reused=0,
        n_reports=staging.n_reports,
        n_images=staging.n_images,
        n_pairs=len(staging.pairs),
        warnings=tuple(warnings),
    )
    for warning in warnings:
        logger.warning("import %s: %s", study_name, warning)
    return summary, extra


def import_cases(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    cases: list[CaseInput],
    description: str = "",
    raters_per_pair: int = 1,
    seed: int = 0,
    provenance: dict[str, Any] | None = None,
    image_base: Path | None = None,
    status: str = "open",
    progress: ProgressFn | None = None,
) -> ImportSummary:
    """Create a study from cases: its own cases, images, reports and pairs.

    The study is written in short batches while invisible and appears at once, complete,
    when the import succeeds (see the module docstring); a failed import leaves nothing.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: Name of the new study (must not exist).
        cases: The cases; candidates become pairs in order (position = running index).
        description: Study description.
        raters_per_pair: How many raters each pair should get (used by assignment).
        seed: Seed recorded for the study's assignment order.
        provenance: Extra provenance (e.g. input file and its sha256), stored on the study.
        image_base: If given, relative image paths are resolved against it and must stay in it.
        status: What the study is once imported: ``open`` (raters can rate) or ``draft``.
        progress: ``progress(pairs done, pairs in all, message)`` after each batch; it may
            raise to stop the import (nothing is left then).

    Returns:
        Counts of what was created, and warnings (e.g. burned-in annotations).

    Raises:
        PermissionDenied: The actor is not an admin.
        InvalidInput: Bad cases or images; nothing is changed.
    """
    require_admin(actor)
    base = dict(provenance or {})
    base.setdefault("kind", "cases-import")
    base.setdefault("imported_by", actor.username)
    summary, _ = _run_import(
        db,
        study_name=study_name,
        cases=cases,
        description=description,
        raters_per_pair=raters_per_pair,
        seed=seed,
        provenance=base,
        image_base=image_base,
        status=status,
        progress=progress,
    )
    return summary


def unusable_hashes(indices: list[int]) -> dict[int, str]:
    """Argon2 hashes of random secrets nobody keeps, computed before the transaction.

    Hashing costs ~0.2 s each by design; on SQLite a transaction holds the write lock, so
    this must not run inside one.
    """
    return {index: _hasher.hash(secrets.token_urlsafe(32)) for index in indices}


def _rater_users(
    s: Session, indices: list[int], hashes: dict[int, str]
) -> tuple[dict[int, int], list[int]]:
    """User ids of ``rexval_rater_<index>`` (created where missing), and the ids created."""
    users: dict[int, int] = {}
    created: list[int] = []
    for index in indices:
        username = f"{REXVAL_RATER_PREFIX}{index}"
        user = s.scalar(select(User).where(User.username == username))
        if user is None:
            # A hash of a random secret nobody keeps: the account exists for attribution
            # and cannot be logged into until an admin sets a password.
            user = User(
                username=username,
                display_name=f"ReXVal rater {index}",
                role="rater",
                password_hash=hashes[index],
            )
            s.add(user)
            s.flush()
            created.append(user.id)
        elif user.role != "rater":
            raise InvalidInput(f"user {username!r} exists and is not a rater")
        users[index] = user.id
    return users, created


def _insert_batched(db: Database, staging: _Staging, model: type, rows: list[dict]) -> None:
    """Insert ``rows`` in order, ``BATCH_ROWS`` per short transaction."""
    for start in range(0, len(rows), BATCH_ROWS):
        with db.begin() as s:
            s.execute(insert(model), rows[start:start + BATCH_ROWS])
            staging.beat(s)


def import_rexval(
    db: Database,
    actor: Actor,
    *,
    gt_path: Path,
    ratings_path: Path,
    study_name: str,
    provenance: dict[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> ImportSummary:
    """Import ReXVal's two files: pairs, rater accounts, assignments and ratings.

    Pairs are created row by row of the ground-truth file, candidate types in its column
    order (position = running index). Raters become users ``rexval_rater_<index>`` (role
    rater, unusable random password), each assigned (and marked complete) for the pairs they
    rated; every rating gets a ``RatingEvent(action='import')``. Ratings are inserted in file
    order, which the ReXVal export reproduces.

    Args:
        db: The database.
        actor: Must be an admin.
        gt_path: ``50_samples_gt_and_candidates.csv``.
        ratings_path: ``6_valid_raters_per_rater_error_categories.csv``.
        study_name: Name of the new study.
        provenance: Extra provenance stored on the study (e.g. the job that imported it).
        progress: ``progress(pairs done, pairs in all, message)`` after each batch of
            pairs; it may raise to stop the import (nothing is left then).

    Returns:
        Counts, including raters and ratings.

    Raises:
        PermissionDenied: The actor is not an admin.
        InvalidInput: Bad files (file/row/field named); nothing is changed.
    """
    require_admin(actor)
    gt_path, ratings_path = Path(gt_path), Path(ratings_path)
    gt = rexval.read_gt(gt_path)
    ratings = rexval.read_ratings(ratings_path, gt)
    cases: list[CaseInput] = []
    for row in gt.rows:
        candidates = [
            CandidateInput(text=text, source=ctype)
            for ctype, text in zip(gt.candidate_types, row.candidates, strict=True)
            if text.strip()
        ]
        cases.append(CaseInput(case_id=row.study_id, reference=row.gt_report,
                               candidates=candidates))
    provenance = {
        **(provenance or {}),
        "kind": "rexval",
        "imported_by": actor.username,
        "candidate_types": list(gt.candidate_types),
        "gt_index_column": gt.index_column,
        "line_terminators": {"gt": gt.line_terminator, "ratings": ratings.line_terminator},
        "files": {
            gt_path.name: file_sha256(gt_path),
            ratings_path.name: file_sha256(ratings_path),
        },
    }
    rater_indices = sorted({r.rater_index for r in ratings.rows})
    hashes = unusable_hashes(rater_indices)

    def add_ratings(db: Database, staging: _Staging) -> tuple[int, int]:
        pair_of: dict[tuple[int, str], _PairRef] = {}
        by_case: dict[str, list[_PairRef]] = {}
        for ref in staging.pairs:
            by_case.setdefault(ref.external_id, []).append(ref)
        for number, row in enumerate(gt.rows):
            for ref in by_case.get(row.study_id, []):
                pair_of[(number, ref.source)] = ref
        with db.begin() as s:
            users, created = _rater_users(s, rater_indices, hashes)
            # Recorded with the accounts, so a cleanup after a kill can remove them too.
            staging.state["created_users"] = created
            staging.beat(s)
        now = clock.utcnow()
        rated: dict[int, set[int]] = {i: set() for i in rater_indices}
        rating_rows = []
        event_rows = []
        for r in ratings.rows:
            ref = pair_of[(r.study_number, r.candidate_type)]
            rater_id = users[r.rater_index]
            rated[r.rater_index].add(ref.position)
            rating_rows.append({
                "rater_id": rater_id, "pair_id": ref.pair_id, "category": r.error_category,
                "significant": r.clinically_significant, "count": r.num_errors,
                "created_at": now, "updated_at": now,
            })
            event_rows.append({
                "rater_id": rater_id, "pair_id": ref.pair_id, "action": "import",
                "category": r.error_category, "significant": r.clinically_significant,
                "old_count": None, "new_count": r.num_errors, "at": now,
            })
        by_position = {ref.position: ref for ref in staging.pairs}
        assignment_rows = []
        for index in rater_indices:
            for order, position in enumerate(sorted(rated[index])):
                assignment_rows.append({
                    "study_id": staging.study_id, "rater_id": users[index],
                    "pair_id": by_position[position].pair_id, "order_index": order,
                    "completed_at": now, "active_seconds": 0.0,
                })
        _insert_batched(db, staging, Assignment, assignment_rows)
        # In file order, batch after batch: ids follow the file, which export relies on.
        _insert_batched(db, staging, Rating, rating_rows)
        _insert_batched(db, staging, RatingEvent, event_rows)
        staging.final["raters_per_pair"] = max(1, len(rater_indices))
        return len(rater_indices), len(rating_rows)

    summary, (n_raters, n_ratings) = _run_import(
        db,
        study_name=study_name,
        cases=cases,
        description="Imported from ReXVal files",
        raters_per_pair=1,
        seed=0,
        provenance=provenance,
        image_base=None,
        after=add_ratings,
        progress=progress,
    )
    return dataclasses.replace(summary, n_raters=n_raters, n_ratings=n_ratings)


# ------------------------------------------------------------------------------ dry run


@dataclass(frozen=True)
class ImportPreview:
    """What an import of a cases file would create; nothing is written to compute it.

    Attributes:
        study_name: The new study's name.
        file: The cases file as the user knows it (the uploaded name, not a server path).
        layout: ``long`` or ``wide``.
        layout_reason: Why (``"chosen"`` when given explicitly).
        columns: The file's columns.
        n_cases: Cases.
        n_pairs: Pairs (one per candidate).
        sources: Candidate source -> pairs, in order of first appearance.
        n_images: Image files found.
        missing_images: ``"row N (line L): path"`` of each listed image that is not there.
        n_cases_without_images: Cases with no image.
        warnings: Things to know that do not stop the import.
        problems: What would make the import fail (empty when it can run).
        runs_on_worker: Whether the pages send an import of this size to the worker.
        n_volumes: Of the images, the 3-D volumes (a DICOM series, a multi-frame DICOM, a
            NIfTI file); the others are 2-D films.
    """

    study_name: str
    file: str
    layout: str
    layout_reason: str
    columns: tuple[str, ...]
    n_cases: int
    n_pairs: int
    sources: dict[str, int]
    n_images: int
    missing_images: tuple[str, ...]
    n_cases_without_images: int
    warnings: tuple[str, ...]
    problems: tuple[str, ...]
    runs_on_worker: bool
    n_volumes: int = 0

    @property
    def ok(self) -> bool:
        """Whether the import would run (no problem found)."""
        return not self.problems


def _name_problem(db: Database, study_name: str) -> str | None:
    from radconcord.backend.services.job_inputs import check_name_not_pending

    name = (study_name or "").strip()
    if not name:
        return "study name is empty"
    if len(name) > 128:
        return "study name is longer than 128 characters"
    with db.read() as s:
        status = s.scalar(select(Study.status).where(Study.name == name))
    if status == STUDY_STAGING:
        return f"study {name!r} is being imported right now; choose another name"
    if status is not None:
        return f"study {name!r} already exists; choose another name"
    try:
        check_name_not_pending(db, name)
    except InvalidInput as exc:
        return str(exc)
    return None


def preview_import(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    cases_file: Path,
    images_dir: Path | None = None,
    layout: str = "auto",
    file_name: str | None = None,
) -> ImportPreview:
    """Dry run of an import of a cases file: parse and check everything, write nothing.

    Reads the file (layout chosen or detected, unknown columns refused), checks the name,
    every case and every listed image (present, and a DICOM, PNG or JPEG file by its first
    bytes); images are not de-identified or decoded here (the import does that). Missing
    images are all listed rather than the first one refused.

    Args:
        db: The database (read only).
        actor: Must be an admin.
        study_name: The name the new study would get.
        cases_file: The cases file.
        images_dir: Folder image paths are relative to (default: the file's folder); a case
            naming no image takes the files found for its id there.
        layout: ``auto``, ``long`` or ``wide``.
        file_name: How to name the file in the preview (an upload's own name).

    Returns:
        The preview; :attr:`ImportPreview.problems` says what would stop the import.

    Raises:
        PermissionDenied: The actor is not an admin.
        InvalidInput: An unreadable or malformed file (file, row and field named).
    """
    from radconcord.backend.datasets.pairs import read_cases

    require_admin(actor)
    parsed = read_cases(cases_file, images_dir=images_dir, layout=layout, collect_missing=True)
    cases = parsed.cases
    problems: list[str] = []
    warnings: list[str] = []
    name_problem = _name_problem(db, study_name)
    if name_problem:
        problems.append(name_problem)
    try:
        _check_cases(cases)
    except InvalidInput as exc:
        problems.append(str(exc))
    missing = tuple(f"{where}: {path}" for where, path in parsed.missing_images)
    if missing:
        problems.append(f"{len(missing)} image file(s) listed in the file are missing")
    n_images = n_volumes = 0
    for case in cases:
        for image in case.images:
            n_images += 1
            src = Path(image.path)
            fmt = None if src.is_dir() or is_nifti_name(src) else sniff_format(src)
            if fmt is None or fmt == "dicom":
                # A DICOM file may be a multi-frame volume: classified from its header, as
                # the import will, so its geometry and size are checked now too.
                try:
                    if entry_kind(case.case_id, src, image.view) != KIND_FILM:
                        n_volumes += 1
                except InvalidInput as exc:
                    problems.append(str(exc))
            elif fmt not in EXTENSIONS:
                problems.append(f"case {case.case_id}: {Path(image.path).name}: not a DICOM, "
                                "PNG or JPEG file")
    sources: dict[str, int] = {}
    for case in cases:
        for cand in case.candidates:
            sources[cand.source] = sources.get(cand.source, 0) + 1
    without = sum(1 for case in cases if not case.images)
    if without and without < len(cases):
        warnings.append(f"{without} of {len(cases)} cases have no image")
    if parsed.ignored:
        warnings.append("columns written by an export are ignored: "
                        + ", ".join(parsed.ignored))
    n_pairs, _ = cases_size(cases)
    return ImportPreview(
        study_name=(study_name or "").strip(),
        file=file_name or Path(cases_file).name,
        layout=parsed.layout,
        layout_reason=parsed.layout_reason,
        columns=parsed.columns,
        n_cases=len(cases),
        n_pairs=n_pairs,
        sources=sources,
        n_images=n_images,
        n_volumes=n_volumes,
        missing_images=missing,
        n_cases_without_images=without,
        warnings=tuple(warnings),
        problems=tuple(problems),
        runs_on_worker=needs_worker(n_pairs, n_images),
    )


def preview_lines(preview: ImportPreview, *, max_missing: int = 20) -> list[str]:
    """The preview as plain lines (the CLI prints them; the Import page shows the same)."""
    layout = preview.layout + ("" if preview.layout_reason == "chosen"
                               else f" (detected: {preview.layout_reason})")
    lines = [
        f"dry run of {preview.file} -> study {preview.study_name!r}: nothing was written",
        f"layout: {layout}",
        f"cases: {preview.n_cases}",
        f"pairs: {preview.n_pairs}",
        "sources: " + ", ".join(f"{k} ({v})" for k, v in preview.sources.items()),
        f"images found: {preview.n_images}"
        + (f" ({preview.n_volumes} volume(s), {preview.n_images - preview.n_volumes} film(s))"
           if preview.n_volumes else "")
        + f"; missing: {len(preview.missing_images)}; "
        f"cases without an image: {preview.n_cases_without_images}",
    ]
    lines += [f"missing image: {m}" for m in preview.missing_images[:max_missing]]
    if len(preview.missing_images) > max_missing:
        lines.append(f"... and {len(preview.missing_images) - max_missing} more missing")
    lines += [f"warning: {w}" for w in preview.warnings]
    lines += [f"problem: {p}" for p in preview.problems]
    lines.append("the import would run on the worker (large)" if preview.runs_on_worker
                 and preview.ok else "")
    lines.append("ready to import" if preview.ok
                 else "the import would be refused: fix the problems above")
    return [line for line in lines if line]


# ----------------------------------------------------------------- imports on the worker

#: The job kind that runs an import on the worker (``backend.runner.kinds.imports``).
KIND = "import"
#: An import with more pairs than this goes to the worker (pages); smaller ones run inline.
WORKER_MIN_PAIRS = 2000
#: An import with more images than this goes to the worker: each image is de-identified and
#: decoded, which takes far longer than writing rows.
WORKER_MIN_IMAGES = 50
IMPORT_FORMATS = ("cases", "rexval")


def needs_worker(n_pairs: int, n_images: int = 0) -> bool:
    """Whether the pages send an import of this size to the worker (see the thresholds)."""
    return n_pairs > WORKER_MIN_PAIRS or n_images > WORKER_MIN_IMAGES


def cases_size(cases: Sequence[CaseInput]) -> tuple[int, int]:
    """``(pairs, images)`` an import of ``cases`` would create."""
    return (sum(len(c.candidates) for c in cases), sum(len(c.images) for c in cases))


def enqueue_import(
    db: Database,
    actor: Actor,
    *,
    fmt: str,
    study_name: str,
    upload_dir: Path,
    cases_file: Path | None = None,
    images_dir: Path | None = None,
    description: str = "",
    provenance: dict[str, Any] | None = None,
    gt_file: Path | None = None,
    ratings_file: Path | None = None,
    device: str | None = None,
    layout: str = "auto",
    file_names: dict[Path, str] | None = None,
) -> Any:  # noqa: ANN401 - backend.services.jobs.JobView (imported lazily)
    """Check an import of files already saved under the data folder and queue it.

    The files are parsed now, so a bad file is refused with its file, row and field before
    anything is queued; the worker parses them again and imports (staged: the study appears
    only when complete). The job's params name the files relative to the data folder.

    Args:
        db: The database.
        actor: Must be an admin.
        fmt: ``"cases"`` (a cases file, optional images) or ``"rexval"`` (ReXVal's files).
        study_name: Name of the new study (free, and not claimed by a queued job).
        upload_dir: The folder under the data folder that holds the files
            (``job_inputs.new_upload_dir``); the job removes it when it ends.
        cases_file: The cases file (``fmt="cases"``), inside ``upload_dir``.
        images_dir: Folder the cases file's image paths are relative to (default:
            ``upload_dir``); it must lie in the data folder.
        description: Study description (``fmt="cases"``).
        provenance: Extra provenance (e.g. the uploaded file's name and sha256).
        gt_file: ReXVal's pairs file (``fmt="rexval"``), inside ``upload_dir``.
        ratings_file: ReXVal's ratings file (``fmt="rexval"``), inside ``upload_dir``.
        device: Only a worker on this device may run it (``None``: any worker).
        layout: The cases file's layout: ``auto``, ``long`` or ``wide``.
        file_names: Saved path -> the name the file was uploaded under: the job's errors
            name the uploads so, never by their path on the server.

    Returns:
        The queued job (a ``backend.services.jobs.JobView``).

    Raises:
        PermissionDenied: The actor is not an admin.
        InvalidInput: Bad name, format or files (named); nothing is queued.
    """
    from radconcord.backend.datasets.pairs import parse_cases
    from radconcord.backend.services import jobs
    from radconcord.backend.services.job_inputs import check_name_not_pending, data_relative

    require_admin(actor)
    if fmt not in IMPORT_FORMATS:
        raise InvalidInput(f"import format must be one of {', '.join(IMPORT_FORMATS)}, "
                           f"got {fmt!r}")
    name = (study_name or "").strip()
    if not name:
        raise InvalidInput("study name is empty")
    if len(name) > 128:
        raise InvalidInput("study name is longer than 128 characters")
    with db.read() as s:
        if s.scalar(select(Study.id).where(Study.name == name)) is not None:
            raise InvalidInput(f"study {name!r} already exists; choose another name")
    check_name_not_pending(db, name)
    params: dict[str, Any] = {"format": fmt, "study_name": name,
                              "upload_dir": data_relative(upload_dir),
                              "provenance": dict(provenance or {}),
                              "file_names": {data_relative(Path(k)): str(v)
                                             for k, v in (file_names or {}).items()}}
    if fmt == "cases":
        if cases_file is None:
            raise InvalidInput("cases file: none given")
        images = images_dir if images_dir is not None else upload_dir
        try:
            images_rel = data_relative(images)
        except InvalidInput:
            raise InvalidInput(
                f"images folder {images}: an import of this size runs on the worker, which "
                f"reads files only inside the data folder {config.data_dir()}; put the "
                "images in a folder there and name that folder") from None
        parse_cases(cases_file, images_dir=images, layout=layout)
        params.update(cases_file=data_relative(cases_file), images_dir=images_rel,
                      description=description, layout=layout)
    else:
        if gt_file is None or ratings_file is None:
            raise InvalidInput("ReXVal import: give both the pairs file and the ratings file")
        gt = rexval.read_gt(Path(gt_file))
        rexval.read_ratings(Path(ratings_file), gt)
        params.update(gt_file=data_relative(gt_file), ratings_file=data_relative(ratings_file))
    return jobs.enqueue_job(db, actor, kind=KIND, params=params, device=device)
