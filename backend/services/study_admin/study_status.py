"""Which studies raters see, by status: the one home of the study-status policies.

A study moves ``draft`` (or ``importing`` while an import stages it) -> ``open`` -> ``closed``
-> ``archived`` (and back to ``closed``). Two policies read that status, and they differ on
purpose:

- :data:`UNPUBLISHED_STATUSES` (``draft``, ``importing``): studies no rater has ever been
  shown. No rater may know they exist: their pairs answer like pairs that do not exist,
  everywhere, including to a late time-on-task report (backend/services/annotation/activity.py).
- :data:`HIDDEN_STATUSES` (the unpublished ones and ``archived``): studies raters cannot see
  or reach now: left out of their lists, and their pairs refused as not found when opened
  or saved. An archived study *was* shown to its raters, so where a rater's earlier screen
  may still report on it (time on task) it is named and refused as archived, not as unknown.

:data:`READ_ONLY_STATUSES` are visible to raters but no longer change.
"""

from __future__ import annotations

from radconcord.db.models import STUDY_STAGING

#: Status of an archived study: kept, hidden from raters and from the default listings.
ARCHIVED = "archived"
#: Studies never shown to raters: their pairs answer like pairs that do not exist.
UNPUBLISHED_STATUSES: tuple[str, ...] = ("draft", STUDY_STAGING)
#: Studies raters cannot see or reach: not opened yet, still being imported, or archived.
HIDDEN_STATUSES: tuple[str, ...] = (*UNPUBLISHED_STATUSES, ARCHIVED)
#: Studies raters can see but no longer change.
READ_ONLY_STATUSES: tuple[str, ...] = ("closed",)

__all__ = ["ARCHIVED", "HIDDEN_STATUSES", "READ_ONLY_STATUSES", "UNPUBLISHED_STATUSES"]
