"""The bundled demo study (``assets/demo``): cases, candidates from three generators, images.

Two cases use a real PA chest CR from the ``pydicom-data`` package (``RG1_UNCR.dcm`` and its
JPEG 2000 twin ``RG1_J2KI.dcm``), resolved at seed time so the 7 MB files are never committed;
one case uses a synthetic drawn phantom (PA + lateral PNG, labelled synthetic in its notes);
the rest are text only. See ``assets/demo/README.md`` for provenance and licences.

This module only reads the assets; importing them as a study is
``backend.services.accounts.seed.import_demo`` (a parser knows nothing of the services).
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
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



# ------------------------------------------------------------------ constructed demo ratings

#: How the seeded demo ratings are labelled wherever they appear (dashboard, QC, the HTML
#: report, the export manifest): they are made by a program, not by radiologists.
CONSTRUCTED_LABEL = "demo ratings (constructed)"
#: The study provenance key that records them (what a service reads to label a study).
CONSTRUCTED_KEY = "constructed_ratings"


@dataclass(frozen=True)
class NoiseModel:
    """How a constructed rater's counts are drawn from a candidate's written errors.

    For every pair and rater, with one ``random.Random`` seeded by
    ``"<seed>:<rater>:<case id>:<source>"`` (so a rater's counts never depend on the order of
    the pairs or on the other raters):

    * each written error is missed with probability ``p_miss``;
    * an error that is kept has its significance flipped with probability ``p_flip``;
    * one spurious error is added with probability ``q_spurious``: its category uniform over
      1-6, clinically significant with probability ``q_significant``.

    The rater's count in a cell (category, significant) is the number of errors left there.
    """

    p_miss: float = 0.15
    p_flip: float = 0.10
    q_spurious: float = 0.12
    q_significant: float = 0.30
    seed: int = 0

    def as_dict(self) -> dict[str, float | int]:
        """The parameters, as recorded in the study's provenance."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class WrittenError:
    """One error a demo candidate was written with."""

    category: int
    significant: bool
    what: str = ""


def constructed_errors() -> dict[tuple[str, str], tuple[WrittenError, ...]]:
    """(case id, source) -> the errors that candidate was written with
    (``assets/demo/constructed_errors.json``, written by us from the texts, not by
    radiologists).

    Raises:
        InvalidInput: The file is missing or malformed.
    """
    path = demo_dir() / "constructed_errors.json"
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
        out: dict[tuple[str, str], tuple[WrittenError, ...]] = {}
        for case_id, by_source in spec["cases"].items():
            for source, errors in by_source.items():
                out[(case_id, source)] = tuple(
                    WrittenError(int(e["category"]), bool(e["significant"]), str(e.get("what", "")))
                    for e in errors)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"{path}: cannot read the constructed demo errors ({exc})") from None
    for (case_id, source), errors in out.items():
        for e in errors:
            if e.category not in range(1, 7):
                raise InvalidInput(f"{path}: {case_id}/{source}: category {e.category} "
                                   "is not 1-6")
    return out


def constructed_counts(errors: tuple[WrittenError, ...], *, rater: str, case_id: str,
                       source: str, model: NoiseModel = NoiseModel()
                       ) -> dict[tuple[int, bool], int]:
    """One constructed rater's 12 counts of one pair (every cell, zeros included).

    Args:
        errors: The errors the candidate was written with.
        rater: The constructed rater's name (part of the seed).
        case_id: The case's id (part of the seed).
        source: The candidate's source (part of the seed).
        model: The noise model.
    """
    rng = random.Random(f"{model.seed}:{rater}:{case_id}:{source}")
    counts = {(c, sig): 0 for c in range(1, 7) for sig in (True, False)}
    for error in errors:
        if rng.random() < model.p_miss:
            continue
        significant = error.significant
        if rng.random() < model.p_flip:
            significant = not significant
        counts[(error.category, significant)] += 1
    if rng.random() < model.q_spurious:
        category = rng.randint(1, 6)
        counts[(category, rng.random() < model.q_significant)] += 1
    return counts
