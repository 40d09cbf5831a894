"""The bundled demo study (``assets/demo``): cases, candidates from three generators, images.

Two cases use a real PA chest CR from the ``pydicom-data`` package (``RG1_UNCR.dcm`` and its
JPEG 2000 twin ``RG1_J2KI.dcm``), resolved at seed time so the 7 MB files are never committed;
one case uses a synthetic drawn phantom (PA + lateral PNG, labelled synthetic in its notes);
the rest are text only. See ``assets/demo/README.md`` for provenance and licences.

This module only reads the assets; importing them as a study is
``backend.services.accounts.seed.import_demo`` (a parser knows nothing of the services).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from radconcord.backend import config
from radconcord.backend.errors import InvalidInput
from radconcord.backend.types import CandidateInput, CaseInput, ImageInput


def demo_dir() -> Path:
    """The folder of the demo assets."""
    return config.assets_dir() / "demo"


def _load_spec() -> dict[str, Any]:
    path = demo_dir() / "cases.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{path}: cannot read the demo study ({exc})") from None


def _resolve_image(spec: dict[str, Any], case_id: str) -> ImageInput:
    view = spec.get("view")
    if "pydicom_testdata" in spec:
        name = spec["pydicom_testdata"]
        try:
            from pydicom.data import get_testdata_file

            found = get_testdata_file(name)
        except Exception as exc:  # pydicom-data may try to download when files are absent
            raise InvalidInput(
                f"demo case {case_id}: cannot resolve {name} from pydicom-data ({exc})"
            ) from None
        if not found:
            raise InvalidInput(
                f"demo case {case_id}: {name} not found; install the pydicom-data package"
            )
        return ImageInput(path=Path(str(found)), view=view)
    path = (demo_dir() / spec["file"]).resolve()
    if not path.is_relative_to(demo_dir().resolve()) or not path.is_file():
        raise InvalidInput(f"demo case {case_id}: missing demo image {spec['file']}")
    return ImageInput(path=path, view=view)


def demo_description() -> str:
    """The demo study's description text."""
    return str(_load_spec().get("description", ""))


def demo_notes() -> dict[str, str]:
    """Case id -> case notes (provenance of the images, 'SYNTHETIC' labels)."""
    return {c["case_id"]: c.get("notes", "") for c in _load_spec()["cases"]}


def demo_cases() -> list[CaseInput]:
    """The demo cases, images resolved to absolute paths.

    Returns:
        One ``CaseInput`` per case; candidates in gen-A, gen-B, gen-C order.

    Raises:
        InvalidInput: The assets or pydicom-data files are missing.
    """
    cases = []
    for item in _load_spec()["cases"]:
        case_id = item["case_id"]
        cases.append(
            CaseInput(
                case_id=case_id,
                reference=item["reference"],
                candidates=[
                    CandidateInput(text=text, source=source)
                    for source, text in item["candidates"].items()
                ],
                images=[_resolve_image(spec, case_id) for spec in item.get("images", [])],
            )
        )
    return cases

