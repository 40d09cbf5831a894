"""The job kinds: one table ``name -> "module:function"``, like the metric registry.

Nothing here imports a kind's module until a worker runs a job of that kind, so ``import
backend.jobs`` (done by the web app to queue jobs) loads no model code. A kind whose module
fails to import raises: it is never skipped silently.

The bottom of the job queue: it imports no other module of :mod:`backend.jobs` (the queue
checks kind names here; the context imports the queue), so the package has no cycle. The
signature of a kind, :data:`backend.jobs.context.KindFn`, lives with the context it takes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

#: ``run(ctx, params) -> result dict | None`` of each kind, as ``"module:function"``.
KINDS: dict[str, str] = {
    "score": "radconcord.backend.runner.kinds.score:run",
    "score_chunk": "radconcord.backend.runner.kinds.score:run_chunk",
    "probes": "radconcord.backend.runner.kinds.probes:run",
    "build_oracle": "radconcord.backend.runner.kinds.build_oracle:run",
    "train_er2score": "radconcord.backend.runner.kinds.train_er2score:run",
    "train_concord": "radconcord.backend.runner.kinds.train_concord:run",
    "refit_radcliq": "radconcord.backend.runner.kinds.refit_radcliq:run",
    "import": "radconcord.backend.runner.kinds.imports:run",
    "simulate_rating": "radconcord.backend.runner.kinds.simulate_rating:run",
    "report": "radconcord.backend.runner.kinds.report:run",
}

#: What :func:`load_kind` returns: ``run(ctx, params)`` (typed in full as
#: :data:`backend.jobs.context.KindFn`).
LoadedKind = Callable[..., "dict[str, Any] | None"]


class UnknownJobKind(KeyError):
    """A job kind that is not in :data:`KINDS`."""

    def __str__(self) -> str:
        # KeyError's own str() wraps the message in quotes.
        return str(self.args[0]) if self.args else "unknown job kind"


def kind_names() -> list[str]:
    """Every registered kind, in table order."""
    return list(KINDS)


def check_kind(name: str) -> str:
    """Return ``name`` if it is a registered kind.

    Raises:
        UnknownJobKind: it is not (the message lists the known kinds).
    """
    if name not in KINDS:
        raise UnknownJobKind(
            f"unknown job kind {name!r} (known: {', '.join(KINDS)})"
        )
    return name


def load_kind(name: str) -> LoadedKind:
    """The ``run`` function of kind ``name``, importing its module now.

    Raises:
        UnknownJobKind: ``name`` is not registered.
        ImportError: the kind's module failed to import (propagated as is).
        AttributeError: the module has no such function.
    """
    target = KINDS[check_kind(name)]
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise AttributeError(f"job kind {name!r}: {target} is not a function")
    return fn
