"""Window/level: map modality values to display brightness in [0, 1].

Presets (``PRESETS``):

``header``
    The image's own default. DICOM: the VOI LUT Sequence if present, else the first Window
    Center/Width pair with the header's VOI LUT Function. 8-bit PNG/JPEG: identity (the file
    already holds display values). Anything else without a header window (DICOM without
    one, 16-bit PNG): the percentile fallback, a linear window spanning the 0.5th to 99.5th
    percentile of the whole image.

``lung`` / ``bone``
    For CT (values in HU): the usual fixed windows, lung C -600 / W 1500 and bone
    C 400 / W 1800. For projection radiographs (CR/DX/PNG/JPEG), stored values are not HU,
    so these are windows *relative to the image's robust intensity range* ``[p1, p99]``
    (1st and 99th percentile, span ``S = p99 - p1``), measured in display brightness from
    the dark end (for MONOCHROME1 the dark end is the high stored values):

    - lung: brightness 0.10 .. 0.80 of S (centre 0.45 S, width 0.70 S): spreads the grey
      levels over the radiolucent lungs and clips the dense mediastinum/abdomen to white;
    - bone: brightness 0.40 .. 1.00 of S (centre 0.70 S, width 0.60 S): spreads them over the
      dense structures and clips the lungs to black.

``manual``
    Caller-given centre and width (width > 0), DICOM LINEAR function.

All functions are pure; caching is the caller's business (``backend.services.annotation.images``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from radconcord.backend.imaging.load import LoadedImage, VoiLut

PRESETS = ("header", "lung", "bone", "manual")
FALLBACK_PERCENTILES = (0.5, 99.5)
ROBUST_PERCENTILES = (1.0, 99.0)
CT_WINDOWS = {"lung": (-600.0, 1500.0), "bone": (400.0, 1800.0)}
# (start, end) as fractions of the robust range, in brightness from the dark end.
RELATIVE_WINDOWS = {"lung": (0.10, 0.80), "bone": (0.40, 1.00)}
# Percentiles on a strided sample: the full 2000x2000 film adds time, not accuracy.
_SAMPLE_TARGET = 512 * 512


@dataclass(frozen=True)
class Window:
    """A resolved VOI transform: a linear/sigmoid window, or a VOI LUT table."""

    center: float | None
    width: float | None
    function: str = "LINEAR"
    lut: VoiLut | None = None
    source: str = ""  # what produced it: header, percentile, ct-preset, relative-preset...


def _sample(pixels: np.ndarray) -> np.ndarray:
    step = max(1, int(np.sqrt(pixels.size / _SAMPLE_TARGET)))
    sample = pixels[::step, ::step]
    return sample[np.isfinite(sample)]


def percentile_range(pixels: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    """Low and high percentiles of the finite pixel values (a strided sample of big images).

    Args:
        pixels: The image.
        lo: Lower percentile (0-100).
        hi: Upper percentile (0-100).

    Returns:
        ``(low, high)``; ``high > low`` is guaranteed (a flat image gets width 1).
    """
    sample = _sample(pixels)
    if sample.size == 0:
        return 0.0, 1.0
    p_lo, p_hi = (float(v) for v in np.percentile(sample, [lo, hi]))
    if p_hi <= p_lo:
        p_hi = p_lo + 1.0
    return p_lo, p_hi


def resolve_window(
    image: LoadedImage,
    preset: str = "header",
    *,
    center: float | None = None,
    width: float | None = None,
) -> Window:
    """Turn a preset (and manual values) into a concrete window for ``image``.

    Args:
        image: The loaded image.
        preset: One of ``PRESETS``.
        center: Window centre for ``manual``.
        width: Window width for ``manual`` (> 0).

    Returns:
        The window to apply.

    Raises:
        ValueError: Unknown preset, or ``manual`` without a valid centre and width.
    """
    if preset == "manual":
        if center is None or width is None:
            raise ValueError("manual window needs both center and width")
        if not (np.isfinite(center) and np.isfinite(width)) or width <= 0:
            raise ValueError("manual window needs a finite center and a width > 0")
        return Window(float(center), float(width), "LINEAR", source="manual")
    if preset == "header":
        if image.voi_lut is not None:
            return Window(None, None, "LUT", lut=image.voi_lut, source="header-lut")
        if image.windows:
            c, w = image.windows[0]
            return Window(c, w, image.voi_function, source="header")
        if image.format in ("png", "jpeg") and image.bits == 8:
            return Window(127.5, 255.0, "LINEAR_EXACT", source="identity")
        lo, hi = percentile_range(image.pixels, *FALLBACK_PERCENTILES)
        return Window((lo + hi) / 2.0, hi - lo, "LINEAR_EXACT", source="percentile")
    if preset in ("lung", "bone"):
        if image.hounsfield:
            c, w = CT_WINDOWS[preset]
            return Window(c, w, "LINEAR", source="ct-preset")
        lo, hi = percentile_range(image.pixels, *ROBUST_PERCENTILES)
        span = hi - lo
        start, end = RELATIVE_WINDOWS[preset]
        if image.invert_for_display:
            # MONOCHROME1: dark display = high stored values.
            a, b = hi - end * span, hi - start * span
        else:
            a, b = lo + start * span, lo + end * span
        return Window((a + b) / 2.0, b - a, "LINEAR_EXACT", source="relative-preset")
    raise ValueError(f"unknown window preset {preset!r}; choose one of {', '.join(PRESETS)}")


def apply_linear(pixels: np.ndarray, center: float, width: float) -> np.ndarray:
    """DICOM LINEAR window (PS3.3 C.11.2.1.2.1) to [0, 1].

    Args:
        pixels: Modality values.
        center: Window Center.
        width: Window Width (>= 1 per the standard; smaller widths are treated as 1).

    Returns:
        float32 brightness in [0, 1].
    """
    w = max(float(width), 1.0)
    c = float(center)
    if w == 1.0:
        # Width 1 is a threshold at c - 0.5.
        return (pixels > c - 0.5).astype(np.float32)
    out = ((pixels - (c - 0.5)) / (w - 1.0)) + 0.5
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def apply_linear_exact(pixels: np.ndarray, center: float, width: float) -> np.ndarray:
    """DICOM LINEAR_EXACT window (PS3.3 C.11.2.1.3.2) to [0, 1]."""
    w = max(float(width), np.finfo(np.float32).tiny)
    out = (pixels - float(center)) / w + 0.5
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def apply_sigmoid(pixels: np.ndarray, center: float, width: float) -> np.ndarray:
    """DICOM SIGMOID VOI function (PS3.3 C.11.2.1.3.1) to (0, 1)."""
    w = max(float(width), np.finfo(np.float32).tiny)
    with np.errstate(over="ignore"):
        out = 1.0 / (1.0 + np.exp(-4.0 * (pixels - float(center)) / w))
    return out.astype(np.float32)


def apply_lut(pixels: np.ndarray, lut: VoiLut) -> np.ndarray:
    """Apply a VOI LUT table: values below/above the table clamp to its first/last entry."""
    idx = np.rint(pixels).astype(np.int64) - lut.first_mapped
    np.clip(idx, 0, lut.table.size - 1, out=idx)
    scale = float(2**lut.bits - 1)
    return np.clip(lut.table[idx] / scale, 0.0, 1.0).astype(np.float32)


def apply_window(pixels: np.ndarray, window: Window) -> np.ndarray:
    """Map modality values through ``window`` to brightness in [0, 1] (stored orientation).

    Args:
        pixels: Modality values.
        window: From :func:`resolve_window`.

    Returns:
        float32 array of the same shape.
    """
    if window.lut is not None:
        return apply_lut(pixels, window.lut)
    assert window.center is not None and window.width is not None
    if window.function == "SIGMOID":
        return apply_sigmoid(pixels, window.center, window.width)
    if window.function == "LINEAR_EXACT":
        return apply_linear_exact(pixels, window.center, window.width)
    return apply_linear(pixels, window.center, window.width)


def display_values(
    image: LoadedImage,
    window: Window,
    *,
    invert: bool = False,
    pixels: np.ndarray | None = None,
) -> np.ndarray:
    """Brightness in [0, 1] as shown: windowed, MONOCHROME1 flipped, then user ``invert``.

    Args:
        image: The loaded image (for its photometric interpretation).
        window: The resolved window.
        invert: The viewer's invert toggle (applied after the MONOCHROME1 flip).
        pixels: A crop of ``image.pixels`` to window instead of the whole image.

    Returns:
        float32 array in [0, 1], 1 = white.
    """
    values = apply_window(image.pixels if pixels is None else pixels, window)
    if image.invert_for_display != bool(invert):
        values = 1.0 - values
    return values
