"""The report for the paper as one self-contained HTML string (pure: no database, no files).

:func:`render_html` takes the ``correlate`` JSON (:mod:`backend.analysis.report`) and the
study facts gathered by :mod:`backend.services.evaluation.reports` and returns one HTML document
with
inline CSS and inline figures, in this order: study design, raters and agreement, the human
ceiling, the metric table (tau with CIs and % of ceiling), the paired metric comparison,
system ranking, failure modes, metric settings and signatures, versions and input hashes.
Every section renders when its part of the JSON is absent (older ``correlate`` output, or a
study too small for it) and says why it is empty. Every text that comes from data (names,
descriptions, signatures, provenance) is HTML-escaped; figures come in as markup made by
plotly (SVG or a plotly div) and are inlined as is.

The figures (forest plot with the ceiling band, the paired-test matrix, the systems plot)
are drawn by :func:`backend.figures.correlation.report_figures`, the same drawings the
dashboard shows; exporting them is the caller's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from radconcord.backend.analysis.html_parts import (
    CSS,
    absent,
    esc,
    figure,
    interval,
    kv_table,
    num,
    p_value,
    percent,
    table,
)
from radconcord.backend.analysis.reliability import MIN_PAIRS, judge

#: Significance level that marks a cell of the paired matrix and of the randomization tests.
ALPHA = 0.05

SECTIONS = (
    ("design", "Study design"),
    ("raters", "Raters and agreement"),
    ("ceiling", "Human ceiling"),
    ("metrics", "Metrics against the radiologists"),
    ("paired-tests", "Is metric A better than metric B?"),
    ("systems", "Systems ranked by metrics and by radiologists"),
    ("failure-modes", "Failure modes"),
    ("settings", "Metric settings and signatures"),
    ("provenance", "Versions and inputs"),
)


# ------------------------------------------------------------------------------ sections


def _design(report: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    study = facts.get("study") or {}
    sources = study.get("sources") or {}
    assignment = study.get("assignment")
    if isinstance(assignment, Mapping):
        strategy = assignment.get("strategy", "recorded")
        details = {k: v for k, v in assignment.items() if k != "strategy"}
        assign_txt = esc(strategy) + (
            f' <code>{esc(json.dumps(details, sort_keys=True, default=str))}</code>'
            if details else "")
    elif assignment:
        assign_txt = esc(assignment)
    else:
        assign_txt = "not recorded (the default order is random, seeded)"
    items = [
        ("Study", esc(study.get("name", report.get("study")))),
        ("Description", esc(study.get("description") or "")),
        ("Origin", esc(study.get("kind") or "not recorded")),
        ("Status", esc(study.get("status"))),
        ("Rating scheme", esc(study.get("scheme"))),
        ("Pairs in the study", num(study.get("n_pairs", report.get("n_pairs_in_study")))),
        ("Rated pairs used", num(report.get("n_pairs"))),
        ("Cases (reference reports)", num(study.get("n_cases"))),
        ("Raters per pair", num(study.get("raters_per_pair"))),
        ("Raters with counted ratings", num(report.get("n_raters"))),
        ("Assignments (completed / total)",
         f"{num(study.get('n_completed'))} / {num(study.get('n_assignments'))}"),
        ("Assignment strategy", assign_txt),
        ("Assignment seed", num(study.get("seed"))),
        ("Target", esc(report.get("target"))),
        ("Counts per pair", _counts_text(report)),
        ("Bootstrap", f"{num(report.get('resamples'))} resamples by"
                      f" {esc(report.get('cluster', 'pair'))}, seed {num(report.get('seed'))},"
                      f" level {num(report.get('level'), 2)}"),
    ]
    note = study.get("ratings_note")
    if note:
        # Constructed (not radiologists') ratings: said first, and again in the table.
        items.insert(1, ("Ratings", "<strong>" + esc(note) + "</strong>"))
    src_rows = [(esc(name), num(n)) for name, n in sources.items()]
    banner = (f'<p style="background:#fff3cd;border:1px solid #e0c36b;padding:.5em">'
              f'<strong>{esc(note)}</strong></p>' if note else "")
    return (banner + kv_table(items) + "<h3>Candidate sources</h3>"
            + table(("Source", "Pairs"), src_rows))


def _counts_text(report: Mapping[str, Any]) -> str:
    """Which per-pair counts the correlations used: the raters' mean or adjudicated."""
    if report.get("counts") == "adjudicated":
        return esc(f"adjudicated: the consensus on {report.get('n_adjudicated')} pair(s), the"
                  " raters' mean elsewhere (agreement between raters on their own counts)")
    return esc("raw: the mean of the raters' counts")


def _raters(report: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    per_rater = report.get("per_rater") or {}
    rows = [
        (esc(name), num(r.get("n_pairs")), num(r.get("mean_errors"), 2),
         num(r.get("kendall_vs_other_raters")), num(r.get("n_shared_pairs")))
        for name, r in per_rater.items()
    ]
    out = table(("Rater", "Pairs", "Mean errors", "tau-b vs other raters' mean",
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
        out += "<h3>Inter-rater agreement</h3>" + table(
            ("Scope", "Krippendorff alpha (interval)", "alpha (ratio)", "ICC(2,1)", "ICC(2,k)",
             "k", "ICC pairs", "Pairs with >= 2 raters"),
            [(esc(r.get("scope")) + (f" {esc(names[r['scope']])}" if r.get("scope") in names
                                    else ""),
              num(r.get("alpha_interval")), num(r.get("alpha_ratio")), num(r.get("icc2_1")),
              num(r.get("icc2_k")), num(r.get("icc_k")), num(r.get("icc_n_pairs")),
              num(r.get("n_pairs_pairable"))) for r in arows],
        )
    else:
        out += absent("No agreement statistics (fewer than two raters share a pair).")
    return out


def _judged(value: Any, n: Any, digits: int = 3) -> str:  # noqa: ANN401 - JSON values
    """A statistic from ``n`` pairs as the dashboard shows it: the number, or "n too small"
    / "n/a (no variance)" greyed (``analysis.reliability``)."""
    j = judge(value, n)
    return num(j.value, digits) if j.shown else f'<span class="muted">{esc(j.text())}</span>'


def _ceiling(report: Mapping[str, Any]) -> str:
    ceiling = report.get("ceiling")
    if not ceiling:
        return absent(
            f"Not available: the human ceiling needs >= 3 raters (this study has"
            f" {report.get('n_raters', 'an unknown number of')})."
        )
    items = [
        ("Kendall tau-b (mean of leave-one-rater-out)", num(ceiling.get("kendall_tau_b"))),
        ("95% CI", interval(ceiling.get("kendall_ci95"))),
        ("Spearman", num(ceiling.get("spearman"))),
        ("Spearman 95% CI", interval(ceiling.get("spearman_ci95"))),
        ("Raters", num(ceiling.get("n_raters"))),
        ("Resampling unit", esc(ceiling.get("unit"))),
    ]
    out = ('<p class="note">Each rater\'s error counts against the mean of the other raters,'
           " with the metrics' statistic; the ceiling is the mean over raters.</p>")
    out += kv_table(items)
    per_rater = ceiling.get("per_rater") or {}
    spear = ceiling.get("per_rater_spearman") or {}
    # Each rater's n is the pairs they share with the others' mean (older output: the study's).
    shared = ceiling.get("n_shared_pairs") or {}
    if per_rater:
        rows = []
        for k, v in per_rater.items():
            n = shared.get(k, report.get("n_pairs"))
            rows.append((esc(k), num(n), _judged(v, n), _judged(spear.get(k), n)))
        out += "<h3>Per rater</h3>" + table(
            ("Rater", "n", "tau-b vs others", "Spearman vs others"), rows)
    per_cat = ceiling.get("per_category") or {}
    if per_cat:
        names = {k: v.get("name", "") for k, v in (report.get("per_category") or {}).items()}
        out += "<h3>Per category</h3>" + table(
            ("Category", "tau-b"),
            [(f"{esc(k)} {esc(names.get(k, ''))}", num(v)) for k, v in per_cat.items()])
    return out


def _sorted_metrics(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    metrics = report.get("metrics") or {}

    def key(item: tuple[str, Mapping[str, Any]]) -> tuple[float, str]:
        tau = item[1].get("kendall_tau_b")
        return (-(tau if isinstance(tau, (int, float)) else -2.0), item[0])

    return sorted(metrics.items(), key=key)


def _metric_name(key: str, m: Mapping[str, Any]) -> str:
    """The key, marked when its values were imported from a file (computed elsewhere)."""
    return esc(key) + (' <span class="muted">(imported)</span>' if m.get("imported") else "")


def _imported(items: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Where each imported key's values came from (``import-scores``)."""
    rows = [(esc(k), esc(imp.get("description") or None), esc(imp.get("source") or None),
             esc(imp.get("file_name")), f"<code>{esc(imp.get('file_sha256'))}</code>",
             num(imp.get("n_pairs")), num(imp.get("n_missing")),
             f"{esc(imp.get('imported_at'))} by {esc(imp.get('imported_by'))}")
            for k, m in items if (imp := m.get("imported"))]
    if not rows:
        return ""
    return ("<h3>Imported scores</h3><p class=\"note\">Values computed elsewhere and imported"
            " from a file; the direction is the one given at import.</p>" + table(
                ("Metric", "Description", "Source", "File", "File sha256", "Pairs with a value",
                 "Missing", "Imported"), rows))


def _metrics(report: Mapping[str, Any], figures: Mapping[str, str]) -> str:
    items = _sorted_metrics(report)
    if not items:
        return absent("No metric scores on this study.")
    has_pct = any("pct_of_ceiling" in m for _, m in items)
    header = ["Metric", "Family", "n", "Kendall tau-b", "95% CI", "Spearman", "95% CI"]
    if has_pct:
        header.append("% of ceiling")
    rows = []
    for key, m in items:
        # The dashboard's rule (analysis.reliability): below the minimum n a tau is not shown
        # as a number, and an undefined one says why instead of vanishing.
        tau = judge(m.get("kendall_tau_b"), m.get("n"))
        rho = judge(m.get("spearman"), m.get("n"))
        row = [_metric_name(key, m), esc(m.get("family")), num(m.get("n")),
               num(tau.value) if tau.shown else esc(tau.text()),
               interval(m.get("kendall_ci95")) if tau.shown else "",
               num(rho.value) if rho.shown else esc(rho.text()),
               interval(m.get("spearman_ci95")) if rho.shown else ""]
        if has_pct:
            row.append(percent(m.get("pct_of_ceiling")) if tau.shown else "")
        rows.append(row)
    out = ('<p class="note">Metrics are oriented so that higher means better and the'
           " radiologists' error count is negated: a positive tau means agreement. A"
           f" correlation from fewer than {MIN_PAIRS} pairs reads \"n too small\".</p>")
    out += table(header, rows)
    if not has_pct:
        out += absent("% of ceiling: not in this correlate output.")
    out += figure(figures, "forest", "Kendall tau-b with 95% CI per metric; the band is the"
                                      " human ceiling's CI when available.")
    return out


def _paired_tests(report: Mapping[str, Any], figures: Mapping[str, str]) -> str:
    # ``paired_tests`` since this release; ``pairwise`` in older correlate output.
    pw = report.get("paired_tests", report.get("pairwise"))
    if not pw or not pw.get("pairs"):
        return absent("Not available in this correlate output (it needs at least two metrics).")
    pairs = pw["pairs"]
    rows, classes = [], []
    for name, v in pairs.items():
        a, _, b = name.partition("|")
        p_adj = v.get("p_adjusted")
        sig = isinstance(p_adj, (int, float)) and p_adj < ALPHA
        rows.append((esc(a), esc(b), num(v.get("tau_diff")), interval(v.get("ci95")),
                     p_value(v.get("p")),
                     p_value(p_adj), p_value(v.get("williams_p"))))
        classes.append("sig" if sig else "")
    out = (f'<p class="note">Paired bootstrap of tau(A) - tau(B) over the same resamples'
           f" ({num(pw.get('resamples'))} resamples by {esc(pw.get('unit'))}), two-sided p,"
           f" {esc(pw.get('correction'))} correction over the matrix; highlighted rows have"
           f" adjusted p &lt; {ALPHA}. The Williams column is the Williams/Steiger test for"
           " dependent correlations, where it applies.</p>")
    out += table(("Metric A", "Metric B", "tau(A) - tau(B)", "95% CI", "p", "p adjusted",
                   "Williams p"), rows, classes)
    out += figure(figures, "paired_tests", "tau(row) - tau(column); * marks adjusted p < 0.05.")
    return out


def _systems(report: Mapping[str, Any], figures: Mapping[str, str]) -> str:
    sy = report.get("systems")
    if not sy or not sy.get("sources"):
        per_source = report.get("per_source") or {}
        out = absent("System ranking is not in this correlate output; mean errors per source:")
        return out + table(("Source", "Rated pairs", "Mean errors"), [
            (esc(k), num(v.get("n_pairs")), num(v.get("mean_errors"), 2))
            for k, v in per_source.items()])
    sources = sy["sources"]
    keys = sorted({k for v in sources.values() for k in (v.get("metrics") or {})})
    rows = []
    for src, v in sources.items():
        row = [esc(src), num(v.get("n")), num(v.get("human_mean"), 2),
               interval(v.get("human_ci95"))]
        for k in keys:
            mm = (v.get("metrics") or {}).get(k) or {}
            row.append(num(mm.get("mean")) + " " + interval(mm.get("ci95")))
        rows.append(row)
    out = "<h3>Means per source</h3>" + table(
        ["Source", "n", "Mean errors", "95% CI"] + keys, rows)
    out += ("<p>Radiologists' order (fewest errors first): "
            + " &gt; ".join(esc(s) for s in sy.get("human_order") or []) + "</p>")
    ranking = sy.get("ranking") or {}
    out += "<h3>Ranking by each metric</h3>" + table(
        ("Metric", "System-level Kendall tau vs radiologists", "Metric's order"),
        [(esc(k), num(v.get("kendall_tau")), " &gt; ".join(esc(s) for s in v.get("metric_order")
                                                             or []))
         for k, v in ranking.items()])
    rand = sy.get("randomization") or {}
    rrows, classes = [], []
    for pair, per_key in rand.items():
        a, _, b = pair.partition("|")
        for k, v in (per_key or {}).items():
            p = v.get("p")
            # A test from fewer than MIN_PAIRS matched pairs is "n too small", not a p.
            ok = judge(p, v.get("n_pairs")).shown
            rrows.append((esc(a), esc(b), esc(k),
                          num(v.get("diff")) if ok else _judged(v.get("diff"), v.get("n_pairs")),
                          p_value(p) if ok else _judged(p, v.get("n_pairs")),
                          num(v.get("n_pairs"))))
            classes.append("sig" if ok and isinstance(p, (int, float)) and p < ALPHA else "")
    out += (f"<h3>Paired approximate randomization tests</h3><p class=\"note\">"
            f"{num(sy.get('permutations'))} permutations on pairs with the same reference;"
            f" highlighted: p &lt; {ALPHA} (uncorrected); a test from fewer than"
            f" {MIN_PAIRS} pairs reads \"n too small\". Corpus-level metrics:"
            f" {esc(str(sy.get('corpus_level') or 'not stated').rstrip('.'))}.</p>")
    out += table(("Source A", "Source B", "Metric", "Mean diff (A - B)", "p", "Pairs"),
                  rrows, classes)
    out += figure(figures, "systems", "Per source, best first by the radiologists: their"
                                       " mean errors and the best metric's mean, with 95% CI.")
    return out


def _failure_modes(report: Mapping[str, Any]) -> str:
    fm = report.get("failure_modes")
    if not fm or not fm.get("means"):
        return absent("Not available in this correlate output.")
    names = {k: v.get("name", "") for k, v in (report.get("per_category") or {}).items()}
    cats = [c for c in ("1", "2", "3", "4", "5", "6", "total")
            if any(c in row for row in fm["means"].values())]
    header = ["Source", "Rated pairs"] + [f"{c} {names.get(c, '')}".strip() for c in cats]
    rows = [[esc(src), num(row.get("n"))] + [num(row.get(c), 2) for c in cats]
            for src, row in fm["means"].items()]
    out = "<h3>Mean errors per source and category</h3>" + table(header, rows)
    found = [t for t in fm.get("tests") or [] if t.get("reject")]
    out += (f"<h3>Differences found</h3><p class=\"note\">One-sided {esc(fm.get('test'))}"
            f" t-tests between sources per category, {esc(fm.get('correction'))} at FDR"
            f" {num(fm.get('fdr'), 2)}.</p>")
    if found:
        out += table(("Category", "More errors", "Fewer errors", "Means", "p", "p adjusted"), [
            (esc(f"{t.get('category')} {names.get(str(t.get('category')), '')}".strip()),
             esc(t.get("greater")), esc(t.get("less")),
             f"{num(t.get('mean_greater'), 2)} vs {num(t.get('mean_less'), 2)}",
             p_value(t.get("p")), p_value(t.get("p_adjusted"))) for t in found])
    else:
        out += absent("No difference between sources at this false discovery rate.")
    return out


def _settings(report: Mapping[str, Any], study: Mapping[str, Any]) -> str:
    items = sorted((report.get("metrics") or {}).items())
    out = table(
        ("Metric", "Family", "Direction", "Signature (settings)", "Signature hash",
         "Signatures seen"),
        [(_metric_name(k, m), esc(m.get("family")),
          "higher is better" if m.get("higher_is_better") else "lower is better",
          f"<code>{esc(m.get('signature'))}</code>", f"<code>{esc(m.get('signature_hash'))}</code>",
          num(m.get("n_signatures"))) for k, m in items])
    out += _imported(items)
    refit = report.get("radcliq_refit") or {}
    if refit.get("available"):
        taus, sizes = refit.get("cv_fold_kendall_tau_b") or [], refit.get("cv_fold_n") or []
        folds = (", ".join(f"{_judged(tau, size)} (n={num(size)})"
                           for tau, size in zip(taus, sizes, strict=False))
                 if len(sizes) == len(taus) and taus else "")
        out += (f"<p>RadCliQ refit on this study: cross-validated Kendall tau-b"
                f" {_judged(refit.get('cv_kendall_tau_b'), refit.get('n'))}"
                f" ({esc(refit.get('cv_scheme'))}, n={num(refit.get('n'))})"
                + (f"; per fold tau-b: {folds}" if folds else "") + ".</p>")
    elif refit:
        out += absent(f"RadCliQ refit: not available ({refit.get('reason', 'no reason given')}).")
    published = [e for e in (report.get("published") or {}).get("entries") or []
                 if e.get("ours") is not None]
    if published and study.get("kind") != "rexval":
        # The papers measured ReXVal; beside another study's tau the difference would be one
        # of datasets, not of metrics (issue 24).
        out += absent("Published values (ReXVal) are set beside ours only for a study imported"
                      " from ReXVal, the dataset the papers measured.")
    elif published:
        out += "<h3>Published values (ReXVal) beside ours</h3>" + table(
            ("Paper", "Metric", "Our key", "Published tau-b", "Ours"),
            [(esc(e.get("paper")), esc(e.get("metric")), esc(e.get("key")),
              num(e.get("kendall_tau_b")), num(e.get("ours"))) for e in published])
    return out


def _provenance(facts: Mapping[str, Any]) -> str:
    versions = facts.get("versions") or {}
    out = "<h3>Versions</h3>" + kv_table(
        (k, esc(v) if v is not None else "not installed") for k, v in versions.items())
    inputs = facts.get("inputs") or []
    out += "<h3>Inputs (sha256, from the study's provenance)</h3>"
    out += table(("Input", "sha256"), [(esc(i.get("where")), f"<code>{esc(i.get('sha256'))}</code>")
                                        for i in inputs]) if inputs else absent(
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
        report: The ``correlate`` JSON; the ``ceiling``, ``paired_tests`` (or ``pairwise``),
            ``systems`` and ``pct_of_ceiling`` parts may be absent.
        facts: ``study`` (design counts, sources, provenance ``kind`` and ``assignment``),
            ``agreement`` (``raters``, ``rows``), ``versions``, ``inputs`` (``where``,
            ``sha256``), ``generated_at``; all optional.
        figures: ``name -> markup`` (``forest``, ``paired_tests``, ``systems``) made by plotly:
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
        "paired-tests": _paired_tests(report, figures),
        "systems": _systems(report, figures),
        "failure-modes": _failure_modes(report),
        "settings": _settings(report, facts.get("study") or {}),
        "provenance": _provenance(facts),
    }
    toc = "".join(f'<li><a href="#{sid}">{esc(name)}</a></li>' for sid, name in SECTIONS)
    sections = "".join(f'<section id="{sid}"><h2>{esc(name)}</h2>{bodies[sid]}</section>'
                       for sid, name in SECTIONS)
    script = ""
    if figure_format == "html" and plotlyjs:
        # "</" inside the library would end the script element early.
        safe_js = plotlyjs.replace("</", "<\\/")
        script = f"<script>{safe_js}</script>"
    fig_txt = ("Figures: static SVG (plotly static export)." if figure_format == "svg"
               else "Figures: interactive plotly HTML (plotly.js inlined).")
    app = (facts.get("versions") or {}).get("radconcord")
    footer = (f"<footer>Generated by RadConcord {esc(app)}"
              f" at {esc(facts.get('generated_at'))}. {esc(fig_txt)}"
              + (f" {esc(figure_note)}." if figure_note else "") + "</footer>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title><style>{CSS}</style>{script}</head><body>"
        f"<h1>{esc(title)}</h1><p class=\"note\">Target: {esc(report.get('target'))} errors;"
        f" {num(report.get('n_pairs'))} rated pairs.</p><nav><ol>{toc}</ol></nav>"
        f"{sections}{footer}</body></html>\n"
    )
