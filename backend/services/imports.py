"""Import cases, reports, images and pairs into a new study (admin only).

Everything of one import happens in ONE database transaction. Image files are written first
(content-addressed: ``<data dir>/images/<sha256>.<ext>``, via a temporary name and an atomic
rename) and are referenced only once written; if anything fails, the transaction rolls back
and the files this import created are removed, so a bad file changes nothing.

DICOM files are de-identified on the way in (``backend.imaging.deid``, one salted UID mapping
per import); PNG text/EXIF chunks and JPEG APP/COM segments are stripped losslessly. Every
image is decoded once before it is accepted, so a corrupt file is rejected at import time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from backend import config
from backend.datasets import rexval
from backend.imaging.deid import (
    DeidentificationError,
    UidMapper,
    deidentify_file,
    strip_jpeg_metadata,
    strip_png_metadata,
)
from backend.imaging.load import ImageLoadError, file_sha256, load_image, sniff_format
from backend.services.errors import InvalidInput, require_admin
from backend.services.types import Actor, CandidateInput, CaseInput
from db.models import Assignment, Case, Image, Pair, Rating, RatingEvent, Report, Study, User
from db.session import Database

logger = logging.getLogger(__name__)

# argon2id with the library's defaults, as for accounts created by hand.
_hasher = PasswordHasher()

IMAGES_SUBDIR = "images"
EXTENSIONS = {"dicom": "dcm", "png": "png", "jpeg": "jpg"}
REXVAL_RATER_PREFIX = "rexval_rater_"
_VIEW_ALIASES = {
    "PA": "PA",
    "AP": "AP",
    "LL": "LATERAL",
    "RL": "LATERAL",
    "LAT": "LATERAL",
    "LATERAL": "LATERAL",
    "FRONTAL": "FRONTAL",
}


def input_hash(reference: str, candidate: str, image_sha256s: Sequence[str] = ()) -> str:
    """The pair cache key (handbook): ``backend.scoring.hashing.input_hash`` when present.

    Args:
        reference: Reference report text.
        candidate: Candidate report text.
        image_sha256s: Hex digests of the pair's images, in display order.

    Returns:
        Hex sha256 of ``"v1\\x00" + reference + "\\x00" + candidate + "\\x00" + shas``.
    """
    try:
        from backend.scoring.hashing import input_hash as shared
    except ImportError:
        shared = None
    if shared is not None:
        return shared(reference, candidate, image_sha256s)
    payload = "v1\x00" + reference + "\x00" + candidate + "\x00" + ",".join(image_sha256s)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


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

    def rollback(self) -> None:
        for path in self.created:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.created.clear()


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


def _prepare_image(
    case_id: str, src: Path, view: str | None, writer: _FileWriter, mapper: UidMapper,
    warnings: list[str],
) -> _PreparedImage:
    fmt = sniff_format(src)
    try:
        source_sha = file_sha256(src)
        if fmt == "dicom":
            data, report, _ = deidentify_file(src, mapper)
            warnings.extend(f"case {case_id}: {src.name}: {w}" for w in report.warnings)
        elif fmt == "png":
            data = strip_png_metadata(src.read_bytes())
        elif fmt == "jpeg":
            data = strip_jpeg_metadata(src.read_bytes())
        else:
            raise InvalidInput(f"case {case_id}: {src}: not a DICOM, PNG or JPEG file")
    except DeidentificationError as exc:
        raise InvalidInput(f"case {case_id}: {src}: {exc}") from None
    except OSError as exc:
        raise InvalidInput(f"case {case_id}: {src}: cannot read ({exc.strerror})") from None
    sha, stored = writer.write(data, EXTENSIONS[fmt])
    try:
        loaded = load_image(stored)
    except ImageLoadError as exc:
        # Name the user's file, not the content-addressed copy.
        message = str(exc).replace(str(stored), str(src))
        raise InvalidInput(f"case {case_id}: {message}") from None
    chosen = _normalise_view(view) or _normalise_view(loaded.view) or view_from_name(src)
    meta = dict(loaded.meta)
    # De-identification uses a fresh salt per import, so the stored bytes differ between
    # imports of one file; the source digest lets a re-import recognise the image.
    meta["source_sha256"] = source_sha
    return _PreparedImage(
        sha256=sha,
        source_sha256=source_sha,
        format=fmt,
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


def _get_report(s: Session, case: Case, role: str, source: str | None, text: str,
                counter: list[int]) -> Report:
    if case.id is not None:
        existing = s.scalars(
            select(Report).where(
                Report.case_id == case.id,
                Report.role == role,
                Report.source.is_(None) if source is None else Report.source == source,
                Report.text == text,
            ).order_by(Report.id)
        ).first()
        if existing is not None:
            return existing
    report = Report(case=case, role=role, source=source, text=text)
    s.add(report)
    counter[0] += 1
    return report


@dataclass
class _Created:
    study: Study
    pairs: list[Pair]
    n_cases: int
    n_reused: int
    n_reports: int
    n_images: int


def _create_study(
    s: Session,
    *,
    study_name: str,
    description: str,
    raters_per_pair: int,
    seed: int,
    provenance: dict[str, Any],
    cases: list[CaseInput],
    images: dict[str, list[_PreparedImage]],
) -> _Created:
    if s.scalar(select(Study.id).where(Study.name == study_name)) is not None:
        raise InvalidInput(f"study {study_name!r} already exists; choose another name")
    study = Study(
        name=study_name,
        description=description,
        scheme="rexval",
        raters_per_pair=raters_per_pair,
        seed=seed,
        status="open",
        provenance=provenance,
    )
    s.add(study)
    s.flush()
    pairs: list[Pair] = []
    n_reused = 0
    n_images = 0
    report_counter = [0]
    position = 0
    for item in cases:
        case = s.scalar(select(Case).where(Case.external_id == item.case_id,
                                           Case.study_id == study.id))
        if case is None:
            case = Case(external_id=item.case_id, study_id=study.id)
            s.add(case)
            s.flush()
            known: dict[str, Image] = {}
        else:
            n_reused += 1
            known = {img.sha256: img for img in case.images}
        for prepared in images.get(item.case_id, []):
            if prepared.sha256 in known:
                continue
            image = Image(
                case_id=case.id,
                path=prepared.rel_path,
                format=prepared.format,
                view=prepared.view,
                sha256=prepared.sha256,
                width=prepared.width,
                height=prepared.height,
                meta=prepared.meta,
            )
            s.add(image)
            known[prepared.sha256] = image
            n_images += 1
        # The pair shows every image of its case, so all of them key its scores.
        shas = list(known)
        reference = _get_report(s, case, "reference", None, item.reference, report_counter)
        for cand in item.candidates:
            candidate = _get_report(s, case, "candidate", cand.source, cand.text,
                                    report_counter)
            pair = Pair(
                study=study,
                case=case,
                reference=reference,
                candidate=candidate,
                source=cand.source,
                opaque_id=secrets.token_hex(8),
                position=position,
                input_hash=input_hash(item.reference, cand.text, shas),
            )
            s.add(pair)
            pairs.append(pair)
            position += 1
        s.flush()
    return _Created(study, pairs, len(cases), n_reused, report_counter[0], n_images)


def _existing_sources(db: Database, cases: list[CaseInput]) -> dict[str, set[str]]:
    """Case external id -> source digests of images it already has."""
    ids = [c.case_id for c in cases if c.images]
    out: dict[str, set[str]] = {}
    if not ids:
        return out
    with db.begin() as s:
        rows = s.execute(
            select(Case.external_id, Image.meta).join(Image, Image.case_id == Case.id)
            .where(Case.external_id.in_(ids))
        ).all()
    for external_id, meta in rows:
        digest = (meta or {}).get("source_sha256")
        if digest:
            out.setdefault(external_id, set()).add(digest)
    return out


def _prepare_all(
    cases: list[CaseInput], image_base: Path | None, writer: _FileWriter, mapper: UidMapper,
    warnings: list[str], existing: dict[str, set[str]],
) -> dict[str, list[_PreparedImage]]:
    prepared: dict[str, list[_PreparedImage]] = {}
    base = image_base.resolve() if image_base is not None else None
    for case in cases:
        items: list[_PreparedImage] = []
        seen: set[str] = set()
        for image in case.images:
            src = Path(image.path)
            if base is not None:
                src = (base / src).resolve()
                if not src.is_relative_to(base):
                    raise InvalidInput(
                        f"case {case.case_id}: image {image.path} lies outside {base}"
                    )
            if not src.is_file():
                raise InvalidInput(f"case {case.case_id}: no such image file {src}")
            if file_sha256(src) in existing.get(case.case_id, set()):
                continue  # already imported for this case (an earlier import)
            p = _prepare_image(case.case_id, src, image.view, writer, mapper, warnings)
            if p.sha256 not in seen:
                seen.add(p.sha256)
                items.append(p)
        prepared[case.case_id] = items
    return prepared


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
    after: Any = None,
) -> tuple[ImportSummary, Any]:
    study_name = (study_name or "").strip()
    if not study_name:
        raise InvalidInput("study name is empty")
    if len(study_name) > 128:
        raise InvalidInput("study name is longer than 128 characters")
    if raters_per_pair < 1:
        raise InvalidInput("raters per pair must be at least 1")
    _check_cases(cases)
    writer = _FileWriter(config.data_dir())
    mapper = UidMapper()
    warnings: list[str] = []
    try:
        existing = _existing_sources(db, cases)
        images = _prepare_all(cases, image_base, writer, mapper, warnings, existing)
        provenance = dict(provenance)
        provenance.setdefault("imported_at", dt.datetime.now(dt.UTC).isoformat())
        if any(p.format == "dicom" for items in images.values() for p in items):
            provenance["deidentification"] = {
                "profile": "PS3.15 Annex E basic",
                "dates": "blanked",
                # Identifies the salt without revealing it.
                "uid_salt_id": hashlib.sha256(mapper.salt.encode()).hexdigest()[:12],
            }
        with db.begin() as s:
            created = _create_study(
                s,
                study_name=study_name,
                description=description,
                raters_per_pair=raters_per_pair,
                seed=seed,
                provenance=provenance,
                cases=cases,
                images=images,
            )
            extra = after(s, created) if after is not None else None
            summary = ImportSummary(
                study_id=created.study.id,
                study_name=study_name,
                n_cases=created.n_cases,
                n_cases_reused=created.n_reused,
                n_reports=created.n_reports,
                n_images=created.n_images,
                n_pairs=len(created.pairs),
                warnings=tuple(warnings),
            )
    except IntegrityError as exc:
        writer.rollback()
        raise InvalidInput(f"import conflicts with existing data ({exc.orig})") from None
    except BaseException:
        writer.rollback()
        raise
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
) -> ImportSummary:
    """Create a study from cases: cases (reused by external id), images, reports, pairs.

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
    )
    return summary


def _unusable_hashes(indices: list[int]) -> dict[int, str]:
    """Argon2 hashes of random secrets nobody keeps, computed before the transaction.

    Hashing costs ~0.2 s each by design; on SQLite a transaction holds the write lock, so
    this must not run inside one.
    """
    return {index: _hasher.hash(secrets.token_urlsafe(32)) for index in indices}


def _rater_users(s: Session, indices: list[int], hashes: dict[int, str]) -> dict[int, User]:
    users: dict[int, User] = {}
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
        elif user.role != "rater":
            raise InvalidInput(f"user {username!r} exists and is not a rater")
        users[index] = user
    s.flush()
    return users


def import_rexval(
    db: Database,
    actor: Actor,
    *,
    gt_path: Path,
    ratings_path: Path,
    study_name: str,
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
    hashes = _unusable_hashes(rater_indices)

    def add_ratings(s: Session, created: _Created) -> tuple[int, int]:
        pair_of: dict[tuple[int, str], Pair] = {}
        by_case = {p.case.external_id: [] for p in created.pairs}
        for pair in created.pairs:
            by_case[pair.case.external_id].append(pair)
        for number, row in enumerate(gt.rows):
            for pair in by_case[row.study_id]:
                pair_of[(number, pair.source)] = pair
        users = _rater_users(s, rater_indices, hashes)
        now = dt.datetime.now(dt.UTC)
        rated: dict[int, set[int]] = {i: set() for i in rater_indices}
        rating_rows = []
        event_rows = []
        for r in ratings.rows:
            pair = pair_of[(r.study_number, r.candidate_type)]
            rater_id = users[r.rater_index].id
            rated[r.rater_index].add(pair.position)
            rating_rows.append({
                "rater_id": rater_id, "pair_id": pair.id, "category": r.error_category,
                "significant": r.clinically_significant, "count": r.num_errors,
                "created_at": now, "updated_at": now,
            })
            event_rows.append({
                "rater_id": rater_id, "pair_id": pair.id, "action": "import",
                "category": r.error_category, "significant": r.clinically_significant,
                "old_count": None, "new_count": r.num_errors, "at": now,
            })
        by_position = {p.position: p for p in created.pairs}
        assignment_rows = []
        for index in rater_indices:
            for order, position in enumerate(sorted(rated[index])):
                assignment_rows.append({
                    "study_id": created.study.id, "rater_id": users[index].id,
                    "pair_id": by_position[position].id, "order_index": order,
                    "completed_at": now, "active_seconds": 0.0,
                })
        if assignment_rows:
            s.execute(insert(Assignment), assignment_rows)
        if rating_rows:
            # One executemany in file order: ids follow the file, which export relies on.
            s.execute(insert(Rating), rating_rows)
            s.execute(insert(RatingEvent), event_rows)
        created.study.raters_per_pair = max(1, len(rater_indices))
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
    )
    return dataclasses.replace(summary, n_raters=n_raters, n_ratings=n_ratings)
