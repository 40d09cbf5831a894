"""RadConcord's server: ``streamlit run webapp/server.py`` (uvicorn + the app's own routes).

``webapp/app.py`` is the router the browser sees; this file wraps it in ``st.App`` to add:

* the cookie routes (under ``server.baseUrlPath``), so that the ``radconcord_session`` cookie
  is set and cleared by the server, HttpOnly (no script, injected or not, can read it),
  ``SameSite=Strict``, ``Path=/``, ``Secure`` when the request came over TLS (directly or as
  ``X-Forwarded-Proto: https`` from a reverse proxy), ``Max-Age`` = the session lifetime:

  - ``POST /_rc/session``: body = the one-time ticket of a login; sets the cookie.
  - ``POST /_rc/refresh``: re-sets a live cookie (its lifetime follows the sliding expiry).
  - ``POST /_rc/logout``: revokes the cookie's session in the database and clears it.

  Each needs the ``X-RadConcord`` header, which a cross-site form cannot send and a
  cross-site script cannot send without a CORS permission this server never grants.
* the error boundary for uncaught exceptions in fragments and widget callbacks
  (``on_script_error``): the details go to the log with a reference id, the page shows the id.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

# `streamlit run webapp/server.py` puts webapp/ on sys.path, not the repository root. In a
# checkout the root holds radconcord/, the one import name; an installed wheel has it on the
# path already (and its parent folder must not go on it: that would expose webapp as a name).
_ROOT = str(Path(__file__).resolve().parent.parent)
if (Path(_ROOT) / "radconcord" / "__init__.py").is_file() and _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from radconcord.backend.services.accounts import sessions  # noqa: E402
from radconcord.db.session import Database, exit_on_data_folder_error  # noqa: E402
from radconcord.webapp import api, state  # noqa: E402

log = logging.getLogger(__name__)

APP_SCRIPT = Path(__file__).resolve().parent / "app.py"
MAX_BODY = 512


def _database() -> Database:
    """The routes' database: one engine shared with the components' API routes."""
    return api.database()


def _secure(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme in {"https", "wss"} or forwarded == "https"


def _set_cookie(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        state.SESSION_COOKIE, token, max_age=int(sessions.SESSION_TTL.total_seconds()),
        path="/", secure=_secure(request), httponly=True, samesite="strict")


def _clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(state.SESSION_COOKIE, path="/", secure=_secure(request),
                           httponly=True, samesite="strict")


# One rule for every state-changing route: the app's header (see webapp/api).
_refused = api.csrf_refused


async def _body(request: Request) -> str:
    """The ticket: at most :data:`MAX_BODY` bytes, refused (413) before reading more."""
    raw = await api.read_body(request, MAX_BODY)
    return raw.decode("utf-8", errors="replace").strip()


async def open_session(request: Request) -> Response:
    """Exchange a login's one-time ticket for the HttpOnly session cookie."""
    if (refused := _refused(request)) is not None:
        return refused
    try:
        ticket = await _body(request)
    except ValueError as exc:  # over MAX_BODY (413) or a bad Content-Length (400)
        return api.bad_body(exc)
    issued = await _in_thread(sessions.exchange_ticket, _database(), ticket)
    if issued is None:
        return Response("unknown or expired ticket", status_code=400)
    response = Response(status_code=204)
    _set_cookie(response, request, issued.token)
    return response


async def refresh_session(request: Request) -> Response:
    """Set a live session's cookie again with a full lifetime; clear a dead one."""
    if (refused := _refused(request)) is not None:
        return refused
    token = request.cookies.get(state.SESSION_COOKIE, "")
    live = await _in_thread(sessions.resolve_token, _database(), token, force_touch=True)
    response = Response(status_code=204)
    if live is None:
        _clear_cookie(response, request)
    else:
        _set_cookie(response, request, token)
    return response


async def close_session(request: Request) -> Response:
    """Revoke the cookie's session (logout) and clear the cookie."""
    if (refused := _refused(request)) is not None:
        return refused
    token = request.cookies.get(state.SESSION_COOKIE, "")
    if token:
        await _in_thread(sessions.revoke_session, _database(), token=token, reason="logout")
    response = Response(status_code=204)
    _clear_cookie(response, request)
    return response


_in_thread = api.in_thread


def _on_script_error(exc: Exception) -> bool:
    """Error boundary for fragments and callbacks: log with a reference, show the id only."""
    state.show_unexpected_error(exc)
    return True  # no Streamlit exception box (it could show a traceback or a path)


def routes() -> list[Route]:
    """The cookie routes and the components' API routes (``webapp/api``), under
    ``server.baseUrlPath``."""
    return [
        Route(state.route_url(state.COOKIE_ROUTE), open_session, methods=["POST"]),
        Route(state.route_url(state.REFRESH_ROUTE), refresh_session, methods=["POST"]),
        Route(state.route_url(state.LOGOUT_ROUTE), close_session, methods=["POST"]),
        *api.routes(str(st.get_option("server.baseUrlPath") or "")),
    ]


@asynccontextmanager
async def _lifespan(_app: st.App) -> AsyncIterator[None]:
    # Migrate before the first request, so routes and pages never race to create tables.
    await _in_thread(exit_on_data_folder_error, _database)
    yield
    api.set_database(None, dispose=True)


def middleware() -> list[Middleware]:
    """Refuse an over-long body to any of the app's routes before it is read (413)."""
    return [Middleware(api.BodyLimitMiddleware, prefix=state.route_url("_rc/"))]


app = st.App(APP_SCRIPT, routes=routes(), middleware=middleware(),
             on_script_error=_on_script_error, lifespan=_lifespan)
