"""``python -m backend adjudicators``: who records consensus counts of a study's disputed pairs.

Imports nothing heavy at import time (the database loads when the command runs).
"""

from __future__ import annotations

import argparse

from radconcord.backend.cli.common import Commands, database, service_errors


def _adjudicators(args: argparse.Namespace) -> int:
    from radconcord.backend.services.quality import adjudication
    from radconcord.backend.types import Actor

    with database() as db, service_errors():
        if args.add:
            names = adjudication.set_adjudicator(db, Actor.system(), study_name=args.study,
                                                 username=args.add, on=True)
        elif args.remove:
            names = adjudication.set_adjudicator(db, Actor.system(), study_name=args.study,
                                                 username=args.remove, on=False)
        else:
            names = adjudication.adjudicators(db, Actor.system(), study_name=args.study)
    print(f"{args.study}: adjudicators: {', '.join(names) or 'none'}"
          " (admins adjudicate every study)")
    return 0


def register(commands: Commands) -> None:
    """Add ``study adjudicators`` (old name ``adjudicators`` kept).

    Args:
        commands: The command line's commands and groups.
    """
    p = commands.group("study").add_parser(
        "adjudicators",
        help="list, add or remove a study's adjudicators",
        description="An adjudicator sees the raters' counts of the study's disputed pairs"
        " (anonymised) and records consensus counts. Any active account can be one.",
    )
    p.add_argument("--study", required=True, help="study name")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--add", metavar="USER", help="make USER an adjudicator")
    action.add_argument("--remove", metavar="USER", help="USER is no longer an adjudicator")
    action.add_argument("--list", action="store_true", help="list them (the default)")
    p.set_defaults(func=_adjudicators)
    commands.alias("adjudicators", "study", "adjudicators")
