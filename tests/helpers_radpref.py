"""Small RadPref files in the published layout (CRIMSON), written by the tests themselves.

Three cases, two annotators: both error types, several attributes (one error with two),
missing findings, optional keys present in some annotations and absent in others, key
orders that differ between objects, non-ASCII text, and the two file styles of the
published set (``preference_data.json``: UTF-8 with a final newline; annotator files:
``\\u`` escapes, no final newline).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CASES: list[dict[str, Any]] = [
    {
        "id": "case-001",
        "ground_truth_report": "Right IJ catheter tip in the lower SVC. No pneumothorax. "
                               "Left lower lobe atelectasis.",
        "ground_truth_findings": ["Right IJ catheter tip in the lower SVC",
                                  "Left lower lobe atelectasis"],
        "C1_report": "Central venous catheter with tip in the mid SVC. Abdominal aortic "
                     "aneurysm.",
        "C1_findings": ["Central venous catheter with tip in the mid SVC",
                        "Abdominal aortic aneurysm"],
        "C1_source": "gen-m",
        "C2_report": "Left IJ catheter tip in the lower SVC. Severe left basal atelectasis.",
        "C2_findings": ["Left IJ catheter tip in the lower SVC",
                        "Severe left basal atelectasis"],
        "C2_source": "gen-g",
        "PatientAge": "072Y",
        "PatientSex": "F",
        "Indication": "Central line placement – check",
        "Comparison": "Comparison: 04/10/2017",
        "StudyDescription": "DG CHEST 1V PORT",
    },
    {
        "id": "case-002",
        "ground_truth_report": "No acute cardiopulmonary process.",
        "ground_truth_findings": [],
        "C1_report": "No acute cardiopulmonary process.",
        "C1_findings": [],
        "C1_source": "gen-g",
        "C2_report": "Lungs are clear.",
        "C2_findings": ["Lungs are clear"],
        "C2_source": "gen-m",
        "PatientAge": "045Y",
        "PatientSex": "M",
        "Indication": "",
        "Comparison": "None.",
        "StudyDescription": "CHEST PA AND LAT",
    },
    {
        "id": "case-003",
        "ground_truth_report": "Small right pleural effusion, increased. Stable cardiomegaly.",
        "ground_truth_findings": ["Small right pleural effusion, increased",
                                  "Stable cardiomegaly"],
        "C1_report": "Large right pleural effusion, new. Cardiomegaly.",
        "C1_findings": ["Large right pleural effusion, new", "Cardiomegaly"],
        "C1_source": "gen-m",
        "C2_report": "Small left pleural effusion. 2 cm nodule.",
        "C2_findings": ["Small left pleural effusion", "2 cm nodule"],
        "C2_source": "gen-g",
        "PatientAge": "080Y",
        "PatientSex": "F",
        "Indication": "Dyspnoea",
        "Comparison": "Prior 2016",
        "StudyDescription": "CHEST PA",
    },
]

USER_1: dict[str, Any] = {
    "user_id": "1",
    "annotations": {
        "case-001": {
            "C1": {
                "finding_errors": {
                    "1": {"error_type": "false", "clinical_significance":
                          "actionable_not_urgent",
                          "explanation": "Aneurysm can’t be seen on a chest film"},
                    "0": {"error_type": "attribute", "attributes": {"location": "negligible"}},
                },
                "missing_findings": {
                    "1": {"clinical_significance": "not_actionable_not_urgent"},
                },
                "rating": 2,
                "rating_explanation": "Hallucinated aneurysm",
            },
            "C2": {
                "rating": 4,
                "finding_errors": {
                    "0": {"attributes": {"location": "significant"},
                          "error_type": "attribute"},
                    "1": {"error_type": "attribute", "clinical_significance": "urgent",
                          "attributes": {"severity": "significant",
                                         "measurement": "negligible"}},
                },
                "missing_findings": {},
            },
            "new_finding_indices": {"C1": [0, 1], "C2": [1], "GT": []},
        },
        "case-003": {
            "C1": {
                "finding_errors": {
                    "0": {"error_type": "attribute",
                          "attributes": {"temporal": "significant",
                                         "overinterpretation": "negligible"}},
                },
                "missing_findings": {},
                "rating": 3,
            },
            "C2": {
                "finding_errors": {
                    "1": {"error_type": "false", "clinical_significance": "benign_expected"},
                    "0": {"error_type": "attribute",
                          "attributes": {"descriptor": "negligible", "certainty":
                                         "negligible", "unspecific": "significant"}},
                },
                "missing_findings": {
                    "1": {"clinical_significance": "urgent", "explanation": "missed"},
                    "0": {"clinical_significance": "actionable_not_urgent"},
                },
                "rating": 1,
                "rating_explanation": "",
            },
        },
        "case-002": {
            "C1": {"finding_errors": {}, "missing_findings": {}, "rating": 5},
            "C2": {"finding_errors": {}, "missing_findings": {}, "rating": 5,
                   "rating_explanation": "fine"},
        },
    },
}

USER_2: dict[str, Any] = {
    "annotations": {
        "case-002": {
            "C2": {"finding_errors": {}, "missing_findings": {}, "rating": 4},
            "C1": {"rating_explanation": "ok", "rating": 5, "finding_errors": {},
                   "missing_findings": {}},
        },
        "case-001": {
            "C1": {
                "finding_errors": {"1": {"clinical_significance": "urgent",
                                         "error_type": "false"}},
                "missing_findings": {"0": {"clinical_significance": "benign_expected"}},
                "rating": 1,
            },
            "C2": {"finding_errors": {}, "missing_findings": {}, "rating": 3},
            "new_finding_indices": {"GT": [1]},
        },
    },
    "user_id": "2",
}


def preferences_bytes(cases: list[dict[str, Any]] | None = None) -> bytes:
    """``preference_data.json`` as published: UTF-8 text, two-space indent, final newline."""
    return (json.dumps(CASES if cases is None else cases, indent=2, ensure_ascii=False)
            + "\n").encode("utf-8")


def user_bytes(user: dict[str, Any]) -> bytes:
    """An annotator file as published: ``\\u`` escapes, two-space indent, no final newline."""
    return json.dumps(user, indent=2).encode("ascii")


def write_set(root: Path, users: dict[str, dict[str, Any]] | None = None,
              cases: list[dict[str, Any]] | None = None) -> tuple[Path, Path]:
    """Write ``root/preference_data.json`` and ``root/radiologist_annotations/<name>``.

    Returns:
        (preferences file, annotations folder).
    """
    root.mkdir(parents=True, exist_ok=True)
    prefs = root / "preference_data.json"
    prefs.write_bytes(preferences_bytes(cases))
    folder = root / "radiologist_annotations"
    folder.mkdir(exist_ok=True)
    for name, user in (users if users is not None
                       else {"user_1.json": USER_1, "user_2.json": USER_2}).items():
        (folder / name).write_bytes(user_bytes(user))
    return prefs, folder
