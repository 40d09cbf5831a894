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

