"""What scoring jobs need from a study: the request's metric names and a study's pairs.

The queue itself is :mod:`backend.jobs` (kind ``score``, :mod:`backend.runner.kinds.score`);
this module keeps the scoring-specific parts that the job kind, the services and the
``score --study`` command share: checking a request without importing any metric, and
reading a study's pairs as runner inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from radconcord.backend import config
from radconcord.backend.metrics import registry
from radconcord.backend.scoring.runner import ScorePair, ScoringError
from radconcord.db.models import STUDY_STAGING, Image, Pair, Report, Study

if TYPE_CHECKING:
    from radconcord.db.session import Database


def validate_request(
    metrics: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Check metric names and option families without importing any metric.

    Raises:
        ScoringError: unknown name, nothing requested, options for a family not requested,
            or values of the wrong type (a job's params are JSON from anywhere).
    """
    if isinstance(metrics, str | bytes) or not all(isinstance(m, str) for m in metrics):
        raise ScoringError(f"metrics: expected a list of metric names, got {metrics!r}")
    if options is not None and not (
        isinstance(options, Mapping) and all(isinstance(v, Mapping) for v in options.values())
    ):
        raise ScoringError(f"options: expected {{metric: {{option: value}}}}, got {options!r}")
    names = [m.strip() for m in metrics if m and m.strip()]
    try:
        families = registry.resolve(names)
    except registry.UnknownMetric as exc:
        raise ScoringError(str(exc)) from None
    if not families:
        raise ScoringError("no metrics requested")
    opts = {str(k): dict(v) for k, v in (options or {}).items()}
    stray = sorted(set(opts) - set(families))
    if stray:
        raise ScoringError(f"options given for metric(s) not requested: {', '.join(stray)}")
    return names, opts


def study_id_by_name(session: Session, name: str) -> int | None:
    """The id of the study called ``name`` (a study still being imported has none yet)."""
    return session.scalar(
        select(Study.id).where(Study.name == name, Study.status != STUDY_STAGING)
    )


def _reading(db: Database) -> Any:
    """A read-only transaction where the database offers one (no SQLite write lock)."""
    read = getattr(db, "read", None)
    return read() if read is not None else db.begin()


def study_pairs(db: Database, study_id: int, *, data_dir: Path | None = None) -> list[ScorePair]:
    """The pairs of a study as runner inputs, in position order.

    Texts come from ``Report``, image paths from ``Image`` (relative to the data folder), and
    the cache key is the ``input_hash`` stored on the ``Pair`` row, so that the dashboard
    finds what the runner stores.
    """
    base = data_dir or config.data_dir()
    # A read of every pair of a large study: it must not hold the write lock meanwhile.
    with _reading(db) as s:
        ref = Report.__table__.alias("ref")
        cand = Report.__table__.alias("cand")
        rows = s.execute(
            select(Pair.id, Pair.case_id, Pair.input_hash, ref.c.text, cand.c.text)
            .join(ref, ref.c.id == Pair.reference_id)
            .join(cand, cand.c.id == Pair.candidate_id)
            .where(Pair.study_id == study_id)
            .order_by(Pair.position)
        ).all()
        case_ids = sorted({r[1] for r in rows})
        images: dict[int, list[tuple[str, str]]] = {}
        for start in range(0, len(case_ids), 500):
            chunk = case_ids[start : start + 500]
            for case_id, path, sha in s.execute(
                select(Image.case_id, Image.path, Image.sha256)
                .where(Image.case_id.in_(chunk))
                .order_by(Image.id)
            ):
                images.setdefault(case_id, []).append((path, sha))
    out: list[ScorePair] = []
    for pair_id, case_id, ih, ref_text, cand_text in rows:
        imgs = images.get(case_id, [])
        out.append(
            ScorePair(
                id=str(pair_id),
                reference=ref_text,
                candidate=cand_text,
                images=tuple(base / p for p, _ in imgs),
                image_sha256s=tuple(sha for _, sha in imgs),
                stored_hash=ih,
            )
        )
    return out
