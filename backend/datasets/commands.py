"""Commands ``import-pairs``, ``import-rexval``, ``export`` and ``import-demo``.

Heavy modules (pydicom, SQLAlchemy models) are imported inside the handlers so that
``python -m backend --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from backend.util import file_sha256, user_errors


def _database() -> Any:
    from db.session import Database

    return Database()


def cmd_import_pairs(args: argparse.Namespace) -> int:
    """Import a CSV/JSONL file of cases as a new study."""
    from backend.datasets.pairs import parse_cases
    from backend.services.errors import ServiceError
    from backend.services.imports import import_cases
    from backend.services.types import Actor

    path = Path(args.input)
    with user_errors(ServiceError):
        cases = parse_cases(path, images_dir=Path(args.images) if args.images else None)
        summary = import_cases(
            _database(),
            Actor.system(),
            study_name=args.study,
            cases=cases,
            raters_per_pair=args.raters_per_pair,
            seed=args.seed,
            provenance={"kind": "pairs-file", "file": path.name, "sha256": file_sha256(path)},
            image_base=None,
        )
    print(
        f"study {summary.study_name!r}: {summary.n_pairs} pairs, {summary.n_cases} cases "
        f"({summary.n_cases_reused} reused), {summary.n_images} images"
    )
    for warning in summary.warnings:
        print(f"warning: {warning}")
    return 0


def cmd_import_rexval(args: argparse.Namespace) -> int:
    """Import ReXVal's two files as a new study with its raters and ratings."""
    from backend.services.errors import ServiceError
    from backend.services.imports import import_rexval
    from backend.services.types import Actor

    with user_errors(ServiceError):
        summary = import_rexval(
            _database(),
            Actor.system(),
            gt_path=Path(args.gt),
            ratings_path=Path(args.ratings),
            study_name=args.study,
        )
    print(
        f"study {summary.study_name!r}: {summary.n_pairs} pairs, {summary.n_raters} raters, "
        f"{summary.n_ratings} ratings"
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a study as ReXVal files or JSONL with a manifest."""
    from backend.services.errors import ServiceError
    from backend.services.exports import export_study
    from backend.services.types import Actor

    with user_errors(ServiceError):
        summary = export_study(
            _database(), Actor.system(), study_name=args.study, fmt=args.format,
            out_dir=Path(args.output),
        )
    print(f"wrote {len(summary.files)} files to {summary.out_dir}")
    return 0


def cmd_import_demo(args: argparse.Namespace) -> int:
    """Import the bundled demo study."""
    from backend.datasets.demo import import_demo
    from backend.services.errors import ServiceError
    from backend.services.types import Actor

    with user_errors(ServiceError):
        summary = import_demo(_database(), Actor.system(), study_name=args.study)
    print(f"study {summary.study_name!r}: {summary.n_pairs} pairs, {summary.n_images} images")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def register(subparsers: Any) -> None:
    """Add this module's subcommands to ``python -m backend``."""
    p = subparsers.add_parser("import-pairs", help="import a CSV/JSONL file of cases")
    p.add_argument("--input", required=True, help="CSV or JSONL file of cases")
    p.add_argument("--study", required=True, help="name of the new study")
    p.add_argument(
        "--images",
        help="folder that image paths are relative to; a case with no image paths takes"
        " DIR/<case_id>/* or DIR/<case_id>[_*].dcm/png/jpg",
    )
    p.add_argument("--raters-per-pair", type=_positive_int, default=1)
    p.add_argument("--seed", type=int, default=0, help="assignment seed recorded on the study")
    p.set_defaults(func=cmd_import_pairs)

    p = subparsers.add_parser("import-rexval", help="import ReXVal's two CSV files")
    p.add_argument("--gt", required=True, help="50_samples_gt_and_candidates.csv")
    p.add_argument("--ratings", required=True,
                   help="6_valid_raters_per_rater_error_categories.csv")
    p.add_argument("--study", required=True, help="name of the new study")
    p.set_defaults(func=cmd_import_rexval)

    p = subparsers.add_parser("export", help="export a study (ReXVal files or JSONL)")
    p.add_argument("--study", required=True)
    p.add_argument("--format", required=True, choices=("rexval", "jsonl"))
    p.add_argument("--output", required=True, help="output folder (new or empty)")
    p.set_defaults(func=cmd_export)

    p = subparsers.add_parser("import-demo", help="import the bundled demo study")
    p.add_argument("--study", default="Demo study", help="name of the new study")
    p.set_defaults(func=cmd_import_demo)
