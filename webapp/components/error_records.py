"""Per-error records on the rating screen (span selection in the candidate, omissions).

Placeholder wired into ``webapp/views/rate.py`` until the per-error part of issue 14 lands.
"""

from __future__ import annotations

from backend.services import rating
from backend.services.types import Actor
from db.session import Database


def error_records_panel(db: Database, actor: Actor, view: rating.RaterPairView) -> None:
    """Let the rater mark error spans and omissions of this pair (placeholder)."""
    del db, actor, view
