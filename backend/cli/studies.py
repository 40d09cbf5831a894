"""Database and study commands: ``init-db``, ``seed-demo``, ``assign``, ``archive-study``,
``unarchive-study``, ``delete-study`` and ``study-settings``.

Account commands (``create-user``, ``reset-password``, ...) are in ``backend.cli.accounts``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from radconcord.backend.cli.common import Commands, UserError, database, service_errors


def _init_db(args: argparse.Namespace) -> int:
    from radconcord.backend.services.accounts.seed import ensure_database

    with database() as db:
        revision = ensure_database(db)
    print(f"database ready at {_redact(db.url)} (revision {revision})")
    return 0


def _seed_demo(args: argparse.Namespace) -> int:
    from radconcord.backend.services.accounts.demo_accounts import DEMO_USERS
    from radconcord.backend.services.accounts.seed import seed_ct_demo, seed_demo

    with database() as db, service_errors():
        result = seed_demo(db)
        ct = seed_ct_demo(db)
    print(
        f"{result.study_name}: {result.n_pairs} pairs, "
        f"{'imported' if result.study_created else 'already present'}; "
        f"{result.assignments_created} new assignments; "
        f"new accounts: {', '.join(result.created_users) or 'none'}"
    )
    print(
        f"{ct.study_name}: {ct.n_pairs} pairs, "
        f"{'imported' if ct.study_created else 'already present'}; "
        f"{ct.assignments_created} new assignments"
    )
    if result.created_users:
        for username, password, role, _ in DEMO_USERS:
            if username in result.created_users:
                print(f"  {role:5s} {username} / {password}")
    return 0


def _assign(args: argparse.Namespace) -> int:
    from radconcord.backend.services.study_admin import assignment
    from radconcord.backend.types import Actor

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
    if summary.training_created or summary.repeats_created:
        # Beside the study-pair assignments counted above: the training items every rater
        # does first and the hidden repeats of ``repeat_share``.
        print(f"  plus {summary.training_created} training-item and "
              f"{summary.repeats_created} hidden-repeat assignments")
    for username, n in summary.per_rater.items():
        print(f"  {username}: {n} pairs")
    return 0


def _archive(args: argparse.Namespace) -> int:
    from radconcord.backend.services.study_admin import studies
    from radconcord.backend.types import Actor

    fn = studies.unarchive_study if args.undo else studies.archive_study
    with database() as db, service_errors():
        summary = fn(db, Actor.system(), study_name=args.study)
    print(f"study {summary.name!r} is now {summary.status}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    from radconcord.backend.services.study_admin import studies
    from radconcord.backend.types import Actor

    confirm = args.confirm
    if confirm is None:
        if not sys.stdin.isatty():
            raise UserError("delete-study: give --confirm NAME (the study's name) to confirm")
        confirm = input(f"Type the study name ({args.study}) to delete it: ")
    with database() as db, service_errors():
        done = studies.delete_study(db, Actor.system(), study_name=args.study, confirm=confirm,
                                    export_root=Path(args.export_root) if args.export_root
                                    else None)
    print(f"deleted study {done.study_name!r}: {done.n_pairs} pairs, {done.n_ratings} rating "
          f"cells, {done.n_files_removed} image files")
    if done.export_dir is not None:
        print(f"its ratings were exported first to {done.export_dir}")
    return 0


def _settings(args: argparse.Namespace) -> int:
    from radconcord.backend.services.study_admin import study_settings
    from radconcord.backend.types import Actor

    changes = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        spec = study_settings.SETTINGS.get(key.strip())
        if not sep or spec is None:
            raise UserError(f"--set {item!r}: expected KEY=VALUE with KEY one of "
                            f"{', '.join(study_settings.SETTINGS)}")
        if spec.type is bool:
            low = value.strip().lower()
            if low not in ("true", "false", "on", "off", "yes", "no", "1", "0"):
                raise UserError(f"--set {item!r}: expected true or false")
            changes[spec.key] = low in ("true", "on", "yes", "1")
        else:
            try:
                changes[spec.key] = spec.type(value.strip())
            except ValueError:
                raise UserError(f"--set {item!r}: expected a {spec.type.__name__}") from None
    with database() as db, service_errors():
        if changes:
            now = study_settings.update_study_settings(db, Actor.system(),
                                                       study_name=args.study, **changes)
            if "repeat_share" in changes:
                # Raters already assigned get their hidden repeats now (as on the Assign
                # page); raters assigned later get them with their assignment.
                from radconcord.backend.services.study_admin import assignment

                added = assignment.add_missing_repeats(db, Actor.system(),
                                                       study_name=args.study)
                if added:
                    print(f"{added} hidden repeats given to the raters already assigned")
        else:
            now = study_settings.study_settings(db, Actor.system(), args.study)
    for key, value in now.values.items():
        changed = now.changed_at.get(key)
        caveat = study_settings.SETTINGS[key].caveat
        print(f"{key} = {str(value).lower() if isinstance(value, bool) else value}"
              + (f" (changed {changed})" if changed else " (default)")
              + (f"  # {caveat}" if caveat else ""))
    return 0


def _redact(url: str) -> str:
    """``url`` without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def register(commands: Commands) -> None:
    """Add ``db init|seed-demo`` and ``study assign|archive|delete|settings`` (old names
    kept)."""
    db = commands.group("db")
    study = commands.group("study")
    p = db.add_parser("init", help="create or upgrade the study database schema")
    p.set_defaults(func=_init_db)

    p = db.add_parser(
        "seed-demo", help="create the demo accounts and study (idempotent)"
    )
    p.set_defaults(func=_seed_demo)

    p = study.add_parser("assign", help="assign raters to a study's pairs")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--raters", required=True, help="comma-separated rater usernames")
    p.add_argument("--per-pair", type=int, required=True, help="raters per pair (k)")
    p.add_argument("--seed", type=int, default=0, help="seed of the assignment and orders")
    p.set_defaults(func=_assign)

    p = study.add_parser(
        "archive",
        help="archive a study (kept, hidden from raters and lists); --undo brings it back",
    )
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--undo", action="store_true", help="unarchive: back to closed")
    p.set_defaults(func=_archive)

    p = study.add_parser(
        "delete",
        help="delete a study and its ratings (exported first when it has any)",
    )
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--confirm", metavar="NAME", help="the study name again, to confirm")
    p.add_argument("--export-root", metavar="DIR",
                   help="where its ratings are exported first (default: "
                        "<data dir>/deleted-studies)")
    p.set_defaults(func=_delete)

    p = study.add_parser("settings", help="show or change a study's settings")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="e.g. highlight_differences=true (repeatable)")
    p.set_defaults(func=_settings)

    commands.alias("init-db", "db", "init")
    commands.alias("seed-demo", "db", "seed-demo")
    for old, new in (("assign", "assign"), ("archive-study", "archive"),
                     ("delete-study", "delete"), ("study-settings", "settings")):
        commands.alias(old, "study", new)
