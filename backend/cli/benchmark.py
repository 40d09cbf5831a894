"""``radconcord benchmark``: every metric on every gold set under one protocol.

::

    radconcord benchmark --dataset rexval=DIR --dataset radpref=DIR [--dataset study=NAME ...]
                         --metrics KEYS|available [--output DIR] [--bootstrap 1000] [--seed 0]

Reads the user's own copies of the gold sets (never shipped), scores them through the score
cache of the database and writes ``leaderboard.json``, ``leaderboard.csv`` and
``leaderboard.html`` into the output folder (see ``backend.services.evaluation.benchmark`` and
docs/benchmark.md). A bad folder or file is one line ``error: ...`` with exit status 2.
Imports nothing heavy at import time.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from radconcord.backend.cli.common import UserError, database, service_errors


def register(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private subparsers type
    """Add the ``benchmark`` subcommand.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    p = subparsers.add_parser(
        "benchmark",
        help="rank every metric on every gold set (ReXVal, RadPref, studies) under one "
             "protocol; writes leaderboard.json/.csv/.html",
        description="Score each gold set through the score cache and rank the metrics by "
                    "their agreement with the radiologists under one fixed protocol "
                    "(docs/benchmark.md).",
    )
    p.add_argument("--dataset", action="append", required=True, metavar="KIND=LOCATION",
                   help="rexval=DIR (ReXVal's two CSV files), radpref=DIR "
                        "(preference_data.json and radiologist_annotations/) or study=NAME "
                        "(a study of the database); repeatable")
    p.add_argument("--metrics", default="available", metavar="KEYS|available",
                   help="comma-separated keys or families, or 'available' (default): every "
                        "family that runs here without a download")
    p.add_argument("--output", type=Path, default=Path("leaderboard"), metavar="DIR",
                   help="folder for leaderboard.json, .csv and .html (created; default "
                        "./leaderboard)")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="B",
                   help="bootstrap resamples of every interval and test (default 1000; 0: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resamples (default 0)")
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda[:N]")
    p.add_argument("--database-url", default=None,
                   help="database holding the score cache and the studies (default: "
                        "DATABASE_URL or the data folder's SQLite file)")
    p.set_defaults(func=run_benchmark)


def _command(args: argparse.Namespace) -> list[str]:
    """The command line as parsed (recorded in the JSON)."""
    out = ["radconcord", "benchmark"]
    for dataset in args.dataset:
        out += ["--dataset", dataset]
    return out + ["--metrics", args.metrics, "--output", str(args.output), "--bootstrap",
                  str(args.bootstrap), "--seed", str(args.seed)]


def run_benchmark(args: argparse.Namespace) -> int:
    """Run ``benchmark`` (see the module docstring).

    Args:
        args: Parsed arguments.
    """
    from radconcord.backend.cli.progress import progress_bar
    from radconcord.backend.services.evaluation import benchmark
    from radconcord.backend.types import Actor

    if args.bootstrap < 0:
        raise UserError(f"--bootstrap must be >= 0, got {args.bootstrap}")
    output: Path = args.output
    if output.exists() and not output.is_dir():
        raise UserError(f"--output {output}: exists and is not a folder")
    metrics = [m for m in args.metrics.split(",") if m.strip()]
    with database(args.database_url) as db, service_errors(), \
            progress_bar("benchmark", unit="score") as progress:
        result = benchmark.run_benchmark(
            db, Actor.system(), datasets=args.dataset, metrics=metrics or None,
            bootstrap=args.bootstrap, seed=args.seed, device=args.device, progress=progress,
            command=_command(args))
    with service_errors():
        paths = benchmark.write_outputs(result.doc, output)
    for line in benchmark.summary_lines(result.doc):
        print(line)
    print(f"scored {result.computed} pair inputs now, {result.cached} from the cache")
    for path in paths:
        print(f"wrote {path}")
    return 0
