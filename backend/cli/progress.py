"""Progress of long commands: a bar on a terminal, plain periodic lines elsewhere.

Every long service takes a ``progress(done, total, message)`` callback; :func:`progress_bar`
gives the CLI one. On a TTY it draws a tqdm bar (rate and time left); when stderr is not a
terminal (CI, a log file) it prints one plain line at most every ``interval`` seconds and at
the end, so logs show progress without carriage-return noise.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

ProgressFn = Callable[[int, int, str], None]


def _bar_size(out: TextIO) -> dict[str, object]:
    """tqdm's size settings: follow the terminal, or a fixed size where it reports none.

    A pseudo-terminal whose size was never set (``docker run -t``, ``script``, some CI
    runners) reports 0 rows and 0 columns; tqdm then hides the bar entirely (no row to draw
    it in), so such a terminal gets an 80-column bar instead.
    """
    try:
        size = os.get_terminal_size(out.fileno())
    except (AttributeError, OSError, ValueError):
        size = None  # not a real file (a test's stream): tqdm's own fallback applies
    if size is not None and (size.columns <= 0 or size.lines <= 0):
        return {"ncols": size.columns if size.columns > 0 else 80,
                "nrows": size.lines if size.lines > 0 else 24}
    return {"dynamic_ncols": True}


@contextmanager
def progress_bar(desc: str, *, unit: str = "it", stream: TextIO | None = None,
                 interval: float = 10.0, tty: bool | None = None) -> Iterator[ProgressFn]:
    """A progress callback for the duration of a ``with`` block.

    Args:
        desc: What is being done (the bar's label).
        unit: What is counted (``"pair"``, ``"row"``, ``"step"``).
        stream: Where to draw (default ``sys.stderr``, so stdout stays parseable).
        interval: Seconds between plain lines when not on a terminal.
        tty: Force the bar (True) or plain lines (False); default: ``stream.isatty()``.

    Yields:
        ``progress(done, total, message)``; ``total`` may change between calls.
    """
    out = stream if stream is not None else sys.stderr
    on_tty = out.isatty() if tty is None else tty
    if on_tty:
        from tqdm import tqdm

        bar = tqdm(desc=desc, unit=unit, file=out, leave=True, **_bar_size(out))

        def update(done: int, total: int, message: str = "") -> None:
            if total and bar.total != total:
                bar.total = total
            bar.n = done
            if message:
                bar.set_postfix_str(message[:60], refresh=False)
            bar.refresh()

        try:
            yield update
        finally:
            bar.close()
        return

    start = time.monotonic()
    state = {"last": -interval, "done": 0, "total": 0, "printed": (-1, -1)}

    def line(done: int, total: int, message: str) -> None:
        elapsed = time.monotonic() - start
        rate = done / elapsed if elapsed > 0 else 0.0
        left = (total - done) / rate if rate > 0 and total >= done else None
        eta = f", {left:.0f} s left" if left is not None else ""
        of = f"/{total}" if total else ""
        tail = f" ({message})" if message else ""
        print(f"{desc}: {done}{of} {unit}s, {rate:.1f} {unit}/s{eta}{tail}", file=out,
              flush=True)
        state["printed"] = (done, total)

    def update(done: int, total: int, message: str = "") -> None:
        state["done"], state["total"] = done, total
        now = time.monotonic() - start
        if now - state["last"] >= interval:
            state["last"] = now
            line(done, total, message)

    try:
        yield update
    except BaseException:
        # A failed or interrupted run must not end with a line that reads like success.
        if state["done"]:
            line(state["done"], state["total"], "stopped")
        raise
    if state["printed"] != (state["done"], state["total"]) and state["done"]:
        line(state["done"], state["total"], "done")
