"""Review of issue 14's qualification gate: fewer training items marked than the gate needs.

A lead who sets ``qualification_items`` to 2 and marks the items one at a time must not see
every rater "did not qualify" (nor must the raters be told so) before anyone has answered:
the rater waits for the items still to come.
"""

from __future__ import annotations

from radconcord.backend.services.annotation import rating
from radconcord.backend.services.quality import calibration
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.types import Actor
from tests.services.test_calibration import _answer, _csv, _setup

SYSTEM = Actor.system()


def test_fewer_items_than_required_is_waiting_not_failed(any_db, make_study,
                                                         fast_password_hashing):
    _, actors = _setup(any_db, make_study)
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S", qualification_items=2,
                                         qualification_max_error=0)
    calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=_csv((1, 1)))
    r1 = actors["r1"]
    [mine] = rating.rater_studies(any_db, r1)
    assert "did not qualify" not in mine.qualification
    assert mine.resume_opaque_id is not None  # the one training item is there to do
    status = {r.rater: r for r in calibration.qualification_status(any_db, SYSTEM,
                                                                   study_name="S")}
    assert not status["r1"].failed and status["r1"].status == "in training"

    # Passing the one item there is still not failing: the rater waits for the second.
    [item] = rating.rater_queue(any_db, r1, study_name="S")
    _answer(any_db, r1, item.opaque_id, 1)
    [mine] = rating.rater_studies(any_db, r1)
    assert "did not qualify" not in mine.qualification
    assert "1 of the 2 training items needed passed" in mine.qualification
    assert not calibration.qualification_status(any_db, SYSTEM, study_name="S")[0].failed

    # A verdict comes once the items are all there: r2 fails the first, the second is marked.
    r2 = actors["r2"]
    [item] = rating.rater_queue(any_db, r2, study_name="S")
    _answer(any_db, r2, item.opaque_id, 3)
    calibration.mark_from_csv(any_db, SYSTEM, study_name="S", text=_csv((2, 1)))
    status = {r.rater: r for r in calibration.qualification_status(any_db, SYSTEM,
                                                                   study_name="S")}
    # With both items marked, r2 (one failed, one left) can no longer reach 2 passed.
    assert status["r2"].failed and not status["r1"].failed
