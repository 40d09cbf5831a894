"""``leaderboard.html``: the benchmark's JSON as one self-contained page (pure).

:func:`render_html` takes the document written to ``leaderboard.json`` (built by
:mod:`backend.services.benchmark` from :mod:`backend.analysis.leaderboard`'s boards) and
returns one HTML document: the protocol, then per dataset the ranked table of every metric
with its 95% interval, the share of the human ceiling and the paired test against the best
metric, a forest plot with the ceiling band, the metrics that are n/a with their reason, the
figures reported in papers beside ours (never ranked), and per-source tables; last the
metrics' signatures, the dataset files' sha256 and the package versions.

Figures are plotly divs with plotly.js inlined once in the head, as the study report
(:mod:`backend.analysis.html_report`) does when it cannot export SVG, so the page loads
nothing from another host. Every text from the data is HTML-escaped (the report's helpers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from radconcord.backend.analysis import html_report as hr

_EXTRA_CSS = (
    ".na td{color:#777}.reported td{font-style:italic;color:#555}"
    ".best td{background:#eef6ee}h2 small{font-weight:normal;color:#666;font-size:.7em}"
)


def _estimate(est: Mapping[str, Any] | None) -> tuple[str, str, str]:
    if not est:
        return "&ndash;", "&ndash;", "&ndash;"
    return hr._num(est.get("value")), hr._ci(est.get("ci95")), hr._num(est.get("n"))


def _forest(rows: Sequence[Mapping[str, Any]], field: str, title: str, axis: str,
            ceiling: Mapping[str, Any] | None, reported: Sequence[Mapping[str, Any]],
            div_id: str) -> str:
    """A plotly div: ranked metrics with intervals, the ceiling band and reported figures."""
    import plotly.graph_objects as go

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


def _ceiling_line(ceiling: Mapping[str, Any] | None, what: str, where: str) -> str:
    c = ceiling or {}
    if c.get("value") is None:
        return hr._absent(f"Human ceiling: n/a ({c.get('reason') or 'not computed'}).")
    return (f"<p>Human ceiling ({hr._e(what)}): <b>{hr._num(c['value'])}</b> "
            f"{hr._ci(c.get('ci95'))}, {hr._num(c.get('n_raters'))} raters, leave one rater "
            f"out; {hr._e(where)}.</p>")


def _na_cells(r: Mapping[str, Any], width: int) -> str:
    cells = [f"<td>n/a</td><td>{hr._e(r['key'])}</td>",
             f'<td colspan="{width}">{hr._e(r.get("reason"))}</td>']
    return '<tr class="na">' + "".join(cells) + "</tr>"


def _count_target(name: str, tb: Mapping[str, Any], div_id: str) -> str:
    target = tb["target"]
    label = "total errors" if target == "total" else "clinically significant errors"
    head = (f"<h3>Kendall tau-b vs the raters' mean {hr._e(label)}"
            f"{' (headline)' if tb.get('headline') else ''}</h3>"
            f'<p class="note">Pooled over all {hr._num(tb["n_pairs"])} rated pairs; '
            f"{hr._num(tb['resamples'])} case-level bootstrap resamples. Best metric: "
            f"{hr._e(tb.get('best'))}; p (Holm) tests tau(best) - tau(metric).</p>")
    out = [head, _ceiling_line(tb.get("ceiling"), label, "the band on the plot")]
    header = ("Rank", "Metric", "tau-b", "95% CI", "% of ceiling", "tau(best) - tau",
              "p (Holm)", "n", "Signature")
    body = []
    for r in tb["rows"]:
        if r["status"] != "ranked":
            body.append(_na_cells(r, len(header) - 2))
            continue
        tau, ci, n = _estimate(r["kendall_tau_b"])
        vs = r.get("vs_best") or {}
        cls = ' class="best"' if r["key"] == tb.get("best") else ""
        cells = [hr._num(r["rank"]), hr._e(r["key"]), tau, ci, hr._pct(r["pct_of_ceiling"]),
                 hr._num(vs.get("tau_diff")) if vs else "&ndash;",
                 hr._p(vs.get("p_holm")) if vs else "&ndash;", n,
                 f"<code>{hr._e(r['signature'])}</code>"]
        body.append(f"<tr{cls}>" + "".join(hr._cell(c) for c in cells) + "</tr>")
    out.append("<table><thead><tr>" + "".join(f"<th>{hr._e(h)}</th>" for h in header)
               + "</tr></thead><tbody>" + "".join(body) + "</tbody></table>")
    if tb.get("reported"):
        out.append("<h4>Reported in papers (not ranked)</h4>")
        out.append(hr._table(
            ("Status", "Metric (paper's name)", "Our key", "Reported tau-b", "Ours", "Source"),
            [("reported", hr._e(r["metric"]), hr._e(r["key"]), hr._num(r["value"]),
              hr._num(r.get("ours")),
              hr._e(r["source"]) + (f" <span class=\"muted\">({hr._e(r['where'])})</span>"
                                    if r.get("where") else ""))
             for r in tb["reported"]],
            classes=["reported"] * len(tb["reported"])))
    out.append(hr._figure({"f": _forest(tb["rows"], "kendall_tau_b",
                                        f"{name}: Kendall tau-b vs {label}", "Kendall tau-b",
                                        tb.get("ceiling"), tb.get("reported") or [], div_id)},
                          "f", "Ranked metrics with 95% intervals; grey band: the human "
                               "ceiling's interval; open diamonds: reported figures."))
    sources = tb.get("per_source") or {}
    if sources:
        keys = [r["key"] for r in tb["rows"] if r["status"] == "ranked"]
        names = list(sources)
        cell: dict[tuple[str, str], str] = {}
        for src, block in sources.items():
            for r in block["rows"]:
                est = r.get("kendall_tau_b") or {}
                cell[(r["key"], src)] = (f"{hr._num(est.get('value'))} {hr._ci(est.get('ci95'))}"
                                         if est.get("value") is not None else "&ndash;")
        out.append(f"<h4>Per candidate type (not the headline): tau-b vs {hr._e(label)}</h4>")
        out.append(hr._table(
            ("Metric", *[f"{s} (n={sources[s]['n_pairs']})" for s in names]),
            [(hr._e(k), *[cell.get((k, s), "&ndash;") for s in names]) for k in keys]))
    return "".join(out)


def _preference(name: str, board: Mapping[str, Any], div_id: str) -> str:
    out = [f'<p class="note">{hr._num(board["n_judged"])} judged comparisons, '
           f"{hr._num(board['n_ties_excluded'])} tied by the raters and excluded; "
           f"{hr._num(board['n_candidates_rated'])} rated candidates; preference from the "
           f"{hr._e(board['preference_source'])}; {hr._num(board['resamples'])} "
           "reference-level bootstrap resamples.</p>",
           _ceiling_line(board.get("ceiling"), "1-5 ratings",
                         "the share column is tau-b vs the mean rating over it")]
    header = ("Rank", "Metric", "Pairwise agreement", "95% CI", "Comparisons",
              "tau-b vs mean rating", "95% CI", "tau-b % of ceiling", "Signature")
    body = []
    for r in board["rows"]:
        if r["status"] != "ranked":
            body.append(_na_cells(r, len(header) - 2))
            continue
        agr, agr_ci, n = _estimate(r["pairwise_agreement"])
        tau, tau_ci, _ = _estimate(r["kendall_tau_b_rating"])
        cells = [hr._num(r["rank"]), hr._e(r["key"]), agr, agr_ci, n, tau, tau_ci,
                 hr._pct(r["pct_of_ceiling"]), f"<code>{hr._e(r['signature'])}</code>"]
        body.append("<tr>" + "".join(hr._cell(c) for c in cells) + "</tr>")
    out.append("<table><thead><tr>" + "".join(f"<th>{hr._e(h)}</th>" for h in header)
               + "</tr></thead><tbody>" + "".join(body) + "</tbody></table>")
    out.append(hr._figure({"f": _forest(board["rows"], "pairwise_agreement",
                                        f"{name}: pairwise agreement", "pairwise agreement",
                                        None, [], div_id)},
                          "f", "Ranked metrics with 95% intervals (references resampled)."))
    return "".join(out)


def _dataset(index: int, ds: Mapping[str, Any]) -> str:
    board = ds["board"]
    source = ds.get("source") or {}
    facts = [("Kind", hr._e(board["kind"])), ("Gold set", hr._e(ds.get("gold_set"))),
             ("Read from", hr._e(source.get("location"))),
             ("Headline", hr._e(board.get("headline")))]
    if board["kind"] == "counts":
        facts += [("Rated pairs", hr._num(board["n_pairs"])),
                  ("Raters", hr._num(board["n_raters"])),
                  ("Raters per pair", hr._num(board["raters_per_pair"], 2)),
                  ("Pairs per source", hr._e(", ".join(f"{k}: {v}" for k, v in
                                                       board["sources"].items())))]
    out = [f'<section id="d{index}"><h2>{hr._e(ds["name"])} <small>'
           f"{hr._e(board['kind'])}</small></h2>", hr._kv(facts)]
    if board["kind"] == "counts":
        for t, tb in board["targets"].items():
            out.append(_count_target(ds["name"], tb, f"forest-{index}-{t}"))
    else:
        out.append(_preference(ds["name"], board, f"forest-{index}"))
    scoring = ds.get("scoring") or {}
    if scoring:
        out.append("<h4>Scoring (score cache)</h4>")
        out.append(hr._table(
            ("Family", "Status", "Computed", "From cache", "Reason"),
            [(hr._e(f), hr._e(s.get("status")), hr._num(s.get("computed")),
              hr._num(s.get("cached")), hr._e(s.get("reason")))
             for f, s in scoring.items()]))
    files = ds.get("files") or {}
    out.append("<h4>Inputs (sha256)</h4>")
    out.append(hr._table(("File", "sha256"), [(hr._e(k), f"<code>{hr._e(v)}</code>")
                                              for k, v in files.items()])
               if files else hr._absent("No input file hashes recorded."))
    out.append("</section>")
    return "".join(out)


def render_html(doc: Mapping[str, Any], *, plotlyjs: str | None = None) -> str:
    """The leaderboard as one HTML document.

    Args:
        doc: The ``leaderboard.json`` document (``protocol``, ``datasets``, ``signatures``
            as dataset -> key -> signature, ``versions``, ``generated_at``, ``command``).
        plotlyjs: plotly.js source, inlined once in the head (``None``: the figures' divs
            stay but draw nothing, which tests use to keep pages small).

    Returns:
        The document; it loads nothing from another host.
    """
    protocol = doc.get("protocol") or {}
    datasets = doc.get("datasets") or []
    toc = "".join(f'<li><a href="#d{i}">{hr._e(ds["name"])}</a> ({hr._e(ds["board"]["kind"])}'
                  ")</li>" for i, ds in enumerate(datasets))
    proto = ("<ol>" + "".join(f"<li>{hr._e(line)}</li>" for line in protocol.get("text", []))
             + "</ol>" + hr._kv([
                 ("Seed", hr._num(protocol.get("seed"))),
                 ("Bootstrap resamples", hr._num(protocol.get("bootstrap"))),
                 ("Interval level", hr._num(protocol.get("level"), 2)),
                 ("Resampling unit", hr._e(protocol.get("resampling"))),
                 ("Correction", hr._e(protocol.get("correction"))),
                 ("Metrics requested",
                  hr._e(", ".join(protocol.get("metrics_requested") or [])))]))
    signatures = doc.get("signatures") or {}
    sig_table = hr._table(
        ("Dataset", "Key", "Family", "Signature", "Hash"),
        [(hr._e(ds), hr._e(k), hr._e(v.get("family")), f"<code>{hr._e(v.get('signature'))}</code>",
          f"<code>{hr._e(v.get('signature_hash'))}</code>")
         for ds, keys in signatures.items() for k, v in keys.items()])
    versions = doc.get("versions") or {}
    version_table = hr._kv((k, hr._e(v) if v is not None else "not installed")
                           for k, v in versions.items())
    script = ""
    if plotlyjs:
        # "</" inside the library would end the script element early.
        script = "<script>" + plotlyjs.replace("</", "<\\/") + "</script>"
    title = "RadConcord benchmark leaderboard"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{hr._e(title)}</title><style>{hr._CSS}{_EXTRA_CSS}</style>{script}</head><body>"
        f"<h1>{hr._e(title)}</h1><p class=\"note\">Generated at "
        f"{hr._e(doc.get('generated_at'))} by {hr._e(doc.get('tool'))}. Every figure is in "
        "leaderboard.json beside this file.</p>"
        f"<nav><ol>{toc}</ol></nav><section id=\"protocol\"><h2>Protocol</h2>{proto}</section>"
        + "".join(_dataset(i, ds) for i, ds in enumerate(datasets))
        + f"<section id=\"signatures\"><h2>Metric signatures</h2>{sig_table}</section>"
        f"<section id=\"versions\"><h2>Versions</h2>{version_table}"
        f"<p class=\"note\"><code>{hr._e(json.dumps(doc.get('command')))}</code></p></section>"
        "<footer>Reported figures come from the papers named beside them and never enter a "
        "rank; n/a rows say why a metric has no value on a dataset.</footer></body></html>\n"
    )
