"""Helpers shared by the kinds that run a service on the worker (probes, build, import...).

Who a job runs as is :attr:`backend.jobs.context.JobContext.actor` (the account that queued
it, as it is now); its study is :attr:`~backend.jobs.context.JobContext.study_id`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from radconcord.backend.errors import InvalidInput


def param(params: Mapping[str, Any], name: str, kind: type | tuple[type, ...],
          default: Any = ...) -> Any:  # noqa: ANN401 - a JSON value of the given type
    """``params[name]`` checked against ``kind`` (a job row may be written by hand).

    Raises:
        InvalidInput: missing (without a default) or of the wrong JSON type.
    """
    if name not in params or params[name] is None:
        if default is ...:
            raise InvalidInput(f"job params: missing {name!r}")
        return default
    value = params[name]
    # bool is an int in Python; a JSON true is never a count.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise InvalidInput(f"job params: {name!r} must be {_names(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise InvalidInput(f"job params: {name!r} must be {_names(kind)}, got {value!r}")
    return value


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)
