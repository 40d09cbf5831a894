"""Training (calibration) feedback on the rating screen: the expert's counts beside the rater's.

Placeholder wired into ``webapp/views/rate.py`` until the calibration part of issue 14 lands.
"""

from __future__ import annotations

from backend.services import rating
from backend.services.types import Actor
from db.session import Database


def training_feedback(db: Database, actor: Actor, view: rating.RaterPairView) -> None:
    """Show the expert counts of a done training item beside the rater's (placeholder)."""
    del db, actor, view
