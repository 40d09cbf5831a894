"""Plotly figures of the Quality control page. Pure functions: plain data in, a figure out.

Values arrive at full precision and are rounded only in hover text; a rater without a value
is a gap, never a zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from backend.analysis.monitoring import RaterMonitoring

_FLAGGED = "#c0392b"
_STEADY = "#1f5f8b"
_FIRST = "#7f8c8d"


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
    fig.update_layout(yaxis_title="time on task per pair (s)", showlegend=False, height=360,
                      margin={"l": 10, "r": 10, "t": 30, "b": 40})
    return fig


def pace_and_drift(raters: Sequence[RaterMonitoring]) -> go.Figure:
    """Done pairs per hour (bars, left) and the drift (mean total count of the first vs the
    last third of each rater's done pairs, markers joined by a line, right axis).

    Args:
        raters: The study's monitoring, one entry per rater.
    """
    names = [r.rater for r in raters]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        x=names, y=[_gap(r.done_per_hour) for r in raters], name="done per hour",
        marker={"color": [_FLAGGED if r.flags else _STEADY for r in raters]},
        hovertemplate="%{x}: %{y:.1f} pairs/hour<extra></extra>"))
    for field, label, color, symbol in (("drift_first", "first third", _FIRST, "circle-open"),
                                        ("drift_last", "last third", "#d35400", "circle")):
        fig.add_trace(go.Scatter(
            x=names, y=[_gap(getattr(r, field)) for r in raters], yaxis="y2",
            mode="markers", name=f"mean total count, {label}",
            marker={"color": color, "size": 11, "symbol": symbol},
            hovertemplate="%{x}: %{y:.2f}<extra>" + label + "</extra>"))
    fig.update_layout(
        height=360, margin={"l": 10, "r": 10, "t": 30, "b": 40},
        yaxis={"title": "done pairs per hour of time on task"},
        yaxis2={"title": "mean total count", "overlaying": "y", "side": "right",
                "rangemode": "tozero"},
        legend={"orientation": "h", "y": 1.15})
    return fig


__all__ = ["pace_and_drift", "time_per_pair"]
