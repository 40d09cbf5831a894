"""The job kinds: one table ``name -> "module:function"``, like the metric registry.

Nothing here imports a kind's module until a worker runs a job of that kind, so ``import
backend.jobs`` (done by the web app to queue jobs) loads no model code. A kind whose module
fails to import raises: it is never skipped silently.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from radconcord.backend.jobs.context import JobContext

#: ``run(ctx, params) -> result dict | None`` of each kind, as ``"module:function"``.
KINDS: dict[str, str] = {
    "score": "radconcord.backend.jobs.kinds.score:run",
    "probes": "radconcord.backend.jobs.kinds.probes:run",
    "build_oracle": "radconcord.backend.jobs.kinds.build_oracle:run",
    "train_er2score": "radconcord.backend.jobs.kinds.train_er2score:run",
    "refit_radcliq": "radconcord.backend.jobs.kinds.refit_radcliq:run",
    "import": "radconcord.backend.jobs.kinds.imports:run",
    "simulate_rating": "radconcord.backend.jobs.kinds.simulate_rating:run",
    "report": "radconcord.backend.jobs.kinds.report:run",
}

KindFn = Callable[["JobContext", dict[str, Any]], "dict[str, Any] | None"]


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


def load_kind(name: str) -> KindFn:
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
