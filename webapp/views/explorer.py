"""Admin: disagreement explorer, pairs where a metric and the radiologists disagree most.

Pairs are ranked by the gap between the metric's normalised rank and the raters' (see
``backend.analysis.disagreement``). Selecting a row (or arriving from a dashboard scatter
click, ``?study=...&pair=ID``) opens the pair: both reports with a word-level diff, every
metric's value and each rater's counts per category. Admin only, so sources and rater names
are shown. Pairs are numbered 1..N in study order, as on the dashboard and for raters (the
``?pair=`` parameter is the pair's internal id, not its number); a missing value is a blank.
A study without scores shows "Score now" (``webapp/components/score_now.py``).
"""

from __future__ import annotations

import re
from typing import Any

import streamlit as st

from radconcord.backend.services.annotation import images
from radconcord.backend.services.evaluation import explore
from radconcord.backend.services.study_admin import studies
from radconcord.backend.types import CATEGORIES
from radconcord.webapp import state
from radconcord.webapp.components import tables
from radconcord.webapp.components.csv_download import csv_download
from radconcord.webapp.components.diff import show_diff
from radconcord.webapp.components.image_viewer import viewer_panel
from radconcord.webapp.components.score_now import score_now

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

st.title("Disagreement explorer")
study_names = [s.name for s in state.call(studies.list_studies, db, actor)]
if not study_names:
    st.info("No studies yet: import cases first.")
    st.stop()

# A dashboard click hands over the study and pair through session state and query params.
wanted_study = st.query_params.get("study") or st.session_state.get("explorer_study")
wanted_pair = st.query_params.get("pair") or st.session_state.get("explorer_pair")
if wanted_study in study_names and "exp_study" not in st.session_state:
    st.session_state["exp_study"] = wanted_study

c1, c2, c3, c4 = st.columns([3, 2, 2, 1])
study = c1.selectbox("Study", study_names, key="exp_study")
significant = c3.radio("Target", ["Total errors", "Significant errors only"], horizontal=True,
                       key="exp_target") != "Total errors"
table = state.call(explore.study_pairs, db, actor, study_name=study,
                   significant_only=significant)
if not table.keys:
    # The scoring state and "Score now" instead of a command: its live panel reruns this
    # page when the worker has scored the study.
    score_now(db, actor, study, key="exp_score_now")
    st.stop()
default_key = st.session_state.get("explorer_key")
key = c2.selectbox("Metric", table.keys,
                   index=table.keys.index(default_key) if default_key in table.keys else 0,
                   format_func=lambda k: f"{k} (imported)" if k in table.imported else k,
                   key="exp_key")
limit = int(c4.number_input("Show", min_value=5, max_value=1000, value=50, step=5,
                            key="exp_limit"))

ranking = state.call(explore.disagreements, db, actor, study_name=study, key=key,
                     significant_only=significant, limit=limit)
st.caption(
    f"{ranking.n_ranked} pairs have both a {key} value and a completed rating. Disagreement ="
    " |normalised rank of the metric (oriented, "
    f"{'higher' if ranking.higher_is_better else 'lower'} is better) - normalised rank of "
    "the raters' mean errors (fewer is better)|; 1 means opposite ends. Signature: "
    f"`{ranking.signature}`"
    + (" (imported: computed elsewhere, direction given at import)." if ranking.imported
       else ".")
)
rows = [
    {
        "Rank": d.rank,
        "Pair": d.pair.number,
        "Case": d.pair.case,
        "Source": d.pair.source,
        key: d.value,
        "Mean errors": d.pair.mean_errors,
        "Metric rank": d.metric_rank,
        "Raters' rank": d.rater_rank,
        "Disagreement": d.score,
    }
    for d in ranking.rows
]
NUMERIC = (key, "Mean errors", "Metric rank", "Raters' rank", "Disagreement")
event: Any = st.dataframe(
    [{c: tables.num(v) if c in NUMERIC else v for c, v in r.items()} for r in rows],
    hide_index=True, width="stretch", key="exp_table", on_select="rerun",
    selection_mode="single-row",
)
selected = list(event.selection.rows) if event is not None else []
csv_download(rows, file_name=f"{study}-{key}-disagreements.csv", key="exp_download")

pair_id: int | None = None
if selected:
    pair_id = ranking.rows[selected[0]].pair.pair_id
elif wanted_pair is not None and study == wanted_study:
    try:
        pair_id = int(wanted_pair)
    except (TypeError, ValueError):
        st.warning(f"Ignoring pair id {wanted_pair!r}: not a number.")
elif ranking.rows:
    pair_id = ranking.rows[0].pair.pair_id

if pair_id is None:
    st.info("No ranked pair yet: pairs need a metric value and a completed rating.")
    st.stop()

detail = state.call(explore.pair_detail, db, actor, study_name=study, pair_id=pair_id)
p = detail.pair
st.subheader(f"Pair {p.number}: case {p.case}, source {p.source or '(none)'}")
mean_txt = f"{p.mean_errors:.2f}" if p.mean_errors is not None else "not rated"
sig_txt = f"{detail.mean_significant:.2f}" if detail.mean_significant is not None else "-"
st.caption(f"Opaque id {p.opaque_id} · mean errors {mean_txt} (significant: {sig_txt}) over "
           f"{p.n_raters} counted rater(s).")
show_diff(detail.diff)
st.caption("Struck through: only in the reference; highlighted: only in the candidate "
           "(word level, case and spacing ignored).")

refs = state.call(images.images_for_pair, db, actor, pair_id=pair_id)
if refs:
    with st.expander(f"Images ({len(refs)})", expanded=True):
        # The rating screen's viewer (zoom to pointer, W/L drag, Manual from the header);
        # it shows the burned-in text flags to the study lead, who can withdraw the image.
        viewer_panel(db, actor, [(i.image_id, i.view, i.format) for i in refs],
                     pair_key=f"explore-{pair_id}")

left, right = st.columns([2, 3], gap="large")
with left:
    st.markdown("**Metric scores**")
    st.dataframe(
        [{"Metric": m.key, "Value": tables.num(m.value, 4),
          "Direction": "higher is better" if m.higher_is_better else "lower is better",
          "Origin": "imported" if m.imported else "computed",
          "Signature": m.signature} for m in detail.metrics],
        hide_index=True, width="stretch", key="exp_scores",
    )
with right:
    st.markdown("**Raters' error counts** (significant / insignificant)")
    if not detail.raters:
        st.caption("No rater has this pair.")
    else:
        st.dataframe(
            [
                {
                    "Rater": r.rater,
                    "Status": "counted" if r.counted else "in progress (not counted)",
                    **{f"{c}. {CATEGORIES[c]}":
                       f"{r.counts[(c, True)]} / {r.counts[(c, False)]}" for c in range(1, 7)},
                    "Total": r.total,
                    "Significant": r.significant,
                }
                for r in detail.raters
            ],
            hide_index=True, width="stretch", key="exp_raters",
        )

# Why a family that explains itself (concord) counted what it counted: the sentence of each
# report behind each error, so a disagreement can be read rather than guessed at.


def _count(v: float) -> str:
    # Rounded variants give whole counts; unrounded ones keep two decimals.
    return str(int(v)) if float(v).is_integer() else f"{v:.2f}"


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|>~<$])")


def _plain(text: str) -> str:
    # Report text shown as markdown: escape what markdown would read (a "*" or "1." in a
    # report must stay text).
    return _MD_SPECIAL.sub(r"\\\1", text)


for ev in detail.evidence:
    total = sum(ev.counts)
    variant = f" ({ev.variant})" if ev.variant else ""
    with st.expander(f"Why {ev.family}{variant} counted {_count(total)} error(s)",
                     expanded=True):
        left, right = st.columns([5, 4], gap="medium")
        if len(ev.counts) == 2 * len(CATEGORIES):
            # A markdown table wraps the long category names; a data frame cut them off.
            left.markdown("\n".join(
                ["| Category | Significant | Insignificant |", "|---|---:|---:|"]
                + [f"| {c}. {CATEGORIES[c]} | {_count(ev.counts[2 * (c - 1)])} | "
                   f"{_count(ev.counts[2 * (c - 1) + 1])} |" for c in range(1, 7)]))
        with right:
            if ev.variant == "gbm":
                st.caption("The counts are the model's; the errors below are the sentence"
                           " analysis its features came from, so the two can differ.")
            if not ev.errors:
                st.caption("No error found by sentence analysis."
                           if ev.variant != "ce" else "This variant gives no sentence evidence.")
            for e in ev.errors:
                lines = [f"**{e.category}. {CATEGORIES[e.category]}**, "
                         f"{'significant' if e.significant else 'insignificant'}: "
                         f"{_plain(e.reason)}"]
                if e.reference:
                    lines.append(f"Reference: \u201c{_plain(e.reference)}\u201d")
                if e.candidate:
                    lines.append(f"Candidate: \u201c{_plain(e.candidate)}\u201d")
                st.markdown("  \n".join(lines))
        st.caption(f"Signature: `{ev.signature}`")
