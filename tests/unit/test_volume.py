"""Volumes in (issue 25): series, multi-frame and NIfTI read from headers, checked, stored."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import tracemalloc
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
import pytest
from PIL import Image
from pydicom.data import get_testdata_file
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

from radconcord.backend.imaging import volume as volume_module
from radconcord.backend.imaging.volume import (
    MAX_SIDE,
    MAX_SLICES,
    VolumeError,
    VolumeHeader,
    check_volume_limit,
    classify_entry,
    open_volume,
)
from radconcord.backend.imaging.volume_store import VolumeStore

HOSTILE = Path(__file__).resolve().parent.parent / "hostile_corpus.py"


def _corpus_module():
    if "hostile_corpus" not in sys.modules:
        spec = importlib.util.spec_from_file_location("hostile_corpus", HOSTILE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["hostile_corpus"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["hostile_corpus"]


hc = _corpus_module()
AXIAL = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)


class Series:
    """Writes CT slices of one series into a folder."""

    def __init__(self, folder: Path, rows: int = 12, cols: int = 10) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.rows, self.cols = rows, cols
        self.study, self.uid, self.frame = generate_uid(), generate_uid(), generate_uid()

    def add(self, name: str, position, index: int, **kwargs) -> Path:
        pixels = kwargs.pop("pixels", None)
        if pixels is None:
            pixels = hc.volume_pixels(index, self.rows, self.cols)
        uid = kwargs.pop("series_uid", self.uid)
        ds = hc.ct_slice(tuple(position), pixels, study_uid=self.study, series_uid=uid,
                         frame_uid=self.frame, **kwargs)
        ds.InstanceNumber = 1  # meaningless on purpose: order comes from positions
        path = self.folder / name
        ds.save_as(path, enforce_file_format=True)
        return path


def axial_series(folder: Path, zs, names=None, **kwargs) -> Series:
    series = Series(folder)
    names = names or [f"s{n:02d}.dcm" for n in range(len(zs))]
    for index, (name, z) in enumerate(zip(names, zs, strict=True)):
        series.add(name, (-60.0, -80.0, z), index, **kwargs)
    return series


def film(path: Path, view: str = "PA") -> Path:
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.1"  # CR Image Storage
    ds.SOPInstanceUID = generate_uid()
    ds.SeriesInstanceUID = generate_uid()
    ds.Modality = "CR"
    ds.ViewPosition = view
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = 16, 16
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    ds.PixelData = np.arange(256, dtype="<u2").tobytes()
    ds.save_as(path, enforce_file_format=True)
    return path


# --- Series: order, geometry, HU -------------------------------------------------------------


def test_series_is_ordered_by_position_not_file_name(tmp_path):
    zs = [-100.0 + 2.5 * k for k in range(6)]
    # File names run against the positions, and are not even monotonic.
    names = ["f.dcm", "b.dcm", "e.dcm", "a.dcm", "d.dcm", "c.dcm"]
    axial_series(tmp_path / "ct", zs, names)
    source = open_volume(tmp_path / "ct")
    assert [p.name for p in source.files] == names
    header = source.header
    assert header.kind == "series"
    assert header.shape == (6, 12, 10)
    assert header.spacing == pytest.approx((2.5, 0.75, 0.5))
    assert header.modality == "CT" and header.hounsfield
    assert header.integral and header.int16_exact()
    assert header.windows == ((40.0, 400.0),)
    np.testing.assert_allclose(header.affine_array(), [
        [0.5, 0, 0, -60], [0, 0.75, 0, -80], [0, 0, 2.5, -100], [0, 0, 0, 1]])
    np.testing.assert_allclose(header.ras_affine()[:3, 3], [60, 80, -100])

    store = VolumeStore.write(source, tmp_path / "store")
    assert store.dtype == np.int16
    for k in range(6):
        plane = store.axial(k)
        np.testing.assert_array_equal(plane.pixels, hc.volume_pixels(k).astype(int) - 1024)
        assert plane.spacing == pytest.approx((0.75, 0.5))
    assert store.position_mm(3, 0, 0) == pytest.approx((-60.0, -80.0, -92.5))


def test_oblique_series_is_ordered_along_its_normal(tmp_path):
    angle = math.radians(30)
    row = (1.0, 0.0, 0.0)
    col = (0.0, math.cos(angle), math.sin(angle))
    normal = np.cross(row, col)
    origin = np.array([10.0, -20.0, 30.0])
    series = Series(tmp_path / "ct")
    order = [3, 0, 4, 1, 2]  # file n holds the slice at order[n] along the normal
    for n, k in enumerate(order):
        series.add(f"{n}.dcm", origin + 3.0 * k * normal, k, orientation=(*row, *col))
    source = open_volume(series.folder)
    assert [p.name for p in source.files] == ["1.dcm", "3.dcm", "4.dcm", "0.dcm", "2.dcm"]
    affine = source.header.affine_array()
    np.testing.assert_allclose(affine @ [0, 0, 4, 1], [*(origin + 12.0 * normal), 1],
                               atol=1e-4)
    np.testing.assert_allclose(affine[:3, 1], np.array(col) * 0.75, atol=1e-6)
    assert source.header.spacing[0] == pytest.approx(3.0, rel=1e-4)
    assert source.header.warnings == ()


def test_hu_uses_each_slices_rescale(tmp_path):
    series = Series(tmp_path / "ct")
    intercepts = [-1024, -1000, -900, -1024]
    for k, intercept in enumerate(intercepts):
        series.add(f"{k}.dcm", (0, 0, 5.0 * k), k, intercept=intercept)
    source = open_volume(series.folder)
    assert source.header.rescale == tuple((1.0, float(i)) for i in intercepts)
    store = VolumeStore.write(source, tmp_path / "store")
    assert store.dtype == np.int16
    for k, intercept in enumerate(intercepts):
        assert store.hu_at(k, 2, 3) == int(hc.volume_pixels(k)[2, 3]) + intercept


def test_fractional_slope_is_stored_as_float32_exactly(tmp_path):
    axial_series(tmp_path / "ct", [0.0, 1.0, 2.0], slope=0.5, intercept=-1024.5)
    source = open_volume(tmp_path / "ct")
    assert not source.header.integral
    store = VolumeStore.write(source, tmp_path / "store")
    assert store.dtype == np.float32
    expected = hc.volume_pixels(1).astype(np.float64) * 0.5 - 1024.5
    np.testing.assert_array_equal(store.axial(1).pixels, expected.astype(np.float32))


def test_int16_is_kept_when_values_fit_and_dropped_when_they_do_not(tmp_path):
    # 16-bit unsigned with intercept -1024: the header allows values over int16's range, so
    # each slice is checked; these fit.
    fits = Series(tmp_path / "fits")
    for k in range(3):
        fits.add(f"{k}.dcm", (0, 0, float(k)), k, pixels=hc.volume_pixels(k) + 5000)
    source = open_volume(fits.folder)
    assert source.header.integral and not source.header.int16_exact()
    store = VolumeStore.write(source, tmp_path / "store_fits")
    assert store.dtype == np.int16
    assert store.hu_at(2, 0, 0) == 900 + 80 + 5000 - 1024

    # One slice holds 40000: int16 cannot hold it, the import restarts as float32.
    wide = Series(tmp_path / "wide")
    for k in range(3):
        pixels = hc.volume_pixels(k)
        if k == 1:
            pixels = pixels.copy()
            pixels[0, 0] = 40000
        wide.add(f"{k}.dcm", (0, 0, float(k)), k, pixels=pixels, intercept=0)
    store = VolumeStore.write(open_volume(wide.folder), tmp_path / "store_wide")
    assert store.dtype == np.float32
    assert store.hu_at(1, 0, 0) == 40000.0
    assert store.hu_at(2, 0, 1) == int(hc.volume_pixels(2)[0, 1])
    assert store.meta["value_range"][1] == 40000.0


# --- Series: refusals, each naming the file(s) -----------------------------------------------


def test_irregular_gap_is_refused_naming_both_files(tmp_path):
    axial_series(tmp_path / "ct", [0.0, 2.0, 4.0, 7.1, 9.1])
    with pytest.raises(VolumeError, match=r"inconsistent slice spacing between .*s02\.dcm "
                                          r"and .*s03\.dcm"):
        open_volume(tmp_path / "ct")


def test_small_spacing_jitter_is_accepted(tmp_path):
    axial_series(tmp_path / "ct", [0.0, 2.0, 4.01, 6.0, 8.0])  # 0.5 % off: under 1 %
    assert open_volume(tmp_path / "ct").header.spacing[0] == pytest.approx(2.0)


def test_missing_slice_is_refused_with_the_count(tmp_path):
    axial_series(tmp_path / "ct", [0.0, 2.0, 4.0, 10.0, 12.0, 14.0])
    with pytest.raises(VolumeError, match=r"2 slice\(s\) missing between .*s02\.dcm and "
                                          r".*s03\.dcm"):
        open_volume(tmp_path / "ct")


def test_duplicate_positions_are_refused_naming_both_files(tmp_path):
    axial_series(tmp_path / "ct", [0.0, 2.0, 4.0, 4.0, 6.0])
    with pytest.raises(VolumeError) as info:
        open_volume(tmp_path / "ct")
    message = str(info.value)
    assert "s02.dcm" in message and "s03.dcm" in message and "duplicate" in message


def test_inconsistent_orientation_is_refused_naming_the_file(tmp_path):
    series = axial_series(tmp_path / "ct", [0.0, 2.0, 4.0])
    series.add("tilted.dcm", (-60, -80, 6.0), 3, orientation=(1, 0, 0, 0, 0.8, 0.6))
    with pytest.raises(VolumeError, match=r"tilted\.dcm: Image Orientation"):
        open_volume(series.folder)


def test_inconsistent_size_is_refused_naming_the_file(tmp_path):
    series = axial_series(tmp_path / "ct", [0.0, 2.0, 4.0])
    series.add("small.dcm", (-60, -80, 6.0), 3, pixels=hc.volume_pixels(3, rows=8, cols=10))
    with pytest.raises(VolumeError, match=r"small\.dcm: 10 x 8 pixels"):
        open_volume(series.folder)


def test_inconsistent_pixel_spacing_is_refused_naming_the_file(tmp_path):
    series = axial_series(tmp_path / "ct", [0.0, 2.0, 4.0])
    series.add("zoomed.dcm", (-60, -80, 6.0), 3, spacing=(0.5, 0.5))
    with pytest.raises(VolumeError, match=r"zoomed\.dcm: Pixel Spacing"):
        open_volume(series.folder)


def test_slice_off_the_stack_line_is_refused(tmp_path):
    series = axial_series(tmp_path / "ct", [0.0, 2.0, 4.0])
    series.add("shifted.dcm", (-40.0, -80.0, 6.0), 3)  # moved 20 mm sideways
    with pytest.raises(VolumeError, match=r"shifted\.dcm lies 20\.\d+ mm off the line"):
        open_volume(series.folder)


def test_gantry_tilt_is_a_warning_and_the_affine_keeps_it(tmp_path):
    series = Series(tmp_path / "ct")
    for k in range(4):
        series.add(f"{k}.dcm", (0.0, 0.5 * k, 2.0 * k), k)
    header = open_volume(series.folder).header
    assert len(header.warnings) == 1 and "gantry tilt" in header.warnings[0]
    np.testing.assert_allclose(header.affine_array()[:3, 2], [0.0, 0.5, 2.0])
    assert header.spacing[0] == pytest.approx(2.0)


def test_several_series_in_one_folder_are_refused(tmp_path):
    series = axial_series(tmp_path / "ct", [0.0, 2.0, 4.0])
    other = generate_uid()
    series.add("x1.dcm", (-60, -80, 0.0), 0, series_uid=other)
    series.add("x2.dcm", (-60, -80, 2.0), 1, series_uid=other)
    for call in (classify_entry, open_volume):
        with pytest.raises(VolumeError, match=r"slices of 2 series .*ambiguous"):
            call(series.folder)


def test_films_beside_a_series_are_refused(tmp_path):
    series = axial_series(tmp_path / "ct", [0.0, 2.0, 4.0])
    film(series.folder / "frontal.dcm")
    with pytest.raises(VolumeError, match=r"2-D films and a series in one folder") as info:
        classify_entry(series.folder)
    assert "frontal.dcm" in str(info.value)


# --- What an entry is -------------------------------------------------------------------------


def test_classify_entry(tmp_path):
    two_films = tmp_path / "case_films"
    two_films.mkdir()
    film(two_films / "frontal.dcm", "PA")
    film(two_films / "lateral.dcm", "LL")
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(two_films / "extra.png")
    assert classify_entry(two_films) == "film"
    assert classify_entry(two_films / "frontal.dcm") == "film"
    assert classify_entry(two_films / "extra.png") == "film"

    axial_series(tmp_path / "ct", [0.0, 2.0, 4.0])
    assert classify_entry(tmp_path / "ct") == "series"
    assert classify_entry(tmp_path / "ct" / "s00.dcm") == "film"  # one slice is an image

    mf = hc.build_hostile_multiframe(tmp_path / "enhanced.dcm")
    assert classify_entry(mf) == "multiframe"
    alone = tmp_path / "mf_folder"
    alone.mkdir()
    (alone / "x.dcm").write_bytes(mf.read_bytes())
    assert classify_entry(alone) == "multiframe"
    film(alone / "frontal.dcm")
    with pytest.raises(VolumeError, match="multi-frame file .* beside 1 other"):
        classify_entry(alone)

    for name in ("v.nii", "v.nii.gz"):
        assert classify_entry(hc.build_hostile_nifti(tmp_path / name)) == "nifti"

    nested = tmp_path / "nested"
    (nested / "inner").mkdir(parents=True)
    with pytest.raises(VolumeError, match="subfolder"):
        classify_entry(nested)
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "notes.txt").write_text("hello")
    with pytest.raises(VolumeError, match=r"notes\.txt: not a DICOM"):
        classify_entry(odd)
    (tmp_path / "empty").mkdir()
    with pytest.raises(VolumeError, match="no image files"):
        classify_entry(tmp_path / "empty")
    with pytest.raises(VolumeError, match="holds 2-D films"):
        open_volume(two_films)


# --- Limit, from headers before any pixel ------------------------------------------------------


def _no_decoding(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pixels decoded before the limit was checked")

    monkeypatch.setattr("pydicom.pixels.pixel_array", refuse)
    monkeypatch.setattr("pydicom.pixels.iter_pixels", refuse)
    monkeypatch.setattr("nibabel.volumeutils.array_from_file", refuse)


def test_check_volume_limit():
    eye = tuple(tuple(r) for r in np.eye(4))
    ok = VolumeHeader(kind="series", shape=(MAX_SLICES, MAX_SIDE, MAX_SIDE),
                      spacing=(1, 1, 1), affine=eye)
    check_volume_limit(ok, "ok")
    for shape in ((MAX_SLICES + 1, 512, 512), (10, MAX_SIDE + 1, 512), (10, 512, 2048),
                  (0, 512, 512)):
        header = VolumeHeader(kind="series", shape=shape, spacing=(1, 1, 1), affine=eye)
        with pytest.raises(VolumeError, match=r"^big\.nii: "):
            check_volume_limit(header, "big.nii")


def test_series_over_the_limit_is_refused_from_headers(tmp_path, monkeypatch):
    series = Series(tmp_path / "ct")
    for k in range(3):
        path = series.add(f"{k}.dcm", (0, 0, float(k)), k)
        ds = pydicom.dcmread(path)
        ds.Rows, ds.Columns = 2048, 2048  # the pixel data stays 12 x 10: never decoded
        ds.save_as(path)
    _no_decoding(monkeypatch)
    with pytest.raises(VolumeError, match=r"3 slices of 2048 x 2048 pixels exceeds the limit"):
        open_volume(series.folder)


def test_folder_with_too_many_files_is_refused_before_reading_them(tmp_path, monkeypatch):
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(MAX_SLICES + 1):
        (folder / f"{n:05d}.dcm").write_bytes(b"")
    monkeypatch.setattr(volume_module, "_read_header", lambda p: pytest.fail("header read"))
    with pytest.raises(VolumeError, match=f"more than {MAX_SLICES} files"):
        classify_entry(folder)


def test_multiframe_and_nifti_over_the_limit_are_refused_from_headers(tmp_path, monkeypatch):
    mf = hc.build_hostile_multiframe(tmp_path / "mf.dcm")
    ds = pydicom.dcmread(mf)
    ds.NumberOfFrames = MAX_SLICES + 100
    ds.save_as(mf)
    img = nib.Nifti1Image(np.zeros((4, 4, MAX_SLICES + 10), np.int16), np.eye(4))
    nib.save(img, tmp_path / "long.nii")
    _no_decoding(monkeypatch)
    with pytest.raises(VolumeError, match=r"mf\.dcm: volume of 1124 slices"):
        open_volume(mf)
    with pytest.raises(VolumeError, match=r"long\.nii: volume of 1034 slices"):
        open_volume(tmp_path / "long.nii")


# --- Multi-frame ------------------------------------------------------------------------------


def test_enhanced_multiframe_is_sorted_with_per_frame_rescale(tmp_path):
    mf = hc.build_hostile_multiframe(tmp_path / "mf.dcm", frames=5)
    source = open_volume(mf)
    header = source.header
    assert header.kind == "multiframe" and header.shape == (5, 12, 10)
    assert header.spacing == pytest.approx((3.0, 0.75, 0.5))
    assert header.rescale == tuple((1.0, float(-1024 - k)) for k in range(5))
    np.testing.assert_allclose(header.affine_array()[:3, 3], [-60, -80, -50])
    store = VolumeStore.write(source, tmp_path / "store")
    for k in range(5):
        np.testing.assert_array_equal(store.axial(k).pixels,
                                      hc.volume_pixels(k).astype(int) - 1024 - k)


def test_multiframe_shared_groups_are_the_fallback(tmp_path):
    path = hc.build_hostile_multiframe(tmp_path / "mf.dcm", frames=4)
    ds = pydicom.dcmread(path)
    transform = Dataset()
    transform.RescaleSlope, transform.RescaleIntercept = "2", "-1000"
    ds.SharedFunctionalGroupsSequence[0].PixelValueTransformationSequence = Sequence([transform])
    for item in ds.PerFrameFunctionalGroupsSequence:
        del item.PixelValueTransformationSequence
    ds.save_as(path)
    header = open_volume(path).header
    assert header.rescale == ((2.0, -1000.0),) * 4
    assert header.spacing == pytest.approx((3.0, 0.75, 0.5))


def test_multiframe_without_frame_positions_is_refused(tmp_path):
    path = hc.build_hostile_multiframe(tmp_path / "mf.dcm", frames=3)
    ds = pydicom.dcmread(path)
    del ds.PerFrameFunctionalGroupsSequence[1].PlanePositionSequence
    ds.save_as(path)
    with pytest.raises(VolumeError, match=r"mf\.dcm frame 2: no Plane Position"):
        open_volume(path)


def test_pydicom_enhanced_ct_is_read():
    path = Path(get_testdata_file("eCT_Supplemental.dcm"))
    source = open_volume(path)
    header = source.header
    assert header.shape == (2, 512, 512)
    assert header.spacing == pytest.approx((10.0, 0.388672, 0.388672))
    assert header.modality == "CT" and header.rescale == ((1.0, -1024.0),) * 2
    # Rows run along -x, columns along +y: the normal is -z, so the frame at z = -149 mm
    # comes first and the stack steps 10 mm towards the feet.
    affine = header.affine_array()
    np.testing.assert_allclose(affine[:3, 0], [-0.388672, 0, 0])
    np.testing.assert_allclose(affine[:3, 2], [0, 0, -10])
    np.testing.assert_allclose(affine[:3, 3], [99.5, -301.5, -149])
    frames = pydicom.dcmread(path).pixel_array.astype(np.float64) - 1024
    got = dict(source.iter_slices())
    np.testing.assert_array_equal(got[0], frames[1])
    np.testing.assert_array_equal(got[1], frames[0])


def test_pydicom_enhanced_mr_without_functional_groups_is_refused():
    with pytest.raises(VolumeError, match=r"emri_small\.dcm frame 1: no Plane Position"):
        open_volume(get_testdata_file("emri_small.dcm"))


# --- NIfTI --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["v.nii", "v.nii.gz"])
def test_nifti_keeps_affine_and_scaling(tmp_path, name, monkeypatch):
    # Small chunks: the 7 slices come in 3 chunks of 3, 3 and 1.
    monkeypatch.setattr(volume_module, "NIFTI_CHUNK_BYTES", 3 * 10 * 12 * 8)
    path = hc.build_hostile_nifti(tmp_path / name)
    data, affine = hc.hostile_nifti_volume()
    source = open_volume(path, modality="CT")
    header = source.header
    assert header.kind == "nifti" and header.shape == (7, 10, 12)
    assert header.spacing == pytest.approx((2.0, 0.8, 0.7))
    assert header.rescale[0] == (1.0, -1024.0) and header.hounsfield
    np.testing.assert_allclose(header.ras_affine(), affine, atol=1e-6)
    np.testing.assert_allclose(header.affine_array(), np.diag([-1, -1, 1, 1]) @ affine,
                               atol=1e-6)
    store = VolumeStore.write(source, tmp_path / "store")
    assert store.dtype == np.int16
    for k in range(7):
        np.testing.assert_array_equal(store.axial(k).pixels, data[:, :, k].T.astype(int) - 1024)
    # Voxel (i, j, k) of the NIfTI is store[k, j, i], at the same place in space.
    ras = affine @ [5, 3, 2, 1]
    assert store.position_mm(2, 3, 5) == pytest.approx((-ras[0], -ras[1], ras[2]))
    assert store.hu_at(2, 3, 5) == int(data[5, 3, 2]) - 1024


def test_nifti_float_and_fractional_scaling(tmp_path):
    affine = np.diag([1.5, 1.5, 3.0, 1.0])
    integral = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6) - 60
    nib.save(nib.Nifti1Image(integral, affine), tmp_path / "ints.nii")
    store = VolumeStore.write(open_volume(tmp_path / "ints.nii"), tmp_path / "s1")
    assert store.dtype == np.int16  # float data holding integers: exact in int16
    np.testing.assert_array_equal(store.axial(5).pixels, integral[:, :, 5].T)

    fractional = integral + 0.25
    nib.save(nib.Nifti1Image(fractional, affine), tmp_path / "floats.nii")
    store = VolumeStore.write(open_volume(tmp_path / "floats.nii"), tmp_path / "s2")
    assert store.dtype == np.float32
    np.testing.assert_array_equal(store.axial(5).pixels, fractional[:, :, 5].T)


def test_nifti_4d_is_refused(tmp_path):
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 3, 2), np.int16), np.eye(4)), tmp_path / "t.nii")
    with pytest.raises(VolumeError, match=r"t\.nii: NIfTI of shape \(4, 4, 3, 2\)"):
        open_volume(tmp_path / "t.nii")


# --- Store: planes, anisotropy, bounded memory, safe writes ------------------------------------


def test_planes_respect_spacing_and_put_the_head_up(tmp_path):
    axial_series(tmp_path / "ct", [-100.0 + 2.5 * k for k in range(6)])
    store = VolumeStore.write(open_volume(tmp_path / "ct"), tmp_path / "store")
    volume = np.stack([hc.volume_pixels(k).astype(int) - 1024 for k in range(6)])
    coronal = store.coronal(4)
    assert coronal.pixels.shape == (6, 10) and coronal.spacing == pytest.approx((2.5, 0.5))
    np.testing.assert_array_equal(coronal.pixels, volume[::-1, 4, :])
    sagittal = store.sagittal(7)
    assert sagittal.pixels.shape == (6, 12) and sagittal.spacing == pytest.approx((2.5, 0.75))
    np.testing.assert_array_equal(sagittal.pixels, volume[::-1, :, 7])
    assert store.hu_at(5, 11, 9) == volume[5, 11, 9]
    for call, index in ((store.axial, 6), (store.coronal, 12), (store.sagittal, -1)):
        with pytest.raises(IndexError):
            call(index)
    # The plane is a copy: writing to it leaves the store alone.
    plane = store.axial(0).pixels
    plane[:] = 0
    assert store.hu_at(0, 0, 0) == volume[0, 0, 0]


def test_store_json_holds_geometry_and_windows_but_no_identifier(tmp_path):
    series = hc.build_hostile_series(tmp_path / "QUAXMIRE_series")
    store = VolumeStore.write(open_volume(series.folder), tmp_path / "store")
    meta = json.loads((tmp_path / "store" / "volume.json").read_text())
    assert meta["shape"] == [12, 12, 10] and meta["dtype"] == "int16"
    assert meta["affine_space"] == "LPS"
    assert meta["windows"]["lung"] == [-600.0, 1500.0]
    assert meta["windows"]["header"] == [40.0, 400.0]
    low, high = meta["windows"]["auto"][0] - meta["windows"]["auto"][1] / 2, \
        meta["windows"]["auto"][0] + meta["windows"]["auto"][1] / 2
    assert meta["value_range"][0] <= low < high <= meta["value_range"][1]
    for name in ("volume.json", "volume.npy"):
        assert hc.find_planted((tmp_path / "store" / name).read_bytes()) == []
    reopened = VolumeStore.open(tmp_path / "store")
    np.testing.assert_array_equal(reopened.axial(3).pixels, store.axial(3).pixels)


def test_import_holds_one_slice_at_a_time(tmp_path):
    rows = cols = 256
    series = Series(tmp_path / "ct", rows=rows, cols=cols)
    for k in range(40):
        series.add(f"{k:02d}.dcm", (0, 0, float(k)), k)
    source = open_volume(series.folder)
    tracemalloc.start()
    try:
        VolumeStore.write(source, tmp_path / "store")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    slice_f64 = rows * cols * 8
    volume_i16 = 40 * rows * cols * 2
    # One slice decoded (float64 plus its int16 copy and the file's bytes) and a small sample;
    # the whole volume even as int16 would be 5 MiB.
    assert peak < 4 * slice_f64 < volume_i16, peak


def test_failed_import_leaves_no_store(tmp_path):
    series = axial_series(tmp_path / "ct", [0.0, 2.0, 4.0, 6.0])
    ds = pydicom.dcmread(series.folder / "s02.dcm")
    ds.PixelData = ds.PixelData[:10]  # truncated: fails only when decoded
    ds.save_as(series.folder / "s02.dcm")
    source = open_volume(series.folder)
    with pytest.raises(VolumeError, match=r"s02\.dcm: cannot decode"):
        VolumeStore.write(source, tmp_path / "store")
    assert not (tmp_path / "store").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ct"]
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(FileExistsError):
        VolumeStore.write(open_volume(axial_series(tmp_path / "ok", [0.0, 1.0]).folder),
                          tmp_path / "busy")


def test_nifti_without_orientation_warns(tmp_path):
    img = nib.Nifti1Image(np.zeros((4, 5, 3), np.int16), None)  # no affine: codes 0
    img.header.set_zooms((2.0, 2.0, 4.0))
    nib.save(img, tmp_path / "bare.nii")
    assert nib.load(tmp_path / "bare.nii").header["sform_code"] == 0
    header = open_volume(tmp_path / "bare.nii").header
    assert len(header.warnings) == 1 and "orientation is unknown" in header.warnings[0]
    assert header.spacing == pytest.approx((4.0, 2.0, 2.0))


def test_store_refuses_a_data_file_that_disagrees_with_its_header(tmp_path):
    axial_series(tmp_path / "ct", [0.0, 2.0, 4.0])
    VolumeStore.write(open_volume(tmp_path / "ct"), tmp_path / "store")
    np.save(tmp_path / "store" / "volume.npy", np.zeros((2, 12, 10), np.int16))
    with pytest.raises(VolumeError, match="disagrees"):
        VolumeStore.open(tmp_path / "store")
    with pytest.raises(VolumeError, match="not a readable volume store"):
        VolumeStore.open(tmp_path / "nowhere")


def test_may_hold_series_says_which_folders_to_classify(tmp_path):
    """Only two single-frame slices with a position, of one series, make a folder worth
    classifying; films, a lone CT slice, unreadable and foreign files leave it to the films."""
    from radconcord.backend.imaging.volume import may_hold_series

    films = tmp_path / "films"
    films.mkdir()
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(films / "pa.png")
    (films / "notes.txt").write_text("a note")
    (films / "broken.dcm").write_bytes(b"\x00" * 200)
    import shutil

    shutil.copy(get_testdata_file("CT_small.dcm"), films / "one_ct_slice.dcm")
    assert may_hold_series(films) is False
    series = Series(tmp_path / "series")
    for k in range(2):
        series.add(f"s{k}.dcm", (0.0, 0.0, 2.5 * k), k)
    (series.folder / "notes.txt").write_text("a note")
    assert may_hold_series(series.folder) is True
    assert may_hold_series(tmp_path / "missing") is False
