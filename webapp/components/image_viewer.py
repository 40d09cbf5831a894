"""Image viewing controls (window/level, zoom, invert) and the side-by-side image panel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


def view_controls() -> ViewSettings:
    """Draw the viewing controls in one row (current container) and return their values.

    The values live in ``st.session_state`` under fixed keys, so they stay the same from one
    pair to the next, as on a reading workstation.
    """
    row = st.columns([2.4, 1.5, 0.9], vertical_alignment="bottom")
    label = row[0].segmented_control(
        "Window", list(PRESETS), default="Header", key="view_preset",
        help="Header: the window stored in the DICOM header (PNG/JPEG as stored). "
             "Lung and bone: presets relative to the image's intensity range.",
    )
    preset = PRESETS.get(label or "Header", "header")
    zoom = row[1].slider("Zoom", min_value=1.0, max_value=4.0, value=1.0, step=0.25,
                         key="view_zoom", help="Magnifies the centre of the image.")
    invert = row[2].toggle("Invert", key="view_invert")
    center = width = None
    if preset == "manual":
        c1, c2, _ = st.columns([1, 1, 2])
        # In stored pixel values (not HU for radiographs); 128/256 is the full 8-bit range.
        center = c1.number_input("Center", value=128.0, step=8.0, key="view_center")
        width = c2.number_input("Width", value=256.0, min_value=1.0, step=8.0,
                                key="view_width")
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


def image_panel(rendered: Sequence[tuple[str, bytes | str]]) -> None:
    """Draw rendered images side by side.

    Args:
        rendered: ``(caption, png_bytes)`` per image, in display order; a ``str`` instead of
            bytes is a message explaining why that image could not be shown.
    """
    if not rendered:
        st.info("No images for this case.")
        return
    columns = st.columns(len(rendered), gap="small")
    for column, (caption, content) in zip(columns, rendered, strict=True):
        with column:
            if isinstance(content, str):
                st.warning(f"{caption}: {content}")
            else:
                st.image(content, caption=caption, width="stretch")
