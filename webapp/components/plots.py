"""Plotly figures for the analysis pages. Pure functions: plain data in, a figure out.

Nothing here queries the database or draws on the page; views pass the figures to
``st.plotly_chart``. Values arrive at full precision and are rounded only in hover text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from radconcord.backend.types import CATEGORIES


def scope_label(scope: str | int, *, wrap: int | None = None) -> str:
    """An agreement scope in words: ``"total"`` -> ``"Total errors"``, ``"2"`` ->
    ``"2. Omission of finding"`` (the ReXVal category names of ``backend.types``).

    Args:
        scope: ``"total"`` or a category number 1-6 (as text or int).
        wrap: Break the label with ``<br>`` near this many characters (for axis ticks).
    """
    text = str(scope)
    if text == "total":
        return "Total errors"
    try:
        label = f"{int(text)}. {CATEGORIES[int(text)]}"
    except (ValueError, KeyError):
        return text
    if not wrap:
        return label
    lines: list[str] = []
    for word in label.split():
        if lines and len(lines[-1]) + 1 + len(word) <= wrap:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def metric_scatter(
    *,
    errors: Sequence[float],
    values: Sequence[float],
    pair_ids: Sequence[int],
    labels: Sequence[str],
    sources: Sequence[str],
    key: str,
    target: str,
) -> go.Figure:
    """One point per pair: raters' mean errors (x) against one metric (y), colour = source.

    ``customdata`` carries the pair id, so a selection names the pair to open.
    """
    fig = go.Figure()
    for src in sorted(set(sources)):
        idx = [i for i, s in enumerate(sources) if s == src]
        fig.add_trace(go.Scatter(
            x=[errors[i] for i in idx], y=[values[i] for i in idx], mode="markers",
            name=src or "(no source)", customdata=[pair_ids[i] for i in idx],
            text=[labels[i] for i in idx], marker={"size": 9, "opacity": 0.8},
            hovertemplate="%{text}<br>errors %{x:.2f}<br>" + key
                          + " %{y:.4f}<extra>%{fullData.name}</extra>",
        ))
    fig.update_layout(
        xaxis_title=f"raters' mean {target} errors", yaxis_title=key, height=420,
        margin={"l": 10, "r": 10, "t": 30, "b": 40}, clickmode="event+select",
        legend={"orientation": "h", "y": 1.08},
    )
    return fig


def error_distribution(*, errors: Sequence[float], sources: Sequence[str],
                       target: str) -> go.Figure:
    """Box plot with every pair as a point, one box per candidate source."""
    fig = go.Figure()
    for src in sorted(set(sources)):
        fig.add_trace(go.Box(
            y=[e for e, s in zip(errors, sources, strict=True) if s == src],
            name=src or "(no source)", boxpoints="all", jitter=0.4, pointpos=0,
        ))
    fig.update_layout(yaxis_title=f"mean {target} errors per pair", showlegend=False,
                      height=360, margin={"l": 10, "r": 10, "t": 30, "b": 40})
    return fig


def agreement_bars(rows: Sequence[Mapping[str, Any]], *, min_n: int = 0) -> go.Figure:
    """Grouped bars of Krippendorff's alpha and ICC per scope (total and categories), with
    the ICCs' intervals and every bar's n; a missing bar says why in words.

    Args:
        rows: ``{"scope", "alpha_interval", "icc2_1", "icc2_k"}`` with ``scope`` ``"total"``
            or a category number (drawn with the category's name, :func:`scope_label`), and
            optionally ``"pairable"`` (alpha's n), ``"icc_n_pairs"``/``"icc_k"`` (the ICCs'
            block) and ``"icc2_1_ci95"``/``"icc2_k_ci95"`` (``[lo, hi]``).
        min_n: Fewer pairs than this: no bar, the words "n too small" instead (0: off).
            An undefined value from enough pairs reads "n/a (no variance)".
    """
    scopes = [scope_label(r["scope"], wrap=18) for r in rows]
    fig = go.Figure()
    series = (("alpha_interval", "Krippendorff alpha (interval)", "pairable", None),
              ("icc2_1", "ICC(2,1)", "icc_n_pairs", "icc2_1_ci95"),
              ("icc2_k", "ICC(2,k)", "icc_n_pairs", "icc2_k_ci95"))
    notes: list[tuple[int, int, str]] = []
    for s_i, (field, name, n_field, ci_field) in enumerate(series):
        ys: list[float | None] = []
        lo: list[float] = []
        hi: list[float] = []
        texts: list[str] = []
        for i, r in enumerate(rows):
            n = r.get(n_field)
            n = r.get("pairable") if n is None else n
            value = r.get(field)
            small = min_n and n is not None and int(n) < min_n
            if small or value is None:
                ys.append(None)
                notes.append((i, s_i, "n too small" if small else "n/a (no variance)"))
                texts.append("")
                lo.append(0.0)
                hi.append(0.0)
                continue
            ys.append(float(value))
            c_lo, c_hi = (list(r.get(ci_field) or []) + [None, None])[:2] if ci_field \
                else (None, None)
            lo.append(float(value) - float(c_lo) if c_lo is not None else 0.0)
            hi.append(float(c_hi) - float(value) if c_hi is not None else 0.0)
            k = r.get("icc_k")
            texts.append(f"n={n}" + (f", k={k}" if ci_field and k else ""))
        fig.add_trace(go.Bar(
            x=scopes, y=ys, name=name, text=texts, textposition="outside",
            error_y={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo,
                     "thickness": 1.2, "width": 3} if ci_field else None,
            hovertemplate="%{x}: %{y:.3f} (%{text})<extra>" + name + "</extra>"))
    # A missing bar is a word where the bar would be, not a silent gap.
    for i, s_i, word in notes:
        fig.add_annotation(x=scopes[i], y=0, text=word, showarrow=False, textangle=-90,
                           yanchor="bottom", xshift=(s_i - 1) * 18,
                           font={"size": 10, "color": "#757575"})
    fig.update_layout(barmode="group", yaxis_title="agreement", height=400,
                      margin={"l": 10, "r": 10, "t": 30, "b": 40},
                      legend={"orientation": "h", "y": 1.1})
    return fig


def probe_bars(rows: Sequence[Mapping[str, Any]], kinds: Sequence[tuple[str, str, bool]]
               ) -> go.Figure:
    """Grouped bars: mean score per perturbation type, one group per metric key.

    Args:
        rows: ``{"key", "means": {kind: value}}``.
        kinds: ``(kind, label, significant)`` in display order; significant types are drawn
            in warm colours, insignificant ones in cool colours.
    """
    warm = ["#c0392b", "#e67e22", "#d35400", "#8e44ad"]
    cool = ["#2980b9", "#16a085", "#27ae60", "#2c3e50"]
    fig = go.Figure()
    w = c = 0
    for kind, label, significant in kinds:
        if significant:
            color, w = warm[w % len(warm)], w + 1
        else:
            color, c = cool[c % len(cool)], c + 1
        fig.add_trace(go.Bar(
            x=[r["key"] for r in rows], y=[r["means"].get(kind) for r in rows],
            name=f"{label} ({'significant' if significant else 'insignificant'})",
            marker_color=color,
        ))
    fig.update_layout(barmode="group", yaxis_title="mean score vs original", height=400,
                      margin={"l": 10, "r": 10, "t": 30, "b": 40},
                      legend={"orientation": "h", "y": -0.2})
    return fig


