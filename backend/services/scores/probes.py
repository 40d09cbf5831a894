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

Pages never run the metrics: :func:`enqueue_probes` checks the request (admin, study, metric
names, sample size) and queues a ``probes`` job; the worker runs :func:`run_probes`
(``backend.runner.kinds.probes``) with its warm metric pool and stores
:func:`result_to_json` as the job's result, which the page turns back into a
:class:`ProbeResult` with :func:`result_from_json`. Families that cannot run on the worker
are reported with their reason instead of failing the whole run.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from radconcord.backend.analysis.data import metric_direction
from radconcord.backend.analysis.perturb import (
    KIND_LABELS,
    KINDS,
    SIGNIFICANT,
    Perturbation,
    generate,
)
from radconcord.backend.errors import InvalidInput, ServiceError, require_admin
from radconcord.backend.services.repo import get_study
from radconcord.backend.types import Actor
from radconcord.db.models import PAIR_STUDY, Pair, Report
from radconcord.db.session import Database

if TYPE_CHECKING:
    from radconcord.backend.scoring.runner import MetricPool
    from radconcord.backend.services.jobs import JobView

log = logging.getLogger(__name__)

MAX_REPORTS_LIMIT = 5000
#: The job kind that runs :func:`run_probes` on the worker.
KIND = "probes"
ProgressFn = Callable[[int, int, str], None]


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
            .where(Pair.study_id == sid, Pair.kind == PAIR_STUDY)
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


def _check_request(
    db: Database, actor: Actor, *, study_name: str, metrics: Sequence[str], max_reports: int
) -> tuple[list[str], list[str]]:
    """Everything that can be checked without a metric: ``(metric names, reference reports)``.

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: no or unknown metric, bad ``max_reports``, no reference report.
    """
    from radconcord.backend.scoring.runner import ScoringError, requested_keys

    require_admin(actor)
    names = [m.strip() for m in metrics if m and m.strip()]
    if not names:
        raise InvalidInput("choose at least one metric")
    if not isinstance(max_reports, int) or not 1 <= max_reports <= MAX_REPORTS_LIMIT:
        raise InvalidInput(f"max_reports must be 1..{MAX_REPORTS_LIMIT}, got {max_reports}")
    try:
        requested_keys(names)
    except ScoringError as exc:
        raise InvalidInput(str(exc)) from None
    reports = _reference_reports(db, study_name)
    if not reports:
        raise InvalidInput(f"study '{study_name}' has no reference report")
    return names, reports


def enqueue_probes(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    metrics: Sequence[str],
    seed: int = 0,
    max_reports: int = 100,
    device: str | None = None,
) -> JobView:
    """Check a probe request and queue it as a ``probes`` job for the worker.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: Study name.
        metrics: Families or output keys.
        seed: Seed of the perturbations and of the sample of reports.
        max_reports: Most distinct reference reports to probe.
        device: Only a worker on this device may run it (``None``: any worker).

    Returns:
        The queued job.

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: no or unknown metric, bad ``max_reports``, no reference report.
    """
    from radconcord.backend.services import jobs

    names, _ = _check_request(db, actor, study_name=study_name, metrics=metrics,
                              max_reports=max_reports)
    params = {"study": study_name, "metrics": names, "seed": int(seed),
              "max_reports": int(max_reports)}
    return jobs.enqueue_job(db, actor, kind=KIND, params=params, study_name=study_name,
                            device=device)


def run_probes(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    metrics: Sequence[str],
    seed: int = 0,
    max_reports: int = 100,
    device: str = "auto",
    progress: ProgressFn | None = None,
    pool: MetricPool | None = None,
) -> ProbeResult:
    """Perturb the study's references, score each against its original, summarise per key.

    Runs the metrics in the calling process: the worker's ``probes`` kind calls it (pages
    call :func:`enqueue_probes`).

    Args:
        db: The database (also the score cache).
        actor: Must be an admin.
        study_name: Study name.
        metrics: Families or output keys (as for ``python -m backend score``).
        seed: Seed of the perturbations and of the sample of reports.
        max_reports: Most distinct reference reports to probe; a larger study is sampled
            with ``seed`` (kept in study order).
        device: Device for metrics that load models.
        progress: ``progress(done, total, message)`` after each scored batch; it may raise
            to stop (scores already stored stay in the cache).
        pool: Warm metric instances to reuse (the worker's).

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: no metric, unknown metric or bad option, bad ``max_reports``, no
            reference report, or no perturbation possible.
        ServiceError: a metric failed while scoring (its message names it).
    """
    from radconcord.backend.scoring.runner import (
        MetricFailed,
        ScorePair,
        ScoringError,
        requested_keys,
        score,
    )

    names, reports = _check_request(db, actor, study_name=study_name, metrics=metrics,
                                    max_reports=max_reports)
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
        keys = requested_keys(names)
        table = score(pairs, names, db=db, device=device, skip_unavailable=True,
                      progress=progress, pool=pool)
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


def result_to_json(result: ProbeResult) -> dict[str, Any]:
    """A probe result as plain JSON data (the ``probes`` job's result).

    Args:
        result: What :func:`run_probes` returned.
    """
    return asdict(result)


def result_from_json(data: Mapping[str, Any]) -> ProbeResult:
    """The :class:`ProbeResult` stored by :func:`result_to_json` (for the page).

    Args:
        data: A finished ``probes`` job's result.

    Raises:
        InvalidInput: the data is not a probe result (a field is missing).
    """
    try:
        return ProbeResult(
            study=data["study"], seed=int(data["seed"]), n_reports=int(data["n_reports"]),
            kinds=tuple(KindSummary(**k) for k in data["kinds"]),
            rows=tuple(ProbeRow(**r) for r in data["rows"]),
            unavailable=dict(data["unavailable"]),
            examples=tuple(ProbeExample(**e) for e in data["examples"]),
        )
    except (KeyError, TypeError) as exc:
        raise InvalidInput(f"the job's result is not a probe result ({exc})") from None
