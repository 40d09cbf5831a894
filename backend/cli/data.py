"""Data commands: ``import-pairs``, ``import-rexval``, ``import-demo``, ``import-scores``
and ``build-study``.

Heavy modules (pydicom, SQLAlchemy models, metrics) are imported inside the handlers so that
``python -m backend --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from radconcord.backend.cli.common import Commands, UserError, database, service_errors, user_errors
from radconcord.backend.util import file_sha256


def cmd_import_pairs(args: argparse.Namespace) -> int:
    """Import a CSV/JSONL file of cases as a new study (or, with ``--dry-run``, preview it)."""
    from radconcord.backend.cli.progress import progress_bar
    from radconcord.backend.datasets.pairs import read_cases
    from radconcord.backend.services.transfer.imports import (
        import_cases,
        preview_import,
        preview_lines,
    )
    from radconcord.backend.types import Actor

    path = Path(args.input)
    images = Path(args.images) if args.images else None
    if args.dry_run:
        with database() as db, service_errors():
            preview = preview_import(db, Actor.system(), study_name=args.study,
                                     cases_file=path, images_dir=images, layout=args.layout)
        for line in preview_lines(preview):
            print(line)
        return 0 if preview.ok else 1
    with service_errors():
        parsed = read_cases(path, images_dir=images, layout=args.layout)
    detected = "" if parsed.layout_reason == "chosen" else f" (detected: {parsed.layout_reason})"
    print(f"layout: {parsed.layout}{detected}", file=sys.stderr)
    with database() as db, service_errors(), \
            progress_bar(f"import {args.study}", unit="pair") as progress:
        summary = import_cases(
            db,
            Actor.system(),
            study_name=args.study,
            cases=parsed.cases,
            raters_per_pair=args.raters_per_pair,
            seed=args.seed,
            provenance={"kind": "pairs-file", "file": path.name, "sha256": file_sha256(path),
                        "layout": parsed.layout},
            image_base=None,
            progress=progress,
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
    from radconcord.backend.cli.progress import progress_bar
    from radconcord.backend.services.transfer.imports import import_rexval
    from radconcord.backend.types import Actor

    with database() as db, service_errors(), \
            progress_bar(f"import {args.study}", unit="pair") as progress:
        summary = import_rexval(
            db,
            Actor.system(),
            gt_path=Path(args.gt),
            ratings_path=Path(args.ratings),
            study_name=args.study,
            progress=progress,
        )
    print(
        f"study {summary.study_name!r}: {summary.n_pairs} pairs, {summary.n_raters} raters, "
        f"{summary.n_ratings} ratings"
    )
    return 0


def cmd_import_demo(args: argparse.Namespace) -> int:
    """Import the bundled demo study."""
    from radconcord.backend.services.accounts.seed import import_demo
    from radconcord.backend.types import Actor

    with database() as db, service_errors():
        summary = import_demo(db, Actor.system(), study_name=args.study)
    print(f"study {summary.study_name!r}: {summary.n_pairs} pairs, {summary.n_images} images")
    return 0


# ``--lower-is-better`` given without keys (never a key: keys cannot hold a NUL).
_ALL_KEYS = "\0all"


def cmd_import_scores(args: argparse.Namespace) -> int:
    """Import a file of per-pair values computed elsewhere into a study (one line per key)."""
    from radconcord.backend.services.scores.score_imports import import_scores
    from radconcord.backend.types import Actor

    # A bare --lower-is-better is every imported key; with keys, those keys only.
    lower: bool | str = True if args.lower_is_better == _ALL_KEYS else (
        args.lower_is_better or False)
    with database() as db, service_errors():
        summary = import_scores(
            db, Actor.system(), study_name=args.study, path=Path(args.input),
            metric=args.metric, lower_is_better=lower, description=args.description,
            source=args.source, allow_missing=args.allow_missing)
    for line in summary.lines():
        print(line)
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def register(commands: Commands) -> None:
    """Add ``import-pairs``, ``import-rexval``, ``study import-scores``, ``db import-demo``
    and ``study build`` (old flat names kept).

    Args:
        commands: The command line's commands and groups.
    """
    p = commands.add_parser("import-pairs", help="import a CSV/JSONL file of cases")
    p.add_argument("--input", required=True, help="CSV or JSONL file of cases")
    p.add_argument("--study", required=True, help="name of the new study")
    p.add_argument(
        "--images",
        help="folder that image paths are relative to; a case with no image paths takes"
        " DIR/<case_id>/* or DIR/<case_id>[_*].dcm/png/jpg",
    )
    p.add_argument(
        "--layout", choices=("auto", "long", "wide"), default="auto",
        help="long: one row per candidate (case_id, reference, candidate, source); wide: one "
        "column per generator; auto (default): detected only when the columns leave no doubt "
        "(the reason is printed), else refused",
    )
    p.add_argument("--dry-run", action="store_true",
                   help="check the file and print what would be imported (cases, pairs, "
                   "sources, images found and missing); write nothing")
    p.add_argument("--raters-per-pair", type=_positive_int, default=1)
    p.add_argument("--seed", type=int, default=0, help="assignment seed recorded on the study")
    p.set_defaults(func=cmd_import_pairs)

    p = commands.add_parser("import-rexval", help="import ReXVal's two CSV files")
    p.add_argument("--gt", required=True, help="50_samples_gt_and_candidates.csv")
    p.add_argument("--ratings", required=True,
                   help="6_valid_raters_per_rater_error_categories.csv")
    p.add_argument("--study", required=True, help="name of the new study")
    p.set_defaults(func=cmd_import_rexval)

    p = commands.group("study").add_parser(
        "import-scores", help="import a metric's per-pair values computed elsewhere",
        description="Import per-pair values of a metric computed elsewhere (an API, another "
                    "cluster, a notebook) into a study: they then show in every view of the "
                    "study like a computed metric, marked as imported. FILE is CSV or JSONL "
                    "naming each pair by pair_number (1-based, as in the study's JSONL export) "
                    "or pair_id (the export's opaque id), with a 'value' column (give "
                    "--metric KEY) or one column per metric key (all imported; --metric "
                    "picks some). Re-importing another file for a key makes a new signature; "
                    "the study reads the latest import of each key.")
    p.add_argument("--study", required=True, help="the study whose pairs the file names")
    p.add_argument("--input", required=True, metavar="FILE", help="CSV or JSONL file of values")
    p.add_argument("--metric", default=None, metavar="KEY[,KEY...]",
                   help="the key of the 'value' column; for a file with one column per key, "
                   "the keys to import (default: every column)")
    p.add_argument("--lower-is-better", nargs="?", const=_ALL_KEYS, default=None,
                   metavar="KEY[,KEY...]",
                   help="lower values are better: every imported key, or the keys named "
                   "(default: higher is better)")
    p.add_argument("--description", default="", help="what the metric is")
    p.add_argument("--source", default="", help="where the values come from (URL or text)")
    p.add_argument("--allow-missing", action="store_true",
                   help="accept blank/NaN values and study pairs without a row (they get no "
                   "value; the count is printed)")
    p.set_defaults(func=cmd_import_scores)

    p = commands.group("db").add_parser("import-demo", help="import the bundled demo study")
    p.add_argument("--study", default="Demo study", help="name of the new study")
    p.set_defaults(func=cmd_import_demo)

    p = commands.group("study").add_parser(
        "build",
        help="create a ReXVal-style study from metric-oracle candidates of a report corpus",
        description="For each test report, pick the corpus report(s) each metric scores best "
                    "(TF-IDF candidate stage, exact re-ranking), deduplicate and create a "
                    "study open for rating.",
    )
    p.add_argument("--tests", required=True, help="CSV/JSONL of test reports (id, text) or 'iu'")
    p.add_argument("--corpus", required=True, help="CSV/JSONL of candidate reports or 'iu'")
    p.add_argument("--metrics", required=True, help="comma-separated metric keys or families")
    p.add_argument("--name", required=True, help="name of the new study")
    p.add_argument("--per-metric", type=_positive, default=1,
                   help="best candidates per metric and test report (default 1)")
    p.add_argument("--top-k", type=_top_k, default=50,
                   help="candidate-stage size, or 'all' for exhaustive search (default 50)")
    p.add_argument("--engine", choices=("local", "ray"), default="local")
    p.add_argument("--seed", type=int, default=0,
                   help="test sampling (iu), study seed and rater order (default 0)")
    p.add_argument("--limit-tests", type=_positive, default=None,
                   help="use at most N test reports (a seeded sample for --tests iu)")
    p.add_argument("--raters", default="", help="comma-separated rater usernames to assign")
    p.add_argument("--raters-per-pair", type=_positive, default=1)
    p.add_argument("--set", action="append", metavar="METRIC.OPTION=VALUE",
                   help="metric option (repeatable)")
    p.add_argument("--export", default=None, metavar="DIR",
                   help="also write rexval/, jsonl/, hf/ and manifest.json into DIR")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_build_study)

    commands.alias("import-scores", "study", "import-scores")
    commands.alias("import-demo", "db", "import-demo")
    commands.alias("build-study", "study", "build")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def _top_k(text: str) -> int | None:
    if text.strip().lower() in ("all", "none", "exhaustive"):
        return None
    return _positive(text)


def cmd_build_study(args: argparse.Namespace) -> int:
    """Build the study, optionally assign raters and export it."""
    from radconcord.backend.scoring.runner import ScoringError, parse_set_options
    from radconcord.backend.services.study_admin import build_study
    from radconcord.backend.types import Actor

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    raters = [r.strip() for r in (args.raters or "").split(",") if r.strip()]
    with user_errors(ScoringError):
        options = parse_set_options(args.set or [])
    if args.export and Path(args.export).exists() and any(Path(args.export).iterdir()):
        raise UserError(f"{args.export}: output folder exists and is not empty")
    from contextlib import nullcontext

    from radconcord.backend.cli.progress import progress_bar

    actor = Actor.system()
    bar = nullcontext(None) if args.quiet else progress_bar(f"build {args.name}", unit="step")
    with database() as db, service_errors():
        with bar as progress:
            summary = build_study.build_study(
                db, actor, study_name=args.name, tests=args.tests, corpus=args.corpus,
                metrics=metrics, per_metric=args.per_metric, top_k=args.top_k,
                engine=args.engine, seed=args.seed, limit_tests=args.limit_tests,
                raters=raters, raters_per_pair=args.raters_per_pair, options=options,
                progress=progress,
            )
        print(f"study {summary.study_name!r}: {summary.n_pairs} pairs for {summary.n_cases} "
              f"test reports ({summary.n_picks_before_dedup} metric picks before dedup), "
              f"metrics {', '.join(summary.metrics)}, engine {summary.engine}, "
              f"{summary.seconds:.1f} s")
        for source, n in sorted(summary.sources.items()):
            print(f"  {source}: {n}")
        if summary.tests_without_candidate:
            print(f"warning: {len(summary.tests_without_candidate)} test report(s) got no "
                  f"candidate: {', '.join(summary.tests_without_candidate[:5])}")
        if summary.n_assigned:
            print(f"assigned {summary.n_assigned} pairs to {len(raters)} rater(s)")
        if args.export:
            bundle = build_study.export_build(db, actor, study_name=summary.study_name,
                                              out_dir=Path(args.export))
            print(f"exported {len(bundle.files)} files to {bundle.out_dir}")
    return 0
