"""Plain data passed into and out of services (never ORM objects)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROLES = ("admin", "rater")
CATEGORIES = {
    1: "False prediction of finding",
    2: "Omission of finding",
    3: "Incorrect location/position of finding",
    4: "Incorrect severity of finding",
    5: "Mention of comparison that is not in the reference",
    6: "Omission of comparison describing a change from a previous study",
}


@dataclass(frozen=True)
class Actor:
    """The authenticated user on whose behalf a service runs."""

    user_id: int
    username: str
    role: str

    @property
    def is_admin(self) -> bool:
        """Whether the actor may use admin services."""
        return self.role == "admin"

    @classmethod
    def system(cls) -> Actor:
        """The actor used by the command line and seeding (admin rights, no user row)."""
        return cls(user_id=0, username="system", role="admin")


@dataclass(frozen=True)
class ImageInput:
    """An image file to import for a case (absolute path on the importing machine)."""

    path: Path
    view: str | None = None


@dataclass(frozen=True)
class CandidateInput:
    """A candidate report and the generator (source) that produced it."""

    text: str
    source: str


@dataclass
class CaseInput:
    """One case to import: reference report, candidates, images."""

    case_id: str
    reference: str
    candidates: list[CandidateInput]
    images: list[ImageInput] = field(default_factory=list)


@dataclass(frozen=True)
class RatingInput:
    """One imported rating cell (used by the ReXVal importer)."""

    position: int  # pair position inside the study
    rater: str  # username
    category: int
    significant: bool
    count: int
