"""Image loading, windowing and rendering (backend.imaging.load/window/render)."""

from __future__ import annotations

import io

import numpy as np
import pydicom
import pytest
from PIL import Image
from pydicom.data import get_testdata_file

from radconcord.backend.imaging.load import ImageLoadError, LoadedImage, load_image
from radconcord.backend.imaging.render import RenderSettings, crop_box, render_array, render_png
from radconcord.backend.imaging.window import (
    apply_linear,
    apply_window,
    body_range,
    percentile_range,
    resolve_window,
)


def _png_array(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        assert img.format == "PNG"
        assert img.mode == "L"
        return np.asarray(img)


@pytest.fixture(scope="module")
def rg1() -> LoadedImage:
    return load_image(get_testdata_file("RG1_UNCR.dcm"))


def test_cr_monochrome1_header_window(rg1):
    assert rg1.format == "dicom"
    assert rg1.photometric == "MONOCHROME1"
    assert rg1.invert_for_display is True
    assert rg1.windows == ((15000.0, 30000.0),)
    assert rg1.view == "PA" and rg1.modality == "CR"
    assert rg1.pixels.dtype == np.float32 and rg1.pixels.shape == (1955, 1841)
    raw = pydicom.dcmread(get_testdata_file("RG1_UNCR.dcm")).pixel_array
    np.testing.assert_array_equal(rg1.pixels, raw.astype(np.float32))


def test_monochrome1_lowest_value_renders_white(rg1):
    arr, window = render_array(rg1, RenderSettings(max_side=4096))
    assert window.source == "header"
    low = rg1.pixels == rg1.pixels.min()
    high = rg1.pixels == rg1.pixels.max()
    # MONOCHROME1: minimum stored value is displayed as white.
    assert arr[low].mean() > arr[high].mean() + 100
    inverted, _ = render_array(rg1, RenderSettings(max_side=4096, invert=True))
    assert inverted[low].mean() < inverted[high].mean() - 100


def test_jpeg2000_decodes_close_to_uncompressed(rg1):
    j2k = load_image(get_testdata_file("RG1_J2KI.dcm"))
    assert j2k.pixels.shape == rg1.pixels.shape
    assert j2k.meta["transfer_syntax"] == "1.2.840.10008.1.2.4.91"
    # Lossy compression: close, not equal.
    rel = np.abs(j2k.pixels - rg1.pixels).mean() / rg1.pixels.mean()
    assert 0 < rel < 0.02


def test_ct_modality_lut_gives_hounsfield():
    path = get_testdata_file("CT_small.dcm")
    ds = pydicom.dcmread(path)
    image = load_image(path)
    expected = ds.pixel_array.astype(np.float32) * float(ds.RescaleSlope) + float(
        ds.RescaleIntercept
    )
    np.testing.assert_allclose(image.pixels, expected)
    assert image.hounsfield
    lung = resolve_window(image, "lung")
    assert (lung.center, lung.width, lung.source) == (-600.0, 1500.0, "ct-preset")
    bone = resolve_window(image, "bone")
    assert (bone.center, bone.width) == (400.0, 1800.0)


def test_multi_valued_window_first_is_default():
    image = load_image(get_testdata_file("MR-SIEMENS-DICOM-WithOverlays.dcm"))
    assert image.windows == ((450.0, 790.0), (200.0, 443.0))
    assert image.window_explanations == ("WINDOW1", "WINDOW2")
    window = resolve_window(image, "header")
    assert (window.center, window.width) == (450.0, 790.0)


def test_voi_lut_sequence_is_applied():
    path = get_testdata_file("vlut_04.dcm")
    ds = pydicom.dcmread(path)
    image = load_image(path)
    assert image.voi_lut is not None
    window = resolve_window(image, "header")
    assert window.lut is image.voi_lut
    out = apply_window(image.pixels, window)
    # Reference: pydicom's own VOI LUT application, scaled by the LUT's bit depth.
    expected = pydicom.pixels.apply_voi_lut(ds.pixel_array, ds, prefer_lut=True)
    bits = int(ds.VOILUTSequence[0].LUTDescriptor[2])
    np.testing.assert_allclose(out, expected / (2**bits - 1), atol=1e-6)


def test_multiframe_gives_first_frame():
    path = get_testdata_file("emri_small.dcm")
    ds = pydicom.dcmread(path)
    image = load_image(path)
    assert ds.pixel_array.ndim == 3
    np.testing.assert_array_equal(image.pixels, ds.pixel_array[0].astype(np.float32))
    assert image.meta["frames"] == int(ds.NumberOfFrames)


def test_png_8bit_header_is_identity(tmp_path):
    arr = (np.arange(64 * 64) % 256).astype(np.uint8).reshape(64, 64)
    path = tmp_path / "x.png"
    Image.fromarray(arr).save(path)
    image = load_image(path)
    assert image.format == "png" and image.bits == 8
    out = _png_array(render_png(image))
    np.testing.assert_array_equal(out, arr)


def test_png_16bit_uses_percentile_fallback(tmp_path):
    rng = np.random.default_rng(0)
    arr = rng.integers(1000, 3000, size=(50, 40)).astype(np.uint16)
    path = tmp_path / "x16.png"
    Image.fromarray(arr).save(path)
    image = load_image(path)
    assert image.bits == 16
    np.testing.assert_array_equal(image.pixels, arr.astype(np.float32))
    window = resolve_window(image, "header")
    assert window.source == "percentile"
    lo, hi = np.percentile(arr, [0.5, 99.5])
    assert window.center == pytest.approx((lo + hi) / 2)
    assert window.width == pytest.approx(hi - lo)


def test_rgb_png_and_jpeg_become_grey(tmp_path):
    rgb = np.zeros((20, 30, 3), dtype=np.uint8)
    rgb[..., 0] = 200
    Image.fromarray(rgb).save(tmp_path / "c.png")
    Image.fromarray(rgb).save(tmp_path / "c.jpg", quality=95)
    for name, fmt in (("c.png", "png"), ("c.jpg", "jpeg")):
        image = load_image(tmp_path / name)
        assert image.format == fmt
        assert image.pixels.shape == (20, 30)
        assert image.pixels.mean() == pytest.approx(0.299 * 200, abs=3)


@pytest.mark.filterwarnings("ignore:.*VR:UserWarning")
def test_corrupt_and_non_image_files_name_the_file(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    with pytest.raises(ImageLoadError, match="notes.txt"):
        load_image(text)
    fake_dcm = tmp_path / "broken.dcm"
    fake_dcm.write_bytes(b"\x00" * 128 + b"DICM" + b"\x02\x00garbage")
    with pytest.raises(ImageLoadError, match="broken.dcm"):
        load_image(fake_dcm)
    truncated = tmp_path / "cut.png"
    Image.fromarray(np.zeros((32, 32), np.uint8)).save(truncated)
    truncated.write_bytes(truncated.read_bytes()[:40])
    with pytest.raises(ImageLoadError, match="cut.png"):
        load_image(truncated)
    with pytest.raises(ImageLoadError, match="missing.png"):
        load_image(tmp_path / "missing.png")


def test_dicom_without_pixel_data_is_rejected(tmp_path):
    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    del ds.PixelData
    path = tmp_path / "nopix.dcm"
    ds.save_as(path)
    with pytest.raises(ImageLoadError, match="nopix.dcm.*no pixel data"):
        load_image(path)


def test_linear_window_matches_dicom_formula():
    x = np.array([-10.0, 39.5, 40.0, 50.0, 60.0, 60.5, 100.0], dtype=np.float32)
    # c=50, w=21: x <= 39.5 -> 0; x > 59.5 -> 1; else ((x - 49.5)/20 + 0.5).
    out = apply_linear(x, 50.0, 21.0)
    np.testing.assert_allclose(out, [0, 0, 0.025, 0.525, 1, 1, 1], atol=1e-6)


def test_relative_presets_follow_display_orientation(rg1):
    lung = resolve_window(rg1, "lung")
    bone = resolve_window(rg1, "bone")
    p1, p99 = percentile_range(rg1.pixels, 1, 99)
    span = p99 - p1
    b_lo, b_hi = body_range(rg1.pixels)
    body = b_hi - b_lo
    assert lung.source == bone.source == "relative-preset"
    # MONOCHROME1: dark display = high stored values, so lung sits above bone in raw values.
    # Lung: relative to the body range, a sigmoid (tests/unit/test_lung_preset.py says why).
    assert (lung.function, bone.function) == ("SIGMOID", "LINEAR_EXACT")
    assert lung.center == pytest.approx(b_hi - 0.45 * body)
    assert bone.center == pytest.approx(p99 - 0.70 * span)
    assert lung.width == pytest.approx(0.70 * body) and bone.width == pytest.approx(0.60 * span)


def test_manual_window_validation(rg1):
    with pytest.raises(ValueError, match="center and width"):
        resolve_window(rg1, "manual", center=100.0)
    with pytest.raises(ValueError, match="width > 0"):
        resolve_window(rg1, "manual", center=100.0, width=0.0)
    with pytest.raises(ValueError, match="unknown window preset"):
        resolve_window(rg1, "soft")
    window = resolve_window(rg1, "manual", center=10000.0, width=5000.0)
    assert (window.center, window.width, window.function) == (10000.0, 5000.0, "LINEAR")


def test_crop_box_stays_inside():
    assert crop_box(100, 200, 2.0, 0.5, 0.5) == (25, 50, 75, 150)
    assert crop_box(100, 200, 4.0, 0.0, 1.0) == (75, 0, 100, 50)
    assert crop_box(100, 200, 1.0, 0.9, 0.1) == (0, 0, 100, 200)


def test_zoom_renders_the_crop_without_changing_brightness():
    ramp = np.tile(np.arange(200, dtype=np.float32), (100, 1))
    image = LoadedImage(pixels=ramp, format="dicom", photometric="MONOCHROME2",
                        windows=((100.0, 200.0),), bits=16)
    full = _png_array(render_png(image, RenderSettings(max_side=1000)))
    zoomed = _png_array(render_png(image, RenderSettings(zoom=2.0, zoom_x=0.25,
                                                         max_side=1000)))
    assert zoomed.shape == (50, 100)
    np.testing.assert_array_equal(zoomed, full[25:75, 0:100])


def test_output_respects_max_side_and_thumbnail(rg1):
    out = _png_array(render_png(rg1, RenderSettings(max_side=512)))
    assert max(out.shape) == 512
    assert out.shape[0] / out.shape[1] == pytest.approx(1955 / 1841, rel=0.01)
    with pytest.raises(ValueError, match="zoom"):
        render_png(rg1, RenderSettings(zoom=0.5))


def _png_claiming(width: int, height: int) -> bytes:
    """A valid small PNG whose IHDR (CRC fixed) claims ``width`` x ``height`` pixels."""
    import struct
    import zlib

    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])) & 0xFFFFFFFF)
    return bytes(data)


def _jpeg_claiming(width: int, height: int) -> bytes:
    import struct

    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(buf, format="JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_header_over_the_pixel_limit_is_refused_before_decoding(tmp_path, fmt):
    """A 30000 x 30000 header gives the one-line error, not Pillow's DecompressionBombError."""
    from radconcord.backend.imaging.deid import DeidentificationError, clean_raster

    data = (_png_claiming if fmt == "png" else _jpeg_claiming)(30000, 30000)
    path = tmp_path / f"bomb.{'png' if fmt == 'png' else 'jpg'}"
    path.write_bytes(data)
    with pytest.raises(ImageLoadError) as err:
        load_image(path)
    assert str(err.value) == (
        f"{path}: image of 30000 x 30000 pixels exceeds the limit of 67108864 pixels per "
        "frame (8192 x 8192)"
    )
    with pytest.raises(DeidentificationError, match="exceeds the limit of 67108864 pixels"):
        clean_raster(data, fmt)


def test_pixel_limit_boundaries_and_pillow_agrees():
    from radconcord.backend.imaging.load import (
        MAX_FRAMES,
        MAX_PIXELS_PER_FRAME,
        MAX_TOTAL_PIXELS,
        check_pixel_limit,
    )

    assert MAX_PIXELS_PER_FRAME == 8192 * 8192
    assert Image.MAX_IMAGE_PIXELS == MAX_PIXELS_PER_FRAME
    check_pixel_limit("f", 8192, 8192)
    check_pixel_limit("f", 512, 512, MAX_FRAMES)
    with pytest.raises(ImageLoadError, match="f: image of 8192 x 8193 pixels exceeds"):
        check_pixel_limit("f", 8193, 8192)
    with pytest.raises(ImageLoadError, match=f"f: {MAX_FRAMES + 1} frames exceed the limit"):
        check_pixel_limit("f", 4, 4, MAX_FRAMES + 1)
    with pytest.raises(ImageLoadError, match=f"limit of {MAX_TOTAL_PIXELS} pixels per file"):
        check_pixel_limit("f", 8192, 8192, 5)
    with pytest.raises(ImageLoadError, match="header claims 0 x 4 pixels"):
        check_pixel_limit("f", 4, 0)


@pytest.mark.parametrize(("rows", "frames", "message"), [
    (30000, None, "image of 30000 x 30000 pixels exceeds the limit of 67108864 pixels"),
    (16, "100000", "100000 frames exceed the limit of"),
])
def test_dicom_over_the_pixel_limit_is_refused(tmp_path, rows, frames, message):
    from radconcord.backend.imaging.deid import DeidentificationError, UidMapper, deidentify_file

    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    ds.Rows = ds.Columns = rows
    if frames is not None:
        ds.NumberOfFrames = frames
    path = tmp_path / "huge.dcm"
    ds.save_as(path)
    with pytest.raises(ImageLoadError) as err:
        load_image(path)
    assert str(err.value).startswith(f"{path}: {message}")
    with pytest.raises(DeidentificationError) as err2:
        deidentify_file(path, UidMapper())
    assert str(err2.value).startswith(f"{path}: {message}")


def test_palette_colour_dicom_shows_the_palette_colours():
    from pydicom.pixels import apply_color_lut

    path = get_testdata_file("examples_palette.dcm")
    ds = pydicom.dcmread(path)
    rgb = apply_color_lut(ds.pixel_array, ds).astype(np.float32)
    image = load_image(path)
    expected = rgb @ np.asarray([0.299, 0.587, 0.114], dtype=np.float32)
    np.testing.assert_allclose(image.pixels, expected, rtol=1e-6)
    assert not np.array_equal(image.pixels, ds.pixel_array.astype(np.float32))


def _jpeg_dicom_claiming(tmp_path, width: int | None, height: int | None):
    """An 8-bit DICOM (48 x 64 in its header) whose JPEG frame claims ``width`` x ``height``
    (None: an honest 64 x 48 frame)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGBaseline8Bit, generate_uid

    if width is None:
        buf = io.BytesIO()
        Image.fromarray(np.full((48, 64), 90, np.uint8)).save(buf, format="JPEG")
        frame = buf.getvalue()
    else:
        frame = _jpeg_claiming(width, height)
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = JPEGBaseline8Bit
    ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
    ds.SOPInstanceUID = generate_uid()
    ds.Rows, ds.Columns = 48, 64
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated = ds.BitsStored = 8
    ds.HighBit, ds.PixelRepresentation = 7, 0
    ds.PixelData = encapsulate([frame])
    ds["PixelData"].VR = "OB"
    path = tmp_path / "claims.dcm"
    ds.save_as(path, enforce_file_format=True)
    return path


def _j2k_dicom_claiming(tmp_path, width: int | None, height: int | None):
    """RG1_J2KI.dcm with its JPEG 2000 SIZ marker claiming ``width`` x ``height`` (None: as
    it is)."""
    import struct

    if width is None:
        return get_testdata_file("RG1_J2KI.dcm")
    ds = pydicom.dcmread(get_testdata_file("RG1_J2KI.dcm"))
    data = bytearray(ds.PixelData)
    siz = data.index(b"\xff\x4f\xff\x51") + 8
    data[siz : siz + 16] = struct.pack(">IIII", width, height, 0, 0)
    ds.PixelData = bytes(data)
    path = tmp_path / "claims_j2k.dcm"
    ds.save_as(path)
    return path


@pytest.mark.parametrize("make", [_jpeg_dicom_claiming, _j2k_dicom_claiming])
def test_compressed_frame_claiming_more_than_its_header_is_refused(tmp_path, make):
    """The decoder allocates what the codestream says: its header is checked too."""
    from radconcord.backend.imaging.deid import DeidentificationError, UidMapper, deidentify_file

    path = make(tmp_path, 9000, 9000)
    message = "image of 9000 x 9000 pixels exceeds the limit of 67108864 pixels per frame"
    with pytest.raises(ImageLoadError) as err:
        load_image(path)
    assert str(err.value).startswith(f"{path}: {message}")
    with pytest.raises(DeidentificationError) as err2:
        deidentify_file(path, UidMapper())
    assert str(err2.value).startswith(f"{path}: {message}")
    # With an honest frame header the same kind of file loads and de-identifies.
    honest = make(tmp_path, None, None)
    assert load_image(honest).pixels.size > 0
    deidentify_file(honest, UidMapper())
