"""Helpers for tests that start a process and stop it with Ctrl+C (SIGINT)."""

from __future__ import annotations

import signal


def interruptible() -> None:
    """``preexec_fn`` that gives the child the default SIGINT action.

    A program started in the background by a non-interactive shell (``pytest ... &``, a CI
    step run that way) inherits SIGINT *ignored*; bash cannot trap a signal ignored on entry
    and Python does not turn it into KeyboardInterrupt, so a Ctrl+C test would wait for a stop
    that never comes. The child starts as it would from a terminal instead.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
