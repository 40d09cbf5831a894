"""Scoring use cases for the UI: metric catalogue, scoring jobs, a study's scores.

Pages call these functions and render the plain dataclasses they return. Scoring itself runs
in the worker process (``python -m backend worker``, job kind ``score``); the UI only
queues jobs and reads results, so it never loads a model. The queued job is a
:class:`~backend.services.jobs.JobView` like every other kind's, read and cancelled through
:mod:`backend.services.jobs`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import MetricUnavailable
from radconcord.backend.services.evaluation.study_data import study_imports
from radconcord.backend.services.jobs import JobView, enqueue_job, study_id
from radconcord.backend.types import Actor
from radconcord.db.models import PAIR_STUDY, MetricScore, Pair

if TYPE_CHECKING:
    from radconcord.db.session import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetricInfo:
    """One metric family as shown in catalogues.

    Attributes:
        family: Registry name (``bleu``).
        kind: lexical | embedding | clinical | composite | image | learned.
        keys: Output keys.
        directions: ``key -> higher_is_better`` (from the registry, also for a broken metric).
        available: Whether it can run here.
        reason: Why not, when unavailable.
        signature: Default settings signature, when cheap to compute.
        needs_model: Whether it loads weights.
        needs_image: Whether it needs images.
        citation: Short citation.
        origin: ``None`` for a built-in family; for a plug-in, its package and entry point.
    """

    family: str
    kind: str
    keys: tuple[str, ...]
    directions: dict[str, bool] = field(default_factory=dict)
    available: bool = False
    reason: str | None = None
    signature: str | None = None
    needs_model: bool = False
    needs_image: bool = False
    citation: str = ""
    origin: str | None = None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def describe_family(family: str) -> MetricInfo:
    """Catalogue entry for one family; never raises for a broken or missing metric."""
    entry = registry.ENTRIES[family]
    # From the registry: known even when the metric's code cannot be imported here.
    directions = registry.directions(entry.keys)
    try:
        metric = registry.create(family)
    except ModuleNotFoundError as exc:
        return MetricInfo(family, entry.kind, entry.keys, directions=directions,
                          reason=f"not installed: {_one_line(exc)}", origin=entry.origin)
    except MetricUnavailable as exc:
        # Its own words (a plug-in that could not be loaded says which and why).
        return MetricInfo(family, entry.kind, entry.keys, directions=directions,
                          reason=str(exc), origin=entry.origin)
    except Exception as exc:
        # Whatever breaks (a syntax error in a metric module, a bad default) becomes a reason
        # shown in the UI and the CLI rather than a crash of the whole catalogue.
        return MetricInfo(family, entry.kind, entry.keys, directions=directions,
                          reason=_one_line(exc), origin=entry.origin)
    spec = metric.spec
    try:
        reason = metric.availability()
    except Exception as exc:
        reason = f"availability check failed: {_one_line(exc)}"
    try:
        signature: str | None = metric.signature()
    except Exception as exc:
        # Some signatures need loaded state (a checkpoint hash); the catalogue can do without.
        log.debug("signature of %s not cheap: %s", family, exc)
        signature = None
    return MetricInfo(
        family=family,
        kind=entry.kind,
        keys=entry.keys,
        directions=directions,
        available=reason is None,
        reason=reason,
        signature=signature,
        needs_model=bool(getattr(spec, "needs_model", False)),
        needs_image=bool(getattr(spec, "needs_image", False)),
        citation=str(getattr(spec, "citation", "")),
        origin=entry.origin,
    )


def metric_catalog() -> list[MetricInfo]:
    """Every registered family, available or with the reason it is not (registry order).

    Plug-ins come after the built-ins; one that could not be loaded is listed with no keys
    and its error. Plug-ins refused for a name clash are not families: see
    :func:`ignored_plugins`.
    """
    return [describe_family(f) for f in registry.ENTRIES]


def ignored_plugins() -> list[str]:
    """One message per metric plug-in refused for a name clash (naming both origins)."""
    return list(registry.ignored_plugins())


#: Where a score job computes its pairs: on the worker itself, or on Ray actors.
SCORE_ENGINES = ("local", "ray")


def score_engine_params(engine: str, *, ray_address: str | None = None,
                        workers: int | None = None) -> dict[str, Any] | None:
    """The ``engine`` param of a score job: ``None`` for ``local`` (the default, left out of
    the params so existing jobs read the same), else ``{"name": "ray", "address", "workers"}``.

    Raises:
        InvalidInput: an unknown engine, Ray settings for the local engine, or ``workers``
            not a whole number of at least 1.
    """
    name = str(engine or "local").strip().lower()
    if name not in SCORE_ENGINES:
        raise InvalidInput(f"engine: expected one of {', '.join(SCORE_ENGINES)}, got {engine!r}")
    address = (ray_address or "").strip() or None
    if name == "local":
        if address is not None or workers is not None:
            raise InvalidInput("engine: a Ray address or a number of Ray workers needs"
                               " engine='ray'")
        return None
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise InvalidInput(f"workers: expected a whole number of at least 1, got {workers!r}")
    return {"name": "ray", "address": address, "workers": workers}


def ray_where(spec: Mapping[str, Any]) -> str:
    """``(ADDR, N actors)`` of a Ray ``engine`` job param (``a local Ray instance`` without an
    address, ``one actor per CPU`` without a number): the one wording of the job's result, the
    CLI and the Metrics page."""
    where = spec.get("address") or "a local Ray instance"
    n = spec.get("workers")
    return f"({where}, {n} actors)" if n else f"({where}, one actor per CPU)"


def enqueue_scoring(
    db: Database,
    actor: Actor,
    study_name: str,
    metrics: Sequence[str],
    options: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    reuse_unfinished: bool = False,
    chunks: int = 1,
    engine: str = "local",
    ray_address: str | None = None,
    workers: int | None = None,
) -> JobView:
    """Queue a job scoring ``study_name`` with ``metrics`` (admin only; kind ``score``).

    ``reuse_unfinished``: hand back a score job of the study still queued or running
    instead of queuing another (see :func:`backend.services.jobs.enqueue_job`).

    ``chunks``: above 1, the job splits the study's pairs into that many ``score_chunk``
    jobs that several workers take at once (:mod:`backend.runner.kinds.score`); watch them
    together with :func:`backend.services.jobs.job_groups`.

    ``engine``: ``local`` (the worker computes the pairs itself) or ``ray``: the worker that
    takes the job drives it, and Ray actors compute the pairs (``ray_address``: the cluster
    to join, default a local Ray instance on the worker's machine; ``workers``: actors to
    start; see docs/scale_out.md). Not with ``chunks``: they are two ways of sharing one
    study's scoring out.

    Options are checked against each family's known options now, so a typo fails here and
    not later in the worker.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: unknown metric or option, ``chunks`` not a whole number >= 1, an
            unknown engine, Ray settings without ``engine="ray"``, or Ray with chunks.
    """
    from radconcord.backend.scoring.jobs import validate_request
    from radconcord.backend.scoring.runner import ScoringError

    require_admin(actor)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise InvalidInput(f"chunks: expected a whole number of at least 1, got {chunks!r}")
    engine_params = score_engine_params(engine, ray_address=ray_address, workers=workers)
    if engine_params is not None and chunks > 1:
        raise InvalidInput("engine: a job on Ray is not split into chunk jobs; choose one way"
                           " (chunks for several workers, Ray for a cluster)")
    study_id(db, study_name)  # NotFound before any metric name is looked at
    try:
        names, opts = validate_request(metrics, options)
    except ScoringError as exc:
        raise InvalidInput(str(exc)) from None
    for family, values in opts.items():
        try:
            registry.create(family, **values)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"metric '{family}': {exc}") from None
        except ImportError:
            pass  # the worker reports the family as unavailable, with its reason
    params: dict[str, Any] = {"metrics": names, "options": opts}
    if chunks > 1:
        params["chunks"] = chunks
    if engine_params is not None:
        params["engine"] = engine_params
    return enqueue_job(
        db, actor, kind="score", params=params,
        study_name=study_name, reuse_unfinished=reuse_unfinished,
    )


@dataclass(frozen=True)
class StudyScores:
    """A study's metric values, one row per pair.

    Attributes:
        study: Study name.
        keys: Output keys with at least one value, in registry order.
        directions: ``key -> higher_is_better`` (from the registry's classes when importable).
        signatures: ``key -> signature`` the values come from (the most recently computed).
        rows: ``{"pair_id", "position", "source", key: value...}`` in position order;
            ``nan`` where a pair has no value under the chosen signature.
    """

    study: str
    keys: tuple[str, ...]
    directions: dict[str, bool]
    signatures: dict[str, str]
    rows: list[dict[str, Any]]


def study_scores(db: Database, actor: Actor, study_name: str) -> StudyScores:
    """Per-pair values of every key scored for the study (admin only).

    For each key the signature whose values were most recently computed for this study's
    pairs is used, so changing an option and rescoring switches the dashboard to the new
    numbers while the old ones stay cached. A key imported from a file (``import-scores``)
    reads its latest import, in the direction that import gave; values another study imported
    for pairs of the same content are not this study's.

    Raises:
        NotFound: no such study.
    """
    require_admin(actor)
    sid = study_id(db, study_name)
    with db.begin() as s:
        imports = study_imports(s, sid)
        hashes = select(Pair.input_hash).where(Pair.study_id == sid).scalar_subquery()
        latest: dict[str, tuple[Any, str, str]] = {}
        present: dict[str, dict[str, str]] = {}
        for key, family, sig_hash, sig, newest in s.execute(
            select(
                MetricScore.key,
                MetricScore.family,
                MetricScore.signature_hash,
                func.min(MetricScore.signature),
                func.max(MetricScore.created_at),
            )
            .where(MetricScore.input_hash.in_(hashes))
            .group_by(MetricScore.key, MetricScore.family, MetricScore.signature_hash)
        ):
            # Another study's imported values for pairs of the same content are not ours.
            if not imports.counts(key, family, sig_hash):
                continue
            present.setdefault(key, {})[sig_hash] = sig
            best = latest.get(key)
            # Ties (same timestamp) break on the hash so the choice is deterministic.
            if best is None or (newest, sig_hash) > (best[0], best[1]):
                latest[key] = (newest, sig_hash, sig)
        for key, sigs in present.items():
            chosen = imports.chosen(key, sigs)
            if chosen is not None:  # an imported key reads its latest import
                latest[key] = (None, chosen.signature_hash, sigs[chosen.signature_hash])
        pairs = s.execute(
            select(Pair.id, Pair.position, Pair.source, Pair.input_hash)
            .where(Pair.study_id == sid, Pair.kind == PAIR_STUDY)
            .order_by(Pair.position)
        ).all()
        values: dict[tuple[str, str], float] = {}
        for key, (_, sig_hash, _) in latest.items():
            for ih, value in s.execute(
                select(MetricScore.input_hash, MetricScore.value).where(
                    MetricScore.key == key,
                    MetricScore.signature_hash == sig_hash,
                    MetricScore.input_hash.in_(hashes),
                )
            ):
                values[(key, ih)] = math.nan if value is None else float(value)
    order = {k: i for i, k in enumerate(registry.KEY_TO_FAMILY)}
    keys = tuple(sorted(latest, key=lambda k: (order.get(k, len(order)), k)))
    imported = imports.latest
    rows = [
        {
            "pair_id": pid,
            "position": pos,
            "source": src,
            **{k: values.get((k, ih), math.nan) for k in keys},
        }
        for pid, pos, src, ih in pairs
    ]
    return StudyScores(
        study=study_name,
        keys=keys,
        directions={**_directions(study_name, [k for k in keys if k not in imported]),
                    **{k: imported[k].higher_is_better for k in keys if k in imported}},
        signatures={k: latest[k][2] for k in keys},
        rows=rows,
    )


def _directions(study_name: str, keys: Sequence[str]) -> dict[str, bool]:
    """Directions from the registry (no metric code is imported); an unknown key is an error."""
    try:
        return registry.directions(keys)
    except registry.UnknownMetric as exc:
        raise InvalidInput(f"study {study_name!r}: scores stored for {exc}") from None
