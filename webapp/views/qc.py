"""Admin: Quality control of one study: rater monitoring, intra-rater agreement, the raters'
flags and the training / qualification standing.

Every number comes from a service (``backend.services.quality.qc``, ``flags``, ``calibration``); the
page only draws it. Pairs are numbered 1..N as on the progress page; a missing value is a
blank cell (``webapp/components/tables.py``). Times are the time on task of
``backend.services.annotation.activity`` (the rater's own input and focus events, idle gaps cut);
what a
rater's browser claimed beyond what the rules credit is listed under "Time on task clipped".
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from radconcord.backend.analysis import judge_monitoring as jm
from radconcord.backend.analysis import monitoring as mon
from radconcord.backend.analysis.intra_rater import SCOPES
from radconcord.backend.analysis.monitoring import FAST_SECONDS, OUTLIER_Z, SLOW_IQR, STRAIGHT_RUN
from radconcord.backend.services.annotation import flags
from radconcord.backend.services.quality import calibration, qc
from radconcord.backend.services.study_admin import demo_ratings, studies
from radconcord.webapp import state
from radconcord.webapp.components import qc_plots, tables
from radconcord.webapp.components.csv_download import csv_download

# A light red that keeps black text readable, for the rows of flagged raters.
FLAGGED_ROW = "background-color: #f8d7da"

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()


def _pairs(numbers: tuple[int, ...]) -> str:
    return ", ".join(str(n) for n in numbers)


def _duration(seconds: float) -> str:
    """Seconds under a minute (a fast rater's 2.5 s must not read as 0:02), else M:SS."""
    if not math.isfinite(seconds):
        return ""
    return f"{seconds:.1f} s" if seconds < 60 else tables.minutes_seconds(seconds)


def _highlight(frame: pd.DataFrame, flagged: list[bool]) -> object:
    return frame.style.apply(
        lambda row: [FLAGGED_ROW if flagged[row.name] else ""] * len(row), axis=1)


st.title("Quality control")
study_names = [s.name for s in state.call(studies.list_studies, db, actor)]
if not study_names:
    st.info("No studies yet: import cases first.")
    st.stop()
top = st.columns([3, 1.4, 1.4])
study = top[0].selectbox("Study", study_names, key="qcp_study")
if (ratings_note := state.call(demo_ratings.ratings_note, db, actor, study_name=study)):
    st.warning(ratings_note, icon=":material/science:")  # "demo ratings (constructed)"
straight_run = int(top[1].number_input(
    "Flag all-zero runs of", min_value=2, max_value=500, value=STRAIGHT_RUN, step=1,
    key="qcp_straight_run", help="consecutive done pairs with no error at all (pairwise: "
    "the same answer in a row)"))
outlier_z = float(top[2].number_input(
    "Flag |robust z| above", min_value=0.5, max_value=20.0, value=OUTLIER_Z, step=0.5,
    key="qcp_outlier_z", help="how far from the other raters a rater's value must be"))

# -- Rater monitoring -----------------------------------------------------------------
st.header("Rater monitoring")
monitoring = state.call(qc.monitoring, db, actor, study, straight_run=straight_run,
                        outlier_z=outlier_z)
judges = state.call(qc.judgement_monitoring, db, actor, study, straight_run=straight_run,
                    outlier_z=outlier_z)
if not monitoring.raters and judges:
    st.caption("A pairwise study: its raters' judgements are monitored below.")
elif not monitoring.raters:
    st.info("No rater has pairs of this study assigned yet (Assign raters page).")
else:
    st.caption(
        "Study pairs only (training items and hidden repeats are left out). Time per pair is "
        f"the time on task of each done pair; slow pairs take more than Q3 + {SLOW_IQR:g} IQR, "
        f"fast ones less than {FAST_SECONDS:g} s. Drift compares the mean total count of the "
        "first and last third of the rater's done pairs in completion order. Agreement is "
        "Spearman's rho of the rater's totals with the other raters' mean on shared pairs. "
        f"Raters are flagged for {monitoring.straight_run} or more consecutive all-zero pairs, "
        f"or a robust z beyond {monitoring.outlier_z:g} against the other raters.")
    fl = monitoring.floors
    st.caption(
        "Absolute floors (study settings, flag a rater on their own): at least "
        f"{fl.min_seconds:g} s of time on task per pair ({fl.min_seconds_film:g} s when the "
        f"pair has a film; {mon.FLOOR_PAIRS} pairs under it flag), at most "
        f"{fl.max_per_hour:g} pairs per hour over {mon.PACE_WINDOW} consecutive pairs. "
        + (f"Training items: {monitoring.training_items}; each rater's agreement with the "
           "expert is measured on the ones they did." if monitoring.training_items else
           "No training items: no agreement with an expert to measure."))
    if monitoring.between_rater_note:
        st.info(monitoring.between_rater_note[0].upper() + monitoring.between_rater_note[1:]
                + ".", icon=":material/group:")
    frame = pd.DataFrame([{
        "Rater": r.rater,
        "Done": f"{r.done} / {r.assigned}",
        "Median/pair": _duration(r.median_seconds),
        "IQR": _duration(r.iqr_seconds),
        "Slow": str(len(r.slow_pairs)) if r.timed_pairs else "",
        f"Under {FAST_SECONDS:g} s": str(len(r.fast_pairs)) if r.timed_pairs else "",
        "Per hour": tables.num(r.done_per_hour, 1),
        # First third -> last third, short enough for its column at 1280 px (the CSV
        # download has the full values and the difference).
        "Drift": "" if not r.drift_n else f"{r.drift_first:.1f}→{r.drift_last:.1f}",
        "Zero run": str(r.zero_run),
        "Spearman": tables.num(r.spearman, 2),
        "Mean |diff|": tables.num(r.abs_diff, 2),
        "Under floor": str(len(r.below_floor_pairs)) if r.timed_pairs else "",
        "Max pace/h": "" if math.isnan(r.max_pace_per_hour) else
        (">3600" if math.isinf(r.max_pace_per_hour) else f"{r.max_pace_per_hour:.0f}"),
        "Expert": f"{r.expert_within} / {r.expert_items}" if r.expert_items else "",
        "Flags": str(len(r.flags)) if r.flags else "",
    } for r in monitoring.raters])
    st.dataframe(_highlight(frame, [bool(r.flags) for r in monitoring.raters]),
                 hide_index=True, width="stretch")
    for r in monitoring.raters:
        if r.flags:
            st.warning(f"**{r.rater}**: " + "; ".join(r.flags), icon=":material/flag:")
    if not monitoring.flagged:
        st.success("No rater is flagged.", icon=":material/check_circle:")
    outlying = [r for r in monitoring.raters if r.slow_pairs or r.fast_pairs]
    if outlying:
        with st.expander("Outlier pairs (pair numbers)"):
            st.dataframe(pd.DataFrame([{
                "Rater": r.rater,
                "Slow pairs": _pairs(r.slow_pairs),
                "Slow limit (Q3 + 3 IQR)": _duration(r.slow_limit_seconds),
                f"Under {FAST_SECONDS:g} s": _pairs(r.fast_pairs),
            } for r in outlying]), hide_index=True, width="stretch")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(qc_plots.time_per_pair(monitoring.raters), key="qcp_time_plot")
    with right:
        st.plotly_chart(qc_plots.pace_and_drift(monitoring.raters), key="qcp_pace_plot")
    st.caption("Red: a flagged rater. Drift: open circle the first third of the rater's done "
               "pairs, filled circle the last third (completion order).")
    csv_download(state.call(qc.monitoring_rows, db, actor, study, straight_run=straight_run,
                            outlier_z=outlier_z),
                 file_name=f"{study}-monitoring.csv", key="qcp_monitoring_csv")

# -- Judgement monitoring (pairwise studies) -------------------------------------------
if judges:
    st.header("Judgement monitoring")
    st.caption(
        "Pairwise comparisons. Which candidate is shown as A is random, so a rater who "
        f"chooses A far more or less often than B is flagged (two-sided binomial p < "
        f"{jm.SIDE_ALPHA:g}, from {jm.MIN_DECIDED} decided comparisons; imported ones, "
        "whose sides come from their file, are left out). Same run: identical "
        "answers (preference and both ratings) in a row, in completion order. Agreement: "
        "share of the rater's comparisons, done by another rater too, where their preference "
        "is the other raters' (a split is a tie). Time: median time on task per done "
        "comparison, over those with any.")
    st.dataframe(_highlight(pd.DataFrame([{
        "Rater": r.rater,
        "Done": f"{r.done} / {r.assigned}",
        "A / B / tie": f"{r.n_a} / {r.n_b} / {r.n_tie}",
        "A share": tables.num(r.share_a, 2),
        "Side p": tables.num(r.side_p, 3),
        "Same run": str(r.same_run),
        "Agreement": tables.num(r.agreement, 2),
        "Shared": str(r.shared),
        "Median/comparison": _duration(r.median_seconds),
        "Flags": str(len(r.flags)) if r.flags else "",
    } for r in judges]), [bool(r.flags) for r in judges]), hide_index=True, width="stretch")
    for r in judges:
        if r.flags:
            st.warning(f"**{r.rater}**: " + "; ".join(r.flags), icon=":material/flag:")
    if not any(r.flags for r in judges):
        st.success("No rater is flagged.", icon=":material/check_circle:")
    csv_download(state.call(qc.judgement_monitoring_rows, db, actor, study,
                            straight_run=straight_run, outlier_z=outlier_z),
                 file_name=f"{study}-judgement-monitoring.csv", key="qcp_judgement_csv")

# -- Clipped time on task ----------------------------------------------------------------
clipping = state.call(qc.time_clipping, db, actor, study)
clipped = [c for c in clipping if c.noticeable]
st.header("Time on task clipped")
if not clipped:
    st.caption("No time on task was clipped: every rater was credited what their browser "
               f"claimed (less than {qc.CLIPPED_NOTICE_SECONDS:g} s is clock jitter between "
               "two tabs, not listed).")
else:
    st.caption(
        "Time the rater's browser claimed but that was not credited: time outside the rater's "
        "login sessions, or instants already credited to another pair (one pair is on screen "
        "at a time), or spans without an input event. The time on task on every page and in "
        "the export is the credited time; the export has both per pair.")
    for c in clipped:
        st.warning(f"**{c.rater}**: {_duration(c.clipped_seconds)} of "
                   f"{_duration(c.claimed_seconds)} claimed was clipped.",
                   icon=":material/timer_off:")
    st.dataframe(pd.DataFrame([{
        "Rater": c.rater,
        "Claimed": _duration(c.claimed_seconds),
        "Credited": _duration(c.credited_seconds),
        "Clipped": _duration(c.clipped_seconds),
        "Pairs": _pairs(c.pairs),
        "Comparisons": _pairs(c.comparisons),
        "Training / repeats": str(c.other_items) if c.other_items else "",
    } for c in clipped]), hide_index=True, width="stretch")

# -- Intra-rater agreement --------------------------------------------------------------
st.header("Intra-rater agreement")
intra = state.call(qc.intra_rater, db, actor, study)
if not intra.repeat_pairs:
    st.info("No repeats in this study: set repeat_share on the Assign page (a share of each "
            "rater's pairs shown again later, unrecognisably) before assigning raters.")
else:
    st.caption(
        "Each rater's counts on a pair and on its hidden repeat (both done). Exact: share of "
        "repeats with identical counts; ICC(2,1): two-way random, absolute agreement; kappa: "
        "Cohen's kappa with quadratic weights on the count difference. A blank value is "
        "undefined; the line under the table says why.")
    entries = intra.raters + ((intra.pooled,) if intra.pooled is not None else ())
    scope = st.selectbox("Scope", SCOPES, key="qcp_scope",
                         format_func=lambda s: {"total": "total (all categories)"}.get(s, s))
    st.dataframe(pd.DataFrame([{
        "Rater": e.rater,
        "Repeats (done / assigned)": f"{e.counted} / {e.assigned}",
        "Exact agreement": tables.num(e.agreement.scope(scope).exact, 2),
        "All 12 cells identical": tables.num(e.agreement.exact_all_cells, 2),
        "ICC(2,1)": tables.num(e.agreement.scope(scope).icc2_1, 3),
        "Kappa (quadratic)": tables.num(e.agreement.scope(scope).kappa, 3),
        "Mean |diff|": tables.num(e.agreement.scope(scope).mean_abs_diff, 2),
    } for e in entries]), hide_index=True, width="stretch")
    # Why a value is blank, under the table: a note column would be cut off at 1280 px.
    notes = [f"{e.rater}: {note}" for e in entries
             if (note := e.agreement.scope(scope).icc_note
                 or e.agreement.scope(scope).kappa_note)]
    if notes:
        st.caption("  \n".join(notes))
    csv_download(state.call(qc.intra_rater_rows, db, actor, study),
                 file_name=f"{study}-intra-rater.csv", key="qcp_intra_csv")

# -- Flagged pairs ------------------------------------------------------------------------
st.header("Flagged pairs")
flagged = state.call(flags.study_flags, db, actor, study)
if not flagged:
    st.info("No rater has flagged a pair as unsure.")
else:
    st.dataframe(pd.DataFrame([{
        "Pair": str(f.pair_number),
        "Kind": f.kind,
        "Rater": f.rater,
        "Note": f.note,
        "Flagged at": tables.when(f.flagged_at),
        "Done": "yes" if f.completed else "",
    } for f in flagged]), hide_index=True, width="stretch")

# -- Training / qualification -------------------------------------------------------------
st.header("Training / qualification")
standing = state.call(calibration.qualification_status, db, actor, study_name=study)
if not any(q.training for q in standing):
    st.info("No training items in this study.")
else:
    st.dataframe(pd.DataFrame([{
        "Rater": q.rater,
        "Training items": str(q.training),
        "Done": str(q.done),
        "Passed": str(q.passed),
        "Needed": str(q.required) if q.required else "",
        "Status": q.status,
    } for q in standing]), hide_index=True, width="stretch")
