"""Build a ReXVal-style rating study from metric-oracle candidates (admin only).

ReXVal (Yu et al. 2023) paired test reports with the corpus report that a metric scores best
(its *metric-oracle*). :func:`build_study` does the same: it loads the test reports and the
corpus (a CSV/JSONL file or ``"iu"``, the Indiana University reports), runs
:func:`backend.datasets.oracle.build_oracle`, creates the study through
:func:`backend.services.transfer.imports.import_cases` (one case per test report, one pair per
distinct picked candidate, source label ``oracle:<keys>``) with the whole oracle manifest in
the study's provenance, and opens it for rating: raters given are assigned through
:func:`backend.services.study_admin.assignment.assign_raters`, which shuffles every rater's pairs
with the
study seed. :func:`export_build` writes ReXVal files, JSONL and a Hugging Face dataset folder
plus one ``manifest.json`` (which metric picked which candidate, metric signatures, seeds,
corpus sha256, candidate-stage settings).

Everything that can fail on user input (name taken, unknown rater, unknown metric, unreadable
corpus file) is checked before the scoring work. Pages call :func:`enqueue_build`, which runs
those checks and queues a ``build_oracle`` job: the metrics run on the worker
(``backend.runner.kinds.build_oracle``), never in the web process. The study is written by the
staged import (invisible until complete), and a job's build records the job id in the
study's provenance, so a build retried after a kill -9 either starts over (the killed run's
staging study is removed) or, when the killed run had already finished the study, completes
the rater assignment and reports that study: never a second study, never a half one.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from radconcord.backend import clock, config
from radconcord.backend.datasets import corpus as corpus_mod
from radconcord.backend.datasets import oracle
from radconcord.backend.datasets.corpus import Corpus, CorpusReport
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.imaging.deid import DEID_PROFILE
from radconcord.backend.services import job_inputs
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin import assignment
from radconcord.backend.services.transfer import exports, imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput
from radconcord.backend.util import MANIFEST, free_output_dir, publish_dir
from radconcord.db.models import STUDY_STAGING, Assignment, Case, Pair, Study, User
from radconcord.db.session import Database

if TYPE_CHECKING:
    from radconcord.backend.scoring.runner import MetricPool
    from radconcord.backend.services.jobs import JobView

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int, str], None]
PROVENANCE_KIND = "metric-oracle"
#: The job kind that runs :func:`build_study` on the worker.
KIND = "build_oracle"
#: Provenance key of the job that built the study (a retried job finds its own study).
JOB_KEY = "job_id"
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class BuildSummary:
    """What :func:`build_study` created."""

    study_name: str
    n_tests: int
    n_cases: int
    n_pairs: int
    n_picks_before_dedup: int
    metrics: tuple[str, ...]
    sources: dict[str, int]
    engine: str
    seconds: float
    corpus_sha256: str
    n_assigned: int = 0
    tests_without_candidate: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BundleSummary:
    """What :func:`export_build` wrote."""

    out_dir: Path
    files: tuple[str, ...]
    n_pairs: int


def select_tests(tests: Corpus, *, limit: int | None, seed: int) -> list[CorpusReport]:
    """The test reports to use.

    A file keeps its order and ``limit`` takes the first rows; the IU corpus used as its own
    test set is sampled with ``seed`` (kept in corpus order), as ReXVal sampled its tests.
    """
    reports = list(tests.reports)
    if limit is None or limit >= len(reports):
        return reports
    if limit < 1:
        raise InvalidInput(f"--limit-tests must be at least 1 (got {limit})")
    if tests.name == "iu":
        chosen = set(random.Random(seed).sample(range(len(reports)), limit))
        return [r for i, r in enumerate(reports) if i in chosen]
    return reports[:limit]


def _load(spec: Corpus | str | Path, what: str) -> Corpus:
    if isinstance(spec, Corpus):
        return spec
    if not str(spec).strip():
        raise InvalidInput(f"no {what} given")
    return corpus_mod.load_corpus(spec)


def _check_name(db: Database, study_name: str) -> str:
    name = (study_name or "").strip()
    if not name:
        raise InvalidInput("study name is empty")
    if len(name) > 128:
        raise InvalidInput("study name is longer than 128 characters")
    with db.begin() as s:
        if s.scalar(select(Study.id).where(Study.name == name)) is not None:
            raise InvalidInput(f"study {name!r} already exists; choose another name")
    return name


def _check_raters(db: Database, raters: Sequence[str], raters_per_pair: int) -> None:
    if raters_per_pair < 1:
        raise InvalidInput("raters per pair must be at least 1")
    if not raters:
        return
    if raters_per_pair > len(raters):
        raise InvalidInput(f"raters per pair ({raters_per_pair}) exceeds the number of raters "
                           f"({len(raters)})")
    with db.begin() as s:
        rows = dict(s.execute(select(User.username, User.role).where(
            User.username.in_(list(raters)), User.active.is_(True))).all())
    for name in raters:
        if rows.get(name) != "rater":
            raise InvalidInput(f"{name!r} is not an active rater account")


def _check_options(
    metrics: Sequence[str], *, per_metric: int, top_k: int | None, engine: str | oracle.Engine,
    limit_tests: int | None, chunk_size: int,
) -> None:
    """The oracle settings that can be checked without a metric or a corpus."""
    try:
        oracle.resolve_keys(metrics)
    except oracle.OracleError as exc:
        raise InvalidInput(str(exc)) from None
    # Worded as the oracle words them (the command line shows the same errors).
    if per_metric < 1:
        raise InvalidInput(f"per-metric must be at least 1 (got {per_metric})")
    if top_k is not None and top_k < per_metric:
        raise InvalidInput(f"top-k ({top_k}) must be at least per-metric ({per_metric})")
    if isinstance(engine, str) and engine not in ENGINES:
        raise InvalidInput(f"unknown engine {engine!r} (expected {' or '.join(ENGINES)})")
    if limit_tests is not None and limit_tests < 1:
        raise InvalidInput(f"--limit-tests must be at least 1 (got {limit_tests})")
    if chunk_size < 1:
        raise InvalidInput(f"chunk size must be at least 1 (got {chunk_size})")


def _corpus_spec(spec: str | Path, what: str) -> str:
    """``"iu"`` or the absolute path of a corpus file that parses (checked now, named)."""
    text = str(spec).strip()
    if not text:
        raise InvalidInput(f"no {what} given")
    if text == "iu":
        # The IU reports come from a package fetched on first use: the worker loads them.
        return text
    path = Path(text).expanduser().resolve()
    corpus_mod.load_corpus(path)
    return str(path)


def enqueue_build(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    tests: str | Path,
    corpus: str | Path,
    metrics: Sequence[str],
    per_metric: int = 1,
    top_k: int | None = oracle.DEFAULT_TOP_K,
    engine: str = "local",
    seed: int = 0,
    limit_tests: int | None = None,
    raters: Sequence[str] = (),
    raters_per_pair: int = 1,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    description: str = "",
    chunk_size: int = oracle.DEFAULT_CHUNK,
    upload_dir: Path | None = None,
    device: str | None = None,
) -> JobView:
    """Check a build request and queue it as a ``build_oracle`` job for the worker.

    Everything :func:`build_study` would refuse before scoring is refused here, files
    included (a corpus file is parsed now, so its errors name the file and line); only the
    metrics' own run is left to the worker.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: Name of the new study (must be free, and not claimed by a queued job).
        tests: ``"iu"`` or a CSV/JSONL file of test reports on the server.
        corpus: ``"iu"`` or a CSV/JSONL file of candidate reports on the server.
        metrics: Families or output keys.
        per_metric: Best candidates per key and test report.
        top_k: Candidate-stage size (``None``: exhaustive search).
        engine: ``"local"`` or ``"ray"``.
        seed: Test sampling (IU), study seed and rater shuffles.
        limit_tests: Use at most this many test reports.
        raters: Rater usernames to assign once the study exists.
        raters_per_pair: Raters each pair should get.
        options: ``family -> {option: value}`` for the metrics.
        description: Study description (a default one is written when empty).
        chunk_size: Pairs per scoring call / Ray task.
        upload_dir: A folder from :func:`job_inputs.new_upload_dir` holding uploaded files;
            the job removes it when it ends.
        device: Only a worker on this device may run it (``None``: any worker).

    Returns:
        The queued job.

    Raises:
        PermissionDenied: The actor is not an admin.
        InvalidInput: Bad name, files, metrics, k or raters; nothing is queued.
    """
    from radconcord.backend.services import jobs

    require_admin(actor)
    name = _check_name(db, study_name)
    job_inputs.check_name_not_pending(db, name)
    _check_raters(db, list(raters), raters_per_pair)
    _check_options(metrics, per_metric=per_metric, top_k=top_k, engine=engine,
                   limit_tests=limit_tests, chunk_size=chunk_size)
    params = {
        "study_name": name,
        "tests": _corpus_spec(tests, "test reports"),
        "corpus": _corpus_spec(corpus, "corpus"),
        "metrics": list(metrics),
        "per_metric": int(per_metric),
        "top_k": None if top_k is None else int(top_k),
        "engine": engine,
        "seed": int(seed),
        "limit_tests": None if limit_tests is None else int(limit_tests),
        "raters": list(raters),
        "raters_per_pair": int(raters_per_pair),
        "options": {k: dict(v) for k, v in (options or {}).items()},
        "description": description,
        "chunk_size": int(chunk_size),
        "upload_dir": job_inputs.data_relative(upload_dir) if upload_dir is not None else None,
    }
    return jobs.enqueue_job(db, actor, kind=KIND, params=params, device=device)


def _study_of_job(db: Database, study_name: str, job_id: int) -> dict[str, Any] | None:
    """The provenance of the visible study ``study_name`` if job ``job_id`` built it."""
    with db.read() as s:
        row = s.execute(select(Study.status, Study.provenance)
                        .where(Study.name == study_name)).first()
    if row is None or row.status == STUDY_STAGING:
        return None
    provenance = dict(row.provenance or {})
    return provenance if provenance.get(JOB_KEY) == job_id else None


def _summary_of_built(db: Database, study_name: str,
                      provenance: Mapping[str, Any]) -> BuildSummary:
    """The summary of a study a previous run of the same job had finished (from its
    provenance and its rows; ``n_assigned`` counts all its assignments, as a fresh build's
    would, whichever run made them)."""
    with db.read() as s:
        study_id = get_study(s, study_name).id
        n_assigned = s.scalar(select(func.count()).select_from(Assignment)
                              .where(Assignment.study_id == study_id)) or 0
        n_cases = s.scalar(select(func.count()).select_from(Case)
                           .where(Case.study_id == study_id)) or 0
        n_pairs = s.scalar(select(func.count()).select_from(Pair)
                           .where(Pair.study_id == study_id)) or 0
    manifest = provenance.get("oracle", {})
    counts = manifest.get("counts", {})
    sources: dict[str, int] = {}
    for pick in manifest.get("picks", []):
        sources[pick["source"]] = sources.get(pick["source"], 0) + 1
    seconds = {k: float(v) for k, v in manifest.get("seconds", {}).items()}
    return BuildSummary(
        study_name=study_name, n_tests=int(provenance.get("tests", {}).get("n_used", 0)),
        n_cases=int(n_cases), n_pairs=int(n_pairs),
        n_picks_before_dedup=int(counts.get("picks_before_dedup", 0)),
        metrics=tuple(manifest.get("metrics", [])), sources=sources,
        engine=str(manifest.get("engine", "")), seconds=seconds.get("total", 0.0),
        corpus_sha256=str(provenance.get("corpus", {}).get("sha256", "")),
        n_assigned=int(n_assigned),
        tests_without_candidate=tuple(provenance.get("tests", {}).get("without_candidate", [])),
        timings=seconds,
    )


def _assign(db: Database, actor: Actor, name: str, raters: Sequence[str],
            raters_per_pair: int, seed: int) -> int:
    if not raters:
        return 0
    assigned = assignment.assign_raters(db, actor, study_name=name,
                                        rater_usernames=list(raters),
                                        raters_per_pair=raters_per_pair, seed=seed)
    return assigned.created


def build_study(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    tests: Corpus | str | Path,
    corpus: Corpus | str | Path,
    metrics: Sequence[str],
    per_metric: int = 1,
    top_k: int | None = oracle.DEFAULT_TOP_K,
    engine: str | oracle.Engine = "local",
    seed: int = 0,
    limit_tests: int | None = None,
    raters: Sequence[str] = (),
    raters_per_pair: int = 1,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    description: str = "",
    chunk_size: int = oracle.DEFAULT_CHUNK,
    progress: ProgressFn | None = None,
    job_id: int | None = None,
    pool: MetricPool | None = None,
    device: str = "cpu",
) -> BuildSummary:
    """Create a study whose pairs are the metric-oracle candidates of the test reports.

    Runs the metrics in the calling process: the worker's ``build_oracle`` kind and the
    command line call it; pages call :func:`enqueue_build`.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: Name of the new study (must not exist).
        tests: Test reports: a :class:`Corpus`, a CSV/JSONL path, or ``"iu"``.
        corpus: Candidate reports: a :class:`Corpus`, a CSV/JSONL path, or ``"iu"``.
        metrics: Families or output keys (``["bleu4", "rougeL"]``).
        per_metric: Best candidates per key and test report.
        top_k: Candidate-stage size (``None``: exhaustive search).
        engine: ``"local"`` or ``"ray"`` (or an engine object).
        seed: Test sampling (IU), study seed and rater shuffles.
        limit_tests: Use at most this many test reports (see :func:`select_tests`).
        raters: Rater usernames to assign now (empty: assign later on the Assign page).
        raters_per_pair: Raters each pair should get.
        options: ``family -> {option: value}`` for the metrics.
        description: Study description (a default one is written when empty).
        chunk_size: Pairs per scoring call / Ray task.
        progress: ``progress(done, total, message)`` while scoring, then while importing
            (pairs); it may raise to stop (nothing is created then).
        job_id: The job running this build, recorded in the study's provenance: when a
            visible study of that name already carries it (the job ran before and was
            killed after the study appeared), the build only completes the assignment and
            returns that study's summary.
        pool: Warm metric instances to score with (the worker's; the local engine uses it).
        device: Device the local engine loads models on.

    Returns:
        Counts, sources and timings of the new study.

    Raises:
        PermissionDenied: The actor is not an admin.
        InvalidInput: Bad name, files, metrics, k or raters; nothing is created.
    """
    require_admin(actor)
    if job_id is not None:
        built = _study_of_job(db, (study_name or "").strip(), job_id)
        if built is not None:
            name = study_name.strip()
            _assign(db, actor, name, raters, raters_per_pair, seed)
            log.info("job %d: study %s was already built; assignment completed", job_id, name)
            return _summary_of_built(db, name, built)
    try:
        # A build killed while importing left an invisible staging study holding the name.
        imports.cleanup_stale_imports(db)
    except Exception:  # housekeeping must never block a build (the import retries it)
        log.exception("cleanup of unfinished imports failed")
    name = _check_name(db, study_name)
    _check_raters(db, list(raters), raters_per_pair)
    _check_options(metrics, per_metric=per_metric, top_k=top_k, engine=engine,
                   limit_tests=limit_tests, chunk_size=chunk_size)
    test_corpus = _load(tests, "test reports")
    cand_corpus = _load(corpus, "corpus")
    chosen = select_tests(test_corpus, limit=limit_tests, seed=seed)
    try:
        result = oracle.build_oracle(
            chosen, cand_corpus.reports, metrics, per_metric=per_metric, top_k=top_k,
            engine=engine, options=options, chunk_size=chunk_size, progress=progress,
            metric_pool=pool, device=device,
        )
    except oracle.OracleError as exc:
        raise InvalidInput(str(exc)) from None

    by_test: dict[str, list[oracle.OraclePick]] = {}
    for pick in result.picks:
        by_test.setdefault(pick.test_id, []).append(pick)
    cases = [
        CaseInput(case_id=t.report_id, reference=t.text,
                  candidates=[CandidateInput(text=p.candidate, source=p.source)
                              for p in by_test[t.report_id]])
        for t in chosen if t.report_id in by_test
    ]
    missing = tuple(t.report_id for t in chosen if t.report_id not in by_test)
    if not cases:
        raise InvalidInput("no test report got a candidate (every metric value was undefined)")
    sources: dict[str, int] = {}
    for p in result.picks:
        sources[p.source] = sources.get(p.source, 0) + 1
    provenance: dict[str, Any] = {
        "kind": PROVENANCE_KIND,
        "built_by": actor.username,
        "built_at": clock.utcnow().isoformat(),
        "seed": seed,
        "tests": {
            "name": test_corpus.name,
            "sha256": test_corpus.sha256,
            "n_available": len(test_corpus),
            "n_used": len(chosen),
            "limit": limit_tests,
            "selection": ("seeded sample (random.Random(seed).sample), corpus order"
                          if test_corpus.name == "iu" and limit_tests is not None
                          else "file order, first n"),
            "ids": [t.report_id for t in chosen],
            "without_candidate": list(missing),
        },
        "corpus": {
            "name": cand_corpus.name,
            "sha256": cand_corpus.sha256,
            "n_reports": len(cand_corpus),
            "n_skipped_without_text": cand_corpus.n_skipped,
            "source": dict(cand_corpus.source),
        },
        "options": {k: dict(v) for k, v in (options or {}).items()},
        "oracle": result.manifest(),
    }
    if job_id is not None:
        provenance[JOB_KEY] = job_id
    desc = description or (
        f"Metric-oracle candidates ({', '.join(result.keys)}, top {per_metric} each) for "
        f"{len(cases)} test reports from {test_corpus.name}, corpus {cand_corpus.name}."
    )
    summary = imports.import_cases(
        db, actor, study_name=name, cases=cases, description=desc,
        raters_per_pair=raters_per_pair, seed=seed, provenance=provenance, progress=progress,
    )
    n_assigned = _assign(db, actor, name, raters, raters_per_pair, seed)
    log.info("built study %s: %d pairs for %d test reports in %.1f s", name, summary.n_pairs,
             len(cases), result.seconds.get("total", 0.0))
    return BuildSummary(
        study_name=name, n_tests=len(chosen), n_cases=summary.n_cases, n_pairs=summary.n_pairs,
        n_picks_before_dedup=result.n_picks_before_dedup, metrics=tuple(result.keys),
        sources=sources, engine=result.engine, seconds=result.seconds.get("total", 0.0),
        corpus_sha256=cand_corpus.sha256, n_assigned=n_assigned,
        tests_without_candidate=missing, timings=dict(result.seconds),
    )


def summary_to_json(summary: BuildSummary) -> dict[str, Any]:
    """A build summary as plain JSON data (the ``build_oracle`` job's result)."""
    return asdict(summary)


def summary_from_json(data: Mapping[str, Any]) -> BuildSummary:
    """The :class:`BuildSummary` stored by :func:`summary_to_json` (for the page).

    Raises:
        InvalidInput: the data is not a build summary.
    """
    try:
        fields = {k: data[k] for k in BuildSummary.__dataclass_fields__ if k in data}
        fields["metrics"] = tuple(fields.get("metrics", ()))
        fields["tests_without_candidate"] = tuple(fields.get("tests_without_candidate", ()))
        return BuildSummary(**fields)
    except TypeError as exc:
        raise InvalidInput(f"the job's result is not a build summary ({exc})") from None


def export_build(db: Database, actor: Actor, *, study_name: str, out_dir: Path) -> BundleSummary:
    """Export a study as ``rexval/``, ``jsonl/`` and ``hf/`` plus one ``manifest.json``.

    The manifest holds the study's provenance (for a metric-oracle study: which metric picked
    which candidate, signatures, seeds, corpus sha256, candidate-stage settings), a pair
    table (position, opaque pair id, case, source, oracle keys) and the sha256 of every file.

    Raises:
        PermissionDenied: The actor is not an admin.
        NotFound: No such study.
        InvalidInput: A non-empty target or a study a format cannot hold; nothing is left.
    """
    require_admin(actor)
    out_dir = free_output_dir(out_dir)
    with db.begin() as s:
        study = get_study(s, study_name)
        info = {"name": study.name, "description": study.description, "seed": study.seed,
                "raters_per_pair": study.raters_per_pair,
                "provenance": dict(study.provenance or {})}
    from radconcord.backend.datasets import hf_export

    n_pairs = 0

    def write(tmp: Path) -> dict[str, Any]:
        nonlocal n_pairs
        exports.export_study(db, actor, study_name=study_name, fmt="rexval",
                             out_dir=tmp / "rexval")
        exports.export_study(db, actor, study_name=study_name, fmt="jsonl",
                             out_dir=tmp / "jsonl")
        hf_export.write_hf_dataset(tmp / "jsonl", tmp / "hf")
        pairs = [json.loads(line) for line in
                 (tmp / "jsonl" / "pairs.jsonl").read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        n_pairs = len(pairs)
        return {
            "app_version": config.APP_VERSION,
            "schema_version": exports.schema_version(),
            "exported_at": clock.utcnow().isoformat(),
            "exported_by": actor.username,
            "study": info,
            "deidentification": DEID_PROFILE,
            "pairs": [{"position": p["position"], "pair_id": p["pair_id"],
                       "case_id": p["case_id"], "source": p["source"],
                       "oracle_metrics": hf_export.oracle_metrics(p["source"])}
                      for p in pairs],
            "folders": {"rexval": "ReXVal CSV files", "jsonl": "pairs.jsonl + ratings.jsonl",
                        "hf": "datasets.load_from_disk(...) -> DatasetDict(pairs, ratings)"},
        }

    files = publish_dir(out_dir, write, manifest=MANIFEST)
    # The manifest first, then the files it describes (sorted), as before.
    return BundleSummary(out_dir=out_dir, files=(files[-1], *files[:-1]), n_pairs=n_pairs)
