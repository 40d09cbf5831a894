"""Database and study commands: ``init-db``, ``seed-demo``, ``assign``.

Account commands (``create-user``, ``reset-password``, ...) are in ``backend.cli.accounts``.
"""

from __future__ import annotations

import argparse

from backend.cli.common import database, service_errors


def _init_db(args: argparse.Namespace) -> int:
    from backend.services.seed import ensure_database

    with database() as db:
        revision = ensure_database(db)
    print(f"database ready at {_redact(db.url)} (revision {revision})")
    return 0


def _seed_demo(args: argparse.Namespace) -> int:
    from backend.services.seed import DEMO_USERS, seed_demo

    with database() as db, service_errors():
        result = seed_demo(db)
    print(
        f"{result.study_name}: {result.n_pairs} pairs, "
        f"{'imported' if result.study_created else 'already present'}; "
        f"{result.assignments_created} new assignments; "
        f"new accounts: {', '.join(result.created_users) or 'none'}"
    )
    if result.created_users:
        for username, password, role, _ in DEMO_USERS:
            if username in result.created_users:
                print(f"  {role:5s} {username} / {password}")
    return 0


def _assign(args: argparse.Namespace) -> int:
    from backend.services import assignment
    from backend.types import Actor

    raters = [r.strip() for r in args.raters.split(",") if r.strip()]
    with database() as db, service_errors():
        summary = assignment.assign_raters(
            db,
            Actor.system(),
            study_name=args.study,
            rater_usernames=raters,
            raters_per_pair=args.per_pair,
            seed=args.seed,
        )
    print(
        f"{summary.study_name}: {summary.created} new assignments "
        f"({summary.n_pairs} pairs, k={summary.raters_per_pair}, seed={summary.seed})"
    )
    for username, n in summary.per_rater.items():
        print(f"  {username}: {n} pairs")
    return 0


def _redact(url: str) -> str:
    """``url`` without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to ``python -m backend``."""
    p = subparsers.add_parser("init-db", help="create or upgrade the study database schema")
    p.set_defaults(func=_init_db)

    p = subparsers.add_parser(
        "seed-demo", help="create the demo accounts and study (idempotent)"
    )
    p.set_defaults(func=_seed_demo)

    p = subparsers.add_parser("assign", help="assign raters to a study's pairs")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--raters", required=True, help="comma-separated rater usernames")
    p.add_argument("--per-pair", type=int, required=True, help="raters per pair (k)")
    p.add_argument("--seed", type=int, default=0, help="seed of the assignment and orders")
    p.set_defaults(func=_assign)
