"""Issue 24, "numbers a reviewer can trust on sight": every statistic shows its n; below the
documented minimum (backend/analysis/reliability.py) it reads "n too small"; undefined values
read "n/a (no variance)"; the tau table counts the pairs with fewer raters than planned and
offers "fully rated pairs only"; a system-level tau from < 5 systems carries its CI and a
warning; "Ours - published" only on a ReXVal import; ICC bars carry CIs and n."""

from __future__ import annotations

import re

import pytest

from radconcord.backend.analysis import reliability
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.evaluation import reports
from tests.pages.test_dashboard_pages import (
    RATERS,
    VIEWS,
    _chart,
    _dashboard,
    _frame,
    _rate_and_score,
)
from tests.pages.test_job_pages import _refit_study, _submit
from tests.reviewer_study import STUDY as REVIEWER_STUDY
from tests.reviewer_study import build_reviewer_study


@pytest.fixture
def rated(study_env):
    """The page tests' 3-pair study, rated by both raters and scored."""
    study_env.pair_ids = _rate_and_score(study_env)
    return study_env


@pytest.fixture
def reviewer(study_env):
    """The reviewer study: 12 pairs, 3 raters, 2 sources."""
    study_env.reviewer = build_reviewer_study(study_env.db, study_env.admin, raters=RATERS)
    return study_env


def test_a_tau_from_three_pairs_reads_n_too_small_with_its_n(rated, make_app, all_text):
    at = _dashboard(rated, make_app, study=rated.study)
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert set(table["n"]) == {3}
    assert set(table["Kendall tau-b"]) == {reliability.N_TOO_SMALL}
    assert set(table["Spearman"]) == {reliability.N_TOO_SMALL}
    assert set(table["tau 95% CI"]) == {""}
    text = all_text(at)
    assert f"fewer than {reliability.MIN_PAIRS} pairs reads 'n too small'" in text
    # No forest point and no paired matrix from 3 pairs: words instead.
    assert "dash_forest" not in [c.key for c in at.get("plotly_chart")]
    assert "dash_pairwise" not in [c.key for c in at.get("plotly_chart")]
    assert "Paired tests (n = 3 pairs)" in text
    # Agreement bars: no bar from 3 pairs, the words where it would be.
    notes = [a["text"] for a in _chart(at, "dash_agreement")["layout"]["annotations"]]
    assert "n too small" in notes


def test_the_published_comparison_is_hidden_on_a_study_that_is_not_rexval(rated,
                                                                          make_app, all_text):
    at = _dashboard(rated, make_app, study=rated.study)
    assert not at.exception and not at.error
    assert "Our key" not in [c for d in at.dataframe for c in d.value.columns]
    assert "this study is not a ReXVal import" in all_text(at)


def test_the_tau_table_counts_under_rated_pairs_and_can_leave_them_out(study_env, make_app,
                                                                       all_text):
    from radconcord.backend.services.annotation import rating

    # Both raters complete the three pairs; ravi reopens one: it has fewer raters than planned.
    _rate_and_score(study_env)
    queue = rating.rater_queue(study_env.db, study_env.other_rater, study_name=study_env.study)
    rating.reopen_pair(study_env.db, study_env.other_rater, opaque_id=queue[-1].opaque_id)
    at = _dashboard(study_env, make_app, study=study_env.study)
    assert not at.exception and not at.error
    assert "1 of 3 rated pairs have fewer raters than planned" in all_text(at)
    at.checkbox(key="dash_fully_rated").check().run()
    assert not at.exception and not at.error
    assert ("Fully rated pairs only: 1 of 3 rated pairs have fewer raters than planned and "
            "are left out; n = 2 pairs.") in all_text(at)
    assert set(at.dataframe[0].value["n"]) == {2}


def test_reviewer_study_numbers_carry_n_ci_and_warnings(reviewer, make_app, all_text):
    at = _dashboard(reviewer, make_app)
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert set(table["n"]) == {12}
    assert all(v not in (reliability.N_TOO_SMALL, "") for v in table["Kendall tau-b"])
    text = all_text(at)
    assert "n = 12 pairs" in text  # ceiling and paired tests
    # Two systems: the system-level tau carries its interval, its n and a warning.
    ranking = _frame(at, "System-level Kendall tau")
    assert set(ranking["Systems (n)"]) == {2}
    assert all(ci.startswith("[") for ci in ranking["tau 95% CI"])
    assert any("from only 2 systems (fewer than 5)" in w.value for w in at.warning)
    # ICC bars: intervals and n; categories nobody counted read "n/a (no variance)".
    fig = _chart(at, "dash_agreement")
    icc = next(t for t in fig["data"] if t["name"] == "ICC(2,1)")
    assert icc["error_y"]["type"] == "data"
    assert icc["text"][0] == "n=12, k=3"
    notes = [a["text"] for a in fig["layout"]["annotations"]]
    assert "n/a (no variance)" in notes
    assert "Reproduction" in text and "this study is not a ReXVal import" in text


def _reopen(env, rater, n: int) -> None:
    """``rater`` reopens their first ``n`` pairs: those leave the analyses for that rater."""
    for item in rating.rater_queue(env.db, rater, study_name=REVIEWER_STUDY)[:n]:
        rating.reopen_pair(env.db, rater, opaque_id=item.opaque_id)


def test_a_rater_with_too_few_pairs_reads_n_too_small_in_the_ceiling_table(reviewer, make_app):
    """The per-rater ceiling table judges each rater by the pairs that rater shares with the
    others' mean: 9 of 12 is below the minimum, although the study has 12 pairs."""
    quick = reviewer.reviewer.raters[0]
    _reopen(reviewer, quick, 3)
    at = _dashboard(reviewer, make_app)
    assert not at.exception and not at.error
    raters = _frame(at, "tau-b vs the other raters' mean")
    rows = {r["Rater"]: r for r in raters.to_dict("records")}
    assert rows[quick.username]["n"] == 9
    assert rows[quick.username]["tau-b vs the other raters' mean"] == reliability.N_TOO_SMALL
    assert rows[quick.username]["Spearman"] == reliability.N_TOO_SMALL
    for name, row in rows.items():
        if name != quick.username:
            assert row["n"] == 12
            assert re.fullmatch(r"-?\d\.\d{3}", row["tau-b vs the other raters' mean"])

    # The HTML report shows the same: the rater's n and the words, greyed.
    html = reports.render_report(reviewer.db, reviewer.admin, study_name=REVIEWER_STUDY,
                                 resamples=50, seed=0).html
    per_rater = html.split("<h3>Per rater</h3>", 1)[1].split("</table>", 1)[0]
    assert f'<td>{quick.username}</td><td class="num">9</td>' in per_rater
    assert per_rater.count('<span class="muted">n too small</span>') == 2


def test_the_per_source_tests_from_six_pairs_read_n_too_small(reviewer, make_app):
    """Each source of the reviewer study has 6 pairs: its randomization tests are below the
    minimum n, on the dashboard and in the HTML report, and their n is shown."""
    at = _dashboard(reviewer, make_app)
    assert not at.exception and not at.error
    tests = _frame(at, "Measure")
    assert set(tests["Pairs"]) == {6}
    assert set(tests["p"]) == {reliability.N_TOO_SMALL}
    assert set(tests["Mean A - B"]) == {reliability.N_TOO_SMALL}
    html = reports.render_report(reviewer.db, reviewer.admin, study_name=REVIEWER_STUDY,
                                 resamples=50, seed=0).html
    section = html.split("<h3>Paired approximate randomization tests</h3>", 1)[1]
    section = section.split("</table>", 1)[0]
    assert section.count('<span class="muted">n too small</span>') == 2 * len(
        tests["Measure"])
    assert 'class="sig"' not in section  # no "significant" row from 6 pairs


def test_the_refit_panel_judges_each_fold_by_its_pairs(study_env, make_app, all_text):
    """The refit's 5 folds of 16 pairs hold 3 or 4 pairs each: each fold's tau reads
    "n too small" with its n, while the pooled cross-validated tau (16 pairs) is a number."""
    _refit_study(study_env)
    at = make_app(study_env.admin, script=VIEWS / "dashboard.py")
    at.selectbox(key="dash_study").set_value("Refit study").run()
    at.toggle(key="dash_live").set_value(False).run()
    at.checkbox(key="refit_score").uncheck()
    at = _submit(at, "refit")
    assert Worker(study_env.db).run_once().status == "done"
    at = at.run()
    assert not at.exception
    labels = {m.label: m.value for m in at.metric}
    assert labels["Pairs"] == "16"
    assert re.fullmatch(r"-?\d\.\d{3}", labels["CV Kendall tau-b"])
    caption = next(c for c in all_text(at).split("\n") if "per fold tau-b:" in c)
    folds = re.findall(r"\*n too small\* \(n=(\d+)\)", caption)
    assert len(folds) == 5 and sum(int(n) for n in folds) == 16, caption
    (table,) = [d.value for d in at.dataframe if "Input" in d.value.columns]
    assert set(table["n"]) == {16}
