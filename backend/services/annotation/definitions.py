"""The six ReXVal error categories as a rater needs them: a one-line definition and an example.

The categories and their order are those of the ReXVal dataset (Yu et al., 2023), whose
radiologists counted, for each candidate report against its reference, the errors of each
kind, each either clinically significant or not. The wording here is ours, written for the
rating screen's definitions panel (one keystroke away) and the training feedback; the names
are :data:`backend.types.CATEGORIES`, so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from radconcord.backend.types import CATEGORIES


@dataclass(frozen=True)
class CategoryDefinition:
    """One error category as shown to a rater.

    Attributes:
        category: The category number, 1-6 (the grid's row).
        name: Its name (``CATEGORIES[category]``).
        definition: What counts as one error of this kind, in one line.
        example: A short reference/candidate example of one such error.
    """

    category: int
    name: str
    definition: str
    example: str


_TEXTS: dict[int, tuple[str, str]] = {
    1: ("The candidate states a finding that the reference does not contain.",
        "Reference: \"Lungs are clear.\" Candidate: \"Right lower lobe consolidation.\""),
    2: ("The candidate leaves out a finding that the reference reports.",
        "Reference: \"Small left pleural effusion.\" Candidate says nothing of an effusion."),
    3: ("The finding is in both texts, but at a different location or position (side, "
        "lobe, level, a line or tube's tip).",
        "Reference: \"Left basilar atelectasis.\" Candidate: \"Right basilar atelectasis.\""),
    4: ("The finding is in both texts, but its severity or size differs.",
        "Reference: \"Large right pneumothorax.\" Candidate: \"Small right pneumothorax.\""),
    5: ("The candidate compares with a prior study (new, stable, improved, worse) where the "
        "reference makes no such comparison.",
        "Reference: \"Moderate cardiomegaly.\" Candidate: \"Cardiomegaly, increased since "
        "the prior study.\""),
    6: ("The reference describes a change from a previous study that the candidate leaves "
        "out.",
        "Reference: \"Effusion has decreased since yesterday.\" Candidate: \"Small "
        "effusion.\""),
}

#: The six categories in grid order.
DEFINITIONS: tuple[CategoryDefinition, ...] = tuple(
    CategoryDefinition(category=c, name=CATEGORIES[c], definition=_TEXTS[c][0],
                       example=_TEXTS[c][1])
    for c in sorted(CATEGORIES)
)

#: How to choose the grid's column for an error.
SIGNIFICANCE_NOTE = (
    "Clinically significant: the error could change the patient's management or the "
    "clinician's interpretation (a missed pneumothorax, a line on the wrong side). "
    "Clinically insignificant: a real error that would not (a missed old healed rib "
    "fracture, a slightly different size of a small stable nodule)."
)

__all__ = ["DEFINITIONS", "SIGNIFICANCE_NOTE", "CategoryDefinition"]
