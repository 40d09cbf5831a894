"""CI width against the number of ratings, random vs adaptive order (simulate-rating curves).

The curves come from a ``simulate_rating`` job's result (``result["curves"]``, JSON records)
or from the CSV that ``python -m backend simulate-rating`` writes; both have the columns
strategy, seed, n_ratings, ci_width, quantity, question. Each strategy is drawn as its mean
over seeds with a band from the 10th to the 90th percentile of the seeds (the luck of one
order). Render only: no database, no service call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

COLUMNS = ("strategy", "seed", "n_ratings", "ci_width")
_COLOURS = {"random": "#7f7f7f", "adaptive": "#1f5f8b"}
_QUANTITY = {"tau_diff": "CI width of tau(A) - tau(B)",
             "max_tau": "widest Kendall tau-b CI over the metrics"}

__all__ = ["curves_frame", "simulation_figure", "simulation_plot"]


def curves_frame(source: pd.DataFrame | Mapping[str, Any] | Iterable[Mapping[str, Any]]
                 | str | Path) -> pd.DataFrame:
    """The curves as a DataFrame from a job result, its records, a CSV path or a DataFrame.

    Raises:
        ValueError: a required column is missing (the message names it).
    """
    if isinstance(source, pd.DataFrame):
        frame = source.copy()
    elif isinstance(source, (str, Path)):
        frame = pd.read_csv(source)
    elif isinstance(source, Mapping):
        frame = pd.DataFrame(list(source.get("curves") or []))
    else:
        frame = pd.DataFrame(list(source))
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing and len(frame):
        raise ValueError(f"simulation curves: missing column(s) {', '.join(missing)}")
    if not len(frame):
        return pd.DataFrame(columns=[*COLUMNS, "quantity", "question"])
    frame["n_ratings"] = pd.to_numeric(frame["n_ratings"])
    frame["ci_width"] = pd.to_numeric(frame["ci_width"], errors="coerce")
    return frame


def simulation_figure(curves: pd.DataFrame, measure: str = "ci_width") -> go.Figure:
    """Mean CI width (or ``abs_error``) per strategy over seeds, with a 10-90% band.

    Args:
        curves: Columns strategy, seed, n_ratings, ci_width (quantity, abs_error optional).
        measure: ``"ci_width"`` or ``"abs_error"`` (distance from the full-data estimate).

    Raises:
        ValueError: the measure is not a column of the curves.
    """
    frame = curves_frame(curves)
    if measure not in frame.columns:
        raise ValueError(f"simulation curves: no column {measure!r}")
    frame[measure] = pd.to_numeric(frame[measure], errors="coerce")
    fig = go.Figure()
    quantity = str(frame["quantity"].iloc[0]) if "quantity" in frame and len(frame) else ""
    for strategy in sorted(frame["strategy"].unique(), key=lambda s: (s != "random", s)):
        part = frame[frame["strategy"] == strategy]
        grouped = part.groupby("n_ratings")[measure]
        stats = pd.DataFrame({"mean": grouped.mean(), "lo": grouped.quantile(0.1),
                              "hi": grouped.quantile(0.9), "seeds": grouped.count()})
        colour = _COLOURS.get(str(strategy), "#2e8b57")
        x = stats.index.to_list()
        fig.add_trace(go.Scatter(
            x=x + x[::-1], y=stats["hi"].to_list() + stats["lo"].to_list()[::-1],
            fill="toself", fillcolor=colour, opacity=0.15, line={"width": 0},
            hoverinfo="skip", showlegend=False, name=f"{strategy} 10-90%"))
        fig.add_trace(go.Scatter(
            x=x, y=stats["mean"], mode="lines+markers", name=f"{strategy} (mean of "
            f"{int(stats['seeds'].max())} seeds)", line={"color": colour, "width": 2},
            hovertemplate="%{x} ratings: %{y:.4f}<extra>" + str(strategy)
            + "</extra>"))
    fig.update_layout(
        xaxis_title="ratings so far (rater x pair)",
        yaxis_title=(_QUANTITY.get(quantity, "95% CI width") if measure == "ci_width"
                     else "|interim estimate - full-data estimate|"),
        legend={"orientation": "h", "y": -0.2}, margin={"t": 30},
    )
    return fig


def simulation_plot(curves: pd.DataFrame, savings: Mapping[str, Any] | None = None, *,
                    key: str = "simulation_plot") -> None:
    """Draw the curves and, when given, how many ratings adaptive saves.

    Args:
        curves: Columns strategy, seed, n_ratings, ci_width (see :func:`curves_frame` for
            turning a job result or the CSV into one).
        savings: The job result's ``savings`` (``backend.analysis.adaptive.savings_summary``).
        key: Element key of the chart (unique on the page).
    """
    frame = curves_frame(curves)
    if not len(frame):
        st.info("No simulation curves yet.")
        return
    st.plotly_chart(simulation_figure(frame), key=key, width="stretch")
    if "abs_error" in frame.columns and frame["abs_error"].notna().any():
        # A narrow interim CI is good news only if the estimate is near the final one too.
        st.plotly_chart(simulation_figure(frame, "abs_error"), key=f"{key}_error",
                        width="stretch")
    if not savings:
        return
    r_need = savings.get("random_ratings_to_target")
    a_need = savings.get("adaptive_ratings_to_target")
    tol = float(savings.get("tolerance", 0.05))
    line = (f"To get within {tol:.0%} of the final CI width "
            f"({float(savings['final_random_ci_width']):.3f}): random needs {r_need} ratings, "
            f"adaptive {a_need} of {savings.get('total_ratings')}")
    saved = savings.get("saved_to_target")
    if saved is not None:
        line += (f" (adaptive saves {saved})" if saved > 0
                 else " (adaptive saves nothing here)")
    st.caption(line + ".")
