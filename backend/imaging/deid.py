"""DICOM de-identification on import: PS3.15 Annex E, Basic Application Confidentiality Profile.

What :func:`deidentify` does to a dataset (in place, recursing into sequences):

- Attributes of the profile table (``PROFILE``) get their action: ``X`` removed, ``Z``
  emptied (kept present with zero length), ``U`` UID replaced. Where the standard allows a
  dummy value (``D``) we empty the attribute instead, except Patient's Name/ID when the caller
  gives a pseudonym.
- Catch-alls beyond the table, so that attributes the table misses cannot leak: every
  person name (VR PN) is emptied; every date, date-time and time (VR DA, DT, TM) is **blanked**
  (emptied). Dates are not shifted: rating reports beside images needs no dates, and a shift
  with a stored offset is re-identifiable by whoever holds the offset. Longitudinal Temporal
  Information Modified is therefore set to ``REMOVED``.
- Every UID that is not a registered DICOM UID (SOP classes, transfer syntaxes... are kept)
  is remapped with :class:`UidMapper`: ``2.25.<UUID from HMAC-SHA256(salt, uid)>``,
  so one input UID gives the same new UID for the whole import (the two images of a study keep
  one Study Instance UID and the references between them stay valid). The salt is secret
  (random per import unless given); without it the mapping cannot be inverted by hashing
  guessed UIDs.
- Private tags, curve data (groups 50xx) and overlay data/comments (60xx,3000/4000) are
  removed. Pixel data is never touched: burned-in annotations (Burned In Annotation = YES) are
  reported as a warning, not cleaned (the Clean Pixel Data option is out of scope).
- Patient Identity Removed = ``YES``; De-identification Method and its code sequence
  (DCM 113100, Basic Application Confidentiality Profile) are added.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydicom
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence
from pydicom.uid import UID

from backend.imaging.load import (
    MAX_PIXELS_PER_FRAME,
    ImageLoadError,
    check_pixel_limit,
    raster_header_size,
)

# De-identification Method is LO (64 characters a value), multi-valued.
METHOD = (
    "RadConcord PS3.15 E.1 Basic Profile",
    "dates and times blanked",
    "UIDs remapped by salted hash",
    "private tags removed",
)

# PS3.15 Table E.1-1, Basic Profile column, by keyword. "D" entries are handled as "Z" (see
# module docstring) except where a pseudonym is given.
PROFILE: dict[str, str] = {
    "AccessionNumber": "Z",
    "AcquisitionComments": "X",
    "AcquisitionContextSequence": "X",
    "AcquisitionDate": "Z",
    "AcquisitionDateTime": "Z",
    "AcquisitionDeviceProcessingDescription": "X",
    "AcquisitionProtocolDescription": "X",
    "AcquisitionTime": "Z",
    "ActualHumanPerformersSequence": "X",
    "AdditionalPatientHistory": "X",
    "AddressTrial": "X",
    "AdmissionID": "X",
    "AdmittingDate": "X",
    "AdmittingDiagnosesCodeSequence": "X",
    "AdmittingDiagnosesDescription": "X",
    "AdmittingTime": "X",
    "AffectedSOPInstanceUID": "X",
    "Allergies": "X",
    "AuthorObserverSequence": "X",
    "BranchOfService": "X",
    "CassetteID": "X",
    "CommentsOnThePerformedProcedureStep": "X",
    "ConfidentialityConstraintOnPatientDataDescription": "X",
    "ContentCreatorIdentificationCodeSequence": "X",
    "ContentCreatorName": "Z",
    "ContentDate": "Z",
    "ContentSequence": "X",
    "ContentTime": "Z",
    "ContributionDescription": "X",
    "CountryOfResidence": "X",
    "CurrentPatientLocation": "X",
    "CustodialOrganizationSequence": "X",
    "DataSetTrailingPadding": "X",
    "DateOfLastCalibration": "X",
    "DerivationDescription": "X",
    "DetectorID": "X",
    "DeviceSerialNumber": "X",
    "DeviceUID": "U",
    "DigitalSignaturesSequence": "X",
    "DischargeDiagnosisDescription": "X",
    "DistributionAddress": "X",
    "DistributionName": "X",
    "DoseReferenceUID": "U",
    "EthnicGroup": "X",
    "FailedSOPInstanceUIDList": "U",
    "FiducialUID": "U",
    "FillerOrderNumberImagingServiceRequest": "Z",
    "FrameComments": "X",
    "FrameOfReferenceUID": "U",
    "GantryID": "X",
    "GeneratorID": "X",
    "GraphicAnnotationSequence": "X",
    "HumanPerformerName": "X",
    "HumanPerformerOrganization": "X",
    "IconImageSequence": "X",
    "IdentifyingComments": "X",
    "ImageComments": "X",
    "ImagePresentationComments": "X",
    "ImagingServiceRequestComments": "X",
    "Impressions": "X",
    "InstanceCreatorUID": "U",
    "InstitutionAddress": "X",
    "InstitutionCodeSequence": "X",
    "InstitutionName": "X",
    "InstitutionalDepartmentName": "X",
    "InsurancePlanIdentification": "X",
    "IntendedRecipientsOfResultsIdentificationSequence": "X",
    "InterpretationApproverSequence": "X",
    "InterpretationAuthor": "X",
    "InterpretationDiagnosisDescription": "X",
    "InterpretationIDIssuer": "X",
    "InterpretationRecorder": "X",
    "InterpretationText": "X",
    "InterpretationTranscriber": "X",
    "IrradiationEventUID": "U",
    "IssuerOfAdmissionID": "X",
    "IssuerOfPatientID": "X",
    "IssuerOfServiceEpisodeID": "X",
    "LargePaletteColorLookupTableUID": "U",
    "MAC": "X",
    "MediaStorageSOPInstanceUID": "U",
    "MedicalAlerts": "X",
    "MedicalRecordLocator": "X",
    "MilitaryRank": "X",
    "ModifiedAttributesSequence": "X",
    "ModifiedImageDescription": "X",
    "ModifyingDeviceID": "X",
    "ModifyingDeviceManufacturer": "X",
    "NameOfPhysiciansReadingStudy": "X",
    "NamesOfIntendedRecipientsOfResults": "X",
    "Occupation": "X",
    "OperatorIdentificationSequence": "X",
    "OperatorsName": "X",
    "OrderCallbackPhoneNumber": "X",
    "OrderEnteredBy": "X",
    "OrderEntererLocation": "X",
    "OriginalAttributesSequence": "X",
    "OtherPatientIDs": "X",
    "OtherPatientIDsSequence": "X",
    "OtherPatientNames": "X",
    "ParticipantSequence": "X",
    "PatientAddress": "X",
    "PatientAge": "X",
    "PatientBirthDate": "Z",
    "PatientBirthName": "X",
    "PatientBirthTime": "X",
    "PatientComments": "X",
    "PatientID": "Z",
    "PatientInstitutionResidence": "X",
    "PatientInsurancePlanCodeSequence": "X",
    "PatientMotherBirthName": "X",
    "PatientName": "Z",
    "PatientPrimaryLanguageCodeSequence": "X",
    "PatientPrimaryLanguageModifierCodeSequence": "X",
    "PatientReligiousPreference": "X",
    "PatientSex": "Z",
    "PatientSexNeutered": "X",
    "PatientSize": "X",
    "PatientState": "X",
    "PatientTelephoneNumbers": "X",
    "PatientTransportArrangements": "X",
    "PatientWeight": "X",
    "PerformedLocation": "X",
    "PerformedProcedureStepDescription": "X",
    "PerformedProcedureStepID": "X",
    "PerformedProcedureStepStartDate": "X",
    "PerformedProcedureStepStartTime": "X",
    "PerformedStationAETitle": "X",
    "PerformedStationGeographicLocationCodeSequence": "X",
    "PerformedStationName": "X",
    "PerformedStationNameCodeSequence": "X",
    "PerformingPhysicianIdentificationSequence": "X",
    "PerformingPhysicianName": "X",
    "PersonAddress": "X",
    "PersonIdentificationCodeSequence": "X",
    "PersonName": "Z",
    "PersonTelephoneNumbers": "X",
    "PhysicianApprovingInterpretation": "X",
    "PhysiciansOfRecord": "X",
    "PhysiciansOfRecordIdentificationSequence": "X",
    "PhysiciansReadingStudyIdentificationSequence": "X",
    "PlacerOrderNumberImagingServiceRequest": "Z",
    "PlateID": "X",
    "PreMedication": "X",
    "PregnancyStatus": "X",
    "ProtocolName": "X",
    "ReasonForStudy": "X",
    "ReasonForTheImagingServiceRequest": "X",
    "ReferencedDigitalSignatureSequence": "X",
    "ReferencedFrameOfReferenceUID": "U",
    "ReferencedGeneralPurposeScheduledProcedureStepTransactionUID": "U",
    "ReferencedImageSequence": "X",
    "ReferencedPatientAliasSequence": "X",
    "ReferencedPatientSequence": "X",
    "ReferencedPerformedProcedureStepSequence": "X",
    "ReferencedSOPInstanceMACSequence": "X",
    "ReferencedSOPInstanceUID": "U",
    "ReferencedStudySequence": "X",
    "ReferringPhysicianAddress": "X",
    "ReferringPhysicianIdentificationSequence": "X",
    "ReferringPhysicianName": "Z",
    "ReferringPhysicianTelephoneNumbers": "X",
    "RegionOfResidence": "X",
    "RelatedFrameOfReferenceUID": "U",
    "RequestAttributesSequence": "X",
    "RequestedContrastAgent": "X",
    "RequestedProcedureComments": "X",
    "RequestedProcedureDescription": "X",
    "RequestedProcedureID": "X",
    "RequestedProcedureLocation": "X",
    "RequestedSOPInstanceUID": "U",
    "RequestingPhysician": "X",
    "RequestingService": "X",
    "ResponsibleOrganization": "X",
    "ResponsiblePerson": "X",
    "ResultsComments": "X",
    "ResultsDistributionListSequence": "X",
    "ResultsIDIssuer": "X",
    "ReviewerName": "X",
    "ScheduledHumanPerformersSequence": "X",
    "ScheduledPatientInstitutionResidence": "X",
    "ScheduledPerformingPhysicianIdentificationSequence": "X",
    "ScheduledPerformingPhysicianName": "X",
    "ScheduledProcedureStepDescription": "X",
    "ScheduledProcedureStepEndDate": "X",
    "ScheduledProcedureStepEndTime": "X",
    "ScheduledProcedureStepLocation": "X",
    "ScheduledProcedureStepStartDate": "X",
    "ScheduledProcedureStepStartTime": "X",
    "ScheduledStationAETitle": "X",
    "ScheduledStationGeographicLocationCodeSequence": "X",
    "ScheduledStationName": "X",
    "ScheduledStationNameCodeSequence": "X",
    "ScheduledStudyLocation": "X",
    "ScheduledStudyLocationAETitle": "X",
    "SeriesDate": "X",
    "SeriesDescription": "X",
    "SeriesInstanceUID": "U",
    "SeriesTime": "X",
    "ServiceEpisodeDescription": "X",
    "ServiceEpisodeID": "X",
    "SmokingStatus": "X",
    "SOPInstanceUID": "U",
    "SourceApplicationEntityTitle": "X",
    "SourceImageSequence": "X",
    "SpecialNeeds": "X",
    "StationName": "X",
    "StorageMediaFileSetUID": "U",
    "StudyComments": "X",
    "StudyDate": "Z",
    "StudyDescription": "X",
    "StudyID": "Z",
    "StudyIDIssuer": "X",
    "StudyInstanceUID": "U",
    "StudyTime": "Z",
    "SynchronizationFrameOfReferenceUID": "U",
    "TemplateExtensionCreatorUID": "U",
    "TemplateExtensionOrganizationUID": "U",
    "TextComments": "X",
    "TextString": "X",
    "TimeOfLastCalibration": "X",
    "TimezoneOffsetFromUTC": "X",
    "TopicAuthor": "X",
    "TopicKeywords": "X",
    "TopicSubject": "X",
    "TopicTitle": "X",
    "TransactionUID": "U",
    "UID": "U",
    "VerifyingObserverIdentificationCodeSequence": "Z",
    "VerifyingObserverName": "Z",
    "VerifyingObserverSequence": "X",
    "VerifyingOrganization": "X",
    "VisitComments": "X",
}

# UIDs whose meaning is a definition, not an instance: never remapped even if unregistered.
KEEP_UIDS = {
    "SOPClassUID",
    "ReferencedSOPClassUID",
    "MediaStorageSOPClassUID",
    "TransferSyntaxUID",
    "ImplementationClassUID",
    "CodingSchemeUID",
    "MappingResourceUID",
}
BLANKED_VRS = {"DA", "DT", "TM"}


# Attributes kept by the allow-list (everything else is removed): what is needed to display
# and window the image. Filled in below; see the module docstring.
KEPT_ATTRIBUTES: tuple[str, ...] = (
    # Image Pixel module
    "SamplesPerPixel", "PhotometricInterpretation", "PlanarConfiguration", "Rows", "Columns",
    "BitsAllocated", "BitsStored", "HighBit", "PixelRepresentation", "PixelData",
    "NumberOfFrames", "PixelAspectRatio", "SmallestImagePixelValue",
    "LargestImagePixelValue",
    # Modality LUT
    "RescaleIntercept", "RescaleSlope", "RescaleType", "ModalityLUTSequence",
    # VOI LUT
    "WindowCenter", "WindowWidth", "WindowCenterWidthExplanation", "VOILUTFunction",
    "VOILUTSequence",
    # Presentation
    "PresentationLUTShape", "ViewPosition", "ImageLaterality", "Laterality", "ImageType",
    "PixelSpacing", "ImagerPixelSpacing", "Modality", "BurnedInAnnotation",
    # Identity of the instance (UIDs remapped)
    "SOPClassUID", "SOPInstanceUID", "StudyInstanceUID", "SeriesInstanceUID",
    "FrameOfReferenceUID",
)

DEID_PROFILE: dict[str, Any] = {
    "profile": "DICOM PS3.15 Annex E Basic Application Confidentiality Profile",
    "code": "113100",
    "implementation": "RadConcord allow-list v1",
    "options": [],
    "kept_attributes": list(KEPT_ATTRIBUTES),
}


class DeidentificationError(ValueError):
    """A DICOM file could not be de-identified; the message names the file."""


@dataclass
class UidMapper:
    """Consistent, salted UID replacement for one import.

    The same input UID always maps to the same new UID for a given salt. ``to_dict`` /
    ``from_dict`` let a caller persist the mapping with the import (it links new UIDs to the
    originals, so store it only where PHI may be stored).
    """

    salt: str = field(default_factory=lambda: secrets.token_hex(16))
    mapping: dict[str, str] = field(default_factory=dict)

    def map(self, uid: str) -> str:
        """The replacement UID for ``uid``: ``2.25.<UUID as integer>`` (PS3.5 B.2).

        The UUID's 122 free bits are HMAC-SHA256(salt, uid). pydicom 3's
        ``generate_uid(prefix=None, entropy_srcs=...)`` ignores the entropy sources and
        returns a random UUID, which would break consistency, so the derivation is done here.
        """
        uid = str(uid).strip().rstrip("\x00")
        new = self.mapping.get(uid)
        if new is None:
            digest = hmac.new(self.salt.encode(), uid.encode(), hashlib.sha256).digest()
            new = f"2.25.{uuid.UUID(bytes=digest[:16], version=4).int}"
            self.mapping[uid] = new
        return new

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (salt and mapping)."""
        return {"salt": self.salt, "mapping": dict(self.mapping)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UidMapper:
        """Inverse of :meth:`to_dict`."""
        return cls(salt=str(data["salt"]), mapping=dict(data.get("mapping", {})))


@dataclass
class DeidReport:
    """What :func:`deidentify` changed (keywords or tags; never the removed values)."""

    removed: list[str] = field(default_factory=list)
    emptied: list[str] = field(default_factory=list)
    uids_remapped: int = 0
    private_removed: int = 0
    warnings: list[str] = field(default_factory=list)


def _is_registered_uid(value: str) -> bool:
    return bool(UID(value).keyword)


def _is_overlay_or_curve(tag: Any) -> bool:
    group, element = tag.group, tag.element
    if 0x5000 <= group <= 0x50FF and group % 2 == 0:
        return True
    return 0x6000 <= group <= 0x60FF and group % 2 == 0 and element in (0x3000, 0x4000)


def _empty(elem: Any) -> None:
    elem.value = Sequence([]) if elem.VR == "SQ" else None


def _remap_uid_value(value: Any, mapper: UidMapper) -> tuple[Any, int]:
    if value is None or value == "":
        return value, 0
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        new = [v if _is_registered_uid(str(v)) else mapper.map(str(v)) for v in value]
        return new, sum(1 for a, b in zip(value, new, strict=True) if str(a) != str(b))
    if _is_registered_uid(str(value)):
        return value, 0
    return mapper.map(str(value)), 1


def _walk(
    ds: Dataset, mapper: UidMapper, report: DeidReport, pseudonym: str | None
) -> None:
    for elem in list(ds):
        tag = elem.tag
        if tag.is_private:
            continue  # removed wholesale afterwards
        if _is_overlay_or_curve(tag):
            del ds[tag]
            report.removed.append(str(tag))
            continue
        keyword = elem.keyword
        action = PROFILE.get(keyword)
        if pseudonym is not None and keyword in ("PatientName", "PatientID"):
            elem.value = pseudonym
            continue
        if action == "X":
            del ds[tag]
            report.removed.append(keyword)
            continue
        if action == "Z":
            _empty(elem)
            report.emptied.append(keyword)
            continue
        if elem.VR == "UI":
            if keyword in KEEP_UIDS and action != "U":
                continue
            elem.value, n = _remap_uid_value(elem.value, mapper)
            report.uids_remapped += n
            continue
        if elem.VR == "PN" or elem.VR in BLANKED_VRS:
            if not elem.is_empty:
                _empty(elem)
                report.emptied.append(keyword or str(tag))
            continue
        if elem.VR == "SQ":
            for item in elem.value:
                _walk(item, mapper, report, None)


def deidentify(
    ds: Dataset, mapper: UidMapper, *, patient_pseudonym: str | None = None
) -> DeidReport:
    """De-identify ``ds`` in place (see the module docstring for the rules).

    Args:
        ds: A dataset read with pydicom (file meta included, if any).
        mapper: The import's UID mapper.
        patient_pseudonym: If given, Patient's Name and Patient ID are set to it instead of
            being emptied.

    Returns:
        What was changed.
    """
    report = DeidReport()
    burned_in = str(ds.get("BurnedInAnnotation", "") or "").upper()
    if burned_in == "YES":
        report.warnings.append(
            "Burned In Annotation is YES: text in the pixels is not removed"
        )
    n_private = sum(1 for _ in _iter_private(ds))
    ds.remove_private_tags()
    report.private_removed = n_private
    _walk(ds, mapper, report, patient_pseudonym)
    meta = getattr(ds, "file_meta", None)
    if meta is not None:
        if "MediaStorageSOPInstanceUID" in meta:
            meta.MediaStorageSOPInstanceUID = mapper.map(meta.MediaStorageSOPInstanceUID)
        if "SourceApplicationEntityTitle" in meta:
            del meta.SourceApplicationEntityTitle
            report.removed.append("SourceApplicationEntityTitle")
        if "SOPInstanceUID" in ds:
            meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    ds.PatientIdentityRemoved = "YES"
    ds.DeidentificationMethod = list(METHOD)
    code = Dataset()
    code.CodeValue = "113100"
    code.CodingSchemeDesignator = "DCM"
    code.CodeMeaning = "Basic Application Confidentiality Profile"
    ds.DeidentificationMethodCodeSequence = Sequence([code])
    ds.LongitudinalTemporalInformationModified = "REMOVED"
    return report


def _iter_private(ds: Dataset) -> Iterable[Any]:
    for elem in ds.iterall():
        if elem.tag.is_private:
            yield elem


def deidentify_file(
    src: str | Path, mapper: UidMapper, *, patient_pseudonym: str | None = None
) -> tuple[bytes, DeidReport, Dataset]:
    """Read ``src``, de-identify it and return the new file's bytes.

    Args:
        src: DICOM file.
        mapper: The import's UID mapper.
        patient_pseudonym: See :func:`deidentify`.

    Returns:
        ``(bytes of the de-identified DICOM file, report, the de-identified dataset)``.

    Raises:
        DeidentificationError: The file cannot be read or written as DICOM.
    """
    src = Path(src)
    try:
        ds = pydicom.dcmread(src)
    except Exception as exc:  # pydicom raises several types for a bad file
        raise DeidentificationError(f"{src}: not a readable DICOM file ({exc})") from exc
    report = deidentify(ds, mapper, patient_pseudonym=patient_pseudonym)
    buf = io.BytesIO()
    try:
        ds.save_as(buf, enforce_file_format=True)
    except Exception as exc:  # e.g. no transfer syntax in a raw dataset
        raise DeidentificationError(f"{src}: cannot write de-identified DICOM ({exc})") from exc
    return buf.getvalue(), report, ds


# Pillow modes stored as decoded; any other mode is converted to the one given here first.
_RASTER_KEEP_MODES = {"L", "LA", "RGB", "RGBA", "I;16", "I;16B", "I;16L", "I"}
_RASTER_CONVERT = {"1": "L", "CMYK": "RGB", "YCbCr": "RGB", "LAB": "RGB", "HSV": "RGB"}


def clean_raster(data: bytes, fmt: str) -> tuple[bytes, str]:
    """Decode a PNG or JPEG and re-encode its pixels alone as a new PNG.

    Nothing of the input but the pixel values reaches the output: no PNG chunk other than
    IHDR/IDAT/IEND (and PLTE-free: palette images are expanded to RGB/RGBA), no JPEG APP
    segment, comment, ICC profile, EXIF/XMP/IPTC block or trailing bytes. A JPEG is stored as
    PNG, a lossless encoding of its decoded pixels, so no second generation of JPEG loss is
    added. 8- and 16-bit grey and 8-bit RGB(A) pixels are kept exactly; 16-bit colour PNGs are
    kept as Pillow decodes them (8 bits a channel), which is what the viewer shows anyway.
    The pixel limit of :mod:`backend.imaging.load` is checked from the header before decoding.

    Args:
        data: The file's bytes.
        fmt: ``"png"`` or ``"jpeg"``.

    Returns:
        ``(PNG bytes, "png")``: the stored bytes and their format.

    Raises:
        DeidentificationError: Unknown format, a header over the pixel limit, or bytes that
            cannot be decoded.
    """
    from PIL import Image, UnidentifiedImageError

    if fmt not in ("png", "jpeg"):
        raise DeidentificationError(f"not a PNG or JPEG image (format {fmt!r})")
    try:
        width, height = raster_header_size(data, fmt)
        check_pixel_limit("", height, width)
    except ValueError as exc:  # ImageLoadError is a ValueError
        raise DeidentificationError(str(exc) if isinstance(exc, ImageLoadError)
                                    else f"not a valid {fmt.upper()} file ({exc})") from None
    try:
        with Image.open(io.BytesIO(data), formats=[fmt.upper()]) as img:
            img.load()
            mode = img.mode
            if mode == "P" or mode == "PA":
                has_alpha = mode == "PA" or "transparency" in img.info
                img = img.convert("RGBA" if has_alpha else "RGB")
            elif mode in _RASTER_CONVERT:
                img = img.convert(_RASTER_CONVERT[mode])
            elif mode not in _RASTER_KEEP_MODES:
                raise DeidentificationError(f"unsupported {fmt.upper()} pixel mode {mode}")
            # A new image from the raw pixels has an empty ``info``: Pillow would otherwise
            # copy an ICC profile or transparency from the decoded image into the output.
            clean = Image.frombytes(img.mode, img.size, img.tobytes())
    except Image.DecompressionBombError:
        raise DeidentificationError(
            f"image exceeds the limit of {MAX_PIXELS_PER_FRAME} pixels per frame"
        ) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DeidentificationError(f"cannot decode {fmt.upper()} image ({exc})") from None
    out = io.BytesIO()
    clean.save(out, format="PNG", optimize=False)
    return out.getvalue(), "png"


# Ancillary PNG chunks that can carry free text, timestamps or EXIF (patient details in
# exported screenshots); everything needed to decode the image is kept.
_PNG_DROP = {b"tEXt", b"zTXt", b"iTXt", b"eXIf", b"tIME"}


def strip_png_metadata(data: bytes) -> bytes:
    """Remove text, EXIF and time chunks from PNG bytes, losslessly.

    Deprecated: private chunks and trailing bytes survive; use :func:`clean_raster`.

    Args:
        data: A PNG file's bytes.

    Returns:
        The PNG without ``tEXt``/``zTXt``/``iTXt``/``eXIf``/``tIME`` chunks.

    Raises:
        DeidentificationError: The bytes are not a well-formed PNG chunk stream.
    """
    sig = b"\x89PNG\r\n\x1a\n"
    if not data.startswith(sig):
        raise DeidentificationError("not a PNG file")
    out = [sig]
    pos = len(sig)
    while pos < len(data):
        if pos + 12 > len(data):
            raise DeidentificationError("truncated PNG chunk")
        length = int.from_bytes(data[pos : pos + 4], "big")
        ctype = data[pos + 4 : pos + 8]
        end = pos + 12 + length
        if end > len(data):
            raise DeidentificationError("truncated PNG chunk")
        if ctype not in _PNG_DROP:
            out.append(data[pos:end])
        pos = end
        if ctype == b"IEND":
            break
    return b"".join(out)


def strip_jpeg_metadata(data: bytes) -> bytes:
    """Remove APP1-APP13, APP15 (EXIF, XMP, IPTC...) and COM segments from JPEG bytes.

    Deprecated: bytes after the end-of-image marker survive; use :func:`clean_raster`.

    APP0 (JFIF) and APP14 (Adobe colour transform) are kept because decoders need them.
    Entropy-coded data after the first SOS marker is copied unchanged (lossless).

    Args:
        data: A JPEG file's bytes.

    Returns:
        The JPEG without metadata segments.

    Raises:
        DeidentificationError: The bytes are not a well-formed JPEG marker stream.
    """
    if not data.startswith(b"\xff\xd8"):
        raise DeidentificationError("not a JPEG file")
    out = [data[:2]]
    pos = 2
    while pos < len(data):
        if data[pos] != 0xFF:
            raise DeidentificationError("malformed JPEG marker stream")
        marker = data[pos + 1] if pos + 1 < len(data) else 0
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0xDA or marker == 0xD9:  # start of scan / end of image: copy the rest
            out.append(data[pos:])
            break
        if pos + 4 > len(data):
            raise DeidentificationError("truncated JPEG segment")
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        end = pos + 2 + length
        if length < 2 or end > len(data):
            raise DeidentificationError("truncated JPEG segment")
        drop = (0xE1 <= marker <= 0xED) or marker == 0xEF or marker == 0xFE
        if not drop:
            out.append(data[pos:end])
        pos = end
    return b"".join(out)
