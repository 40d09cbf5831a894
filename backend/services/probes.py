"""Perturbation probes on a study's reference reports (VLScore paper, Tables 2-3; admin only).

:func:`run_probes` perturbs the study's distinct reference reports
(``backend.analysis.perturb``), scores each perturbed report as a candidate against its
original with the chosen metrics through ``backend.scoring.runner.score`` (the score cache
in the study database is used and filled, so a rerun computes nothing), and summarises per
metric key:

* the mean raw score per perturbation type;
* ``mean_significant`` / ``mean_insignificant``: the mean over the significant (insignificant)
  types of the per-type means of the *oriented* scores (lower-is-better keys negated), each
  type weighted equally so a type that applies to more reports does not dominate;
* ``delta = mean_insignificant - mean_significant``. A metric that follows radiologists
  penalises the significant edits more, so a good metric has a positive delta.

Metrics run in this process, so the probes are meant for the fast metrics (lexical ones, or
model metrics where a GPU is at hand); families that cannot run here are reported with their
reason instead of failing the whole run.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select

from backend.analysis.data import metric_direction
from backend.analysis.perturb import KIND_LABELS, KINDS, SIGNIFICANT, Perturbation, generate
from backend.services.errors import InvalidInput, ServiceError, require_admin
from backend.services.repo import get_study
from backend.services.types import Actor
from db.models import Pair, Report
from db.session import Database

log = logging.getLogger(__name__)

MAX_REPORTS_LIMIT = 5000


@dataclass(frozen=True)
class KindSummary:
    """One perturbation type.

    Attributes:
        kind: Type name (``backend.analysis.perturb.KINDS``).
        label: Human-readable name.
        significant: Clinically significant change or not.
        n: Reports perturbed.
        n_skipped: Reports with nothing to perturb for this type.
    """

    kind: str
    label: str
    significant: bool
    n: int
    n_skipped: int


@dataclass(frozen=True)
class ProbeRow:
    """One metric key's probe results.

    Attributes:
        key: Output key.
        higher_is_better: Direction (lower-is-better keys are negated for the summary).
        means: ``kind -> mean raw score`` (None when the type has no finite score).
        mean_significant: Mean of the oriented per-type means over significant types.
        mean_insignificant: The same over insignificant types.
        delta: ``mean_insignificant - mean_significant`` (positive is good).
    """

    key: str
    higher_is_better: bool
    means: dict[str, float | None]
    mean_significant: float | None
    mean_insignificant: float | None
    delta: float | None


@dataclass(frozen=True)
class ProbeExample:
    """A perturbed report with its scores (for display)."""

    kind: str
    original: str
    perturbed: str
    detail: str
    scores: dict[str, float | None]


@dataclass(frozen=True)
class ProbeResult:
    """Result of :func:`run_probes`.

    Attributes:
        study: Study name.
        seed: Seed of the perturbations and of the report sample.
        n_reports: Distinct reference reports probed.
        kinds: One summary per perturbation type, in ``KINDS`` order.
        rows: One row per scored key.
        unavailable: ``family -> reason`` for families that could not run here.
        examples: Every perturbed report with its scores.
    """

    study: str
    seed: int
    n_reports: int
    kinds: tuple[KindSummary, ...]
    rows: tuple[ProbeRow, ...]
    unavailable: dict[str, str]
    examples: tuple[ProbeExample, ...]


def _reference_reports(db: Database, study_name: str) -> list[str]:
    with db.read() as s:
        sid = get_study(s, study_name).id
        texts = s.scalars(
            select(Report.text)
            .join(Pair, Pair.reference_id == Report.id)
            .where(Pair.study_id == sid)
            .order_by(Pair.position)
        ).all()
    seen: dict[str, None] = {}
    for t in texts:
        if t.strip():
            seen.setdefault(t, None)
    return list(seen)


def _mean(values: Sequence[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def run_probes(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    metrics: Sequence[str],
    seed: int = 0,
    max_reports: int = 100,
    device: str = "auto",
) -> ProbeResult:
    """Perturb the study's references, score each against its original, summarise per key.

    Args:
        db: The database (also the score cache).
        actor: Must be an admin.
        study_name: Study name.
        metrics: Families or output keys (as for ``python -m backend score``).
        seed: Seed of the perturbations and of the sample of reports.
        max_reports: Most distinct reference reports to probe; a larger study is sampled
            with ``seed`` (kept in study order).
        device: Device for metrics that load models.

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: no metric, unknown metric or bad option, bad ``max_reports``, no
            reference report, or no perturbation possible.
        ServiceError: a metric failed while scoring (its message names it).
    """
    from backend.scoring.runner import MetricFailed, ScorePair, ScoringError, requested_keys, score

    require_admin(actor)
    if not metrics:
        raise InvalidInput("choose at least one metric")
    if not 1 <= max_reports <= MAX_REPORTS_LIMIT:
        raise InvalidInput(f"max_reports must be 1..{MAX_REPORTS_LIMIT}, got {max_reports}")
    reports = _reference_reports(db, study_name)
    if not reports:
        raise InvalidInput(f"study '{study_name}' has no reference report")
    if len(reports) > max_reports:
        keep = sorted(random.Random(f"probes:{seed}").sample(range(len(reports)), max_reports))
        reports = [reports[i] for i in keep]
    probe_set = generate(reports, seed=seed)
    perturbations: tuple[Perturbation, ...] = probe_set.perturbations
    if not perturbations:
        raise InvalidInput("none of the reports could be perturbed")

    pairs = [
        ScorePair(id=f"{p.index}:{p.kind}", reference=p.original, candidate=p.perturbed)
        for p in perturbations
    ]
    try:
        keys = requested_keys(list(metrics))
        table = score(pairs, list(metrics), db=db, device=device, skip_unavailable=True)
    except ScoringError as exc:
        raise InvalidInput(str(exc)) from None
    except MetricFailed as exc:
        raise ServiceError(str(exc)) from exc

    unavailable = table.unavailable
    scored_keys = [k for k in keys if k in table.columns and any(
        math.isfinite(v) for v in table.columns[k])]
    by_kind: dict[str, list[int]] = {k: [] for k in KINDS}
    for i, p in enumerate(perturbations):
        by_kind[p.kind].append(i)
    skipped_per_kind = {k: 0 for k in KINDS}
    for sk in probe_set.skipped:
        skipped_per_kind[sk.kind] += 1
    kinds = tuple(
        KindSummary(kind=k, label=KIND_LABELS[k], significant=SIGNIFICANT[k],
                    n=len(by_kind[k]), n_skipped=skipped_per_kind[k])
        for k in KINDS
    )

    rows: list[ProbeRow] = []
    for key in scored_keys:
        family = next((f for f, run in table.families.items() if key in run.keys), None)
        hib = metric_direction(key, family)
        col = table.columns[key]
        means = {k: _mean([col[i] for i in idx]) for k, idx in by_kind.items()}
        sign = 1.0 if hib else -1.0
        sig = _mean([sign * m for k, m in means.items() if SIGNIFICANT[k] and m is not None])
        insig = _mean([sign * m for k, m in means.items()
                       if not SIGNIFICANT[k] and m is not None])
        delta = insig - sig if sig is not None and insig is not None else None
        rows.append(ProbeRow(key=key, higher_is_better=hib, means=means, mean_significant=sig,
                             mean_insignificant=insig, delta=delta))

    examples = tuple(
        ProbeExample(
            kind=p.kind, original=p.original, perturbed=p.perturbed, detail=p.detail,
            scores={k: (table.columns[k][i] if math.isfinite(table.columns[k][i]) else None)
                    for k in scored_keys},
        )
        for i, p in enumerate(perturbations)
    )
    log.info("probes on %s: %d reports, %d perturbations, keys %s", study_name, len(reports),
             len(perturbations), ", ".join(scored_keys))
    return ProbeResult(study=study_name, seed=seed, n_reports=len(reports), kinds=kinds,
                       rows=tuple(rows), unavailable=dict(unavailable), examples=examples)
