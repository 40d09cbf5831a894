"""Serve rendered images to the viewer, with access control and caching.

A rater may see only images of cases whose pairs are assigned to them; an admin sees any.
Renders are cached by (file sha256, settings) in a process-wide LRU cache: the same film at
the same window is encoded once however many raters open it. Decoded images are cached
separately (few entries: a 2000x2000 float32 film is 16 MB).

The rating screen's canvas viewer does its own windowing in the browser: it asks
:func:`viewer_pixels` for the modality values (after the Modality LUT, before any VOI
transform) at a resolution matched to its canvas, plus everything the windowing needs (header
windows, VOI LUT table, MONOCHROME1 flag, the resolved presets). The presets are resolved here
with :func:`backend.imaging.window.resolve_window`, so the browser's Lung and Bone are the same
windows as the PNG renderer's.

A volume (``Image.kind == "volume"``, a folder of ``backend.imaging.volume_store``) is served
one plane at a time by :func:`volume_plane`: the stored values (HU for CT, int16 or float32)
of one axial, coronal or sagittal plane, full resolution, with the plane's pixel spacing (rows,
columns, in mm) so that the viewer draws anisotropic volumes unsquashed, the plane's position
in mm and the CT presets (lung, mediastinum, bone). The store is memory-mapped: a request
reads the pages of its plane, never the whole volume. The access rules are the films'.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage
from sqlalchemy import exists, or_, select

from radconcord.backend import config
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.imaging.load import ImageLoadError, LoadedImage, load_image
from radconcord.backend.imaging.render import (
    DEFAULT_MAX_SIDE,
    THUMBNAIL_SIDE,
    RenderSettings,
    render_png,
)
from radconcord.backend.imaging.volume import CT_WINDOW_HINTS, VolumeError
from radconcord.backend.imaging.volume_store import VolumeStore
from radconcord.backend.imaging.window import Window, resolve_window
from radconcord.backend.services.study_admin.study_status import HIDDEN_STATUSES
from radconcord.backend.types import Actor
from radconcord.backend.util import is_db_id
from radconcord.db.models import Assignment, Comparison, Image, Judgement, Pair, Study, StudyRole
from radconcord.db.session import Database

log = logging.getLogger(__name__)

# Header fields a viewer may show (already de-identified on import).
_PUBLIC_META = ("photometric", "modality", "view_position", "body_part", "windows",
                "window_explanations", "voi_lut", "frames", "bits_stored", "hounsfield",
                "volume")
# Shown to admins only: the burned-in flag is for the study lead (see image_warnings).
_ADMIN_META = (*_PUBLIC_META, "burned_in_annotation")


@dataclass(frozen=True)
class ImageInfo:
    """Display metadata of one image of a pair."""

    image_id: int
    view: str | None
    format: str
    width: int | None
    height: int | None
    meta: dict[str, Any]
    kind: str = "film"


@functools.lru_cache(maxsize=4)
def _load_cached(abs_path: str, sha256: str) -> LoadedImage:
    # sha256 is part of the key so that a replaced file is never served from the cache.
    return load_image(Path(abs_path))


@functools.lru_cache(maxsize=256)
def _render_cached(abs_path: str, sha256: str, settings: RenderSettings) -> bytes:
    return render_png(_load_cached(abs_path, sha256), settings)


def clear_caches() -> None:
    """Drop cached decodes and renders (tests, or after files are replaced)."""
    _load_cached.cache_clear()
    _render_cached.cache_clear()
    _viewer_cached.cache_clear()
    _store_cached.cache_clear()


def _check_access(s: Any, actor: Actor, case_id: int) -> None:
    if actor.is_admin:
        return
    # Draft and still-importing studies are not the rater's yet.
    visible = (Pair.case_id == case_id, Study.id == Pair.study_id,
               Study.status.not_in(HIDDEN_STATUSES))
    allowed = s.scalar(select(or_(
        # A pair assigned to the rater,
        exists().where(Assignment.rater_id == actor.user_id, Assignment.pair_id == Pair.id,
                       *visible),
        # the study's film for its adjudicator (backend/services/quality/adjudication.py),
        exists().where(StudyRole.user_id == actor.user_id, StudyRole.role == "adjudicator",
                       StudyRole.study_id == Pair.study_id, *visible),
        # or a comparison given to a pairwise judge.
        exists().where(Judgement.rater_id == actor.user_id,
                       Judgement.comparison_id == Comparison.id,
                       Comparison.pair_a_id == Pair.id, *visible),
    )))
    if not allowed:
        raise PermissionDenied("this image belongs to no pair assigned to you")


def _stored_path(db: Database, actor: Actor, image_id: int, kind: str) -> tuple[str, str]:
    """The absolute path and sha256 of an image the actor may see, of the ``kind`` wanted."""
    with db.read() as s:
        image = s.get(Image, image_id) if is_db_id(image_id) else None
        if image is None:
            if actor.is_admin:
                raise NotFound(f"no image with id {image_id}")
            raise PermissionDenied("this image belongs to no pair assigned to you")
        _check_access(s, actor, image.case_id)
        root = config.data_dir()
        path = (root / image.path).resolve()
        sha = image.sha256
        stored_kind = image.kind
    if stored_kind != kind:
        if stored_kind == "volume":
            raise InvalidInput(f"image {image_id} is a volume: ask for one plane of it")
        raise InvalidInput(f"image {image_id} is a 2-D film, not a volume")
    if not path.is_relative_to(root):
        raise NotFound(f"image {image_id} points outside the data folder")
    if not (path.is_dir() if kind == "volume" else path.is_file()):
        raise NotFound(f"image file of image {image_id} is missing")
    return str(path), sha


def _image_file(db: Database, actor: Actor, image_id: int) -> tuple[str, str]:
    return _stored_path(db, actor, image_id, "film")


def rendered_image(
    db: Database,
    actor: Actor,
    *,
    image_id: int,
    preset: str = "header",
    center: float | None = None,
    width: float | None = None,
    invert: bool = False,
    zoom: float = 1.0,
    zoom_x: float = 0.5,
    zoom_y: float = 0.5,
    max_side: int = DEFAULT_MAX_SIDE,
) -> bytes:
    """PNG bytes of an image as the viewer shows it.

    Args:
        db: The database.
        actor: Admin, or a rater with an assignment on a pair of the image's case.
        image_id: The image.
        preset: ``header``, ``lung``, ``bone`` or ``manual`` (see ``backend.imaging.window``).
        center: Window centre for ``manual``.
        width: Window width for ``manual``.
        invert: Invert brightness.
        zoom: Magnification (1..16).
        zoom_x: Zoom centre, fraction of the width.
        zoom_y: Zoom centre, fraction of the height.
        max_side: Longest side of the PNG.

    Returns:
        8-bit grey PNG bytes.

    Raises:
        PermissionDenied: A rater asked for an image outside their assignments.
        NotFound: No such image (admin) or its file is missing.
        InvalidInput: Invalid settings, or the file cannot be decoded.
    """
    settings = RenderSettings(
        preset=preset,
        center=None if center is None else float(center),
        width=None if width is None else float(width),
        invert=bool(invert),
        zoom=float(zoom),
        zoom_x=float(zoom_x),
        zoom_y=float(zoom_y),
        max_side=int(max_side),
    )
    try:
        settings.validate()
        if preset == "manual" and (center is None or width is None or width <= 0):
            raise ValueError("manual window needs a center and a width > 0")
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    path, sha = _image_file(db, actor, image_id)
    try:
        return _render_cached(path, sha, settings)
    except ImageLoadError as exc:
        raise InvalidInput(str(exc)) from None
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


def thumbnail(db: Database, actor: Actor, *, image_id: int, max_side: int = THUMBNAIL_SIDE
              ) -> bytes:
    """A small PNG with the header window (same access rules as :func:`rendered_image`)."""
    return rendered_image(db, actor, image_id=image_id, max_side=max_side)


BURNED_IN_NOTE = (
    "Burned-in annotation: the DICOM header says text is burned into the pixels. "
    "It was not removed on import and may identify the patient; check the image."
)


def image_warnings(db: Database, actor: Actor, *, image_ids: list[int]) -> dict[int, str]:
    """Warnings to show the admin beside images (burned-in text); never any for a rater.

    Args:
        db: The database.
        actor: The viewer. A rater gets an empty mapping: the note is for the study lead,
            who can withdraw the image, and would only draw a rater's eye to the text.
        image_ids: The images on screen.

    Returns:
        ``{image_id: warning}`` for the images that have one.
    """
    if not actor.is_admin or not image_ids:
        return {}
    with db.read() as s:
        rows = s.execute(select(Image.id, Image.meta).where(Image.id.in_(image_ids))).all()
    return {
        image_id: BURNED_IN_NOTE
        for image_id, meta in rows
        if str((meta or {}).get("burned_in_annotation", "")).upper() == "YES"
    }


def images_for_pair(
    db: Database,
    actor: Actor,
    *,
    pair_id: int | None = None,
    opaque_id: str | None = None,
) -> list[ImageInfo]:
    """Display metadata of the images shown with a pair (its case's images, in order).

    Args:
        db: The database.
        actor: Admin, or a rater to whom the pair is assigned.
        pair_id: The pair's database id, or
        opaque_id: the pair's opaque id.

    Returns:
        One entry per image.

    Raises:
        PermissionDenied: A rater asked about a pair not assigned to them.
        NotFound: No such pair (admin).
        InvalidInput: Neither or both ids given.
    """
    if (pair_id is None) == (opaque_id is None):
        raise InvalidInput("give exactly one of pair_id and opaque_id")
    with db.read() as s:
        query = select(Pair)
        query = query.where(Pair.id == pair_id) if pair_id is not None else query.where(
            Pair.opaque_id == opaque_id
        )
        pair = s.scalar(query)
        if pair is None:
            if actor.is_admin:
                raise NotFound("no such pair")
            raise PermissionDenied("this pair is not assigned to you")
        if not actor.is_admin:
            assigned = s.scalar(
                select(Assignment.id).where(
                    Assignment.pair_id == pair.id, Assignment.rater_id == actor.user_id
                )
            )
            if assigned is None:
                raise PermissionDenied("this pair is not assigned to you")
        images = s.scalars(
            select(Image).where(Image.case_id == pair.case_id).order_by(Image.id)
        ).all()
        keys = _ADMIN_META if actor.is_admin else _PUBLIC_META
        return [
            ImageInfo(
                image_id=i.id,
                view=i.view,
                format=i.format,
                width=i.width,
                height=i.height,
                meta={k: (i.meta or {}).get(k) for k in keys if k in (i.meta or {})},
                kind=i.kind,
            )
            for i in images
        ]


# The viewer's pixel requests: a requested longest side is rounded up to a multiple of this
# (never down: the browser gets at least the pixels it asked for), so that canvases of nearly
# the same size share one cached encoding.
VIEWER_SIDE_STEP = 128
VIEWER_MIN_SIDE = 16


@dataclass(frozen=True)
class ViewerPixels:
    """Modality values of one image for the browser viewer, and how to window them.

    Attributes:
        header: JSON-able description: ``rows``/``cols`` of ``data``, ``full_rows``/
            ``full_cols`` of the image, ``dtype`` (``uint16``, ``int16`` or ``float32``,
            little-endian), ``monochrome1``, ``photometric``, ``format``, ``bits_stored``,
            ``pixel_min``/``pixel_max`` (finite values of the full image), ``windows``
            (header Window Center/Width pairs), ``window_explanations``, ``voi_function``,
            ``voi_lut`` (``{"first_mapped", "bits", "table"}`` or None), ``presets``
            (``auto``/``header``/``lung``/``bone`` resolved by ``backend.imaging.window``:
            ``center``, ``width``, ``function`` and ``lut``: True when the VOI LUT table applies),
            ``manual_step`` (a sensible step for the Manual centre/width inputs) and
            ``values`` (what the numbers are: modality values, HU for CT).
        data: The values, row-major, ``rows * cols`` items of ``dtype`` (little-endian).
    """

    header: dict[str, Any]
    data: bytes


def viewer_side(requested: int | None, longest: int) -> int:
    """The longest side to send for a request of ``requested`` pixels (None: full size).

    Args:
        requested: The longest side the browser asked for (its canvas size times the device
            pixel ratio), or None for full resolution.
        longest: The image's longest side.

    Returns:
        ``requested`` rounded up to a multiple of :data:`VIEWER_SIDE_STEP`, at most
        ``longest`` (never upscaled).
    """
    if requested is None:
        return longest
    rounded = int(math.ceil(max(requested, VIEWER_MIN_SIDE) / VIEWER_SIDE_STEP)) * VIEWER_SIDE_STEP
    return min(longest, rounded)


def _window_json(window: Window) -> dict[str, Any]:
    return {"center": window.center, "width": window.width, "function": window.function,
            "lut": window.lut is not None, "source": window.source}


def _manual_step(image: LoadedImage, lo: float, hi: float, integral: bool) -> float:
    """A step for the Manual centre/width inputs: about 1/256 of the stored range.

    Stored integers of ``b`` bits step by ``2**(b-8)`` (1 for 8-bit, 128 for a 15-bit CR);
    anything else (floats, HU) by 1, 2 or 5 times a power of ten near ``range / 256``.
    """
    if integral and not image.hounsfield:
        return float(2 ** max(0, image.bits - 8))
    target = max(hi - lo, 1e-6) / 256.0
    power = 10.0 ** math.floor(math.log10(target))
    step = next(power * f for f in (1.0, 2.0, 5.0, 10.0) if power * f >= target)
    return max(1.0, step) if integral else step


@functools.lru_cache(maxsize=8)
def _viewer_cached(abs_path: str, sha256: str, side: int) -> ViewerPixels:
    image = _load_cached(abs_path, sha256)
    pixels = image.pixels
    finite = pixels[np.isfinite(pixels)]
    lo = float(finite.min()) if finite.size else 0.0
    hi = float(finite.max()) if finite.size else 0.0
    integral = bool(finite.size == pixels.size and np.array_equal(finite, np.rint(finite)))
    if integral and lo >= 0 and hi <= 65535:
        dtype = "uint16"
    elif integral and lo >= -32768 and hi <= 32767:
        dtype = "int16"
    else:
        dtype = "float32"
    rows, cols = image.height, image.width
    longest = max(rows, cols)
    if side < longest:
        scale = side / longest
        size = (max(1, int(round(cols * scale))), max(1, int(round(rows * scale))))
        # Area averaging (BOX) of the modality values: no aliasing, no ringing outside the
        # original range. The browser windows the averages, as any viewer's mipmaps do.
        pixels = np.asarray(
            PILImage.fromarray(pixels, mode="F").resize(size, PILImage.Resampling.BOX),
            dtype=np.float32,
        )
    if dtype == "float32":
        out = np.ascontiguousarray(pixels, dtype="<f4")
    else:
        # Averages are rounded back to the stored integers (half the bytes of float32; a
        # half-value step is far below any window width a viewer shows).
        out = np.clip(np.rint(pixels), lo, hi).astype("<u2" if dtype == "uint16" else "<i2")
    presets = {name: _window_json(resolve_window(image, name))
               for name in ("auto", "header", "lung", "bone")}
    lut = image.voi_lut
    header = {
        "rows": int(out.shape[0]),
        "cols": int(out.shape[1]),
        "full_rows": rows,
        "full_cols": cols,
        "dtype": dtype,
        "format": image.format,
        "photometric": image.photometric,
        "monochrome1": bool(image.invert_for_display),
        "bits_stored": int(image.bits),
        "hounsfield": bool(image.hounsfield),
        "values": "HU" if image.hounsfield else "modality",
        "pixel_min": lo,
        "pixel_max": hi,
        "windows": [[float(c), float(w)] for c, w in image.windows],
        "window_explanations": list(image.window_explanations),
        "voi_function": image.voi_function,
        "voi_lut": None if lut is None else {
            "first_mapped": int(lut.first_mapped), "bits": int(lut.bits),
            "table": [float(v) for v in lut.table], "explanation": lut.explanation},
        "presets": presets,
        "manual_step": _manual_step(image, lo, hi, integral),
    }
    return ViewerPixels(header=header, data=out.tobytes())


def viewer_pixels(db: Database, actor: Actor, *, image_id: int,
                  max_side: int | None = None) -> ViewerPixels:
    """Modality values of an image for the browser viewer (same access rules as
    :func:`rendered_image`).

    Args:
        db: The database.
        actor: Admin, or a rater with an assignment on a pair of the image's case.
        image_id: The image.
        max_side: Longest side wanted (the canvas size times the device pixel ratio); rounded
            up to a multiple of :data:`VIEWER_SIDE_STEP`; None or more than the image: full
            resolution. Never upscaled.

    Returns:
        The values and their header.

    Raises:
        PermissionDenied: A rater asked for an image outside their assignments.
        NotFound: No such image (admin) or its file is missing.
        InvalidInput: ``max_side`` below 16, or the file cannot be decoded.
    """
    if max_side is not None and max_side < VIEWER_MIN_SIDE:
        raise InvalidInput(f"max_side must be at least {VIEWER_MIN_SIDE} pixels")
    path, sha = _image_file(db, actor, image_id)
    try:
        image = _load_cached(path, sha)
        return _viewer_cached(path, sha, viewer_side(max_side, max(image.height, image.width)))
    except ImageLoadError as exc:
        # The detail names the file on the server: for the log, not for the rater's screen.
        log.warning("image %s cannot be decoded: %s", image_id, exc)
        raise InvalidInput(f"image {image_id} cannot be decoded (see the server log)"
                           ) from None


# ----------------------------------------------------------------------------- volumes

VOLUME_PLANES = ("axial", "coronal", "sagittal")
# The CT presets the viewer offers for a volume in HU, in this order (backend.imaging.volume).
VOLUME_PRESETS = ("lung", "mediastinum", "bone")


@functools.lru_cache(maxsize=8)
def _store_cached(abs_path: str, sha256: str) -> VolumeStore:
    # Opening maps the values; nothing is decoded. sha256 keys out a replaced store.
    return VolumeStore.open(Path(abs_path))


def _linear(center: float, width: float, source: str) -> dict[str, Any]:
    return {"center": float(center), "width": max(1.0, float(width)), "function": "LINEAR",
            "lut": False, "source": source}


def volume_presets(store: VolumeStore) -> dict[str, dict[str, Any]]:
    """The windows the viewer offers for a volume.

    ``header`` is the header's window (else the store's percentile window); for HU, lung,
    mediastinum and bone (``backend.imaging.volume.CT_WINDOW_HINTS``). ``auto``, what a
    volume opens with, is the header's window when there is one, else for HU the
    mediastinum window (a percentile window of a chest CT spans air to bone, and bone
    then looks like soft tissue), else the percentile window.
    """
    hints = store.meta.get("windows") or {}
    low, high = store.meta.get("value_range") or [0.0, 1.0]
    spread = hints.get("auto") or [(low + high) / 2, max(1.0, high - low)]
    out: dict[str, dict[str, Any]] = {}
    hounsfield = bool(store.meta.get("hounsfield"))
    if hounsfield:
        for name in VOLUME_PRESETS:
            center, width = hints.get(name) or CT_WINDOW_HINTS[name]
            out[name] = _linear(center, width, name)
    header = hints.get("header")
    out["header"] = (_linear(header[0], header[1], "header") if header
                     else _linear(spread[0], spread[1], "auto"))
    out["auto"] = (dict(out["header"]) if header
                   else dict(out["mediastinum"]) if hounsfield
                   else _linear(spread[0], spread[1], "auto"))
    return out


def _plane_position(store: VolumeStore, plane: str, index: int) -> tuple[float, list[float]]:
    """Where a plane lies: its centre's distance along the plane's normal and its centre (LPS
    mm). The normal is the volume's axis across the plane (slice, row or column direction)."""
    slices, rows, cols = store.shape
    affine = store.affine
    voxel = {"axial": (cols / 2 - 0.5, rows / 2 - 0.5, index),
             "coronal": (cols / 2 - 0.5, index, slices / 2 - 0.5),
             "sagittal": (index, rows / 2 - 0.5, slices / 2 - 0.5)}[plane]
    axis = {"axial": 2, "coronal": 1, "sagittal": 0}[plane]
    centre = affine @ np.asarray([*voxel, 1.0])
    normal = affine[:3, axis]
    length = float(np.linalg.norm(normal)) or 1.0
    return float(centre[:3] @ normal / length), [float(v) for v in centre[:3]]


def volume_plane(db: Database, actor: Actor, *, image_id: int, plane: str = "axial",
                 index: int | None = None) -> ViewerPixels:
    """One plane of a volume's values for the browser viewer (same access rules as films).

    Args:
        db: The database.
        actor: Admin, or a rater with an assignment on a pair of the image's case (or the
            study's adjudicator, or a pairwise judge), as for films.
        image_id: The volume image.
        plane: ``axial`` (slice ``index``), ``coronal`` (row ``index`` across the slices) or
            ``sagittal`` (column ``index``); see ``backend.imaging.volume_store``.
        index: The plane's index along its axis; None: the middle one.

    Returns:
        The values (full resolution, ``int16`` or ``float32``, little-endian, row-major) and a
        header as :class:`ViewerPixels` has for films, plus ``plane``, ``index``, ``count``
        (planes along that axis), ``spacing`` (between rows, between columns, mm),
        ``position_mm`` (the plane's distance along its normal), ``centre_lps``,
        ``shape``/``voxel_spacing`` of the volume and ``modality``.

    Raises:
        PermissionDenied: A rater asked for an image outside their assignments.
        NotFound: No such image (admin) or its store is missing.
        InvalidInput: A film, an unknown plane, an index outside the volume, or an
            unreadable store.
    """
    if plane not in VOLUME_PLANES:
        raise InvalidInput(f"plane must be one of {', '.join(VOLUME_PLANES)}, got {plane!r}")
    path, sha = _stored_path(db, actor, image_id, "volume")
    try:
        store = _store_cached(path, sha)
    except VolumeError as exc:
        log.warning("volume %s cannot be read: %s", image_id, exc)
        raise InvalidInput(f"image {image_id} cannot be read (see the server log)") from None
    axis = VOLUME_PLANES.index(plane)
    count = store.shape[axis]
    k = count // 2 if index is None else int(index)
    if not 0 <= k < count:
        raise InvalidInput(f"{plane} index {k} is outside 0..{count - 1}")
    found = {"axial": store.axial, "coronal": store.coronal, "sagittal": store.sagittal}[
        plane](k)
    dtype = "int16" if store.dtype.kind == "i" else "float32"
    out = np.ascontiguousarray(found.pixels, dtype="<i2" if dtype == "int16" else "<f4")
    low, high = (float(v) for v in store.meta.get("value_range") or [0.0, 0.0])
    position, centre = _plane_position(store, plane, k)
    hounsfield = bool(store.meta.get("hounsfield"))
    header = {
        "rows": int(out.shape[0]),
        "cols": int(out.shape[1]),
        "full_rows": int(out.shape[0]),
        "full_cols": int(out.shape[1]),
        "dtype": dtype,
        "format": "volume",
        "photometric": "MONOCHROME2",
        "monochrome1": False,
        "bits_stored": 16 if dtype == "int16" else 32,
        "hounsfield": hounsfield,
        "values": "HU" if hounsfield else "modality",
        "modality": store.meta.get("modality"),
        "pixel_min": low,
        "pixel_max": high,
        "windows": [],
        "window_explanations": [],
        "voi_function": "LINEAR",
        "voi_lut": None,
        "presets": volume_presets(store),
        "manual_step": 1.0,
        "plane": plane,
        "index": k,
        "count": count,
        "spacing": [float(v) for v in found.spacing],
        "position_mm": position,
        "centre_lps": centre,
        "shape": list(store.shape),
        "voxel_spacing": [float(v) for v in store.spacing],
    }
    return ViewerPixels(header=header, data=out.tobytes())
