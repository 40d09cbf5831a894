"""``python -m backend pairwise make|assign|export|stats``: the pairwise mode of a study.

``make`` creates the comparisons (every two candidates of one reference), ``assign`` gives
them to raters (k per comparison), ``export`` writes one row per comparison and rater (CSV or
JSON, with sources: a lead's file), ``stats`` prints each metric's pairwise agreement and
Kendall tau-b against the 1-5 ratings. See :mod:`backend.services.annotation.pairwise`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from radconcord.backend.cli.common import UserError, database, service_errors

EXPORT_COLUMNS = ("comparison_position", "comparison_id", "case_id", "pair_a_position",
                  "pair_b_position", "source_a", "source_b", "rater", "preference", "rating_a",
                  "rating_b", "completed_at", "active_seconds")


def _make(args: argparse.Namespace) -> int:
    from radconcord.backend.services.annotation import pairwise
    from radconcord.backend.types import Actor

    with database(args.database_url) as db, service_errors():
        summary = pairwise.make_comparisons(db, Actor.system(), args.study, seed=args.seed)
    print(f"{summary.study_name}: {summary.created} new comparisons ({summary.total} in all, "
          f"{summary.references} references with 2+ candidates, seed={summary.seed})")
    return 0


def _assign(args: argparse.Namespace) -> int:
    from radconcord.backend.services.annotation import pairwise
    from radconcord.backend.types import Actor

    raters = [r.strip() for r in args.raters.split(",") if r.strip()]
    with database(args.database_url) as db, service_errors():
        summary = pairwise.assign_judgements(db, Actor.system(), args.study, raters,
                                             args.per_comparison, args.seed)
    print(f"{summary.study_name}: {summary.created} new judgements ({summary.n_comparisons} "
          f"comparisons, k={summary.raters_per_comparison}, seed={summary.seed})")
    for username, n in summary.per_rater.items():
        print(f"  {username}: {n} comparisons")
    return 0


def _export(args: argparse.Namespace) -> int:
    from radconcord.backend.services.annotation import pairwise
    from radconcord.backend.types import Actor
    from radconcord.backend.util import SafeCsvWriter, atomic_write

    out: Path = args.output
    if not out.parent.is_dir():
        raise UserError(f"{out}: folder {out.parent} does not exist")
    if out.suffix.lower() not in (".csv", ".json"):
        raise UserError(f"{out}: the output must end in .csv or .json")
    with database(args.database_url) as db, service_errors():
        rows = pairwise.export_rows(db, Actor.system(), args.study)
    try:
        if out.suffix.lower() == ".json":
            with atomic_write(out) as fh:
                json.dump(rows, fh, indent=2)
                fh.write("\n")
        else:
            with atomic_write(out, newline="") as fh:
                writer = SafeCsvWriter(fh)
                writer.writerow(EXPORT_COLUMNS)
                for row in rows:
                    writer.writerow(["" if row[c] is None else row[c] for c in EXPORT_COLUMNS])
    except OSError as exc:
        # atomic_write removed its temporary file: an existing file at out is unchanged.
        raise UserError(f"{out}: cannot write ({exc.strerror or exc})") from None
    print(f"{args.study}: {len(rows)} rows -> {out}")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from radconcord.backend.services.annotation import pairwise
    from radconcord.backend.types import Actor

    with database(args.database_url) as db, service_errors():
        stats = pairwise.study_preference_stats(
            db, Actor.system(), args.study, source=args.source, resamples=args.bootstrap,
            seed=args.seed)
    print(f"{stats.study_name}: {stats.n_comparisons} judged comparisons, "
          f"{stats.n_candidates} rated candidates, preference from {stats.preference_source}")
    for m in stats.metrics:
        a = m.agreement

        def fmt(x: float) -> str:
            return "n/a" if x != x else f"{x:.3f}"  # NaN is the only value unequal to itself
        print(f"  {m.key}: agreement {fmt(a.value)} [{fmt(a.ci_low)}, {fmt(a.ci_high)}] "
              f"over {a.n_comparisons} ({a.n_ties_excluded} rater ties excluded); "
              f"tau-b vs rating {fmt(m.kendall_tau_b_rating)} (n={m.n})")
    return 0


def register(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private subparsers type
    """Add the ``pairwise`` command and its subcommands.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    top = subparsers.add_parser(
        "pairwise", help="pairwise mode: make and assign comparisons, export, statistics",
        description="Pairwise mode of a study (annotation_mode=pairwise): two candidates of "
        "one reference side by side, which is better (or tie) and a 1-5 rating of each.")
    sub = top.add_subparsers(dest="pairwise_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--study", required=True, help="study name")
        p.add_argument("--database-url", default=None,
                       help="database URL (default: DATABASE_URL or the data folder's SQLite)")

    p = sub.add_parser("make", help="a comparison for every two candidates of each reference")
    common(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the A/B sides (default 0)")
    p.set_defaults(func=_make)

    p = sub.add_parser("assign", help="give each comparison to k raters")
    common(p)
    p.add_argument("--raters", required=True, help="comma-separated rater usernames")
    p.add_argument("--per-comparison", type=int, default=1, metavar="K",
                   help="raters per comparison (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the assignment (default 0)")
    p.set_defaults(func=_assign)

    p = sub.add_parser("export", help="one row per comparison and rater (CSV or JSON)")
    common(p)
    p.add_argument("--output", required=True, type=Path, help="FILE.csv or FILE.json")
    p.set_defaults(func=_export)

    p = sub.add_parser("stats", help="pairwise agreement and tau-b vs ratings per metric")
    common(p)
    p.add_argument("--source", choices=("mean_rating", "votes"), default="mean_rating",
                   help="raters' preference from the mean 1-5 ratings (default) or the votes")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="B",
                   help="bootstrap resamples of the agreement's 95%% CI (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0)")
    p.set_defaults(func=_stats)
