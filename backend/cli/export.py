"""``export``: a study's pairs and ratings as ReXVal files or JSONL with a manifest.

``--with-scores`` adds every cached metric score of the study's pairs with its signature
(``metric_scores``), ``--with-timing`` the completion times and time on task (``assignments``)
and the activity spans behind them (``activity_spans``): with both, the dashboard's numbers
(ratings count, correlations, time per rater) can be recomputed from the folder alone. Both
are off by default, so a plain ReXVal export is the two files of the published dataset.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from radconcord.backend.cli.common import UserError, database, service_errors


def cmd_export(args: argparse.Namespace) -> int:
    """Export a study as ReXVal files or JSONL with a manifest."""
    from radconcord.backend.services.transfer.exports import export_study
    from radconcord.backend.types import Actor

    with database() as db, service_errors():
        try:
            summary = export_study(
                db, Actor.system(), study_name=args.study, fmt=args.format,
                out_dir=Path(args.output), with_scores=args.with_scores,
                with_timing=args.with_timing,
            )
        except OSError as exc:
            # The export is built in a staging folder that is removed on failure, so the
            # output folder is as it was: the reason is all the user needs.
            where = f": {exc.filename}" if exc.filename else ""
            raise UserError(f"output folder {Path(args.output).resolve()} was not written "
                            f"({exc.strerror or exc}{where})") from None
    print(f"wrote {len(summary.files)} files to {summary.out_dir}")
    return 0


def register(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private subparsers type
    """Add ``export``.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    p = subparsers.add_parser("export", help="export a study (ReXVal files or JSONL)")
    p.add_argument("--study", required=True)
    p.add_argument("--format", required=True, choices=("rexval", "jsonl"))
    p.add_argument("--output", required=True, help="output folder (new or empty)")
    p.add_argument("--with-scores", action="store_true",
                   help="add metric_scores: every cached metric score of the study's pairs "
                        "with its signature (the dashboard's marked chosen)")
    p.add_argument("--with-timing", action="store_true",
                   help="add assignments (completion times, time on task) and "
                        "activity_spans")
    p.set_defaults(func=cmd_export)
