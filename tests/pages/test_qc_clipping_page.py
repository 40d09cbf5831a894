"""AppTest: the Quality control page says when a rater's time on task was clipped (issue 21),
and by how much, per rater with the pairs; honest raters get one quiet line."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select, update

from radconcord.db.models import Assignment, Pair

SCRIPT = Path(__file__).resolve().parents[2] / "webapp" / "views" / "qc.py"


def _set_times(env, rater, claimed: float, credited: float) -> int:
    """Give the rater's first study pair the times; its 1-based pair number."""
    with env.db.begin() as s:
        pair_id, position = s.execute(
            select(Pair.id, Pair.position).join(Assignment, Assignment.pair_id == Pair.id)
            .where(Assignment.rater_id == rater.user_id).order_by(Pair.position)).first()
        s.execute(update(Assignment).where(Assignment.rater_id == rater.user_id,
                                           Assignment.pair_id == pair_id)
                  .values(claimed_seconds=claimed, active_seconds=credited))
    return position + 1


def test_clipped_time_is_named_with_its_amount_and_pairs(study_env, make_app, all_text):
    env = study_env
    number = _set_times(env, env.rater, claimed=500.0, credited=100.0)
    _set_times(env, env.other_rater, claimed=40.0, credited=40.0)
    at = make_app(env.admin, script=SCRIPT)
    assert not at.exception, at.exception
    text = all_text(at)
    assert "Time on task clipped" in text
    assert "**rita**: 6:40 of 8:20 claimed was clipped." in text
    assert "**ravi**" not in text
    (frame,) = [f.value for f in at.dataframe if "Clipped" in f.value.columns]
    assert frame.to_dict("records") == [{
        "Rater": "rita", "Claimed": "8:20", "Credited": "1:40", "Clipped": "6:40",
        "Pairs": str(number), "Comparisons": "", "Training / repeats": ""}]


def test_nothing_clipped_is_one_line(study_env, make_app, all_text):
    env = study_env
    _set_times(env, env.rater, claimed=40.0, credited=40.0)
    at = make_app(env.admin, script=SCRIPT)
    assert not at.exception, at.exception
    text = all_text(at)
    assert "No time on task was clipped: every rater was credited what their browser " \
           "claimed" in text
    assert "claimed was clipped" not in text
    assert not [f for f in at.dataframe if "Clipped" in f.value.columns]
