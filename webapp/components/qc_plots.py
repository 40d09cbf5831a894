"""Plotly figures of the Quality control page. Pure functions: plain data in, a figure out.

Values arrive at full precision and are rounded only in hover text; a rater without a value
is a gap, never a zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from radconcord.backend.analysis.monitoring import RaterMonitoring

_FLAGGED = "#c0392b"
_STEADY = "#1f5f8b"


def _gap(value: float) -> float | None:
    return value if math.isfinite(value) else None


def time_per_pair(raters: Sequence[RaterMonitoring]) -> go.Figure:
    """Box plots of the time on task per done pair, one per rater (all points shown).

    Flagged raters are drawn in red; the dashed line of each box's whisker range is plotly's
    (1.5 IQR), while the page's slow outliers are those above ``Q3 + 3 IQR``.

    Args:
        raters: The study's monitoring, one entry per rater.
    """
    fig = go.Figure()
    for r in raters:
        color = _FLAGGED if r.flags else _STEADY
        fig.add_trace(go.Box(
            y=list(r.seconds), name=r.rater, boxpoints="all", jitter=0.4, pointpos=0,
            marker={"color": color, "size": 5}, line={"color": color},
            hovertemplate="%{y:.1f} s<extra>" + r.rater + "</extra>"))
    fig.update_layout(title={"text": "Time on task per done pair", "x": 0.5,
                             "xanchor": "center", "font": {"size": 14}},
                      yaxis_title="seconds", showlegend=False, height=360,
                      margin={"l": 10, "r": 10, "t": 40, "b": 40})
    return fig


def pace_and_drift(raters: Sequence[RaterMonitoring]) -> go.Figure:
    """Two panels: done pairs per hour of time on task (bars) and the drift, the mean total
    count of the first third of each rater's done pairs (open circle) joined to that of the
    last third (filled circle).

    Args:
        raters: The study's monitoring, one entry per rater.
    """
    names = [r.rater for r in raters]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16,
                        subplot_titles=("Done pairs per hour", "Drift: mean total count"))
    fig.add_trace(go.Bar(
        x=names, y=[_gap(r.done_per_hour) for r in raters], name="done per hour",
        marker={"color": [_FLAGGED if r.flags else _STEADY for r in raters]},
        showlegend=False, hovertemplate="%{x}: %{y:.1f} pairs/hour<extra></extra>"),
        row=1, col=1)
    for r in raters:
        if not r.drift_n:
            continue
        color = _FLAGGED if r.flags else _STEADY
        fig.add_trace(go.Scatter(
            x=[r.rater, r.rater], y=[r.drift_first, r.drift_last], mode="lines+markers",
            line={"color": color, "width": 2}, showlegend=False,
            marker={"color": color, "size": 11, "symbol": ["circle-open", "circle"]},
            customdata=[f"first {r.drift_n} pairs", f"last {r.drift_n} pairs"],
            hovertemplate=r.rater + ", %{customdata}: %{y:.2f}<extra></extra>"),
            row=1, col=2)
    fig.update_xaxes(categoryorder="array", categoryarray=names)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=360, margin={"l": 10, "r": 10, "t": 40, "b": 40})
    return fig


__all__ = ["pace_and_drift", "time_per_pair"]
