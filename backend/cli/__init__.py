"""``python -m backend``: the stable command line (see DESIGN.md).

Each command lives in the module that owns it; that module exposes ``register(subparsers)``
which adds its parser and sets ``func``. Command modules import nothing heavy at import time.
Errors a user can fix are printed as one line ``error: ...`` with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# Modules that contribute subcommands; each has register(subparsers).
COMMAND_MODULES = (
    "backend.metrics.commands",
    "backend.scoring.commands",
    "backend.datasets.commands",
    "backend.services.commands",
    "backend.services.account_commands",
    "backend.analysis.commands",
    "backend.metrics.er2_commands",
    "backend.datasets.build_commands",
)


class UserError(Exception):
    """An error caused by the user's input; printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand."""
    parser = argparse.ArgumentParser(prog="python -m backend", description="RadConcord")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # command family not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
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
