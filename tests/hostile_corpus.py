"""A hostile image corpus, built by the tests: identifiers planted wherever a file can hide text.

Files (all small, made from pydicom's CT_small.dcm and synthetic pixels):

- ``ct.dcm``: a CT with a planted name, ID or phone number in 30+ standard attributes (among
  them Patient Telecom Information, Patient Birth Date in Alternative Calendar, Clinical Trial
  Subject ID, Detector Description, Institution Name, Operators' Name), private creators and
  private elements (one a private sequence), sequences nested to depth 3, a VOI LUT item (an
  attribute the allow-list keeps) carrying text and a private element, overlay and curve
  groups, Data Set Trailing Padding, bytes after the last pixel, the 128-byte preamble, and the
  file meta's source/sending/receiving AE titles, implementation version name and private
  information.
- ``dx_jpeg.dcm``: an 8-bit DX whose encapsulated JPEG frame holds EXIF, a comment segment
  and bytes after its end-of-image marker; Burned In Annotation is YES.
- ``grey16.png``, ``rgb.png``, ``palette.png``: tEXt, zTXt, iTXt, eXIf, iCCP, tIME and
  private chunks before and after the image data, and bytes after IEND.
- ``photo.jpg``, ``grey.jpg``: EXIF, XMP, an ICC profile, IPTC (APP13), a comment segment
  and bytes after the end-of-image marker.

Load this module by path (see ``load``): the radgraph wheel installs a top-level ``tests``
package that shadows this folder's.
"""

from __future__ import annotations

import importlib.util
import io
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
import pydicom
from PIL import Image, PngImagePlugin
from pydicom import config as dicom_config
from pydicom.data import get_testdata_file
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.encaps import encapsulate
from pydicom.sequence import Sequence
from pydicom.uid import JPEGBaseline8Bit, generate_uid

FAMILY = "QUAXMIRE"
GIVEN = "ZEBULON"
PATIENT_NAME = f"{FAMILY}^{GIVEN}"
PATIENT_ID = "QXID4471ZK"
PHONE = "+1-555-014-7789"
# Every planted value contains at least one of these; none of them occurs by chance.
PLANTED = (FAMILY, GIVEN, PATIENT_ID, PHONE)


def load() -> ModuleType:
    """This module, imported by path once per process."""
    name = "hostile_corpus"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__))
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _variants(token: str) -> list[tuple[str, bytes]]:
    out = []
    for label, encoding in (("ascii", "ascii"), ("utf-16-le", "utf-16-le"),
                            ("utf-16-be", "utf-16-be")):
        out.append((label, token.lower().encode(encoding)))
    return out


def find_planted(data: bytes) -> list[str]:
    """The planted identifiers found in ``data`` (case-insensitive; ASCII and UTF-16).

    Returns:
        ``"TOKEN (encoding)"`` for each hit; empty when the bytes are clean.
    """
    low = data.lower()
    return [f"{token} ({label})" for token in PLANTED for label, needle in _variants(token)
            if needle in low]


@dataclass
class Corpus:
    """The corpus files and what was planted where."""

    folder: Path
    dicom: list[Path] = field(default_factory=list)
    png: list[Path] = field(default_factory=list)
    jpeg: list[Path] = field(default_factory=list)
    dicom_planted: list[str] = field(default_factory=list)
    burned_in: list[Path] = field(default_factory=list)

    @property
    def files(self) -> list[Path]:
        """Every file of the corpus."""
        return [*self.dicom, *self.png, *self.jpeg]


def _planted_ct(corpus: Corpus) -> Path:
    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    planted = corpus.dicom_planted

    def put(keyword: str, value: object) -> None:
        setattr(ds, keyword, value)
        planted.append(keyword)

    put("PatientName", PATIENT_NAME)
    put("PatientID", PATIENT_ID)
    put("OtherPatientIDs", PATIENT_ID)
    put("PatientTelecomInformation", f"tel {PHONE}")
    put("PatientBirthDateInAlternativeCalendar", f"{GIVEN} 5784")
    put("ClinicalTrialSubjectID", PATIENT_ID)
    put("ClinicalTrialSponsorName", f"{FAMILY} trials")
    put("ClinicalTrialSiteName", f"{GIVEN} site")
    put("DetectorDescription", f"detector of {PATIENT_NAME}")
    put("InstitutionName", f"{FAMILY} clinic")
    put("InstitutionAddress", f"1 Main St, {PHONE}")
    put("InstitutionalDepartmentName", f"{GIVEN} ward")
    put("OperatorsName", PATIENT_NAME)
    put("ReferringPhysicianName", f"{GIVEN}^{FAMILY}")
    put("ReferringPhysicianTelephoneNumbers", PHONE)
    put("PatientAddress", f"{GIVEN} road, {PHONE}")
    put("PatientTelephoneNumbers", PHONE)
    put("PatientMotherBirthName", f"{FAMILY}^MOTHER")
    put("PatientComments", f"call {PHONE}")
    put("IssuerOfPatientID", f"{FAMILY} HOSPITAL")
    put("AccessionNumber", PATIENT_ID)
    put("StudyID", PATIENT_ID)
    put("StudyDescription", f"chest of {PATIENT_NAME}")
    put("SeriesDescription", f"{GIVEN} series")
    put("ImageComments", f"{PATIENT_NAME} {PHONE}")
    put("StationName", FAMILY)
    put("DeviceSerialNumber", PATIENT_ID)
    put("ResponsiblePerson", PATIENT_NAME)
    put("AcquisitionDeviceProcessingDescription", f"{GIVEN} processing")
    put("PerformedProcedureStepDescription", f"{FAMILY} step")
    put("ProtocolName", f"{GIVEN} protocol")
    put("BodyPartExamined", FAMILY)
    put("PatientBirthDate", "19400305")
    # Free text in attributes next to the kept ones, and in a kept coded string.
    put("WindowCenterWidthExplanation", f"{FAMILY} WINDOW")
    put("ImageType", ["ORIGINAL", "PRIMARY", FAMILY])

    # Private creators and elements, one of them a private sequence with a name in it.
    ds.add_new(0x00090010, "LO", f"{FAMILY} CORP")
    ds.add_new(0x00091001, "LO", PATIENT_NAME)
    ds.add_new(0x00091002, "UN", PHONE.encode() + b"\x00")
    ds.add_new(0x00091003, "OB", f"{PATIENT_NAME} {PATIENT_ID}".encode("utf-16-le"))
    ds.add_new(0x00110010, "LO", "ACME 1.1")
    private_item = Dataset()
    private_item.PatientName = PATIENT_NAME
    private_item.add_new(0x00130010, "LO", "ACME NESTED")
    private_item.add_new(0x00131001, "LT", PATIENT_ID)
    ds.add_new(0x00111001, "SQ", Sequence([private_item]))
    planted += ["private (0009,1001)", "private (0009,1002) UN", "private (0009,1003) UTF-16",
                "private SQ (0011,1001)"]

    # Standard sequences nested to depth 3.
    depth3 = Dataset()
    depth3.TextValue = f"call {PHONE}"
    depth3.add_new(0x00150010, "LO", "DEEP")
    depth3.add_new(0x00151001, "LO", PATIENT_ID)
    code = Dataset()
    code.CodeValue = "X1"
    code.CodingSchemeDesignator = "99LOCAL"
    code.CodeMeaning = f"protocol for {PATIENT_NAME}"
    code.ProtocolContextSequence = Sequence([depth3])
    request = Dataset()
    request.RequestedProcedureID = PATIENT_ID
    request.ScheduledProtocolCodeSequence = Sequence([code])
    ds.RequestAttributesSequence = Sequence([request])
    issuer = Dataset()
    issuer.UniversalEntityID = PHONE
    other = Dataset()
    other.PatientID = PATIENT_ID
    other.IssuerOfPatientIDQualifiersSequence = Sequence([issuer])
    ds.OtherPatientIDsSequence = Sequence([other])
    referenced = Dataset()
    referenced.ReferencedSOPClassUID = ds.SOPClassUID
    referenced.ReferencedSOPInstanceUID = generate_uid()
    referenced.add_new(0x00171001, "LO", FAMILY)  # private element without its creator
    ds.ReferencedImageSequence = Sequence([referenced])
    planted += ["RequestAttributesSequence > ScheduledProtocolCodeSequence > "
                "ProtocolContextSequence (depth 3)", "OtherPatientIDsSequence (depth 2)",
                "ReferencedImageSequence private"]

    # Overlay and curve groups.
    ds.add_new(0x60000010, "US", 4)
    ds.add_new(0x60000011, "US", 4)
    ds.add_new(0x60000022, "LO", f"overlay of {PATIENT_NAME}")
    ds.add_new(0x60001500, "LO", FAMILY)
    ds.add_new(0x60003000, "OW", PATIENT_NAME.encode())
    ds.add_new(0x50002500, "LO", GIVEN)
    ds.add_new(0x50003000, "OB", PHONE.encode() + b"\x00")
    planted += ["OverlayDescription", "OverlayLabel", "OverlayData", "CurveLabel", "CurveData"]

    # Bytes after the last pixel and after the data set.
    ds.PixelData = ds.PixelData + PATIENT_ID.encode()
    ds.add_new(0xFFFCFFFC, "OB", PHONE.encode() + b"\x00")
    planted += ["PixelData trailer", "DataSetTrailingPadding"]

    meta = ds.file_meta
    meta.SourceApplicationEntityTitle = FAMILY
    meta.SendingApplicationEntityTitle = GIVEN
    meta.ReceivingApplicationEntityTitle = PATIENT_ID
    meta.ImplementationVersionName = PATIENT_ID
    meta.PrivateInformationCreatorUID = "1.2.826.0.1.3680043.2.1143.999"
    meta.PrivateInformation = PATIENT_NAME.encode()
    ds.preamble = (f"{PATIENT_NAME} {PHONE}".encode()).ljust(128, b"\x00")
    planted += ["SourceApplicationEntityTitle", "SendingApplicationEntityTitle",
                "ReceivingApplicationEntityTitle", "ImplementationVersionName",
                "PrivateInformation", "preamble"]
    path = corpus.folder / "ct.dcm"
    with dicom_config.disable_value_validation():
        ds.save_as(path, enforce_file_format=True)
    return path


def _jpeg_bytes(arr: np.ndarray, *, trailer: bytes = b"", iptc: bool = False,
                **params: object) -> bytes:
    exif = Image.Exif()
    exif[0x010E] = f"chest film of {PATIENT_NAME}"  # ImageDescription
    exif[0x013B] = PATIENT_NAME  # Artist
    exif[0x8298] = PHONE  # Copyright
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=92, exif=exif,
                              comment=f"{PATIENT_ID} {PHONE}".encode(), **params)
    data = buf.getvalue()
    if iptc:
        payload = b"Photoshop 3.0\x00" + f"by-line {PATIENT_NAME}".encode()
        segment = b"\xff\xed" + struct.pack(">H", len(payload) + 2) + payload
        data = data[:2] + segment + data[2:]
    return data + trailer


def _jpeg_dicom(corpus: Corpus) -> Path:
    rng = np.random.default_rng(3)
    arr = (np.add.outer(np.arange(48), np.arange(64)) * 2 % 256).astype(np.uint8)
    arr[10:20, 10:40] = rng.integers(0, 255, (10, 30), dtype=np.uint8)
    frame = _jpeg_bytes(arr, trailer=PATIENT_NAME.encode())
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = JPEGBaseline8Bit
    ds.file_meta.SourceApplicationEntityTitle = GIVEN
    ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.1.1"  # Digital X-Ray Image Storage - Presentation
    ds.SOPInstanceUID = generate_uid()
    ds.StudyInstanceUID = generate_uid()
    ds.SeriesInstanceUID = generate_uid()
    ds.PatientName = PATIENT_NAME
    ds.PatientID = PATIENT_ID
    ds.Modality = "DX"
    ds.ViewPosition = "PA"
    ds.ImageLaterality = "U"
    ds.BurnedInAnnotation = "YES"
    ds.LossyImageCompression = "01"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = arr.shape
    ds.BitsAllocated = ds.BitsStored = 8
    ds.HighBit = 7
    ds.PixelRepresentation = 0
    ds.PixelSpacing = [0.5, 0.5]
    lut = Dataset()
    lut.add_new(0x00283002, "US", [256, 0, 8])  # LUT Descriptor
    lut.add_new(0x00283006, "US", [min(255, int(i * 1.3)) for i in range(256)])  # LUT Data
    lut.LUTExplanation = f"{FAMILY} LUT"
    lut.add_new(0x00290010, "LO", "LUTCORP")
    lut.add_new(0x00291001, "LO", PATIENT_NAME)
    lut.ReferencedImageSequence = Sequence([Dataset()])
    lut.ReferencedImageSequence[0].PatientName = PATIENT_NAME
    ds.VOILUTSequence = Sequence([lut])
    ds.PixelData = encapsulate([frame])
    ds["PixelData"].VR = "OB"
    path = corpus.folder / "dx_jpeg.dcm"
    ds.save_as(path, enforce_file_format=True)
    corpus.burned_in.append(path)
    return path


def _png_bytes(img: Image.Image) -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_text("Patient", PATIENT_NAME)  # tEXt
    info.add_text("Comment", f"call {PHONE}", zip=True)  # zTXt
    info.add_itxt("Author", f"{PATIENT_ID} {PATIENT_NAME}", lang="en", tkey="Autor")  # iTXt
    info.add(b"prVt", f"{PATIENT_NAME} {PATIENT_ID}".encode())  # private, before IDAT
    info.add(b"tIME", struct.pack(">HBBBBB", 2024, 3, 5, 10, 0, 0))
    info.add(b"zzZz", PHONE.encode(), after_idat=True)  # private, after IDAT
    exif = Image.Exif()
    exif[0x013B] = PATIENT_NAME
    buf = io.BytesIO()
    img.save(buf, format="PNG", pnginfo=info, exif=exif,
             icc_profile=b"\x00" * 40 + f"desc {PATIENT_NAME}".encode())
    return buf.getvalue() + f"trailer {PATIENT_ID}".encode()


def build(folder: Path) -> Corpus:
    """Write the corpus into ``folder`` (created) and describe it.

    Args:
        folder: Where the files go.

    Returns:
        The files and the list of DICOM places that hold a planted identifier.
    """
    folder.mkdir(parents=True, exist_ok=True)
    corpus = Corpus(folder=folder)
    corpus.dicom += [_planted_ct(corpus), _jpeg_dicom(corpus)]

    grey16 = (np.add.outer(np.arange(40) * 700, np.arange(48) * 13) % 65536).astype(np.uint16)
    rgb = np.stack([np.add.outer(np.arange(40), np.arange(48)) % 256 * k // 3
                    for k in (1, 2, 3)], axis=-1).astype(np.uint8)
    palette = Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    palette.info["transparency"] = 0
    for name, img in (("grey16.png", Image.fromarray(grey16)),
                      ("rgb.png", Image.fromarray(rgb)), ("palette.png", palette)):
        path = folder / name
        path.write_bytes(_png_bytes(img))
        corpus.png.append(path)

    xmp = (f'<x:xmpmeta xmlns:x="adobe:ns:meta/"><dc:creator>{PATIENT_NAME}</dc:creator>'
           "</x:xmpmeta>").encode()
    icc = b"\x00" * 40 + f"desc {PATIENT_NAME}".encode()
    for name, arr in (("photo.jpg", rgb), ("grey.jpg", rgb[..., 1])):
        path = folder / name
        path.write_bytes(_jpeg_bytes(arr, trailer=f"trailer {PATIENT_ID}".encode(), iptc=True,
                                     xmp=xmp, icc_profile=icc))
        corpus.jpeg.append(path)
    return corpus


def png_chunk_types(data: bytes) -> list[bytes]:
    """The chunk types of PNG bytes in order (the bytes must be a well-formed PNG)."""
    pos, types = 8, []
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        types.append(data[pos + 4 : pos + 8])
        pos += 12 + length
    return types



# --- Volumes (issue 25): a series, a multi-frame file and a NIfTI file with planted text ----

CT_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.2"
ENHANCED_CT_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.2.1"


def volume_pixels(index: int, rows: int = 12, cols: int = 10) -> np.ndarray:
    """Stored values of slice ``index`` of the corpus volumes (unsigned, 12 bits)."""
    return (np.add.outer(np.arange(rows) * 7, np.arange(cols) * 3) + 40 * index + 900
            ).astype(np.uint16)


def ct_slice(position: tuple[float, float, float], pixels: np.ndarray, *,
             study_uid: str, series_uid: str, frame_uid: str,
             orientation: tuple[float, ...] = (1, 0, 0, 0, 1, 0),
             spacing: tuple[float, float] = (0.75, 0.5), slope: float = 1.0,
             intercept: float = -1024.0) -> Dataset:
    """A minimal single-frame CT slice (Explicit VR Little Endian) at ``position``."""
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = pydicom.uid.ExplicitVRLittleEndian
    ds.SOPClassUID = CT_IMAGE_STORAGE
    ds.SOPInstanceUID = generate_uid()
    ds.StudyInstanceUID = study_uid
    ds.SeriesInstanceUID = series_uid
    ds.FrameOfReferenceUID = frame_uid
    ds.Modality = "CT"
    ds.ImagePositionPatient = [f"{v:.4f}" for v in position]
    ds.ImageOrientationPatient = [f"{v:.6f}" for v in orientation]
    ds.PixelSpacing = [str(v) for v in spacing]
    ds.SliceThickness = "2.5"
    ds.RescaleSlope = str(slope)
    ds.RescaleIntercept = str(intercept)
    ds.RescaleType = "HU"
    ds.WindowCenter, ds.WindowWidth = "40", "400"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = pixels.shape
    signed = pixels.dtype.kind == "i"
    ds.BitsAllocated = 16
    ds.BitsStored = 16 if signed or pixels.max(initial=0) > 4095 else 12
    ds.HighBit = ds.BitsStored - 1
    ds.PixelRepresentation = 1 if signed else 0
    ds.PixelData = pixels.astype("<i2" if signed else "<u2").tobytes()
    return ds


@dataclass
class HostileSeries:
    """A CT series whose every slice hides an identifier somewhere else.

    Attributes:
        folder: The series folder.
        files: The slice files, in slice order (their names carry identifiers too).
        planted: For each slice file, where its identifier sits.
        positions: The slices' z positions in mm, in slice order.
    """

    folder: Path
    files: list[Path] = field(default_factory=list)
    planted: dict[str, str] = field(default_factory=dict)
    positions: list[float] = field(default_factory=list)


def _plant_in_slice(ds: Dataset, index: int) -> str:
    """Put an identifier into ``ds`` in the ``index``-th way; returns where."""
    ways = (
        ("PatientName", lambda: setattr(ds, "PatientName", PATIENT_NAME)),
        ("private (0019,1010)", lambda: (ds.add_new(0x00190010, "LO", f"{FAMILY} CT"),
                                         ds.add_new(0x00191010, "LO", PATIENT_ID))),
        ("OtherPatientIDsSequence > PatientID", lambda: setattr(
            ds, "OtherPatientIDsSequence", Sequence([_other_id()]))),
        ("InstitutionName", lambda: setattr(ds, "InstitutionName", f"{FAMILY} clinic")),
        ("PatientTelephoneNumbers", lambda: setattr(ds, "PatientTelephoneNumbers", PHONE)),
        ("ImageComments", lambda: setattr(ds, "ImageComments", f"{GIVEN} slice")),
        ("AccessionNumber", lambda: setattr(ds, "AccessionNumber", PATIENT_ID)),
        ("SeriesDescription", lambda: setattr(ds, "SeriesDescription", f"chest {FAMILY}")),
        ("private SQ (0021,1001)", lambda: (ds.add_new(0x00210010, "LO", "ACME"),
                                            ds.add_new(0x00211001, "SQ", Sequence([_named()])))),
        ("ReferencedImageSequence > PatientName", lambda: setattr(
            ds, "ReferencedImageSequence", Sequence([_named()]))),
        ("file meta SourceApplicationEntityTitle", lambda: setattr(
            ds.file_meta, "SourceApplicationEntityTitle", FAMILY[:16])),
        ("preamble", lambda: setattr(ds, "preamble",
                                     f"{PATIENT_NAME} {PHONE}".encode().ljust(128, b"\x00"))),
    )
    where, plant = ways[index % len(ways)]
    plant()
    return where


def _other_id() -> Dataset:
    item = Dataset()
    item.PatientID = PATIENT_ID
    item.TypeOfPatientID = "TEXT"
    return item


def _named() -> Dataset:
    item = Dataset()
    item.PatientName = PATIENT_NAME
    item.add_new(0x00290010, "LO", "NESTED")
    item.add_new(0x00291001, "LO", PHONE)
    return item


def build_hostile_series(folder: Path, slices: int = 12) -> HostileSeries:
    """A 12-slice CT series with an identifier in a different place in each slice.

    The file names hold the patient's name and are in the reverse of the slice order, so a
    reader that sorts by name gets the volume upside down.

    Args:
        folder: The series folder (created).
        slices: Number of slices (each way of hiding is used once per 12 slices).

    Returns:
        The files and where each identifier was planted.
    """
    folder.mkdir(parents=True, exist_ok=True)
    series = HostileSeries(folder=folder)
    study, uid, frame = generate_uid(), generate_uid(), generate_uid()
    for k in range(slices):
        z = -100.0 + 2.5 * k
        ds = ct_slice((-60.0, -80.0, z), volume_pixels(k), study_uid=study, series_uid=uid,
                      frame_uid=frame)
        ds.InstanceNumber = slices - k
        where = _plant_in_slice(ds, k)
        path = folder / f"{FAMILY}_{slices - k:03d}.dcm"
        with dicom_config.disable_value_validation():
            ds.save_as(path, enforce_file_format=True)
        series.files.append(path)
        series.planted[path.name] = where
        series.positions.append(z)
    return series


def build_hostile_multiframe(path: Path, frames: int = 5) -> Path:
    """An enhanced CT file with identifiers at the top level, in per-frame items and private.

    Frames are stored in a shuffled order of their positions, with one rescale per frame.

    Args:
        path: The file to write.
        frames: Number of frames.

    Returns:
        ``path``.
    """
    order = list(np.random.default_rng(5).permutation(frames))
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = pydicom.uid.ExplicitVRLittleEndian
    ds.file_meta.SourceApplicationEntityTitle = FAMILY[:16]
    ds.SOPClassUID = ENHANCED_CT_IMAGE_STORAGE
    ds.SOPInstanceUID = generate_uid()
    ds.StudyInstanceUID = generate_uid()
    ds.SeriesInstanceUID = generate_uid()
    ds.FrameOfReferenceUID = generate_uid()
    ds.PatientName = PATIENT_NAME
    ds.PatientID = PATIENT_ID
    ds.InstitutionName = f"{FAMILY} clinic"
    ds.Modality = "CT"
    ds.add_new(0x00090010, "LO", f"{FAMILY} CORP")
    ds.add_new(0x00091001, "LO", PHONE)
    shared = Dataset()
    orientation = Dataset()
    orientation.ImageOrientationPatient = ["1", "0", "0", "0", "1", "0"]
    measures = Dataset()
    measures.PixelSpacing = ["0.75", "0.5"]
    measures.SliceThickness = "3"
    shared.PlaneOrientationSequence = Sequence([orientation])
    shared.PixelMeasuresSequence = Sequence([measures])
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    per_frame = []
    pixels = []
    for slot in order:
        item = Dataset()
        position = Dataset()
        position.ImagePositionPatient = ["-60", "-80", f"{-50 + 3.0 * slot:.1f}"]
        item.PlanePositionSequence = Sequence([position])
        transform = Dataset()
        transform.RescaleSlope = "1"
        transform.RescaleIntercept = str(-1024 - int(slot))
        transform.RescaleType = "HU"
        item.PixelValueTransformationSequence = Sequence([transform])
        content = Dataset()
        content.FrameComments = f"frame of {PATIENT_NAME}"
        item.FrameContentSequence = Sequence([content])
        item.add_new(0x00110010, "LO", "ACME")
        item.add_new(0x00111001, "LO", PATIENT_ID)
        per_frame.append(item)
        pixels.append(volume_pixels(int(slot)))
    ds.PerFrameFunctionalGroupsSequence = Sequence(per_frame)
    ds.NumberOfFrames = frames
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = pixels[0].shape
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    ds.PixelData = np.stack(pixels).astype("<u2").tobytes()
    ds.preamble = f"{PATIENT_NAME}".encode().ljust(128, b"\x00")
    with dicom_config.disable_value_validation():
        ds.save_as(path, enforce_file_format=True)
    return path


def hostile_nifti_volume() -> tuple[np.ndarray, np.ndarray]:
    """The data (x, y, z int16) and RAS affine of :func:`build_hostile_nifti`'s file."""
    data = np.stack([volume_pixels(k, rows=10, cols=12).T.astype(np.int16)
                     for k in range(7)], axis=-1)
    affine = np.array([[-0.7, 0, 0, 90.0], [0, 0.8, 0, -120.0], [0, 0, 2.0, -40.0],
                       [0, 0, 0, 1.0]])
    return data, affine


def build_hostile_nifti(path: Path) -> Path:
    """A NIfTI volume with identifiers in every header text field, an extension and a trailer.

    ``descrip``, ``aux_file``, ``intent_name``, ``db_name`` and ``data_type`` hold planted
    text, a comment extension holds the name and phone number, the raw values are
    :func:`hostile_nifti_volume`'s with ``scl_slope``/``scl_inter`` 1/-1024, and bytes after
    the voxel data hold the patient ID. Written ``.nii.gz`` when
    ``path`` ends so (the gzip header then stores the planted file name).

    Args:
        path: ``*.nii`` or ``*.nii.gz``; its name should carry an identifier.

    Returns:
        ``path``.
    """
    import gzip as gzip_module

    import nibabel as nib

    data, affine = hostile_nifti_volume()
    img = nib.Nifti1Image(data, affine)
    hdr = img.header
    hdr.set_xyzt_units("mm")
    hdr["descrip"] = f"{PATIENT_NAME} {PHONE}".encode()[:79]
    hdr["aux_file"] = PATIENT_ID.encode()
    hdr["intent_name"] = FAMILY.encode()
    hdr["db_name"] = f"{GIVEN} db".encode()
    hdr["data_type"] = FAMILY.encode()[:9]
    hdr.extensions.append(nib.nifti1.Nifti1Extension(
        "comment", f"patient {PATIENT_NAME} tel {PHONE}".encode()))
    raw_path = path.with_name(path.name[:-3]) if path.name.endswith(".gz") else path
    nib.save(img, raw_path)
    # nibabel chooses its own scaling on saving; the raw values are written unscaled and
    # scl_slope/scl_inter patched in afterwards (same header size, so the data stays put).
    with open(raw_path, "r+b") as fh:
        # The header as stored: a loaded image's header has its scaling reset to NaN.
        hdr = nib.Nifti1Header.from_fileobj(fh)
        hdr["scl_slope"], hdr["scl_inter"] = 1.0, -1024.0
        fh.seek(0)
        hdr.write_to(fh)
    with open(raw_path, "ab") as fh:
        fh.write(f"trailer {PATIENT_ID}".encode())
    if raw_path != path:
        with open(raw_path, "rb") as src, gzip_module.open(path, "wb") as out:
            out.write(src.read())
        raw_path.unlink()
    return path
