"""``leaderboard.html``: the benchmark's JSON as one self-contained page (pure).

:func:`render_html` takes the document written to ``leaderboard.json`` (built by
:mod:`backend.services.evaluation.benchmark` from :mod:`backend.analysis.leaderboard`'s boards) and
returns one HTML document: the protocol, then per dataset the ranked table of every metric
with its 95% interval, the share of the human ceiling and the paired test against the best
metric, a forest plot with the ceiling band, the metrics that are n/a with their reason, the
figures reported in papers beside ours (never ranked), and per-source tables; last the
metrics' signatures, the dataset files' sha256 and the package versions.

Figures are plotly divs with plotly.js inlined once in the head, as the study report
(:mod:`backend.analysis.html_report`) does when it cannot export SVG, so the page loads
nothing from another host. This module draws nothing itself: the caller passes the forest
plot's drawing (:func:`backend.figures.leaderboard.forest_markup`), so plotly stays out of
the analysis package. Every text from the data is HTML-escaped (the report's helpers).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from radconcord.backend.analysis.html_parts import (
    CSS,
    absent,
    cell,
    esc,
    figure,
    interval,
    kv_table,
    num,
    p_value,
    percent,
    table,
)

#: Draws one forest plot as markup: ``(rows, field, title, axis, ceiling, reported, div_id)``.
Forest = Callable[[Sequence[Mapping[str, Any]], str, str, str, Mapping[str, Any] | None,
                   Sequence[Mapping[str, Any]], str], str]


def _no_figure(*_args: Any) -> str:  # noqa: ANN401 - the Forest arguments, unused
    return ""


_EXTRA_CSS = (
    ".na td{color:#777}.reported td{font-style:italic;color:#555}"
    ".best td{background:#eef6ee}h2 small{font-weight:normal;color:#666;font-size:.7em}"
)


def _estimate(est: Mapping[str, Any] | None) -> tuple[str, str, str]:
    if not est:
        return "&ndash;", "&ndash;", "&ndash;"
    return num(est.get("value")), interval(est.get("ci95")), num(est.get("n"))


def _ceiling_line(ceiling: Mapping[str, Any] | None, what: str, where: str) -> str:
    c = ceiling or {}
    if c.get("value") is None:
        return absent(f"Human ceiling: n/a ({c.get('reason') or 'not computed'}).")
    return (f"<p>Human ceiling ({esc(what)}): <b>{num(c['value'])}</b> "
            f"{interval(c.get('ci95'))}, {num(c.get('n_raters'))} raters, leave one rater "
            f"out; {esc(where)}.</p>")


def _na_cells(r: Mapping[str, Any], width: int) -> str:
    cells = [f"<td>n/a</td><td>{esc(r['key'])}</td>",
             f'<td colspan="{width}">{esc(r.get("reason"))}</td>']
    return '<tr class="na">' + "".join(cells) + "</tr>"


def _count_target(name: str, tb: Mapping[str, Any], div_id: str, draw: Forest) -> str:
    target = tb["target"]
    label = "total errors" if target == "total" else "clinically significant errors"
    head = (f"<h3>Kendall tau-b vs the raters' mean {esc(label)}"
            f"{' (headline)' if tb.get('headline') else ''}</h3>"
            f'<p class="note">Pooled over all {num(tb["n_pairs"])} rated pairs; '
            f"{num(tb['resamples'])} case-level bootstrap resamples. Best metric: "
            f"{esc(tb.get('best'))}; p (Holm) tests tau(best) - tau(metric).</p>")
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
        cells = [num(r["rank"]), esc(r["key"]), tau, ci, percent(r["pct_of_ceiling"]),
                 num(vs.get("tau_diff")) if vs else "&ndash;",
                 p_value(vs.get("p_holm")) if vs else "&ndash;", n,
                 f"<code>{esc(r['signature'])}</code>"]
        body.append(f"<tr{cls}>" + "".join(cell(c) for c in cells) + "</tr>")
    out.append("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header)
               + "</tr></thead><tbody>" + "".join(body) + "</tbody></table>")
    if tb.get("reported"):
        out.append("<h4>Reported in papers (not ranked)</h4>")
        out.append(table(
            ("Status", "Metric (paper's name)", "Our key", "Reported tau-b", "Ours", "Source"),
            [("reported", esc(r["metric"]), esc(r["key"]), num(r["value"]),
              num(r.get("ours")),
              esc(r["source"]) + (f" <span class=\"muted\">({esc(r['where'])})</span>"
                                    if r.get("where") else ""))
             for r in tb["reported"]],
            classes=["reported"] * len(tb["reported"])))
    out.append(figure({"f": draw(tb["rows"], "kendall_tau_b",
                                        f"{name}: Kendall tau-b vs {label}", "Kendall tau-b",
                                        tb.get("ceiling"), tb.get("reported") or [], div_id)},
                          "f", "Ranked metrics with 95% intervals; grey band: the human "
                               "ceiling's interval; open diamonds: reported figures."))
    sources = tb.get("per_source") or {}
    if sources:
        keys = [r["key"] for r in tb["rows"] if r["status"] == "ranked"]
        names = list(sources)
        by_cell: dict[tuple[str, str], str] = {}
        for src, block in sources.items():
            for r in block["rows"]:
                est = r.get("kendall_tau_b") or {}
                by_cell[(r["key"], src)] = (f"{num(est.get('value'))} {interval(est.get('ci95'))}"
                                            if est.get("value") is not None else "&ndash;")
        out.append(f"<h4>Per candidate type (not the headline): tau-b vs {esc(label)}</h4>")
        out.append(table(
            ("Metric", *[f"{s} (n={sources[s]['n_pairs']})" for s in names]),
            [(esc(k), *[by_cell.get((k, s), "&ndash;") for s in names]) for k in keys]))
    return "".join(out)


def _preference(name: str, board: Mapping[str, Any], div_id: str, draw: Forest) -> str:
    out = [f'<p class="note">{num(board["n_judged"])} judged comparisons, '
           f"{num(board['n_ties_excluded'])} tied by the raters and excluded; "
           f"{num(board['n_candidates_rated'])} rated candidates; preference from the "
           f"{esc(board['preference_source'])}; {num(board['resamples'])} "
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
        cells = [num(r["rank"]), esc(r["key"]), agr, agr_ci, n, tau, tau_ci,
                 percent(r["pct_of_ceiling"]), f"<code>{esc(r['signature'])}</code>"]
        body.append("<tr>" + "".join(cell(c) for c in cells) + "</tr>")
    out.append("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header)
               + "</tr></thead><tbody>" + "".join(body) + "</tbody></table>")
    out.append(figure({"f": draw(board["rows"], "pairwise_agreement",
                                        f"{name}: pairwise agreement", "pairwise agreement",
                                        None, [], div_id)},
                          "f", "Ranked metrics with 95% intervals (references resampled)."))
    return "".join(out)


def _dataset(index: int, ds: Mapping[str, Any], draw: Forest) -> str:
    board = ds["board"]
    source = ds.get("source") or {}
    facts = [("Kind", esc(board["kind"])), ("Gold set", esc(ds.get("gold_set"))),
             ("Read from", esc(source.get("location"))),
             ("Headline", esc(board.get("headline")))]
    if board["kind"] == "counts":
        facts += [("Rated pairs", num(board["n_pairs"])),
                  ("Raters", num(board["n_raters"])),
                  ("Raters per pair", num(board["raters_per_pair"], 2)),
                  ("Pairs per source", esc(", ".join(f"{k}: {v}" for k, v in
                                                       board["sources"].items())))]
    out = [f'<section id="d{index}"><h2>{esc(ds["name"])} <small>'
           f"{esc(board['kind'])}</small></h2>", kv_table(facts)]
    if board["kind"] == "counts":
        for t, tb in board["targets"].items():
            out.append(_count_target(ds["name"], tb, f"forest-{index}-{t}", draw))
    else:
        out.append(_preference(ds["name"], board, f"forest-{index}", draw))
    scoring = ds.get("scoring") or {}
    if scoring:
        out.append("<h4>Scoring (score cache)</h4>")
        out.append(table(
            ("Family", "Status", "Computed", "From cache", "Reason"),
            [(esc(f), esc(s.get("status")), num(s.get("computed")),
              num(s.get("cached")), esc(s.get("reason")))
             for f, s in scoring.items()]))
    files = ds.get("files") or {}
    out.append("<h4>Inputs (sha256)</h4>")
    out.append(table(("File", "sha256"), [(esc(k), f"<code>{esc(v)}</code>")
                                              for k, v in files.items()])
               if files else absent("No input file hashes recorded."))
    out.append("</section>")
    return "".join(out)


def render_html(doc: Mapping[str, Any], *, plotlyjs: str | None = None,
                forest: Forest | None = None) -> str:
    """The leaderboard as one HTML document.

    Args:
        doc: The ``leaderboard.json`` document (``protocol``, ``datasets``, ``signatures``
            as dataset -> key -> signature, ``versions``, ``generated_at``, ``command``).
        plotlyjs: plotly.js source, inlined once in the head (``None``: the figures' divs
            stay but draw nothing, which tests use to keep pages small).
        forest: Draws each forest plot (:func:`backend.figures.leaderboard.forest_markup`);
            ``None`` leaves the figures out.

    Returns:
        The document; it loads nothing from another host.
    """
    protocol = doc.get("protocol") or {}
    draw = forest or _no_figure
    datasets = doc.get("datasets") or []
    toc = "".join(f'<li><a href="#d{i}">{esc(ds["name"])}</a> ({esc(ds["board"]["kind"])}'
                  ")</li>" for i, ds in enumerate(datasets))
    proto = ("<ol>" + "".join(f"<li>{esc(line)}</li>" for line in protocol.get("text", []))
             + "</ol>" + kv_table([
                 ("Seed", num(protocol.get("seed"))),
                 ("Bootstrap resamples", num(protocol.get("bootstrap"))),
                 ("Interval level", num(protocol.get("level"), 2)),
                 ("Resampling unit", esc(protocol.get("resampling"))),
                 ("Correction", esc(protocol.get("correction"))),
                 ("Metrics requested",
                  esc(", ".join(protocol.get("metrics_requested") or [])))]))
    signatures = doc.get("signatures") or {}
    sig_table = table(
        ("Dataset", "Key", "Family", "Signature", "Hash"),
        [(esc(ds), esc(k), esc(v.get("family")), f"<code>{esc(v.get('signature'))}</code>",
          f"<code>{esc(v.get('signature_hash'))}</code>")
         for ds, keys in signatures.items() for k, v in keys.items()])
    versions = doc.get("versions") or {}
    version_table = kv_table((k, esc(v) if v is not None else "not installed")
                           for k, v in versions.items())
    script = ""
    if plotlyjs:
        # "</" inside the library would end the script element early.
        script = "<script>" + plotlyjs.replace("</", "<\\/") + "</script>"
    title = "RadConcord benchmark leaderboard"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title><style>{CSS}{_EXTRA_CSS}</style>{script}</head><body>"
        f"<h1>{esc(title)}</h1><p class=\"note\">Generated at "
        f"{esc(doc.get('generated_at'))} by {esc(doc.get('tool'))}. Every figure is in "
        "leaderboard.json beside this file.</p>"
        f"<nav><ol>{toc}</ol></nav><section id=\"protocol\"><h2>Protocol</h2>{proto}</section>"
        + "".join(_dataset(i, ds, draw) for i, ds in enumerate(datasets))
        + f"<section id=\"signatures\"><h2>Metric signatures</h2>{sig_table}</section>"
        f"<section id=\"versions\"><h2>Versions</h2>{version_table}"
        f"<p class=\"note\"><code>{esc(json.dumps(doc.get('command')))}</code></p></section>"
        "<footer>Reported figures come from the papers named beside them and never enter a "
        "rank; n/a rows say why a metric has no value on a dataset.</footer></body></html>\n"
    )
