"""Account commands: ``create-user``, ``reset-password``, ``deactivate``, ``reactivate``,
``list-users``.

They run as the system actor (whoever can run them can read the database anyway). A one-time
password is printed once, on stdout, and never stored in clear: its owner must choose a new
password at first login.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TypeVar

from radconcord.backend.cli.common import Commands, database, service_errors

T = TypeVar("T")


def _run(fn: Callable[..., T], **kwargs: object) -> T:
    """Call an account service on the configured database as the system actor.

    Service errors become one-line user errors.
    """
    from radconcord.backend.types import Actor

    with database() as db, service_errors():
        return fn(db, Actor.system(), **kwargs)


def _print_one_time_password(username: str, password: str) -> None:
    print(f"one-time password for {username} (shown only now; it must be changed at the "
          f"first login):")
    print(f"  {password}")


def _create_user(args: argparse.Namespace) -> int:
    from radconcord.backend.services.accounts import auth

    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        info = _run(auth.create_user, username=args.username, password=password,
                    role=args.role, display_name=args.display_name or "")
        print(f"created {info.role} {info.username}")
        return 0
    created = _run(auth.create_user_with_one_time_password, username=args.username,
                   role=args.role, display_name=args.display_name or "")
    print(f"created {created.user.role} {created.user.username}")
    _print_one_time_password(created.user.username, created.password)
    return 0


def _reset_password(args: argparse.Namespace) -> int:
    from radconcord.backend.services.accounts import auth

    reset = _run(auth.reset_password, username=args.username)
    print(f"reset the password of {reset.user.username}; all its sessions are logged out")
    _print_one_time_password(reset.user.username, reset.password)
    return 0


def _set_active(active: bool) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        from radconcord.backend.services.accounts import auth

        info = _run(auth.set_active, username=args.username, active=active)
        if active:
            print(f"reactivated {info.username} (it logs in again with its password)")
        else:
            print(f"deactivated {info.username}; all its sessions are logged out")
        return 0

    return command


def _list_users(args: argparse.Namespace) -> int:
    from radconcord.backend.services.accounts import auth

    users = _run(auth.list_users)
    if not users:
        print("no accounts yet: create one with create-user")
        return 0
    header = ("username", "role", "active", "must change password", "created", "display name")
    rows = [
        (u.username, u.role, "yes" if u.active else "no",
         "yes" if u.must_change_password else "no",
         u.created_at.strftime("%Y-%m-%d %H:%M"), u.display_name)
        for u in users
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        cells = [str(c).ljust(w) for c, w in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip())
    return 0


def register(commands: Commands) -> None:
    """Add ``user create|reset-password|deactivate|reactivate|list`` (old names kept)."""
    users = commands.group("user")
    p = users.add_parser(
        "create",
        help="create an admin or rater account (with a one-time password unless "
             "--password-stdin)",
    )
    p.add_argument("--username", required=True)
    p.add_argument("--role", required=True, choices=["admin", "rater"])
    p.add_argument("--display-name", default="")
    p.add_argument(
        "--password-stdin", action="store_true",
        help="read the password from the first stdin line; without it a one-time password "
             "is generated and printed once",
    )
    p.set_defaults(func=_create_user)

    p = users.add_parser(
        "reset-password",
        help="give an account a new one-time password (printed once) and log it out",
    )
    p.add_argument("username", metavar="USER")
    p.set_defaults(func=_reset_password)

    p = users.add_parser("deactivate", help="disable an account and log it out everywhere")
    p.add_argument("username", metavar="USER")
    p.set_defaults(func=_set_active(False))

    p = users.add_parser("reactivate", help="enable a deactivated account again")
    p.add_argument("username", metavar="USER")
    p.set_defaults(func=_set_active(True))

    p = users.add_parser("list", help="list the accounts and their state")
    p.set_defaults(func=_list_users)

    for old, new in (("create-user", "create"), ("reset-password", "reset-password"),
                     ("deactivate", "deactivate"), ("reactivate", "reactivate"),
                     ("list-users", "list")):
        commands.alias(old, "user", new)
