"""JSON routes the browser components call directly (saves, activity, image pixels).

They live beside the cookie routes of ``webapp/server.py`` and share their rules: the
HttpOnly session cookie authenticates (a request carries no token a script could read), the
``X-RadConcord: 1`` header is required on every state-changing request (a cross-site form
cannot send it and this server grants no CORS), bodies are size-capped, and database work runs
off the event loop.

Bodies are capped *before* they are read (:func:`read_body`): a ``Content-Length`` over the
cap is answered 413 without reading a byte, and a body without one (chunked) is read as a
stream that stops at the cap, so no request can make the server hold more than the cap in
memory. :class:`BodyLimitMiddleware` applies the same header rule to every route under
``/_rc/``, including those that read no body. Ids out of the database's integer range are
answered as unknown ids by the services (``backend.util.is_db_id``).

A component talks to these routes instead of a Streamlit rerun so that a click is stored
even when the Streamlit session behind the page has gone (a server restart): the cookie still
names the rater, or the route answers 401 and the component keeps the change.

Each module of this package exposes ``routes() -> list[Route]``; :func:`routes` gathers them.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from radconcord.backend import config
from radconcord.backend.services.accounts import sessions
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from radconcord.webapp.state import CSRF_HEADER, SESSION_COOKIE

T = TypeVar("T")
API_PREFIX = "_rc/api"
# JSON bodies are small (a grid's twelve cells, a few activity spans): refuse anything big.
MAX_JSON_BODY = 64 * 1024
#: The largest body any route under ``/_rc/`` takes; docs/deployment.md's proxies match it.
MAX_ROUTE_BODY = MAX_JSON_BODY


class BodyTooLarge(ValueError):
    """A request body (announced or streamed) over the route's cap; answered 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body over {limit} bytes")
        self.limit = limit


class BadBody(ValueError):
    """A request body that is not what the route takes; answered 400 with the reason."""

CONTENT_LENGTH_RE = re.compile(r"[0-9]+")

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


def announced_length(headers: Mapping[str, str], limit: int) -> int | None:
    """The body length a request announces, checked against ``limit`` before any read.

    Returns:
        The ``Content-Length``, or ``None`` when the request has none (a chunked body).

    Raises:
        BodyTooLarge: the announced length is over ``limit``.
        BadBody: the header is not a single whole number.
    """
    raw = headers.get("content-length")
    if raw is None:
        return None
    if not CONTENT_LENGTH_RE.fullmatch(raw):
        raise BadBody(f"Content-Length: must be a whole number of bytes, got {raw!r:.40}")
    # More digits than any real length: too large, without converting thousands of digits.
    if len(raw) > 18 or (length := int(raw)) > limit:
        raise BodyTooLarge(limit)
    return length


async def read_body(request: Request, limit: int = MAX_JSON_BODY) -> bytes:
    """The request's body, read only as far as ``limit`` bytes.

    A ``Content-Length`` over the cap is refused before a byte is read; a body without one
    is read as a stream and the read stops at the first chunk past the cap (a client that
    announces less than it sends is stopped there too).

    Raises:
        BodyTooLarge: the body is, or says it is, longer than ``limit`` (answer 413).
        BadBody: an unreadable ``Content-Length`` header (answer 400).
    """
    announced_length(request.headers, limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def json_body(request: Request) -> Any:  # noqa: ANN401 - any JSON value
    """The request's JSON body (at most :data:`MAX_JSON_BODY` bytes).

    Raises:
        BodyTooLarge: over the cap (a ``ValueError``; routes answer it with :func:`bad_body`).
        BadBody: not UTF-8 JSON, or nested too deeply to parse.
    """
    raw = await read_body(request, MAX_JSON_BODY)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadBody(f"request body is not JSON: {exc}") from None
    except RecursionError:
        # The C decoder recurses once per level: a 64 KB body of "[" exhausts the stack.
        raise BadBody("request body: JSON nested too deeply") from None


def bad_body(exc: ValueError, reason: str = "bad_request") -> JSONResponse:
    """The JSON answer to a body :func:`json_body` refused: 413 over the cap, else 400."""
    if isinstance(exc, BodyTooLarge):
        return error(413, "too_large", str(exc), limit=exc.limit)
    return error(400, reason, str(exc))


class BodyLimitMiddleware:
    """Answer 413 to a request under ``prefix`` whose ``Content-Length`` is over the cap.

    ``prefix`` is ``/_rc/`` under ``server.baseUrlPath`` (``state.route_url("_rc/")``).

    Pure ASGI, so the refusal happens before any route (or Starlette's request object) touches
    the body. Streamlit's own routes keep their own limits (``server.maxUploadSize``).
    """

    def __init__(self, app: ASGIApp, *, prefix: str = "/_rc/",
                 limit: int = MAX_ROUTE_BODY) -> None:
        self.app = app
        self.prefix = prefix
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(self.prefix):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope.get("headers", [])}
            try:
                announced_length(headers, self.limit)
            except ValueError as exc:
                await bad_body(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


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
        module = importlib.import_module(f"radconcord.webapp.api.{name}")
        found.extend(module.routes(base_url_path))
    return found


# One module per concern; each owns its routes (see the module docstrings).
API_MODULES: tuple[str, ...] = ("images", "rating", "activity", "error_records")
