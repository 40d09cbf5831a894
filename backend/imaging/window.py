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
    so these are windows *relative to a range of the image's own values* (span ``S``),
    measured in display brightness from the dark end (for MONOCHROME1 the dark end is the
    high stored values):

    - lung: relative to the body range (:func:`body_range`, the one the ``auto`` window
      spans), centre 0.45 S, width 0.70 S, through the DICOM SIGMOID function: the grey
      levels spread over the radiolucent lungs (steeper than ``auto`` there) while the dense
      mediastinum, heart and abdomen roll off towards light grey instead of clipping. On the
      demo's CR (RG1_UNCR) the former linear window, brightness 0.10 .. 0.80 of the whole
      film's ``[p1, p99]`` (a range that includes the direct-exposure background), clipped
      about 79 % of the mediastinum to white and gave the lungs no more contrast than
      ``auto``; this one clips none of it and spreads the lungs' 5th..95th percentile over
      0.73 of the grey scale (``auto``: 0.67); ``tests/unit/test_lung_preset.py`` keeps
      those numbers;
    - bone: relative to the whole film's robust range ``[p1, p99]`` (1st and 99th
      percentile, ``S = p99 - p1``), brightness 0.40 .. 1.00 of S (centre 0.70 S, width
      0.60 S), linear: spreads the grey levels over the dense structures and clips the
      lungs to black.

``auto`` (the viewer's default)
    The header window when it is plausible for the image, else a window from the image's own
    histogram inside the body: the 0.5th to 99.5th percentile of the central 80 % of the
    film (``BODY_CROP``), which leaves out the collimation edges, the labels and most of the
    direct-exposure background. The header's own VOI LUT and an 8-bit PNG/JPEG (display
    values already) count as plausible. A header Window Center/Width is plausible when its
    centre lies inside the body range and its width is at most ``PLAUSIBLE_WIDTH`` times
    that range: the demo's real CR (RG1_UNCR, 15-bit MONOCHROME1) carries W 30000 / C 15000
    over a body range of about 2500..16900, which leaves the film washed out grey; its auto
    window is about W 14400 / C 9700.

``manual``
    Caller-given centre and width (width > 0), DICOM LINEAR function.

All functions are pure; caching is the caller's business (``backend.services.annotation.images``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from radconcord.backend.imaging.load import LoadedImage, VoiLut

PRESETS = ("auto", "header", "lung", "bone", "manual")
# The part of the film the auto window reads: the central 80 % of each side.
BODY_CROP = 0.10
BODY_PERCENTILES = (0.5, 99.5)
# A header window wider than this many body ranges is not the one to read the film with.
PLAUSIBLE_WIDTH = 1.6
FALLBACK_PERCENTILES = (0.5, 99.5)
ROBUST_PERCENTILES = (1.0, 99.0)
CT_WINDOWS = {"lung": (-600.0, 1500.0), "bone": (400.0, 1800.0)}
# (start, end) as fractions of a range of the image's values, in brightness from the dark
# end; the range (RELATIVE_BASE: "body" = body_range, "robust" = ROBUST_PERCENTILES of the
# whole film) and the VOI function (RELATIVE_FUNCTION) per preset. A SIGMOID window's start
# and end are where its curve is at about 0.12 and 0.88 (centre -/+ width / 2).
RELATIVE_WINDOWS = {"lung": (0.10, 0.80), "bone": (0.40, 1.00)}
RELATIVE_BASE = {"lung": "body", "bone": "robust"}
RELATIVE_FUNCTION = {"lung": "SIGMOID", "bone": "LINEAR_EXACT"}
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


def body_range(pixels: np.ndarray) -> tuple[float, float]:
    """Robust value range inside the body: ``BODY_PERCENTILES`` of the central part of the
    film (``BODY_CROP`` cut off each edge), so that collimation, labels and the background
    around the patient weigh little.

    Args:
        pixels: The image (2-D).

    Returns:
        ``(low, high)`` with ``high > low``.
    """
    rows, cols = pixels.shape[:2]
    dr, dc = int(rows * BODY_CROP), int(cols * BODY_CROP)
    inner = pixels[dr:rows - dr or None, dc:cols - dc or None]
    if inner.size == 0:
        inner = pixels
    return percentile_range(inner, *BODY_PERCENTILES)


def header_plausible(image: LoadedImage) -> bool:
    """Whether the image's own default window is a sensible one to read it with.

    A VOI LUT and an 8-bit PNG/JPEG always are; a Window Center/Width is when its centre is
    inside the body range (:func:`body_range`) and its width at most ``PLAUSIBLE_WIDTH``
    times that range; no header window at all is not.
    """
    if image.voi_lut is not None:
        return True
    if not image.windows:
        return image.format in ("png", "jpeg") and image.bits == 8
    center, width = image.windows[0]
    lo, hi = body_range(image.pixels)
    return lo <= center <= hi and 0 < width <= PLAUSIBLE_WIDTH * (hi - lo)


def auto_window(image: LoadedImage) -> Window:
    """The viewer's default: the header window when plausible, else the body histogram's."""
    if header_plausible(image):
        return resolve_window(image, "header")
    lo, hi = body_range(image.pixels)
    return Window((lo + hi) / 2.0, hi - lo, "LINEAR_EXACT", source="auto-histogram")


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
    if preset == "auto":
        return auto_window(image)
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
        if RELATIVE_BASE[preset] == "body":
            lo, hi = body_range(image.pixels)
        else:
            lo, hi = percentile_range(image.pixels, *ROBUST_PERCENTILES)
        span = hi - lo
        start, end = RELATIVE_WINDOWS[preset]
        if image.invert_for_display:
            # MONOCHROME1: dark display = high stored values.
            a, b = hi - end * span, hi - start * span
        else:
            a, b = lo + start * span, lo + end * span
        return Window((a + b) / 2.0, b - a, RELATIVE_FUNCTION[preset],
                      source="relative-preset")
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
