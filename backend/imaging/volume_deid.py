"""De-identify volumes: every slice of a DICOM series, a multi-frame file, a NIfTI file.

DICOM (:func:`deidentify_series`, :func:`deidentify_multiframe`): each slice goes through
:func:`backend.imaging.deid.deidentify`, the same allow-list as a film, with **one**
:class:`~backend.imaging.deid.UidMapper` for the whole series, so Study, Series and Frame of
Reference UIDs map to one new UID each and every SOP Instance UID to its own. Private tags and
every sequence not in the allow-list are dropped in every slice. The allow-list keeps no slice
geometry (a film needs none), so the geometry the volume needs is put back from validated
numbers only: Image Position and Orientation (Patient), Slice Thickness and Spacing Between
Slices; for a multi-frame file the functional groups are rebuilt holding only Plane Position,
Plane Orientation, Pixel Measures and Pixel Value Transformation, each value a finite number.
Slices are written in slice order as ``0001.dcm``, ``0002.dcm``...: file names can carry
identifiers and are not kept. The series is checked (:func:`backend.imaging.volume.open_volume`)
before any slice is written, and slices are read, de-identified and written one at a time.

NIfTI (:func:`deidentify_nifti`): the header is rebuilt from an allow-list (data type, shape,
voxel sizes and units, qform and sform with their codes, scl_slope/scl_inter, cal_min/cal_max,
dim_info), so every text field (``descrip``, ``aux_file``, ``intent_name``, ``db_name``,
``data_type``) is empty and unused numeric fields are zero; header extensions are dropped, and
so are the bytes between the header and the data and after the data. The voxel data is copied
byte for byte in chunks (memory bounded). A ``.nii.gz`` output is written with an empty file
name and a zero time in its gzip header, since gzip stores the original file's name.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pydicom
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence
from pydicom.valuerep import format_number_as_ds

from radconcord.backend.imaging.deid import (
    DeidentificationError,
    DeidReport,
    UidMapper,
    deidentify,
)
from radconcord.backend.imaging.volume import (
    NIFTI_CHUNK_BYTES,
    VolumeError,
    is_nifti_name,
    multiframe_slices,
    open_volume,
)
from radconcord.backend.util import staging_dir

# Geometry of a single-frame slice put back after the allow-list: (keyword, values).
SLICE_GEOMETRY = (("ImagePositionPatient", 3), ("ImageOrientationPatient", 6),
                  ("SliceThickness", 1), ("SpacingBetweenSlices", 1))
_DECIMAL = re.compile(r" *[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)? *")


@dataclass
class SeriesDeidResult:
    """What :func:`deidentify_series` wrote.

    Attributes:
        files: The de-identified slices, in slice order.
        reports: One report per slice, in the same order.
        mapper: The UID mapper used (persist it only where PHI may be stored).
        warnings: Geometry warnings of the series and burned-in annotation warnings.
    """

    files: list[Path] = field(default_factory=list)
    reports: list[DeidReport] = field(default_factory=list)
    mapper: UidMapper | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class NiftiDeidReport:
    """What :func:`deidentify_nifti` changed.

    Attributes:
        cleared_fields: Header text fields that held text and were cleared.
        extensions_removed: Header extensions dropped.
        extra_bytes_removed: Bytes between the header and the data and after the data.
    """

    cleared_fields: list[str] = field(default_factory=list)
    extensions_removed: int = 0
    extra_bytes_removed: int = 0


def _numbers(ds: Dataset | None, keyword: str, count: int) -> list[float] | None:
    """The finite numbers of a decimal-string attribute, or None when absent or malformed."""
    if ds is None or keyword not in ds:
        return None
    value = ds[keyword].value
    values = list(value) if isinstance(value, (list, tuple)) or \
        type(value).__name__ == "MultiValue" else [value]
    if len(values) != count:
        return None
    out = []
    for v in values:
        text = str(v)
        if not _DECIMAL.fullmatch(text) or not math.isfinite(float(text)):
            return None
        out.append(float(text))
    return out


def _ds_values(values: list[float]) -> list[str] | str:
    formatted = [format_number_as_ds(float(v)) for v in values]
    return formatted if len(formatted) > 1 else formatted[0]


def _write(ds: Dataset, path: Path, label: str) -> None:
    try:
        ds.save_as(path, enforce_file_format=True)
    except Exception as exc:  # e.g. a value pydicom cannot encode
        raise DeidentificationError(f"{label}: cannot write de-identified DICOM ({exc})") from exc


def _publish(tmp: Path, dest: Path) -> None:
    if dest.exists():
        if any(dest.iterdir()):
            raise FileExistsError(f"{dest}: the output folder exists and is not empty")
        dest.rmdir()
    os.replace(tmp, dest)


def deidentify_series(
    folder: str | Path,
    dest_dir: str | Path,
    *,
    mapper: UidMapper | None = None,
    patient_pseudonym: str | None = None,
) -> SeriesDeidResult:
    """De-identify every slice of a series folder into ``dest_dir``, one slice at a time.

    Args:
        folder: The series folder (checked as a volume first: one series, consistent
            geometry, within the limit).
        dest_dir: Output folder to create (must not exist or be empty); filled under a
            temporary name and renamed into place.
        mapper: The import's UID mapper (a new one with a random salt when None).
        patient_pseudonym: See :func:`backend.imaging.deid.deidentify`.

    Returns:
        The written files in slice order and a report per slice.

    Raises:
        VolumeError: The folder is not a valid series (the message names the file).
        DeidentificationError: A slice cannot be read, de-identified or written, or two
            slices share a SOP Instance UID; the message names the file.
        FileExistsError: ``dest_dir`` exists and is not empty.
    """
    source = open_volume(folder)
    if source.header.kind != "series":
        raise VolumeError(f"{folder}: not a series folder")
    mapper = mapper or UidMapper()
    result = SeriesDeidResult(mapper=mapper, warnings=list(source.header.warnings))
    dest = Path(dest_dir)
    seen: dict[str, Path] = {}
    width = max(4, len(str(len(source.files))))
    with staging_dir(dest.parent, f".{dest.name}.") as tmp:
        for k, path in enumerate(source.files):
            try:
                ds = pydicom.dcmread(path, force=True)
            except Exception as exc:  # pydicom raises several types for a bad file
                raise DeidentificationError(f"{path}: not a readable DICOM file ({exc})") from None
            sop = str(ds.get("SOPInstanceUID", "") or "").strip()
            if not sop:
                raise DeidentificationError(f"{path}: no SOP Instance UID")
            if sop in seen:
                raise DeidentificationError(
                    f"{path} and {seen[sop]} have the same SOP Instance UID: duplicate slices"
                )
            seen[sop] = path
            geometry = {kw: _numbers(ds, kw, n) for kw, n in SLICE_GEOMETRY}
            try:
                report = deidentify(ds, mapper, patient_pseudonym=patient_pseudonym)
            except DeidentificationError as exc:
                raise DeidentificationError(f"{path}: {exc}") from None
            for keyword, values in geometry.items():
                if values is not None:
                    setattr(ds, keyword, _ds_values(values))
            out = tmp / f"{k + 1:0{width}d}.dcm"
            _write(ds, out, str(path))
            result.reports.append(report)
            result.files.append(dest / out.name)
            result.warnings.extend(f"{out.name}: {w}" for w in report.warnings)
            del ds
        _publish(tmp, dest)
    return result


def _macro(sequence: str, keyword_values: dict[str, list[float] | None]) -> Dataset | None:
    item = Dataset()
    for keyword, values in keyword_values.items():
        if values is not None:
            setattr(item, keyword, _ds_values(values))
    if not len(item):
        return None
    outer = Dataset()
    setattr(outer, sequence, Sequence([item]))
    return outer


def _group_item(item: Dataset | None, sequence: str) -> Dataset | None:
    if item is None or sequence not in item or not item.get(sequence):
        return None
    return item.get(sequence)[0]


def deidentify_multiframe(
    src: str | Path,
    dest: str | Path,
    *,
    mapper: UidMapper | None = None,
    patient_pseudonym: str | None = None,
) -> DeidReport:
    """De-identify a multi-frame (enhanced) DICOM file, keeping its per-frame geometry.

    The whole file is decoded at once by :func:`backend.imaging.deid.deidentify` (its
    pixel data is re-encoded as one element), so memory is about twice the decoded volume.

    Args:
        src: The multi-frame file (checked as a volume first).
        dest: The output file (written whole, then renamed into place).
        mapper: The import's UID mapper (a new one when None).
        patient_pseudonym: See :func:`backend.imaging.deid.deidentify`.

    Returns:
        The de-identification report.

    Raises:
        VolumeError: Not a valid multi-frame volume.
        DeidentificationError: The file cannot be read, de-identified or written.
    """
    src, dest = Path(src), Path(dest)
    source = open_volume(src)
    if source.header.kind != "multiframe":
        raise VolumeError(f"{src}: not a multi-frame DICOM file")
    mapper = mapper or UidMapper()
    try:
        ds = pydicom.dcmread(src, force=True)
    except Exception as exc:  # pydicom raises several types for a bad file
        raise DeidentificationError(f"{src}: not a readable DICOM file ({exc})") from None
    frames = multiframe_slices(src, ds)
    shared_in = ds.get("SharedFunctionalGroupsSequence")
    shared_in = shared_in[0] if shared_in else None
    per_frame_in = list(ds.get("PerFrameFunctionalGroupsSequence") or [])
    thickness = _numbers(_group_item(shared_in, "PixelMeasuresSequence"), "SliceThickness", 1)
    if per_frame_in:
        thickness = thickness or _numbers(
            _group_item(per_frame_in[0], "PixelMeasuresSequence"), "SliceThickness", 1)
    rescale_types = {str((_group_item(item, "PixelValueTransformationSequence") or Dataset())
                         .get("RescaleType", "")).upper()
                     for item in [shared_in, *per_frame_in]}
    rescale_type = "HU" if "HU" in rescale_types else ("US" if "US" in rescale_types else None)
    try:
        report = deidentify(ds, mapper, patient_pseudonym=patient_pseudonym)
    except DeidentificationError as exc:
        raise DeidentificationError(f"{src}: {exc}") from None
    first = frames[0]
    shared = Dataset()
    orientation = _macro("PlaneOrientationSequence",
                         {"ImageOrientationPatient": list(first.orientation)})
    measures = _macro("PixelMeasuresSequence", {
        "PixelSpacing": list(first.pixel_spacing) if first.pixel_spacing else None,
        "SliceThickness": thickness,
    })
    for macro in (orientation, measures):
        if macro is not None:
            shared.update(macro)
    uniform = len({(f.slope, f.intercept) for f in frames}) == 1

    def transform(f: Any) -> Dataset:
        macro = _macro("PixelValueTransformationSequence", {
            "RescaleIntercept": [f.intercept], "RescaleSlope": [f.slope]})
        assert macro is not None
        if rescale_type:
            macro.PixelValueTransformationSequence[0].RescaleType = rescale_type
        return macro

    if uniform:
        shared.update(transform(first))
    per_frame = []
    for f in frames:
        item = Dataset()
        position = _macro("PlanePositionSequence", {"ImagePositionPatient": list(f.position)})
        assert position is not None
        item.update(position)
        if not uniform:
            item.update(transform(f))
        per_frame.append(item)
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    ds.PerFrameFunctionalGroupsSequence = Sequence(per_frame)
    buf = io.BytesIO()
    try:
        ds.save_as(buf, enforce_file_format=True)
    except Exception as exc:  # e.g. a value pydicom cannot encode
        raise DeidentificationError(f"{src}: cannot write de-identified DICOM ({exc})") from exc
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, dest)
    return report


# --- NIfTI ----------------------------------------------------------------------------------

NIFTI_TEXT_FIELDS = ("descrip", "aux_file", "intent_name", "db_name", "data_type")


def _clean_nifti_header(img: Any) -> Any:
    """A new header of ``img``'s class with only the allow-listed fields of its header."""
    old = img.header
    new = type(old)()
    new.set_data_dtype(old.get_data_dtype())
    new.set_data_shape(old.get_data_shape())
    new.set_zooms(old.get_zooms())
    new.set_xyzt_units(*old.get_xyzt_units())
    qform, qcode = old.get_qform(coded=True)
    sform, scode = old.get_sform(coded=True)
    if qform is not None:
        new.set_qform(qform, int(qcode))
    if sform is not None:
        new.set_sform(sform, int(scode))
    # A loaded image's header has its scaling reset to NaN; nibabel keeps it on the dataobj.
    slope, inter = float(img.dataobj.slope), float(img.dataobj.inter)
    if (slope, inter) != (1.0, 0.0):
        new.set_slope_inter(slope, inter)
    new["dim_info"] = old["dim_info"]
    for key in ("cal_min", "cal_max"):
        value = float(old[key])
        if math.isfinite(value):
            new[key] = value
    # Zero makes nibabel place the data right after the header and the empty extension flag.
    new["vox_offset"] = 0
    return new


def deidentify_nifti(src: str | Path, dest: str | Path) -> NiftiDeidReport:
    """Write a cleaned copy of a NIfTI file (see the module docstring).

    Args:
        src: ``.nii`` or ``.nii.gz``.
        dest: ``.nii`` or ``.nii.gz`` (gzip-compressed when its name ends in ``.gz``);
            written under a temporary name and renamed into place.

    Returns:
        What was removed.

    Raises:
        VolumeError: Not a readable single-file NIfTI volume, or over the volume limit.
    """
    import nibabel as nib
    from nibabel.openers import ImageOpener

    src, dest = Path(src), Path(dest)
    if not is_nifti_name(src) or not is_nifti_name(dest):
        raise VolumeError(f"{src} -> {dest}: NIfTI files must be named .nii or .nii.gz")
    open_volume(src)  # checks the limit and the header's geometry before any data is read
    img = nib.load(src)
    old = img.header
    report = NiftiDeidReport(
        cleared_fields=[k for k in NIFTI_TEXT_FIELDS if bytes(old[k].item()).strip(b"\x00 ")],
        extensions_removed=len(old.extensions),
    )
    header = _clean_nifti_header(img)
    dtype = old.get_data_dtype()
    nbytes = int(np.prod(old.get_data_shape(), dtype=np.int64)) * dtype.itemsize
    offset = int(img.dataobj.offset)
    chunk = max(dtype.itemsize, NIFTI_CHUNK_BYTES // dtype.itemsize * dtype.itemsize)
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        with open(tmp, "wb") as raw_out:
            out: Any = (gzip.GzipFile(filename="", mode="wb", fileobj=raw_out, mtime=0)
                        if dest.name.lower().endswith(".gz") else raw_out)
            header.write_to(out)
            pad = int(header["vox_offset"]) - header.single_vox_offset
            if pad < 0:
                raise VolumeError(f"{src}: cannot place the data after the cleaned header")
            out.write(b"\x00" * pad)
            with ImageOpener(src) as fh:
                fh.seek(offset)
                left = nbytes
                while left:
                    block = fh.read(min(chunk, left))
                    if not block:
                        raise VolumeError(f"{src}: the data is shorter than its header says")
                    out.write(block)
                    left -= len(block)
                # Counted, not copied: whatever follows the data is dropped.
                trailing = 0
                while block := fh.read(chunk):
                    trailing += len(block)
            report.extra_bytes_removed = max(0, offset - old.single_vox_offset
                                             - old.extensions.get_sizeondisk()) + trailing
            if out is not raw_out:
                out.close()
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return report


def copy_nifti_is_clean(path: str | Path) -> bool:
    """True when a NIfTI file has no header text and no extension (a check for tests/imports).

    Args:
        path: ``.nii`` or ``.nii.gz``.

    Returns:
        Whether every text field is empty and there is no extension.
    """
    import nibabel as nib

    img = nib.load(Path(path))
    return not img.header.extensions and not any(
        bytes(img.header[k].item()).strip(b"\x00 ") for k in NIFTI_TEXT_FIELDS
    )
