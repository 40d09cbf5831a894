"""JSON routes the browser components call directly (saves, activity, image pixels).

They live beside the cookie routes of ``webapp/server.py`` and share their rules: the
HttpOnly session cookie authenticates (a request carries no token a script could read), the
``X-RadConcord: 1`` header is required on every state-changing request (a cross-site form
cannot send it and this server grants no CORS), bodies are size-capped, and database work runs
off the event loop. A component talks to these routes instead of a Streamlit rerun so that a
click is stored even when the Streamlit session behind the page has gone (a server restart):
the cookie still names the rater, or the route answers 401 and the component keeps the change.

Each module of this package exposes ``routes() -> list[Route]``; :func:`routes` gathers them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from backend import config
from backend.services import sessions
from backend.services.types import Actor
from db.session import Database
from webapp.state import CSRF_HEADER, SESSION_COOKIE

T = TypeVar("T")
API_PREFIX = "_rc/api"
# JSON bodies are small (a grid's twelve cells, a few activity spans): refuse anything big.
MAX_JSON_BODY = 64 * 1024

_db: Database | None = None
_db_lock = threading.Lock()


def database() -> Database:
    """The routes' database (its own engine, created on first use)."""
    global _db
    with _db_lock:
        if _db is None:
            _db = Database(config.database_url())
        return _db


def set_database(db: Database | None, *, dispose: bool = False) -> None:
    """Use ``db`` for the routes (tests pass theirs; ``None`` forgets the current one).

    Args:
        db: The database, or ``None``.
        dispose: Dispose of the database being replaced (the server, when it stops).
    """
    global _db
    with _db_lock:
        old, _db = _db, db
    if dispose and old is not None and old is not db:
        old.dispose()


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking (database) work off the event loop that serves every websocket."""
    return await run_in_threadpool(fn, *args, **kwargs)


def error(status: int, reason: str, message: str, **extra: Any) -> JSONResponse:
    """A JSON error: ``{"reason": <machine code>, "message": <for the user>, ...}``."""
    return JSONResponse({"reason": reason, "message": message, **extra}, status_code=status)


def csrf_refused(request: Request) -> Response | None:
    """A 403 for a state-changing request without the app's header."""
    if request.headers.get(CSRF_HEADER) != "1":
        return error(403, "forbidden", "missing request header")
    return None


async def actor_of(request: Request) -> Actor | None:
    """The rater or admin named by the request's session cookie, or ``None`` (log in again).

    The account, the session's expiry and revocation are checked on every call, exactly as a
    page run checks them.
    """
    token = request.cookies.get(SESSION_COOKIE, "")
    if not token:
        return None
    live = await in_thread(sessions.resolve_token, database(), token)
    return None if live is None or live.must_change_password else live.actor


async def json_body(request: Request) -> Any:  # noqa: ANN401 - any JSON value
    """The request's JSON body, or ``ValueError`` naming what is wrong with it."""
    raw = await request.body()
    if len(raw) > MAX_JSON_BODY:
        raise ValueError(f"request body over {MAX_JSON_BODY} bytes")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"request body is not JSON: {exc}") from None


def url(base_url_path: str, route: str) -> str:
    """The absolute path of an API route under ``server.baseUrlPath``."""
    base = base_url_path.strip("/")
    path = f"{API_PREFIX}/{route.lstrip('/')}"
    return f"/{base}/{path}" if base else f"/{path}"


def routes(base_url_path: str = "") -> list[Route]:
    """Every API route, under ``base_url_path``.

    Modules are imported here, not at the top, so that importing one route module for its
    tests does not import the others.
    """
    import importlib

    found: list[Route] = []
    for name in API_MODULES:
        module = importlib.import_module(f"webapp.api.{name}")
        found.extend(module.routes(base_url_path))
    return found


# One module per concern; each owns its routes (see the module docstrings).
API_MODULES: tuple[str, ...] = ("images", "rating", "activity", "error_records")
