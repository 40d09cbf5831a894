"""The film viewers: the rating screen's canvas viewer, and the PNG panel of the admin pages.

:func:`viewer_panel` (rating screen) mounts a Streamlit v2 component (``viewer/``: a small
canvas viewer in plain JS) that fetches each image's modality values from
``GET _rc/api/images/<id>/pixels`` (``webapp/api/images.py``) and windows them in the browser:
the whole film fits the window at first sight, wheel/pinch zoom towards the pointer, drag to
pan, right-drag or Shift+drag for window/level (horizontal = width, vertical = centre, as in
OHIF), Header/Lung/Bone/Manual presets, frontal and lateral side by side with the W/L
synchronised or not. PNG/JPEG films are shown in grey (colour is converted to luminance on
load, as for the PNG renderer).

:func:`view_controls` and :func:`image_panel` draw server-rendered PNGs (explorer page).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

VIEWER_DIR = Path(__file__).resolve().parent / "viewer"
VIEWER_KEY = "rc_film_viewer"

# Label shown -> preset name understood by backend.services.images.rendered_image.
PRESETS = {"Header": "header", "Lung": "lung", "Bone": "bone", "Manual": "manual"}
FRONTAL_VIEWS = ("PA", "AP", "FRONTAL")


@dataclass(frozen=True)
class ViewSettings:
    """How the rater wants the images rendered."""

    preset: str
    center: float | None
    width: float | None
    invert: bool
    zoom: float


# Widget key -> default. Streamlit forgets a widget's value after a run that does not draw it
# (a pair without images), so the values are mirrored under PREFS_KEY and put back.
DEFAULTS: dict[str, object] = {
    "view_preset": "Header", "view_zoom": 1.0, "view_invert": False,
    # In stored pixel values (not HU for radiographs); 128/256 is the full 8-bit range.
    "view_center": 128.0, "view_width": 256.0,
}
PREFS_KEY = "view_prefs"


def _restore(key: str) -> None:
    """Give the widget ``key`` the rater's last value (or the default) before it is drawn."""
    if key not in st.session_state:
        st.session_state[key] = st.session_state.get(PREFS_KEY, {}).get(key, DEFAULTS[key])


def _remember(**values: object) -> None:
    prefs = dict(st.session_state.get(PREFS_KEY, {}))
    prefs.update(values)
    st.session_state[PREFS_KEY] = prefs


def view_controls() -> ViewSettings:
    """Draw the viewing controls in one row (current container) and return their values.

    The values stay the same from one pair to the next for the whole browser session, as on a
    reading workstation, even across pairs that have no image (where no control is drawn).
    """
    # Window and invert on one row, zoom under them: the four window choices need the width
    # on a 1280-pixel screen.
    row = st.columns([3, 1], vertical_alignment="bottom")
    for key in ("view_preset", "view_zoom", "view_invert"):
        _restore(key)
    label = row[0].segmented_control(
        "Window", list(PRESETS), key="view_preset",
        help="Header: the window stored in the DICOM header (PNG/JPEG as stored). "
             "Lung and bone: presets relative to the image's intensity range.",
    )
    preset = PRESETS.get(label or "Header", "header")
    invert = row[1].toggle("Invert", key="view_invert")
    zoom = st.slider("Zoom", min_value=1.0, max_value=4.0, step=0.25,
                   key="view_zoom", help="Magnifies the centre of the image.")
    # A click on the selected segment clears it; keep showing (and remembering) "Header".
    _remember(view_preset=label or "Header", view_zoom=zoom, view_invert=invert)
    center = width = None
    if preset == "manual":
        c1, c2, _ = st.columns([1, 1, 2])
        _restore("view_center")
        _restore("view_width")
        center = c1.number_input("Center", step=8.0, key="view_center")
        width = c2.number_input("Width", min_value=1.0, step=8.0, key="view_width")
        _remember(view_center=center, view_width=width)
    return ViewSettings(preset=preset, center=center, width=width, invert=invert, zoom=zoom)


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


def image_panel(
    rendered: Sequence[tuple[str, bytes | str]],
    *,
    warnings: Sequence[str | None] = (),
    show_warnings: bool = False,
) -> None:
    """Draw rendered images side by side.

    Args:
        rendered: ``(caption, png_bytes)`` per image, in display order; a ``str`` instead of
            bytes is a message explaining why that image could not be shown.
        warnings: Per image (same order), a warning to draw under it, or None
            (``backend.services.images.image_warnings``: burned-in text).
        show_warnings: Draw the warnings; pass ``actor.is_admin``. Raters never see them.
    """
    if not rendered:
        st.info("No images for this case.")
        return
    notes = list(warnings) if show_warnings else []
    columns = st.columns(len(rendered), gap="small")
    for index, (column, (caption, content)) in enumerate(
        zip(columns, rendered, strict=True)
    ):
        with column:
            if isinstance(content, str):
                st.warning(f"{caption}: {content}")
            else:
                st.image(content, caption=caption, width="stretch")
            note = notes[index] if index < len(notes) else None
            if note:
                st.warning(note, icon=":material/warning:")


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
        ``{"image_id", "caption", "url"}`` per image; ``url`` is the pixel route.
    """
    from webapp import api

    return [
        {"image_id": int(image_id), "caption": f"{view_name or 'Image'} ({fmt.upper()})",
         "url": api.url(base_url_path, f"images/{int(image_id)}/pixels")}
        for image_id, view_name, fmt in order_views(images)
    ]


def viewer_panel(db: Any, actor: Any, images: Sequence[Any], *, pair_key: str) -> None:  # noqa: ANN401
    """Draw the case's images in the canvas viewer (the rating screen's viewer).

    The browser fetches the pixels itself, through the images service's access check, so
    nothing here reads an image. Zoom, pan and a manual window start afresh when ``pair_key``
    changes; the preset, invert, sync and drag-mode choices stay (in the browser's storage).

    Args:
        db: The study database.
        actor: The rater or admin; an admin also sees burned-in text warnings.
        images: The pair's ``rating.ImageRef`` values (image_id, view, format).
        pair_key: The pair on screen.
    """
    from backend.services import images as image_service

    if not images:
        st.info("No images for this case.")
        return
    items = viewer_items(images, str(st.get_option("server.baseUrlPath") or ""))
    _film_viewer(key=VIEWER_KEY, data={"pair_key": pair_key, "images": items},
                 width="stretch", height="content")
    # Burned-in text flags are for the study lead; a rater's call returns none.
    notes = image_service.image_warnings(db, actor, image_ids=[i["image_id"] for i in items])
    for item in items:
        if item["image_id"] in notes:
            st.warning(f"{item['caption']}: {notes[item['image_id']]}",
                       icon=":material/warning:")
