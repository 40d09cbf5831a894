"""Admin: live agreement dashboard of one study (correlations, plots, reproduction panel).

The panels sit in one ``st.fragment`` that reruns every few seconds while "Live updates" is
on, so they follow raters and the scoring worker without reloading the page. Each run asks
the database for the study's cheap data version (counts and latest timestamps of ratings,
completions and scores); the expensive bootstrap is cached with ``st.cache_data`` on that
version and the chosen settings, so a refresh when nothing changed costs three small queries.

For a reviewer (issue 11) the panels also show the human ceiling (leave-one-rater-out
agreement, a band on the forest plot and a "% of ceiling" column), the matrix of paired
metric tests, the ranking of the candidate sources, and the newest finished rating
simulation; all come from the ``correlate`` JSON (``ceiling``, ``pairwise``, ``systems``) or
the ``simulate_rating`` job's result. Below the panels, "Download report (HTML)" renders the
paper report when clicked, and "Run simulation" queues a ``simulate_rating`` job.

Below those, "RadCliQ refit" queues a ``refit_radcliq`` job (the worker scores the four
inputs where missing, then refits with cross-validated Kendall tau) and draws its result; the
job id stays in the URL (``?refit_job=``).

A study without metric scores shows "Score now" above the panels
(``webapp/components/score_now.py``: the scoring job's state, whether a worker is alive, and
a button that queues the metrics that run without a model) instead of a command to type.
"Counts" chooses raw counts (each pair's raters' mean) or adjudicated ones (an adjudicator's
consensus where there is one) for the correlations, and the panels say which were used;
agreement between raters always uses their own counts.

Numbers: "Ratings" counts one per rater and pair that enters the analysis (not the twelve grid
cells of each); pairs are numbered 1..N as raters see them; agreement plots name the ReXVal
categories; a missing value is a blank cell (``webapp/components/tables.py``); each published
value is named by its paper in both the reproduction table and the forest plot's legend. Time
on task per rater (total and median per pair) is the measure of
``backend.services.annotation.activity``: the rater's own input and focus events, idle gaps cut.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd
import streamlit as st
from streamlit.errors import StreamlitAPIException

from radconcord.backend.analysis import reliability
from radconcord.backend.errors import ServiceError
from radconcord.backend.figures import correlation as figures
from radconcord.backend.services import jobs
from radconcord.backend.services.annotation import activity
from radconcord.backend.services.evaluation import correlation, explore, refit, reports, simulation
from radconcord.backend.services.study_admin import demo_ratings, progress, studies
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from radconcord.webapp import state
from radconcord.webapp.components import job_ref, plots, reviewer_panels, tables
from radconcord.webapp.components.csv_download import csv_download
from radconcord.webapp.components.job_panel import job_panel
from radconcord.webapp.components.leaderboard_panel import leaderboard_panel
from radconcord.webapp.components.score_now import score_now

# Seconds between live refreshes; RADCONCORD_DASHBOARD_REFRESH_S changes it (tests use 1).
LIVE_ENV = "RADCONCORD_DASHBOARD_REFRESH_S"


def _live_seconds() -> float:
    raw = os.environ.get(LIVE_ENV, "").strip()
    try:
        value = float(raw) if raw else 5.0
    except ValueError:
        value = 5.0
    return max(value, 0.5)


LIVE_SECONDS = _live_seconds()
EXPLORER = "views/explorer.py"
REFIT_JOB = "refit_job"
SIM_JOB = "simulation_job"
#: The "Counts" choice: the value passed to the analysis services -> its label.
COUNTS = {"raw": "Raw (raters' mean)", "adjudicated": "Adjudicated"}

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()


@st.cache_data(show_spinner="Bootstrapping correlations...", max_entries=32)
def _correlation(version: str, actor: Actor, study: str, significant: bool, resamples: int,
                 seed: int, unit: str, correction: str, counts: str,
                 _db: Database, fully_rated: bool = False) -> correlation.StudyCorrelation:
    # ``version`` changes whenever a rating, completion or score changes: it is the cache key
    # that makes an unchanged refresh free. The actor is part of the key so a result computed
    # for one account is never handed to another without the service's role check.
    return correlation.study_correlation(_db, actor, study_name=study,
                                      significant_only=significant, resamples=resamples,
                                      seed=seed, unit=unit, correction=correction,
                                      counts=counts, fully_rated_only=fully_rated)


@st.cache_data(show_spinner=False, max_entries=32)
def _pairs(version: str, actor: Actor, study: str, significant: bool,
           _db: Database) -> explore.PairTable:
    return explore.study_pairs(_db, actor, study_name=study, significant_only=significant)


@st.cache_data(show_spinner=False, max_entries=32)
def _agreement(version: str, actor: Actor, study: str, significant: bool, counts: str,
               _db: Database) -> correlation.StudyAgreement:
    return correlation.study_agreement(_db, actor, study_name=study, significant_only=significant,
                                    counts=counts)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _ci(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f"[{lo:.3f}, {hi:.3f}]"


st.title("Agreement dashboard")
study_names = [s.name for s in state.call(studies.list_studies, db, actor)]
if not study_names:
    st.info("No studies yet: import cases first.")
    st.stop()

c1, c2, c3, c4, c5 = st.columns([3, 2.2, 1, 1, 1.2])
study = c1.selectbox("Study", study_names, key="dash_study")
target_label = c2.radio("Target", ["Total errors", "Significant errors only"],
                        horizontal=True, key="dash_target")
significant = target_label != "Total errors"
resamples = int(c3.number_input("Resamples", min_value=0, max_value=10_000, value=1000,
                                step=100, key="dash_resamples",
                                help="Bootstrap resamples for the 95% intervals (0: none)."))
seed = int(c4.number_input("Seed", min_value=0, value=0, step=1, key="dash_seed"))
live = c5.toggle("Live", value=True, key="dash_live",
                 help=f"Refresh the panels every {LIVE_SECONDS:g} s while raters rate and the "
                      "worker scores.")
u1, u2, u3 = st.columns([2.2, 2.2, 3])
unit = u1.selectbox(
    "Ceiling and paired tests: resample by", list(figures.UNITS), key="dash_unit",
    format_func=lambda u: {"pair": "pair", "case": "case (all pairs of one reference)",
                           "rater_pair": "rater and pair"}[u],
    help="Pairs of one case are not independent: resampling cases (or raters and pairs) "
         "gives wider, more honest intervals. The choice is recorded in the JSON.")
correction = u2.radio("Correction over the matrix", list(figures.CORRECTIONS),
                      format_func=figures.CORRECTIONS.get, horizontal=True,
                      key="dash_correction")
counts = u3.radio(
    "Counts", list(COUNTS), format_func=COUNTS.get, horizontal=True, key="dash_counts",
    help="Raw: each pair's value is the mean of its raters' counts. Adjudicated: pairs with "
         "an adjudicator's consensus use it instead (the others keep the raters' mean). "
         "Agreement between raters always uses their own counts.")
if (ratings_note := state.call(demo_ratings.ratings_note, db, actor, study_name=study)):
    st.warning(ratings_note, icon=":material/science:")  # "demo ratings (constructed)"


def _counts_used(corr: correlation.StudyCorrelation) -> str:
    """Which per-pair counts the correlations were computed on, in words."""
    if corr.counts == "adjudicated":
        return (f"Counts: adjudicated. {corr.n_adjudicated} of {corr.n_pairs} pairs use the "
                "adjudicators' consensus; the others the mean of their raters.")
    return "Counts: raw, the mean of each pair's raters (adjudications not used)."


def _pct_of_ceiling(corr: correlation.StudyCorrelation, key: str) -> float | None:
    # The JSON holds the share as a fraction (tau / ceiling); the table shows percent.
    entry = corr.result.metrics.get(key)
    share = entry.pct_of_ceiling if entry is not None else None
    return None if share is None else 100.0 * share


def _judged(value: float | None, n: int) -> str:
    """A pair-level statistic as the page shows it: the number, "n too small" below
    :data:`reliability.MIN_PAIRS`, or "n/a (no variance)" when undefined."""
    return reliability.judge(value, n).text()


def _coverage_caption(corr: correlation.StudyCorrelation) -> None:
    """How many rated pairs have fewer raters than planned, and whether they were left out."""
    cov = corr.result.coverage or {}
    under = int(cov.get("n_pairs_under_rated") or 0)
    rated = corr.result.n_pairs + int(cov.get("n_pairs_left_out") or 0)
    if cov.get("fully_rated_only"):
        st.caption(f"Fully rated pairs only: {under} of {rated} rated pairs have fewer "
                   f"raters than planned and are left out; n = {corr.result.n_pairs} pairs.")
    elif under:
        st.caption(f"{under} of {rated} rated pairs have fewer raters than planned (their "
                   "value is the mean of the raters who rated them). Tick **Fully rated pairs "
                   "only** to leave them out.")
    else:
        st.caption(f"Every one of the {rated} rated pairs has as many raters as planned.")


def _tau_table(corr: correlation.StudyCorrelation) -> None:
    rows = [
        {
            "Metric": m.key,
            "Kendall tau-b": m.kendall_tau_b,
            "tau 95% CI": _ci(m.kendall_lo, m.kendall_hi),
            "% of ceiling": _pct_of_ceiling(corr, m.key),
            "Spearman": m.spearman,
            "rho 95% CI": _ci(m.spearman_lo, m.spearman_hi),
            "n": m.n,
            "Direction": "higher is better" if m.higher_is_better else "lower is better",
            # Imported: values computed elsewhere (import-scores), direction given at import.
            "Origin": "imported" if m.imported else "computed",
            "Signature": m.signature,
        }
        for m in corr.metrics
    ]
    # Below the documented minimum n a tau is "n too small" (greyed) and its interval blank;
    # an undefined one reads "n/a (no variance)" (reliability.py).
    shown = []
    for r in rows:
        ok = reliability.judge(r["Kendall tau-b"], r["n"]).shown
        shown.append({
            **r, "Kendall tau-b": _judged(r["Kendall tau-b"], r["n"]),
            "tau 95% CI": r["tau 95% CI"] if ok else "",
            "% of ceiling": tables.pct(r["% of ceiling"]) if ok else "",
            "Spearman": _judged(r["Spearman"], r["n"]),
            "rho 95% CI": r["rho 95% CI"] if reliability.judge(r["Spearman"], r["n"]).shown
            else ""})
    st.dataframe(
        tables.grey_judged(pd.DataFrame(shown)), hide_index=True, width="stretch",
        key="dash_tau_table",
        column_config={
            "n": st.column_config.NumberColumn(
                help=f"Pairs behind the tau. Below {reliability.MIN_PAIRS} a tau is shown as "
                     f"'{reliability.N_TOO_SMALL}': it would need |tau| of about 0.5 to "
                     "differ from 0 at all."),
            "% of ceiling": st.column_config.TextColumn(
                help="|tau-b| as a share of the human ceiling (blank with fewer than 3 "
                     "raters)"),
            "Signature": st.column_config.TextColumn(width="large"),
        },
    )
    st.caption(f"n: pairs behind each statistic. A statistic from fewer than "
               f"{reliability.MIN_PAIRS} pairs reads '{reliability.N_TOO_SMALL}' (greyed), an "
               f"undefined one '{reliability.NO_VARIANCE}'.")
    _coverage_caption(corr)
    csv_download(rows, file_name=f"{corr.result.study}-correlations.csv",
                 key="dash_tau_download", label="Download correlations (CSV)")
    imported = [m for m in corr.metrics if m.imported]
    if imported:
        st.caption("Imported (computed elsewhere, from a file): " + "; ".join(
            f"**{m.key}** from {m.imported.get('file_name')}"
            + (f" ({m.imported['description']})" if m.imported.get("description") else "")
            + (f", source {m.imported['source']}" if m.imported.get("source") else "")
            for m in imported) + ".")


def _pair_download(table: explore.PairTable) -> None:
    csv_download(
        [{"Pair": r.number, "Case": r.case, "Source": r.source,
          "Mean errors": r.mean_errors, "Raters": r.n_raters,
          **{k: r.values.get(k) for k in table.keys}} for r in table.rows],
        file_name=f"{table.study}-pairs.csv", key="dash_pairs_download",
        label="Download pairs with scores (CSV)",
    )


def _reproduction(corr: correlation.StudyCorrelation) -> None:
    published = corr.result.published
    ours = {m.key: m for m in corr.metrics}
    # "Paper" names the source of each published value exactly as the forest plot's legend
    # does ("published: <paper>").
    rows = [
        {
            "Paper": e.paper, "Metric": e.metric, "Our key": e.key or "",
            "Published tau-b": tables.num(e.kendall_tau_b), "Ours": tables.num(e.ours),
            "Ours - published": tables.num(e.ours - e.kendall_tau_b)
            if e.ours is not None else "",
            "Our 95% CI": _ci(ours[e.key].kendall_lo, ours[e.key].kendall_hi)
            if e.key in ours else "",
            "Our signature": ours[e.key].signature if e.key in ours else "not scored",
        }
        for e in published.entries
    ]
    st.dataframe(rows, hide_index=True, width="stretch", key="dash_repro")
    rep = corr.result
    st.caption(
        f"Published: {published.dataset}; {published.note} Ours: study "
        f"**{rep.study}**, target **{rep.target}** errors (mean over counted raters), "
        f"{rep.n_pairs} of {rep.n_pairs_in_study} pairs rated, {rep.n_raters} raters, "
        f"{rep.resamples} {rep.cluster}-level bootstrap resamples, seed {rep.seed}, "
        f"level {rep.level}. Metric settings are the signatures above."
    )
    if rep.target != "total":
        st.warning("The published values are against total errors; switch the target to "
                   "'Total errors' to compare like with like.")


def _scatter(table: explore.PairTable, study_name: str) -> None:
    if not table.keys:
        st.caption("No metric scores yet.")
        return
    key = st.selectbox("Metric", table.keys, key="dash_scatter_key")
    rows = [r for r in table.rows if r.mean_errors is not None and r.values.get(key) is not None]
    if not rows:
        st.caption(f"No pair has both a rating and a {key} value yet.")
        return
    fig = plots.metric_scatter(
        errors=[r.mean_errors for r in rows], values=[r.values[key] for r in rows],
        pair_ids=[r.pair_id for r in rows],
        labels=[f"pair {r.number} ({r.case})" for r in rows],
        sources=[r.source for r in rows], key=key, target=table.target,
    )
    event: Any = st.plotly_chart(fig, on_select="rerun", selection_mode="points",
                                 key="dash_scatter", width="stretch")
    points = event.get("selection", {}).get("points", []) if event else []
    if points:
        custom = points[0].get("customdata")
        pair_id = int(custom[0] if isinstance(custom, (list, tuple)) else custom)
        number = next((r.number for r in rows if r.pair_id == pair_id), None)
        st.session_state["explorer_study"] = study_name
        st.session_state["explorer_pair"] = pair_id
        st.session_state["explorer_key"] = key
        try:
            state.switch_page(EXPLORER, query_params={"study": study_name, "pair": str(pair_id)})
        except StreamlitAPIException:
            # The page runs outside the router (no registered explorer page).
            st.info(f"Selected pair {number}: open it in the Disagreements page.")
    st.caption("Click a point to open the pair in the disagreement explorer.")


def _simulation(database: Database) -> None:
    """The newest finished simulation of this study (the form below queues one)."""
    runs = state.call(jobs.list_jobs, database, actor, kind=simulation.KIND, study_name=study)
    done = next((j for j in runs if j.status == "done"), None)
    pending = [j for j in runs if j.status in ("queued", "running")]
    if pending:
        st.caption(f"Simulation job #{pending[0].id} is {pending[0].status}.")
    if done is None:
        st.caption("No simulation yet: replay this study under random and adaptive rating "
                   "orders with 'Run simulation' below (or `python -m backend simulate-rating "
                   f"--study '{study}'`).")
        return
    reviewer_panels.simulation_result(done.id, done.result or {})


def _time_on_task(database: Database) -> None:
    """Per rater: pairs done, total active time, median per pair (the activity measure)."""
    prog = state.call(progress.study_progress, database, actor, study_name=study)
    rows = [
        {"Rater": r.username, "Pairs done": f"{r.completed} / {r.total}",
         "Active time": tables.minutes_seconds(r.active_seconds),
         "Median per pair": tables.minutes_seconds(r.median_seconds),
         "Pairs with time": r.pairs_with_time,
         "Last active": tables.when(r.last_active_at)}
        for r in prog.raters
    ]
    if not rows:
        st.caption("No rater has pairs of this study yet.")
        return
    st.dataframe(rows, hide_index=True, width="stretch", key="dash_time")
    csv_download(
        [{"rater": r.username, "completed": r.completed, "assigned": r.total,
          "active_seconds": r.active_seconds, "median_seconds_per_pair": r.median_seconds,
          "pairs_with_time": r.pairs_with_time,
          "last_active_at": r.last_active_at.isoformat() if r.last_active_at else None}
         for r in prog.raters],
        file_name=f"{study}-time-on-task.csv", key="dash_time_download",
        label="Download time on task (CSV)")
    st.caption(
        "Active time is measured in the rater's browser from their own keys, clicks, pointer "
        "moves, mouse wheel and typing, attributed to the pair on screen; a pause longer than "
        f"{activity.idle_cut_seconds():g} s adds at most that much, and nothing counts while "
        "the tab is hidden or the window is in the background. Median per pair: over the "
        "pairs with any active time (M:SS).")


@st.fragment(run_every=LIVE_SECONDS if live else None)
def panels() -> None:
    """Every panel of the dashboard; reruns on its own while live updates are on."""
    database = state.get_db()
    version = state.call(explore.data_version, database, actor, study_name=study)
    table = state.call(_pairs, version.token, actor, study, significant, database)
    rated = sum(1 for r in table.rows if r.mean_errors is not None)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Pairs", len(table.rows))
    m2.metric("Rated pairs", rated, help="Pairs with at least one rating that counts.")
    m3.metric("Ratings", version.n_ratings,
              help="One per rater and pair that enters the analysis: pairs marked done, and "
                   f"ratings imported without an assignment ({version.n_rating_cells} grid "
                   "cells in all).")
    m4.metric("Metric scores", version.n_scores)
    _pair_download(table)

    corr: correlation.StudyCorrelation | None = None
    fully_rated = st.checkbox(
        "Fully rated pairs only", key="dash_fully_rated",
        help="Leave out the pairs rated by fewer raters than planned (the service computes "
             "every statistic on the rest).")
    try:
        corr = _correlation(version.token, actor, study, significant, resamples, seed, unit,
                            correction, counts, database, fully_rated)
    except ServiceError as exc:
        if version.n_scores:
            st.warning(f"No correlations yet: {exc}")
        else:
            # The "Score now" panel above the live panels says how scores arrive.
            st.info("No correlations yet: the study has no metric scores (see **Score now** "
                    "above).")

    if corr is not None:
        st.subheader("Kendall tau-b and Spearman against the radiologists")
        st.caption("Each metric is oriented so that a positive value means agreement "
                   "(lower-is-better metrics are negated); intervals are bootstrap "
                   "percentile 95% intervals.")
        st.caption(_counts_used(corr))
        reviewer_panels.ceiling_summary(corr.result)
        _tau_table(corr)
        keys = [m.key for m in corr.metrics]
        # The forest plot draws only the taus from enough pairs (the table names the rest).
        drawn = [k for k in keys
                 if reliability.judge(corr.result.metrics[k].kendall_tau_b,
                                      corr.result.metrics[k].n).shown]
        if drawn:
            st.plotly_chart(
                figures.forest_plot(figures.forest_rows(corr.result, drawn),
                                    ceiling=corr.result.ceiling),
                key="dash_forest", width="stretch",
            )
        left_out = [k for k in keys if k not in drawn]
        if left_out:
            st.caption(f"Not drawn ({reliability.N_TOO_SMALL} or {reliability.NO_VARIANCE}, "
                       f"see the table): {', '.join(left_out)}.")
        reviewer_panels.ceiling_raters(corr.result)
        st.subheader("Is metric A better than metric B?")
        reviewer_panels.paired_tests_panel(corr.result, drawn)
        st.subheader("Systems ranked by the metrics and by the radiologists")
        reviewer_panels.systems_panel(corr.result, keys)

    left, right = st.columns(2, gap="large")
    with left:
        st.subheader("Metric vs raters")
        _scatter(table, study)
    with right:
        st.subheader("Errors per source")
        errs = [(r.mean_errors, r.source) for r in table.rows if r.mean_errors is not None]
        if errs:
            st.plotly_chart(plots.error_distribution(
                errors=[e for e, _ in errs], sources=[s for _, s in errs], target=table.target),
                key="dash_sources", width="stretch")
        else:
            st.caption("No completed ratings yet.")

    st.subheader("Agreement between raters")
    agreement = state.call(_agreement, version.token, actor, study, significant, counts,
                           database)
    rows = [
        {"scope": r.scope, "alpha_interval": r.alpha_interval, "icc2_1": r.icc2_1,
         "icc2_k": r.icc2_k, "pairable": r.n_pairs_pairable,
         "icc2_1_ci95": r.icc2_1_ci95, "icc2_k_ci95": r.icc2_k_ci95,
         "icc_n_pairs": r.icc_n_pairs, "icc_k": r.icc_k}
        for r in agreement.rows
    ]
    if any(r["pairable"] for r in rows):
        st.plotly_chart(plots.agreement_bars(rows, min_n=reliability.MIN_PAIRS),
                        key="dash_agreement", width="stretch")
        st.caption(
            "Bars: ICC(2,1) and ICC(2,k) with 95% bootstrap intervals over the pairs of the "
            "largest block every one of its raters rated (n = those pairs, k = its raters), "
            "and Krippendorff's alpha over every pair with two or more raters (n = those "
            f"pairs). Fewer than {reliability.MIN_PAIRS} pairs: '{reliability.N_TOO_SMALL}'; "
            f"no variance (e.g. no rater counted an error of the category): "
            f"'{reliability.NO_VARIANCE}'.")
    else:
        st.caption("Agreement needs pairs rated by at least two raters.")
    st.caption(f"Raters: {', '.join(agreement.raters) or 'none yet'}. Agreement between "
               f"raters uses their own ({agreement.counts}) counts, whichever counts the "
               "correlations use.")

    st.subheader("Time on task")
    _time_on_task(database)

    if corr is not None:
        st.subheader("Reproduction: ours next to the published values")
        if corr.published_applies:
            _reproduction(corr)
        else:
            st.caption("Not shown: the published values were measured on ReXVal, and this "
                       "study is not a ReXVal import, so 'ours - published' would compare two "
                       "datasets, not two metrics. Import ReXVal to reproduce them.")

    st.subheader("Adaptive rating: simulated CI width against ratings")
    _simulation(database)



if not state.call(explore.data_version, db, actor, study_name=study).n_scores:
    # Instead of a command to type: the scoring state and a button that queues the job; its
    # live panel reruns the page when the worker is done, and then this panel is gone.
    score_now(db, actor, study, key="dash_score_now")

panels()


def _report_html() -> bytes:
    # Runs on Streamlit's download thread when the button is clicked (never on a rerun):
    # the report re-bootstraps everything, too slow to build on every page run.
    bundle = reports.render_report(db, actor, study_name=study, significant_only=significant,
                                   resamples=resamples, seed=seed, unit=unit,
                                   correction=correction, counts=counts)
    return bundle.html.encode("utf-8")


st.subheader("Report for the paper")
# Outside the live fragment: a deferred download gets a new id on every run, so a button
# redrawn each second could lose the click.
ready = state.call(explore.data_version, db, actor, study_name=study)
why_not = ("needs metric scores: use Score now at the top of this page" if not ready.n_scores
           else "needs at least 2 completed pairs" if ready.n_completed < 2 else None)
st.download_button(
    "Download report (HTML)", data=_report_html, file_name=f"{study}-report.html",
    mime="text/html", key="dash_report", on_click="ignore", icon=":material/description:",
    disabled=why_not is not None,
    help=f"The report {why_not}." if why_not else
    "One self-contained HTML file: study design, raters and agreement, ceiling, the tau "
    "table, the paired matrix, the system ranking, failure modes, metric signatures, "
    "versions and input hashes, with the target, resamples, seed, resampling unit and "
    "correction chosen above.",
)


def _refit_result(result: dict[str, Any]) -> None:
    """The refit job's result: model, cross-validated tau, and each input's own tau."""
    fit = result.get("refit") or {}
    st.caption(f"Study **{result.get('study')}**, target **{result.get('target')}** errors, "
               f"seed {result.get('seed')}.")
    for family, reason in (result.get("unavailable") or {}).items():
        st.warning(f"{family} could not run on the worker: {reason}")
    if not fit.get("available"):
        st.info(f"No refit: {fit.get('reason', 'its inputs are missing')}.")
        return
    # The dashboard's rule for every statistic (reliability.py): below the minimum n the
    # number would mislead, so it reads "n too small" with its n; undefined, "no variance".
    n = fit.get("n")
    r1, r2, r3, r4 = st.columns(4)
    r1.metric("CV Kendall tau-b", tables.judged(fit.get("cv_kendall_tau_b"), n))
    r2.metric("CV R²", tables.judged(fit.get("cv_r2"), n))
    r3.metric("In-sample R²", tables.judged(fit.get("r2"), n))
    r4.metric("Pairs", n)
    inputs = result.get("inputs") or {}
    rows = [
        {"Input": key, "Coefficient": tables.num(fit["coef"][key], 4),
         "Scaler mean": tables.num(fit["scaler_mean"][key], 4),
         "Scaler scale": tables.num(fit["scaler_scale"][key], 4),
         "Input's own tau-b": tables.judged((inputs.get(key) or {}).get("kendall_tau_b"),
                                            (inputs.get(key) or {}).get("n"), digits=4),
         "n": (inputs.get(key) or {}).get("n")}
        for key in fit["columns"]
    ]
    st.dataframe(tables.grey_judged(pd.DataFrame(rows)), hide_index=True, width="stretch",
                 key="dash_refit_table")
    st.caption(f"Intercept {_fmt(fit.get('intercept'), 4)}; {fit.get('cv_scheme')} "
               f"cross-validation (per fold tau-b: {_fold_taus(fit)}). The refit predicts "
               "error counts, so a positive tau means agreement with the radiologists.")


def _fold_taus(fit: dict[str, Any]) -> str:
    """Each fold's tau with its n; a fold of fewer than MIN_PAIRS pairs (5 folds of 16 pairs
    hold 3 or 4) reads "n too small" in grey instead of a number."""
    taus = fit.get("cv_fold_kendall_tau_b") or []
    sizes = fit.get("cv_fold_n")
    if sizes is None or len(sizes) != len(taus):
        # An older result without fold sizes: the numbers as they were stored.
        return ", ".join(_fmt(t) for t in taus)
    out = []
    for tau, size in zip(taus, sizes, strict=True):
        judged = reliability.judge(tau, size)
        out.append(f"{judged.text()} (n={size})" if judged.shown
                   else f":gray[*{judged.text()}* (n={size})]")
    return ", ".join(out)


st.subheader("Simulate adaptive rating")
with st.form("simulation"):
    st.caption("Replay this study's ratings under the random and the adaptive order on the "
               "worker and draw the CI width of the question against the ratings revealed "
               "(above, live). The target chosen above applies.")
    s1, s2, s3 = st.columns([1.2, 1, 2])
    sim_strategy = s1.selectbox("Strategies", simulation.STRATEGY_CHOICES, index=2,
                                key="sim_strategy")
    sim_seeds = int(s2.number_input("Seeds", min_value=1, max_value=simulation.MAX_SEEDS,
                                    value=20, step=1, key="sim_seeds"))
    sim_question = s3.text_input(
        "Question", value="all", key="sim_question",
        help="'all': the widest Kendall tau-b CI over the metrics; 'tau_diff:A,B': the CI "
             "of tau(A) - tau(B) for metric keys A and B.")
    sim_clicked = st.form_submit_button("Run simulation")
if sim_clicked:
    queued_sim = state.call(simulation.enqueue_simulation, db, actor, study_name=study,
                            strategy=sim_strategy, seeds=sim_seeds, question=sim_question,
                            seed=seed, significant_only=significant)
    job_ref.remember(SIM_JOB, queued_sim.id)
sim_job = job_ref.current(SIM_JOB)
if sim_job is not None:
    job_panel(sim_job, key="simulation")

st.subheader("RadCliQ refit")
with st.form("refit"):
    st.caption("Refit RadCliQ (radgraph_combined, bertscore_f, semb, bleu2_radcliq) on this "
               "study's ratings, with the target chosen above, on the worker.")
    score_missing = st.checkbox("Score missing inputs first", value=True, key="refit_score",
                                help="The worker scores the four inputs on the study's pairs "
                                     "(cached scores are reused).")
    refit_clicked = st.form_submit_button("Refit RadCliQ")
if refit_clicked:
    queued = state.call(refit.enqueue_refit, db, actor, study_name=study,
                        significant_only=significant, seed=seed, score_missing=score_missing)
    job_ref.remember(REFIT_JOB, queued.id)
refit_job = job_ref.current(REFIT_JOB)
if refit_job is not None:
    done = job_panel(refit_job, key="refit")
    if done is not None and done.status == "done" and done.kind == refit.KIND:
        _refit_result(done.result or {})

st.subheader("Leaderboard (benchmark protocol)")
leaderboard_panel(db, actor, study_names, study, resamples=resamples, seed=seed)
