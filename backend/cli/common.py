"""What every command module shares: the user-error type, error mapping, the database, and
:class:`Commands` (the top-level commands, the groups and the old flat names kept as aliases).

Imports nothing heavy: ``python -m backend --help`` imports every command module.

The groups: every command module's ``register(commands)`` gets one :class:`Commands`. It
adds a top-level command with :meth:`Commands.add_parser` (``score``, ``correlate``...) or a
subcommand of a group with ``commands.group("study").add_parser("archive", ...)``, and keeps
the command's name from before the grouping working with :meth:`Commands.alias`. An alias
is a hidden top-level command (absent from ``--help`` and from the usage line) built from the
grouped parser once every module has registered: the same arguments and the same defaults
(``func`` included), hence the same behaviour and exit codes, so users' scripts that call
``radconcord create-user ...`` keep working.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from radconcord.db.session import Database


class UserError(Exception):
    """An error caused by the user's input; printed as one line, exit status 2."""


@contextlib.contextmanager
def user_errors(*types: type[BaseException]) -> Iterator[None]:
    """Turn the given exceptions raised in the block into :class:`UserError`.

    The error's message becomes the one-line ``error: ...`` the command line prints; the
    traceback is dropped because the message alone names what to fix.

    Args:
        types: Exception classes whose message is meant for the user.
    """
    try:
        yield
    except types as exc:
        raise UserError(str(exc)) from None


@contextlib.contextmanager
def database(url: str | None = None) -> Iterator[Database]:
    """The study database for one command, disposed of when the command ends.

    Args:
        url: Database URL; ``None`` takes ``DATABASE_URL`` or the data folder's SQLite file.

    Raises:
        UserError: The SQLite database's folder is missing and cannot be created, or is
            not writable (the message names the folder and the problem).
    """
    # SQLAlchemy and the models load only when a command opens the database.
    from radconcord.db.session import Database, DataFolderError

    try:
        db = Database(url)
    except DataFolderError as exc:
        raise UserError(str(exc)) from None
    try:
        yield db
    finally:
        db.dispose()


def service_errors() -> contextlib.AbstractContextManager[None]:
    """:func:`user_errors` for the services' errors (``ServiceError`` and its subclasses)."""
    from radconcord.backend.errors import ServiceError

    return user_errors(ServiceError)


#: Each group: (one line for the top-level help, the description of ``GROUP --help``).
GROUPS: dict[str, tuple[str, str]] = {
    "study": (
        "commands on one study: build, import-scores, export-radpref, settings, assign,"
        " assign-strategy, adjudicators, training-items, qualification, qc, simulate-rating,"
        " archive, delete",
        "Commands on one study (each takes --study or names it): create one from metric-oracle"
        " candidates, import metric values computed elsewhere, write it as RadPref files,"
        " change its settings, assign raters and their order, name its adjudicators, mark"
        " training items and see each rater's qualification, monitor its raters, replay its"
        " ratings, archive it or delete it.",
    ),
    "user": (
        "accounts: create, list, reset-password, deactivate, reactivate",
        "Manage the accounts of admins and raters.",
    ),
    "db": (
        "the database: init (schema), seed-demo, import-demo",
        "Set up the study database: its schema, the demo accounts and the bundled demo study.",
    ),
    "model": (
        "models of the metrics: train-er2score, train-concord, serve-llm, uncertainty",
        "Train and serve the models that some metrics use, and measure a model's sampling"
        " uncertainty.",
    ),
}


#: The order in which ``GROUP --help`` lists its subcommands (the modules register them in
#: another order; any not listed come last).
ORDER: dict[str, tuple[str, ...]] = {
    "study": ("build", "import-scores", "export-radpref", "settings", "assign",
              "assign-strategy", "adjudicators", "training-items", "qualification", "qc",
              "simulate-rating", "archive", "delete"),
    "user": ("create", "list", "reset-password", "deactivate", "reactivate"),
    "db": ("init", "seed-demo", "import-demo"),
    "model": ("train-er2score", "train-concord", "serve-llm", "uncertainty"),
}


class Commands:
    """What a command module's ``register`` adds its commands to.

    Args:
        subparsers: The top-level ``ArgumentParser.add_subparsers()`` action.
    """

    def __init__(self, subparsers: argparse._SubParsersAction) -> None:
        self._top = subparsers
        self._groups: dict[str, argparse._SubParsersAction] = {}
        self._aliases: list[tuple[str, str, str]] = []
        self._visible: list[str] = []

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:  # noqa: ANN401
        """A top-level command (``kwargs`` as ``add_subparsers().add_parser``)."""
        if "help" in kwargs:
            self._visible.append(name)
        return self._top.add_parser(name, **kwargs)

    def group(self, name: str) -> argparse._SubParsersAction:
        """The subcommands of group ``name`` (one of :data:`GROUPS`), created on first use.

        Raises:
            KeyError: ``name`` is not in :data:`GROUPS`.
        """
        if name not in self._groups:
            summary, description = GROUPS[name]
            parser = self.add_parser(name, help=summary, description=description)
            self._groups[name] = parser.add_subparsers(
                dest=f"{name}_command", metavar="COMMAND", required=True
            )
        return self._groups[name]

    def alias(self, old: str, group: str, name: str) -> None:
        """Keep the flat command ``old`` working as ``group name``, hidden from the help."""
        self._aliases.append((old, group, name))

    @property
    def aliases(self) -> dict[str, tuple[str, str]]:
        """Each old flat name: (group, subcommand)."""
        return {old: (group, name) for old, group, name in self._aliases}

    def finish(self) -> None:
        """Add the hidden aliases and list only the visible commands in the usage line.

        Called once every module has registered (an alias copies its command's arguments,
        which must all be there).

        Raises:
            KeyError: an alias names a group or subcommand that was never registered.
        """
        for old, group, name in self._aliases:
            target = self._groups[group].choices[name]
            # No help=: argparse lists a subcommand only when it has one. parents= copies the
            # arguments (-h included, hence add_help=False) and the defaults (func).
            self._top.add_parser(
                old,
                parents=[target],
                add_help=False,
                description=target.description,
                epilog=" ".join(filter(None, [
                    target.epilog, f"(The old name of '{group} {name}', kept as an alias.)"])),
                formatter_class=target.formatter_class,
            )
        # The help lists the single commands first, then the groups (jobs and pairwise
        # included: a parser with subcommands). argparse keeps the listed entries in
        # _choices_actions, in the order they were added.
        def is_group(name: str) -> bool:
            return self._top.choices[name]._subparsers is not None

        self._visible.sort(key=is_group)
        self._top._choices_actions.sort(key=lambda action: is_group(action.dest))
        for group, sub in self._groups.items():
            order = ORDER.get(group, ())
            sub._choices_actions.sort(
                key=lambda a, order=order: order.index(a.dest) if a.dest in order else len(order)
            )
        self._top.metavar = "{" + ",".join(self._visible) + "}"
