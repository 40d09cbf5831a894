"""The training feedback table: definitions where the rater's counts differ, the verdict."""

from __future__ import annotations

from backend.services import calibration, rating
from webapp.components.training_feedback import feedback_html, verdict


def _feedback(mine: dict, expert: dict, *,
              max_error: int | None = 1) -> calibration.TrainingFeedback:
    cells = tuple(calibration.FeedbackCell(c, g, mine.get((c, g), 0), expert.get((c, g), 0))
                  for c, g in rating.CELLS)
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
