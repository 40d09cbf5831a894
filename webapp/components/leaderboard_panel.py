"""The dashboard's leaderboard: the ``radconcord benchmark`` view of studies in the database.

Built on click (a bootstrap per study and target is too slow for every rerun) from the
studies' stored scores by :func:`backend.services.evaluation.benchmark.study_leaderboard`, the same
protocol and document as the command; nothing is scored here. Per study: the headline
ranking (tau-b against total errors, or pairwise agreement for a pairwise study) with 95%
intervals, the share of the human ceiling and the Holm-corrected paired test against the
best metric, the metrics that are n/a with their reason, and the published figures beside
ours (never ranked). "Download leaderboard (HTML)" renders the self-contained page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from radconcord.backend.services.evaluation import benchmark
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from radconcord.webapp import state
from radconcord.webapp.components import tables

#: Session key of the document built by the last click.
DOC_KEY = "dash_lb_doc"


def _ci(est: Mapping[str, Any] | None) -> str:
    lo, hi = (est or {}).get("ci95") or (None, None)
    return "" if lo is None or hi is None else f"[{lo:.3f}, {hi:.3f}]"


def _value(est: Mapping[str, Any] | None) -> str:
    return tables.num((est or {}).get("value"))


def _pct(share: float | None) -> str:
    return tables.pct(None if share is None else 100.0 * share)


def _count_rows(tb: Mapping[str, Any]) -> list[dict[str, str]]:
    rows = []
    for r in tb["rows"]:
        vs = r.get("vs_best") or {}
        rows.append({
            "Rank": tables.text(r["rank"]) if r["status"] == "ranked" else "n/a",
            "Metric": r["key"], "Kendall tau-b": _value(r["kendall_tau_b"]),
            "95% CI": _ci(r["kendall_tau_b"]), "% of ceiling": _pct(r["pct_of_ceiling"]),
            "tau(best) - tau": tables.num(vs.get("tau_diff")),
            "p (Holm) vs best": tables.num(vs.get("p_holm")),
            "n": tables.text((r["kendall_tau_b"] or {}).get("n")),
            "Reason": tables.text(r["reason"]), "Signature": tables.text(r["signature"]),
        })
    return rows


def _preference_rows(board: Mapping[str, Any]) -> list[dict[str, str]]:
    return [{
        "Rank": tables.text(r["rank"]) if r["status"] == "ranked" else "n/a",
        "Metric": r["key"], "Pairwise agreement": _value(r["pairwise_agreement"]),
        "95% CI": _ci(r["pairwise_agreement"]),
        "tau-b vs mean rating": _value(r["kendall_tau_b_rating"]),
        "tau 95% CI": _ci(r["kendall_tau_b_rating"]), "% of ceiling": _pct(r["pct_of_ceiling"]),
        "Reason": tables.text(r["reason"]), "Signature": tables.text(r["signature"]),
    } for r in board["rows"]]


def render(doc: Mapping[str, Any]) -> None:
    """Draw a leaderboard document (one block per dataset)."""
    for i, ds in enumerate(doc.get("datasets") or []):
        board = ds["board"]
        st.markdown(f"**{ds['name']}** ({board['kind']}): {board['headline']}.")
        if board["kind"] == "counts":
            tb = board["targets"]["total"]
            ceiling = tb.get("ceiling") or {}
            st.caption(
                f"{tb['n_pairs']} rated pairs, {board['n_raters']} raters, {tb['resamples']} "
                "case-level bootstrap resamples. Human ceiling: "
                + (f"{ceiling['value']:.3f} {_ci(ceiling)}" if ceiling.get("value") is not None
                   else f"n/a ({ceiling.get('reason')})") + ".")
            st.dataframe(_count_rows(tb), hide_index=True, width="stretch",
                         key=f"dash_lb_table_{i}")
            if tb.get("reported"):
                st.dataframe([{
                    "Status": "reported", "Metric (paper)": r["metric"], "Our key": r["key"],
                    "Reported tau-b": tables.num(r["value"]), "Ours": tables.num(r["ours"]),
                    "Source": r["source"]} for r in tb["reported"]],
                    hide_index=True, width="stretch", key=f"dash_lb_reported_{i}")
                st.caption("Reported figures come from the papers named; they never enter "
                           "the ranking.")
        else:
            st.caption(f"{board['n_judged']} judged comparisons ({board['n_ties_excluded']} "
                       "tied by the raters, excluded), references resampled.")
            st.dataframe(_preference_rows(board), hide_index=True, width="stretch",
                         key=f"dash_lb_table_{i}")


def leaderboard_panel(db: Database, actor: Actor, study_names: Sequence[str], default: str,
                      *, resamples: int, seed: int) -> None:
    """The "Leaderboard" section: pick studies, build on click, show, download HTML.

    Args:
        db: The database.
        actor: The admin.
        study_names: Studies to offer.
        default: The study chosen at the top of the dashboard.
        resamples: Bootstrap resamples (the dashboard's setting).
        seed: Seed of the resamples.
    """
    # Keyed by the dashboard's study, so choosing another study up top starts from it.
    chosen = st.multiselect("Studies", list(study_names), default=[default],
                            key=f"dash_lb_studies:{default}")
    if st.button("Build leaderboard", key="dash_lb_build", disabled=not chosen):
        st.session_state[DOC_KEY] = state.call(
            benchmark.study_leaderboard, db, actor, study_names=chosen, bootstrap=resamples,
            seed=seed)
    doc = st.session_state.get(DOC_KEY)
    if doc is None:
        st.caption("Ranks every scored metric of the chosen studies under the protocol of "
                   "`radconcord benchmark` (docs/benchmark.md), from their stored scores.")
        return
    render(doc)
    st.download_button("Download leaderboard (HTML)",
                       data=lambda: benchmark.html_text(doc).encode("utf-8"),
                       file_name="leaderboard.html", mime="text/html", key="dash_lb_html",
                       on_click="ignore")
