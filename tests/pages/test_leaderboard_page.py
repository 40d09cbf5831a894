"""AppTest: the dashboard's "Leaderboard (benchmark protocol)" section.

Built on the reviewer study of ``tests/reviewer_study.py`` (3 raters, 2 sources, bleu4 and
rougeL really scored), against :func:`backend.services.evaluation.benchmark.study_leaderboard`,
which is
what ``radconcord benchmark --dataset study=NAME`` ranks for the same stored scores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from radconcord.backend.services.evaluation import benchmark
from tests.reviewer_study import STUDY as REVIEWER_STUDY
from tests.reviewer_study import build_reviewer_study

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"
RATERS = {"rita": "rita-password-1", "ravi": "ravi-password-1", "rosa": "rosa-password-1"}


@pytest.fixture
def reviewer_env(study_env):
    study_env.reviewer = build_reviewer_study(study_env.db, study_env.admin, raters=RATERS)
    return study_env


def _dashboard(env, make_app):
    at = make_app(env.admin, script=VIEWS / "dashboard.py")
    at.selectbox(key="dash_study").set_value(REVIEWER_STUDY)
    at.toggle(key="dash_live").set_value(False)
    at.number_input(key="dash_resamples").set_value(200)
    return at.run()


def _table(at, column: str):
    found = [d.value for d in at.dataframe if column in d.value.columns]
    return found[0] if found else None


def test_the_leaderboard_is_built_on_click_with_the_benchmark_figures(reviewer_env, make_app,
                                                                      all_text):
    at = _dashboard(reviewer_env, make_app)
    assert not at.exception and not at.error
    assert "Leaderboard (benchmark protocol)" in [s.value for s in at.subheader]
    assert at.multiselect(key=f"dash_lb_studies:{REVIEWER_STUDY}").value == [REVIEWER_STUDY]
    assert _table(at, "p (Holm) vs best") is None  # nothing is bootstrapped before the click
    at.button(key="dash_lb_build").click()
    at = at.run()
    assert not at.exception and not at.error
    expected = benchmark.study_leaderboard(reviewer_env.db, reviewer_env.admin,
                                           study_names=[REVIEWER_STUDY], bootstrap=200, seed=0)
    tb = expected["datasets"][0]["board"]["targets"]["total"]
    table = _table(at, "p (Holm) vs best")
    # Every stored key of the two families the study was scored with (all their keys).
    assert list(table["Metric"]) == [r["key"] for r in tb["rows"]]
    assert {"bleu4", "rougeL"} <= set(table["Metric"])
    assert list(table["Kendall tau-b"]) == [f"{r['kendall_tau_b']['value']:.3f}"
                                            for r in tb["rows"]]
    lo, hi = tb["rows"][0]["kendall_tau_b"]["ci95"]
    assert table["95% CI"][0] == f"[{lo:.3f}, {hi:.3f}]"
    assert list(table["Rank"]) == [str(r["rank"]) for r in tb["rows"]]
    assert table["Rank"][0] == "1"
    # The best metric has no test against itself; the other has its Holm-corrected p.
    assert table["p (Holm) vs best"][0] == ""
    assert table["p (Holm) vs best"][1] == f"{tb['rows'][1]['vs_best']['p_holm']:.3f}"
    share = tb["rows"][0]["pct_of_ceiling"]
    assert table["% of ceiling"][0] == f"{100 * share:.1f}%"
    text = all_text(at)
    assert f"Human ceiling: {tb['ceiling']['value']:.3f}" in text
    assert "pooled over all rated pairs" in text
    assert at.get("download_button")[-1].proto.label == "Download leaderboard (HTML)"
