"""Review of issue 14's calibration: unmarking a training item removes the unfinished answers
entirely, error records included.

In an ``error_records`` study the counts of an open training item derive from the rater's
records. Unmarking deleted the counts and the assignment but kept the records: the pair, a
study pair again, then carried records of a rater who no longer held it (in the export), and
a rater given it again found them with counts that no longer matched.
"""

from __future__ import annotations

from sqlalchemy import func, select

from radconcord.backend.services.annotation import error_records, rating
from radconcord.backend.services.quality import calibration
from radconcord.backend.types import Actor
from radconcord.db.models import ErrorRecord
from tests.services.test_error_records import _setup, _span

SYSTEM = Actor.system()


def test_unmarking_an_open_training_item_removes_its_error_records(any_db, make_study,
                                                                   fast_password_hashing):
    r1 = _setup(any_db, make_study)["r1"]
    calibration.mark_training(any_db, SYSTEM, study_name="S", expert={3: {"1:1": 1}},
                              source="panel")
    item = rating.rater_queue(any_db, r1, study_name="S")[0]
    assert rating.get_pair(any_db, r1, opaque_id=item.opaque_id).training
    a, b = _span("Small left")
    error_records.add_record(any_db, r1, opaque_id=item.opaque_id, kind="span", category=1,
                             significant=True, candidate_start=a, candidate_end=b)

    calibration.unmark_training(any_db, SYSTEM, study_name="S", pair_numbers=[3])
    with any_db.read() as s:
        assert s.scalar(select(func.count(ErrorRecord.id))) == 0
    assert error_records.export_rows(any_db, SYSTEM, "S") == []
