"""Helpers shared by the kinds that run a service on the worker (probes, build, import...).

A job runs on behalf of the admin who queued it: :func:`job_actor` turns the job's
``created_by`` back into that account (as it is now, so a demoted or deactivated admin's
queued job fails the service's own role check). Jobs queued by the command line or a script
(``created_by`` empty or ``system``) run as :meth:`Actor.system`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from radconcord.backend.errors import InvalidInput, NotFound
from radconcord.backend.jobs import queue
from radconcord.backend.jobs.context import JobContext
from radconcord.backend.types import Actor
from radconcord.db.models import User

SYSTEM_CREATORS = frozenset({"", "system"})


def job_actor(ctx: JobContext) -> Actor:
    """The account that queued the job, as an :class:`Actor`.

    Raises:
        NotFound: the job is gone, or its creator's account no longer exists.
    """
    info = queue.get(ctx.db, ctx.job_id)
    if info is None:
        raise NotFound(f"job {ctx.job_id} no longer exists")
    name = info.created_by or ""
    if name in SYSTEM_CREATORS:
        return Actor.system()
    with ctx.db.begin() as s:
        user = s.scalar(select(User).where(User.username == name))
        if user is None:
            raise NotFound(f"the account {name!r} that queued job {ctx.job_id} no longer exists")
        role = user.role if user.active else "inactive"
        return Actor(user_id=user.id, username=user.username, role=role)


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
