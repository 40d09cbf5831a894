"""AppTest: dashboard, disagreement explorer and probes pages (admin), and raters kept out.

The page scripts are run directly (as the other admin page tests do); the seeded study of
``conftest.py`` gets completed ratings from both raters and real bleu/rougeL scores from the
scoring runner, so the pages draw from the same services the tests compare against.

The issue-11 panels (human ceiling, paired metric matrix, system ranking, simulation curves,
report download) are tested on the reviewer study of ``tests/reviewer_study.py`` (3 raters,
2 sources) built in the same database, against ``study_correlation(...).report``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from radconcord.backend import jobs
from radconcord.backend.runner.worker import Worker
from radconcord.backend.scoring.runner import ScorePair, score
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.evaluation import correlation
from radconcord.db.models import Pair, Report
from tests.reviewer_study import STUDY as REVIEWER_STUDY
from tests.reviewer_study import build_reviewer_study

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"
PAGES = ["dashboard.py", "explorer.py", "probes.py"]


def _number(cell: str) -> float | None:
    """A number cell of a page table (text: blank when missing, ``%`` sign allowed)."""
    assert cell is None or isinstance(cell, str), cell  # never "None" drawn as a value
    return float(cell.rstrip("%")) if cell else None


def _numbers(column) -> list[float]:
    return [float("nan") if _number(c) is None else _number(c) for c in column]


def _rate_and_score(env) -> list[int]:
    """Both raters complete every pair with different counts; bleu and rouge are scored."""
    for rater, offset in ((env.rater, 0), (env.other_rater, 1)):
        for i, item in enumerate(rating.rater_queue(env.db, rater, study_name=env.study)):
            rating.set_count(env.db, rater, opaque_id=item.opaque_id, category=1,
                             significant=True, count=(i + offset) % 3)
            rating.set_count(env.db, rater, opaque_id=item.opaque_id, category=2,
                             significant=False, count=i)
            rating.complete_pair(env.db, rater, opaque_id=item.opaque_id, confirm_zero=True)
    with env.db.begin() as s:
        rows = s.execute(
            select(Pair.id, Pair.input_hash, Report.text, Pair.candidate_id)
            .join(Report, Report.id == Pair.reference_id).order_by(Pair.position)
        ).all()
        cands = {r.id: r.text for r in s.scalars(select(Report))}
    pairs = [ScorePair(id=str(r.id), reference=r.text, candidate=cands[r.candidate_id],
                       stored_hash=r.input_hash) for r in rows]
    score(pairs, ["bleu4", "rougeL"], db=env.db, device="cpu")
    return [r.id for r in rows]


@pytest.fixture
def rated_env(study_env):
    study_env.pair_ids = _rate_and_score(study_env)
    return study_env


@pytest.mark.parametrize("page", PAGES)
def test_a_rater_gets_only_the_access_error(rated_env, make_app, all_text, page):
    at = make_app(rated_env.rater, script=VIEWS / page)
    assert not at.exception
    assert [e.value for e in at.error] == ["this action needs an admin account"]
    assert not at.dataframe and not at.title and not at.get("plotly_chart")
    assert rated_env.study not in all_text(at)


def _as_rexval_import(env) -> None:
    """Mark the study as imported from ReXVal: the published values compare like with like
    only there (issue 24), so the reproduction table is drawn."""
    from radconcord.db.models import Study

    with env.db.begin() as s:
        s.scalars(select(Study).where(Study.name == env.study)).one().provenance = {
            "kind": "rexval"}


def test_dashboard_shows_the_tau_table_and_plots(rated_env, make_app, all_text):
    _as_rexval_import(rated_env)
    at = make_app(rated_env.admin, script=VIEWS / "dashboard.py")
    assert not at.exception and not at.error
    assert at.title[0].value == "Agreement dashboard"
    expected = correlation.study_correlation(rated_env.db, rated_env.admin,
                                          study_name=rated_env.study, resamples=1000, seed=0)
    table = at.dataframe[0].value
    assert list(table["Metric"]) == [m.key for m in expected.metrics]
    # 3 pairs: below the minimum n (issue 24), every tau reads "n too small".
    assert set(table["Kendall tau-b"]) == {"n too small"}
    assert set(table["n"]) == {3}
    assert set(table["Direction"]) == {"higher is better"}
    # Scatter, per-source distribution and agreement bars (3 pairs: no forest point and no
    # paired matrix, issue 24; one source: no system ranking).
    charts = at.get("plotly_chart")
    assert [c.key for c in charts] == ["dash_scatter", "dash_sources", "dash_agreement"]
    assert "Reproduction: ours next to the published values" in all_text(at)
    repro = _frame(at, "Our key")
    bleu_row = repro[repro["Our key"] == "bleu4"].iloc[0]
    assert bleu_row["Published tau-b"] == "0.345"
    assert "bleu" in bleu_row["Our signature"]
    # Unscored metrics have blank cells, not "None".
    green = repro[repro["Our key"] == "green"].iloc[0]
    assert (green["Ours"], green["Ours - published"]) == ("", "")
    # The published values of the scored keys come from one paper here.
    scored = repro[repro["Our key"].isin([m.key for m in expected.metrics])]
    assert set(scored["Paper"]) == {"ER2Score paper"}
    # Pairs, rated pairs, ratings (rater x pair: 2 raters x 3 pairs, not 72 grid cells).
    assert [m.value for m in at.metric][:3] == ["3", "3", "6"]
    # The agreement plot names the ReXVal categories.
    bars = _chart(at, "dash_agreement")["data"][0]["x"]
    assert bars[0] == "Total errors" and bars[2].replace("<br>", " ") == "2. Omission of finding"


def test_dashboard_significant_target_and_no_bootstrap(rated_env, make_app):
    _as_rexval_import(rated_env)
    at = make_app(rated_env.admin, script=VIEWS / "dashboard.py")
    at.radio(key="dash_target").set_value("Significant errors only")
    at.number_input(key="dash_resamples").set_value(0)
    at.run()
    assert not at.exception and not at.error
    expected = correlation.study_correlation(rated_env.db, rated_env.admin,
                                          study_name=rated_env.study, significant_only=True,
                                          resamples=0)
    table = at.dataframe[0].value
    assert list(table["Metric"]) == [m.key for m in expected.metrics]
    assert set(table["Kendall tau-b"]) == {"n too small"}  # 3 pairs (issue 24)
    assert set(table["tau 95% CI"]) == {""}
    assert any("switch the target" in w.value for w in at.warning)


def test_dashboard_without_scores_offers_score_now_and_still_draws(study_env, make_app,
                                                                    all_text):
    at = make_app(study_env.admin, script=VIEWS / "dashboard.py")
    assert not at.exception and not at.error
    text = all_text(at)
    assert "No correlations yet: the study has no metric scores" in text
    assert f"{study_env.study}** has no metric scores yet" in text
    # No command to type for scores: a button instead (a worker hint may name the worker).
    assert "backend score" not in text
    assert at.button(key="dash_score_now_button").proto.label == "Score now"


def test_explorer_opens_the_pair_from_query_params(rated_env, make_app, all_text):
    pair_id = rated_env.pair_ids[1]
    at = make_app(rated_env.admin, script=VIEWS / "explorer.py",
                  params={"study": rated_env.study, "pair": str(pair_id)})
    assert not at.exception and not at.error
    ranking = at.dataframe[0].value
    assert len(ranking) == 3 and list(ranking["Rank"]) == [1, 2, 3]
    text = all_text(at)
    assert f"source {rated_env.secret_source}" in text  # admin view: sources are shown
    # Word diff: "Small left pleural effusion. Lungs otherwise clear." -> "Lungs are clear..."
    assert "line-through" in text and "otherwise" in text
    scores = at.dataframe[1].value
    assert list(scores["Metric"]) == ["bleu1", "bleu2", "bleu3", "bleu4", "rouge1", "rouge2",
                                     "rougeL"]
    # Pair numbers are 1-based, as raters see them (the second pair is pair 2).
    assert at.subheader[0].value == f"Pair 2: case case-b, source {rated_env.secret_source}"
    raters = at.dataframe[2].value
    assert list(raters["Rater"]) == ["ravi", "rita"]


def test_explorer_shows_why_concord_counted_its_errors(rated_env, make_app, all_text):
    """Issue 27: the concord family's evidence (the sentence of each report behind each
    predicted error) is shown beside its values, for the signature the page uses."""
    with rated_env.db.begin() as s:
        rows = s.execute(
            select(Pair.id, Pair.input_hash, Report.text, Pair.candidate_id)
            .join(Report, Report.id == Pair.reference_id).order_by(Pair.position)
        ).all()
        cands = {r.id: r.text for r in s.scalars(select(Report))}
    score([ScorePair(id=str(r.id), reference=r.text, candidate=cands[r.candidate_id],
                     stored_hash=r.input_hash) for r in rows], ["concord"], db=rated_env.db,
          device="cpu")
    # Pair 2: "Small left pleural effusion. Lungs otherwise clear." -> "Lungs are clear. No
    # effusion.": one significant omission (category 2), driven by these two sentences.
    at = make_app(rated_env.admin, script=VIEWS / "explorer.py",
                  params={"study": rated_env.study, "pair": str(rated_env.pair_ids[1])})
    assert not at.exception and not at.error
    assert [e.label for e in at.expander if e.label.startswith("Why")] == [
        "Why concord (rules) counted 1 error(s)"]
    text = all_text(at)
    # The 12 counts: one significant omission.
    assert ("| 1. False prediction of finding | 0 | 0 |\n| 2. Omission of finding | 1 | 0 |\n"
            "| 3. Incorrect location/position of finding | 0 | 0 |") in text
    # The error, the finding's reason and the two sentences behind it (markdown-escaped).
    assert ("**2. Omission of finding**, significant: Pleural Effusion in the reference only"
            "  \nReference: \u201cSmall left pleural effusion\\.\u201d"
            "  \nCandidate: \u201cNo effusion\\.\u201d") in text
    assert "Signature: `concord" in all_text(at)
    # Families that carry no evidence (bleu, rouge) get no such section.
    assert not any("bleu" in e.label or "rouge" in e.label for e in at.expander)


def test_explorer_without_params_opens_the_top_ranked_pair(rated_env, make_app):
    at = make_app(rated_env.admin, script=VIEWS / "explorer.py")
    assert not at.exception and not at.error
    top = at.dataframe[0].value.iloc[0]
    assert at.subheader[0].value.startswith(f"Pair {top['Pair']}: case {top['Case']}")


def test_probes_page_runs_lexical_probes(rated_env, make_app, all_text):
    at = make_app(rated_env.admin, script=VIEWS / "probes.py")
    assert not at.exception and not at.error
    at.multiselect(key="probe_metrics").set_value(["bleu", "rouge"])
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:probes-"))
    at = button.click().run(timeout=120)
    assert not at.exception and not at.error
    # The page queued a probes job; nothing was scored in this run.
    assert not at.dataframe
    (job,) = jobs.list_jobs(rated_env.db, kind="probes")
    assert job.status == "queued" and job.params["metrics"] == ["bleu", "rouge"]
    assert Worker(rated_env.db).run_once().status == "done"
    at = at.run(timeout=120)
    assert not at.exception and not at.error
    kinds = at.dataframe[0].value
    assert list(kinds["Reports perturbed"] + kinds["Nothing to perturb"]) == [3] * 5
    table = at.dataframe[1].value
    assert list(table["Metric"]) == ["bleu1", "bleu2", "bleu3", "bleu4", "rouge1", "rouge2",
                                    "rougeL"]
    assert table["Delta"].notna().all()
    assert at.get("plotly_chart")


def test_explorer_shows_the_pairs_images_with_the_burned_in_flag(rated_env, make_app):
    """The study lead sees the case's images in the explorer, flagged when the DICOM header
    says text is burned in (raters never get this flag: tests/pages/test_image_viewer.py)."""
    from PIL import Image as PILImage

    from radconcord.backend.services.annotation.images import BURNED_IN_NOTE
    from radconcord.db.models import Image

    pair_id = rated_env.pair_ids[0]
    folder = rated_env.data_dir / "images"
    folder.mkdir(exist_ok=True)
    PILImage.new("L", (32, 40), 90).save(folder / "flagged.png")
    with rated_env.db.begin() as s:
        case_id = s.get(Pair, pair_id).case_id
        s.add(Image(case_id=case_id, path="images/flagged.png", format="png", view="PA",
                    sha256="f" * 64, width=32, height=40,
                    meta={"burned_in_annotation": "YES"}))
    at = make_app(rated_env.admin, script=VIEWS / "explorer.py",
                  params={"study": rated_env.study, "pair": str(pair_id)})
    assert not at.exception and not at.error
    # One flag, under the canvas viewer, naming the film it is about.
    assert [w.value for w in at.warning if w.value.endswith(BURNED_IN_NOTE)] == [
        f"PA (PNG): {BURNED_IN_NOTE}"]
    assert [e.proto.component_name for e in at.get("bidi_component")] == [
        "radconcord_film_viewer"]
    # The case's own image (from the import) and the flagged one; only the latter is flagged.
    assert at.expander[0].label == "Images (2)"


# -- issue 11: ceiling, paired tests, systems, report download -----------------------------

RATERS = {"rita": "rita-password-1", "ravi": "ravi-password-1", "rosa": "rosa-password-1"}


@pytest.fixture
def reviewer_env(study_env):
    """The seeded database plus the reviewer study: 3 raters, 2 sources, bleu and rougeL."""
    study_env.reviewer = build_reviewer_study(study_env.db, study_env.admin, raters=RATERS)
    return study_env


def _dashboard(env, make_app, study: str = REVIEWER_STUDY):
    at = make_app(env.admin, script=VIEWS / "dashboard.py")
    at.selectbox(key="dash_study").set_value(study)
    at.toggle(key="dash_live").set_value(False)
    return at.run()


def _chart(at, key: str) -> dict:
    """The figure of the plotly chart drawn with widget key ``key``."""
    found = [c for c in at.get("plotly_chart") if c.key == key]
    assert len(found) == 1, [c.key for c in at.get("plotly_chart")]
    return json.loads(found[0].proto.spec)


def _values(array) -> list:
    """A figure's array as a list (plotly ships numpy arrays base64-encoded)."""
    if isinstance(array, dict):
        raw = np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
        return raw.reshape(array["shape"]).tolist() if "shape" in array else raw.tolist()
    return list(array)


def _frame(at, column: str):
    """The one table drawn with a column called ``column`` (read-only tables carry no key)."""
    (found,) = [d.value for d in at.dataframe if column in d.value.columns]
    return found


def _expected(env, **kwargs) -> dict:
    return correlation.study_correlation(env.db, env.admin, study_name=REVIEWER_STUDY,
                                      resamples=1000, seed=0, **kwargs).report


def test_dashboard_draws_the_human_ceiling_band_and_share(reviewer_env, make_app, all_text):
    at = _dashboard(reviewer_env, make_app)
    assert not at.exception and not at.error
    report = _expected(reviewer_env)
    ceiling = report["ceiling"]
    assert ceiling["n_raters"] == 3 and ceiling["kendall_tau_b"] > 0.5
    table = at.dataframe[0].value
    assert _numbers(table["% of ceiling"]) == pytest.approx(
        [100 * report["metrics"][k]["pct_of_ceiling"] for k in table["Metric"]], abs=0.05)
    # The (oriented) tau over the ceiling's mean tau, as a percentage.
    bleu = table[table["Metric"] == "bleu4"].iloc[0]
    assert _number(bleu["% of ceiling"]) == pytest.approx(
        100 * report["metrics"]["bleu4"]["kendall_tau_b"] / ceiling["kendall_tau_b"],
        abs=0.05)
    forest = _chart(at, "dash_forest")
    (band,) = [s for s in forest["layout"]["shapes"] if s["type"] == "rect"]
    assert [band["x0"], band["x1"]] == pytest.approx(ceiling["kendall_ci95"])
    lines = [s["x0"] for s in forest["layout"]["shapes"] if s["type"] == "line"]
    assert lines == pytest.approx([0.0, ceiling["kendall_tau_b"]])
    assert any(t.get("name", "").startswith(f"human ceiling {ceiling['kendall_tau_b']:.3f}")
               for t in forest["data"])
    text = all_text(at)
    assert f"over raters: **{ceiling['kendall_tau_b']:.3f}**" in text
    raters = _frame(at, "tau-b vs the other raters' mean")
    # Text cells at 3 decimals (a rater's value from too few pairs reads "n too small").
    assert dict(zip(raters["Rater"], _numbers(raters["tau-b vs the other raters' mean"]),
                    strict=True)) == pytest.approx(ceiling["per_rater"], abs=5e-4)
    assert dict(zip(raters["Rater"], raters["n"], strict=True)) == ceiling["n_shared_pairs"]


def test_dashboard_draws_the_paired_metric_matrix(reviewer_env, make_app, all_text):
    at = _dashboard(reviewer_env, make_app)
    assert not at.exception and not at.error
    report = _expected(reviewer_env)
    pairwise = report["pairwise"]
    keys = list(at.dataframe[0].value["Metric"])
    (heat,) = _chart(at, "dash_pairwise")["data"]
    assert heat["type"] == "heatmap" and heat["x"] == keys and heat["y"] == keys
    assert len(pairwise["pairs"]) == len(keys) * (len(keys) - 1) // 2
    for name, entry in pairwise["pairs"].items():
        a, b = name.split("|")
        i, j = keys.index(a), keys.index(b)
        assert heat["z"][i][j] == pytest.approx(entry["tau_diff"])
        assert heat["z"][j][i] == pytest.approx(-entry["tau_diff"])
        assert heat["text"][i][j] == ("*" if entry["p_adjusted"] < 0.05 else "")
        assert f"{pairwise['correction'].capitalize()}-adjusted p = " \
               f"{entry['p_adjusted']:.4f}" in heat["customdata"][i][j]
    table = _frame(at, "tau(A) - tau(B)")
    assert [f"{a}|{b}" for a, b in zip(table["Metric A"], table["Metric B"], strict=True)] \
        == list(pairwise["pairs"])
    assert _numbers(table["p adjusted"]) == pytest.approx(
        [e["p_adjusted"] for e in pairwise["pairs"].values()], abs=5e-5)
    # A Williams test that does not apply (identical rankings) is null, a blank cell.
    williams = [e["williams_p"] for e in pairwise["pairs"].values()]
    assert None in williams
    assert _numbers(table["Williams p"]) == pytest.approx(
        [float("nan") if w is None else w for w in williams], nan_ok=True, abs=5e-5)
    assert "" in set(table["Williams p"])  # blank, not "None"
    text = all_text(at)
    assert "Is metric A better than metric B?" in text
    assert "after Holm correction over the matrix" in text
    assert f"({pairwise['resamples']} resamples, resampling pairs;" in text


def test_dashboard_ranks_the_systems_for_the_chosen_metric(reviewer_env, make_app, all_text):
    at = _dashboard(reviewer_env, make_app)
    assert not at.exception and not at.error
    systems = _expected(reviewer_env)["systems"]
    assert systems["human_order"] == ["gen-near", "gen-far"]
    keys = list(at.dataframe[0].value["Metric"])
    choice = at.selectbox(key="dash_system_key")
    assert choice.options == keys and choice.value == keys[0]
    at = choice.set_value("rougeL").run()
    assert not at.exception and not at.error
    human, metric = _chart(at, "dash_systems")["data"]
    assert human["y"] == metric["y"] == ["gen-near", "gen-far"]
    assert human["x"] == pytest.approx([systems["sources"][s]["human_mean"]
                                        for s in ("gen-near", "gen-far")])
    assert metric["x"] == pytest.approx([systems["sources"][s]["metrics"]["rougeL"]["mean"]
                                         for s in ("gen-near", "gen-far")])
    ranking = _frame(at, "System-level Kendall tau")
    assert list(ranking["Metric"]) == keys
    assert list(ranking["System-level Kendall tau"]) == pytest.approx(
        [systems["ranking"][k]["kendall_tau"] for k in keys])
    assert set(ranking["Metric's order (best first)"]) == {"gen-near > gen-far"}
    tests = _frame(at, "Measure")
    assert list(tests["Measure"]) == ["radiologists' errors", *keys]
    assert set(tests["Source A"]) == {"gen-far"} and set(tests["Source B"]) == {"gen-near"}
    # 6 matched pairs per test, below the minimum n (issue 24): words, not a p.
    assert set(tests["Pairs"]) == {6}
    assert set(tests["p"]) == set(tests["Mean A - B"]) == {"n too small"}
    text = all_text(at)
    assert "Radiologists' order (fewest errors first): gen-near > gen-far" in text
    assert f"({systems['permutations']} permutations" in text
    assert "Corpus-level metrics: " in text


def test_dashboard_with_two_raters_and_one_source_says_why(rated_env, make_app, all_text):
    at = make_app(rated_env.admin, script=VIEWS / "dashboard.py")
    assert not at.exception and not at.error
    report = correlation.study_correlation(rated_env.db, rated_env.admin,
                                        study_name=rated_env.study).report
    assert report["ceiling"] is None
    table = at.dataframe[0].value
    assert set(table["% of ceiling"]) == {""}  # blank, not "None"
    # 3 pairs: no forest plot (issue 24), so no ceiling band either.
    assert "dash_forest" not in [c.key for c in at.get("plotly_chart")]
    text = all_text(at)
    assert "Human ceiling: needs at least 3 raters (this study has 2)" in text
    assert "Ranking systems needs at least two candidate sources with rated pairs " \
           "(this study has 1)." in text
    # One source: no systems chart; 3 pairs: the paired matrix reads "n too small".
    assert "dash_systems" not in [c.key for c in at.get("plotly_chart")]
    assert "Paired tests (n = 3 pairs)" in text


def test_dashboard_offers_the_html_report(reviewer_env, make_app):
    at = _dashboard(reviewer_env, make_app)
    assert not at.exception and not at.error
    (button,) = [b for b in at.get("download_button") if b.key == "dash_report"]
    assert button.proto.label == "Download report (HTML)"
    assert not button.proto.disabled
    assert "study design, raters and agreement, ceiling" in button.proto.help


def test_dashboard_report_button_waits_for_scores(study_env, make_app):
    at = make_app(study_env.admin, script=VIEWS / "dashboard.py")
    assert not at.exception and not at.error
    (button,) = [b for b in at.get("download_button") if b.key == "dash_report"]
    assert button.proto.disabled
    assert button.proto.help == ("The report needs metric scores: use Score now at the top "
                                 "of this page.")


def test_dashboard_runs_a_simulation_and_draws_its_curves(reviewer_env, make_app, all_text):
    at = _dashboard(reviewer_env, make_app)
    assert not at.exception and not at.error
    assert "No simulation yet" in all_text(at)
    assert "dash_simulation" not in [c.key for c in at.get("plotly_chart")]
    at.number_input(key="sim_seeds").set_value(3)
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:simulation-"))
    at = button.click().run()
    assert not at.exception and not at.error
    (job,) = jobs.list_jobs(reviewer_env.db, kind="simulate_rating")
    assert job.status == "queued" and job.study_name == REVIEWER_STUDY
    assert job.params == {"study": REVIEWER_STUDY, "strategy": "both", "seeds": 3,
                          "question": "all", "seed": 0, "resamples": 200,
                          "significant_only": False}
    # The job panel below the form follows the job; the panels above (drawn before the
    # click was handled) name it on their next run.
    assert f"**Job #{job.id}** · `simulate_rating` on {REVIEWER_STUDY} · queued" in all_text(at)
    at = at.run()
    assert f"Simulation job #{job.id} is queued." in all_text(at)
    assert Worker(reviewer_env.db).run_once().status == "done"
    at = at.run(timeout=120)
    assert not at.exception and not at.error
    result = jobs.get(reviewer_env.db, job.id).result
    fig = _chart(at, "dash_simulation")
    means = {t["name"]: t for t in fig["data"] if t.get("mode") == "lines+markers"}
    assert set(means) == {"adaptive (mean of 3 seeds)", "random (mean of 3 seeds)"}
    for strategy in ("adaptive", "random"):
        recs = [r for r in result["curves"] if r["strategy"] == strategy]
        xs = sorted({r["n_ratings"] for r in recs})
        assert len(recs) == 3 * len(xs)
        trace = means[f"{strategy} (mean of 3 seeds)"]
        assert _values(trace["x"]) == xs
        assert _values(trace["y"]) == pytest.approx([
            sum(r["ci_width"] for r in recs if r["n_ratings"] == n) / 3 for n in xs])
    text = all_text(at)
    assert (f"Job #{job.id}: question **all** (max_tau); {', '.join(result['strategies'])} "
            "orders, 3 seed(s), 200 bootstrap resamples per point, 36 ratings of 12 pairs by "
            "3 raters.") in text
    savings = result["savings"]
    assert (f"random needs {savings['random_ratings_to_target']} ratings, adaptive "
            f"{savings['adaptive_ratings_to_target']} of {savings['total_ratings']}") in text


def test_dashboard_refuses_a_bad_simulation_question(reviewer_env, make_app):
    at = _dashboard(reviewer_env, make_app)
    at.text_input(key="sim_question").set_value("tau_diff:bleu4")
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:simulation-"))
    at = button.click().run()
    assert not at.exception
    (error,) = at.error
    assert "tau_diff" in error.value
    assert jobs.list_jobs(reviewer_env.db, kind="simulate_rating") == []


def test_dashboard_paired_tests_follow_the_chosen_unit_and_correction(reviewer_env, make_app,
                                                                     all_text):
    at = _dashboard(reviewer_env, make_app)
    at.selectbox(key="dash_unit").set_value("case")
    at.radio(key="dash_correction").set_value("bh")
    at = at.run()
    assert not at.exception and not at.error
    report = _expected(reviewer_env, unit="case", correction="bh")
    pairwise = report["pairwise"]
    assert (pairwise["unit"], pairwise["correction"]) == ("case", "bh")
    assert report["ceiling"]["unit"] == "case"
    keys = list(at.dataframe[0].value["Metric"])
    (heat,) = _chart(at, "dash_pairwise")["data"]
    for name, entry in pairwise["pairs"].items():
        a, b = name.split("|")
        assert f"Benjamini-Hochberg-adjusted p = {entry['p_adjusted']:.4f}" \
            in heat["customdata"][keys.index(a)][keys.index(b)]
    text = all_text(at)
    assert "resampling cases (all pairs of one reference together); the same resamples" in text
    assert "after Benjamini-Hochberg correction over the matrix" in text
    assert "(bootstrap resampling cases (all pairs of one reference together))" in text


def test_dashboard_shows_time_on_task_from_the_activity_spans(rated_env, make_app):
    """Per rater: total active time and median per pair, from the spans (union per pair)."""
    import datetime as dt

    from radconcord.backend.services.annotation import activity

    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=30)

    def at(s: float) -> dt.datetime:
        return start + dt.timedelta(seconds=s)

    queue = [q.opaque_id for q in rating.rater_queue(rated_env.db, rated_env.rater,
                                                      study_name=rated_env.study)]
    # rita: 40 s, 20 s (two tabs overlapping on the second pair: 20 s, not 30) and 0.5 s.
    activity.record_spans(rated_env.db, rated_env.rater, client_id="tab-one-0001", spans=[
        activity.SpanInput(queue[0], at(0), at(40), 10),
        activity.SpanInput(queue[1], at(40), at(60), 5),
        activity.SpanInput(queue[2], at(60), at(60.5), 1)])
    activity.record_spans(rated_env.db, rated_env.rater, client_id="tab-two-0002", spans=[
        activity.SpanInput(queue[1], at(45), at(55), 3)])
    at_ = _dashboard(rated_env, make_app, study=rated_env.study)
    assert not at_.exception and not at_.error
    table = _frame(at_, "Median per pair")
    rows = {r["Rater"]: r for _, r in table.iterrows()}
    assert rows["rita"]["Active time"] == "1:00"  # 60.5 s
    assert rows["rita"]["Median per pair"] == "0:20"
    assert rows["rita"]["Pairs with time"] == 3 and rows["rita"]["Pairs done"] == "3 / 3"
    # ravi sent no activity: blanks, not "None" or a made-up time.
    assert (rows["ravi"]["Active time"], rows["ravi"]["Median per pair"],
            rows["ravi"]["Last active"]) == ("0:00", "", "")


def test_dashboard_counts_raw_or_adjudicated_and_says_which(rated_env, make_app, all_text):
    from radconcord.backend.services.evaluation import explore
    from radconcord.backend.services.quality import adjudication

    # The consensus on the pair with the most errors: none at all (it becomes the pair with
    # the fewest, so the correlations change).
    rows = explore.study_pairs(rated_env.db, rated_env.admin, study_name=rated_env.study).rows
    worst = max(rows, key=lambda r: r.mean_errors)
    with rated_env.db.read() as s:
        opaque = s.scalar(select(Pair.opaque_id).where(Pair.id == worst.pair_id))
    counts = {(c, sig): 0 for c in range(1, 7) for sig in (True, False)}
    adjudication.record(rated_env.db, rated_env.admin, study_name=rated_env.study,
                        opaque_id=opaque, counts=counts, note="consensus after discussion")
    at = make_app(rated_env.admin, script=VIEWS / "dashboard.py")
    assert not at.exception and not at.error
    assert "Counts: raw, the mean of each pair's raters (adjudications not used)." in all_text(at)
    raw = correlation.study_correlation(rated_env.db, rated_env.admin, study_name=rated_env.study,
                                     resamples=1000, seed=0)
    assert list(at.dataframe[0].value["Metric"]) == [m.key for m in raw.metrics]
    assert set(at.dataframe[0].value["Kendall tau-b"]) == {"n too small"}  # 3 pairs

    at.radio(key="dash_counts").set_value("adjudicated").run()
    assert not at.exception and not at.error
    adjudicated = correlation.study_correlation(rated_env.db, rated_env.admin,
                                             study_name=rated_env.study, resamples=1000,
                                             seed=0, counts="adjudicated")
    assert adjudicated.n_adjudicated == 1
    assert ("Counts: adjudicated. 1 of 3 pairs use the adjudicators' consensus; the others "
            "the mean of their raters.") in all_text(at)
    assert list(at.dataframe[0].value["Metric"]) == [m.key for m in adjudicated.metrics]
    assert set(at.dataframe[0].value["Kendall tau-b"]) == {"n too small"}
    assert [m.kendall_tau_b for m in adjudicated.metrics] != [
        m.kendall_tau_b for m in raw.metrics]
    assert "Agreement between raters uses their own (raw) counts" in all_text(at)
