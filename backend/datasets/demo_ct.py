"""The demo CT study: one synthetic chest CT phantom, its reference and three candidates.

The phantom is drawn by this module, deterministically (no random numbers, no downloads):
96 x 96 pixels of 0.9 mm, 40 axial slices 2.5 mm apart (anisotropic), in Hounsfield units.
An elliptic body (soft tissue, 40 HU) in air (-1000 HU); two lungs (-850 HU) that narrow
towards the apex and the base; the heart and mediastinum between them (40 HU); a vertebra
behind (bone, 700 HU) and ribs along the body wall (700 HU) on every other slice; and one
solid nodule of about 7 mm (40 HU) in the right upper lobe. It is written as a NIfTI file
(int16 HU, scl_slope 1, radiological RAS affine as CT-RATE ships its volumes) so the seeding
imports it through the real import path (classified from its header, de-identified, stored
as a volume). It is labelled SYNTHETIC wherever it appears; it is no patient's scan.

This module only writes the file and describes the case; seeding it as a study is
``backend.services.accounts.seed.seed_ct_demo``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from radconcord.backend.types import CandidateInput, CaseInput, ImageInput

#: Voxels: (slices, rows, columns), and the spacing in mm (slice, row, column).
SHAPE = (40, 96, 96)
SPACING_MM = (2.5, 0.9, 0.9)
#: Position of the first slice (feet end) along the body axis, mm.
Z0_MM = -50.0

AIR, SOFT, LUNG, BONE = -1000, 40, -850, 700
#: The nodule: centre (slice, row, column) and radius in mm.
NODULE_CENTRE = (29, 36, 30)
NODULE_RADIUS_MM = 3.5

CASE_ID = "ct-demo-1"
FILE_NAME = "ct_phantom.nii.gz"
NOTES = ("SYNTHETIC: a chest CT phantom drawn by backend/datasets/demo_ct.py (96 x 96 x 40 "
         "voxels, 0.9 x 0.9 x 2.5 mm), not patient data.")
DESCRIPTION = ("Demo chest CT reports written for RadConcord on a SYNTHETIC CT phantom "
               "(not patient data): one volume, three generators.")

REFERENCE = (
    "EXAMINATION: CT chest without contrast.\n"
    "FINDINGS: A solid 7 mm nodule in the right upper lobe. The lungs are otherwise clear. "
    "No pleural effusion or pneumothorax. The heart and mediastinum are normal in size. "
    "No lymphadenopathy. The visualized osseous structures are intact.\n"
    "IMPRESSION: Solid 7 mm right upper lobe nodule; follow-up CT is recommended."
)

#: source -> (candidate text, the errors it was written with: (category 1-6, significant,
#: what)). Categories as in ReXVal: 1 false finding, 2 missed finding, 3 wrong location,
#: 4 wrong severity, 5 false comparison, 6 missed comparison.
CANDIDATES: dict[str, tuple[str, tuple[tuple[int, bool, str], ...]]] = {
    "gen-A": (
        "EXAMINATION: CT chest without contrast.\n"
        "FINDINGS: A solid 7 mm nodule in the right upper lobe. No pleural effusion or "
        "pneumothorax. The heart and mediastinum are normal in size. The visualized osseous "
        "structures are intact.\n"
        "IMPRESSION: 7 mm right upper lobe nodule; follow-up CT is recommended.",
        (),
    ),
    "gen-B": (
        "EXAMINATION: CT chest without contrast.\n"
        "FINDINGS: The lungs are clear. No pleural effusion or pneumothorax. The heart and "
        "mediastinum are normal in size. The visualized osseous structures are intact.\n"
        "IMPRESSION: No acute cardiopulmonary abnormality.",
        ((2, True, "the right upper lobe nodule is missed"),),
    ),
    "gen-C": (
        "EXAMINATION: CT chest without contrast.\n"
        "FINDINGS: A solid 7 mm nodule in the left lower lobe. Small right pleural effusion. "
        "The heart and mediastinum are normal in size. The visualized osseous structures are "
        "intact.\n"
        "IMPRESSION: Left lower lobe nodule and a small right pleural effusion, new since the "
        "prior study.",
        ((3, True, "the nodule is placed in the left lower lobe"),
         (1, True, "a pleural effusion that is not there"),
         (5, False, "a prior study that does not exist")),
    ),
}


def phantom_slice(k: int) -> np.ndarray:
    """HU of axial slice ``k`` (0 at the feet end), rows anterior to posterior and columns
    from the patient's right to left (radiological display)."""
    slices, rows, cols = SHAPE
    y, x = np.mgrid[0:rows, 0:cols].astype(np.float64)
    x = (x - (cols - 1) / 2) / (cols / 2)
    y = (y - (rows - 1) / 2) / (rows / 2)
    hu = np.full((rows, cols), AIR, np.int16)
    body = (x / 0.9) ** 2 + (y / 0.68) ** 2 < 1
    hu[body] = SOFT
    # Ribs: short bright arcs just inside the body wall, on every other slice.
    if k % 2 == 0:
        ring = ((x / 0.84) ** 2 + (y / 0.62) ** 2 < 1) & ((x / 0.78) ** 2 + (y / 0.56) ** 2 >= 1)
        angle = np.degrees(np.arctan2(y, x)) % 30
        hu[ring & (angle < 9) & (np.abs(x) > 0.3)] = BONE
    # Lungs, narrower towards the apex (last slices) and the base (first slices).
    shrink = 1 - 0.35 * abs(k - slices / 2) / (slices / 2)
    for cx in (-0.4, 0.4):
        hu[((x - cx) / (0.28 * shrink)) ** 2 + ((y + 0.02) / (0.46 * shrink)) ** 2 < 1] = LUNG
    # Heart and mediastinum between the lungs, anterior; the vertebra behind them.
    if k < 0.7 * slices:
        hu[((x - 0.05) / 0.2) ** 2 + ((y + 0.12) / 0.22) ** 2 < 1] = SOFT
    hu[x ** 2 + (y - 0.5) ** 2 < 0.12 ** 2] = BONE
    # The nodule (a ball in mm, so it is round in every plane).
    ck, cr, cc = NODULE_CENTRE
    dz = (k - ck) * SPACING_MM[0]
    if abs(dz) < NODULE_RADIUS_MM:
        yy, xx = np.mgrid[0:rows, 0:cols]
        ball = ((yy - cr) * SPACING_MM[1]) ** 2 + ((xx - cc) * SPACING_MM[2]) ** 2 + dz ** 2
        hu[ball < NODULE_RADIUS_MM ** 2] = SOFT
    return hu


def phantom_volume() -> np.ndarray:
    """The whole phantom, (slices, rows, columns) int16 HU."""
    return np.stack([phantom_slice(k) for k in range(SHAPE[0])])


def write_phantom(path: Path) -> Path:
    """Write the phantom as a NIfTI file (int16 HU, scl_slope 1, RAS affine with negative x
    and y steps: column 0 is the patient's right, row 0 anterior, slice 0 the feet end)."""
    import nibabel as nib

    data = np.ascontiguousarray(phantom_volume().transpose(2, 1, 0))  # (x, y, z)
    dz, dy, dx = SPACING_MM
    affine = np.array([[-dx, 0, 0, 0], [0, -dy, 0, 0], [0, 0, dz, Z0_MM], [0, 0, 0, 1]],
                      dtype=np.float64)
    img = nib.Nifti1Image(data, affine)
    img.header.set_xyzt_units("mm")
    img.header.set_slope_inter(1.0, 0.0)
    img.set_sform(affine, code=1)
    img.set_qform(affine, code=1)
    nib.save(img, path)
    return path


def ct_demo_case(folder: Path) -> CaseInput:
    """The CT demo case, its phantom written into ``folder`` (a staging folder the caller
    removes after the import)."""
    path = write_phantom(Path(folder) / FILE_NAME)
    return CaseInput(
        case_id=CASE_ID,
        reference=REFERENCE,
        candidates=[CandidateInput(text=text, source=source)
                    for source, (text, _) in CANDIDATES.items()],
        images=[ImageInput(path=path)],  # no view: a NIfTI volume is read as CT
    )


def ct_demo_errors() -> dict[str, list[dict[str, object]]]:
    """source -> the errors its candidate was written with (recorded in the provenance)."""
    return {source: [{"category": c, "significant": s, "what": w} for c, s, w in errors]
            for source, (_, errors) in CANDIDATES.items()}
