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
    ``pairs.jsonl`` (position, 1-based pair number, pair id, case id, reference, candidate,
    source, images, input hash; re-importable with ``import-pairs``), ``ratings.jsonl`` (one
    line per rater, pair, category and significance; position and pair number too) and
    ``images/`` (the de-identified image files) and ``volumes/<id>.nii.gz`` (each CT/MR
    volume as NIfTI: its values, voxel sizes and affine, no text; it imports again).

On request (``with_scores``, ``with_timing``; CLI ``--with-scores``, ``--with-timing``; two
boxes on the Export page) the folder also carries what the dashboard's numbers are made of,
so they can be recomputed from the export alone (``tests/services/test_export_reproduce.py``
does it):

``metric_scores`` (``.csv`` in the ReXVal layout, ``.jsonl`` otherwise)
    Every cached metric score of the study's pairs, one row per pair, key and signature:
    ``pair_number`` (1-based, as the pages show it), ``pair_id``, ``case_id``, ``source``
    (ReXVal: also ``study_number`` and ``candidate_type``, to join the ratings file), ``key``,
    ``family``, ``value`` (blank / null where the metric is undefined), ``higher_is_better``,
    ``signature``, ``signature_hash`` and ``chosen``: true for the signature the dashboard
    uses for the key (the one covering the most pairs, ties to the newest;
    ``backend.analysis.data``). The correlations orient a lower-is-better key by negating it
    and correlate against the negated mean errors of the counted raters. A key imported from
    a file (``import-scores``: family ``external``) has a row per import of this study, the
    latest one chosen, and the manifest's ``scores.keys.<key>.imported`` says where it came
    from (description, source, file and sha256, when, by whom).
``assignments`` and ``activity_spans`` (``.csv`` / ``.jsonl``)
    One row per assignment: ``rater_index`` (as in the ratings file), the pair as above,
    ``queue_position`` (1-based, the rater's order), ``completed_at`` (ISO 8601 UTC, blank
    while not done), ``active_seconds`` (time on task credited: the sum of the ``credited_seconds``
    of the assignment's spans), ``claimed_seconds`` (the union of its spans as the browser
    sent them), ``clipped_seconds`` (the difference: claimed time outside the rater's sessions
    or already credited to another pair, see ``backend.services.annotation.activity``),
    ``last_active_at`` and ``n_spans``; and every activity span (``rater_index``, the pair,
    ``tab`` (the page load's random id), ``started_at``, ``ended_at``, ``active_ms``,
    ``events``, ``credited_seconds``). A (rater, pair) rating counts in the analysis when its
    assignment has a ``completed_at``, or when it has ratings and no assignment (imported); a
    rater's time on task is the sum of ``active_seconds``, the median per pair is over pairs
    with time. ``judgements.jsonl`` carries the same ``active_seconds``, ``claimed_seconds``
    and ``clipped_seconds`` per judgement.

Quality control and other annotation modes (issue 14), each written only when the study has
any, as JSONL with rater names replaced by ``rater_index`` (as in the ratings file; raters
who only did training items get the next indices):

``training_ratings.jsonl``
    Every rater's answers to the training (calibration) items, one line per cell, with the
    expert count and whether the item passed. Training items are never study pairs: they are
    in no other file and no statistic.
``error_records.jsonl``
    Per-error records (pair, rater, kind span|omission, category, significant, candidate and
    reference span offsets and text, note); the ratings file holds the counts derived from
    them.
``adjudications.jsonl``
    Consensus counts per pair and cell with the adjudicator (``adjudicator_index``), note
    and the queue reason.
``judgements.jsonl``
    Pairwise mode: per comparison and rater, the preference (A, B, tie) and the 1-5
    ratings, with the pair numbers and sources of A and B.
``flags.jsonl``
    Pairs raters flagged as unsure, with their notes.
``intra_rater_agreement.jsonl``
    Per rater and scope, agreement between a pair and its hidden repeat (exact agreement,
    ICC(2,1), quadratic-weighted kappa) when the study has repeats.
``repeats.jsonl``
    What that agreement is made of: per rater, repeated pair and cell, the counts of the
    first showing and of the hidden repeat (``None`` while a showing is not done).

Always ``manifest.json``: app version, schema version (Alembic head), export time, the
study's provenance (with what its import recorded about de-identification), the
de-identification profile and options of this code (``deidentification``, from
``backend.imaging.deid.DEID_PROFILE``), the order strategy of the raters' queues
(``sampling_design``: random or adaptive with its question and seed, since it changes the
sampling design), ``counts`` (pairs, rating rows, raters and ``ratings``: the rater x pair
ratings that count, the dashboard's "Ratings"), ``scores`` and ``timing`` (what those files
hold and the rules above; ``null`` when not requested) and the sha256 of every file. Text
cells of the CSV
files are formula-safe (``backend.util.csv_safe``): a cell starting with ``=``, ``+``, ``-``,
``@``, tab or CR gets a leading ``'``. Files are written into a temporary folder
beside the target and moved into place at the end: a failure leaves nothing half-written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import aliased, selectinload

from radconcord.backend import clock, config
from radconcord.backend.analysis.data import AnalysisInputError
from radconcord.backend.datasets import rexval
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.imaging.deid import DEID_PROFILE
from radconcord.backend.imaging.volume import VolumeError
from radconcord.backend.imaging.volume_store import VolumeStore
from radconcord.backend.services.annotation import activity
from radconcord.backend.services.evaluation.study_data import (
    load_metric_columns,
    load_ratings,
    study_imports,
)
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin import demo_ratings, study_settings
from radconcord.backend.services.study_admin.assignment import study_strategy
from radconcord.backend.types import CATEGORIES, Actor
from radconcord.backend.util import MANIFEST, SafeCsvWriter, free_output_dir, publish_dir
from radconcord.db.models import (
    PAIR_REPEAT,
    PAIR_STUDY,
    ActivitySpan,
    Assignment,
    Case,
    Comparison,
    Judgement,
    MetricScore,
    Pair,
    Rating,
    RatingEvent,
    User,
)
from radconcord.db.session import MIGRATIONS_DIR, Database

FORMATS = ("rexval", "jsonl")
_RATER_RE = re.compile(r"rexval_rater_([0-9]+)")


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
class _Extras:
    """What ``with_scores`` / ``with_timing`` add: rows ready to write (pair ids resolved)."""

    scores: list[dict[str, Any]] | None
    score_keys: dict[str, dict[str, Any]] | None
    assignments: list[dict[str, Any]] | None
    spans: list[dict[str, Any]] | None


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
        m = _RATER_RE.fullmatch(name)
        if m:
            out[uid] = int(m.group(1))
    next_index = max(out.values(), default=-1) + 1
    for uid in sorted(users):
        if uid not in out:
            out[uid] = next_index
            next_index += 1
    return out


def _load(db: Database, study_name: str
          ) -> tuple[dict[str, Any], list[_PairData], list[_Cell], dict[int, int], int]:
    """The study, its pairs, its rating cells, user id -> rater index, counted ratings."""
    with db.read() as s:
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
            # How the raters saw the pairs (e.g. difference highlighting), with its history.
            "settings": study_settings.export_settings(study.settings),
        }
        pairs_orm = s.scalars(
            select(Pair)
            # Training items and hidden repeats are exported apart, never as study pairs.
            .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY)
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
            .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY)
            .order_by(Rating.id)
        ).all()
        completed = s.execute(
            select(Assignment.rater_id, Assignment.pair_id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Assignment.study_id == study.id, Assignment.completed_at.is_not(None),
                   Pair.kind == PAIR_STUDY)
        ).all()
        assigned = {(int(rid), int(pid)) for rid, pid in s.execute(
            select(Assignment.rater_id, Assignment.pair_id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Assignment.study_id == study.id, Pair.kind == PAIR_STUDY))}
        assigned_raters = {rid for rid, _ in assigned}
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
        everyone = rater_ids | assigned_raters
        users = dict(
            s.execute(select(User.id, User.username).where(User.id.in_(everyone))).all()
        ) if everyone else {}
    # Raters with ratings get the indices of the ratings file whatever else is exported;
    # raters with assignments only (in the timing files) follow after them.
    index = _rater_indices({uid: users[uid] for uid in rater_ids if uid in users})
    for uid in sorted(everyone - set(index)):
        index[uid] = max(index.values(), default=-1) + 1
    # The dashboard's "Ratings": one per rater and pair that counts (backend.analysis.data).
    counted = {(a.rater_id, a.pair_id) for a in completed} | {
        (r.rater_id, r.pair_id) for r in ratings if (r.rater_id, r.pair_id) not in assigned}

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
    return info, pairs, cells, index, len(counted)


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
    return [rexval.GT_FILENAME, rexval.RATINGS_FILENAME], len(rating_rows), where


def _iso(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    value = value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
    return value.isoformat()


def _pair_fields(p: _PairData, where: dict[int, tuple[int, str]] | None) -> dict[str, Any]:
    """How an extra file names a pair: its number and ids (ReXVal: also its file cells)."""
    fields: dict[str, Any] = {"pair_number": p.position + 1, "pair_id": p.opaque_id,
                              "case_id": p.case_id, "source": p.source}
    if where is not None:
        number, source = where[p.id]
        fields = {"study_number": number, "candidate_type": source, **fields}
    return fields


def _load_extras(db: Database, study_name: str, pairs: list[_PairData], index: dict[int, int],
                 *, scores: bool, timing: bool) -> _Extras:
    """Rows of the scores and timing files (pair ids kept; names resolved at writing)."""
    score_rows = score_keys = assignment_rows = span_rows = None
    if scores:
        ratings = load_ratings(db, study_name)
        try:
            columns = load_metric_columns(db, ratings, None, required=False)
        except AnalysisInputError as exc:
            raise InvalidInput(f"study {study_name!r}: scores cannot be exported: {exc}") from None
        chosen = {(k, c.signature_hash) for k, c in columns.items()}
        by_hash: dict[str, list[_PairData]] = {}
        for p in pairs:
            by_hash.setdefault(p.input_hash, []).append(p)
        with db.read() as s:
            rows = s.execute(
                select(MetricScore.input_hash, MetricScore.key, MetricScore.family,
                       MetricScore.value, MetricScore.signature, MetricScore.signature_hash)
                .where(MetricScore.input_hash.in_(list(by_hash)))
            ).all() if by_hash else []
            imports = study_imports(s, ratings.study_id)
        score_rows = []
        for r in rows:
            # Every key scored on the study's pairs is a column (an unknown key was refused
            # above, by name); the check keeps a score written meanwhile out, and so does the
            # second for values another study imported for pairs of the same content.
            if r.key not in columns or not imports.counts(r.key, r.family, r.signature_hash):
                continue
            for p in by_hash[r.input_hash]:
                value = None if r.value is None or not math.isfinite(r.value) else r.value
                score_rows.append({"_pair": p, "key": r.key, "family": r.family,
                                   "value": value,
                                   "higher_is_better": columns[r.key].higher_is_better,
                                   "signature": r.signature,
                                   "signature_hash": r.signature_hash,
                                   "chosen": (r.key, r.signature_hash) in chosen})
        order = {k: i for i, k in enumerate(columns)}
        score_rows.sort(key=lambda r: (r["_pair"].position, order.get(r["key"], len(order)),
                                       r["key"], not r["chosen"], r["signature_hash"]))
        score_keys = {k: {"family": c.family, "signature": c.signature,
                          "signature_hash": c.signature_hash,
                          "higher_is_better": c.higher_is_better, "n_values": c.n,
                          "n_signatures": c.n_signatures,
                          "imported": c.imported.as_json() if c.imported else None}
                      for k, c in columns.items()}
    if timing:
        by_id = {p.id: p for p in pairs}
        with db.read() as s:
            study_id = get_study(s, study_name).id
            assignments = s.execute(
                select(Assignment.id, Assignment.rater_id, Assignment.pair_id,
                       Assignment.order_index, Assignment.completed_at,
                       Assignment.active_seconds, Assignment.claimed_seconds,
                       Assignment.last_active_at)
                .join(Pair, Pair.id == Assignment.pair_id)
                .where(Assignment.study_id == study_id, Pair.kind == PAIR_STUDY)
            ).all()
            spans = s.execute(
                select(ActivitySpan.assignment_id, ActivitySpan.client_id,
                       ActivitySpan.started_at, ActivitySpan.ended_at, ActivitySpan.active_ms,
                       ActivitySpan.events, ActivitySpan.credited_seconds)
                .join(Assignment, Assignment.id == ActivitySpan.assignment_id)
                .join(Pair, Pair.id == Assignment.pair_id)
                .where(Assignment.study_id == study_id, Pair.kind == PAIR_STUDY)
            ).all()
        n_spans: dict[int, int] = {}
        for sp in spans:
            n_spans[sp.assignment_id] = n_spans.get(sp.assignment_id, 0) + 1
        queue: dict[int, list[Any]] = {}
        for a in assignments:
            queue.setdefault(a.rater_id, []).append(a)
        position: dict[int, int] = {}
        for items in queue.values():
            for i, a in enumerate(sorted(items, key=lambda a: (a.order_index, a.id)), start=1):
                position[a.id] = i
        of_assignment = {a.id: a for a in assignments}
        assignment_rows = sorted(
            ({"_pair": by_id[a.pair_id], "rater_index": index[a.rater_id],
              "queue_position": position[a.id], "completed_at": _iso(a.completed_at),
              "active_seconds": float(a.active_seconds or 0.0),
              "claimed_seconds": float(a.claimed_seconds or 0.0),
              "clipped_seconds": activity.clipped_seconds(a.claimed_seconds,
                                                          a.active_seconds),
              "last_active_at": _iso(a.last_active_at), "n_spans": n_spans.get(a.id, 0)}
             for a in assignments if a.pair_id in by_id),
            key=lambda r: (r["_pair"].position, r["rater_index"]))
        span_rows = sorted(
            ({"_pair": by_id[of_assignment[sp.assignment_id].pair_id],
              "rater_index": index[of_assignment[sp.assignment_id].rater_id],
              "tab": sp.client_id, "started_at": _iso(sp.started_at),
              "ended_at": _iso(sp.ended_at), "active_ms": int(sp.active_ms),
              "events": int(sp.events),
              "credited_seconds": float(sp.credited_seconds or 0.0)}
             for sp in spans if of_assignment[sp.assignment_id].pair_id in by_id),
            key=lambda r: (r["rater_index"], r["started_at"], r["_pair"].position))
    return _Extras(score_rows, score_keys, assignment_rows, span_rows)


def _write_rows(tmp: Path, stem: str, rows: Sequence[dict[str, Any]], columns: Sequence[str],
                where: dict[int, tuple[int, str]] | None) -> str:
    """``rows`` as ``<stem>.csv`` (ReXVal layout, formula-safe) or ``<stem>.jsonl``."""
    records = [{**_pair_fields(r["_pair"], where), **{c: r[c] for c in columns}}
               for r in rows]
    if where is not None:
        name = f"{stem}.csv"
        header = [*_pair_fields(rows[0]["_pair"], where), *columns] if rows else [
            "study_number", "candidate_type", "pair_number", "pair_id", "case_id", "source",
            *columns]
        with open(tmp / name, "w", encoding="utf-8", newline="") as fh:
            writer = SafeCsvWriter(fh)
            writer.writerow(header)
            for rec in records:
                writer.writerow(["" if rec[c] is None else
                                 ("true" if rec[c] is True else "false" if rec[c] is False
                                  else rec[c]) for c in header])
        return name
    name = f"{stem}.jsonl"
    with open(tmp / name, "w", encoding="utf-8", newline="\n") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return name


SCORE_COLUMNS = ("key", "family", "value", "higher_is_better", "signature", "signature_hash",
                 "chosen")
ASSIGNMENT_COLUMNS = ("rater_index", "queue_position", "completed_at", "active_seconds",
                      "claimed_seconds", "clipped_seconds", "last_active_at", "n_spans")
SPAN_COLUMNS = ("rater_index", "tab", "started_at", "ended_at", "active_ms", "events",
                "credited_seconds")


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
                if fmt == "volume":
                    # A volume as NIfTI (values, spacing, affine; no text), which imports
                    # again; its sha256 is the stored volume's, the one scores are keyed by.
                    name = f"volumes/{Path(path).name}.nii.gz"
                    if name not in copied:
                        src = (config.data_dir() / path).resolve()
                        try:
                            store = VolumeStore.open(src)
                        except VolumeError:
                            raise InvalidInput(
                                f"volume of case {p.case_id!r} is missing: {src}") from None
                        (tmp / "volumes").mkdir(exist_ok=True)
                        store.write_nifti(tmp / name)
                        copied.add(name)
                        files.append(name)
                    images.append({"path": name, "sha256": sha, "view": view, "format": fmt})
                    continue
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
                # The 1-based number the pages and the scores/timing files give the pair.
                "pair_number": p.position + 1,
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
                "pair_number": p.position + 1,
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


def _quality_files(db: Database, actor: Actor, study_name: str,
                   index: dict[int, int]) -> dict[str, list[dict[str, Any]]]:
    """Rows of the quality-control files (name -> rows), raters as ``rater_index``."""
    # Imported here: these services sit beside this one and import the rating service.
    from radconcord.backend.services.annotation import error_records, flags, pairwise
    from radconcord.backend.services.quality import adjudication, calibration, qc

    with db.read() as s:
        study_id = get_study(s, study_name).id
        ids = dict(s.execute(
            select(User.username, User.id)
            .join(Assignment, Assignment.rater_id == User.id)
            .where(Assignment.study_id == study_id).distinct()).all())
        # A pairwise judge holds Judgement rows, not assignments.
        ids.update(s.execute(
            select(User.username, User.id)
            .join(Judgement, Judgement.rater_id == User.id)
            .join(Comparison, Comparison.id == Judgement.comparison_id)
            .where(Comparison.study_id == study_id).distinct()).all())
    by_name = dict(index)
    for uid in sorted(set(ids.values()) - set(by_name)):
        by_name[uid] = max(by_name.values(), default=-1) + 1

    def anonymised(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for row in rows:
            # The study files name a pair's opaque id ``pair_id``: the same name here.
            row = {("pair_id" if k == "opaque_id" else k): v for k, v in row.items()}
            name = row.pop("rater", None)
            if name is not None:
                uid = ids.get(name)
                row = {"rater_index": by_name.get(uid) if uid is not None else None, **row}
            out.append(row)
        return out

    files = {
        "training_ratings": anonymised(calibration.training_rows(db, actor, study_name)),
        "error_records": anonymised(error_records.export_rows(db, actor, study_name)),
        "adjudications": _adjudicators_indexed(
            adjudication.export_rows(db, actor, study_name=study_name)),
        "judgements": [r for r in anonymised(_with_clipping(
                           db, study_id, pairwise.export_rows(db, actor, study_name)))
                       if r.get("rater_index") is not None or r.get("preference")],
        "flags": anonymised([dataclasses.asdict(f)
                             for f in flags.study_flags(db, actor, study_name)]),
    }
    agreement = anonymised(qc.intra_rater_rows(db, actor, study_name))
    files["intra_rater_agreement"] = (
        agreement if any(r.get("repeats_counted") for r in agreement) else [])
    files["repeats"] = [{"rater_index": by_name.get(r.pop("rater_id")), **r}
                        for r in _repeat_rows(db, study_id)]
    return {name: rows for name, rows in files.items() if rows}


def _with_clipping(db: Database, study_id: int, rows: list[dict[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Judgement rows with ``claimed_seconds`` and ``clipped_seconds`` beside their
    ``active_seconds`` (time on task the rules did not credit, see ``activity``)."""
    with db.read() as s:
        claimed = {(oid, name): (float(c or 0.0), float(a or 0.0)) for oid, name, c, a in
                   s.execute(select(Comparison.opaque_id, User.username,
                                    Judgement.claimed_seconds, Judgement.active_seconds)
                             .join(Judgement, Judgement.comparison_id == Comparison.id)
                             .join(User, User.id == Judgement.rater_id)
                             .where(Comparison.study_id == study_id))}
    out = []
    for row in rows:
        c, a = claimed.get((row.get("comparison_id"), row.get("rater")), (0.0, 0.0))
        out.append({**row, "claimed_seconds": c,
                    "clipped_seconds": activity.clipped_seconds(c, a)})
    return out


def _repeat_rows(db: Database, study_id: int) -> list[dict[str, Any]]:
    """Both showings of every hidden repeat, per cell: what intra-rater agreement is made of.

    One row per rater, repeated pair and cell: ``pair_number`` (of the study pair),
    ``repeat_pair_id`` (the repeat's opaque id), ``category``, ``significant``, ``first`` and
    ``repeat`` (the counts of the two showings; None while that showing is not done) and
    ``both_done``. A showing done without a stored cell counts 0, as in the ratings file.
    """
    source = aliased(Pair)
    with db.read() as s:
        showings = s.execute(
            select(Assignment.rater_id, Pair.id, Pair.opaque_id, source.id, source.position,
                   Assignment.completed_at)
            .join(Pair, Pair.id == Assignment.pair_id)
            .join(source, source.id == Pair.repeat_of_id)
            .where(Assignment.study_id == study_id, Pair.kind == PAIR_REPEAT)
            .order_by(source.position, Assignment.rater_id)
        ).all()
        if not showings:
            return []
        done = {(a.rater_id, a.pair_id): a.completed_at is not None for a in s.execute(
            select(Assignment.rater_id, Assignment.pair_id, Assignment.completed_at)
            .where(Assignment.study_id == study_id))}
        pair_ids = {row[1] for row in showings} | {row[3] for row in showings}
        counts = {(r.rater_id, r.pair_id, r.category, bool(r.significant)): int(r.count)
                  for r in s.execute(
                      select(Rating.rater_id, Rating.pair_id, Rating.category,
                             Rating.significant, Rating.count)
                      .where(Rating.pair_id.in_(pair_ids)))}
    rows = []
    for rater_id, repeat_id, repeat_oid, source_id, position, _ in showings:
        first_done = done.get((rater_id, source_id), False)
        repeat_done = done.get((rater_id, repeat_id), False)
        for category in CATEGORIES:
            for significant in (True, False):
                rows.append({
                    "rater_id": rater_id, "pair_number": position + 1,
                    "repeat_pair_id": repeat_oid, "category": category,
                    "significant": significant,
                    "first": counts.get((rater_id, source_id, category, significant), 0)
                    if first_done else None,
                    "repeat": counts.get((rater_id, repeat_id, category, significant), 0)
                    if repeat_done else None,
                    "both_done": first_done and repeat_done,
                })
    return rows


def _adjudicators_indexed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consensus rows with the adjudicator as ``adjudicator_index`` (0.. by name), never a
    username: an adjudicator may also be one of the raters the files keep anonymous."""
    index = {name: i for i, name in enumerate(sorted({r["adjudicator"] for r in rows}))}
    out = []
    for row in rows:
        row = {("pair_id" if k == "opaque_id" else k): v for k, v in row.items()}
        out.append({"adjudicator_index": index[row.pop("adjudicator")], **row})
    return out


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")


def _json_default(value: object) -> Any:  # noqa: ANN401 - JSON value
    if isinstance(value, dt.datetime):
        return _iso(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def _reason(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def _check_output_parent(out_dir: Path) -> None:
    """Refuse, before the slow work, an ``out_dir`` whose folder cannot be written.

    :func:`publish_dir` builds the export in a staging folder beside ``out_dir`` (in its
    parent) and renames it at the end, so that parent must exist (or be creatable) and be
    writable. A temporary file is written rather than ``os.access`` asked: root passes
    every permission check but still cannot write to a read-only mount.

    Raises:
        InvalidInput: The parent is missing and cannot be created, or is not writable.
    """
    parent = out_dir.parent
    ancestor = parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise InvalidInput(f"output folder {out_dir} cannot be created "
                           f"({ancestor} is a file, not a folder)")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"output folder {out_dir} cannot be created "
                           f"(cannot create {exc.filename or parent}: {_reason(exc)})") from None
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise InvalidInput(f"output folder {out_dir} cannot be created "
                           f"({parent} is not writable: {_reason(exc)})") from None


def export_study(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    fmt: str,
    out_dir: Path,
    with_scores: bool = False,
    with_timing: bool = False,
) -> ExportSummary:
    """Write a study's pairs and ratings into ``out_dir`` with a manifest.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: The study.
        fmt: ``"rexval"`` or ``"jsonl"``.
        out_dir: Target folder; must not exist or be empty. Created atomically.
        with_scores: Add ``metric_scores`` (every cached score with its signature).
        with_timing: Add ``assignments`` (completion times, time on task) and
            ``activity_spans``.

    Returns:
        The files written (relative to ``out_dir``) and counts.

    Raises:
        PermissionDenied: The actor is not an admin.
        NotFound: No such study.
        InvalidInput: Unknown format, non-empty target, a study the format cannot hold, or
            a target that cannot be written (its folder is missing and cannot be created,
            or is read-only), found before anything is written.
        OSError: Writing failed part way (disk full); ``out_dir`` is left as it was.
    """
    require_admin(actor)
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown export format {fmt!r}; choose rexval or jsonl")
    out_dir = free_output_dir(out_dir)
    _check_output_parent(out_dir)
    # One read snapshot: raters saving during the export cannot make its files disagree
    # (a pair done in the ratings file but not in the assignments file, say).
    with db.snapshot():
        info, pairs, cells, index, n_counted = _load(db, study_name)
        extras = _load_extras(db, study_name, pairs, index, scores=with_scores,
                              timing=with_timing)
        quality = _quality_files(db, actor, study_name, index)
    written: list[str] = []
    n_rows = 0

    def write(tmp: Path) -> dict[str, Any]:
        nonlocal n_rows
        where: dict[int, tuple[int, str]] | None = None
        if fmt == "rexval":
            files, n_rows, where = _rexval_files(tmp, info, pairs, cells)
        else:
            files, n_rows = _jsonl_files(tmp, pairs, cells)
        scores = timing = None
        if extras.scores is not None:
            name = _write_rows(tmp, "metric_scores", extras.scores, SCORE_COLUMNS, where)
            files.append(name)
            scores = {
                "file": name, "rows": len(extras.scores), "keys": extras.score_keys,
                "rule": "per key the signature covering the most pairs of the study, ties "
                        "to the newest (rows with chosen=true), except a key imported from "
                        "a file (family external): its latest import, in the direction that "
                        "import gave (keys.imported); correlations negate "
                        "lower-is-better keys and correlate with the negated mean errors "
                        "of the counted raters",
            }
        if extras.assignments is not None and extras.spans is not None:
            a_name = _write_rows(tmp, "assignments", extras.assignments, ASSIGNMENT_COLUMNS,
                                 where)
            s_name = _write_rows(tmp, "activity_spans", extras.spans, SPAN_COLUMNS, where)
            files.extend([a_name, s_name])
            timing = {
                "files": [a_name, s_name],
                "assignments": len(extras.assignments), "spans": len(extras.spans),
                "idle_cut_seconds": activity.idle_cut_seconds(),
                "rules": "a span is credited (credited_seconds) for its part inside the "
                         "rater's login sessions that no span of the rater received before "
                         "it covers, on any pair (an instant counts once; two tabs on one "
                         "pair count once); active_seconds = sum of the assignment's "
                         "credited_seconds; claimed_seconds = length of the union of its "
                         "spans as sent; clipped_seconds = claimed_seconds - active_seconds; "
                         "a rater's time = sum over the rater's assignments; median per pair "
                         "over pairs with time; a rating counts when completed_at is set, or "
                         "when it has no assignment (imported)",
            }
        for name, rows in quality.items():
            _write_jsonl(tmp / f"{name}.jsonl", rows)
            files.append(f"{name}.jsonl")
        written.extend(files)
        return {
            "app_version": config.APP_VERSION,
            "schema_version": schema_version(),
            "exported_at": clock.utcnow().isoformat(),
            "exported_by": actor.username,
            "format": fmt,
            # "demo ratings (constructed)" where the study holds them (seeded demo), else null.
            "ratings_note": demo_ratings.note_of(info["provenance"]),
            "study": info,
            # The profile the stored images went through (they are exported as stored).
            "deidentification": DEID_PROFILE,
            # How raters' pairs were ordered: random (seeded) or adaptive (and its question).
            "sampling_design": info["assignment"],
            "counts": {
                "pairs": len(pairs),
                "rating_rows": n_rows,
                "raters": len({c.rater_index for c in cells}),
                "ratings": n_counted,
            },
            "scores": scores,
            "timing": timing,
            # Training answers, error records, consensus, judgements, flags, repeats: the
            # file of each and its number of rows (absent: the study has none).
            "quality_control": {name: {"file": f"{name}.jsonl", "rows": len(rows)}
                                for name, rows in quality.items()},
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
