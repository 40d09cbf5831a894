"""Build a ReXVal-style rating study from metric-oracle candidates (admin only).

ReXVal (Yu et al. 2023) paired test reports with the corpus report that a metric scores best
(its *metric-oracle*). :func:`build_study` does the same: it loads the test reports and the
corpus (a CSV/JSONL file or ``"iu"``, the Indiana University reports), runs
:func:`backend.datasets.oracle.build_oracle`, creates the study through
:func:`backend.services.imports.import_cases` (one case per test report, one pair per
distinct picked candidate, source label ``oracle:<keys>``) with the whole oracle manifest in
the study's provenance, and opens it for rating: raters given are assigned through
:func:`backend.services.assignment.assign_raters`, which shuffles every rater's pairs with the
study seed. :func:`export_build` writes ReXVal files, JSONL and a Hugging Face dataset folder
plus one ``manifest.json`` (which metric picked which candidate, metric signatures, seeds,
corpus sha256, candidate-stage settings).

Everything that can fail on user input (name taken, unknown rater, unknown metric) is checked
before the scoring work, and the study is created in one transaction.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import random
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from backend import config
from backend.datasets import corpus as corpus_mod
from backend.datasets import oracle
from backend.datasets.corpus import Corpus, CorpusReport
from backend.imaging.deid import DEID_PROFILE
from backend.services import assignment, exports, imports
from backend.services.errors import InvalidInput, require_admin
from backend.services.repo import get_study
from backend.services.types import Actor, CandidateInput, CaseInput
from backend.util import file_sha256
from db.models import Study, User
from db.session import Database

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int, str], None]
MANIFEST = "manifest.json"
PROVENANCE_KIND = "metric-oracle"


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
) -> BuildSummary:
    """Create a study whose pairs are the metric-oracle candidates of the test reports.

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
        progress: ``progress(done, total, message)`` while scoring.

    Returns:
        Counts, sources and timings of the new study.

    Raises:
        PermissionDenied: The actor is not an admin.
        InvalidInput: Bad name, files, metrics, k or raters; nothing is created.
    """
    require_admin(actor)
    name = _check_name(db, study_name)
    _check_raters(db, list(raters), raters_per_pair)
    try:
        oracle.resolve_keys(metrics)
    except oracle.OracleError as exc:
        raise InvalidInput(str(exc)) from None
    test_corpus = _load(tests, "test reports")
    cand_corpus = _load(corpus, "corpus")
    chosen = select_tests(test_corpus, limit=limit_tests, seed=seed)
    try:
        result = oracle.build_oracle(
            chosen, cand_corpus.reports, metrics, per_metric=per_metric, top_k=top_k,
            engine=engine, options=options, chunk_size=chunk_size, progress=progress,
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
    provenance = {
        "kind": PROVENANCE_KIND,
        "built_by": actor.username,
        "built_at": dt.datetime.now(dt.UTC).isoformat(),
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
    desc = description or (
        f"Metric-oracle candidates ({', '.join(result.keys)}, top {per_metric} each) for "
        f"{len(cases)} test reports from {test_corpus.name}, corpus {cand_corpus.name}."
    )
    summary = imports.import_cases(
        db, actor, study_name=name, cases=cases, description=desc,
        raters_per_pair=raters_per_pair, seed=seed, provenance=provenance,
    )
    n_assigned = 0
    if raters:
        assigned = assignment.assign_raters(db, actor, study_name=name,
                                            rater_usernames=list(raters),
                                            raters_per_pair=raters_per_pair, seed=seed)
        n_assigned = assigned.created
    log.info("built study %s: %d pairs for %d test reports in %.1f s", name, summary.n_pairs,
             len(cases), result.seconds.get("total", 0.0))
    return BuildSummary(
        study_name=name, n_tests=len(chosen), n_cases=summary.n_cases, n_pairs=summary.n_pairs,
        n_picks_before_dedup=result.n_picks_before_dedup, metrics=tuple(result.keys),
        sources=sources, engine=result.engine, seconds=result.seconds.get("total", 0.0),
        corpus_sha256=cand_corpus.sha256, n_assigned=n_assigned,
        tests_without_candidate=missing, timings=dict(result.seconds),
    )


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
    out_dir = Path(out_dir).resolve()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise InvalidInput(f"{out_dir}: output folder exists and is not empty")
    with db.begin() as s:
        study = get_study(s, study_name)
        info = {"name": study.name, "description": study.description, "seed": study.seed,
                "raters_per_pair": study.raters_per_pair,
                "provenance": dict(study.provenance or {})}
    from backend.datasets import hf_export

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        exports.export_study(db, actor, study_name=study_name, fmt="rexval",
                             out_dir=tmp / "rexval")
        exports.export_study(db, actor, study_name=study_name, fmt="jsonl",
                             out_dir=tmp / "jsonl")
        hf_export.write_hf_dataset(tmp / "jsonl", tmp / "hf")
        pairs = [json.loads(line) for line in
                 (tmp / "jsonl" / "pairs.jsonl").read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        manifest = {
            "app_version": config.APP_VERSION,
            "schema_version": exports.schema_version(),
            "exported_at": dt.datetime.now(dt.UTC).isoformat(),
            "exported_by": actor.username,
            "study": info,
            "deidentification": DEID_PROFILE,
            "pairs": [{"position": p["position"], "pair_id": p["pair_id"],
                       "case_id": p["case_id"], "source": p["source"],
                       "oracle_metrics": hf_export.oracle_metrics(p["source"])}
                      for p in pairs],
            "folders": {"rexval": "ReXVal CSV files", "jsonl": "pairs.jsonl + ratings.jsonl",
                        "hf": "datasets.load_from_disk(...) -> DatasetDict(pairs, ratings)"},
            "files": {
                name: {"sha256": file_sha256(tmp / name), "bytes": (tmp / name).stat().st_size}
                for name in files
            },
        }
        with open(tmp / MANIFEST, "w", encoding="utf-8", newline="\n") as fh:
            json.dump(manifest, fh, indent=2, ensure_ascii=False, default=str)
            fh.write("\n")
        if out_dir.exists():
            out_dir.rmdir()
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BundleSummary(out_dir=out_dir, files=tuple([MANIFEST, *files]), n_pairs=len(pairs))
