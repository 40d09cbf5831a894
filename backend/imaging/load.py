"""Read DICOM, PNG and JPEG files into a float32 array plus display metadata.

DICOM pixel data goes through the Modality LUT (Rescale Slope/Intercept or a Modality LUT
Sequence), so CT values are Hounsfield units. The VOI transform is *not* applied here: the
header's windows (all values of a multi-valued Window Center/Width) and any VOI LUT Sequence
are kept on :class:`LoadedImage` so that :mod:`backend.imaging.window` can apply the header
default or another preset. MONOCHROME1 images are flagged ``invert_for_display`` (their lowest
value is shown white); the stored values are not changed. Multi-frame files give their first
frame. Colour images are converted to luminance, because the viewer shows grey-scale films.

Every failure to read a file raises :class:`ImageLoadError` whose message names the file.

Pixel limit: a frame may have at most :data:`MAX_PIXELS_PER_FRAME` pixels (8192 x 8192, seven
times a large chest film) and a DICOM file at most :data:`MAX_FRAMES` frames and
:data:`MAX_TOTAL_PIXELS` pixels in all (four full-size frames). The limit is checked from the
header (PNG IHDR, JPEG SOF, DICOM Rows/Columns/Number of Frames and the JPEG / JPEG 2000
header of each compressed frame) before any pixel is decoded, so a file claiming 30000 x 30000
pixels costs no memory; Pillow's own decompression-bomb limit is set to the same number so
that it never disagrees.
"""

from __future__ import annotations

import io
import logging
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

# Re-exported: importers (services.imports) take the file hash from here.
from radconcord.backend.util import file_sha256 as file_sha256

logger = logging.getLogger(__name__)

DICOM_SUFFIXES = {".dcm", ".dicom", ".dic"}
PNG_SUFFIXES = {".png"}
JPEG_SUFFIXES = {".jpg", ".jpeg"}


# The explicit pixel limit (see the module docstring). A frame of 8192 x 8192 pixels decodes
# to 256 MiB as float32; a chest film is about 3000 x 3000.
MAX_SIDE = 8192
MAX_PIXELS_PER_FRAME = MAX_SIDE * MAX_SIDE
MAX_FRAMES = 256
# All frames of one file together (a 16-bit file at the limit decodes to 512 MiB).
MAX_TOTAL_PIXELS = 4 * MAX_PIXELS_PER_FRAME

# Pillow warns above MAX_IMAGE_PIXELS and refuses above twice that; with the same number our
# header check refuses first, and Pillow never warns about an image we accept.
Image.MAX_IMAGE_PIXELS = MAX_PIXELS_PER_FRAME


class ImageLoadError(ValueError):
    """A file could not be read as an image; the message names the file."""


def check_pixel_limit(name: str, rows: int, columns: int, frames: int = 1) -> None:
    """Refuse an image whose header claims more pixels than the limit.

    Args:
        name: The file, for the message (empty: the caller adds it).
        rows: Rows (height) claimed by the header.
        columns: Columns (width) claimed by the header.
        frames: Number of frames claimed by the header.

    Raises:
        ImageLoadError: A dimension is not positive, a frame has more than
            ``MAX_PIXELS_PER_FRAME`` pixels, there are more than ``MAX_FRAMES`` frames, or
            more than ``MAX_TOTAL_PIXELS`` pixels in all.
    """
    prefix = f"{name}: " if name else ""
    if rows <= 0 or columns <= 0 or frames <= 0:
        raise ImageLoadError(
            f"{prefix}header claims {columns} x {rows} pixels and {frames} frame(s)"
        )
    if rows * columns > MAX_PIXELS_PER_FRAME:
        raise ImageLoadError(
            f"{prefix}image of {columns} x {rows} pixels exceeds the limit of "
            f"{MAX_PIXELS_PER_FRAME} pixels per frame ({MAX_SIDE} x {MAX_SIDE})"
        )
    if frames > MAX_FRAMES:
        raise ImageLoadError(f"{prefix}{frames} frames exceed the limit of {MAX_FRAMES} frames")
    if rows * columns * frames > MAX_TOTAL_PIXELS:
        raise ImageLoadError(
            f"{prefix}{frames} frames of {columns} x {rows} pixels exceed the limit of "
            f"{MAX_TOTAL_PIXELS} pixels per file"
        )


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Start-of-frame markers (SOF0..SOF15 without DHT C4, JPG C8 and DAC CC; JPEG-LS SOF55).
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF,
             0xF7}


def raster_header_size(data: bytes, fmt: str) -> tuple[int, int]:
    """Width and height claimed by a PNG (IHDR) or JPEG (first SOF) header, without decoding.

    Args:
        data: The file's bytes (the header part is enough).
        fmt: ``"png"`` or ``"jpeg"``.

    Returns:
        ``(width, height)``.

    Raises:
        ValueError: The header is missing or malformed (the message says which).
    """
    if fmt == "png":
        if not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR" or len(data) < 24:
            raise ValueError("PNG header (IHDR) missing")
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if fmt != "jpeg":
        raise ValueError(f"unknown raster format {fmt!r}")
    if not data.startswith(b"\xff\xd8"):
        raise ValueError("JPEG start-of-image marker missing")
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise ValueError("malformed JPEG marker stream")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        if marker in (0xD9, 0xDA):
            break
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if length < 2:
            raise ValueError("malformed JPEG segment length")
        if marker in _JPEG_SOF:
            if pos + 9 > len(data):
                break
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return width, height
        pos += 2 + length
    raise ValueError("JPEG start-of-frame header missing")


@dataclass(frozen=True)
class VoiLut:
    """A VOI LUT from a VOI LUT Sequence item.

    Attributes:
        first_mapped: Input value mapped to the first table entry.
        table: Output values (float32), one per input value from ``first_mapped`` on.
        bits: Bits per output entry; outputs are scaled to 0..1 by ``2**bits - 1``.
        explanation: The LUT Explanation text, if any.
    """

    first_mapped: int
    table: np.ndarray
    bits: int
    explanation: str = ""


@dataclass(frozen=True)
class LoadedImage:
    """A decoded image ready for windowing.

    Attributes:
        pixels: 2-D float32 array after the Modality LUT (HU for CT; stored values otherwise).
        format: ``"dicom"``, ``"png"`` or ``"jpeg"``.
        photometric: Photometric interpretation (``MONOCHROME1``, ``MONOCHROME2``, or the
            original colour model of an image converted to grey).
        invert_for_display: True for MONOCHROME1 (minimum value displayed white).
        windows: Header windows as (center, width), the first being the default.
        window_explanations: Window Center & Width Explanation values, if present.
        voi_function: VOI LUT Function (``LINEAR``, ``LINEAR_EXACT`` or ``SIGMOID``).
        voi_lut: First VOI LUT Sequence item, if present (used instead of windows).
        modality: DICOM Modality, or None for PNG/JPEG.
        view: DICOM View Position (PA, AP, LL, ...), if present.
        bits: Significant bits of the stored values (8 for 8-bit PNG/JPEG).
        hounsfield: True when the modality output is in HU (CT, or RescaleType ``HU``).
        meta: JSON-able, de-identified summary for the database and the UI.
    """

    pixels: np.ndarray
    format: str
    photometric: str
    invert_for_display: bool = False
    windows: tuple[tuple[float, float], ...] = ()
    window_explanations: tuple[str, ...] = ()
    voi_function: str = "LINEAR"
    voi_lut: VoiLut | None = None
    modality: str | None = None
    view: str | None = None
    bits: int = 8
    hounsfield: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def height(self) -> int:
        """Rows of the (first) frame."""
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        """Columns of the (first) frame."""
        return int(self.pixels.shape[1])


def _codestream_size(data: bytes) -> tuple[int, int] | None:
    """Width and height claimed by a JPEG or JPEG 2000 codestream, None if neither."""
    if data.startswith(b"\xff\xd8"):
        try:
            return raster_header_size(data, "jpeg")
        except ValueError:
            return None
    # SOC followed by SIZ: a raw codestream, or one inside a JP2 box near the start.
    pos = data.find(b"\xff\x4f\xff\x51", 0, 4096)
    if pos < 0 or pos + 24 > len(data):
        return None
    xsiz, ysiz, x_offset, y_offset = struct.unpack(">IIII", data[pos + 8 : pos + 24])
    return xsiz - x_offset, ysiz - y_offset


def check_dicom_pixel_limit(name: str, ds: Any) -> None:
    """Refuse a DICOM dataset over the pixel limit, from its header, before decoding.

    Rows, Columns and Number of Frames are checked, and for compressed pixel data also the
    size each frame's own JPEG / JPEG 2000 header claims (a decoder allocates what the
    codestream says, whatever Rows and Columns say).

    Args:
        name: The file, for the message (empty: the caller adds it).
        ds: The dataset (pixel data read, not decoded).

    Raises:
        ImageLoadError: Malformed dimensions, or over the limit.
    """
    from pydicom.encaps import generate_frames
    from pydicom.uid import UID

    prefix = f"{name}: " if name else ""
    try:
        frames = int(ds.get("NumberOfFrames", 1) or 1)
        rows, columns = int(ds.get("Rows", 0) or 0), int(ds.get("Columns", 0) or 0)
    except (TypeError, ValueError) as exc:
        raise ImageLoadError(f"{prefix}malformed Rows/Columns/Number of Frames ({exc})") from exc
    check_pixel_limit(name, rows, columns, frames)
    meta = getattr(ds, "file_meta", None)
    syntax = UID(str(meta.get("TransferSyntaxUID", "") if meta is not None else ""))
    if not syntax.is_compressed or "PixelData" not in ds:
        return
    try:
        encoded = list(generate_frames(ds.PixelData, number_of_frames=frames))
    except Exception:  # malformed encapsulation: the decoder reports it
        return
    for frame in encoded:
        size = _codestream_size(frame)
        if size is not None:
            check_pixel_limit(name, size[1], size[0], frames)


def sniff_format(path: Path, head: bytes | None = None) -> str | None:
    """Guess ``dicom``/``png``/``jpeg`` from the file's magic bytes, then its suffix.

    Args:
        path: The file.
        head: The first 132+ bytes, if already read.

    Returns:
        The format, or None when nothing matches.
    """
    if head is None:
        try:
            with open(path, "rb") as fh:
                head = fh.read(132)
        except OSError:
            return None
    if len(head) >= 132 and head[128:132] == b"DICM":
        return "dicom"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    suffix = path.suffix.lower()
    if suffix in DICOM_SUFFIXES or suffix == "":
        # DICOM files without the 128-byte preamble still exist in the wild.
        return "dicom"
    return None


def load_image(path: str | Path) -> LoadedImage:
    """Read a DICOM, PNG or JPEG file.

    Args:
        path: The image file.

    Returns:
        The decoded first frame and its display metadata.

    Raises:
        ImageLoadError: The file is missing, not an image, corrupt, or cannot be decoded.
    """
    path = Path(path)
    if not path.is_file():
        raise ImageLoadError(f"{path}: no such image file")
    fmt = sniff_format(path)
    if fmt == "dicom":
        return _load_dicom(path)
    if fmt in ("png", "jpeg"):
        return _load_pillow(path, fmt)
    raise ImageLoadError(f"{path}: not a DICOM, PNG or JPEG file")


def _load_pillow(path: Path, fmt: str) -> LoadedImage:
    from PIL import UnidentifiedImageError

    try:
        # Whole file: JPEG metadata segments before the frame header may be large.
        data = path.read_bytes()
    except OSError as exc:
        raise ImageLoadError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        width, height = raster_header_size(data, fmt)
    except ValueError as exc:
        raise ImageLoadError(f"{path}: cannot decode {fmt.upper()} image ({exc})") from exc
    check_pixel_limit(str(path), height, width)
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            mode = img.mode
            if mode in ("I;16", "I;16B", "I;16L", "I"):
                arr = np.asarray(img).astype(np.float32)
                bits = 16
                photometric = "MONOCHROME2"
            elif mode == "L":
                arr = np.asarray(img, dtype=np.float32)
                bits = 8
                photometric = "MONOCHROME2"
            elif mode == "F":
                arr = np.asarray(img, dtype=np.float32)
                bits = 32
                photometric = "MONOCHROME2"
            else:
                # Colour, palette, alpha or 1-bit: the viewer shows luminance.
                arr = np.asarray(img.convert("L"), dtype=np.float32)
                bits = 8
                photometric = mode
    except Image.DecompressionBombError as exc:
        # Only reachable if the header check above was fooled (e.g. an APNG frame).
        raise ImageLoadError(
            f"{path}: image exceeds the limit of {MAX_PIXELS_PER_FRAME} pixels per frame"
        ) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ImageLoadError(f"{path}: cannot decode {fmt.upper()} image ({exc})") from exc
    if arr.ndim != 2 or arr.size == 0:
        raise ImageLoadError(f"{path}: unsupported {fmt.upper()} image shape {arr.shape}")
    meta = {
        "format": fmt,
        "photometric": photometric,
        "rows": int(arr.shape[0]),
        "columns": int(arr.shape[1]),
        "bits": bits,
        "mode": mode,
    }
    return LoadedImage(
        pixels=np.ascontiguousarray(arr, dtype=np.float32),
        format=fmt,
        photometric=photometric,
        bits=bits,
        meta=meta,
    )


def _multi(value: Any) -> list[Any]:
    """A DICOM value as a list (multi-valued elements are sequences, single ones are not)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return list(value)
    return [value]


def _header_windows(ds: Any) -> tuple[tuple[tuple[float, float], ...], tuple[str, ...]]:
    centers = _multi(ds.get("WindowCenter"))
    widths = _multi(ds.get("WindowWidth"))
    windows = []
    for c, w in zip(centers, widths, strict=False):
        try:
            c_f, w_f = float(c), float(w)
        except (TypeError, ValueError):
            continue
        if w_f > 0 and np.isfinite(c_f) and np.isfinite(w_f):
            windows.append((c_f, w_f))
    explanations = tuple(str(e) for e in _multi(ds.get("WindowCenterWidthExplanation")))
    return tuple(windows), explanations


def _voi_lut(ds: Any, path: Path) -> VoiLut | None:
    seq = ds.get("VOILUTSequence")
    if not seq:
        return None
    item = seq[0]
    try:
        n_entries, first, bits = (int(v) for v in item.LUTDescriptor)
        raw = item["LUTData"]
        if raw.VR in ("OW", "OB") or isinstance(raw.value, bytes):
            # OW bytes are kept in the file's byte order.
            order = ">" if ds.original_encoding[1] is False else "<"
            table = np.frombuffer(raw.value, dtype=f"{order}u2" if bits > 8 else "<u1")
        else:
            table = np.asarray(_multi(raw.value))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ImageLoadError(f"{path}: malformed VOI LUT Sequence ({exc})") from exc
    n_entries = n_entries or 65536  # 0 means 2**16 entries (PS3.3 C.11.2.1.1)
    if table.size < n_entries or table.size == 0:
        raise ImageLoadError(
            f"{path}: VOI LUT has {table.size} entries, descriptor says {n_entries}"
        )
    pixel_rep = int(ds.get("PixelRepresentation", 0))
    if pixel_rep == 1 and first >= 32768:
        first -= 65536  # first mapped value is signed when pixels are
    return VoiLut(
        first_mapped=first,
        table=np.asarray(table[:n_entries], dtype=np.float32),
        bits=max(1, bits),
        explanation=str(item.get("LUTExplanation", "") or ""),
    )


def _load_dicom(path: Path) -> LoadedImage:
    import pydicom
    from pydicom.errors import InvalidDicomError
    from pydicom.pixels import apply_modality_lut, pixel_array

    try:
        ds = pydicom.dcmread(path)
    except (InvalidDicomError, OSError, ValueError, EOFError, TypeError, KeyError) as exc:
        raise ImageLoadError(f"{path}: not a readable DICOM file ({exc})") from exc
    if "PixelData" not in ds and "FloatPixelData" not in ds and "DoubleFloatPixelData" not in ds:
        raise ImageLoadError(f"{path}: DICOM file has no pixel data")
    check_dicom_pixel_limit(str(path), ds)
    n_frames = int(ds.get("NumberOfFrames", 1) or 1)
    try:
        index = 0 if n_frames > 1 else None
        arr = pixel_array(ds, index=index)
    except Exception as exc:  # decoders raise many types; each means "cannot decode"
        raise ImageLoadError(f"{path}: cannot decode DICOM pixel data ({exc})") from exc
    photometric = str(ds.get("PhotometricInterpretation", "MONOCHROME2")).strip().upper()
    if photometric == "PALETTE COLOR" and arr.ndim == 2:
        # Indices into the palette mean nothing as grey values: show the palette's colours
        # (de-identification stores them as RGB, so both display alike).
        from pydicom.pixels import apply_color_lut

        try:
            arr = apply_color_lut(arr, ds)
        except Exception as exc:  # malformed palette descriptors raise assorted errors
            raise ImageLoadError(f"{path}: malformed palette colour tables ({exc})") from exc
    if arr.ndim == 3 and arr.shape[-1] in (3, 4):
        # Colour DICOM (secondary capture): decoded as RGB by pydicom; show luminance.
        rgb = arr[..., :3].astype(np.float32)
        arr = rgb @ np.asarray([0.299, 0.587, 0.114], dtype=np.float32)
        modality_out = arr
    elif arr.ndim != 2:
        raise ImageLoadError(f"{path}: unsupported DICOM pixel array shape {arr.shape}")
    else:
        try:
            modality_out = apply_modality_lut(arr, ds)
        except Exception as exc:  # malformed LUT descriptors raise assorted errors
            raise ImageLoadError(f"{path}: malformed Modality LUT ({exc})") from exc
    pixels = np.ascontiguousarray(modality_out, dtype=np.float32)
    windows, explanations = _header_windows(ds)
    voi_function = str(ds.get("VOILUTFunction", "LINEAR") or "LINEAR").strip().upper()
    if voi_function not in ("LINEAR", "LINEAR_EXACT", "SIGMOID"):
        voi_function = "LINEAR"
    modality = str(ds.get("Modality", "") or "") or None
    rescale_type = str(ds.get("RescaleType", "") or "").upper()
    hounsfield = modality == "CT" or rescale_type == "HU"
    view = str(ds.get("ViewPosition", "") or "").strip() or None
    bits = int(ds.get("BitsStored", 8) or 8)
    meta: dict[str, Any] = {
        "format": "dicom",
        "photometric": photometric,
        "rows": int(pixels.shape[0]),
        "columns": int(pixels.shape[1]),
        "frames": n_frames,
        "bits_stored": bits,
        "modality": modality,
        "view_position": view,
        "body_part": str(ds.get("BodyPartExamined", "") or "") or None,
        "transfer_syntax": str(ds.file_meta.get("TransferSyntaxUID", "")) or None,
        "windows": [list(w) for w in windows],
        "window_explanations": list(explanations),
        "voi_lut": "VOILUTSequence" in ds,
        "voi_function": voi_function,
        "hounsfield": hounsfield,
    }
    burned_in = str(ds.get("BurnedInAnnotation", "") or "").strip().upper()
    if burned_in in ("YES", "NO"):
        # Shown to the admin beside the image (burned-in text is not removed on import).
        meta["burned_in_annotation"] = burned_in
    if "PixelSpacing" in ds:
        try:
            meta["pixel_spacing"] = [float(v) for v in ds.PixelSpacing]
        except (TypeError, ValueError):
            pass
    return LoadedImage(
        pixels=pixels,
        format="dicom",
        photometric=photometric,
        invert_for_display=photometric == "MONOCHROME1",
        windows=windows,
        window_explanations=explanations,
        voi_function=voi_function,
        voi_lut=_voi_lut(ds, path),
        modality=modality,
        view=view,
        bits=bits,
        hounsfield=hounsfield,
        meta=meta,
    )
