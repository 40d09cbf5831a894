"""The one loader: a study's pairs, counted ratings and metric scores from the database.

Everything the analysis core (:mod:`backend.analysis.report`) and the Python API read about a
study comes through here, as the arrays and dataclasses of :mod:`backend.analysis.data`
(which ratings count and which signature per key: that module's docstring). The analysis
package itself never opens the database.

- :func:`load_ratings`: the pairs and the counted ratings (:class:`StudyRatings`).
- :func:`load_metric_columns`: per key, the values of the chosen signature
  (:class:`MetricColumn`).
- :func:`study_imports`: the study's score imports (:class:`StudyImports`).
- :func:`load_study`: all of it for ``correlate`` (:class:`StudyData`), with the RadCliQ
  refit's inputs and, on request, the pairs' report texts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from radconcord.backend.analysis.data import (
    COUNTS_MODES,
    N_CATEGORIES,
    AnalysisInputError,
    MetricColumn,
    ScoreImportInfo,
    StudyImports,
    StudyNotFound,
    StudyRatings,
    expand_metric_names,
    key_order,
    metric_direction,
)
from radconcord.backend.analysis.refit import RADCLIQ_INPUTS
from radconcord.db.models import (
    PAIR_STUDY,
    STUDY_STAGING,
    Adjudication,
    Assignment,
    Case,
    MetricScore,
    Pair,
    Rating,
    Report,
    ScoreImport,
    Study,
    User,
)
from radconcord.db.session import Database


@dataclass(frozen=True)
class StudyData:
    """A study as the analysis core takes it.

    Attributes:
        ratings: Pairs and counted ratings.
        scores: The requested (or every scored) key's column, in output order.
        refit_inputs: The RadCliQ refit's input columns the study has scores for (those in
            ``scores`` and the others, loaded without being correlated).
        texts: ``pair id -> (reference, candidate)`` when asked for (else empty).
    """

    ratings: StudyRatings
    scores: dict[str, MetricColumn]
    refit_inputs: dict[str, MetricColumn] = field(default_factory=dict)
    texts: dict[int, tuple[str, str]] = field(default_factory=dict)


def load_study(
    db: Database,
    study_name: str,
    *,
    metrics: Sequence[str] | None = None,
    counts: str = "raw",
    require_scores: bool = True,
    refit_inputs: bool = True,
    texts: bool = False,
) -> StudyData:
    """Read a study for ``correlate`` (or the API's :func:`radconcord.load_study`).

    Args:
        db: The database.
        study_name: Study name.
        metrics: Output keys or family names; ``None`` reads every key scored on the study.
        counts: ``"raw"`` or ``"adjudicated"`` (:func:`load_ratings`).
        require_scores: Raise when the study has no scores at all (``correlate`` needs some).
        refit_inputs: Also read the RadCliQ refit's inputs.
        texts: Also read each pair's reference and candidate text.

    Raises:
        StudyNotFound: no study of that name.
        AnalysisInputError: an empty ``metrics``, a named key without scores, no scores.
    """
    ratings = load_ratings(db, study_name, counts=counts)
    keys = expand_metric_names(metrics) if metrics else None
    if keys is not None and not keys:
        raise AnalysisInputError("no metric named")
    scores = load_metric_columns(db, ratings, keys)
    if not scores and require_scores:
        raise AnalysisInputError(
            f"study '{study_name}' has no metric scores (python -m backend score --study"
            f" {study_name} --metrics ...)"
        )
    refit: dict[str, MetricColumn] = {}
    if refit_inputs:
        extra = [k for k in RADCLIQ_INPUTS if k not in scores]
        refit = {**scores, **load_metric_columns(db, ratings, extra, required=False)}
        refit = {k: refit[k] for k in RADCLIQ_INPUTS if k in refit}
    return StudyData(ratings=ratings, scores=scores, refit_inputs=refit,
                     texts=pair_texts(db, ratings.study_id) if texts else {})


def pair_texts(db: Database, study_id: int) -> dict[int, tuple[str, str]]:
    """``pair id -> (reference text, candidate text)`` of every pair of a study."""
    ref = Report.__table__.alias("ref")
    cand = Report.__table__.alias("cand")
    with db.read() as s:
        return {
            row[0]: (row[1], row[2])
            for row in s.execute(
                select(Pair.id, ref.c.text, cand.c.text)
                .join(ref, ref.c.id == Pair.reference_id)
                .join(cand, cand.c.id == Pair.candidate_id)
                .where(Pair.study_id == study_id)
            )
        }


def study_imports(s: Session, study_id: int) -> StudyImports:
    """Every score import of a study, oldest first (one query, in the caller's session).

    Args:
        s: An open session.
        study_id: The study's id.
    """
    rows = s.scalars(select(ScoreImport).where(ScoreImport.study_id == study_id)
                     .order_by(ScoreImport.imported_at, ScoreImport.id)).all()
    return StudyImports(tuple(
        ScoreImportInfo(id=r.id, key=r.key, signature=r.signature,
                        signature_hash=r.signature_hash,
                        higher_is_better=bool(r.higher_is_better), description=r.description,
                        source=r.source, file_name=r.file_name, file_sha256=r.file_sha256,
                        n_pairs=r.n_pairs, n_missing=r.n_missing, imported_at=r.imported_at,
                        imported_by=r.imported_by)
        for r in rows))




def load_ratings(db: Database, study_name: str, counts: str = "raw") -> StudyRatings:
    """Read a study's pairs and counted ratings (see the module docstring for the rules).

    Args:
        db: The database.
        study_name: Study name.
        counts: ``"raw"`` (the raters' counts) or ``"adjudicated"`` (consensus counts of
            adjudicated pairs replace the raters' mean there).

    Raises:
        StudyNotFound: when no study has that name.
        AnalysisInputError: ``counts`` is not one of :data:`COUNTS_MODES`.
    """
    if counts not in COUNTS_MODES:
        raise AnalysisInputError(f"counts must be one of {', '.join(COUNTS_MODES)},"
                                 f" got {counts!r}")
    with db.begin() as s:
        study = s.scalars(select(Study).where(
            Study.name == study_name, Study.status != STUDY_STAGING)).one_or_none()
        if study is None:
            raise StudyNotFound(f"no study named '{study_name}'")
        study_id = study.id
        pairs = s.execute(
            select(Pair.id, Pair.position, Pair.opaque_id, Pair.source, Pair.input_hash,
                   Case.external_id)
            .join(Case, Case.id == Pair.case_id)
            .where(Pair.study_id == study_id, Pair.kind == PAIR_STUDY)
            .order_by(Pair.position)
        ).all()
        assignments = s.execute(
            select(Assignment.rater_id, Assignment.pair_id, Assignment.completed_at)
            .join(Pair, Pair.id == Assignment.pair_id)
            # Training items and hidden repeats never enter the study's statistics.
            .where(Assignment.study_id == study_id, Pair.kind == PAIR_STUDY)
        ).all()
        ratings = s.execute(
            select(Rating.rater_id, Rating.pair_id, Rating.category, Rating.significant,
                   Rating.count)
            .join(Pair, Pair.id == Rating.pair_id)
            .where(Pair.study_id == study_id, Pair.kind == PAIR_STUDY)
        ).all()
        rater_ids = {r.rater_id for r in ratings} | {a.rater_id for a in assignments}
        names = dict(
            s.execute(select(User.id, User.username).where(User.id.in_(rater_ids))).all()
        ) if rater_ids else {}
        agreed = s.execute(
            select(Adjudication.pair_id, Adjudication.counts)
            .join(Pair, Pair.id == Adjudication.pair_id)
            .where(Pair.study_id == study_id, Pair.kind == PAIR_STUDY)
        ).all() if counts == "adjudicated" else []

    pair_index = {p.id: i for i, p in enumerate(pairs)}
    assigned = {(a.rater_id, a.pair_id): a.completed_at is not None for a in assignments}
    rated = {(r.rater_id, r.pair_id) for r in ratings}
    counted = {key for key, done in assigned.items() if done}
    counted |= {key for key in rated if key not in assigned}
    raters = sorted({rid for rid, _ in counted}, key=lambda rid: (names.get(rid, ""), rid))
    rater_index = {rid: i for i, rid in enumerate(raters)}
    rater_counts = np.full((len(raters), len(pairs), N_CATEGORIES, 2), np.nan)
    for rid, pid in counted:
        rater_counts[rater_index[rid], pair_index[pid]] = 0.0
    for r in ratings:
        if (r.rater_id, r.pair_id) in counted:
            rater_counts[rater_index[r.rater_id], pair_index[r.pair_id], r.category - 1,
                         int(bool(r.significant))] = float(r.count)
    # Raters planned per pair: its assignments (done or not); a pair rated without an
    # assignment (imported ratings) plans at least the raters it has.
    planned = np.zeros(len(pairs), dtype=np.int64)
    for a in assignments:
        planned[pair_index[a.pair_id]] += 1
    planned = np.maximum(planned, np.isfinite(rater_counts[:, :, 0, 0]).sum(axis=0))
    consensus = None
    if counts == "adjudicated":
        consensus = np.full((len(pairs), N_CATEGORIES, 2), np.nan)
        for pid, cells in agreed:
            consensus[pair_index[pid]] = 0.0
            for key, n in (cells or {}).items():
                category, significant = (int(part) for part in str(key).split(":"))
                consensus[pair_index[pid], category - 1, significant] = float(n)
    return StudyRatings(
        study=study_name,
        study_id=study_id,
        pair_ids=np.array([p.id for p in pairs], dtype=np.int64),
        positions=np.array([p.position for p in pairs], dtype=np.int64),
        opaque_ids=tuple(p.opaque_id for p in pairs),
        sources=tuple(p.source or "" for p in pairs),
        cases=tuple(p.external_id for p in pairs),
        input_hashes=tuple(p.input_hash for p in pairs),
        raters=tuple(names.get(rid, f"user-{rid}") for rid in raters),
        counts=rater_counts,
        counts_mode=counts,
        consensus=consensus,
        planned=planned,
    )




def load_metric_columns(
    db: Database,
    ratings: StudyRatings,
    keys: Sequence[str] | None = None,
    *,
    required: bool = True,
) -> dict[str, MetricColumn]:
    """Per-pair metric values for the study, one chosen signature per key.

    Args:
        db: The database.
        ratings: The study (from :func:`load_ratings`).
        keys: Output keys to load; ``None`` loads every key scored on the study's pairs.
        required: Raise when a requested key has no scores (else skip it silently).

    Raises:
        AnalysisInputError: when a requested key has no score on any pair of the study.
    """
    with db.begin() as s:
        stmt = (
            select(MetricScore.input_hash, MetricScore.key, MetricScore.family,
                   MetricScore.signature_hash, MetricScore.signature, MetricScore.value,
                   MetricScore.created_at)
            .join(Pair, Pair.input_hash == MetricScore.input_hash)
            .where(Pair.study_id == ratings.study_id)
            .distinct()
        )
        if keys is not None:
            stmt = stmt.where(MetricScore.key.in_(list(keys)))
        rows = s.execute(stmt).all()
        imports = study_imports(s, ratings.study_id)

    pairs_of_hash: dict[str, list[int]] = defaultdict(list)
    for i, h in enumerate(ratings.input_hashes):
        pairs_of_hash[h].append(i)
    by_key: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if imports.counts(row.key, row.family, row.signature_hash):
            by_key[row.key][row.signature_hash].append(row)

    wanted = list(keys) if keys is not None else sorted(by_key, key=key_order)
    missing = [k for k in wanted if k not in by_key]
    if missing and required:
        raise AnalysisInputError(
            f"no scores for {', '.join(missing)} on study '{ratings.study}'"
            f" (score it first: python -m backend score --study {ratings.study}"
            f" --metrics {','.join(missing)})"
        )
    out: dict[str, MetricColumn] = {}
    for key in wanted:
        if key not in by_key:
            continue
        signatures = by_key[key]

        def rank(sig_hash: str, signatures: dict[str, list[Any]] = signatures) -> tuple:
            group = signatures[sig_hash]
            coverage = sum(len(pairs_of_hash[r.input_hash]) for r in group)
            newest = max(r.created_at for r in group)
            return (coverage, newest.timestamp() if newest else 0.0, sig_hash)

        # An imported key reads its latest import whose rows are there, whichever covers
        # more pairs: importing a file is the lead's explicit choice.
        imported = imports.chosen(key, signatures)
        chosen = imported.signature_hash if imported is not None else max(signatures, key=rank)
        group = signatures[chosen]
        values = np.full(ratings.n_pairs, np.nan)
        for r in group:
            for i in pairs_of_hash[r.input_hash]:
                values[i] = np.nan if r.value is None else float(r.value)
        family = group[0].family
        out[key] = MetricColumn(
            key=key,
            family=family,
            values=values,
            signature=group[0].signature,
            signature_hash=chosen,
            higher_is_better=(imported.higher_is_better if imported is not None
                              else metric_direction(key, family)),
            n_signatures=len(signatures),
            imported=imported,
        )
    return out
