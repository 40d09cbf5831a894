"""DICOM de-identification (PS3.15 Annex E allow-list) on pydicom's test files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file
from pydicom.datadict import tag_for_keyword
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence
from pydicom.uid import UID

from radconcord.backend.imaging.deid import (
    DEID_PROFILE,
    KEPT_ATTRIBUTES,
    PROFILE,
    UidMapper,
    deidentify,
    deidentify_file,
)
from radconcord.backend.imaging.load import load_image
from radconcord.backend.imaging.render import RenderSettings, render_png

FILES = ["RG1_UNCR.dcm", "RG1_J2KI.dcm", "CT_small.dcm", "MR_small.dcm",
         "MR-SIEMENS-DICOM-WithOverlays.dcm"]


def _check_no_phi(original: Dataset, cleaned: Dataset) -> None:
    """Every profile attribute is removed/emptied/remapped; catch-alls hold everywhere."""
    for keyword, action in PROFILE.items():
        tag = tag_for_keyword(keyword)
        where = cleaned.file_meta if tag >> 16 == 0x0002 else cleaned
        if tag not in where:
            continue
        elem = where[tag]
        if action == "X":
            pytest.fail(f"{keyword} should have been removed")
        elif action == "Z":
            assert elem.is_empty, keyword
        elif action == "U":
            before = (original.file_meta if tag >> 16 == 0x0002 else original).get(tag)
            assert before is None or str(before.value) != str(elem.value), keyword
    for elem in cleaned.iterall():
        assert not elem.tag.is_private, elem.tag
        if elem.VR in ("PN", "DA", "DT", "TM"):
            assert elem.is_empty, elem.keyword
        assert not (0x5000 <= elem.tag.group <= 0x50FF), elem.tag
        assert not (0x6000 <= elem.tag.group <= 0x60FF and elem.tag.element in (0x3000, 0x4000))
    original_uids = {str(e.value) for e in original.iterall() if e.VR == "UI" and e.value}
    for elem in cleaned.iterall():
        if elem.VR == "UI" and elem.value and str(elem.value) in original_uids:
            assert UID(str(elem.value)).keyword, f"{elem.keyword} kept an instance UID"
    assert cleaned.PatientIdentityRemoved == "YES"
    assert "Basic Application Confidentiality Profile" in " ".join(
        cleaned.DeidentificationMethod
    )
    assert [c.CodeValue for c in cleaned.DeidentificationMethodCodeSequence] == ["113100"]
    # Only the allow-list, the emptied type 2 attributes and the de-identification record.
    allowed = set(KEPT_ATTRIBUTES) | set(DEID_PROFILE["emptied_attributes"]) | set(
        DEID_PROFILE["added_attributes"]
    )
    assert {e.keyword for e in cleaned} <= allowed
    for elem in cleaned:
        if elem.VR == "SQ" and elem.keyword != "DeidentificationMethodCodeSequence":
            for item in elem.value:
                assert {e.keyword for e in item} <= set(
                    DEID_PROFILE["kept_sequence_item_attributes"]
                )


@pytest.mark.parametrize("name", FILES)
def test_no_profile_phi_survives_and_pixels_unchanged(name, tmp_path):
    path = get_testdata_file(name)
    original = pydicom.dcmread(path)
    data, report, _ = deidentify_file(path, UidMapper(salt="test-salt"))
    cleaned = pydicom.dcmread(io.BytesIO(data))
    _check_no_phi(original, cleaned)
    # Pixels are re-encoded uncompressed; what the viewer decodes is unchanged.
    stored = tmp_path / "stored.dcm"
    stored.write_bytes(data)
    before, after = load_image(path), load_image(stored)
    np.testing.assert_array_equal(after.pixels, before.pixels)
    assert (after.windows, after.invert_for_display, after.voi_function) == (
        before.windows, before.invert_for_display, before.voi_function)
    assert cleaned.file_meta.TransferSyntaxUID == "1.2.840.10008.1.2.1"
    assert report.pixels_reencoded
    assert cleaned.file_meta.MediaStorageSOPInstanceUID == cleaned.SOPInstanceUID
    assert cleaned.file_meta.MediaStorageSOPClassUID == cleaned.SOPClassUID
    assert "SourceApplicationEntityTitle" not in cleaned.file_meta
    assert cleaned.SOPClassUID == original.SOPClassUID
    assert report.uids_remapped >= 3


def test_allow_list_keeps_nothing_the_annex_e_table_removes():
    """Cross-check against Table E.1-1: only UIDs to replace are both kept and listed."""
    listed = set(KEPT_ATTRIBUTES) & set(PROFILE)
    assert {PROFILE[k] for k in listed} <= {"U"}
    assert DEID_PROFILE["kept_attributes"] == list(KEPT_ATTRIBUTES)
    json.dumps(DEID_PROFILE)  # recorded as is in the export manifest


def test_specific_phi_of_rg1_is_gone():
    path = get_testdata_file("RG1_UNCR.dcm")
    data, _, _ = deidentify_file(path, UidMapper())
    text = data[:20000]
    for secret in (b"CompressedSamples", b"9RG1", b"26210", b"Philips Medical Systems Hamburg",
                   b"19400305", b"20040826", b"exam Number", b"Our Department", b"THORAVISION"):
        assert secret not in text, secret
    cleaned = pydicom.dcmread(io.BytesIO(data))
    assert cleaned.PatientName == "" and cleaned.PatientID == ""
    assert "InstitutionName" not in cleaned and "OtherPatientIDs" not in cleaned
    assert cleaned.StudyDate == "" and "SeriesDate" not in cleaned
    # Display-relevant attributes survive.
    assert cleaned.ViewPosition == "PA" and cleaned.PhotometricInterpretation == "MONOCHROME1"
    assert cleaned.WindowCenter == 15000


def test_uid_mapping_consistent_across_one_study():
    """RG1_UNCR and RG1_J2KI share a Study Instance UID: one mapper keeps them together."""
    mapper = UidMapper(salt="s3cret")
    a = pydicom.dcmread(io.BytesIO(deidentify_file(get_testdata_file("RG1_UNCR.dcm"),
                                                   mapper)[0]))
    b = pydicom.dcmread(io.BytesIO(deidentify_file(get_testdata_file("RG1_J2KI.dcm"),
                                                   mapper)[0]))
    orig = pydicom.dcmread(get_testdata_file("RG1_UNCR.dcm"), stop_before_pixels=True)
    assert a.StudyInstanceUID == b.StudyInstanceUID != orig.StudyInstanceUID
    assert a.StudyInstanceUID.startswith("2.25.")
    # Persisted mapping reproduces the same UIDs; another salt gives other UIDs.
    restored = UidMapper.from_dict(mapper.to_dict())
    assert restored.map(orig.StudyInstanceUID) == a.StudyInstanceUID
    assert UidMapper(salt="s3cret").map(orig.StudyInstanceUID) == a.StudyInstanceUID
    assert UidMapper(salt="other").map(orig.StudyInstanceUID) != a.StudyInstanceUID


def test_nested_sequences_private_tags_and_pseudonym():
    ds = Dataset()
    ds.PatientName = "Doe^Jane"
    ds.PatientID = "MRN123"
    ds.StudyInstanceUID = "1.2.3.4.5"
    ds.add_new(0x00091001, "LO", "private secret")
    item = Dataset()
    item.ReferencedSOPInstanceUID = "1.2.3.4.6"
    item.ReferencedSOPClassUID = "1.2.840.10008.5.1.4.1.1.1"
    item.PersonName = "Smith^John"
    item.add_new(0x00111010, "LO", "nested private")
    ds.ReferencedSeriesSequence = Sequence([item])
    ds.RequestAttributesSequence = Sequence([Dataset()])
    ds.add_new(0x60003000, "OW", b"\x00\x01")
    lut = Dataset()
    lut.LUTDescriptor = [2, 0, 16]
    lut.LUTData = [0, 65535]
    lut.LUTExplanation = "Smith^John"
    lut.add_new(0x00291010, "LO", "private in a kept sequence")
    ds.VOILUTSequence = Sequence([lut])
    mapper = UidMapper(salt="x")
    report = deidentify(ds, mapper, patient_pseudonym="demo-01")
    assert ds.PatientName == "demo-01" and ds.PatientID == "demo-01"
    assert 0x00091001 not in ds and 0x60003000 not in ds
    assert "RequestAttributesSequence" not in ds and "ReferencedSeriesSequence" not in ds
    assert ds.StudyInstanceUID == mapper.map("1.2.3.4.5")
    kept = ds.VOILUTSequence[0]
    assert {e.keyword for e in kept} == {"LUTDescriptor", "LUTData"}
    assert list(kept.LUTData) == [0, 65535]
    assert report.private_removed == 3
    assert "ReferencedSeriesSequence" in report.removed


def test_kept_attributes_with_text_in_them_are_dropped():
    """Coded strings must be defined terms and numbers numbers: no free text survives."""
    ds = Dataset()
    ds.Modality = "DOE JOHN"
    ds.ViewPosition = "PA"
    ds.ImageLaterality = "L"
    ds.ImageType = ["DERIVED", "PRIMARY", "JOHN DOE"]
    ds.add_new(0x00281050, "DS", "40")  # Window Center
    ds.add_new(0x00281051, "LO", "JOHN DOE")  # Window Width with a planted value
    ds.WindowCenterWidthExplanation = "Doe^John"
    report = deidentify(ds, UidMapper())
    assert "Modality" not in ds and "WindowWidth" not in ds
    assert "WindowCenterWidthExplanation" not in ds
    assert ds.ViewPosition == "PA" and ds.ImageLaterality == "L"
    assert list(ds.ImageType) == ["DERIVED", "PRIMARY"]
    assert ds.WindowCenter == 40
    assert {"Modality", "WindowWidth"} <= set(report.dropped_values)


def test_burned_in_annotation_is_reported_and_kept(tmp_path):
    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    ds.BurnedInAnnotation = "YES"
    src = tmp_path / "burned.dcm"
    ds.save_as(src)
    data, report, cleaned = deidentify_file(src, UidMapper())
    assert report.warnings == [
        "BurnedInAnnotation is YES: burned-in text may identify the patient; check the image"
    ]
    assert cleaned.BurnedInAnnotation == "YES"
    stored = tmp_path / "stored.dcm"
    stored.write_bytes(data)
    assert load_image(stored).meta["burned_in_annotation"] == "YES"
    no = Dataset()
    no.BurnedInAnnotation = "NO"
    assert deidentify(no, UidMapper()).warnings == []


def _displayable_test_files() -> list[str]:
    # Globbed from the two folders: get_testdata_files() tries (and fails) to download first.
    import data_store
    import pydicom.data

    from radconcord.backend.imaging.load import ImageLoadError

    folders = [Path(pydicom.data.__file__).parent / "test_files",
               Path(data_store.__file__).parent / "data"]
    out = []
    for path in sorted(str(p) for folder in folders for p in folder.rglob("*.dcm")):
        try:
            load_image(path)
        except ImageLoadError:
            continue
        out.append(path)
    return out


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_every_displayable_pydicom_test_file_displays_the_same_after_deid(tmp_path):
    """Big endian, palette colour, RLE, JPEG, JPEG 2000, multi-frame, signed, 32-bit...:
    the re-encoded pixels give exactly what the viewer showed of the original."""
    files = _displayable_test_files()
    assert len(files) >= 100
    stored = tmp_path / "stored.dcm"
    for path in files:
        data, _, _ = deidentify_file(path, UidMapper(salt="all"))
        stored.write_bytes(data)
        before, after = load_image(path), load_image(stored)
        np.testing.assert_array_equal(after.pixels, before.pixels, err_msg=path)
        assert (after.windows, after.invert_for_display, after.voi_lut is None) == (
            before.windows, before.invert_for_display, before.voi_lut is None), path
        assert after.meta["transfer_syntax"] == "1.2.840.10008.1.2.1"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_big_endian_voi_lut_keeps_its_values(tmp_path):
    """OW LUT data is kept in the file's byte order: swapped when written little endian."""
    ds = pydicom.dcmread(get_testdata_file("MR_small_bigendian.dcm"))
    item = Dataset()
    item.add_new(0x00283002, "US", [4096, 0, 16])
    item.add_new(0x00283006, "OW", (np.arange(4096, dtype=">u2") * 16).tobytes())
    ds.VOILUTSequence = Sequence([item])
    src = tmp_path / "be.dcm"
    ds.save_as(src)
    data, _, cleaned = deidentify_file(src, UidMapper())
    stored = tmp_path / "stored.dcm"
    stored.write_bytes(data)
    before, after = load_image(src), load_image(stored)
    assert before.voi_lut is not None and after.voi_lut is not None
    np.testing.assert_array_equal(after.voi_lut.table, before.voi_lut.table)
    assert np.ptp(after.voi_lut.table) > 0
    np.testing.assert_array_equal(after.pixels, before.pixels)
    for preset in ("header", "lung", "bone"):
        settings = RenderSettings(preset=preset)
        assert render_png(after, settings) == render_png(before, settings)


def test_non_ascii_pseudonym_is_written_as_utf8(tmp_path):
    data, _, _ = deidentify_file(get_testdata_file("CT_small.dcm"), UidMapper(),
                                 patient_pseudonym="Études-07")
    cleaned = pydicom.dcmread(io.BytesIO(data))
    assert cleaned.SpecificCharacterSet == "ISO_IR 192"
    assert cleaned.PatientName == "Études-07" and cleaned.PatientID == "Études-07"


def test_file_without_transfer_syntax_is_read_in_its_own_encoding(tmp_path):
    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    del ds.file_meta.TransferSyntaxUID
    src = tmp_path / "no_syntax.dcm"
    ds.save_as(src, implicit_vr=False, little_endian=True)
    data, _, _ = deidentify_file(src, UidMapper())
    stored = tmp_path / "stored.dcm"
    stored.write_bytes(data)
    np.testing.assert_array_equal(load_image(stored).pixels,
                                  load_image(get_testdata_file("CT_small.dcm")).pixels)
