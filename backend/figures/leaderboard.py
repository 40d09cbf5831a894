"""The benchmark leaderboard's forest plot (plotly), for ``leaderboard.html``.

:func:`forest_markup` is what :func:`backend.analysis.leaderboard_html.render_html` calls to
draw each board's forest plot (the service passes it in): ranked metrics with their
intervals, the reported figures beside them, the human ceiling as a band.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go


def forest_markup(rows: Sequence[Mapping[str, Any]], field: str, title: str, axis: str,
                  ceiling: Mapping[str, Any] | None, reported: Sequence[Mapping[str, Any]],
                  div_id: str) -> str:
    """A plotly div: ranked metrics with intervals, the ceiling band and reported figures."""
    ranked = [r for r in rows if r["status"] == "ranked" and (r.get(field) or {}).get(
        "value") is not None]
    if not ranked:
        return ""
    keys = [r["key"] for r in ranked][::-1]
    values = [r[field]["value"] for r in ranked][::-1]
    cis = [r[field].get("ci95") or [None, None] for r in ranked][::-1]
    plus = [(hi - v) if hi is not None else 0 for v, (_, hi) in zip(values, cis, strict=True)]
    minus = [(v - lo) if lo is not None else 0 for v, (lo, _) in zip(values, cis, strict=True)]
    fig = go.Figure(go.Scatter(
        x=values, y=keys, mode="markers", name="computed (ranked)",
        marker={"size": 9, "color": "#1f77b4"},
        error_x={"type": "data", "array": plus, "arrayminus": minus}))
    shown = [r for r in reported if r.get("key") in keys]
    if shown:
        fig.add_trace(go.Scatter(
            x=[r["value"] for r in shown], y=[r["key"] for r in shown], mode="markers",
            name="reported (not ranked)", text=[r["source"] for r in shown],
            hovertemplate="%{y}: %{x:.3f} reported by %{text}<extra></extra>",
            marker={"symbol": "diamond-open", "size": 10, "color": "#d62728"}))
    value = (ceiling or {}).get("value")
    if isinstance(value, (int, float)):
        lo, hi = (ceiling or {}).get("ci95") or [None, None]
        if lo is not None and hi is not None:
            fig.add_vrect(x0=lo, x1=hi, fillcolor="#999", opacity=0.2, line_width=0)
        fig.add_vline(x=value, line_dash="dash", line_color="#555",
                      annotation_text="human ceiling")
    fig.update_layout(title=title, xaxis_title=axis, template="plotly_white",
                      height=max(300, 28 * len(keys) + 140),
                      margin={"l": 180, "r": 30, "t": 50, "b": 50},
                      legend={"orientation": "h", "y": -0.15})
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False})
