"""Adaptive rating commands: ``simulate-rating`` and ``assign-strategy``.

``simulate-rating`` replays a fully rated study under the random and adaptive orders and
writes CI width against the number of ratings as CSV; ``assign-strategy`` chooses a study's
order strategy (random, the default, or adaptive with its question), recorded on the study.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from radconcord.backend.cli.common import Commands, UserError, database, service_errors
from radconcord.backend.cli.progress import progress_bar


def _simulate(args: argparse.Namespace) -> int:
    from radconcord.backend.services.evaluation import simulation
    from radconcord.backend.types import Actor

    out = Path(args.output)
    if not out.parent.is_dir():
        raise UserError(f"--output {out}: folder {out.parent} does not exist")
    # A bar on a terminal, plain lines elsewhere (every replay with --progress).
    with database(args.database_url) as db, service_errors(), progress_bar(
        "simulate-rating", unit="replay", interval=0.0 if args.verbose_progress else 10.0
    ) as progress:
        result = simulation.simulate_study(
            db, Actor.system(), study_name=args.study, strategy=args.strategy,
            seeds=args.seeds, question=args.question, seed=args.seed,
            resamples=args.resamples, significant_only=args.significant_only,
            progress=progress,
        )
    simulation.write_curves_csv(out, result)
    print(f"{result.study}: {result.n_ratings} ratings ({result.n_pairs} pairs, "
          f"{result.n_raters} raters), question {result.question}, "
          f"{len(result.seeds)} seed(s) x {', '.join(result.strategies)} -> {out}")
    s = result.summary
    if s:
        print(f"  final CI width {s['final_random_ci_width']:.4f}; within "
              f"{s['tolerance']:.0%} of it: random after {s['random_ratings_to_target']} "
              f"ratings, adaptive after {s['adaptive_ratings_to_target']} "
              f"(saved {s['saved_to_target']})")
        for p in s["at_random_checkpoints"]:
            print(f"  at {p['random_ratings']} ratings: CI width random "
                  f"{p['random_ci_width']:.4f}, adaptive {p['adaptive_ci_width']:.4f}; "
                  f"|estimate - full-data estimate| random {p['random_abs_error']:.4f}, "
                  f"adaptive {p['adaptive_abs_error']:.4f}; adaptive reaches random's width "
                  f"at {p['adaptive_ratings']}")
    return 0


def _strategy(args: argparse.Namespace) -> int:
    from radconcord.backend.services.study_admin import assignment
    from radconcord.backend.types import Actor

    with database(args.database_url) as db, service_errors():
        setting = assignment.set_strategy(
            db, Actor.system(), study_name=args.study, strategy=args.strategy,
            question=args.question, seed=args.seed,
        )
    q = f", question {setting.question}" if setting.question else ""
    print(f"{setting.study_name}: {setting.strategy} order{q}, seed {setting.seed}; "
          f"{setting.reordered} open pair(s) moved")
    return 0


def register(commands: Commands) -> None:
    """Add ``study simulate-rating`` and ``study assign-strategy`` (old flat names kept).

    Args:
        commands: The command line's commands and groups.
    """
    study = commands.group("study")
    p = study.add_parser(
        "simulate-rating",
        help="replay a rated study under random and adaptive orders; CI width vs ratings",
        description="Replay a fully rated study, revealing one rater x pair rating at a time"
        " in each strategy's order, and write the question's bootstrap CI width at"
        " checkpoints as CSV (strategy, seed, n_ratings, ci_width, quantity, question).",
    )
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--strategy", choices=("adaptive", "random", "both"), default="both",
                   help="which order(s) to replay (default both)")
    p.add_argument("--seeds", type=int, default=20, help="replays per strategy (default 20)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--question", default="all",
                   help="'all' (widest metric tau CI, default) or 'tau_diff:A,B'")
    p.add_argument("--resamples", type=int, default=200,
                   help="bootstrap resamples per checkpoint (default 200)")
    p.add_argument("--significant-only", action="store_true",
                   help="target clinically significant errors instead of all errors")
    p.add_argument("--progress", dest="verbose_progress", action="store_true",
                   help="when stderr is not a terminal, a line per replay (default: one"
                   " every 10 s); a terminal always gets a progress bar")
    p.add_argument("--output", required=True, help="CSV file to write")
    p.add_argument("--database-url", default=None,
                   help="database URL (default: DATABASE_URL or the data folder's SQLite file)")
    p.set_defaults(func=_simulate)

    a = study.add_parser(
        "assign-strategy",
        help="order raters' remaining pairs randomly (default) or adaptively",
        description="Choose a study's order strategy; recorded in the study's provenance"
        " and export manifest. Adaptive reorders each rater's open pairs after every"
        " completed pair; assignments (k raters per pair) never change.",
    )
    a.add_argument("--study", required=True, help="study name")
    a.add_argument("--strategy", choices=("random", "adaptive"), required=True)
    a.add_argument("--question", default="all",
                   help="adaptive only: 'all' (default) or 'tau_diff:A,B'")
    a.add_argument("--seed", type=int, default=None,
                   help="seed of the tie-breaks (default: the study's assignment seed)")
    a.add_argument("--database-url", default=None,
                   help="database URL (default: DATABASE_URL or the data folder's SQLite file)")
    a.set_defaults(func=_strategy)

    commands.alias("simulate-rating", "study", "simulate-rating")
    commands.alias("assign-strategy", "study", "assign-strategy")
