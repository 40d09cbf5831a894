"""RadPref import and export (admin only): a pairwise + 1-5 study from CRIMSON's files.

Import (:func:`import_radpref`) creates, in one transaction (nothing is written when any
part fails, and the study appears complete or not at all):

- a study (scheme ``radpref``, ``annotation_mode`` = ``pairwise``), one case per RadPref case
  (external id = the case ``id``, no images), its reference report and the two candidates
  ``C1``/``C2`` as two study pairs (source = ``C1_source``/``C2_source``);
- one comparison per case (A = C1, B = C2) whose ``meta`` keeps every other case field
  verbatim (``fields``), the case's key order and its place in the file;
- one rater account per annotator, ``radpref_user_<user_id>`` (created with an unusable
  random password, so nobody can log in as them until an admin sets one; reused when it
  already exists as a rater);
- per annotator and annotated case: a completed judgement (``rating_a`` = C1's rating,
  ``rating_b`` = C2's; no preference: RadPref has none, the statistics derive it from the
  mean ratings) whose ``details`` keep the remaining annotation fields verbatim; one error
  record per ReXVal error (mapping: :mod:`backend.datasets.radpref`), whose ``details``
  keep the RadPref entry and its index; the derived 6x2 counts as ratings of each
  candidate pair, with completed assignments, so every count-based analysis works.

Export (:func:`export_radpref`) rebuilds the two kinds of files from the database. A study
imported from RadPref exports JSON-equal files (same keys, values and key order). A pairwise
study rated in the app exports its completed judgements in the same layout, the RadPref
entries derived from the raters' error records where they have any.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from radconcord.backend import clock
from radconcord.backend.datasets import radpref
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.scoring.hashing import input_hash
from radconcord.backend.services.job_inputs import check_name_not_pending
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin.study_settings import HISTORY_KEY
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor
from radconcord.db.models import (
    PAIR_STUDY,
    Assignment,
    Case,
    Comparison,
    ErrorRecord,
    Judgement,
    Pair,
    Rating,
    RatingEvent,
    Report,
    Study,
    User,
)
from radconcord.db.session import Database

SCHEME = "radpref"
USER_PREFIX = "radpref_user_"
#: ``Study.provenance["kind"]`` of an imported RadPref study.
PROVENANCE_KIND = "radpref"
#: Key of the RadPref block (files, annotators) in the study's provenance.
PROVENANCE_KEY = "radpref"
#: Key of the imported fields in ``Comparison.meta``, ``Judgement.details`` and
#: ``ErrorRecord.details``.
DETAILS_KEY = "radpref"
_DEFAULT_CASE_ORDER = ("id", "ground_truth_report", "ground_truth_findings", "C1_report",
                       "C1_findings", "C1_source", "C2_report", "C2_findings", "C2_source",
                       "PatientAge", "PatientSex", "Indication", "Comparison",
                       "StudyDescription")
_SIGNIFICANCE_OUT = {True: "actionable_not_urgent", False: "not_actionable_not_urgent"}
_ATTRIBUTE_OUT = {3: "location", 4: "severity", 5: "temporal", 6: "temporal"}


@dataclass(frozen=True)
class RadPrefImportSummary:
    """What an import created (or, for a dry run, would create).

    Attributes:
        study_name: The study.
        study_id: Its id (``None`` for a dry run).
        dry_run: Nothing was written.
        n_cases: Cases (= comparisons).
        n_pairs: Candidate pairs (two per case).
        raters: The annotators' account names, in file order.
        new_raters: Those an import creates (the others exist as raters already).
        n_judgements: Judgements (annotator x annotated case).
        n_error_records: Per-error records.
        n_ratings: Rating cells (twelve per annotator and candidate).
        warnings: Things kept that the user should know (e.g. indices past a findings list).
    """

    study_name: str
    study_id: int | None
    dry_run: bool
    n_cases: int
    n_pairs: int
    raters: tuple[str, ...]
    new_raters: tuple[str, ...]
    n_judgements: int
    n_error_records: int
    n_ratings: int
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class RadPrefExport:
    """The files of an export: relative path -> bytes, plus what was left out and why."""

    study_name: str
    files: dict[str, bytes]
    n_cases: int
    n_annotators: int
    n_judgements: int
    warnings: tuple[str, ...] = ()

    def zip_bytes(self) -> bytes:
        """The files as a zip under one ``RadPref`` folder."""
        return radpref.zip_bytes(self.files)

    def write(self, out_dir: Path) -> list[Path]:
        """Write the files under ``out_dir``; returns the paths written."""
        return radpref.write_dir(self.files, out_dir)


def username_of(user_id: str) -> str:
    """The account name of a RadPref annotator."""
    return f"{USER_PREFIX}{user_id}"


def _check_name(s: Session, study_name: str) -> str:
    name = (study_name or "").strip()
    if not name:
        raise InvalidInput("study name is empty")
    if len(name) > 128:
        raise InvalidInput("study name is longer than 128 characters")
    status = s.scalar(select(Study.status).where(Study.name == name))
    if status is not None:
        raise InvalidInput(f"study {name!r} already exists; choose another name "
                           "(a RadPref import always creates a new study)")
    return name


def _existing_raters(s: Session, usernames: list[str]) -> set[str]:
    existing: set[str] = set()
    for username, role in s.execute(
            select(User.username, User.role).where(User.username.in_(usernames))):
        if role != "rater":
            raise InvalidInput(f"account {username!r} exists and is not a rater; rename it "
                               "or change the annotator's user_id")
        existing.add(username)
    return existing


def _plan(data: radpref.RadPrefData) -> tuple[int, int, int]:
    """(judgements, error records, rating cells) an import of ``data`` writes."""
    n_judgements = n_records = 0
    for annotator in data.annotators:
        for annotation in annotator.annotations.values():
            n_judgements += 1
            for name in radpref.CANDIDATES:
                n_records += len(radpref.map_candidate(annotation[name]))
    return n_judgements, n_records, n_judgements * 2 * 12


def _split(raw: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    """Key order and the fields not in ``known``, verbatim."""
    return {"key_order": list(raw), "fields": {k: v for k, v in raw.items() if k not in known}}


def import_radpref(
    db: Database,
    actor: Actor,
    *,
    data: radpref.RadPrefData,
    study_name: str,
    dry_run: bool = False,
) -> RadPrefImportSummary:
    """Create a pairwise + 1-5 study from a parsed RadPref set (see the module docstring).

    Args:
        db: The database.
        actor: Must be an admin.
        data: From :func:`backend.datasets.radpref.parse` or ``read``.
        study_name: The new study's name (must not exist).
        dry_run: Check everything (name, accounts) and count, but write nothing.

    Returns:
        What was (or would be) created.

    Raises:
        PermissionDenied: The actor is not an admin.
        InvalidInput: The name is taken or empty, or an annotator's account name belongs to
            an admin; nothing is written.
    """
    require_admin(actor)
    usernames = [username_of(a.user_id) for a in data.annotators]
    with db.read() as s:
        name = _check_name(s, study_name)
        existing = _existing_raters(s, usernames)
    # An import or build job queued under this name would fail later; say so now.
    check_name_not_pending(db, name)
    new = tuple(u for u in usernames if u not in existing)
    n_judgements, n_records, n_ratings = _plan(data)
    summary = RadPrefImportSummary(
        study_name=name, study_id=None, dry_run=dry_run, n_cases=len(data.cases),
        n_pairs=2 * len(data.cases), raters=tuple(usernames), new_raters=new,
        n_judgements=n_judgements, n_error_records=n_records, n_ratings=n_ratings,
        warnings=data.warnings)
    if dry_run:
        return summary
    # Hashing costs ~0.2 s each by design: done before the transaction holds the lock.
    hashes = imports.unusable_hashes(list(range(len(usernames))))
    try:
        with db.begin() as s:
            study_id = _write(s, actor, data, name, usernames, hashes)
    except IntegrityError as exc:
        raise InvalidInput(f"import conflicts with existing data ({exc.orig}); nothing "
                           "was written") from None
    return RadPrefImportSummary(**{**summary.__dict__, "study_id": study_id})


def _write(s: Session, actor: Actor, data: radpref.RadPrefData, name: str,
           usernames: list[str], hashes: dict[int, str]) -> int:
    now = clock.utcnow()
    # Checked again inside the transaction: another import may have taken the name.
    _check_name(s, name)
    existing = _existing_raters(s, usernames)
    annotators_meta = [
        {"user_id": a.raw["user_id"], "file": a.file, "username": u, "style": a.style,
         **_split(a.raw, ("user_id", "annotations"))}
        for a, u in zip(data.annotators, usernames, strict=True)
    ]
    study = Study(
        name=name, description="Imported from RadPref files (CRIMSON)", scheme=SCHEME,
        raters_per_pair=max(1, len(data.annotators)), seed=0, status="open",
        settings={"annotation_mode": "pairwise", HISTORY_KEY: [
            {"key": "annotation_mode", "from": "counts", "to": "pairwise",
             "at": now.isoformat(), "by": actor.username}]},
        provenance={
            "kind": PROVENANCE_KIND, "imported_by": actor.username,
            "imported_at": now.isoformat(), "files": dict(data.sha256),
            PROVENANCE_KEY: {"preferences_file": data.preferences_file,
                             "preferences_style": data.preferences_style,
                             "annotators": annotators_meta},
        },
    )
    s.add(study)
    s.flush()
    user_ids: dict[str, int] = {}
    for index, username in enumerate(usernames):
        if username in existing:
            user_ids[username] = s.scalar(select(User.id).where(User.username == username))
            continue
        # A hash of a random secret nobody keeps: the account exists for attribution.
        user = User(username=username, display_name=f"RadPref annotator "
                    f"{data.annotators[index].user_id}", role="rater",
                    password_hash=hashes[index])
        s.add(user)
        s.flush()
        user_ids[username] = user.id

    # case id -> (comparison id, {C1: pair id, C2: pair id}, case)
    placed: dict[str, tuple[int, dict[str, int], dict[str, Any]]] = {}
    for number, case in enumerate(data.cases):
        row = Case(study_id=study.id, external_id=case["id"], created_at=now)
        s.add(row)
        s.flush()
        reference = Report(case_id=row.id, role="reference", text=case["ground_truth_report"],
                           created_at=now)
        s.add(reference)
        pair_ids: dict[str, int] = {}
        for side, cand in enumerate(radpref.CANDIDATES):
            report = Report(case_id=row.id, role="candidate", source=case[f"{cand}_source"],
                            text=case[f"{cand}_report"], created_at=now)
            s.add(report)
            s.flush()
            pair = Pair(study_id=study.id, case_id=row.id, reference_id=reference.id,
                        candidate_id=report.id, source=case[f"{cand}_source"],
                        opaque_id=secrets.token_hex(8), position=2 * number + side,
                        input_hash=input_hash(case["ground_truth_report"],
                                              case[f"{cand}_report"]),
                        kind=PAIR_STUDY)
            s.add(pair)
            s.flush()
            pair_ids[cand] = pair.id
        comparison = Comparison(
            study_id=study.id, pair_a_id=pair_ids["C1"], pair_b_id=pair_ids["C2"],
            position=number, opaque_id=secrets.token_hex(8),
            meta={DETAILS_KEY: {"case_index": number,
                                **_split(case, radpref.CASE_COLUMN_KEYS)}})
        s.add(comparison)
        s.flush()
        placed[case["id"]] = (comparison.id, pair_ids, case)

    assignments: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    ratings: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    judgements: list[dict[str, Any]] = []
    for annotator, username in zip(data.annotators, usernames, strict=True):
        rater_id = user_ids[username]
        for order, (case_id, annotation) in enumerate(annotator.annotations.items()):
            comparison_id, pair_ids, case = placed[case_id]
            details: dict[str, Any] = {"file": annotator.file,
                                       **_split(annotation, radpref.CANDIDATES)}
            for side, cand in enumerate(radpref.CANDIDATES):
                candidate = annotation[cand]
                details[cand] = _split(candidate, radpref.CANDIDATE_KEYS)
                pair_id = pair_ids[cand]
                assignments.append({
                    "study_id": study.id, "rater_id": rater_id, "pair_id": pair_id,
                    "order_index": 2 * order + side, "completed_at": now,
                    "active_seconds": 0.0})
                mapped = radpref.map_candidate(candidate)
                findings = case[f"{cand}_findings"]
                for error in mapped:
                    records.append(_record(rater_id, pair_id, error, case, cand, findings, now))
                cells = radpref.counts((e.category, e.significant) for e in mapped)
                for cell, count in cells.items():
                    category, significant = int(cell[0]), cell[2] == "1"
                    ratings.append({
                        "rater_id": rater_id, "pair_id": pair_id, "category": category,
                        "significant": significant, "count": count, "created_at": now,
                        "updated_at": now})
                    events.append({
                        "rater_id": rater_id, "pair_id": pair_id, "action": "import",
                        "category": category, "significant": significant,
                        "old_count": None, "new_count": count, "at": now})
            judgements.append({
                "rater_id": rater_id, "comparison_id": comparison_id, "order_index": order,
                "preference": None, "rating_a": annotation["C1"]["rating"],
                "rating_b": annotation["C2"]["rating"], "details": {DETAILS_KEY: details},
                "completed_at": now, "version": 1, "updated_at": now})
    # In file order: export rebuilds each candidate's entries in record id order.
    for model, rows in ((Assignment, assignments), (ErrorRecord, records), (Rating, ratings),
                        (RatingEvent, events), (Judgement, judgements)):
        if rows:
            s.execute(insert(model), rows)
    return study.id


def _record(rater_id: int, pair_id: int, error: radpref.MappedError, case: Mapping[str, Any],
            cand: str, findings: list[str], now: dt.datetime) -> dict[str, Any]:
    index = int(error.index)
    row: dict[str, Any] = {
        "rater_id": rater_id, "pair_id": pair_id, "kind": error.kind,
        "category": error.category, "significant": error.significant,
        "candidate_start": None, "candidate_end": None, "candidate_text": None,
        "reference_start": None, "reference_end": None, "reference_text": None,
        "note": error.entry.get("explanation", "") if isinstance(
            error.entry.get("explanation"), str) else "",
        "details": {DETAILS_KEY: {"section": error.section, "index": error.index,
                                  "attribute": error.attribute, "entry": error.entry}},
        "created_at": now,
    }
    if error.kind == "span":
        text = findings[index] if index < len(findings) else None
        span = radpref.span_of(text, case[f"{cand}_report"]) if text else None
        row["candidate_text"] = text
        if span:
            row["candidate_start"], row["candidate_end"] = span
    else:
        gt = case["ground_truth_findings"]
        text = gt[index] if index < len(gt) else None
        span = radpref.span_of(text, case["ground_truth_report"]) if text else None
        row["reference_text"] = text
        if span:
            row["reference_start"], row["reference_end"] = span
    return row


# ------------------------------------------------------------------------------ export


def _merge(split: Mapping[str, Any] | None, built: Mapping[str, Any],
           default_order: tuple[str, ...]) -> dict[str, Any]:
    """Rebuild an object from column-derived values and the verbatim rest, in key order."""
    fields = dict((split or {}).get("fields", {}))
    order = list((split or {}).get("key_order", [])) or [
        k for k in default_order if k in built or k in fields]
    out: dict[str, Any] = {}
    for key in order:
        if key in built:
            out[key] = built[key]
        elif key in fields:
            out[key] = fields[key]
    for key, value in {**built, **fields}.items():
        out.setdefault(key, value)
    return out


def _file_safe(user_id: str) -> str:
    return user_id if radpref.USER_ID_PATTERN.fullmatch(user_id) else \
        re.sub(r"[^A-Za-z0-9_.-]", "_", user_id)[:48] or "rater"


def _derived_entry(record: ErrorRecord, findings: list[str], ground_truth: list[str],
                   warnings: list[str], where: str) -> tuple[str, str, dict[str, Any]] | None:
    """(section, index, entry) of an error record entered in the app (no RadPref details)."""
    if record.kind == "omission":
        text = record.reference_text or ""
        if text not in ground_truth:
            warnings.append(f"{where}: omission {text[:60]!r} matches no ground-truth "
                            "finding; left out")
            return None
        entry = {"clinical_significance": _SIGNIFICANCE_OUT[record.significant]}
        section, index = "missing_findings", str(ground_truth.index(text))
        label, back = "missing finding", radpref.CATEGORY_MISSING
    else:
        text = record.candidate_text or ""
        if text not in findings:
            warnings.append(f"{where}: error span {text[:60]!r} matches no finding of the "
                            "candidate; left out")
            return None
        section, index = "finding_errors", str(findings.index(text))
        if record.category in _ATTRIBUTE_OUT:
            attribute = _ATTRIBUTE_OUT[record.category]
            entry = {"error_type": "attribute", "attributes": {
                attribute: "significant" if record.significant else "negligible"}}
            label, back = f"{attribute} attribute", radpref.ATTRIBUTE_CATEGORY[attribute]
        else:
            entry = {"error_type": "false",
                     "clinical_significance": _SIGNIFICANCE_OUT[record.significant]}
            label, back = "false finding", radpref.CATEGORY_FALSE
    if back != record.category:
        # The format has no type for it (an omitted comparison, say): say what it becomes.
        warnings.append(f"{where}: a category {record.category} {record.kind} "
                        f"{text[:60]!r} is written as a RadPref {label}, which reads back as "
                        f"category {back}")
    if record.note:
        entry["explanation"] = record.note
    return section, index, entry


def export_radpref(db: Database, actor: Actor, *, study_name: str) -> RadPrefExport:
    """Rebuild ``preference_data.json`` and ``radiologist_annotations/user_N.json``.

    Cases are written in their imported order (else comparison order); each annotator's
    cases in their judgement order. Judgements without both ratings are left out (named in
    the warnings).

    Raises:
        PermissionDenied: The actor is not an admin.
        NotFound: No such study.
        InvalidInput: The study has no comparisons (not a pairwise study).
    """
    require_admin(actor)
    warnings: list[str] = []
    with db.read() as s:
        study = get_study(s, study_name)
        comparisons = list(s.scalars(select(Comparison).where(
            Comparison.study_id == study.id).order_by(Comparison.position)))
        if not comparisons:
            raise InvalidInput(f"study {study.name!r} has no comparisons: only a pairwise "
                               "study exports as RadPref")
        pair_ids = {p for c in comparisons for p in (c.pair_a_id, c.pair_b_id)}
        pairs = {p.id: p for p in s.scalars(select(Pair).where(Pair.id.in_(pair_ids)))}
        report_ids = {r for p in pairs.values() for r in (p.reference_id, p.candidate_id)}
        reports = {r.id: r for r in s.scalars(select(Report).where(Report.id.in_(report_ids)))}
        case_ids = {p.case_id for p in pairs.values()}
        external = dict(s.execute(select(Case.id, Case.external_id)
                                  .where(Case.id.in_(case_ids))).all())
        judgements = list(s.scalars(select(Judgement).where(
            Judgement.comparison_id.in_([c.id for c in comparisons]))
            .order_by(Judgement.rater_id, Judgement.order_index, Judgement.id)))
        rater_ids = {j.rater_id for j in judgements}
        usernames = dict(s.execute(select(User.id, User.username)
                                   .where(User.id.in_(rater_ids))).all())
        records: dict[tuple[int, int], list[ErrorRecord]] = defaultdict(list)
        for record in s.scalars(select(ErrorRecord).where(
                ErrorRecord.pair_id.in_(pair_ids), ErrorRecord.rater_id.in_(rater_ids))
                .order_by(ErrorRecord.id)):
            records[(record.rater_id, record.pair_id)].append(record)
        block = (study.provenance or {}).get(PROVENANCE_KEY) or {}
        name = study.name

    def sort_key(c: Comparison) -> tuple[int, int]:
        meta = (c.meta or {}).get(DETAILS_KEY) or {}
        index = meta.get("case_index")
        return (index if isinstance(index, int) else c.position + 10**9, c.position)

    comparisons.sort(key=sort_key)
    seen_ids: dict[str, int] = defaultdict(int)
    for c in comparisons:
        seen_ids[external[pairs[c.pair_a_id].case_id]] += 1
    cases: list[dict[str, Any]] = []
    case_of: dict[int, dict[str, Any]] = {}
    for c in comparisons:
        a, b = pairs[c.pair_a_id], pairs[c.pair_b_id]
        meta = (c.meta or {}).get(DETAILS_KEY)
        case_id = external[a.case_id]
        if seen_ids[case_id] > 1:
            # Several comparisons of one case (more than two candidates): ids stay unique.
            case_id = f"{case_id}#{c.position}"
        built = {"id": case_id, "ground_truth_report": reports[a.reference_id].text,
                 "C1_report": reports[a.candidate_id].text, "C1_source": a.source,
                 "C2_report": reports[b.candidate_id].text, "C2_source": b.source}
        if meta is None:
            built.update({"ground_truth_findings": [], "C1_findings": [], "C2_findings": []})
        case = _merge(meta, built, _DEFAULT_CASE_ORDER)
        cases.append(case)
        case_of[c.id] = case
    by_comparison = {c.id: c for c in comparisons}

    known = {a["username"]: a for a in block.get("annotators", []) if isinstance(a, dict)}
    per_rater: dict[int, list[Judgement]] = defaultdict(list)
    for j in judgements:
        per_rater[j.rater_id].append(j)
    ordered = sorted(per_rater, key=lambda r: (
        [a["username"] for a in known.values()].index(usernames[r])
        if usernames[r] in known else len(known), usernames[r]))
    annotator_files: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    n_judgements = 0
    for rater_id in ordered:
        username = usernames[rater_id]
        meta = known.get(username)
        user_id: Any = meta["user_id"] if meta else (
            username[len(USER_PREFIX):] if username.startswith(USER_PREFIX) else username)
        file = meta["file"] if meta else radpref.user_file_name(_file_safe(str(user_id)))
        annotations: dict[str, Any] = {}
        for j in per_rater[rater_id]:
            case = case_of[j.comparison_id]
            comparison = by_comparison[j.comparison_id]
            if j.rating_a is None or j.rating_b is None:
                warnings.append(f"{username}, case {case['id']!r}: not rated on both "
                                "candidates yet; left out")
                continue
            details = (j.details or {}).get(DETAILS_KEY) or {}
            built: dict[str, Any] = {}
            for cand, pair_id, rating in (("C1", comparison.pair_a_id, j.rating_a),
                                          ("C2", comparison.pair_b_id, j.rating_b)):
                errors, missing = _entries(records.get((rater_id, pair_id), []), case, cand,
                                           warnings, f"{username}, case {case['id']!r}, {cand}")
                built[cand] = _merge(details.get(cand), {
                    "finding_errors": errors, "missing_findings": missing, "rating": rating},
                    radpref.CANDIDATE_KEYS + ("rating_explanation",))
            annotations[case["id"]] = _merge(details or None, built,
                                             radpref.CANDIDATES + ("new_finding_indices",))
            n_judgements += 1
        raw = _merge(meta, {"user_id": user_id, "annotations": annotations},
                     ("user_id", "annotations"))
        annotator_files.append((file, raw, meta.get("style") if meta else None))
    files = radpref.files_of(cases, annotator_files, block.get("preferences_style"))
    return RadPrefExport(study_name=name, files=files,
                         n_cases=len(cases), n_annotators=len(annotator_files),
                         n_judgements=n_judgements, warnings=tuple(warnings))


def _entries(records: list[ErrorRecord], case: Mapping[str, Any], cand: str,
             warnings: list[str], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``finding_errors`` and ``missing_findings`` of one candidate from its records."""
    sections: dict[str, dict[str, Any]] = {"finding_errors": {}, "missing_findings": {}}
    for record in records:
        imported = (record.details or {}).get(DETAILS_KEY)
        if imported:
            # One entry may stand for several records (an error with several attributes).
            sections[imported["section"]].setdefault(imported["index"], imported["entry"])
            continue
        derived = _derived_entry(record, list(case.get(f"{cand}_findings", [])),
                                 list(case.get("ground_truth_findings", [])), warnings, where)
        if derived is None:
            continue
        section, index, entry = derived
        if index in sections[section]:
            # A second record on the same finding: an attribute adds to the first entry.
            first = sections[section][index]
            if "attributes" in first and "attributes" in entry:
                first["attributes"].update(entry["attributes"])
            continue
        sections[section][index] = entry
    return sections["finding_errors"], sections["missing_findings"]

