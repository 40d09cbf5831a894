"""The training feedback table: definitions where the rater's counts differ, the verdict."""

from __future__ import annotations

from pathlib import Path

from radconcord.backend.services.annotation import assignment_writes, rating
from radconcord.backend.services.quality import calibration
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.types import Actor
from radconcord.webapp.components.training_feedback import feedback_html, verdict


def _feedback(mine: dict, expert: dict, *,
              max_error: int | None = 1) -> calibration.TrainingFeedback:
    cells = tuple(calibration.FeedbackCell(c, g, mine.get((c, g), 0), expert.get((c, g), 0))
                  for c, g in assignment_writes.CELLS)
    r, e = sum(mine.values()), sum(expert.values())
    return calibration.TrainingFeedback(
        opaque_id="x", cells=cells, rater_total=r, expert_total=e,
        definitions={c: (calibration.CATEGORIES[c], calibration.CATEGORY_DEFINITIONS[c])
                     for c in calibration.CATEGORIES},
        max_error=max_error, passed=None if max_error is None else abs(r - e) <= max_error)


def test_definitions_are_written_out_only_where_the_counts_differ():
    html = feedback_html(_feedback({(2, True): 1}, {(2, True): 2, (4, False): 1}))
    omission, severity = (calibration.CATEGORY_DEFINITIONS[2],
                          calibration.CATEGORY_DEFINITIONS[4])
    false_finding = calibration.CATEGORY_DEFINITIONS[1]
    assert f'<span class="def">{omission}</span>' in html
    assert f'<span class="def">{severity}</span>' in html
    # Agreeing rows keep the definition on hover only: the panel fits 1280x800.
    assert f'<span class="def">{false_finding}</span>' not in html
    assert f'title="{false_finding}"' in html
    assert 'data-cell="2:1" title="significant: you 1, expert 2">1 / 2</td>' in html
    assert 'data-cell="total">1 / 3</td>' in html


def test_verdict_names_both_totals_and_the_rule():
    assert verdict(_feedback({(1, True): 2}, {(1, True): 1})) == (
        "Passed: your total (2) is within 1 of the expert's (1).")
    assert verdict(_feedback({(1, True): 4}, {(1, True): 1})) == (
        "Not passed: your total (4) differs from the expert's (1) by 3; at most 1 passes.")
    assert verdict(_feedback({}, {}, max_error=None)) is None


RATE = Path(__file__).resolve().parents[2] / "webapp" / "views" / "rate.py"


def _gated(env, required: int, answer: int) -> str:
    """Pair 1 a training item (expert total 1) behind a gate of ``required`` items within 0;
    rita answers ``answer`` errors and marks it done. Returns its opaque id."""
    calibration.mark_from_csv(env.db, Actor.system(), study_name=env.study, text=(
        "pair_number,error_category,clinically_significant,num_errors\n1,1,true,1\n"))
    study_settings.update_study_settings(env.db, Actor.system(), study_name=env.study,
                                         qualification_items=required,
                                         qualification_max_error=0)
    [item] = rating.rater_queue(env.db, env.rater, study_name=env.study)
    rating.set_count(env.db, env.rater, opaque_id=item.opaque_id, category=1,
                     significant=True, count=answer)
    rating.complete_pair(env.db, env.rater, opaque_id=item.opaque_id)
    return item.opaque_id


def test_a_rater_who_just_qualified_reads_that_the_study_pairs_are_open(
        study_env, make_app, all_text):
    item = _gated(study_env, 1, 1)
    at = make_app(study_env.rater, script=RATE, params={"pair": item})
    assert not at.exception, at.exception
    text = all_text(at)
    assert "Passed: your total (1) is within 0 of the expert's (1)." in text
    assert (f"Qualified: 1 of the 1 training item(s) needed passed; the study pairs of "
            f"{study_env.study!r} are open to you.") in text


def test_a_failed_rater_is_told_once_not_twice(study_env, make_app, all_text):
    # The rating page's banner says where a held-back rater stands; the panel does not
    # repeat it.
    item = _gated(study_env, 1, 3)
    at = make_app(study_env.rater, script=RATE, params={"pair": item})
    assert not at.exception, at.exception
    text = all_text(at)
    assert "Not passed: your total (3) differs from the expert's (1) by 2" in text
    assert text.count("You did not qualify for study") == 1
