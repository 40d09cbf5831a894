"""The count grid's saves: ``POST _rc/api/rating/counts``.

The grid (``webapp/components/count_grid.py``) sends each change itself, so a click is stored
even when the Streamlit session behind the page has gone, and it learns at once when it was
not. Request body (JSON)::

    {"pair": "<opaque id>", "version": <the version the grid shows>,
     "cells": {"2s": 3, "4i": 0, ...}, "tag": "<optional, see grid_tag>"}

A cell key is the category (1-6) then ``s`` (clinically significant) or ``i``
(insignificant). Answers, always JSON:

* 200 ``{"version", "counts", "saved_at", "changed"}``: stored (``counts`` = every cell).
* 400 ``{"reason": "bad_request", "message"}``: the body is not what is described above.
* 413 ``{"reason": "too_large", "limit"}``: a body over ``api.MAX_JSON_BODY`` bytes (refused
  before it is read).
* 401 ``{"reason": "login"}``: no live session (expired, revoked, logged out): the grid keeps
  the change and sends it again after the rater logs in.
* 403 ``{"reason": "forbidden"}`` without the ``X-RadConcord: 1`` header;
  ``{"reason": "read_only"}`` for a closed study.
* 404 ``{"reason": "not_found"}``: the pair is not assigned to the actor (the same answer
  whether it exists or not); ``{"reason": "not_yours"}`` when ``tag`` names another account's
  change kept in this browser.
* 409 ``{"reason": "stale", "version", "counts"}``: the pair changed since the grid's version
  (another tab); nothing was written, the grid shows the stored counts.
* 503 ``{"reason": "busy"}``: the database stayed busy; nothing was written, retry later.
* 507 ``{"reason": "storage"}``: the server's storage is full; nothing was written, the grid
  keeps the change and sends it again.

Blinding is the rating service's: the answer carries the actor's own counts only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services import transactions
from radconcord.backend.services.accounts import sessions
from radconcord.backend.services.annotation import assignment_writes, rating
from radconcord.backend.types import Actor
from radconcord.webapp import api

ROUTE = "rating/counts"
_CELL_KEY = re.compile(r"([1-6])([si])")


def cell_key(category: int, significant: bool) -> str:
    """The grid's name of a cell: ``"2s"`` = category 2, clinically significant."""
    return f"{int(category)}{'s' if significant else 'i'}"


def counts_json(counts: Mapping[tuple[int, bool], int]) -> dict[str, int]:
    """Counts by (category, significant) as the grid's ``{"2s": 3, ...}``."""
    return {cell_key(c, g): int(n) for (c, g), n in counts.items()}


def grid_tag(actor: Actor, opaque_id: str) -> str:
    """The tag of the actor's assignment of a pair, for the browser's unsaved store.

    The grid keeps a change it could not save in ``localStorage`` under the pair's id and this
    tag (:func:`backend.services.accounts.sessions.account_tag`), and sends it again after the next
    login: a change made by one account is never applied as another's on a shared browser.
    """
    return sessions.account_tag(actor, f"grid:{opaque_id}")


def _cells(raw: object) -> dict[tuple[int, bool], int]:
    if not isinstance(raw, dict):
        raise InvalidInput(f"cells: must be an object like {{\"2s\": 3}}, got {raw!r:.80}")
    cells: dict[tuple[int, bool], int] = {}
    for key, count in raw.items():
        match = _CELL_KEY.fullmatch(str(key))
        if match is None:
            raise InvalidInput(f"cells: unknown cell {key!r:.40} (expected 1s-6s or 1i-6i)")
        if not isinstance(count, int) or isinstance(count, bool):
            raise InvalidInput(f"cells.{key}: count must be a whole number, got {count!r:.40}")
        cells[(int(match.group(1)), match.group(2) == "s")] = count
    return cells


def _request(body: Any) -> tuple[str, dict[tuple[int, bool], int], int, str | None]:  # noqa: ANN401
    if not isinstance(body, dict):
        raise InvalidInput("request body: must be a JSON object")
    unknown = sorted(set(body) - {"pair", "cells", "version", "tag"})
    if unknown:
        raise InvalidInput(f"request body: unknown field(s) {', '.join(map(str, unknown))}")
    pair = body.get("pair")
    if not isinstance(pair, str) or not pair or len(pair) > 200:
        raise InvalidInput("pair: must be the pair's id (a string)")
    version = body.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InvalidInput(f"version: must be a whole number >= 0, got {version!r:.40}")
    tag = body.get("tag")
    if tag is not None and not isinstance(tag, str):
        raise InvalidInput("tag: must be a string")
    return pair, _cells(body.get("cells")), version, tag


async def save_counts(request: Request) -> Response:
    """Store the grid's changed cells if the pair is still at the version the grid shows."""
    if (refused := api.csrf_refused(request)) is not None:
        return refused
    actor = await api.actor_of(request)
    if actor is None:
        return api.error(401, "login", "Not saved: your session has ended. Log in again; "
                         "your change is kept in this browser and saved then.")
    try:
        pair, cells, version, tag = _request(await api.json_body(request))
    except (ValueError, InvalidInput) as exc:
        return api.bad_body(exc)
    if tag is not None and tag != grid_tag(actor, pair):
        return api.error(404, "not_yours", "this change was made by another account")
    try:
        saved = await api.in_thread(rating.set_counts, api.database(), actor, opaque_id=pair,
                                    cells=cells, expected_version=version)
    except assignment_writes.StaleWrite as exc:
        return api.error(409, "stale", str(exc), version=exc.version,
                         counts=counts_json(exc.counts))
    except transactions.SaveFailed as exc:
        return api.error(503, "busy", str(exc))
    except transactions.StorageFull as exc:
        return api.error(507, "storage", str(exc))
    except InvalidInput as exc:
        return api.error(400, "bad_request", str(exc))
    except PermissionDenied as exc:
        return api.error(403, "read_only", f"Not saved: {exc}")
    except NotFound as exc:
        return api.error(404, "not_found", str(exc))
    return JSONResponse({
        "version": saved.version,
        "counts": counts_json(saved.counts),
        "saved_at": saved.saved_at.isoformat(),
        "changed": [cell_key(*cell) for cell in saved.changed],
    }, headers={"Cache-Control": "no-store"})


def routes(base_url_path: str = "") -> list[Route]:
    """The grid's save route under ``base_url_path``."""
    return [Route(api.url(base_url_path, ROUTE), save_counts, methods=["POST"])]
