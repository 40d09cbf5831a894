"""``python -m backend score ...``.

``score --input PAIRS --metrics KEYS --output SCORES.csv`` scores a file (through the score
cache in the database unless ``--no-cache``) and writes ``id`` then one column per requested
key, in request order. ``score --study NAME --metrics KEYS`` scores a study into the database
inline, or queues a job for the worker with ``--enqueue``. User errors are one line
``error: ...`` with exit status 2 and leave no output file behind.

Every run prints ``status FAMILY: done | unavailable: REASON | failed: ERROR`` per family
and draws progress on stderr (:func:`backend.cli.progress.progress_bar`). With
``--skip-unavailable`` the families that can run are scored even when another is unavailable
or fails; the exit status is 1 when a family failed or none was scored.

``--engine ray [--ray-address ADDR] [--workers N]`` computes the missing pairs on Ray actors
(a local instance, or the cluster at ADDR) while this process keeps the cache lookup and
writes (docs/scale_out.md); ``--engine local`` (the default) computes them in this process.
Every run prints the engine it used. With ``--study ... --enqueue`` the engine is a job
parameter (the worker that takes the job drives it on Ray), and ``--chunks K`` splits the job
into K chunk jobs that several workers claim instead.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from radconcord.backend.cli.common import UserError, database, user_errors
from radconcord.backend.metrics.base import MetricInputError, MetricUnavailable

if TYPE_CHECKING:
    from radconcord.db.session import Database

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private subparsers type
    """Add the ``score`` subcommand (the worker that runs queued jobs is ``backend.cli.jobs``).

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    p = subparsers.add_parser(
        "score",
        help="score pairs (a file or a study) with metrics",
        description="Score reference/candidate pairs with metrics, through the score cache.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", metavar="PAIRS", help="CSV or JSONL with id,reference,candidate")
    src.add_argument("--study", metavar="NAME", help="score a study's pairs into the database")
    p.add_argument(
        "--metrics", required=True, metavar="KEY[,KEY...]", help="families or output keys"
    )
    p.add_argument("--output", metavar="SCORES.csv", help="where --input scores are written")
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda[:N]")
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="pairs per batch")
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="where missing pairs are computed: local (this process, default) or ray"
        " (batches on Ray actors; see docs/scale_out.md)",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --engine ray: the cluster to join (default: start a local Ray instance)",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="with --engine ray: actors to start (default: one per CPU of the cluster)",
    )
    p.add_argument(
        "--set",
        dest="set_options",
        action="append",
        default=[],
        metavar="METRIC.OPTION=VALUE",
        help="metric option (repeatable), e.g. bertscore.idf=true",
    )
    p.add_argument(
        "--skip-unavailable",
        action="store_true",
        help="leave out metrics that cannot run here (their reason is printed)",
    )
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the score cache")
    p.add_argument(
        "--image-root",
        metavar="DIR",
        help="folder that image paths are relative to and must stay in (default: PAIRS folder)",
    )
    p.add_argument(
        "--chunks",
        type=int,
        metavar="K",
        help="with --study --enqueue: split the job into K chunk jobs that several workers"
        " take at once (a corpus-dependent family stays whole)",
    )
    p.add_argument(
        "--enqueue", action="store_true", help="with --study: queue a job for the worker"
    )
    p.set_defaults(func=cmd_score)


def _split_metrics(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise UserError("--metrics: give at least one metric (see `python -m backend metrics`)")
    return names


def cmd_score(args: argparse.Namespace) -> int:
    """Run ``score``; see the module docstring."""
    from radconcord.backend.scoring import jobs
    from radconcord.backend.scoring.runner import ScoringError, parse_set_options

    metrics = _split_metrics(args.metrics)
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {args.batch_size})")
    _check_engine_args(args)
    with user_errors(ScoringError):
        options = parse_set_options(args.set_options)
        metrics, options = jobs.validate_request(metrics, options)
    if args.input is not None:
        return _score_file(args, metrics, options)
    return _score_study(args, metrics, options)


def _check_engine_args(args: argparse.Namespace) -> None:
    """Refuse engine options that do not fit together (before anything is read or started)."""
    if args.engine != "ray":
        for flag, value in (("--ray-address", args.ray_address), ("--workers", args.workers)):
            if value is not None:
                raise UserError(f"{flag} works with --engine ray")
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers must be at least 1 (got {args.workers})")
    chunks = getattr(args, "chunks", None)
    if chunks is not None:
        if not getattr(args, "enqueue", False):
            raise UserError("--chunks works with --study ... --enqueue (chunk jobs for workers)")
        if chunks < 1:
            raise UserError(f"--chunks must be at least 1 (got {chunks})")
        if args.engine == "ray" and chunks > 1:
            raise UserError("--chunks and --engine ray are two ways of sharing the work out;"
                            " choose one")


def _make_engine(args: argparse.Namespace) -> Any:
    """``None`` (this process) for ``--engine local``, else a started Ray engine."""
    if args.engine == "local":
        print("engine: local (this process)")
        return None
    from radconcord.backend.scoring.engines import RayEngine
    from radconcord.backend.scoring.runner import ScoringError

    with user_errors(ScoringError):
        # Each actor resolves --device itself (auto: CUDA where its worker has a GPU).
        engine = RayEngine(address=args.ray_address, workers=args.workers, device=args.device)
    where = args.ray_address or "a local instance"
    workers = args.workers if args.workers is not None else "one per CPU"
    print(f"engine: ray ({where}, workers: {workers})")
    return engine


def _run(
    pairs: list[Any], metrics: list[str], options: dict[str, Any], args: argparse.Namespace,
    db: Database,
) -> Any:
    """Call the runner on the chosen engine, turning its user-facing errors into ``UserError``."""
    engine = _make_engine(args)
    try:
        return _run_on(pairs, metrics, options, args, db, engine)
    finally:
        if engine is not None:
            engine.close()


def _run_on(
    pairs: list[Any], metrics: list[str], options: dict[str, Any], args: argparse.Namespace,
    db: Database, engine: Any,
) -> Any:
    from radconcord.backend.cli.progress import progress_bar
    from radconcord.backend.scoring.runner import MetricFailed, ScoringError, score

    try:
        # The runner counts pairs x metric families ("36 pairs" for 12 pairs of 3 families
        # would mislead): one count is one pair scored by one family.
        with progress_bar("score", unit="score") as progress:
            return score(
                pairs,
                metrics,
                options=options,
                device=args.device,
                batch_size=args.batch_size,
                db=db,
                skip_unavailable=args.skip_unavailable,
                # With --skip-unavailable a family that fails to load or score is reported
                # and the others are scored; without it the first problem stops the run.
                keep_going=args.skip_unavailable,
                progress=progress,
                engine=engine,
            )
    except MetricUnavailable as exc:
        hint = "" if args.skip_unavailable else (
            " (pass --skip-unavailable to score the other metrics anyway)")
        raise UserError(f"{exc}{hint}") from None
    except (ScoringError, MetricInputError) as exc:
        raise UserError(str(exc)) from None
    except MetricFailed as exc:
        log.debug("metric failure", exc_info=True)
        raise UserError(f"{exc} (run with -v for the traceback)") from None


def _report(table: Any) -> None:
    """Print each family's status (stdout), skipped families and empty pairs (stderr)."""
    for family, reason in table.unavailable.items():
        print(f"skipped metric '{family}': {reason}", file=sys.stderr)
    for family, error in table.failed.items():
        print(f"failed metric '{family}': {error}", file=sys.stderr)
    for family, run in table.families.items():
        print(f"status {family}: {run.status_text}")
    if table.empty_ids:
        shown = ", ".join(table.empty_ids[:20])
        more = f" and {len(table.empty_ids) - 20} more" if len(table.empty_ids) > 20 else ""
        print(
            f"warning: {len(table.empty_ids)} pair(s) with an empty reference or candidate"
            f" were given nan: {shown}{more}",
            file=sys.stderr,
        )
    for family, run in table.families.items():
        if run.status != "done":
            continue
        print(
            f"{family}: {run.computed} computed, {run.cached} from cache"
            f" [{run.signature_hash}] {run.signature}"
        )
        for e in run.endpoints or ():
            print(f"  endpoint {e.get('url')}: {e.get('requests', 0)} requests,"
                  f" {e.get('failures', 0)} failures, rested {e.get('rested', 0)} time(s)")
        if run.endpoint_failed:
            print(f"warning: {family}: {run.endpoint_failed} pair(s) no LLM endpoint answered"
                  " were given nan and not cached (a rerun retries them)", file=sys.stderr)


def _score_file(args: argparse.Namespace, metrics: list[str], options: dict[str, Any]) -> int:
    from radconcord.backend.scoring.io import ScoreInputError, read_pairs, write_scores_csv

    if args.enqueue:
        raise UserError("--enqueue works with --study only")
    if not args.output:
        raise UserError("--output SCORES.csv is required with --input")
    out = Path(args.output)
    if not out.parent.is_dir():
        raise UserError(f"--output: folder does not exist: {out.parent}")
    if out.exists() and out.resolve() == Path(args.input).resolve():
        raise UserError("--output would overwrite the input file")
    if args.image_root is not None and not Path(args.image_root).is_dir():
        raise UserError(f"--image-root: not a folder: {args.image_root}")
    with user_errors(ScoreInputError):
        pair_file = read_pairs(args.input, image_base=args.image_root)
    if args.no_cache:
        table = _run(pair_file.pairs, metrics, options, args, None)
    else:
        with database() as db:
            table = _run(pair_file.pairs, metrics, options, args, db)
    _report(table)
    try:
        write_scores_csv(out, table.ids, table.columns)
    except OSError as exc:
        raise UserError(f"--output: cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {len(table.ids)} pairs x {len(table.columns)} keys to {out}")
    return _exit_status(table)


def _exit_status(table: Any) -> int:
    """0 when every family ran or was skipped as unavailable (asked for); 1 when one failed
    or nothing at all was scored."""
    if table.failed or not table.done:
        print(f"error: {len(table.failed)} metric(s) failed, {len(table.done)} scored",
              file=sys.stderr)
        return 1
    return 0


def _score_study(args: argparse.Namespace, metrics: list[str], options: dict[str, Any]) -> int:
    from radconcord.backend import jobs as job_queue
    from radconcord.backend.errors import ServiceError
    from radconcord.backend.scoring import jobs
    from radconcord.backend.scoring.runner import ScoringError

    if args.output:
        raise UserError("--output works with --input; study scores are stored in the database")
    if args.no_cache:
        raise UserError("--no-cache works with --input; study scores are stored in the database")
    if args.image_root is not None:
        raise UserError("--image-root works with --input; study images live in the data folder")
    with database() as db:
        with db.begin() as s:
            study_id = jobs.study_id_by_name(s, args.study)
        if study_id is None:
            raise UserError(f"--study: no study named '{args.study}'")
        if args.enqueue:
            from radconcord.backend.runner.kinds.score import engine_text
            from radconcord.backend.services.scores.scoring import score_engine_params

            params: dict[str, Any] = {"metrics": metrics, "options": options}
            with user_errors(ScoringError, ServiceError):
                engine = score_engine_params(args.engine, ray_address=args.ray_address,
                                             workers=args.workers)
                if engine is not None:
                    params["engine"] = engine  # the worker drives it, Ray actors compute
                if args.chunks is not None and args.chunks > 1:
                    params["chunks"] = args.chunks  # chunk jobs that several workers claim
                job_id = job_queue.enqueue(db, "score", params, study_id=study_id)
            how = (f", split into {args.chunks} chunk jobs" if "chunks" in params
                   else f", computed on {engine_text(engine)}" if engine else "")
            print(f"queued scoring job {job_id} for study '{args.study}'{how}")
            return 0
        pairs = jobs.study_pairs(db, study_id)
        if not pairs:
            raise UserError(f"--study: study '{args.study}' has no pairs")
        table = _run(pairs, metrics, options, args, db)
    _report(table)
    print(f"scored {len(table.ids)} pairs of study '{args.study}' into the database")
    return _exit_status(table)
