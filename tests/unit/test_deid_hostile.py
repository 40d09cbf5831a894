"""De-identification against the hostile corpus: nothing planted survives, pixels are kept."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pydicom
import pytest
from PIL import Image

from radconcord.backend.imaging.deid import (
    BURNED_IN_WARNING,
    UidMapper,
    clean_raster,
    deidentify_file,
)
from radconcord.backend.imaging.load import load_image
from radconcord.backend.imaging.render import RenderSettings, render_png
from radconcord.backend.imaging.window import PRESETS

HOSTILE = Path(__file__).resolve().parent.parent / "hostile_corpus.py"


def _corpus_module():
    import importlib.util
    import sys

    if "hostile_corpus" not in sys.modules:
        spec = importlib.util.spec_from_file_location("hostile_corpus", HOSTILE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["hostile_corpus"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["hostile_corpus"]


hc = _corpus_module()
# The corpus CT has bytes planted after its last pixel; pydicom warns about them on reading.
pytestmark = pytest.mark.filterwarnings("ignore:The pixel data is .* excess padding")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return hc.build(tmp_path_factory.mktemp("hostile"))


def _assert_displays_identically(original: Path, stored: Path) -> None:
    before, after = load_image(original), load_image(stored)
    np.testing.assert_array_equal(after.pixels, before.pixels)
    assert after.invert_for_display == before.invert_for_display
    for preset in (p for p in PRESETS if p != "manual"):
        settings = RenderSettings(preset=preset)
        assert render_png(after, settings) == render_png(before, settings), preset


def test_corpus_plants_identifiers_in_every_file(corpus):
    """The corpus is hostile: 20+ DICOM places, and every file carries every identifier."""
    assert len(corpus.dicom_planted) >= 20
    for keyword in ("PatientTelecomInformation", "PatientBirthDateInAlternativeCalendar",
                    "ClinicalTrialSubjectID", "DetectorDescription", "InstitutionName",
                    "OperatorsName"):
        assert keyword in corpus.dicom_planted
    for path in corpus.files:
        assert len(hc.find_planted(path.read_bytes())) >= len(hc.PLANTED), path.name


@pytest.mark.parametrize("name", ["ct.dcm", "dx_jpeg.dcm"])
def test_dicom_keeps_nothing_planted_and_displays_identically(corpus, name, tmp_path):
    src = corpus.folder / name
    data, report, cleaned = deidentify_file(src, UidMapper(salt="hostile"))
    assert hc.find_planted(data) == []
    stored = tmp_path / "stored.dcm"
    stored.write_bytes(data)
    _assert_displays_identically(src, stored)
    reread = pydicom.dcmread(stored)
    assert reread.preamble == b"\x00" * 128
    assert not any(e.tag.is_private for e in reread.iterall())
    assert not any(0x5000 <= e.tag.group <= 0x60FF for e in reread.iterall())
    assert set(reread.file_meta.keys()) <= {
        0x00020000, 0x00020001, 0x00020002, 0x00020003, 0x00020010, 0x00020012, 0x00020013}
    assert reread.PatientName == "" and reread.PatientID == ""
    assert reread.PatientIdentityRemoved == "YES"
    assert report.private_removed >= 2


def test_burned_in_annotation_flagged_and_kept(corpus, tmp_path):
    data, report, _ = deidentify_file(corpus.folder / "dx_jpeg.dcm", UidMapper())
    assert report.warnings == [BURNED_IN_WARNING]
    stored = tmp_path / "dx.dcm"
    stored.write_bytes(data)
    image = load_image(stored)
    assert image.meta["burned_in_annotation"] == "YES"
    assert image.view == "PA" and image.voi_lut is not None
    _, ct_report, _ = deidentify_file(corpus.folder / "ct.dcm", UidMapper())
    assert ct_report.warnings == []


@pytest.mark.parametrize("name", ["grey16.png", "rgb.png", "palette.png", "photo.jpg",
                                  "grey.jpg"])
def test_raster_is_reencoded_with_pixels_only(corpus, name, tmp_path):
    src = corpus.folder / name
    fmt = "jpeg" if name.endswith(".jpg") else "png"
    data, stored_fmt = clean_raster(src.read_bytes(), fmt)
    assert stored_fmt == "png"
    assert hc.find_planted(data) == []
    assert hc.png_chunk_types(data) == [b"IHDR", b"IDAT", b"IEND"]
    stored = tmp_path / "stored.png"
    stored.write_bytes(data)
    _assert_displays_identically(src, stored)


def test_raster_pixels_exact_for_8_and_16_bit_grey_and_rgb(corpus):
    for name, mode in (("grey16.png", "I;16"), ("rgb.png", "RGB"), ("grey.jpg", "L"),
                       ("photo.jpg", "RGB")):
        src = (corpus.folder / name).read_bytes()
        out, _ = clean_raster(src, "jpeg" if name.endswith(".jpg") else "png")
        with Image.open(io.BytesIO(src)) as a, Image.open(io.BytesIO(out)) as b:
            assert b.mode == mode
            np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


def test_clean_raster_refuses_what_is_not_an_image():
    from radconcord.backend.imaging.deid import DeidentificationError

    with pytest.raises(DeidentificationError, match="not a valid PNG"):
        clean_raster(b"GIF89a", "png")
    with pytest.raises(DeidentificationError, match="not a PNG or JPEG"):
        clean_raster(b"\x89PNG", "gif")
    with pytest.raises(DeidentificationError, match="cannot decode JPEG"):
        clean_raster(b"\xff\xd8\xff\xc0\x00\x11\x08\x00\x10\x00\x10\x01\x01\x11\x00", "jpeg")
