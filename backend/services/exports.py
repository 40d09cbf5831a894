"""Export a study as ReXVal files or JSONL, with a manifest (admin only).

Formats:

``rexval``
    ``50_samples_gt_and_candidates.csv`` (one row per reference report, in pair-position
    order; one column per candidate source, in order of first appearance, or the imported
    file's column order) and ``6_valid_raters_per_rater_error_categories.csv``
    (``study_number`` = row in the first file). Raters named ``rexval_rater_<i>`` keep index
    ``i``; other raters get the next free indices in user-id order. Rows of a study imported
    from ReXVal come in the imported file's order (ratings were inserted in file order);
    other rows are sorted by study_number, candidate column, error_category, rater_index,
    clinically_significant (True first). A completed assignment without stored cells
    contributes zero rows for the missing cells.

``jsonl``
    ``pairs.jsonl`` (position, pair id, case id, reference, candidate, source, images,
    input hash; re-importable with ``import-pairs``), ``ratings.jsonl`` (one line per rater,
    pair, category and significance) and ``images/`` (the de-identified image files).

Always ``manifest.json``: app version, schema version (Alembic head), export time, the
study's provenance (with what its import recorded about de-identification), the
de-identification profile and options of this code (``deidentification``, from
``backend.imaging.deid.DEID_PROFILE``), the order strategy of the raters' queues
(``sampling_design``: random or adaptive with its question and seed, since it changes the
sampling design) and the sha256 of every file. Text cells of the CSV
files are formula-safe (``backend.util.csv_safe``): a cell starting with ``=``, ``+``, ``-``,
``@``, tab or CR gets a leading ``'``. Files are written into a temporary folder
beside the target and moved into place at the end: a failure leaves nothing half-written.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from backend import config
from backend.datasets import rexval
from backend.imaging.deid import DEID_PROFILE
from backend.services.assignment import study_strategy
from backend.services.errors import InvalidInput, require_admin
from backend.services.repo import get_study
from backend.services.types import CATEGORIES, Actor
from backend.util import MANIFEST, free_output_dir, publish_dir
from db.models import Assignment, Case, Pair, Rating, RatingEvent, User
from db.session import MIGRATIONS_DIR, Database

FORMATS = ("rexval", "jsonl")
_RATER_RE = re.compile(r"^rexval_rater_(\d+)$")


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote."""

    study_name: str
    format: str
    out_dir: Path
    files: tuple[str, ...]
    n_pairs: int
    n_rating_rows: int


@dataclass(frozen=True)
class _PairData:
    id: int
    position: int
    opaque_id: str
    case_id: str
    reference_id: int
    reference: str
    candidate: str
    source: str
    input_hash: str
    images: tuple[tuple[str, str, str | None, str], ...]  # (path, sha, view, format)


@dataclass(frozen=True)
class _Cell:
    pair_id: int
    rater_index: int
    category: int
    significant: bool
    count: int
    rating_id: int | None  # None for zero-filled cells
    imported: bool


def schema_version() -> str:
    """The Alembic head revision of the migrations shipped with this code."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return str(ScriptDirectory.from_config(cfg).get_current_head())


def _rater_indices(users: dict[int, str]) -> dict[int, int]:
    """user id -> rater index (``rexval_rater_<i>`` keeps ``i``)."""
    out: dict[int, int] = {}
    for uid, name in users.items():
        m = _RATER_RE.match(name)
        if m:
            out[uid] = int(m.group(1))
    next_index = max(out.values(), default=-1) + 1
    for uid in sorted(users):
        if uid not in out:
            out[uid] = next_index
            next_index += 1
    return out


def _load(db: Database, study_name: str) -> tuple[dict[str, Any], list[_PairData], list[_Cell]]:
    with db.begin() as s:
        study = get_study(s, study_name)
        info = {
            "name": study.name,
            "description": study.description,
            "scheme": study.scheme,
            "raters_per_pair": study.raters_per_pair,
            "seed": study.seed,
            "status": study.status,
            "created_at": study.created_at.isoformat() if study.created_at else None,
            "provenance": study.provenance or {},
            # The order strategy changes the sampling design (which pairs got rated first).
            "assignment": study_strategy(study).as_dict(),
        }
        pairs_orm = s.scalars(
            select(Pair)
            .where(Pair.study_id == study.id)
            .order_by(Pair.position)
            .options(
                selectinload(Pair.case).selectinload(Case.images),
                selectinload(Pair.reference),
                selectinload(Pair.candidate),
            )
        ).all()
        pairs = [
            _PairData(
                id=p.id,
                position=p.position,
                opaque_id=p.opaque_id,
                case_id=p.case.external_id,
                reference_id=p.reference_id,
                reference=p.reference.text,
                candidate=p.candidate.text,
                source=p.source,
                input_hash=p.input_hash,
                images=tuple((i.path, i.sha256, i.view, i.format) for i in p.case.images),
            )
            for p in pairs_orm
        ]
        pair_ids = [p.id for p in pairs]
        ratings = s.execute(
            select(Rating.id, Rating.rater_id, Rating.pair_id, Rating.category,
                   Rating.significant, Rating.count)
            .join(Pair, Pair.id == Rating.pair_id)
            .where(Pair.study_id == study.id)
            .order_by(Rating.id)
        ).all()
        completed = s.execute(
            select(Assignment.rater_id, Assignment.pair_id)
            .where(Assignment.study_id == study.id, Assignment.completed_at.is_not(None))
        ).all()
        imported = {
            (row[0], row[1])
            for row in s.execute(
                select(RatingEvent.rater_id, RatingEvent.pair_id)
                .join(Pair, Pair.id == RatingEvent.pair_id)
                .where(Pair.study_id == study.id, RatingEvent.action == "import")
                .distinct()
            ).all()
        }
        rater_ids = {r.rater_id for r in ratings} | {a.rater_id for a in completed}
        users = dict(
            s.execute(select(User.id, User.username).where(User.id.in_(rater_ids))).all()
        ) if rater_ids else {}
    index = _rater_indices(users)
    cells: list[_Cell] = []
    have: set[tuple[int, int, int, bool]] = set()
    for r in ratings:
        key = (r.rater_id, r.pair_id)
        cells.append(_Cell(r.pair_id, index[r.rater_id], r.category, bool(r.significant),
                           int(r.count), r.id, key in imported))
        have.add((r.rater_id, r.pair_id, r.category, bool(r.significant)))
    known_pairs = set(pair_ids)
    for a in completed:
        if a.pair_id not in known_pairs or (a.rater_id, a.pair_id) in imported:
            continue
        for category in CATEGORIES:
            for significant in (True, False):
                if (a.rater_id, a.pair_id, category, significant) not in have:
                    cells.append(_Cell(a.pair_id, index[a.rater_id], category, significant,
                                       0, None, False))
    return info, pairs, cells


def _rexval_files(
    tmp: Path, info: dict[str, Any], pairs: list[_PairData], cells: list[_Cell]
) -> tuple[list[str], int]:
    provenance = info["provenance"]
    from_rexval = provenance.get("kind") == "rexval"
    types: list[str] = []
    if from_rexval:
        types = [str(t) for t in provenance.get("candidate_types", [])]
    for p in pairs:
        if p.source not in types:
            types.append(p.source)
    groups: dict[tuple[str, int], dict[str, _PairData]] = {}
    for p in pairs:
        group = groups.setdefault((p.case_id, p.reference_id), {})
        if p.source in group:
            raise InvalidInput(
                f"study {info['name']!r} cannot be written in the ReXVal layout: case "
                f"{p.case_id!r} has two candidates from source {p.source!r}; use jsonl"
            )
        group[p.source] = p
    study_ids = [case_id for case_id, _ in groups]
    if len(set(study_ids)) != len(study_ids):
        raise InvalidInput(
            f"study {info['name']!r} cannot be written in the ReXVal layout: a case has "
            "two different reference reports; use jsonl"
        )
    where: dict[int, tuple[int, str]] = {}
    rows = []
    for number, ((case_id, _), group) in enumerate(groups.items()):
        any_pair = next(iter(group.values()))
        rows.append(rexval.GtRow(
            study_id=case_id,
            gt_report=any_pair.reference,
            candidates=tuple(group[t].candidate if t in group else "" for t in types),
        ))
        for source, p in group.items():
            where[p.id] = (number, source)
    terminators = provenance.get("line_terminators", {}) if from_rexval else {}
    gt = rexval.GtFile(
        candidate_types=tuple(types),
        rows=tuple(rows),
        index_column=provenance.get("gt_index_column") if from_rexval else None,
        line_terminator=terminators.get("gt", "\n"),
    )
    type_order = {t: i for i, t in enumerate(types)}

    def canonical(c: _Cell) -> tuple[Any, ...]:
        number, source = where[c.pair_id]
        return (number, type_order[source], c.category, c.rater_index, not c.significant)

    if from_rexval:
        ordered = sorted(
            cells,
            key=lambda c: (0, c.rating_id, ()) if c.imported and c.rating_id is not None
            else (1, 0, canonical(c)),
        )
    else:
        ordered = sorted(cells, key=canonical)
    rating_rows = []
    for c in ordered:
        number, source = where[c.pair_id]
        rating_rows.append(rexval.RatingRow(number, source, c.category, c.rater_index,
                                            c.significant, c.count))
    ratings = rexval.RatingsFile(tuple(rating_rows), terminators.get("ratings", "\n"))
    rexval.write_gt(tmp / rexval.GT_FILENAME, gt)
    rexval.write_ratings(tmp / rexval.RATINGS_FILENAME, ratings)
    return [rexval.GT_FILENAME, rexval.RATINGS_FILENAME], len(rating_rows)


def _jsonl_files(
    tmp: Path, pairs: list[_PairData], cells: list[_Cell]
) -> tuple[list[str], int]:
    files = ["pairs.jsonl", "ratings.jsonl"]
    image_dir = tmp / "images"
    by_id = {p.id: p for p in pairs}
    copied: set[str] = set()
    with open(tmp / "pairs.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        for p in pairs:
            images = []
            for path, sha, view, fmt in p.images:
                name = f"images/{Path(path).name}"
                if name not in copied:
                    src = (config.data_dir() / path).resolve()
                    if not src.is_file():
                        raise InvalidInput(f"image file of case {p.case_id!r} is missing: {src}")
                    image_dir.mkdir(exist_ok=True)
                    shutil.copyfile(src, tmp / name)
                    copied.add(name)
                    files.append(name)
                images.append({"path": name, "sha256": sha, "view": view, "format": fmt})
            record = {
                "position": p.position,
                "pair_id": p.opaque_id,
                "case_id": p.case_id,
                "reference": p.reference,
                "candidate": p.candidate,
                "source": p.source,
                "images": images,
                "input_hash": p.input_hash,
            }
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    ordered = sorted(
        cells,
        key=lambda c: (by_id[c.pair_id].position, c.rater_index, c.category, not c.significant),
    )
    with open(tmp / "ratings.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        for c in ordered:
            p = by_id[c.pair_id]
            record = {
                "position": p.position,
                "pair_id": p.opaque_id,
                "case_id": p.case_id,
                "source": p.source,
                "rater_index": c.rater_index,
                "category": c.category,
                "significant": c.significant,
                "count": c.count,
            }
            fh.write(json.dumps(record) + "\n")
    return files, len(ordered)


def export_study(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    fmt: str,
    out_dir: Path,
) -> ExportSummary:
    """Write a study's pairs and ratings into ``out_dir`` with a manifest.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: The study.
        fmt: ``"rexval"`` or ``"jsonl"``.
        out_dir: Target folder; must not exist or be empty. Created atomically.

    Returns:
        The files written (relative to ``out_dir``) and counts.

    Raises:
        PermissionDenied: The actor is not an admin.
        NotFound: No such study.
        InvalidInput: Unknown format, non-empty target, or a study the format cannot hold.
    """
    require_admin(actor)
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown export format {fmt!r}; choose rexval or jsonl")
    out_dir = free_output_dir(out_dir)
    info, pairs, cells = _load(db, study_name)
    written: list[str] = []
    n_rows = 0

    def write(tmp: Path) -> dict[str, Any]:
        nonlocal n_rows
        if fmt == "rexval":
            files, n_rows = _rexval_files(tmp, info, pairs, cells)
        else:
            files, n_rows = _jsonl_files(tmp, pairs, cells)
        written.extend(files)
        return {
            "app_version": config.APP_VERSION,
            "schema_version": schema_version(),
            "exported_at": dt.datetime.now(dt.UTC).isoformat(),
            "exported_by": actor.username,
            "format": fmt,
            "study": info,
            # The profile the stored images went through (they are exported as stored).
            "deidentification": DEID_PROFILE,
            # How raters' pairs were ordered: random (seeded) or adaptive (and its question).
            "sampling_design": info["assignment"],
            "counts": {
                "pairs": len(pairs),
                "rating_rows": n_rows,
                "raters": len({c.rater_index for c in cells}),
            },
            "files": files,
        }

    publish_dir(out_dir, write, manifest=MANIFEST)
    return ExportSummary(
        study_name=study_name,
        format=fmt,
        out_dir=out_dir,
        files=(*written, MANIFEST),
        n_pairs=len(pairs),
        n_rating_rows=n_rows,
    )
