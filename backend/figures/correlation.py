"""The correlate report's figures, drawn once for the dashboard and the HTML report.

Pure functions: a typed report (:class:`backend.analysis.correlation.CorrelationReport`) or
one of its sections in, a plotly figure out; nothing is read, exported or shown here (the
dashboard passes figures to ``st.plotly_chart``, :mod:`backend.services.evaluation.reports` exports
them). Values arrive at full precision and are rounded only in hover text.

- :func:`forest_plot`: tau-b with its interval per metric, published values as hollow
  markers, the human ceiling as a band (:func:`forest_rows` makes its rows from a report).
- :func:`paired_test_matrix`: the paired tests' tau differences, corrected significance
  starred.
- :func:`system_means`: per source, the radiologists' mean errors beside one metric's mean.
- :func:`report_figures`: the three for one report, as the HTML report shows them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from radconcord.backend.analysis.correlation import CorrelationReport

#: Significance level that marks a cell of the paired matrix.
ALPHA = 0.05

_OURS = "#1f5f8b"
_CEILING = "#2e8b57"
_HUMAN = "#7f6000"
# One marker per source of published values (the table's "Paper" column names the same).
_PUBLISHED_SYMBOLS = ("circle-open", "diamond-open", "square-open", "triangle-up-open",
                      "star-open", "hexagon-open")
_PUBLISHED_COLORS = ("#c0392b", "#8e44ad", "#d35400", "#16a085", "#2c3e50", "#7f8c8d")

#: How the correlate JSON names its bootstrap units and corrections, in words for captions.
UNITS = {
    "pair": "resampling pairs",
    "case": "resampling cases (all pairs of one reference together)",
    "rater_pair": "resampling raters and pairs",
}
CORRECTIONS = {"holm": "Holm", "bh": "Benjamini-Hochberg"}


def unit_label(unit: str | None) -> str:
    """The bootstrap unit of a correlate section in words (unknown units as they are)."""
    return UNITS.get(str(unit), str(unit))


def correction_label(correction: str | None) -> str:
    """The multiple-testing correction of a correlate section in words."""
    return CORRECTIONS.get(str(correction), str(correction))


def _ceiling_band(fig: go.Figure, ceiling: Mapping[str, Any] | None) -> None:
    """Shade the human ceiling's interval and mark its mean, with a legend entry."""
    if not ceiling or ceiling.get("kendall_tau_b") is None:
        return
    tau = float(ceiling["kendall_tau_b"])
    lo, hi = (list(ceiling.get("kendall_ci95") or []) + [None, None])[:2]
    label = f"human ceiling {tau:.3f}"
    if lo is not None and hi is not None:
        fig.add_vrect(x0=float(lo), x1=float(hi), fillcolor=_CEILING, opacity=0.15,
                      layer="below", line_width=0)
        label += f" [{float(lo):.3f}, {float(hi):.3f}]"
    fig.add_vline(x=tau, line={"color": _CEILING, "dash": "dash", "width": 2})
    n = ceiling.get("n_raters")
    if n:
        label += f", {n} raters"
    # Shapes have no legend entry: an empty trace names the band.
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=label,
                             line={"color": _CEILING, "dash": "dash", "width": 6},
                             hoverinfo="skip"))


def forest_plot(rows: Sequence[Mapping[str, Any]], *, title: str = "Kendall tau-b",
                ceiling: Mapping[str, Any] | None = None) -> go.Figure:
    """Point and CI bar per metric, published values as hollow markers, the human ceiling as
    a band.

    Args:
        rows: ``{"key", "tau", "lo", "hi", "published": [(paper, tau), ...]}``; the first row
            is drawn at the top.
        title: X-axis title.
        ceiling: The correlate JSON's ``ceiling`` section (``kendall_tau_b``,
            ``kendall_ci95``, ``n_raters``); ``None`` or a null tau draws no band. The band
            spans the ceiling's interval and a dashed line marks its mean.
    """
    rows = [r for r in rows if r.get("tau") is not None]
    keys = [str(r["key"]) for r in rows]
    taus = [float(r["tau"]) for r in rows]
    lo = [r.get("lo") for r in rows]
    hi = [r.get("hi") for r in rows]
    has_ci = all(v is not None for v in lo + hi) and rows
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=taus, y=keys, mode="markers", name="this study",
        marker={"color": _OURS, "size": 9},
        error_x={"type": "data", "symmetric": False,
                 "array": [h - t for h, t in zip(hi, taus, strict=True)],
                 "arrayminus": [t - lw for lw, t in zip(lo, taus, strict=True)],
                 "thickness": 1.5, "width": 4} if has_ci else None,
        hovertemplate="%{y}: tau-b %{x:.3f}<extra></extra>",
    ))
    # One legend entry per source of published values, named as in the reproduction
    # table's "Paper" column, so a reader matches each marker to its row.
    by_paper: dict[str, tuple[list[float], list[str]]] = {}
    for r in rows:
        for paper, value in r.get("published") or ():
            xs, ys = by_paper.setdefault(str(paper), ([], []))
            xs.append(float(value))
            ys.append(str(r["key"]))
    for i, (paper, (xs, ys)) in enumerate(by_paper.items()):
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers", name=f"published: {paper}",
            marker={"symbol": _PUBLISHED_SYMBOLS[i % len(_PUBLISHED_SYMBOLS)], "size": 12,
                    "color": _PUBLISHED_COLORS[i % len(_PUBLISHED_COLORS)],
                    "line": {"width": 2}},
            hovertemplate=f"{paper}, %{{y}}: %{{x:.3f}}<extra></extra>",
        ))
    fig.add_vline(x=0.0, line={"color": "#999", "dash": "dot"})
    _ceiling_band(fig, ceiling)
    fig.update_layout(
        xaxis_title=title, yaxis={"autorange": "reversed", "type": "category"},
        height=max(260, 34 * len(keys) + 120), margin={"l": 10, "r": 10, "t": 30, "b": 40},
        legend={"orientation": "h", "y": 1.08},
    )
    return fig


def _pair_keys(pairs: Mapping[str, Any], keys: Sequence[str] | None) -> list[str]:
    seen: list[str] = []
    for name in pairs:
        a, sep, b = str(name).partition("|")
        if not sep:
            raise ValueError(f"pairwise entry '{name}' is not of the form 'A|B'")
        for k in (a, b):
            if k not in seen:
                seen.append(k)
    ordered = [k for k in (keys or ()) if k in seen]
    return ordered + sorted(k for k in seen if k not in ordered)


def paired_test_matrix(paired_tests: Mapping[str, Any], *,
                       keys: Sequence[str] | None = None, alpha: float = ALPHA) -> go.Figure:
    """Matrix of paired tau differences: cell (row A, column B) is tau(A) - tau(B).

    Both halves are drawn (the lower one negated), cells whose corrected p-value is below
    ``alpha`` carry a star, and the hover text gives the interval, the raw and corrected
    p-values and the Williams test's p where the section has one.

    Args:
        paired_tests: The report's ``paired_tests`` section (``unit``, ``correction``,
            ``resamples``, ``pairs: {"A|B": {tau_diff, ci95, p, p_adjusted, williams_p}}``).
        keys: Metric keys in display order (others in the section follow, sorted).
        alpha: Level at which a corrected p-value marks a cell.

    Raises:
        ValueError: an entry's name is not ``"A|B"``.
    """
    pairs = paired_tests.get("pairs") or {}
    order = _pair_keys(pairs, keys)
    index = {k: i for i, k in enumerate(order)}
    n = len(order)
    z: list[list[float | None]] = [[None] * n for _ in range(n)]
    marks = [[""] * n for _ in range(n)]
    hover = [["" for _ in range(n)] for _ in range(n)]
    correction = correction_label(paired_tests.get("correction"))
    for name, entry in pairs.items():
        a, _, b = str(name).partition("|")
        diff = entry.get("tau_diff")
        lo, hi = (list(entry.get("ci95") or []) + [None, None])[:2]
        p, p_adj, williams = entry.get("p"), entry.get("p_adjusted"), entry.get("williams_p")
        star = "*" if p_adj is not None and p_adj < alpha else ""
        for row, col, sign in ((a, b, 1.0), (b, a, -1.0)):
            i, j = index[row], index[col]
            z[i][j] = None if diff is None else sign * float(diff)
            marks[i][j] = star
            ci = (f"[{sign * lo:.3f}, {sign * hi:.3f}]" if sign > 0 else
                  f"[{sign * hi:.3f}, {sign * lo:.3f}]") if lo is not None and hi is not None \
                else "n/a"
            hover[i][j] = "<br>".join([
                f"tau({row}) - tau({col}) = {_num(z[i][j])}",
                f"95% CI {ci}",
                f"p = {_num(p, 4)}, {correction}-adjusted p = {_num(p_adj, 4)}",
                f"Williams test (dependent correlations) p = {_num(williams, 4)}"
                if williams is not None else "Williams test: does not apply",
            ])
    finite = [abs(v) for row in z for v in row if v is not None]
    span = max(finite) if finite and max(finite) > 0 else 1.0
    fig = go.Figure(go.Heatmap(
        z=z, x=order, y=order, text=marks, texttemplate="%{text}",
        textfont={"size": 18}, customdata=hover, hovertemplate="%{customdata}<extra></extra>",
        colorscale="RdBu", zmid=0.0, zmin=-span, zmax=span,
        colorbar={"title": {"text": "tau diff"}},
    ))
    fig.update_layout(
        xaxis={"type": "category", "side": "top", "showgrid": False},
        yaxis={"type": "category", "autorange": "reversed", "showgrid": False},
        height=max(320, 30 * n + 160), margin={"l": 10, "r": 10, "t": 60, "b": 40},
    )
    return fig


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{float(value):.{digits}f}"


def system_means(systems: Mapping[str, Any], *, key: str) -> go.Figure:
    """Per source: the radiologists' mean errors and the mean of one metric, with CIs.

    Sources are listed in the radiologists' order (``human_order``, best first), so a metric
    that ranks the systems as the radiologists do shows the same order in both panels.

    Args:
        systems: The correlate JSON's ``systems`` section.
        key: The metric key drawn in the right panel.
    """
    sources: Mapping[str, Any] = systems.get("sources") or {}
    order = [s for s in systems.get("human_order") or () if s in sources]
    order += sorted(s for s in sources if s not in order)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("radiologists: mean errors per pair",
                                        f"{key}: mean per pair"))
    for col, name, color, pick in (
        (1, "radiologists", _HUMAN,
         lambda e: (e.get("human_mean"), e.get("human_ci95"))),
        (2, key, _OURS,
         lambda e: ((e.get("metrics") or {}).get(key, {}).get("mean"),
                    (e.get("metrics") or {}).get(key, {}).get("ci95"))),
    ):
        xs, lo, hi, ys, ns = [], [], [], [], []
        for src in order:
            mean, ci = pick(sources[src])
            if mean is None:
                continue
            c_lo, c_hi = (list(ci or []) + [None, None])[:2]
            xs.append(float(mean))
            lo.append(float(mean) - float(c_lo) if c_lo is not None else 0.0)
            hi.append(float(c_hi) - float(mean) if c_hi is not None else 0.0)
            ys.append(src or "(no source)")
            ns.append(sources[src].get("n"))
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers", name=name, marker={"color": color, "size": 10},
            customdata=ns,
            error_x={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo,
                     "thickness": 1.5, "width": 4},
            hovertemplate="%{y}: %{x:.4f} (n=%{customdata})<extra>" + name + "</extra>",
        ), row=1, col=col)
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_layout(height=max(260, 40 * len(order) + 140), showlegend=False,
                      margin={"l": 10, "r": 10, "t": 40, "b": 40})
    return fig


def forest_rows(report: CorrelationReport, keys: Sequence[str] | None = None
                ) -> list[dict[str, Any]]:
    """The rows :func:`forest_plot` draws: ``keys`` in order (default: every metric, best
    tau first), each with its interval and its published values."""
    if keys is None:
        keys = sorted((k for k, m in report.metrics.items() if m.kendall_tau_b is not None),
                      key=lambda k: -(report.metrics[k].kendall_tau_b or 0.0))
    return [{"key": k, "tau": report.metrics[k].kendall_tau_b,
             "lo": report.metrics[k].kendall_ci95[0], "hi": report.metrics[k].kendall_ci95[1],
             "published": list(report.published.for_key(k))}
            for k in keys if k in report.metrics]


def report_figures(report: CorrelationReport, *, alpha: float = ALPHA) -> dict[str, go.Figure]:
    """The report's figures: ``forest`` (when a metric has a tau), ``paired_tests`` and
    ``systems`` (the best metric beside the radiologists) when their sections have entries.

    Args:
        report: The typed ``correlate`` report.
        alpha: Level at which a corrected p-value marks a matrix cell.
    """
    figs: dict[str, go.Figure] = {}
    rows = forest_rows(report)
    if rows:
        figs["forest"] = forest_plot(rows, ceiling=report.ceiling)
    keys = [r["key"] for r in rows]
    if (report.paired_tests or {}).get("pairs"):
        figs["paired_tests"] = paired_test_matrix(report.paired_tests, keys=keys, alpha=alpha)
    if (report.systems or {}).get("sources") and keys:
        figs["systems"] = system_means(report.systems, key=keys[0])
    return figs
