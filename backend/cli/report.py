"""``python -m backend report``: the self-contained HTML report of a study, for the paper.

Imports nothing heavy at import time (the services load when the command runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from radconcord.backend.cli.common import UserError, database, service_errors


def register(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private subparsers type
    """Add the ``report`` subcommand.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    p = subparsers.add_parser(
        "report",
        help="write a study's self-contained HTML report (and its figures) for a paper",
        description="Write DIR/report.html (study design, agreement, human ceiling, metric"
        " table, paired comparison, system ranking, failure modes, metric signatures,"
        " versions and input hashes), DIR/figures/ and DIR/manifest.json. DIR must be"
        " missing or empty; it appears complete or not at all.",
    )
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--output", required=True, type=Path, metavar="DIR",
                   help="folder to create (missing or empty)")
    p.add_argument("--significant-only", action="store_true",
                   help="target clinically significant errors instead of all errors")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                   help="bootstrap resamples of every interval (0: none; default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0)")
    p.add_argument("--counts", choices=("raw", "adjudicated"), default="raw",
                   help="per-pair counts: the raters' mean (raw, default) or the consensus on "
                        "adjudicated pairs")
    p.add_argument("--database-url", default=None,
                   help="database URL (default: DATABASE_URL or the data folder's SQLite file)")
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    """Run ``report`` (see :func:`register`).

    Args:
        args: Parsed arguments.
    """
    from radconcord.backend.services.evaluation import reports
    from radconcord.backend.types import Actor
    from radconcord.backend.util import free_output_dir

    if args.bootstrap < 0:
        raise UserError(f"--bootstrap must be >= 0, got {args.bootstrap}")
    with service_errors():
        # A taken folder fails before the slow bootstrap, not after it.
        free_output_dir(args.output)
        with database(args.database_url) as db:
            bundle = reports.render_report(
                db, Actor.system(), study_name=args.study,
                significant_only=args.significant_only, resamples=args.bootstrap,
                seed=args.seed, counts=args.counts,
            )
        files = reports.write_report(bundle, args.output, about={
            "study": args.study, "significant_only": args.significant_only,
            "resamples": args.bootstrap, "seed": args.seed, "counts": args.counts})
    print(f"{args.study}: {len(files)} files -> {args.output / reports.REPORT_FILE}"
          f" (figures: {bundle.figure_format})")
    if bundle.note:
        print(f"note: {bundle.note}")
    return 0
