"""Store a volume so that one slice or one reformatted plane is served without decoding it all.

Layout of a store folder:

- ``volume.npy``: the values (HU for CT) as a little-endian NumPy array of shape
  ``(slices, rows, cols)`` in C order, ``int16`` when every value is an integer in
  -32768..32767, else ``float32``. It is read back with ``numpy.load(mmap_mode="r")``: a
  request touches only the pages of the plane it asks for.
- ``volume.json``: the header: format and version, shape, dtype, spacing ``(z, y, x)`` mm,
  the affine (``(col, row, slice, 1)`` to LPS mm), modality, whether the values are HU, the
  value range and window hints (CT presets, the header's window, and ``auto``: the 0.5th to
  99.5th percentile of a strided sample). No identifier, UID or file name is written.

Import (:meth:`VolumeStore.write`) streams: the source yields one decoded slice (one NIfTI
chunk) at a time, each is converted and written at its offset with ordinary file writes
(no memory map while writing: dirty mapped pages would count against the process's memory as
the file grows), so the import holds one slice, one chunk and a small sample at once. The
int16 decision: tried when the header says the values are integers (integral rescale, integer
raw data) or may be (float NIfTI data); the first slice with a fraction or out of int16's
range restarts the import as float32 (one more pass over the source, never more). The folder
is filled under a temporary name and renamed into place, so a crash never leaves a
half-written store under the final name.

Planes (:class:`Plane`) are named by the array's axes: ``axial(k)`` is slice ``k`` (rows x
cols), ``coronal(j)`` is row ``j`` across all slices (slices x cols), ``sagittal(i)`` is
column ``i`` across all slices (slices x rows); for an axial acquisition these are the
anatomical planes. Coronal and sagittal planes put the last slice (highest position along the
slice normal: the head end of an axial series) in their first row, so head is up. Each plane
comes with its pixel spacing ``(between rows, between columns)`` in mm so that a viewer can
draw anisotropic volumes unsquashed.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from radconcord.backend.imaging.volume import (
    CT_WINDOW_HINTS,
    VolumeError,
    VolumeSource,
    check_volume_limit,
)
from radconcord.backend.util import staging_dir

DATA_FILE = "volume.npy"
META_FILE = "volume.json"
FORMAT = "radconcord-volume"
VERSION = 1
# Every slice contributes pixels on this grid step to the sample of the auto window.
SAMPLE_STEP = 16
AUTO_PERCENTILES = (0.5, 99.5)


class Plane(NamedTuple):
    """One 2-D plane of a stored volume.

    Attributes:
        pixels: The values (a copy the caller owns), 2-D.
        spacing: ``(between rows, between columns)`` in mm.
    """

    pixels: np.ndarray
    spacing: tuple[float, float]


class _NeedsFloat(Exception):
    """A slice cannot be stored exactly as int16."""


def _int16_candidate(source: VolumeSource) -> bool:
    header = source.header
    if header.integral:
        return True
    # Float NIfTI data may still hold integers (HU written as float32); a slice says.
    return header.kind == "nifti" and header.value_bounds is None and all(
        float(s).is_integer() and float(i).is_integer() for s, i in header.rescale[:1]
    )


def _stream(source: VolumeSource, data_path: Path, dtype: np.dtype,
            check_int: bool) -> dict[str, Any]:
    """Write every slice of ``source`` to ``data_path``; returns the value statistics."""
    slices, rows, cols = source.header.shape
    slice_bytes = rows * cols * dtype.itemsize
    written = np.zeros(slices, dtype=bool)
    low, high = math.inf, -math.inf
    sample = []
    with open(data_path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {
            "descr": np.lib.format.dtype_to_descr(dtype),
            "fortran_order": False,
            "shape": (slices, rows, cols),
        })
        offset = fh.tell()
        fh.truncate(offset + slices * slice_bytes)
        for k, values in source.iter_slices():
            if not 0 <= k < slices or written[k]:
                raise VolumeError(f"{source.name}: slice {k} delivered twice or out of range")
            if dtype.kind == "i" and values.size and (
                # The range always: Bits Stored is a claim, decoders do not mask to it.
                values.min() < -32768 or values.max() > 32767
                or (check_int and not np.array_equal(np.rint(values), values))
            ):
                raise _NeedsFloat
            out = values.astype(dtype)
            if not np.isfinite(out).all():
                raise VolumeError(f"{source.name}: slice {k} holds values that are not finite")
            low, high = min(low, float(out.min())), max(high, float(out.max()))
            sample.append(out[::SAMPLE_STEP, ::SAMPLE_STEP].astype(np.float32).ravel())
            fh.seek(offset + k * slice_bytes)
            fh.write(np.ascontiguousarray(out, dtype=dtype.newbyteorder("<")).data)
            written[k] = True
            del values, out
        if not written.all():
            missing = int(np.flatnonzero(~written)[0])
            raise VolumeError(f"{source.name}: slice {missing} was never delivered")
        fh.flush()
        os.fsync(fh.fileno())
    values = np.concatenate(sample)
    p_low, p_high = np.percentile(values, AUTO_PERCENTILES)
    return {"min": low, "max": high, "auto": (float(p_low), float(p_high))}


def _window_hints(source: VolumeSource, stats: dict[str, Any]) -> dict[str, list[float]]:
    header = source.header
    hints: dict[str, list[float]] = {}
    if header.hounsfield:
        hints.update({name: [c, w] for name, (c, w) in CT_WINDOW_HINTS.items()})
    if header.windows:
        hints["header"] = list(header.windows[0])
    low, high = stats["auto"]
    if high <= low:
        low, high = stats["min"], max(stats["max"], stats["min"] + 1.0)
    hints["auto"] = [(low + high) / 2, high - low]
    return hints


class VolumeStore:
    """A stored volume, memory-mapped for reading.

    Attributes:
        path: The store folder.
        meta: The parsed ``volume.json``.
        data: The values, memory-mapped read-only, shape ``(slices, rows, cols)``.
    """

    def __init__(self, path: Path, meta: dict[str, Any], data: np.ndarray) -> None:
        self.path = path
        self.meta = meta
        self.data = data

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(slices, rows, cols)``."""
        return tuple(int(v) for v in self.meta["shape"])  # type: ignore[return-value]

    @property
    def spacing(self) -> tuple[float, float, float]:
        """``(z, y, x)`` in mm."""
        return tuple(float(v) for v in self.meta["spacing"])  # type: ignore[return-value]

    @property
    def affine(self) -> np.ndarray:
        """4 x 4, ``(col, row, slice, 1)`` to LPS mm."""
        return np.asarray(self.meta["affine"], dtype=np.float64)

    @property
    def dtype(self) -> np.dtype:
        """``int16`` or ``float32``."""
        return self.data.dtype

    @classmethod
    def write(cls, source: VolumeSource, dest_dir: str | os.PathLike[str]) -> VolumeStore:
        """Import ``source`` into a new store folder, one slice (or NIfTI chunk) at a time.

        Args:
            source: A checked volume from :func:`backend.imaging.volume.open_volume`.
            dest_dir: The store folder to create; it must not exist (or be empty).

        Returns:
            The store, opened.

        Raises:
            VolumeError: Over the limit, a slice cannot be decoded, or values not finite.
            FileExistsError: ``dest_dir`` exists and is not empty.
        """
        header = source.header
        check_volume_limit(header, source.name)
        dest = Path(dest_dir)
        if dest.exists() and any(dest.iterdir()):
            raise FileExistsError(f"{dest}: the store folder exists and is not empty")
        with staging_dir(dest.parent, f".{dest.name}.") as tmp:
            data_path = tmp / DATA_FILE
            stats = None
            if _int16_candidate(source):
                try:
                    stats = _stream(source, data_path, np.dtype("<i2"),
                                    check_int=not header.integral)
                    dtype = "int16"
                except _NeedsFloat:
                    stats = None
            if stats is None:
                stats = _stream(source, data_path, np.dtype("<f4"), check_int=False)
                dtype = "float32"
            meta = {
                "format": FORMAT,
                "version": VERSION,
                "data": DATA_FILE,
                "kind": header.kind,
                "shape": list(header.shape),
                "dtype": dtype,
                "spacing": list(header.spacing),
                "affine": [list(row) for row in header.affine],
                "affine_space": "LPS",
                "modality": header.modality,
                "hounsfield": header.hounsfield,
                "value_range": [stats["min"], stats["max"]],
                "windows": _window_hints(source, stats),
            }
            (tmp / META_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
            if dest.exists():
                dest.rmdir()
            os.replace(tmp, dest)
        return cls.open(dest)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> VolumeStore:
        """Open a store folder written by :meth:`write`.

        Args:
            path: The store folder.

        Returns:
            The store; its values are memory-mapped, nothing is decoded.

        Raises:
            VolumeError: Missing or malformed files, or data that disagrees with the header.
        """
        folder = Path(path)
        try:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            data = np.load(folder / DATA_FILE, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise VolumeError(f"{folder}: not a readable volume store ({exc})") from None
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise VolumeError(f"{folder}: not a volume store of version {VERSION}")
        if list(data.shape) != list(meta["shape"]) or data.dtype.name != meta["dtype"]:
            raise VolumeError(f"{folder}: {DATA_FILE} disagrees with {META_FILE}")
        return cls(folder, meta, data)

    def _index(self, value: int, axis: int, what: str) -> int:
        size = self.shape[axis]
        index = int(value)
        if not 0 <= index < size:
            raise IndexError(f"{what} {value} is outside 0..{size - 1}")
        return index

    def axial(self, k: int) -> Plane:
        """Slice ``k``: ``(rows, cols)``, spacing ``(y, x)``."""
        k = self._index(k, 0, "slice")
        z, y, x = self.spacing
        return Plane(np.array(self.data[k]), (y, x))

    def coronal(self, j: int) -> Plane:
        """Row ``j`` across the slices: ``(slices, cols)``, last slice first.

        The spacing is ``(z, x)``.
        """
        j = self._index(j, 1, "row")
        z, y, x = self.spacing
        return Plane(np.array(self.data[::-1, j, :]), (z, x))

    def sagittal(self, i: int) -> Plane:
        """Column ``i`` across the slices: ``(slices, rows)``, last slice first.

        The spacing is ``(z, y)``.
        """
        i = self._index(i, 2, "column")
        z, y, x = self.spacing
        return Plane(np.array(self.data[::-1, :, i]), (z, y))

    def hu_at(self, z: int, y: int, x: int) -> float:
        """The stored value (HU for CT) at slice ``z``, row ``y``, column ``x``."""
        k = self._index(z, 0, "slice")
        j = self._index(y, 1, "row")
        i = self._index(x, 2, "column")
        return float(self.data[k, j, i])

    def write_nifti(self, dest: str | os.PathLike[str]) -> Path:
        """Write the values as a NIfTI-1 file (``.nii``, or gzip ``.nii.gz``), slice by slice.

        The file holds the stored values (HU for CT) with ``scl_slope`` 1 and ``scl_inter`` 0,
        the voxel sizes in mm and the affine (converted to RAS) as sform and qform (code 1,
        scanner), and no text: what :func:`backend.imaging.volume.open_volume` reads back to
        the same values, spacing and affine (an export that imports again). It is written
        under a temporary name and renamed into place; a gzip header carries no file name.

        Args:
            dest: The file to write (``*.nii`` or ``*.nii.gz``).

        Returns:
            ``dest`` as a path.
        """
        import gzip

        import nibabel as nib

        dest = Path(dest)
        slices, rows, cols = self.shape
        dtype = np.dtype("<i2") if self.dtype.kind == "i" else np.dtype("<f4")
        header = nib.Nifti1Header()
        header.set_data_shape((cols, rows, slices))
        header.set_data_dtype(dtype)
        z, y, x = self.spacing
        header.set_zooms((x, y, z))
        header.set_xyzt_units("mm")
        ras = np.diag([-1.0, -1.0, 1.0, 1.0]) @ self.affine
        header.set_sform(ras, code=1)
        header.set_qform(ras, code=1)
        header.set_slope_inter(1.0, 0.0)
        header["vox_offset"] = header.single_vox_offset
        tmp = dest.with_name(f".{dest.name}.tmp")
        try:
            with open(tmp, "wb") as raw:
                out: Any = (gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
                            if dest.name.lower().endswith(".gz") else raw)
                header.write_to(out)
                # NIfTI's (i, j, k) with i fastest is the store's C order: slice after slice.
                for k in range(slices):
                    out.write(np.ascontiguousarray(self.data[k], dtype=dtype).tobytes())
                if out is not raw:
                    out.close()
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return dest

    def position_mm(self, z: int, y: int, x: int) -> tuple[float, float, float]:
        """The LPS position in mm of the voxel at slice ``z``, row ``y``, column ``x``."""
        point = self.affine @ np.asarray([x, y, z, 1.0])
        return float(point[0]), float(point[1]), float(point[2])
