"""De-identification on import: DICOM by an allow-list (PS3.15 Annex E), PNG/JPEG by re-encoding.

DICOM (:func:`deidentify`, :func:`deidentify_file`) applies the Basic Application
Confidentiality Profile of PS3.15 Annex E as an **allow-list**: instead of removing the
attributes the profile names (a table that a hostile or unusual file can always get around),
the stored dataset is rebuilt from the few attributes needed to display and window the image
(:data:`KEPT_ATTRIBUTES`) and everything else is dropped:

- Kept: the Image Pixel module (pixels re-encoded, see below), Modality LUT (Rescale
  Slope/Intercept/Type, Modality LUT Sequence), VOI LUT (Window Center/Width, VOI LUT
  Function, VOI LUT Sequence), Presentation LUT Shape, View Position, Image Laterality /
  Laterality, Image Type, Pixel Spacing / Imager Pixel Spacing, Modality, Burned In
  Annotation, Lossy Image Compression, SOP Class UID. Each kept value is validated: coded
  strings must be one of their defined terms, numbers must be numbers, so no kept attribute
  can carry free text. Within the two kept sequences only the LUT descriptor and LUT data of
  each item are kept (explanations are free text and go).
- Instance UIDs (Study, Series, SOP Instance, Frame of Reference) are replaced through
  :class:`UidMapper`: ``2.25.<UUID from HMAC-SHA256(salt, uid)>``, so one input UID gives the
  same new UID for the whole import (the two images of a study keep one Study Instance UID).
  The salt is secret (random per import unless given): the mapping cannot be inverted by
  hashing guessed UIDs.
- Gone, by construction: every private tag, every other sequence at any depth, curves and
  overlays (groups 50xx/60xx), every date, time, name, identifier and free text, the 128-byte
  preamble, and the file meta's source/sending/receiving AE titles and private information
  (the file meta is rebuilt from the SOP Class/Instance UIDs and the transfer syntax).
- Pixel data is decoded and written back uncompressed (Explicit VR Little Endian) with exactly
  Rows x Columns x Frames values: bytes after the last frame, data hidden in unused high bits
  and anything inside an encapsulated stream (a JPEG's APP segments and comments) are gone,
  and the stored values equal what the viewer decoded from the original. Pixels are not
  *cleaned*: burned-in text stays, and Burned In Annotation = YES is reported as a warning.
- Type 2 attributes of the patient and study are present and empty (Patient's Name and ID
  are set to a pseudonym when one is given). Patient Identity Removed = ``YES``,
  De-identification Method (:data:`METHOD`) and its code sequence (DCM 113100, Basic
  Application Confidentiality Profile; no option is claimed, as none is applied) are set,
  Longitudinal Temporal Information Modified = ``REMOVED`` (dates are removed, not shifted).

PNG and JPEG (:func:`clean_raster`): the pixels are decoded and re-encoded as a new PNG with
nothing else in it.

:data:`DEID_PROFILE` describes all this for the export manifest. :data:`PROFILE` keeps the
Annex E table itself as a reference: no attribute it removes or empties is in the allow-list.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import re
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pydicom
from pydicom.dataelem import DataElement
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.sequence import Sequence
from pydicom.uid import (
    UID,
    ExplicitVRBigEndian,
    ExplicitVRLittleEndian,
    ImplicitVRLittleEndian,
    generate_uid,
)

from radconcord.backend.imaging.load import (
    MAX_PIXELS_PER_FRAME,
    ImageLoadError,
    check_dicom_pixel_limit,
    check_pixel_limit,
    raster_header_size,
)

# De-identification Method is LO (64 characters a value), multi-valued.
METHOD = (
    "PS3.15 E.1 Basic Application Confidentiality Profile",
    "RadConcord allow-list v2: display attributes only",
    "UIDs remapped by salted hash; dates removed",
    "pixel data re-encoded uncompressed, not cleaned",
)
# PS3.15 Table E.1-1, Basic Profile column, by keyword (X remove, Z empty, U replace UID).
# Reference only: the allow-list below decides what is kept, and the tests check that nothing
# this table removes or empties is in it.
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


# --- The allow-list -------------------------------------------------------------------------

# Coded strings kept only when every value is one of these terms (PS3.3 defined terms), so a
# planted name cannot ride along in a kept attribute.
_MODALITIES = frozenset(
    "AR ASMT AU BDUS BI BMD CR CT DG DOC DX ECG EPS ES GM HC HD IO IOL IVOCT IVUS KER KO LEN "
    "LS MG MR NM OAM OCT OP OPM OPT OPV OSS OT PLAN PR PT PX REG RESP RF RG RTDOSE RTIMAGE "
    "RTPLAN RTRECORD RTSTRUCT SEG SM SMR SR SRF STAIN TG US VA XA XC".split()
)
_VIEW_POSITIONS = frozenset(
    "AP PA LL RL RLD LLD RLO LLO LAT LATERAL FRONTAL CC MLO ML LM LMO FB SIO XCC XCCL XCCM "
    "ISO".split()
)
_ENUMS: dict[str, frozenset[str]] = {
    "Modality": _MODALITIES,
    "ViewPosition": _VIEW_POSITIONS,
    "ImageLaterality": frozenset({"R", "L", "U", "B"}),
    "Laterality": frozenset({"R", "L"}),
    "BurnedInAnnotation": frozenset({"YES", "NO"}),
    "VOILUTFunction": frozenset({"LINEAR", "LINEAR_EXACT", "SIGMOID"}),
    "PresentationLUTShape": frozenset({"IDENTITY", "INVERSE"}),
    "RescaleType": frozenset({"HU", "US", "OD", "MGML", "Z_EFF", "ED", "EDW", "HU_MOD", "PCT"}),
    "LossyImageCompression": frozenset({"00", "01"}),
    "LossyImageCompressionMethod": frozenset({
        "ISO_10918_1", "ISO_14495_1", "ISO_15444_1", "ISO_15444_15", "ISO_13818_2",
        "ISO_14496_10", "ISO_23008_2",
    }),
}
# Image Type: only values 1 and 2 (pixel data characteristics, patient examination
# characteristics) are kept; values 3 and on are modality-specific free-form terms.
_IMAGE_TYPE = (frozenset({"ORIGINAL", "DERIVED"}), frozenset({"PRIMARY", "SECONDARY"}))
_DECIMAL = re.compile(r" *[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)? *")
_INTEGER = re.compile(r" *[+-]?\d+ *")
# Decimal strings kept (each value must be a finite number).
_NUMBERS = ("WindowCenter", "WindowWidth", "RescaleIntercept", "RescaleSlope", "PixelSpacing",
            "ImagerPixelSpacing", "LossyImageCompressionRatio")
_INTEGER_STRINGS = ("PixelAspectRatio",)
_LUT_SEQUENCES = ("ModalityLUTSequence", "VOILUTSequence")
_INSTANCE_UIDS = ("StudyInstanceUID", "SeriesInstanceUID", "SOPInstanceUID",
                  "FrameOfReferenceUID")
# Written from the re-encoded pixels, never copied.
_PIXEL_MODULE = ("SamplesPerPixel", "PhotometricInterpretation", "PlanarConfiguration", "Rows",
                 "Columns", "BitsAllocated", "BitsStored", "HighBit", "PixelRepresentation",
                 "NumberOfFrames", "PixelData")
_PHOTOMETRIC = frozenset({"MONOCHROME1", "MONOCHROME2", "RGB"})

KEPT_ATTRIBUTES: tuple[str, ...] = (
    *_PIXEL_MODULE, *_NUMBERS, *_INTEGER_STRINGS, *sorted(_ENUMS), "ImageType",
    *_LUT_SEQUENCES, "SOPClassUID", *_INSTANCE_UIDS,
)
# Type 2 attributes of the Patient, General Study and General Series/Image modules: present
# and empty, as the profile's Z action leaves them.
EMPTIED_ATTRIBUTES = ("PatientName", "PatientID", "PatientBirthDate", "PatientSex",
                      "StudyDate", "StudyTime", "ReferringPhysicianName", "StudyID",
                      "AccessionNumber", "SeriesNumber", "InstanceNumber")
_ADDED_ATTRIBUTES = ("PatientIdentityRemoved", "DeidentificationMethod",
                     "DeidentificationMethodCodeSequence",
                     "LongitudinalTemporalInformationModified")

PROFILE_CODE = ("113100", "DCM", "Basic Application Confidentiality Profile")

DEID_PROFILE: dict[str, Any] = {
    "profile": "DICOM PS3.15 Annex E Basic Application Confidentiality Profile",
    "code": {"value": PROFILE_CODE[0], "scheme": PROFILE_CODE[1], "meaning": PROFILE_CODE[2]},
    "implementation": "RadConcord allow-list",
    "version": 2,
    "options": [],
    "method": list(METHOD),
    "kept_attributes": list(KEPT_ATTRIBUTES),
    "kept_sequence_item_attributes": ["LUTDescriptor", "LUTData", "ModalityLUTType"],
    "emptied_attributes": list(EMPTIED_ATTRIBUTES),
    "added_attributes": list(_ADDED_ATTRIBUTES),
    "uids": "Study/Series/SOP Instance/Frame of Reference UIDs replaced by "
            "2.25.<HMAC-SHA256(secret per-import salt, uid)>; SOP Class UID kept if registered",
    "dates": "removed (Longitudinal Temporal Information Modified = REMOVED)",
    "private_tags": "removed",
    "overlays_curves": "removed",
    "pixels": "decoded and re-encoded uncompressed; burned-in text is not removed "
              "(Burned In Annotation YES is reported)",
    "raster": "PNG/JPEG pixels decoded and re-encoded as PNG; no chunk, segment, "
              "profile or trailer kept",
}

BURNED_IN_WARNING = (
    "BurnedInAnnotation is YES: burned-in text may identify the patient; check the image"
)


class DeidentificationError(ValueError):
    """A file could not be de-identified; the message says why (the caller names the file)."""


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
    """What :func:`deidentify` changed (keywords or tags; never the removed values).

    Attributes:
        removed: Top-level attributes not kept (keyword, or tag for private/unknown ones).
        emptied: Type 2 attributes written empty.
        uids_remapped: Instance UIDs replaced.
        private_removed: Private elements removed, at any depth.
        dropped_values: Kept attributes whose value failed validation and was dropped.
        pixels_reencoded: True when pixel data was decoded and written back uncompressed.
        warnings: Messages for the import summary (burned-in text).
    """

    removed: list[str] = field(default_factory=list)
    emptied: list[str] = field(default_factory=list)
    uids_remapped: int = 0
    private_removed: int = 0
    dropped_values: list[str] = field(default_factory=list)
    pixels_reencoded: bool = False
    warnings: list[str] = field(default_factory=list)


def _iter_elements(ds: Dataset) -> Iterator[DataElement]:
    """Every element at any depth, without recursion (a hostile file may nest deeply)."""
    stack = [ds]
    while stack:
        current = stack.pop()
        for elem in current:
            yield elem
            if elem.VR == "SQ" and elem.value:
                stack.extend(item for item in elem.value if isinstance(item, Dataset))


def _values(value: Any) -> list[Any]:
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return list(value)
    return [value]


def _coded(keyword: str, value: Any) -> Any:
    allowed = _ENUMS[keyword]
    values = [str(v).strip().upper() for v in _values(value)]
    if not values or any(v not in allowed for v in values):
        return None
    return values if len(values) > 1 else values[0]


def _numeric(value: Any, pattern: re.Pattern[str]) -> Any:
    values = []
    for v in _values(value):
        text = str(v)
        if not pattern.fullmatch(text) or not np.isfinite(float(text)):
            return None
        values.append(text.strip())
    if not values:
        return None
    return values if len(values) > 1 else values[0]


def _image_type(value: Any) -> Any:
    values = [str(v).strip().upper() for v in _values(value)][:2]
    if not values or any(v not in terms for v, terms in zip(values, _IMAGE_TYPE, strict=False)):
        return None
    return values


def _lut_item(item: Dataset, with_type: bool, little_endian: bool) -> Dataset | None:
    """A LUT sequence item reduced to its descriptor and data (data cut to the entries)."""
    if "LUTDescriptor" not in item or "LUTData" not in item:
        return None
    descriptor = item["LUTDescriptor"]
    n_entries = int(_values(descriptor.value)[0]) or 65536
    data = item["LUTData"]
    value = data.value
    if isinstance(value, bytes):
        # Two bytes an entry at most, whichever way the reader takes 8-bit entries.
        value = value[: 2 * n_entries]
        if not little_endian:
            # OW bytes are kept as read; the stored file is little endian.
            value = np.frombuffer(value[: len(value) // 2 * 2], ">u2").astype("<u2").tobytes()
    else:
        value = _values(value)[:n_entries]
    descriptor_vr, data_vr = descriptor.VR, data.VR
    # Read without an explicit VR these stay ambiguous ("US or SS"); pin them down, since the
    # item no longer sits in its original dataset for pydicom to resolve them on writing.
    if " or " in descriptor_vr:
        descriptor_vr = "SS" if int(_values(descriptor.value)[1]) < 0 else "US"
    if " or " in data_vr:
        data_vr = "OW" if isinstance(value, bytes) else "US"
    out = Dataset()
    out.add(DataElement(descriptor.tag, descriptor_vr, descriptor.value))
    out.add(DataElement(data.tag, data_vr, value))
    if with_type and "ModalityLUTType" in item:
        lut_type = _coded("RescaleType", item.ModalityLUTType)
        if lut_type is not None:
            out.ModalityLUTType = lut_type
    return out


def _kept_value(ds: Dataset, keyword: str) -> Any:
    """The validated value of a kept attribute, or None to drop it."""
    raw = ds[keyword].value
    if keyword in _ENUMS:
        return _coded(keyword, raw)
    if keyword in _NUMBERS:
        return _numeric(raw, _DECIMAL)
    if keyword in _INTEGER_STRINGS:
        return _numeric(raw, _INTEGER)
    if keyword == "ImageType":
        return _image_type(raw)
    if keyword in _LUT_SEQUENCES:
        little = ds.original_encoding[1] is not False
        items = [_lut_item(item, keyword == "ModalityLUTSequence", little) for item in raw or []]
        kept = [item for item in items if item is not None]
        return Sequence(kept) if kept else None
    raise AssertionError(keyword)  # every kept keyword has a rule above


def _reencode_pixels(ds: Dataset) -> dict[str, Any]:
    """Decode every frame of ``ds`` and return the Image Pixel module to store.

    Raises:
        DeidentificationError: Over the pixel limit, or the pixel data cannot be decoded.
    """
    from pydicom.pixels import get_decoder

    meta = getattr(ds, "file_meta", None)
    tsyntax = meta.get("TransferSyntaxUID") if meta is not None else None
    if not tsyntax:
        # Old files without a transfer syntax: the encoding pydicom read them in says which
        # of the uncompressed syntaxes it is.
        implicit, little = getattr(ds, "original_encoding", (None, None))
        if implicit is None or little is None:
            raise DeidentificationError("DICOM file has no transfer syntax in its file meta")
        tsyntax = {(True, True): ImplicitVRLittleEndian, (False, True): ExplicitVRLittleEndian,
                   (False, False): ExplicitVRBigEndian}.get((implicit, little))
        if tsyntax is None:
            raise DeidentificationError("DICOM file has no transfer syntax in its file meta")
        if meta is not None:
            meta.TransferSyntaxUID = tsyntax  # for the decoder
    try:
        check_dicom_pixel_limit("", ds)
    except ImageLoadError as exc:
        raise DeidentificationError(str(exc)) from None
    photometric = str(ds.get("PhotometricInterpretation", "")).strip().upper()
    try:
        decoder = get_decoder(UID(str(tsyntax)))
        arrays = []
        info: dict[str, Any] = {}
        for arr, frame_info in decoder.iter_array(ds, as_rgb=True, allow_excess_frames=False):
            if photometric == "PALETTE COLOR":
                # The palette tables are not kept: store the colours they give.
                from pydicom.pixels import apply_color_lut

                arr = apply_color_lut(arr, ds)
                frame_info = {**frame_info, "photometric_interpretation": "RGB",
                              "bits_stored": arr.dtype.itemsize * 8}
            arrays.append(arr)
            info = frame_info
    except Exception as exc:  # decoders raise many types; each means "cannot decode"
        raise DeidentificationError(f"cannot decode DICOM pixel data ({exc})") from None
    if not arrays or arrays[0].dtype.kind not in "ui":
        raise DeidentificationError("only integer DICOM pixel data is supported")
    first = arrays[0]
    samples = 3 if first.ndim == 3 else 1
    photometric = str(info.get("photometric_interpretation", photometric)).upper()
    if samples == 3:
        photometric = "RGB"
    if photometric not in _PHOTOMETRIC:
        raise DeidentificationError(f"unsupported Photometric Interpretation {photometric}")
    little = first.dtype.newbyteorder("<")
    data = b"".join(np.ascontiguousarray(a, dtype=little).tobytes() for a in arrays)
    if len(data) % 2:
        data += b"\x00"
    bits_allocated = first.dtype.itemsize * 8
    bits_stored = min(int(info.get("bits_stored", bits_allocated)), bits_allocated)
    module: dict[str, Any] = {
        "SamplesPerPixel": samples,
        "PhotometricInterpretation": photometric,
        "Rows": int(first.shape[0]),
        "Columns": int(first.shape[1]),
        "BitsAllocated": bits_allocated,
        "BitsStored": bits_stored,
        "HighBit": bits_stored - 1,
        "PixelRepresentation": 1 if first.dtype.kind == "i" else 0,
    }
    if samples == 3:
        module["PlanarConfiguration"] = 0
    if "NumberOfFrames" in ds or len(arrays) > 1:
        module["NumberOfFrames"] = len(arrays)
    module["PixelData"] = DataElement(0x7FE00010, "OB" if bits_allocated <= 8 else "OW", data)
    if UID(str(tsyntax)).is_compressed and str(tsyntax) in _LOSSY_SYNTAXES:
        module["LossyImageCompression"] = "01"
    return module


# Transfer syntaxes that are always lossy (JPEG 2000 and JPEG-LS may be either: the file's
# own Lossy Image Compression value is kept for those).
_LOSSY_SYNTAXES = frozenset({
    "1.2.840.10008.1.2.4.50",  # JPEG Baseline
    "1.2.840.10008.1.2.4.51",  # JPEG Extended
})


def deidentify(
    ds: Dataset, mapper: UidMapper, *, patient_pseudonym: str | None = None
) -> DeidReport:
    """De-identify ``ds`` in place by the allow-list (see the module docstring).

    Args:
        ds: A dataset read with pydicom (its file meta gives the transfer syntax).
        mapper: The import's UID mapper.
        patient_pseudonym: If given, Patient's Name and Patient ID are set to it instead of
            being emptied.

    Returns:
        What was changed.

    Raises:
        DeidentificationError: The pixel data is over the pixel limit, cannot be decoded or
            is of an unsupported kind.
    """
    report = DeidReport()
    burned_in = str(ds.get("BurnedInAnnotation", "") or "").strip().upper()
    if burned_in == "YES":
        report.warnings.append(BURNED_IN_WARNING)
    pixels = _reencode_pixels(ds) if "PixelData" in ds else {}
    report.pixels_reencoded = bool(pixels)
    kept: dict[str, Any] = {}
    for keyword in KEPT_ATTRIBUTES:
        if keyword in _PIXEL_MODULE or keyword == "SOPClassUID" or keyword in _INSTANCE_UIDS:
            continue
        if keyword not in ds:
            continue
        try:
            value = _kept_value(ds, keyword)
        except Exception:  # a malformed value (wrong VR, unreadable number) is dropped
            value = None
        if value is None:
            report.dropped_values.append(keyword)
        else:
            kept[keyword] = value
    uids: dict[str, str] = {}
    for keyword in _INSTANCE_UIDS:
        value = str(ds.get(keyword, "") or "").strip()
        if value:
            uids[keyword] = mapper.map(value)
            report.uids_remapped += 1
    sop_class = str(ds.get("SOPClassUID", "") or "").strip()
    if sop_class and not UID(sop_class).keyword:
        # An unregistered (private) SOP class is an instance of free digits: remap it too.
        sop_class = mapper.map(sop_class)
        report.uids_remapped += 1
    report.private_removed = sum(1 for e in _iter_elements(ds) if e.tag.is_private)
    report.removed = sorted(
        {e.keyword or str(e.tag) for e in ds} - set(kept) - set(_PIXEL_MODULE)
        - set(_INSTANCE_UIDS) - {"SOPClassUID"}
    )
    transfer_syntax = ExplicitVRLittleEndian if pixels else (
        getattr(ds, "file_meta", FileMetaDataset()).get("TransferSyntaxUID")
        or ExplicitVRLittleEndian
    )

    ds.clear()
    for keyword, value in kept.items():
        setattr(ds, keyword, value)
    for keyword, value in pixels.items():
        if isinstance(value, DataElement):
            ds.add(value)
        else:
            setattr(ds, keyword, value)
    if sop_class:
        ds.SOPClassUID = sop_class
    for keyword, value in uids.items():
        setattr(ds, keyword, value)
    for keyword in EMPTIED_ATTRIBUTES:
        setattr(ds, keyword, None)
        report.emptied.append(keyword)
    if patient_pseudonym is not None:
        ds.PatientName = patient_pseudonym
        ds.PatientID = patient_pseudonym
        if not patient_pseudonym.isascii():
            ds.SpecificCharacterSet = "ISO_IR 192"  # UTF-8
    ds.PatientIdentityRemoved = "YES"
    ds.DeidentificationMethod = list(METHOD)
    code = Dataset()
    code.CodeValue, code.CodingSchemeDesignator, code.CodeMeaning = PROFILE_CODE
    ds.DeidentificationMethodCodeSequence = Sequence([code])
    ds.LongitudinalTemporalInformationModified = "REMOVED"

    meta = FileMetaDataset()
    if sop_class:
        meta.MediaStorageSOPClassUID = sop_class
    if "SOPInstanceUID" in ds:
        meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    meta.TransferSyntaxUID = transfer_syntax
    ds.file_meta = meta
    # The preamble is 128 free bytes that readers ignore and writers copy.
    ds.preamble = b"\x00" * 128
    syntax = UID(str(transfer_syntax))
    if syntax.is_transfer_syntax:
        # The dataset was read in its own encoding (maybe big endian); it is written in the
        # stored transfer syntax's.
        ds.set_original_encoding(syntax.is_implicit_VR, syntax.is_little_endian, None)
    return report


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
        DeidentificationError: The file cannot be read or written as DICOM, has no pixel
            data, or its pixel data is over the limit or cannot be decoded; the message
            names the file.
    """
    src = Path(src)
    try:
        ds = pydicom.dcmread(src)
    except Exception as exc:  # pydicom raises several types for a bad file
        raise DeidentificationError(f"{src}: not a readable DICOM file ({exc})") from exc
    if "PixelData" not in ds:
        raise DeidentificationError(f"{src}: DICOM file has no (integer) pixel data")
    if "SOPInstanceUID" not in ds:
        # Type 1: a file without one still gets a fresh, unrelated UID.
        ds.SOPInstanceUID = generate_uid()
    try:
        report = deidentify(ds, mapper, patient_pseudonym=patient_pseudonym)
    except DeidentificationError as exc:
        raise DeidentificationError(f"{src}: {exc}") from None
    buf = io.BytesIO()
    try:
        ds.save_as(buf, enforce_file_format=True)
    except Exception as exc:  # e.g. a value pydicom cannot encode
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
