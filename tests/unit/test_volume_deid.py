"""De-identification of volumes (issue 25): every slice, one UID mapping, NIfTI header text."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
import pytest
from pydicom.uid import generate_uid

from radconcord.backend.imaging.deid import DeidentificationError, UidMapper
from radconcord.backend.imaging.volume import VolumeError, open_volume
from radconcord.backend.imaging.volume_deid import (
    NIFTI_TEXT_FIELDS,
    copy_nifti_is_clean,
    deidentify_multiframe,
    deidentify_nifti,
    deidentify_series,
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
# Sequences a de-identified file may hold (added by the de-identification itself, or the
# geometry a multi-frame volume needs).
ALLOWED_SEQUENCES = {
    "DeidentificationMethodCodeSequence", "SharedFunctionalGroupsSequence",
    "PerFrameFunctionalGroupsSequence", "PlanePositionSequence", "PlaneOrientationSequence",
    "PixelMeasuresSequence", "PixelValueTransformationSequence",
}


def _elements(ds):
    stack = [ds]
    while stack:
        current = stack.pop()
        for elem in current:
            yield elem
            if elem.VR == "SQ":
                stack.extend(elem.value)


def _assert_clean_dicom(path: Path) -> None:
    data = path.read_bytes()
    assert hc.find_planted(data) == [], path.name
    ds = pydicom.dcmread(path)
    for elem in _elements(ds):
        assert not elem.tag.is_private, (path.name, elem.tag)
        if elem.VR == "SQ":
            assert elem.keyword in ALLOWED_SEQUENCES, (path.name, elem.keyword)
    for elem in _elements(ds.file_meta):
        assert not elem.tag.is_private
    assert ds.PatientIdentityRemoved == "YES"


@pytest.fixture()
def hostile_series(tmp_path):
    return hc.build_hostile_series(tmp_path / f"{hc.FAMILY}_series")


def test_hostile_series_plants_a_different_place_in_each_slice(hostile_series):
    assert len(set(hostile_series.planted.values())) == len(hostile_series.files) == 12
    for path in hostile_series.files:
        raw = path.read_bytes()
        where = hostile_series.planted[path.name]
        # Every file's name and (apart from the name in it) its bytes carry an identifier.
        assert hc.FAMILY in path.name
        assert hc.find_planted(raw), where


def test_every_slice_is_deidentified_with_one_uid_mapping(hostile_series, tmp_path):
    mapper = UidMapper(salt="fixed-for-test")
    originals = [pydicom.dcmread(p, stop_before_pixels=True) for p in hostile_series.files]
    result = deidentify_series(hostile_series.folder, tmp_path / "out", mapper=mapper)

    assert [p.name for p in result.files] == [f"{k:04d}.dcm" for k in range(1, 13)]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == \
        [p.name for p in result.files]
    assert len(result.reports) == 12 and all(r.pixels_reencoded for r in result.reports)
    assert sum(r.private_removed for r in result.reports) >= 3
    for path in result.files:
        _assert_clean_dicom(path)

    stored = [pydicom.dcmread(p) for p in result.files]
    for keyword in ("StudyInstanceUID", "SeriesInstanceUID", "FrameOfReferenceUID"):
        new = {str(ds[keyword].value) for ds in stored}
        assert len(new) == 1, keyword
        assert new == {mapper.map(str(originals[0][keyword].value))}
        assert new.isdisjoint({str(ds[keyword].value) for ds in originals})
    sops = [str(ds.SOPInstanceUID) for ds in stored]
    assert len(set(sops)) == 12
    assert set(sops).isdisjoint(str(ds.SOPInstanceUID) for ds in originals)
    # Slice order is kept: the output file k is the input slice at position k.
    for k, ds in enumerate(stored):
        assert float(ds.ImagePositionPatient[2]) == pytest.approx(hostile_series.positions[k])
        assert ds.file_meta.MediaStorageSOPInstanceUID == ds.SOPInstanceUID


def test_deidentified_series_is_the_same_volume(hostile_series, tmp_path):
    before = open_volume(hostile_series.folder)
    deidentify_series(hostile_series.folder, tmp_path / "out")
    after = open_volume(tmp_path / "out")
    assert after.header.shape == before.header.shape
    assert after.header.spacing == pytest.approx(before.header.spacing)
    np.testing.assert_allclose(after.header.affine_array(), before.header.affine_array())
    assert after.header.rescale == before.header.rescale
    assert after.header.modality == "CT" and after.header.hounsfield
    store_before = VolumeStore.write(before, tmp_path / "s1")
    store_after = VolumeStore.write(after, tmp_path / "s2")
    np.testing.assert_array_equal(np.asarray(store_after.data), np.asarray(store_before.data))


def test_series_with_a_repeated_sop_instance_uid_is_refused(tmp_path):
    series = hc.build_hostile_series(tmp_path / "series", slices=4)
    first = pydicom.dcmread(series.files[0])
    for path in series.files[1:2]:
        ds = pydicom.dcmread(path)
        ds.SOPInstanceUID = first.SOPInstanceUID
        ds.save_as(path)
    with pytest.raises(VolumeError, match="same SOP Instance UID") as info:
        deidentify_series(series.folder, tmp_path / "out")
    assert series.files[0].name in str(info.value) and series.files[1].name in str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_bad_slice_names_the_file_and_leaves_no_output(tmp_path):
    series = hc.build_hostile_series(tmp_path / "series", slices=4)
    ds = pydicom.dcmread(series.files[2])
    ds.PixelData = ds.PixelData[:6]
    ds.save_as(series.files[2])
    with pytest.raises(DeidentificationError, match=series.files[2].name):
        deidentify_series(series.folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_multiframe_is_deidentified_and_keeps_its_frames_geometry(tmp_path):
    src = hc.build_hostile_multiframe(tmp_path / f"{hc.FAMILY}.dcm", frames=5)
    assert hc.find_planted(src.read_bytes())
    before = open_volume(src)
    out = tmp_path / "clean.dcm"
    report = deidentify_multiframe(src, out, mapper=UidMapper())
    assert report.pixels_reencoded and report.private_removed >= 1
    _assert_clean_dicom(out)
    after = open_volume(out)
    assert after.header.shape == before.header.shape
    assert after.header.rescale == before.header.rescale
    assert after.header.spacing == pytest.approx(before.header.spacing)
    np.testing.assert_allclose(after.header.affine_array(), before.header.affine_array())
    s1 = VolumeStore.write(before, tmp_path / "s1")
    s2 = VolumeStore.write(after, tmp_path / "s2")
    np.testing.assert_array_equal(np.asarray(s2.data), np.asarray(s1.data))


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_nifti_header_text_extensions_and_trailer_are_gone(tmp_path, suffix):
    src = hc.build_hostile_nifti(tmp_path / f"{hc.FAMILY}_{hc.PATIENT_ID}{suffix}")
    raw = src.read_bytes()
    plain = gzip.decompress(raw) if suffix.endswith(".gz") else raw
    assert set(hc.find_planted(plain)) >= {f"{t} (ascii)" for t in hc.PLANTED}
    if suffix.endswith(".gz"):
        assert hc.find_planted(raw)  # the gzip header names the original file
    assert not copy_nifti_is_clean(src)

    out = tmp_path / f"clean{suffix}"
    report = deidentify_nifti(src, out)
    assert sorted(report.cleared_fields) == sorted(NIFTI_TEXT_FIELDS)
    assert report.extensions_removed == 1
    assert report.extra_bytes_removed == len(f"trailer {hc.PATIENT_ID}")

    data = out.read_bytes()
    assert hc.find_planted(data) == []
    if suffix.endswith(".gz"):
        data = gzip.decompress(data)
        assert hc.find_planted(data) == []
    assert copy_nifti_is_clean(out)
    img = nib.load(out)
    assert len(img.header.extensions) == 0
    for field in NIFTI_TEXT_FIELDS:
        assert bytes(img.header[field].item()).strip(b"\x00 ") == b""
    expected, affine = hc.hostile_nifti_volume()
    assert img.header.get_data_dtype() == np.int16
    assert (float(img.dataobj.slope), float(img.dataobj.inter)) == (1.0, -1024.0)
    np.testing.assert_array_equal(np.asarray(img.dataobj.get_unscaled()), expected)
    np.testing.assert_allclose(img.affine, affine, atol=1e-6)
    # The header, an empty extension flag, the voxels and nothing else.
    assert len(data) == 352 + expected.size * 2


def test_nifti_deid_refuses_a_non_nifti_name(tmp_path):
    src = hc.build_hostile_nifti(tmp_path / "v.nii")
    with pytest.raises(VolumeError, match="must be named"):
        deidentify_nifti(src, tmp_path / "v.img")


def test_series_uids_are_consistent_across_two_calls_with_one_mapper(tmp_path):
    """Two series of one study keep one Study Instance UID when the import shares a mapper."""
    study = generate_uid()
    mapper = UidMapper()
    outs = []
    for n in range(2):
        folder = tmp_path / f"series{n}"
        folder.mkdir()
        uid, frame = generate_uid(), generate_uid()
        for k in range(3):
            ds = hc.ct_slice((0.0, 0.0, 2.0 * k), hc.volume_pixels(k), study_uid=study,
                             series_uid=uid, frame_uid=frame)
            ds.save_as(folder / f"{k}.dcm", enforce_file_format=True)
        outs.append(deidentify_series(folder, tmp_path / f"out{n}", mapper=mapper))
    studies = {str(pydicom.dcmread(p).StudyInstanceUID) for r in outs for p in r.files}
    series = {str(pydicom.dcmread(p).SeriesInstanceUID) for r in outs for p in r.files}
    assert studies == {mapper.map(study)}
    assert len(series) == 2
