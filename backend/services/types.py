"""The plain data types of the services, defined in :mod:`backend.types` (below every package
that uses them: the parsers in ``backend.datasets`` build ``CaseInput`` without importing the
services). Kept so that ``from backend.services.types import ...`` keeps working.
"""

from radconcord.backend.types import (
    CATEGORIES,
    ROLES,
    Actor,
    CandidateInput,
    CaseInput,
    ImageInput,
    RatingInput,
)

__all__ = ["CATEGORIES", "ROLES", "Actor", "CandidateInput", "CaseInput", "ImageInput",
           "RatingInput"]
