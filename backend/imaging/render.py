"""Render a loaded image to 8-bit PNG bytes: window, invert, zoom, downscale.

Pure functions of (image, settings). The window is resolved on the whole image before any
zoom crop, so that zooming never changes brightness (percentile-based presets would drift
otherwise).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

from radconcord.backend.imaging.load import LoadedImage
from radconcord.backend.imaging.window import PRESETS, Window, display_values, resolve_window

DEFAULT_MAX_SIDE = 1024
THUMBNAIL_SIDE = 256
MAX_ZOOM = 16.0


@dataclass(frozen=True)
class RenderSettings:
    """Viewer settings; hashable so that renders can be cached by (image, settings).

    Attributes:
        preset: One of ``backend.imaging.window.PRESETS``.
        center: Window centre for ``manual``.
        width: Window width for ``manual``.
        invert: Invert the displayed brightness.
        zoom: Magnification >= 1; the crop is ``1/zoom`` of each side.
        zoom_x: Crop centre as a fraction of the width (0 = left, 1 = right).
        zoom_y: Crop centre as a fraction of the height (0 = top, 1 = bottom).
        max_side: Longest side of the output in pixels (downscale only).
    """

    preset: str = "header"
    center: float | None = None
    width: float | None = None
    invert: bool = False
    zoom: float = 1.0
    zoom_x: float = 0.5
    zoom_y: float = 0.5
    max_side: int = DEFAULT_MAX_SIDE

    def validate(self) -> None:
        """Raise ``ValueError`` for settings that cannot be rendered."""
        if self.preset not in PRESETS:
            raise ValueError(f"unknown window preset {self.preset!r}")
        if not np.isfinite(self.zoom) or not 1.0 <= self.zoom <= MAX_ZOOM:
            raise ValueError(f"zoom must be between 1 and {MAX_ZOOM:g}")
        if not (0.0 <= self.zoom_x <= 1.0 and 0.0 <= self.zoom_y <= 1.0):
            raise ValueError("zoom centre must lie inside the image (0..1)")
        if self.max_side < 16:
            raise ValueError("max_side must be at least 16 pixels")


def crop_box(
    height: int, width: int, zoom: float, cx: float, cy: float
) -> tuple[int, int, int, int]:
    """The crop ``(top, left, bottom, right)`` for a zoom factor and centre.

    The crop keeps the aspect ratio, is ``1/zoom`` of each side (at least one pixel) and is
    shifted to stay inside the image when the centre is near an edge.

    Args:
        height: Image rows.
        width: Image columns.
        zoom: Magnification >= 1.
        cx: Centre as a fraction of the width.
        cy: Centre as a fraction of the height.

    Returns:
        Half-open pixel bounds.
    """
    ch = max(1, int(round(height / zoom)))
    cw = max(1, int(round(width / zoom)))
    top = int(round(cy * height - ch / 2))
    left = int(round(cx * width - cw / 2))
    top = min(max(top, 0), height - ch)
    left = min(max(left, 0), width - cw)
    return top, left, top + ch, left + cw


def render_array(image: LoadedImage, settings: RenderSettings) -> tuple[np.ndarray, Window]:
    """Windowed, inverted, zoomed and downscaled uint8 array (before PNG encoding).

    Args:
        image: The loaded image.
        settings: Viewer settings.

    Returns:
        The uint8 array and the window that was applied.
    """
    settings.validate()
    window = resolve_window(
        image, settings.preset, center=settings.center, width=settings.width
    )
    pixels = image.pixels
    if settings.zoom > 1.0:
        top, left, bottom, right = crop_box(
            image.height, image.width, settings.zoom, settings.zoom_x, settings.zoom_y
        )
        pixels = pixels[top:bottom, left:right]
    values = display_values(image, window, invert=settings.invert, pixels=pixels)
    arr = np.rint(values * 255.0).astype(np.uint8)
    h, w = arr.shape
    longest = max(h, w)
    if longest > settings.max_side:
        scale = settings.max_side / longest
        size = (max(1, int(round(w * scale))), max(1, int(round(h * scale))))
        arr = np.asarray(Image.fromarray(arr).resize(size, Image.Resampling.LANCZOS))
    return arr, window


def encode_png(arr: np.ndarray) -> bytes:
    """8-bit grey PNG bytes of a uint8 array."""
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def render_png(image: LoadedImage, settings: RenderSettings | None = None) -> bytes:
    """PNG bytes of ``image`` as the viewer shows it.

    Args:
        image: The loaded image.
        settings: Viewer settings (defaults: header window, no zoom, 1024 px max side).

    Returns:
        8-bit grey-scale PNG bytes.
    """
    arr, _ = render_array(image, settings or RenderSettings())
    return encode_png(arr)


def thumbnail_png(image: LoadedImage, max_side: int = THUMBNAIL_SIDE) -> bytes:
    """Small PNG with the header window, for lists and pair overviews."""
    return render_png(image, RenderSettings(max_side=max_side))
