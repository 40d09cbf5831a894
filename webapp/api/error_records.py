"""The per-error records panel's routes: read, add and delete the rater's records of a pair.

``webapp/components/error_records.py`` calls them from the browser, like the count grid
calls ``webapp/api/rating.py``: a record is stored even when the Streamlit session behind the
page has gone, and the panel learns at once when it was not.

* ``GET _rc/api/error-records?pair=<opaque id>``: the rater's records of the pair.
* ``POST _rc/api/error-records/add`` with ``{"pair", "version", "kind": "span"|"omission",
  "category": 1-6, "significant": bool, "candidate_start", "candidate_end" (span),
  "reference_start", "reference_end" (omission), "note"}``. Offsets are character offsets
  into the stored report text, end exclusive; the record's text is cut from the stored
  report, never taken from the request.
* ``POST _rc/api/error-records/delete`` with ``{"pair", "version", "record": <record id>}``.

Answers, always JSON (``record`` = ``{"id", "kind", "category", "significant",
"candidate_start", "candidate_end", "candidate_text", "reference_start", "reference_end",
"reference_text", "note", "created_at"}``):

* 200 ``{"version", "counts", "records", "saved_at"}`` (``saved_at`` null for a read):
  ``counts`` are the twelve counts derived from the records, as the grid names them.
* 400 ``{"reason": "bad_request", "message"}``: a bad body or value (the message names the
  field), or a study that does not use per-error records; nothing was written.
* 401 ``{"reason": "login"}``: no live session.
* 403 ``{"reason": "forbidden"}`` without the ``X-RadConcord: 1`` header (POST);
  ``{"reason": "read_only"}`` for a closed study.
* 404 ``{"reason": "not_found"}``: the pair is not assigned to the actor (the same answer
  whether it exists or not), or the record is not one of the actor's records of the pair.
* 409 ``{"reason": "stale", "version", "counts", "records"}``: the pair changed since the
  panel's version (another tab, the grid); nothing was written, the panel shows what is stored.
* 413 ``{"reason": "too_large", "limit"}``: a body over ``api.MAX_JSON_BODY`` bytes.
* 503 ``{"reason": "busy"}``: the database stayed busy; nothing was written.
* 507 ``{"reason": "storage"}``: the server's storage is full; nothing was written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services import transactions
from radconcord.backend.services.annotation import assignment_writes, error_records
from radconcord.backend.types import Actor
from radconcord.webapp import api
from radconcord.webapp.api.rating import counts_json

ROUTE = "error-records"
_LOGIN = "Not saved: your session has ended. Log in again, then mark the error again."
_ADD_FIELDS = {"pair", "version", "kind", "category", "significant", "candidate_start",
               "candidate_end", "reference_start", "reference_end", "note"}


def record_json(record: error_records.RecordView) -> dict[str, Any]:
    """One record as the panel gets it."""
    return {
        "id": record.record_id,
        "kind": record.kind,
        "category": record.category,
        "significant": record.significant,
        "candidate_start": record.candidate_start,
        "candidate_end": record.candidate_end,
        "candidate_text": record.candidate_text,
        "reference_start": record.reference_start,
        "reference_end": record.reference_end,
        "reference_text": record.reference_text,
        "note": record.note,
        "created_at": record.created_at.isoformat(),
    }


def pair_json(stored: error_records.PairRecords) -> dict[str, Any]:
    """The records, derived counts and version of a pair as the panel gets them."""
    return {
        "version": stored.version,
        "counts": counts_json(stored.counts),
        "records": [record_json(r) for r in stored.records],
        "saved_at": stored.saved_at.isoformat() if stored.saved_at else None,
    }


def _ok(stored: error_records.PairRecords) -> JSONResponse:
    return JSONResponse(pair_json(stored), headers={"Cache-Control": "no-store"})


def _body(raw: Any, allowed: set[str]) -> dict[str, Any]:  # noqa: ANN401 - any JSON value
    if not isinstance(raw, dict):
        raise InvalidInput("request body: must be a JSON object")
    unknown = sorted(map(str, set(raw) - allowed))
    if unknown:
        raise InvalidInput(f"request body: unknown field(s) {', '.join(unknown)}")
    pair = raw.get("pair")
    if not isinstance(pair, str) or not pair or len(pair) > 200:
        raise InvalidInput("pair: must be the pair's id (a string)")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InvalidInput(f"version: must be a whole number >= 0, got {version!r:.40}")
    return raw


async def _run(actor: Actor, pair: str, fn: Callable[..., error_records.PairRecords],
               **kwargs: Any) -> Response:
    """Call a service in a thread and answer as the module docstring says."""
    db = api.database()
    try:
        return _ok(await api.in_thread(fn, db, actor, opaque_id=pair, **kwargs))
    except assignment_writes.StaleWrite as exc:
        try:
            stored = await api.in_thread(error_records.list_records, db, actor,
                                         opaque_id=pair)
            records = [record_json(r) for r in stored.records]
        except NotFound:  # the pair went away meanwhile: no records to show
            records = []
        return api.error(409, "stale", str(exc), version=exc.version,
                         counts=counts_json(exc.counts), records=records)
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


async def list_pair(request: Request) -> Response:
    """The actor's records of ``?pair=``, with the derived counts and the version."""
    actor = await api.actor_of(request)
    if actor is None:
        return api.error(401, "login", "Your session has ended. Log in again.")
    pair = request.query_params.get("pair", "")
    if not pair or len(pair) > 200:
        return api.error(400, "bad_request", "pair: must be the pair's id (?pair=...)")
    return await _run(actor, pair, error_records.list_records)


async def add(request: Request) -> Response:
    """Store one record if the pair is still at the version the panel shows."""
    if (refused := api.csrf_refused(request)) is not None:
        return refused
    actor = await api.actor_of(request)
    if actor is None:
        return api.error(401, "login", _LOGIN)
    try:
        body = _body(await api.json_body(request), _ADD_FIELDS)
    except (ValueError, InvalidInput) as exc:
        return api.bad_body(exc)
    # The service validates every value (and names the field); absent offsets are None.
    return await _run(
        actor, body["pair"], error_records.add_record, expected_version=body["version"],
        kind=body.get("kind"), category=body.get("category"),
        significant=body.get("significant"), note=body.get("note", ""),
        candidate_start=body.get("candidate_start"), candidate_end=body.get("candidate_end"),
        reference_start=body.get("reference_start"), reference_end=body.get("reference_end"),
    )


async def delete(request: Request) -> Response:
    """Delete one of the actor's records if the pair is still at the panel's version."""
    if (refused := api.csrf_refused(request)) is not None:
        return refused
    actor = await api.actor_of(request)
    if actor is None:
        return api.error(401, "login", _LOGIN.replace("mark the error", "delete it"))
    try:
        body = _body(await api.json_body(request), {"pair", "version", "record"})
    except (ValueError, InvalidInput) as exc:
        return api.bad_body(exc)
    record = body.get("record")
    if not isinstance(record, int) or isinstance(record, bool):
        return api.error(400, "bad_request", f"record: must be a record id, got {record!r:.40}")
    return await _run(actor, body["pair"], error_records.delete_record, record_id=record,
                      expected_version=body["version"])


def routes(base_url_path: str = "") -> list[Route]:
    """The panel's routes under ``base_url_path``."""
    return [
        Route(api.url(base_url_path, ROUTE), list_pair, methods=["GET"]),
        Route(api.url(base_url_path, f"{ROUTE}/add"), add, methods=["POST"]),
        Route(api.url(base_url_path, f"{ROUTE}/delete"), delete, methods=["POST"]),
    ]
