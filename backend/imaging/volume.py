"""Read 3-D volumes: DICOM series, multi-frame (enhanced) DICOM and NIfTI, headers first.

What an image entry is (:func:`classify_entry`):

- ``"nifti"``: a file named ``*.nii`` or ``*.nii.gz`` (read with nibabel, never by hand).
- ``"multiframe"``: a DICOM file with Number of Frames > 1, or a folder holding exactly one
  such file and nothing else.
- ``"series"``: a folder whose DICOM files are single-frame, carry Image Position and Image
  Orientation (Patient), share one Series Instance UID and are at least two.
- ``"film"``: a single PNG/JPEG/single-frame DICOM file, or a folder of such files that is not
  a series (e.g. a frontal and a lateral chest film, each without a slice position): each file
  stays a separate 2-D image, as before volumes existed.
- Refused with the reason (:class:`VolumeError`): an empty folder, a subfolder or an unknown
  file inside the folder, slices of several series in one folder (ambiguous: which one is the
  case's image?), slices of a series beside 2-D films, a multi-frame file beside other files.

Geometry and conventions:

- A volume is indexed ``[slice, row, column]`` (``shape = (slices, rows, cols)``) and
  ``spacing = (z, y, x)`` in mm: the step between slices along their normal, the distance
  between rows, the distance between columns.
- ``affine`` is 4 x 4 and maps ``(column, row, slice, 1)`` to **DICOM patient coordinates
  (LPS: +x left, +y posterior, +z head), in mm**, for every kind of entry. A NIfTI affine is
  RAS; it is converted with ``diag(-1, -1, 1, 1)`` (:meth:`VolumeHeader.ras_affine` gives
  it back).
- DICOM slices are ordered by their position along the slice normal (Image Position
  (Patient) projected on the cross product of the Image Orientation's row and column
  directions), never by file name or Instance Number.
- Refused, naming the file(s): different Rows/Columns, Image Orientation or Pixel Spacing
  between slices; two slices at the same position; a gap between neighbours that differs from
  the median gap by more than :data:`SPACING_TOLERANCE` (1 %); a slice off the line through the
  others. A gap that is a whole multiple of the median is reported as missing slices and
  **refused** too: the store is a regular grid, so every slice after the gap would be shown
  one or more spacings away from where it was acquired (and the rater would scroll past a
  hole without knowing). Warnings instead of refusals, where viewing stays correct: a gantry
  tilt (slices stacked along a direction that is not their normal; the affine keeps the
  shear), and a NIfTI with neither qform nor sform (voxel sizes known, orientation not).
- Hounsfield units (or the modality's own values) come from the Modality LUT: Rescale
  Slope/Intercept (or a Modality LUT Sequence) of each slice, the per-frame or shared Pixel
  Value Transformation of an enhanced file, or NIfTI's ``scl_slope``/``scl_inter`` (nibabel's
  scaling). :attr:`VolumeHeader.integral` says whether every slope and intercept is an
  integer, so that the values may be stored exactly as int16 (the store checks each slice's
  range and falls back to float32 otherwise).

Limit: at most :data:`MAX_SLICES` slices of at most :data:`MAX_SIDE` x :data:`MAX_SIDE`
pixels (2 GiB as int16), checked by :func:`check_volume_limit` from the headers (DICOM read
with ``stop_before_pixels``, the NIfTI header) before any pixel is decoded. A folder with
more candidate files than the limit is refused before its headers are read. A compressed
single-frame slice is also held to :func:`backend.imaging.load.check_dicom_pixel_limit` (the
size its own JPEG / JPEG 2000 header claims) when it is read; the frames of a compressed
multi-frame file are not pre-checked that way (it would mean reading all of its pixel data at
once), only its Rows, Columns and Number of Frames.

:func:`open_volume` returns a :class:`VolumeSource` whose :meth:`VolumeSource.iter_slices`
decodes one slice at a time (DICOM) or one chunk of at most :data:`NIFTI_CHUNK_BYTES`
(NIfTI), so memory stays bounded whatever the volume's size.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from radconcord.backend.imaging.load import (
    ImageLoadError,
    check_dicom_pixel_limit,
    sniff_format,
)

MAX_SLICES = 1024
MAX_SIDE = 1024
# A neighbour gap may differ from the median gap by this fraction before the series is refused.
SPACING_TOLERANCE = 0.01
# Two slices closer than this along the normal are at the same position.
DUPLICATE_TOLERANCE_MM = 0.01
# Direction cosines of two slices may differ by this much and still be one orientation.
ORIENTATION_TOLERANCE = 1e-3
# Pixel spacing of two slices may differ by this fraction.
PIXEL_SPACING_TOLERANCE = 1e-3
# A stack direction this far from the slice normal (radians) is reported as a gantry tilt.
TILT_WARNING_RAD = math.radians(0.1)
# NIfTI is read in chunks of whole slices; a chunk has at most this many bytes / 8 voxels (its
# raw bytes are fewer for 16-bit data), and each slice is scaled to float64 on its own.
NIFTI_CHUNK_BYTES = 32 * 1024 * 1024
NIFTI_SUFFIXES = (".nii", ".nii.gz")
ENTRY_KINDS = ("film", "series", "multiframe", "nifti")
# Files a series folder may hold beside its slices, ignored.
IGNORED_NAMES = frozenset({"DICOMDIR", "Thumbs.db", "desktop.ini"})
# CT windows as (center, width), offered as hints with every CT volume.
CT_WINDOW_HINTS = {
    "lung": (-600.0, 1500.0),
    "mediastinum": (40.0, 400.0),
    "bone": (400.0, 1800.0),
}
_LPS_FROM_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])


class VolumeError(ImageLoadError):
    """A volume entry was refused or could not be read; the message names the file."""


@dataclass(frozen=True)
class VolumeHeader:
    """What the headers say about a volume; no pixel has been decoded to know it.

    Attributes:
        kind: ``"series"``, ``"multiframe"`` or ``"nifti"``.
        shape: ``(slices, rows, cols)``.
        spacing: ``(z, y, x)`` in mm: slice step along the normal, row and column spacing.
        affine: 4 x 4 rows; maps ``(col, row, slice, 1)`` to LPS patient coordinates in mm.
        modality: DICOM Modality (NIfTI: what the caller stated, else None).
        hounsfield: True when the values are HU (CT, or Rescale Type HU).
        rescale: ``(slope, intercept)`` of each slice, in slice order.
        integral: Every slope and intercept is an integer and the raw values are integers,
            so the values may be exact in an integer type.
        value_bounds: Lowest and highest value the raw type and the rescale allow, or None
            when unknown (e.g. a Modality LUT Sequence or float NIfTI data).
        windows: Header windows as (center, width) (DICOM Window Center/Width of the first
            slice; NIfTI cal_min/cal_max).
        warnings: Problems that leave viewing correct (e.g. a gantry tilt).
    """

    kind: str
    shape: tuple[int, int, int]
    spacing: tuple[float, float, float]
    affine: tuple[tuple[float, ...], ...]
    modality: str | None = None
    hounsfield: bool = False
    rescale: tuple[tuple[float, float], ...] = ()
    integral: bool = False
    value_bounds: tuple[float, float] | None = None
    windows: tuple[tuple[float, float], ...] = ()
    warnings: tuple[str, ...] = ()

    def affine_array(self) -> np.ndarray:
        """The affine as a float64 4 x 4 array (LPS)."""
        return np.asarray(self.affine, dtype=np.float64)

    def ras_affine(self) -> np.ndarray:
        """The affine to RAS (NIfTI's space) instead of LPS."""
        return _LPS_FROM_RAS @ self.affine_array()

    def int16_exact(self) -> bool:
        """True when every value is sure to fit int16 exactly (from the headers alone)."""
        if not self.integral or self.value_bounds is None:
            return False
        low, high = self.value_bounds
        return low >= -32768 and high <= 32767


def check_volume_limit(header: VolumeHeader, name: str) -> None:
    """Refuse a volume over the documented limit, from its header, before decoding.

    Args:
        header: The volume's header.
        name: The file or folder, for the message.

    Raises:
        VolumeError: A dimension is not positive, there are more than :data:`MAX_SLICES`
            slices, or rows or columns exceed :data:`MAX_SIDE`.
    """
    slices, rows, cols = header.shape
    if slices <= 0 or rows <= 0 or cols <= 0:
        raise VolumeError(f"{name}: header claims {slices} slices of {cols} x {rows} pixels")
    if slices > MAX_SLICES or rows > MAX_SIDE or cols > MAX_SIDE:
        raise VolumeError(
            f"{name}: volume of {slices} slices of {cols} x {rows} pixels exceeds the limit of "
            f"{MAX_SLICES} slices of up to {MAX_SIDE} x {MAX_SIDE} pixels"
        )


# --- DICOM headers ------------------------------------------------------------------------


@dataclass
class SliceGeometry:
    """Header facts of one slice (a single-frame file, or one frame of a multi-frame file).

    Attributes:
        label: The file (and frame), for messages.
        path: The file.
        frame: The frame's index in a multi-frame file, else None.
        rows: Rows of the slice.
        cols: Columns of the slice.
        position: Image Position (Patient), LPS mm.
        orientation: Image Orientation (Patient): row direction, then column direction.
        pixel_spacing: Pixel Spacing (between rows, between columns) in mm.
        slope: Rescale Slope.
        intercept: Rescale Intercept.
    """

    label: str
    path: Path
    frame: int | None
    rows: int
    cols: int
    position: np.ndarray | None
    orientation: np.ndarray | None
    pixel_spacing: tuple[float, float] | None
    slope: float = 1.0
    intercept: float = 0.0


@dataclass
class _DicomFile:
    path: Path
    ds: Any
    frames: int
    series_uid: str
    sop_uid: str

    @property
    def has_geometry(self) -> bool:
        return "ImagePositionPatient" in self.ds and "ImageOrientationPatient" in self.ds


def _floats(value: Any, count: int, what: str, label: str) -> np.ndarray:
    try:
        values = [float(v) for v in (value if isinstance(value, (list, tuple)) or
                                     type(value).__name__ == "MultiValue" else [value])]
    except (TypeError, ValueError) as exc:
        raise VolumeError(f"{label}: malformed {what} ({exc})") from None
    if len(values) != count or not all(math.isfinite(v) for v in values):
        raise VolumeError(f"{label}: malformed {what} ({values})")
    return np.asarray(values, dtype=np.float64)


def _read_header(path: Path) -> Any:
    import pydicom

    try:
        ds = pydicom.dcmread(path, stop_before_pixels=True, force=True)
    except Exception as exc:  # pydicom raises several types for a bad file
        raise VolumeError(f"{path}: not a readable DICOM file ({exc})") from None
    if "Rows" not in ds or "Columns" not in ds:
        raise VolumeError(f"{path}: not a DICOM image (no Rows/Columns)")
    return ds


def _dicom_file(path: Path) -> _DicomFile:
    ds = _read_header(path)
    try:
        frames = int(ds.get("NumberOfFrames", 1) or 1)
    except (TypeError, ValueError):
        raise VolumeError(f"{path}: malformed Number of Frames") from None
    return _DicomFile(
        path=path,
        ds=ds,
        frames=frames,
        series_uid=str(ds.get("SeriesInstanceUID", "") or "").strip(),
        sop_uid=str(ds.get("SOPInstanceUID", "") or "").strip(),
    )


def _rescale(item: Any) -> tuple[float, float]:
    slope = item.get("RescaleSlope", 1.0)
    intercept = item.get("RescaleIntercept", 0.0)
    try:
        slope_f = float(slope if slope not in (None, "") else 1.0)
        intercept_f = float(intercept if intercept not in (None, "") else 0.0)
    except (TypeError, ValueError):
        raise ValueError("malformed Rescale Slope/Intercept") from None
    if not (math.isfinite(slope_f) and math.isfinite(intercept_f)) or slope_f == 0:
        raise ValueError(f"unusable Rescale Slope/Intercept ({slope_f}, {intercept_f})")
    return slope_f, intercept_f


def _pixel_spacing(item: Any, label: str) -> tuple[float, float] | None:
    if "PixelSpacing" not in item:
        return None
    values = _floats(item.PixelSpacing, 2, "Pixel Spacing", label)
    if (values <= 0).any():
        raise VolumeError(f"{label}: Pixel Spacing must be positive ({list(values)})")
    return float(values[0]), float(values[1])


def _single_slice(f: _DicomFile) -> SliceGeometry:
    ds, label = f.ds, str(f.path)
    try:
        slope, intercept = _rescale(ds)
    except ValueError as exc:
        raise VolumeError(f"{label}: {exc}") from None
    return SliceGeometry(
        label=label,
        path=f.path,
        frame=None,
        rows=int(ds.Rows),
        cols=int(ds.Columns),
        position=_floats(ds.ImagePositionPatient, 3, "Image Position (Patient)", label),
        orientation=_floats(ds.ImageOrientationPatient, 6, "Image Orientation (Patient)",
                            label),
        pixel_spacing=_pixel_spacing(ds, label),
        slope=slope,
        intercept=intercept,
    )


def _group(item: Any, sequence: str) -> Any:
    """The single item of a functional-group macro ``sequence`` in ``item``, or None."""
    if item is None or sequence not in item:
        return None
    seq = item.get(sequence)
    return seq[0] if seq else None


def multiframe_slices(path: Path, ds: Any) -> list[SliceGeometry]:
    """The geometry of each frame of an enhanced multi-frame dataset, in file order.

    Per-frame functional groups win over the shared ones, which win over top-level
    attributes: Plane Position (Patient), Plane Orientation (Patient), Pixel Measures and
    Pixel Value Transformation.

    Args:
        path: The file (for messages).
        ds: Its dataset, read with or without pixel data.

    Returns:
        One entry per frame.

    Raises:
        VolumeError: A frame has no position or orientation, or malformed values.
    """
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    per_frame = list(ds.get("PerFrameFunctionalGroupsSequence") or [])
    shared = ds.get("SharedFunctionalGroupsSequence")
    shared_item = shared[0] if shared else None
    if len(per_frame) not in (0, frames):
        raise VolumeError(
            f"{path}: {len(per_frame)} per-frame functional groups for {frames} frames"
        )
    out = []
    for index in range(frames):
        label = f"{path} frame {index + 1}"
        frame_item = per_frame[index] if per_frame else None

        def pick(sequence: str, frame_item: Any = frame_item) -> Any:
            found = _group(frame_item, sequence)
            return found if found is not None else _group(shared_item, sequence)

        position_item = pick("PlanePositionSequence")
        orientation_item = pick("PlaneOrientationSequence")
        measures = pick("PixelMeasuresSequence")
        transform = pick("PixelValueTransformationSequence")
        position = (position_item or ds).get("ImagePositionPatient")
        orientation = (orientation_item or ds).get("ImageOrientationPatient")
        if position is None or orientation is None or (frames > 1 and position_item is None):
            raise VolumeError(
                f"{label}: no Plane Position/Orientation (Patient) in the functional groups: "
                "the frames' places in the volume are unknown"
            )
        try:
            slope, intercept = _rescale(transform if transform is not None else ds)
        except ValueError as exc:
            raise VolumeError(f"{label}: {exc}") from None
        out.append(SliceGeometry(
            label=label,
            path=path,
            frame=index,
            rows=int(ds.Rows),
            cols=int(ds.Columns),
            position=_floats(position, 3, "Image Position (Patient)", label),
            orientation=_floats(orientation, 6, "Image Orientation (Patient)", label),
            pixel_spacing=_pixel_spacing(measures if measures is not None else ds, label),
            slope=slope,
            intercept=intercept,
        ))
    return out


@dataclass(frozen=True)
class StackGeometry:
    """Slices put in order along their normal, with the volume's affine.

    Attributes:
        order: Indices into the input list, in slice order (lowest position first).
        spacing: ``(z, y, x)`` in mm.
        affine: 4 x 4, ``(col, row, slice, 1)`` to LPS mm.
        warnings: Problems that leave viewing correct.
    """

    order: tuple[int, ...]
    spacing: tuple[float, float, float]
    affine: np.ndarray
    warnings: tuple[str, ...] = ()


def stack_geometry(slices: list[SliceGeometry], name: str) -> StackGeometry:
    """Order slices by position along the slice normal and check that they form a grid.

    Args:
        slices: Header facts of each slice (at least two).
        name: The folder or file, for messages about the whole stack.

    Returns:
        The order, spacing and affine.

    Raises:
        VolumeError: Fewer than two slices, inconsistent size, orientation or pixel spacing
            (naming the file), duplicate positions (naming both), missing slices or an
            irregular gap (naming the files on each side), or a slice off the stack's line.
    """
    if len(slices) < 2:
        raise VolumeError(f"{name}: a volume needs at least two slices")
    ref = slices[0]
    for s in slices[1:]:
        if (s.rows, s.cols) != (ref.rows, ref.cols):
            raise VolumeError(
                f"{s.label}: {s.cols} x {s.rows} pixels, but {ref.label} has "
                f"{ref.cols} x {ref.rows}: slices of one volume must have the same size"
            )
        if np.abs(s.orientation - ref.orientation).max() > ORIENTATION_TOLERANCE:
            raise VolumeError(
                f"{s.label}: Image Orientation (Patient) differs from {ref.label}'s: the "
                "slices are not parallel planes of one volume"
            )
        if (s.pixel_spacing is None) != (ref.pixel_spacing is None) or (
            s.pixel_spacing is not None and ref.pixel_spacing is not None and
            max(abs(a - b) / b for a, b in zip(s.pixel_spacing, ref.pixel_spacing,
                                               strict=True)) > PIXEL_SPACING_TOLERANCE
        ):
            raise VolumeError(
                f"{s.label}: Pixel Spacing {s.pixel_spacing} differs from {ref.label}'s "
                f"{ref.pixel_spacing}"
            )
    if ref.pixel_spacing is None:
        raise VolumeError(
            f"{ref.label}: no Pixel Spacing: the volume's proportions would be unknown"
        )
    row_dir, col_dir = ref.orientation[:3], ref.orientation[3:]
    if (abs(np.linalg.norm(row_dir) - 1) > 0.01 or abs(np.linalg.norm(col_dir) - 1) > 0.01
            or abs(float(row_dir @ col_dir)) > 0.01):
        raise VolumeError(
            f"{ref.label}: Image Orientation (Patient) is not two orthogonal unit vectors"
        )
    normal = np.cross(row_dir, col_dir)
    normal /= np.linalg.norm(normal)
    along = np.asarray([float(s.position @ normal) for s in slices])
    # Stable on ties (then by label), so that a duplicate is reported the same way each time.
    order = sorted(range(len(slices)), key=lambda i: (along[i], slices[i].label))
    positions = along[order]
    gaps = np.diff(positions)
    for n, gap in enumerate(gaps):
        if gap < DUPLICATE_TOLERANCE_MM:
            a, b = slices[order[n]], slices[order[n + 1]]
            raise VolumeError(
                f"{name}: {a.label} and {b.label} are at the same position "
                f"({positions[n]:.3f} mm along the slice normal): duplicate slices"
            )
    step = float(np.median(gaps))
    for n, gap in enumerate(gaps):
        if abs(gap - step) <= SPACING_TOLERANCE * step:
            continue
        a, b = slices[order[n]], slices[order[n + 1]]
        multiple = round(gap / step)
        if multiple >= 2 and abs(gap - multiple * step) <= SPACING_TOLERANCE * step:
            raise VolumeError(
                f"{name}: {multiple - 1} slice(s) missing between {a.label} and {b.label} "
                f"(gap {gap:.3f} mm, spacing {step:.3f} mm): the stack would show every "
                "later slice out of place"
            )
        raise VolumeError(
            f"{name}: inconsistent slice spacing between {a.label} and {b.label} "
            f"(gap {gap:.3f} mm, median {step:.3f} mm, tolerance {SPACING_TOLERANCE:.0%})"
        )
    # In-plane offset of each slice: constant for a straight stack, linear in k for a gantry
    # tilt. Medians (of the per-slice drift, then of the intercept) so that one stray slice
    # is the one named, not a neighbour pulled off by a least-squares fit.
    in_plane = np.asarray([slices[i].position - (slices[i].position @ normal) * normal
                           for i in order])
    drift = np.median(np.diff(in_plane, axis=0), axis=0)
    ks = np.arange(len(order))[:, None]
    base = np.median(in_plane - ks * drift, axis=0)
    off = np.linalg.norm(in_plane - base - ks * drift, axis=1)
    tolerance = max(SPACING_TOLERANCE * step, DUPLICATE_TOLERANCE_MM)
    worst = int(np.argmax(off))
    if off[worst] > tolerance:
        raise VolumeError(
            f"{name}: {slices[order[worst]].label} lies {off[worst]:.3f} mm off the line "
            "through the other slices' positions: not one stack"
        )
    first = slices[order[0]].position
    stack_step = drift + step * normal
    warnings = []
    tilt = math.acos(min(1.0, abs(float(stack_step @ normal)) / np.linalg.norm(stack_step)))
    if tilt > TILT_WARNING_RAD:
        warnings.append(
            f"{name}: slices are stacked {math.degrees(tilt):.2f} degrees off their normal "
            "(gantry tilt); the affine keeps positions exact, planes across slices are sheared"
        )
    row_spacing, col_spacing = ref.pixel_spacing
    affine = np.eye(4)
    affine[:3, 0] = row_dir * col_spacing
    affine[:3, 1] = col_dir * row_spacing
    affine[:3, 2] = stack_step
    affine[:3, 3] = first
    return StackGeometry(
        order=tuple(order),
        spacing=(step, row_spacing, col_spacing),
        affine=affine,
        warnings=tuple(warnings),
    )


def _windows(ds: Any) -> tuple[tuple[float, float], ...]:
    def values(v: Any) -> list[Any]:
        if v is None:
            return []
        return list(v) if type(v).__name__ == "MultiValue" or isinstance(v, list) else [v]

    out = []
    for c, w in zip(values(ds.get("WindowCenter")), values(ds.get("WindowWidth")),
                    strict=False):
        try:
            c_f, w_f = float(c), float(w)
        except (TypeError, ValueError):
            continue
        if w_f > 0 and math.isfinite(c_f) and math.isfinite(w_f):
            out.append((c_f, w_f))
    return tuple(out)


def _value_facts(ds: Any, rescale: list[tuple[float, float]]
                 ) -> tuple[bool, tuple[float, float] | None]:
    """Whether values are integral, and their bounds, from Bits Stored and the rescales."""
    if "ModalityLUTSequence" in ds:
        return False, None
    try:
        bits = int(ds.get("BitsStored", ds.get("BitsAllocated", 16)) or 16)
        signed = int(ds.get("PixelRepresentation", 0) or 0) == 1
    except (TypeError, ValueError):
        return False, None
    low_raw, high_raw = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    integral = all(float(s).is_integer() and float(i).is_integer() for s, i in rescale)
    lows, highs = [], []
    for slope, intercept in rescale:
        a, b = low_raw * slope + intercept, high_raw * slope + intercept
        lows.append(min(a, b))
        highs.append(max(a, b))
    return integral, (min(lows), max(highs))


def _modality_facts(ds: Any) -> tuple[str | None, bool]:
    modality = str(ds.get("Modality", "") or "").strip() or None
    rescale_type = str(ds.get("RescaleType", "") or "").strip().upper()
    return modality, modality == "CT" or rescale_type == "HU"


# --- Sources --------------------------------------------------------------------------------


@dataclass
class VolumeSource:
    """A volume whose headers are read and checked; pixels are decoded on iteration.

    Attributes:
        name: The file or folder.
        header: The checked header (within the limit, geometry consistent).
        files: DICOM series: the slice files in slice order; otherwise the one file.
    """

    name: str
    header: VolumeHeader
    files: tuple[Path, ...] = ()
    _frame_slot: tuple[int, ...] = field(default=(), repr=False)

    def iter_slices(self) -> Iterator[tuple[int, np.ndarray]]:
        """Decode the volume one slice at a time (one chunk at a time for NIfTI).

        Yields:
            ``(k, values)``: the slice index in volume order and its modality values (HU for
            CT) as a float64 ``(rows, cols)`` array. Slices of a multi-frame file come in
            file order, so ``k`` is not always increasing.

        Raises:
            VolumeError: A slice cannot be decoded or no longer matches its header.
        """
        kind = self.header.kind
        if kind == "series":
            yield from self._iter_series()
        elif kind == "multiframe":
            yield from self._iter_multiframe()
        else:
            yield from self._iter_nifti()

    def _check_frame(self, label: str, arr: np.ndarray) -> None:
        _, rows, cols = self.header.shape
        if arr.shape != (rows, cols):
            raise VolumeError(
                f"{label}: decoded pixels of shape {arr.shape}, header says {(rows, cols)}"
            )

    def _iter_series(self) -> Iterator[tuple[int, np.ndarray]]:
        import pydicom
        from pydicom.pixels import pixel_array

        for k, path in enumerate(self.files):
            try:
                ds = pydicom.dcmread(path, force=True)
            except Exception as exc:  # pydicom raises several types for a bad file
                raise VolumeError(f"{path}: not a readable DICOM file ({exc})") from None
            check_dicom_pixel_limit(str(path), ds)
            if (int(ds.Rows), int(ds.Columns)) != self.header.shape[1:]:
                raise VolumeError(f"{path}: Rows/Columns changed since its header was read")
            try:
                arr = pixel_array(ds)
            except Exception as exc:  # decoders raise many types; each means "cannot decode"
                raise VolumeError(f"{path}: cannot decode DICOM pixel data ({exc})") from None
            self._check_frame(str(path), arr)
            slope, intercept = self.header.rescale[k]
            if "ModalityLUTSequence" in ds:
                from pydicom.pixels import apply_modality_lut

                values = np.asarray(apply_modality_lut(arr, ds), dtype=np.float64)
            else:
                values = arr.astype(np.float64) * slope + intercept
            del ds, arr
            yield k, values

    def _iter_multiframe(self) -> Iterator[tuple[int, np.ndarray]]:
        from pydicom.pixels import iter_pixels

        path = self.files[0]
        try:
            for index, arr in enumerate(iter_pixels(path)):
                k = self._frame_slot[index]
                self._check_frame(f"{path} frame {index + 1}", arr)
                slope, intercept = self.header.rescale[k]
                yield k, arr.astype(np.float64) * slope + intercept
        except VolumeError:
            raise
        except Exception as exc:  # decoders raise many types; each means "cannot decode"
            raise VolumeError(f"{path}: cannot decode DICOM pixel data ({exc})") from None

    def _iter_nifti(self) -> Iterator[tuple[int, np.ndarray]]:
        import nibabel as nib
        from nibabel.openers import ImageOpener
        from nibabel.volumeutils import array_from_file

        path = self.files[0]
        img = nib.load(path)
        dtype = img.header.get_data_dtype()
        offset = int(img.dataobj.offset)
        slope, intercept = self.header.rescale[0]
        slices, rows, cols = self.header.shape
        per_slice = rows * cols
        chunk = max(1, NIFTI_CHUNK_BYTES // (per_slice * 8))
        # One opener read forwards: a gzip stream is decompressed once, not once per chunk.
        with ImageOpener(path) as fh:
            for k0 in range(0, slices, chunk):
                n = min(chunk, slices - k0)
                try:
                    raw = array_from_file((cols, rows, n), dtype, fh,
                                          offset + k0 * per_slice * dtype.itemsize,
                                          order="F", mmap=False)
                except Exception as exc:  # truncated or unreadable data
                    raise VolumeError(f"{path}: cannot read slices {k0}..{k0 + n - 1} "
                                      f"({exc})") from None
                for dk in range(n):
                    # NIfTI's (i, j, k) is (column, row, slice): transpose each slice.
                    yield k0 + dk, raw[:, :, dk].T.astype(np.float64) * slope + intercept
                del raw


def _list_folder(folder: Path) -> list[Path]:
    entries = []
    try:
        children = sorted(folder.iterdir())
    except OSError as exc:
        raise VolumeError(f"{folder}: cannot list the folder ({exc.strerror})") from None
    for child in children:
        if child.name.startswith(".") or child.name in IGNORED_NAMES:
            continue
        if child.is_dir():
            raise VolumeError(
                f"{folder}: holds a subfolder ({child.name}): an image folder holds files only"
            )
        entries.append(child)
        if len(entries) > MAX_SLICES:
            raise VolumeError(
                f"{folder}: more than {MAX_SLICES} files, over the limit of {MAX_SLICES} "
                f"slices of up to {MAX_SIDE} x {MAX_SIDE} pixels"
            )
    if not entries:
        raise VolumeError(f"{folder}: no image files in the folder")
    return entries


def is_nifti_name(path: Path) -> bool:
    """True when ``path`` is named like a NIfTI file (``.nii`` or ``.nii.gz``)."""
    name = path.name.lower()
    return any(name.endswith(suffix) for suffix in NIFTI_SUFFIXES)


@dataclass
class _FolderScan:
    films: list[Path]
    dicom: list[_DicomFile]
    multiframe: list[_DicomFile]
    series: dict[str, list[_DicomFile]]


def _scan_folder(folder: Path) -> _FolderScan:
    scan = _FolderScan(films=[], dicom=[], multiframe=[], series={})
    for path in _list_folder(folder):
        if is_nifti_name(path):
            raise VolumeError(f"{path}: a NIfTI file inside an image folder is ambiguous; "
                              "give its path as the case's image instead")
        fmt = sniff_format(path)
        if fmt in ("png", "jpeg"):
            scan.films.append(path)
            continue
        if fmt != "dicom":
            raise VolumeError(f"{path}: not a DICOM, PNG, JPEG or NIfTI file")
        f = _dicom_file(path)
        scan.dicom.append(f)
        if f.frames > 1:
            scan.multiframe.append(f)
        elif f.has_geometry:
            scan.series.setdefault(f.series_uid, []).append(f)
        else:
            scan.films.append(path)
    return scan


def _folder_kind(folder: Path, scan: _FolderScan) -> str:
    total = len(scan.films) + len(scan.multiframe) + sum(len(v) for v in scan.series.values())
    if scan.multiframe:
        if total == 1:
            return "multiframe"
        raise VolumeError(
            f"{folder}: a multi-frame file ({scan.multiframe[0].path.name}) beside "
            f"{total - 1} other file(s): ambiguous, give the multi-frame file alone"
        )
    volumes = {uid: files for uid, files in scan.series.items() if len(files) >= 2}
    if len(volumes) > 1:
        parts = [f"{len(files)} slices like {files[0].path.name}"
                 for files in sorted(volumes.values(), key=lambda v: v[0].path.name)]
        raise VolumeError(
            f"{folder}: slices of {len(volumes)} series ({'; '.join(parts)}): ambiguous, "
            "put each series in its own folder"
        )
    if volumes:
        (uid, files), = volumes.items()
        others = [p.name for p in scan.films] + [
            f.path.name for u, fs in scan.series.items() if u != uid for f in fs
        ]
        if others:
            raise VolumeError(
                f"{folder}: a series of {len(files)} slices beside {len(others)} other "
                f"image(s) ({', '.join(sorted(others)[:3])}): 2-D films and a series in one "
                "folder are ambiguous, put the series in its own folder"
            )
        if not uid:
            raise VolumeError(f"{folder}: slices without a Series Instance UID")
        return "series"
    return "film"


def classify_entry(path: str | Path) -> str:
    """Tell what a case's image entry is (see the module docstring for the rules).

    Only headers are read (DICOM with ``stop_before_pixels``).

    Args:
        path: A file or a folder.

    Returns:
        ``"film"``, ``"series"``, ``"multiframe"`` or ``"nifti"``.

    Raises:
        VolumeError: Missing, unreadable, or an ambiguous folder (the reason is given).
    """
    path = Path(path)
    if path.is_dir():
        return _folder_kind(path, _scan_folder(path))
    if not path.is_file():
        raise VolumeError(f"{path}: no such file or folder")
    if is_nifti_name(path):
        return "nifti"
    fmt = sniff_format(path)
    if fmt in ("png", "jpeg"):
        return "film"
    if fmt != "dicom":
        raise VolumeError(f"{path}: not a DICOM, PNG, JPEG or NIfTI file")
    return "multiframe" if _dicom_file(path).frames > 1 else "film"


def may_hold_series(folder: str | Path) -> bool:
    """Whether a folder's own files look like a DICOM series, from header facts only.

    True when, among the files directly in ``folder`` (hidden ones skipped), two
    single-frame DICOM files carry Image Position and Image Orientation (Patient) and share a
    Series Instance UID (a multi-frame file is a volume on its own, see
    :func:`classify_entry`). Unreadable and non-DICOM
    files are passed over, never refused: this only says whether :func:`classify_entry`
    (which refuses what it cannot place) should look at the folder. A folder of 2-D films
    (PNG, JPEG, DICOM without a slice position) says False, so it keeps behaving as films.

    Args:
        folder: The folder.

    Returns:
        Whether the folder should be classified as a possible series.
    """
    folder = Path(folder)
    try:
        children = sorted(p for p in folder.iterdir()
                          if p.is_file() and not p.name.startswith(".")
                          and p.name not in IGNORED_NAMES)
    except OSError:
        return False
    seen: Counter[str] = Counter()
    for path in children[:MAX_SLICES + 1]:
        if is_nifti_name(path) or sniff_format(path) != "dicom":
            continue
        try:
            f = _dicom_file(path)
        except VolumeError:
            continue
        if f.frames == 1 and f.has_geometry:
            seen[f.series_uid] += 1
            if seen[f.series_uid] >= 2:
                return True
    return False


def _series_source(folder: Path, files: list[_DicomFile]) -> VolumeSource:
    slices = [_single_slice(f) for f in files]
    sops = Counter(f.sop_uid for f in files if f.sop_uid)
    for f in files:
        if sops.get(f.sop_uid, 0) > 1:
            twin = next(g for g in files if g.sop_uid == f.sop_uid and g is not f)
            raise VolumeError(
                f"{folder}: {f.path} and {twin.path} have the same SOP Instance UID: "
                "duplicate slices"
            )
    for f in files:
        if int(f.ds.get("SamplesPerPixel", 1) or 1) != 1:
            raise VolumeError(f"{f.path}: colour slices are not supported in a volume")
    header_slices = len(slices)
    rows, cols = slices[0].rows, slices[0].cols
    pre = VolumeHeader(kind="series", shape=(header_slices, rows, cols), spacing=(1, 1, 1),
                       affine=tuple(tuple(r) for r in np.eye(4)))
    check_volume_limit(pre, str(folder))
    geometry = stack_geometry(slices, str(folder))
    ordered = [files[i] for i in geometry.order]
    rescale = [(slices[i].slope, slices[i].intercept) for i in geometry.order]
    ref = ordered[0].ds
    # Each slice's own Bits Stored, sign and rescale: one 16-bit slice among 12-bit ones
    # widens the bounds of the whole volume.
    facts = [_value_facts(f.ds, [pair]) for f, pair in zip(ordered, rescale, strict=True)]
    integral = all(fact[0] for fact in facts)
    known = [fact[1] for fact in facts if fact[1] is not None]
    bounds = (min(b[0] for b in known), max(b[1] for b in known)) \
        if len(known) == len(facts) else None
    modality, hounsfield = _modality_facts(ref)
    header = VolumeHeader(
        kind="series",
        shape=(len(ordered), rows, cols),
        spacing=geometry.spacing,
        affine=tuple(tuple(float(v) for v in r) for r in geometry.affine),
        modality=modality,
        hounsfield=hounsfield,
        rescale=tuple(rescale),
        integral=integral,
        value_bounds=bounds,
        windows=_windows(ref),
        warnings=geometry.warnings,
    )
    check_volume_limit(header, str(folder))
    return VolumeSource(name=str(folder), header=header,
                        files=tuple(f.path for f in ordered))


def _multiframe_source(f: _DicomFile) -> VolumeSource:
    ds, name = f.ds, str(f.path)
    pre = VolumeHeader(kind="multiframe", shape=(f.frames, int(ds.Rows), int(ds.Columns)),
                       spacing=(1, 1, 1), affine=tuple(tuple(r) for r in np.eye(4)))
    check_volume_limit(pre, name)
    if int(ds.get("SamplesPerPixel", 1) or 1) != 1:
        raise VolumeError(f"{name}: colour frames are not supported in a volume")
    slices = multiframe_slices(f.path, ds)
    geometry = stack_geometry(slices, name)
    slot = [0] * len(slices)
    for k, index in enumerate(geometry.order):
        slot[index] = k
    rescale = [(slices[i].slope, slices[i].intercept) for i in geometry.order]
    integral, bounds = _value_facts(ds, rescale)
    modality, hounsfield = _modality_facts(ds)
    shared = ds.get("SharedFunctionalGroupsSequence")
    transform = _group(shared[0] if shared else None, "PixelValueTransformationSequence")
    if transform is not None and str(transform.get("RescaleType", "")).upper() == "HU":
        hounsfield = True
    voi = _group(shared[0] if shared else None, "FrameVOILUTSequence")
    header = VolumeHeader(
        kind="multiframe",
        shape=(len(slices), int(ds.Rows), int(ds.Columns)),
        spacing=geometry.spacing,
        affine=tuple(tuple(float(v) for v in r) for r in geometry.affine),
        modality=modality,
        hounsfield=hounsfield,
        rescale=tuple(rescale),
        integral=integral,
        value_bounds=bounds,
        windows=_windows(voi if voi is not None else ds),
        warnings=geometry.warnings,
    )
    return VolumeSource(name=name, header=header, files=(f.path,), _frame_slot=tuple(slot))


def _nifti_source(path: Path, modality: str | None) -> VolumeSource:
    import nibabel as nib

    try:
        img = nib.load(path)
    except Exception as exc:  # nibabel raises several types for a bad file
        raise VolumeError(f"{path}: not a readable NIfTI file ({exc})") from None
    if not isinstance(img, (nib.Nifti1Image, nib.Nifti2Image)):
        raise VolumeError(f"{path}: not a single-file NIfTI image")
    hdr = img.header
    shape = tuple(int(v) for v in img.shape)
    if len(shape) == 4 and shape[3] == 1:
        shape = shape[:3]
    if len(shape) != 3:
        raise VolumeError(
            f"{path}: NIfTI of shape {shape}: only 3-D volumes (one time point) are supported"
        )
    nx, ny, nz = shape
    pre = VolumeHeader(kind="nifti", shape=(nz, ny, nx), spacing=(1, 1, 1),
                       affine=tuple(tuple(r) for r in np.eye(4)))
    check_volume_limit(pre, str(path))
    dtype = hdr.get_data_dtype()
    if dtype.kind not in "uif" or dtype.fields is not None:
        raise VolumeError(f"{path}: NIfTI data type {dtype} is not a grey-scale volume")
    # nibabel moves the scaling from a loaded image's header (reset to NaN) to its dataobj.
    slope, intercept = float(img.dataobj.slope), float(img.dataobj.inter)
    if not (math.isfinite(slope) and math.isfinite(intercept)) or slope == 0:
        raise VolumeError(f"{path}: unusable scl_slope/scl_inter ({slope}, {intercept})")
    zooms = [float(z) for z in hdr.get_zooms()[:3]]
    if not all(math.isfinite(z) and z > 0 for z in zooms):
        raise VolumeError(f"{path}: voxel sizes {zooms} must be positive")
    warnings = []
    if int(hdr["sform_code"]) == 0 and int(hdr["qform_code"]) == 0:
        warnings.append(f"{path}: neither sform nor qform is set; orientation is unknown, "
                        "the affine holds the voxel sizes only")
    affine = _LPS_FROM_RAS @ np.asarray(img.affine, dtype=np.float64)
    if abs(np.linalg.det(affine[:3, :3])) < 1e-9 or not np.isfinite(affine).all():
        raise VolumeError(f"{path}: the NIfTI affine is degenerate")
    integral = dtype.kind in "ui" and slope.is_integer() and intercept.is_integer()
    bounds = None
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        a, b = info.min * slope + intercept, info.max * slope + intercept
        bounds = (float(min(a, b)), float(max(a, b)))
    windows = ()
    cal_min, cal_max = float(hdr["cal_min"]), float(hdr["cal_max"])
    if math.isfinite(cal_min) and math.isfinite(cal_max) and cal_max > cal_min:
        windows = (((cal_min + cal_max) / 2, cal_max - cal_min),)
    modality = modality or None
    header = VolumeHeader(
        kind="nifti",
        shape=(nz, ny, nx),
        spacing=(zooms[2], zooms[1], zooms[0]),
        affine=tuple(tuple(float(v) for v in r) for r in affine),
        modality=modality,
        hounsfield=modality == "CT",
        rescale=((slope, intercept),) * nz,
        integral=integral,
        value_bounds=bounds,
        windows=windows,
        warnings=tuple(warnings),
    )
    return VolumeSource(name=str(path), header=header, files=(path,))


def open_volume(path: str | Path, *, modality: str | None = None) -> VolumeSource:
    """Read and check a volume's headers; no pixel is decoded.

    Args:
        path: A series folder, a multi-frame DICOM file (or a folder holding only it) or a
            NIfTI file.
        modality: For NIfTI, which has no modality field: the modality the case states
            (``"CT"`` marks the values as HU). Ignored for DICOM.

    Returns:
        The source, whose header is within the limit and whose geometry is consistent.

    Raises:
        VolumeError: The entry is a film, ambiguous, over the limit, or its geometry is
            refused (see the module docstring); the message names the file(s).
    """
    path = Path(path)
    if path.is_dir():
        scan = _scan_folder(path)
        kind = _folder_kind(path, scan)
        if kind == "series":
            (files,) = [fs for fs in scan.series.values() if len(fs) >= 2]
            return _series_source(path, files)
        if kind == "multiframe":
            return _multiframe_source(scan.multiframe[0])
        raise VolumeError(f"{path}: holds 2-D films, not a volume")
    if not path.is_file():
        raise VolumeError(f"{path}: no such file or folder")
    if is_nifti_name(path):
        return _nifti_source(path, modality)
    if sniff_format(path) != "dicom":
        raise VolumeError(f"{path}: not a DICOM or NIfTI volume")
    f = _dicom_file(path)
    if f.frames <= 1:
        raise VolumeError(f"{path}: a single-frame DICOM file is a film, not a volume")
    return _multiframe_source(f)
