"""Image viewing controls (window/level, zoom, invert) and the side-by-side image panel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

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


def viewer_panel(db: Any, actor: Any, images: Sequence[Any], *, pair_key: str) -> None:  # noqa: ANN401
    """Draw the case's images with their viewing controls (the rating screen's viewer).

    Args:
        db: The study database.
        actor: The rater (the images service checks access on every call).
        images: The pair's ``rating.ImageRef`` values (image_id, view, format).
        pair_key: The pair on screen; zoom and pan start afresh for each new pair.
    """
    from backend.services import images as image_service
    from backend.services.errors import ServiceError

    del pair_key  # the Streamlit controls keep their values across pairs
    settings = view_controls()
    rendered: list[tuple[str, bytes | str]] = []
    for image_id, view_name, fmt in order_views(images):
        caption = f"{view_name or 'Image'} ({fmt.upper()})"
        try:
            rendered.append((caption, image_service.rendered_image(
                db, actor, image_id=image_id, preset=settings.preset, center=settings.center,
                width=settings.width, invert=settings.invert, zoom=settings.zoom)))
        except ServiceError as exc:
            rendered.append((caption, str(exc)))
    image_panel(rendered)
