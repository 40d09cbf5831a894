"""``python -m backend``: the stable command line (see docs/architecture.md, "A command").

The command line is the layer above the services: each family of commands is one module of
this package (``metrics``, ``scoring``, ``data``, ``accounts``, ``studies``, ``analysis``,
``jobs``...) exposing ``register(commands)``, which adds its parsers and sets ``func``. No
package below holds command code. Command modules import nothing heavy at import time.
Errors a user can fix are printed as one line ``error: ...`` with exit status 2.

The everyday commands are top-level (``score``, ``metrics``, ``import-pairs``,
``import-rexval``, ``import-radpref``, ``correlate``, ``export``, ``report``, ``worker``,
``benchmark``); the rest sit in groups (``study``, ``user``, ``db``, ``model``, ``jobs``,
``pairwise``; :class:`backend.cli.common.Commands`). The flat names they had before the
grouping (``create-user``, ``archive-study``...) still work as hidden aliases.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from radconcord.backend.cli.common import Commands, UserError

__all__ = [
    "COMMAND_MODULES", "CommandModuleError", "UserError", "build_parser", "main", "old_names",
]

# Every module that contributes subcommands; each has register(commands), commands being a
# backend.cli.common.Commands. All of them must import: a family that fails is an error,
# never a command that silently disappears.
COMMAND_MODULES = (
    "radconcord.backend.cli.metrics",
    "radconcord.backend.cli.scoring",
    "radconcord.backend.cli.data",
    "radconcord.backend.cli.export",
    "radconcord.backend.cli.llm",
    "radconcord.backend.cli.studies",
    "radconcord.backend.cli.accounts",
    "radconcord.backend.cli.analysis",
    "radconcord.backend.cli.jobs",
    "radconcord.backend.cli.report",
    "radconcord.backend.cli.simulation",
    "radconcord.backend.cli.radpref",
    "radconcord.backend.cli.calibration",
    "radconcord.backend.cli.pairwise",
    "radconcord.backend.cli.adjudication",
    "radconcord.backend.cli.monitoring",
    "radconcord.backend.cli.benchmark",
)


class CommandModuleError(RuntimeError):
    """A command module listed in :data:`COMMAND_MODULES` failed to import or register."""


def build_parser(prog: str = "python -m backend", epilog: str | None = None
                 ) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand of :data:`COMMAND_MODULES`.

    Args:
        prog: The command's name in usage lines and help (``radconcord`` for the script).
        epilog: Text after the top-level help (commands a wrapper adds, such as ``app``).

    Raises:
        CommandModuleError: A listed module cannot be imported or has no ``register``; the
            message names the module and the underlying error.
    """
    return _build(prog, epilog)[0]


def old_names(prog: str = "python -m backend") -> dict[str, tuple[str, str]]:
    """Each flat command name kept as a hidden alias: its (group, subcommand)."""
    return _build(prog, None)[1].aliases


def _build(prog: str, epilog: str | None) -> tuple[argparse.ArgumentParser, Commands]:
    parser = argparse.ArgumentParser(prog=prog, description="RadConcord", epilog=epilog)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = Commands(parser.add_subparsers(dest="command", required=True))
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise CommandModuleError(
                f"command module {name} failed to import: {type(exc).__name__}: {exc}"
            ) from exc
        register = getattr(module, "register", None)
        if not callable(register):
            raise CommandModuleError(f"command module {name} has no register(commands)")
        register(commands)
    commands.finish()
    return parser, commands


def main(argv: list[str] | None = None, *, prog: str = "python -m backend",
         epilog: str | None = None) -> int:
    """Entry point; returns the exit status.

    Args:
        argv: The arguments (default ``sys.argv[1:]``).
        prog: The command's name in usage lines and help.
        epilog: Text after the top-level help.
    """
    parser = build_parser(prog, epilog)
    args = parser.parse_args(argv)
    if not sys.stderr.isatty():
        # Off a terminal progress is plain lines (backend.cli.progress); the carriage-return
        # bars that transformers and huggingface_hub draw while loading weights would garble
        # logs. Read when they are first imported, which the commands do lazily, after this.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
