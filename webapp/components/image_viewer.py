"""The film viewer of the rating screen and the disagreement explorer.

:func:`viewer_panel` mounts a Streamlit v2 component (``viewer/``: a small
canvas viewer in plain JS) that fetches each image's modality values from
``GET _rc/api/images/<id>/pixels`` (``webapp/api/images.py``) and windows them in the browser:
the whole film fits the window at first sight, wheel/pinch zoom towards the pointer, drag to
pan, right-drag or Shift+drag for window/level (horizontal = width, vertical = centre, as in
OHIF), Header/Lung/Bone/Manual presets, frontal and lateral side by side with the W/L
synchronised or not. PNG/JPEG films are shown in grey (colour is converted to luminance on
load, as for the PNG renderer).

A volume (format ``volume``: a CT series, multi-frame DICOM or NIfTI) is shown one plane at a
time from ``GET _rc/api/images/<id>/plane`` (``webapp/api/images.py``): slice k of N and its
position in mm, the wheel, ArrowUp/ArrowDown, PageUp/PageDown and a slider through the
slices, Axial/Coronal/Sagittal with the voxel spacing respected, the Lung, Mediastinum and
Bone presets and the drag W/L shared by every plane, the HU under the pointer; neighbouring
slices are prefetched (a bounded window, not the whole volume).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

if TYPE_CHECKING:
    from radconcord.db.session import Database

VIEWER_DIR = Path(__file__).resolve().parent / "viewer"
VIEWER_KEY = "rc_film_viewer"

FRONTAL_VIEWS = ("PA", "AP", "FRONTAL")
# Image.format of a volume (backend.services.transfer.imports).
VOLUME_FORMAT = "volume"


def order_views(images: Sequence[tuple[int, str | None, str]]) -> list[tuple[int, str | None, str]]:
    """Frontal views first, then laterals, then the rest (stable inside each group)."""

    def rank(image: tuple[int, str | None, str]) -> int:
        view = (image[1] or "").upper()
        if view in FRONTAL_VIEWS:
            return 0
        if view.startswith("LAT") or view in {"LL", "RL"}:
            return 1
        return 2

    return sorted(images, key=rank)


def _viewer_js() -> str:
    # One module: the windowing functions (also run by the unit tests) then the viewer.
    return ((VIEWER_DIR / "window.js").read_text(encoding="utf-8") + "\n"
            + (VIEWER_DIR / "viewer.js").read_text(encoding="utf-8"))


_film_viewer = st.components.v2.component(
    "radconcord_film_viewer",
    html='<div class="rcv-host"></div>',
    css=(VIEWER_DIR / "viewer.css").read_text(encoding="utf-8"),
    js=_viewer_js(),
    # In the page DOM (no shadow root): the page's shortcut handler then sees the real focus
    # target, so typing in the viewer's inputs never fires N/P; the CSS is rcv- prefixed.
    isolate_styles=False,
)


def viewer_items(images: Sequence[Any], base_url_path: str = "") -> list[dict[str, Any]]:
    """What the browser viewer gets per image, frontal views first.

    Args:
        images: ``(image_id, view, format)`` per image (``rating.ImageRef`` values).
        base_url_path: Streamlit's ``server.baseUrlPath``.

    Returns:
        ``{"image_id", "caption", "url"}`` per image; ``url`` is the pixel route. A volume
        (format ``volume``) has ``"volume": True`` and the plane route as its ``url``.
    """
    from radconcord.webapp import api

    out = []
    for image_id, view_name, fmt in order_views(images):
        if fmt == VOLUME_FORMAT:
            out.append({"image_id": int(image_id), "volume": True,
                        "caption": f"{view_name} volume" if view_name else "Volume",
                        "url": api.url(base_url_path, f"images/{int(image_id)}/plane")})
            continue
        out.append({"image_id": int(image_id),
                    "caption": f"{view_name or 'Image'} ({fmt.upper()})",
                    "url": api.url(base_url_path, f"images/{int(image_id)}/pixels")})
    return out


def viewer_panel(db: Database, actor: Any, images: Sequence[Any], *, pair_key: str,  # noqa: ANN401
                 split_owner: str | None = None) -> None:
    """Draw the case's images in the canvas viewer (the rating screen's viewer).

    The browser fetches the pixels itself, through the images service's access check, so
    nothing here reads an image. Zoom, pan and a manual window start afresh when ``pair_key``
    changes; the preset, invert, sync and drag-mode choices stay (in the browser's storage).

    Args:
        db: The study database.
        actor: The rater or admin; an admin also sees burned-in text warnings.
        images: The pair's ``rating.ImageRef`` values (image_id, view, format).
        pair_key: The pair on screen.
        split_owner: An opaque per-user tag: the viewer then offers a draggable split
            between its column and the next one (kept in the browser under this tag), and
            its full screen takes both columns (the grid stays reachable, in a side panel
            that can be collapsed). None: the viewer alone (the explorer).
    """
    from radconcord.backend.services.annotation import images as image_service

    if not images:
        st.info("No images for this case.")
        return
    items = viewer_items(images, str(st.get_option("server.baseUrlPath") or ""))
    _film_viewer(key=VIEWER_KEY, data={"pair_key": pair_key, "images": items,
                                             "split_owner": split_owner},
                 width="stretch", height="content")
    # Burned-in text flags are for the study lead; a rater's call returns none.
    notes = image_service.image_warnings(db, actor, image_ids=[i["image_id"] for i in items])
    for item in items:
        if item["image_id"] in notes:
            st.warning(f"{item['caption']}: {notes[item['image_id']]}",
                       icon=":material/warning:")
