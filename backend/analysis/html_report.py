"""The report for the paper as one self-contained HTML string (pure: no database, no files).

:func:`render_html` takes the ``correlate`` JSON (:mod:`backend.analysis.report`) and the
study facts gathered by :mod:`backend.services.reports` and returns one HTML document with
inline CSS and inline figures, in this order: study design, raters and agreement, the human
ceiling, the metric table (tau with CIs and % of ceiling), the paired metric comparison,
system ranking, failure modes, metric settings and signatures, versions and input hashes.
Every section renders when its part of the JSON is absent (older ``correlate`` output, or a
study too small for it) and says why it is empty. Every text that comes from data (names,
descriptions, signatures, provenance) is HTML-escaped; figures come in as markup made by
plotly (SVG or a plotly div) and are inlined as is.

:func:`build_figures` makes the plotly figures (forest plot with the ceiling band, the
pairwise matrix, the systems plot) from the same JSON; exporting them is the caller's job.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Significance level that marks a cell of the paired matrix and of the randomization tests.
ALPHA = 0.05

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1100px;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;
margin-top:2em}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.sig{font-weight:bold;background:#fff3c4}.muted{color:#777}.note{color:#555;font-size:.9em}
code{font-size:.85em;word-break:break-all}figure{margin:1em 0}
figure svg{max-width:100%;height:auto}footer{margin-top:3em;color:#555;font-size:.85em;
border-top:1px solid #ccc;padding-top:.5em}
"""

SECTIONS = (
    ("design", "Study design"),
    ("raters", "Raters and agreement"),
    ("ceiling", "Human ceiling"),
    ("metrics", "Metrics against the radiologists"),
    ("pairwise", "Is metric A better than metric B?"),
    ("systems", "Systems ranked by metrics and by radiologists"),
    ("failure-modes", "Failure modes"),
    ("settings", "Metric settings and signatures"),
    ("provenance", "Versions and inputs"),
)


def _e(value: Any) -> str:  # noqa: ANN401 - any value shown as text
    """Escaped text of ``value`` (``None`` shows as a dash)."""
    if value is None:
        return "&ndash;"
    return html.escape(str(value), quote=True)


def _num(value: Any, digits: int = 3) -> str:  # noqa: ANN401 - number, None or text
    if value is None:
        return "&ndash;"
    if isinstance(value, bool):
        return _e(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "&ndash;" if not math.isfinite(value) else f"{value:.{digits}f}"
    return _e(value)


def _p(value: Any) -> str:  # noqa: ANN401 - p-value or None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return "&lt;0.001" if value < 0.001 else f"{value:.3f}"
    return "&ndash;"


def _ci(ci: Any) -> str:  # noqa: ANN401 - [lo, hi] or None
    if not isinstance(ci, Sequence) or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return "&ndash;"
    return f"[{_num(ci[0])}, {_num(ci[1])}]"


def _pct(value: Any) -> str:  # noqa: ANN401 - share (0..1+) or None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return f"{100 * value:.0f}%"
    return "&ndash;"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]],
           classes: Iterable[str] | None = None) -> str:
    """A table; ``header`` is plain text (escaped here), ``rows`` are ready HTML cells."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    cls_iter = iter(classes) if classes is not None else None
    for row in rows:
        cls = next(cls_iter, "") if cls_iter is not None else ""
        attr = f' class="{cls}"' if cls else ""
        body.append(f"<tr{attr}>" + "".join(_cell(c) for c in row) + "</tr>")
    if not body:
        return '<p class="muted">(none)</p>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _cell(content: str) -> str:
    # Cells holding a formatted number are right-aligned.
    stripped = content.replace("&ndash;", "").replace("&lt;", "").strip("[]%, .-0123456789")
    return f'<td class="num">{content}</td>' if not stripped else f"<td>{content}</td>"


def _kv(items: Iterable[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in items)
    return f"<table><tbody>{rows}</tbody></table>"


def _absent(text: str) -> str:
    return f'<p class="muted">{_e(text)}</p>'


def _figure(figures: Mapping[str, str], name: str, caption: str) -> str:
    markup = figures.get(name)
    if not markup:
        return ""
    return f"<figure>{markup}<figcaption class=\"note\">{_e(caption)}</figcaption></figure>"


# ------------------------------------------------------------------------------ sections


def _design(report: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    study = facts.get("study") or {}
    sources = study.get("sources") or {}
    assignment = study.get("assignment")
    if isinstance(assignment, Mapping):
        strategy = assignment.get("strategy", "recorded")
        details = {k: v for k, v in assignment.items() if k != "strategy"}
        assign_txt = _e(strategy) + (
            f' <code>{_e(json.dumps(details, sort_keys=True, default=str))}</code>'
            if details else "")
    elif assignment:
        assign_txt = _e(assignment)
    else:
        assign_txt = "not recorded (the default order is random, seeded)"
    items = [
        ("Study", _e(study.get("name", report.get("study")))),
        ("Description", _e(study.get("description") or "")),
        ("Origin", _e(study.get("kind") or "not recorded")),
        ("Status", _e(study.get("status"))),
        ("Rating scheme", _e(study.get("scheme"))),
        ("Pairs in the study", _num(study.get("n_pairs", report.get("n_pairs_in_study")))),
        ("Rated pairs used", _num(report.get("n_pairs"))),
        ("Cases (reference reports)", _num(study.get("n_cases"))),
        ("Raters per pair", _num(study.get("raters_per_pair"))),
        ("Raters with counted ratings", _num(report.get("n_raters"))),
        ("Assignments (completed / total)",
         f"{_num(study.get('n_completed'))} / {_num(study.get('n_assignments'))}"),
        ("Assignment strategy", assign_txt),
        ("Assignment seed", _num(study.get("seed"))),
        ("Target", _e(report.get("target"))),
        ("Counts per pair", _counts_text(report)),
        ("Bootstrap", f"{_num(report.get('resamples'))} resamples by"
                      f" {_e(report.get('cluster', 'pair'))}, seed {_num(report.get('seed'))},"
                      f" level {_num(report.get('level'), 2)}"),
    ]
    src_rows = [(_e(name), _num(n)) for name, n in sources.items()]
    return _kv(items) + "<h3>Candidate sources</h3>" + _table(("Source", "Pairs"), src_rows)


def _counts_text(report: Mapping[str, Any]) -> str:
    """Which per-pair counts the correlations used: the raters' mean or adjudicated."""
    if report.get("counts") == "adjudicated":
        return _e(f"adjudicated: the consensus on {report.get('n_adjudicated')} pair(s), the"
                  " raters' mean elsewhere (agreement between raters on their own counts)")
    return _e("raw: the mean of the raters' counts")


def _raters(report: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    per_rater = report.get("per_rater") or {}
    rows = [
        (_e(name), _num(r.get("n_pairs")), _num(r.get("mean_errors"), 2),
         _num(r.get("kendall_vs_other_raters")), _num(r.get("n_shared_pairs")))
        for name, r in per_rater.items()
    ]
    out = _table(("Rater", "Pairs", "Mean errors", "tau-b vs other raters' mean",
                  "Shared pairs"), rows)
    agreement = facts.get("agreement") or {}
    arows = agreement.get("rows")
    if arows is None and report.get("agreement"):
        ag = report["agreement"]
        arows = [{"scope": "total", **(ag.get("total") or {})}] + [
            {"scope": k, **v} for k, v in (ag.get("per_category") or {}).items()]
        arows = [{**r, "alpha_interval": r.get("krippendorff_alpha_interval"),
                  "alpha_ratio": r.get("krippendorff_alpha_ratio")} for r in arows]
    names = {k: v.get("name", "") for k, v in (report.get("per_category") or {}).items()}
    if arows:
        out += "<h3>Inter-rater agreement</h3>" + _table(
            ("Scope", "Krippendorff alpha (interval)", "alpha (ratio)", "ICC(2,1)", "ICC(2,k)",
             "k", "ICC pairs", "Pairs with >= 2 raters"),
            [(_e(r.get("scope")) + (f" {_e(names[r['scope']])}" if r.get("scope") in names
                                    else ""),
              _num(r.get("alpha_interval")), _num(r.get("alpha_ratio")), _num(r.get("icc2_1")),
              _num(r.get("icc2_k")), _num(r.get("icc_k")), _num(r.get("icc_n_pairs")),
              _num(r.get("n_pairs_pairable"))) for r in arows],
        )
    else:
        out += _absent("No agreement statistics (fewer than two raters share a pair).")
    return out


def _ceiling(report: Mapping[str, Any]) -> str:
    ceiling = report.get("ceiling")
    if not ceiling:
        return _absent(
            f"Not available: the human ceiling needs >= 3 raters (this study has"
            f" {report.get('n_raters', 'an unknown number of')})."
        )
    items = [
        ("Kendall tau-b (mean of leave-one-rater-out)", _num(ceiling.get("kendall_tau_b"))),
        ("95% CI", _ci(ceiling.get("kendall_ci95"))),
        ("Spearman", _num(ceiling.get("spearman"))),
        ("Spearman 95% CI", _ci(ceiling.get("spearman_ci95"))),
        ("Raters", _num(ceiling.get("n_raters"))),
        ("Resampling unit", _e(ceiling.get("unit"))),
    ]
    out = ('<p class="note">Each rater\'s error counts against the mean of the other raters,'
           " with the metrics' statistic; the ceiling is the mean over raters.</p>")
    out += _kv(items)
    per_rater = ceiling.get("per_rater") or {}
    spear = ceiling.get("per_rater_spearman") or {}
    if per_rater:
        out += "<h3>Per rater</h3>" + _table(
            ("Rater", "tau-b vs others", "Spearman vs others"),
            [(_e(k), _num(v), _num(spear.get(k))) for k, v in per_rater.items()])
    per_cat = ceiling.get("per_category") or {}
    if per_cat:
        names = {k: v.get("name", "") for k, v in (report.get("per_category") or {}).items()}
        out += "<h3>Per category</h3>" + _table(
            ("Category", "tau-b"),
            [(f"{_e(k)} {_e(names.get(k, ''))}", _num(v)) for k, v in per_cat.items()])
    return out


def _sorted_metrics(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    metrics = report.get("metrics") or {}

    def key(item: tuple[str, Mapping[str, Any]]) -> tuple[float, str]:
        tau = item[1].get("kendall_tau_b")
        return (-(tau if isinstance(tau, (int, float)) else -2.0), item[0])

    return sorted(metrics.items(), key=key)


def _metric_name(key: str, m: Mapping[str, Any]) -> str:
    """The key, marked when its values were imported from a file (computed elsewhere)."""
    return _e(key) + (' <span class="muted">(imported)</span>' if m.get("imported") else "")


def _imported(items: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Where each imported key's values came from (``import-scores``)."""
    rows = [(_e(k), _e(imp.get("description") or None), _e(imp.get("source") or None),
             _e(imp.get("file_name")), f"<code>{_e(imp.get('file_sha256'))}</code>",
             _num(imp.get("n_pairs")), _num(imp.get("n_missing")),
             f"{_e(imp.get('imported_at'))} by {_e(imp.get('imported_by'))}")
            for k, m in items if (imp := m.get("imported"))]
    if not rows:
        return ""
    return ("<h3>Imported scores</h3><p class=\"note\">Values computed elsewhere and imported"
            " from a file; the direction is the one given at import.</p>" + _table(
                ("Metric", "Description", "Source", "File", "File sha256", "Pairs with a value",
                 "Missing", "Imported"), rows))


def _metrics(report: Mapping[str, Any], figures: Mapping[str, str]) -> str:
    items = _sorted_metrics(report)
    if not items:
        return _absent("No metric scores on this study.")
    has_pct = any("pct_of_ceiling" in m for _, m in items)
    header = ["Metric", "Family", "n", "Kendall tau-b", "95% CI", "Spearman", "95% CI"]
    if has_pct:
        header.append("% of ceiling")
    rows = []
    for key, m in items:
        row = [_metric_name(key, m), _e(m.get("family")), _num(m.get("n")),
               _num(m.get("kendall_tau_b")),
               _ci(m.get("kendall_ci95")), _num(m.get("spearman")), _ci(m.get("spearman_ci95"))]
        if has_pct:
            row.append(_pct(m.get("pct_of_ceiling")))
        rows.append(row)
    out = ('<p class="note">Metrics are oriented so that higher means better and the'
           " radiologists' error count is negated: a positive tau means agreement.</p>")
    out += _table(header, rows)
    if not has_pct:
        out += _absent("% of ceiling: not in this correlate output.")
    out += _figure(figures, "forest", "Kendall tau-b with 95% CI per metric; the band is the"
                                      " human ceiling's CI when available.")
    return out


def _pairwise(report: Mapping[str, Any], figures: Mapping[str, str]) -> str:
    pw = report.get("pairwise")
    if not pw or not pw.get("pairs"):
        return _absent("Not available in this correlate output (it needs at least two metrics).")
    pairs = pw["pairs"]
    rows, classes = [], []
    for name, v in pairs.items():
        a, _, b = name.partition("|")
        p_adj = v.get("p_adjusted")
        sig = isinstance(p_adj, (int, float)) and p_adj < ALPHA
        rows.append((_e(a), _e(b), _num(v.get("tau_diff")), _ci(v.get("ci95")), _p(v.get("p")),
                     _p(p_adj), _p(v.get("williams_p"))))
        classes.append("sig" if sig else "")
    out = (f'<p class="note">Paired bootstrap of tau(A) - tau(B) over the same resamples'
           f" ({_num(pw.get('resamples'))} resamples by {_e(pw.get('unit'))}), two-sided p,"
           f" {_e(pw.get('correction'))} correction over the matrix; highlighted rows have"
           f" adjusted p &lt; {ALPHA}. The Williams column is the Williams/Steiger test for"
           " dependent correlations, where it applies.</p>")
    out += _table(("Metric A", "Metric B", "tau(A) - tau(B)", "95% CI", "p", "p adjusted",
                   "Williams p"), rows, classes)
    out += _figure(figures, "pairwise", "tau(row) - tau(column); * marks adjusted p < 0.05.")
    return out


def _systems(report: Mapping[str, Any], figures: Mapping[str, str]) -> str:
    sy = report.get("systems")
    if not sy or not sy.get("sources"):
        per_source = report.get("per_source") or {}
        out = _absent("System ranking is not in this correlate output; mean errors per source:")
        return out + _table(("Source", "Rated pairs", "Mean errors"), [
            (_e(k), _num(v.get("n_pairs")), _num(v.get("mean_errors"), 2))
            for k, v in per_source.items()])
    sources = sy["sources"]
    keys = sorted({k for v in sources.values() for k in (v.get("metrics") or {})})
    rows = []
    for src, v in sources.items():
        row = [_e(src), _num(v.get("n")), _num(v.get("human_mean"), 2), _ci(v.get("human_ci95"))]
        for k in keys:
            mm = (v.get("metrics") or {}).get(k) or {}
            row.append(_num(mm.get("mean")) + " " + _ci(mm.get("ci95")))
        rows.append(row)
    out = "<h3>Means per source</h3>" + _table(
        ["Source", "n", "Mean errors", "95% CI"] + keys, rows)
    out += ("<p>Radiologists' order (fewest errors first): "
            + " &gt; ".join(_e(s) for s in sy.get("human_order") or []) + "</p>")
    ranking = sy.get("ranking") or {}
    out += "<h3>Ranking by each metric</h3>" + _table(
        ("Metric", "System-level Kendall tau vs radiologists", "Metric's order"),
        [(_e(k), _num(v.get("kendall_tau")), " &gt; ".join(_e(s) for s in v.get("metric_order")
                                                             or []))
         for k, v in ranking.items()])
    rand = sy.get("randomization") or {}
    rrows, classes = [], []
    for pair, per_key in rand.items():
        a, _, b = pair.partition("|")
        for k, v in (per_key or {}).items():
            p = v.get("p")
            rrows.append((_e(a), _e(b), _e(k), _num(v.get("diff")), _p(p), _num(v.get("n_pairs"))))
            classes.append("sig" if isinstance(p, (int, float)) and p < ALPHA else "")
    out += (f"<h3>Paired approximate randomization tests</h3><p class=\"note\">"
            f"{_num(sy.get('permutations'))} permutations on pairs with the same reference;"
            f" highlighted: p &lt; {ALPHA} (uncorrected). Corpus-level metrics:"
            f" {_e(str(sy.get('corpus_level') or 'not stated').rstrip('.'))}.</p>")
    out += _table(("Source A", "Source B", "Metric", "Mean diff (A - B)", "p", "Pairs"),
                  rrows, classes)
    out += _figure(figures, "systems", "Mean radiologist errors per source with 95% CI.")
    return out


def _failure_modes(report: Mapping[str, Any]) -> str:
    fm = report.get("failure_modes")
    if not fm or not fm.get("means"):
        return _absent("Not available in this correlate output.")
    names = {k: v.get("name", "") for k, v in (report.get("per_category") or {}).items()}
    cats = [c for c in ("1", "2", "3", "4", "5", "6", "total")
            if any(c in row for row in fm["means"].values())]
    header = ["Source", "Rated pairs"] + [f"{c} {names.get(c, '')}".strip() for c in cats]
    rows = [[_e(src), _num(row.get("n"))] + [_num(row.get(c), 2) for c in cats]
            for src, row in fm["means"].items()]
    out = "<h3>Mean errors per source and category</h3>" + _table(header, rows)
    found = [t for t in fm.get("tests") or [] if t.get("reject")]
    out += (f"<h3>Differences found</h3><p class=\"note\">One-sided {_e(fm.get('test'))}"
            f" t-tests between sources per category, {_e(fm.get('correction'))} at FDR"
            f" {_num(fm.get('fdr'), 2)}.</p>")
    if found:
        out += _table(("Category", "More errors", "Fewer errors", "Means", "p", "p adjusted"), [
            (_e(f"{t.get('category')} {names.get(str(t.get('category')), '')}".strip()),
             _e(t.get("greater")), _e(t.get("less")),
             f"{_num(t.get('mean_greater'), 2)} vs {_num(t.get('mean_less'), 2)}",
             _p(t.get("p")), _p(t.get("p_adjusted"))) for t in found])
    else:
        out += _absent("No difference between sources at this false discovery rate.")
    return out


def _settings(report: Mapping[str, Any]) -> str:
    items = sorted((report.get("metrics") or {}).items())
    out = _table(
        ("Metric", "Family", "Direction", "Signature (settings)", "Signature hash",
         "Signatures seen"),
        [(_metric_name(k, m), _e(m.get("family")),
          "higher is better" if m.get("higher_is_better") else "lower is better",
          f"<code>{_e(m.get('signature'))}</code>", f"<code>{_e(m.get('signature_hash'))}</code>",
          _num(m.get("n_signatures"))) for k, m in items])
    out += _imported(items)
    refit = report.get("radcliq_refit") or {}
    if refit.get("available"):
        out += (f"<p>RadCliQ refit on this study: cross-validated Kendall tau-b"
                f" {_num(refit.get('cv_kendall_tau_b'))} ({_e(refit.get('cv_scheme'))},"
                f" n={_num(refit.get('n'))}).</p>")
    elif refit:
        out += _absent(f"RadCliQ refit: not available ({refit.get('reason', 'no reason given')}).")
    published = [e for e in (report.get("published") or {}).get("entries") or []
                 if e.get("ours") is not None]
    if published:
        out += "<h3>Published values (ReXVal) beside ours</h3>" + _table(
            ("Paper", "Metric", "Our key", "Published tau-b", "Ours"),
            [(_e(e.get("paper")), _e(e.get("metric")), _e(e.get("key")),
              _num(e.get("kendall_tau_b")), _num(e.get("ours"))) for e in published])
    return out


def _provenance(facts: Mapping[str, Any]) -> str:
    versions = facts.get("versions") or {}
    out = "<h3>Versions</h3>" + _kv(
        (k, _e(v) if v is not None else "not installed") for k, v in versions.items())
    inputs = facts.get("inputs") or []
    out += "<h3>Inputs (sha256, from the study's provenance)</h3>"
    out += _table(("Input", "sha256"), [(_e(i.get("where")), f"<code>{_e(i.get('sha256'))}</code>")
                                        for i in inputs]) if inputs else _absent(
        "The study's provenance records no input hashes.")
    return out


def render_html(
    report: Mapping[str, Any],
    facts: Mapping[str, Any],
    *,
    figures: Mapping[str, str] | None = None,
    figure_format: str = "svg",
    figure_note: str = "",
    plotlyjs: str | None = None,
) -> str:
    """The whole report as one HTML document.

    Args:
        report: The ``correlate`` JSON; the ``ceiling``, ``pairwise``, ``systems`` and
            ``pct_of_ceiling`` parts may be absent.
        facts: ``study`` (design counts, sources, provenance ``kind`` and ``assignment``),
            ``agreement`` (``raters``, ``rows``), ``versions``, ``inputs`` (``where``,
            ``sha256``), ``generated_at``; all optional.
        figures: ``name -> markup`` (``forest``, ``pairwise``, ``systems``) made by plotly:
            inline SVG, or plotly divs when ``figure_format`` is ``"html"``.
        figure_format: ``"svg"`` or ``"html"``.
        figure_note: Shown in the footer (why figures are interactive HTML).
        plotlyjs: plotly.js source inlined once in the head for ``"html"`` figures.

    Returns:
        The document; it loads nothing from another host.
    """
    figures = figures or {}
    title = f"RadConcord report: {report.get('study', (facts.get('study') or {}).get('name'))}"
    bodies = {
        "design": _design(report, facts),
        "raters": _raters(report, facts),
        "ceiling": _ceiling(report),
        "metrics": _metrics(report, figures),
        "pairwise": _pairwise(report, figures),
        "systems": _systems(report, figures),
        "failure-modes": _failure_modes(report),
        "settings": _settings(report),
        "provenance": _provenance(facts),
    }
    toc = "".join(f'<li><a href="#{sid}">{_e(name)}</a></li>' for sid, name in SECTIONS)
    sections = "".join(f'<section id="{sid}"><h2>{_e(name)}</h2>{bodies[sid]}</section>'
                       for sid, name in SECTIONS)
    script = ""
    if figure_format == "html" and plotlyjs:
        # "</" inside the library would end the script element early.
        safe_js = plotlyjs.replace("</", "<\\/")
        script = f"<script>{safe_js}</script>"
    fig_txt = ("Figures: static SVG (plotly static export)." if figure_format == "svg"
               else "Figures: interactive plotly HTML (plotly.js inlined).")
    app = (facts.get("versions") or {}).get("radconcord")
    footer = (f"<footer>Generated by RadConcord {_e(app)}"
              f" at {_e(facts.get('generated_at'))}. {_e(fig_txt)}"
              + (f" {_e(figure_note)}." if figure_note else "") + "</footer>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style>{script}</head><body>"
        f"<h1>{_e(title)}</h1><p class=\"note\">Target: {_e(report.get('target'))} errors;"
        f" {_num(report.get('n_pairs'))} rated pairs.</p><nav><ol>{toc}</ol></nav>"
        f"{sections}{footer}</body></html>\n"
    )


# ------------------------------------------------------------------------------ figures


def build_figures(report: Mapping[str, Any]) -> dict[str, Any]:
    """Plotly figures of the report: ``forest`` always (when there are metrics),
    ``pairwise`` and ``systems`` when their sections are present.

    Args:
        report: The ``correlate`` JSON.

    Returns:
        ``name -> plotly.graph_objects.Figure``.
    """
    import plotly.graph_objects as go

    figs: dict[str, Any] = {}
    items = [(k, m) for k, m in _sorted_metrics(report)
             if isinstance(m.get("kendall_tau_b"), (int, float))]
    if items:
        keys = [k for k, _ in items][::-1]
        tau = [m["kendall_tau_b"] for _, m in items][::-1]
        cis = [m.get("kendall_ci95") or [None, None] for _, m in items][::-1]
        plus = [(hi - t) if hi is not None else 0 for t, (_, hi) in zip(tau, cis, strict=True)]
        minus = [(t - lo) if lo is not None else 0 for t, (lo, _) in zip(tau, cis, strict=True)]
        fig = go.Figure(go.Scatter(
            x=tau, y=keys, mode="markers", marker={"size": 8, "color": "#1f77b4"},
            error_x={"type": "data", "array": plus, "arrayminus": minus}, name="metric"))
        ceiling = report.get("ceiling") or {}
        c_tau = ceiling.get("kendall_tau_b")
        if isinstance(c_tau, (int, float)):
            lo, hi = (ceiling.get("kendall_ci95") or [None, None])
            if lo is not None and hi is not None:
                fig.add_vrect(x0=lo, x1=hi, fillcolor="#999", opacity=0.2, line_width=0)
            fig.add_vline(x=c_tau, line_dash="dash", line_color="#555",
                          annotation_text="human ceiling")
        fig.update_layout(title="Kendall tau-b vs radiologists", xaxis_title="Kendall tau-b",
                          height=max(300, 28 * len(keys) + 120), template="plotly_white",
                          margin={"l": 160, "r": 30, "t": 50, "b": 50}, showlegend=False)
        figs["forest"] = fig
    pw = report.get("pairwise") or {}
    pairs = pw.get("pairs") or {}
    if pairs:
        names = [k for k, _ in _sorted_metrics(report)]
        seen = {n for p in pairs for n in p.split("|")}
        names = [n for n in names if n in seen] + sorted(seen - set(names))
        idx = {n: i for i, n in enumerate(names)}
        z: list[list[float | None]] = [[None] * len(names) for _ in names]
        text = [[""] * len(names) for _ in names]
        for p, v in pairs.items():
            a, _, b = p.partition("|")
            d = v.get("tau_diff")
            if d is None:
                continue
            star = "*" if isinstance(v.get("p_adjusted"), (int, float)) and \
                v["p_adjusted"] < ALPHA else ""
            z[idx[a]][idx[b]], z[idx[b]][idx[a]] = d, -d
            text[idx[a]][idx[b]] = f"{d:+.2f}{star}"
            text[idx[b]][idx[a]] = f"{-d:+.2f}{star}"
        fig = go.Figure(go.Heatmap(z=z, x=names, y=names, text=text, texttemplate="%{text}",
                                   colorscale="RdBu", zmid=0, colorbar={"title": "tau diff"}))
        fig.update_layout(title="tau(row) - tau(column)", template="plotly_white",
                          height=max(350, 30 * len(names) + 150),
                          yaxis={"autorange": "reversed"})
        figs["pairwise"] = fig
    sy = report.get("systems") or {}
    sources = sy.get("sources") or {}
    if sources:
        srcs = list(sources)
        means = [sources[s].get("human_mean") for s in srcs]
        cis = [sources[s].get("human_ci95") or [None, None] for s in srcs]
        plus = [(c[1] - m) if (m is not None and c[1] is not None) else 0
                for m, c in zip(means, cis, strict=True)]
        minus = [(m - c[0]) if (m is not None and c[0] is not None) else 0
                 for m, c in zip(means, cis, strict=True)]
        fig = go.Figure(go.Bar(x=srcs, y=means, error_y={"type": "data", "array": plus,
                                                          "arrayminus": minus}))
        fig.update_layout(title="Mean radiologist errors per source", yaxis_title="errors",
                          template="plotly_white", height=380)
        figs["systems"] = fig
    return figs
