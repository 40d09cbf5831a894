"""Image pixels for the canvas viewer: ``GET _rc/api/images/<image_id>/pixels?max_side=N``.

The viewer windows in the browser, so it needs the modality values, not a PNG. The response
is one binary body (``application/octet-stream``)::

    b"RCPX"                 4 bytes, magic
    header length           uint32, little-endian
    header                  UTF-8 JSON (``backend.services.annotation.images.ViewerPixels.header``),
                            padded with spaces so that the values start at a multiple of 4
    values                  rows * cols items of header["dtype"], little-endian, row-major

``max_side`` is the longest side the viewer wants (its canvas size times the device pixel
ratio); without it the full resolution comes back. Access is the images service's: a rater
gets only images of cases with a pair assigned to them, an admin any (401 without a live
session cookie, 403 outside the rater's assignments). A GET that changes nothing: no CSRF
header needed. The body is never stored by the browser (``Cache-Control: no-store``).

A volume is served one plane at a time, in the same body format:
``GET _rc/api/images/<image_id>/plane?plane=axial|coronal|sagittal&index=k`` (no index: the
middle plane). The values are the stored ones (HU for CT) at full resolution; the header adds
the plane, its index and count, its pixel spacing and position in mm and the CT presets
(``backend.services.annotation.images.volume_plane``). Same access rules and status codes.
"""

from __future__ import annotations

import json
import struct

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.annotation import images as image_service
from radconcord.webapp import api

MAGIC = b"RCPX"
ROUTE = "images/{image_id:int}/pixels"
PLANE_ROUTE = "images/{image_id:int}/plane"
MAX_SIDE_LIMIT = 16384


def encode(pixels: image_service.ViewerPixels) -> bytes:
    """The response body for ``pixels`` (see the module docstring)."""
    header = json.dumps(pixels.header, separators=(",", ":")).encode("utf-8")
    # Pad so that the values start 4-byte aligned: the browser views them in place as a
    # Uint16Array / Float32Array without a copy.
    header += b" " * (-(len(MAGIC) + 4 + len(header)) % 4)
    return MAGIC + struct.pack("<I", len(header)) + header + pixels.data


def decode(body: bytes) -> tuple[dict, bytes]:
    """Split a response body into its header and value bytes (tests, the bench)."""
    if body[:4] != MAGIC:
        raise ValueError("not an RCPX body")
    (length,) = struct.unpack("<I", body[4:8])
    return json.loads(body[8 : 8 + length]), body[8 + length :]


def _max_side(request: Request) -> int | None:
    raw = request.query_params.get("max_side")
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"max_side must be a whole number of pixels, got {raw!r}") from None
    if not image_service.VIEWER_MIN_SIDE <= value <= MAX_SIDE_LIMIT:
        raise InvalidInput(f"max_side must be between {image_service.VIEWER_MIN_SIDE} and "
                           f"{MAX_SIDE_LIMIT} pixels, got {value}")
    return value


async def pixels(request: Request) -> Response:
    """The image's modality values at the resolution asked for (see the module docstring)."""
    actor = await api.actor_of(request)
    if actor is None:
        return api.error(401, "login", "Your session has ended: log in again.")
    image_id = int(request.path_params["image_id"])
    try:
        found = await api.in_thread(image_service.viewer_pixels, api.database(), actor,
                                    image_id=image_id, max_side=_max_side(request))
    except PermissionDenied as exc:
        return api.error(403, "forbidden", str(exc))
    except NotFound as exc:
        return api.error(404, "not_found", str(exc))
    except InvalidInput as exc:
        return api.error(400, "invalid", str(exc))
    return Response(encode(found), media_type="application/octet-stream",
                    headers={"Cache-Control": "no-store"})


def _index(request: Request) -> int | None:
    raw = request.query_params.get("index")
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidInput(f"index must be a whole number, got {raw!r}") from None


async def plane(request: Request) -> Response:
    """One plane of a volume's values (see the module docstring)."""
    actor = await api.actor_of(request)
    if actor is None:
        return api.error(401, "login", "Your session has ended: log in again.")
    image_id = int(request.path_params["image_id"])
    try:
        found = await api.in_thread(image_service.volume_plane, api.database(), actor,
                                    image_id=image_id,
                                    plane=request.query_params.get("plane") or "axial",
                                    index=_index(request))
    except PermissionDenied as exc:
        return api.error(403, "forbidden", str(exc))
    except NotFound as exc:
        return api.error(404, "not_found", str(exc))
    except InvalidInput as exc:
        return api.error(400, "invalid", str(exc))
    return Response(encode(found), media_type="application/octet-stream",
                    headers={"Cache-Control": "no-store"})


def routes(base_url_path: str = "") -> list[Route]:
    """The pixel and plane routes under ``base_url_path``."""
    return [Route(api.url(base_url_path, ROUTE), pixels, methods=["GET"]),
            Route(api.url(base_url_path, PLANE_ROUTE), plane, methods=["GET"])]
