"""``POST _rc/api/activity``: the rating page's activity spans (time on task).

Body (JSON, at most ``MAX_JSON_BODY`` bytes)::

    {"client_id": "<random id of the page load>", "account": "<account tag of the spans>",
     "spans": [{"pair": "<opaque id>", "start": <ms since 1970>, "end": <ms>, "events": <n>}]}

Answers:

* ``200 {"stored", "duplicates", "refused": [{"index", "field", "message"}]}``: the batch was
  handled; refused spans (another rater's pair, a closed study, no input event, bad times)
  are named and dropped by the browser, the others are stored. A resend is counted in
  ``duplicates``. A stored span is linked to the session of the cookie that posted it and
  credited only inside the rater's sessions and for instants not already credited to the
  rater (``backend.services.annotation.activity``): what the browser claims beyond that is stored
  but
  clipped, never credited.
* ``400``: the body is not such an object (the reason names the field).
* ``401``: no live session (logged out, expired, revoked): the browser keeps its spans and
  sends them again later, after the rater logs in again.
* ``403``: the ``X-RadConcord: 1`` header is missing.
* ``409 {"reason": "account"}``: the spans were measured for another account than the
  cookie's (kept through a logout, then another rater logged in at the same browser): the
  browser drops them, so they are never credited to the wrong rater.

CSRF. Like every route of this package the request must carry ``X-RadConcord: 1``. The page
never uses ``navigator.sendBeacon`` (which cannot set a header); it sends with
``fetch(..., {keepalive: true})``, which can, and which the browser completes after the page
is hidden or left. So one rule holds for every send and no token is needed: a cross-site form
cannot set the header and this server grants no CORS permission to a cross-site script.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from radconcord.backend.errors import ServiceError
from radconcord.backend.services.accounts import sessions
from radconcord.backend.services.annotation import activity
from radconcord.webapp import api
from radconcord.webapp.state import SESSION_COOKIE

ROUTE = "activity"


async def _live_session(request: Request) -> sessions.LiveSession | None:
    """The cookie's live session (as :func:`webapp.api.actor_of` checks it), or ``None``.

    The spans' credit is bounded by the session that posted them, so the route needs the
    session itself, not only its account.
    """
    token = request.cookies.get(SESSION_COOKIE, "")
    if not token:
        return None
    live = await api.in_thread(sessions.resolve_token, api.database(), token)
    return None if live is None or live.must_change_password else live


async def post_activity(request: Request) -> Response:
    """Store a batch of activity spans of the cookie's rater."""
    if (refused := api.csrf_refused(request)) is not None:
        return refused
    live = await _live_session(request)
    if live is None:
        return api.error(401, "login", "Your session has ended: log in again.")
    actor = live.actor
    try:
        body: Any = await api.json_body(request)
    except ValueError as exc:
        return api.bad_body(exc, "invalid")
    if not isinstance(body, dict):
        return api.error(400, "invalid", "request body: must be an object with client_id, "
                                         "account and spans")
    unknown = sorted(set(body) - {"client_id", "account", "spans"})
    if unknown:
        return api.error(400, "invalid", f"request body: unknown field(s) "
                                         f"{', '.join(map(repr, unknown))}")
    spans = body.get("spans")
    if not isinstance(spans, list):
        return api.error(400, "invalid", f"spans: must be a list, got {type(spans).__name__}")
    if not isinstance(body.get("account"), str):
        return api.error(400, "invalid", "account: must be the account tag the page was given")
    if body["account"] != activity.account_tag(actor):
        return api.error(409, "account", "these spans were measured for another account")
    try:
        result = await api.in_thread(activity.record_spans, api.database(), actor,
                                     client_id=body.get("client_id"), spans=spans,
                                     session_id=live.session_id)
    except ServiceError as exc:
        return api.error(400, "invalid", str(exc))
    return JSONResponse({
        "stored": result.stored,
        "duplicates": result.duplicates,
        "refused": [{"index": r.index, "field": r.field, "message": r.message}
                    for r in result.refused],
    })


def routes(base_url_path: str = "") -> list[Route]:
    """The activity route under ``base_url_path``."""
    return [Route(api.url(base_url_path, ROUTE), post_activity, methods=["POST"])]
