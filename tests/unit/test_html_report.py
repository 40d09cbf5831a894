"""The pure HTML renderer of the paper report: sections, escaping, self-containment, figures.

Inputs are hand-written ``correlate`` JSON fragments (report.py layout plus the ceiling,
pairwise and systems sections of issue 11) and study facts.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from radconcord.backend.analysis import html_report
from radconcord.backend.analysis.correlation import CorrelationReport
from radconcord.backend.figures.correlation import report_figures

EVIL = "<script>alert(1)</script>"


class _Refs(HTMLParser):
    """Every src/href/data attribute of every tag, and the text of every <td>."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "data", "xlink:href", "action") and value:
                self.refs.append((tag, name, value))


def _external(html: str) -> list[tuple[str, str, str]]:
    parser = _Refs()
    parser.feed(html)
    return [r for r in parser.refs if r[2].lower().startswith(("http:", "https:", "//"))]


def _metric(tau, lo, hi, **extra):
    return {"kendall_tau_b": tau, "kendall_ci95": [lo, hi], "spearman": tau + 0.1,
            "spearman_ci95": [lo + 0.1, hi + 0.1], "higher_is_better": True,
            "signature": f"sig|{extra.pop('sig', 'x')}", "signature_hash": "abc123",
            "family": "fam", "n": 24, "n_signatures": 1, **extra}


def _full_report():
    return {
        "study": "s1", "target": "total", "n_pairs": 24, "n_pairs_in_study": 24, "n_raters": 3,
        "seed": 0, "resamples": 100, "cluster": "pair", "level": 0.95,
        "metrics": {
            "bleu4": _metric(0.25, 0.1, 0.4, pct_of_ceiling=0.5),
            "green": _metric(0.45, 0.3, 0.6, pct_of_ceiling=0.9, sig="model=<b>"),
        },
        "per_category": {"1": {"name": "False report of a finding", "metrics": {}}},
        "per_rater": {EVIL: {"n_pairs": 24, "mean_errors": 2.5,
                             "kendall_vs_other_raters": 0.61, "n_shared_pairs": 24}},
        "per_source": {"gen-a": {"n_pairs": 12, "mean_errors": 1.25}},
        "agreement": {"total": {"krippendorff_alpha_interval": 0.7}, "per_category": {}},
        "ceiling": {"kendall_tau_b": 0.5, "kendall_ci95": [0.4, 0.6], "spearman": 0.62,
                    "spearman_ci95": [0.5, 0.7], "per_rater": {"r1": 0.55, "r2": 0.45},
                    "per_rater_spearman": {"r1": 0.6, "r2": 0.5}, "per_category": {"1": 0.3},
                    "n_raters": 3, "unit": "pair"},
        "pairwise": {"unit": "case", "correction": "holm", "resamples": 100, "pairs": {
            "green|bleu4": {"tau_diff": 0.2, "ci95": [0.05, 0.35], "p": 0.004,
                            "p_adjusted": 0.008, "williams_p": 0.01}}},
        "systems": {
            "sources": {EVIL: {"n": 12, "human_mean": 1.5, "human_ci95": [1.0, 2.0],
                               "metrics": {"bleu4": {"mean": 0.3, "ci95": [0.2, 0.4]}}},
                        "gen-b": {"n": 12, "human_mean": 3.0, "human_ci95": [2.5, 3.5],
                                  "metrics": {"bleu4": {"mean": 0.1, "ci95": [0.0, 0.2]}}}},
            "ranking": {"bleu4": {"kendall_tau": 1.0, "metric_order": [EVIL, "gen-b"]}},
            "human_order": [EVIL, "gen-b"],
            "randomization": {f"{EVIL}|gen-b": {"bleu4": {"diff": 0.2, "p": 0.002,
                                                          "n_pairs": 12}}},
            "permutations": 1000, "corpus_level": "CIDEr: recomputed per permutation",
        },
        "failure_modes": {
            "sources": [EVIL, "gen-b"], "fdr": 0.05, "test": "welch",
            "correction": "benjamini-hochberg",
            "means": {EVIL: {"1": 0.5, "total": 1.5, "n": 12},
                      "gen-b": {"1": 1.5, "total": 3.0, "n": 12}},
            "tests": [{"category": "total", "greater": "gen-b", "less": EVIL,
                       "mean_greater": 3.0, "mean_less": 1.5, "p": 0.001, "p_adjusted": 0.002,
                       "reject": True}],
        },
        "radcliq_refit": {"available": False, "reason": "not scored on this study: semb"},
        "published": {"entries": []},
    }


def _facts():
    return {
        "study": {"name": "s1", "description": f"desc {EVIL}", "status": "open",
                  "scheme": "rexval", "raters_per_pair": 3, "seed": 7, "n_pairs": 24,
                  "n_cases": 12, "n_raters": 3, "n_assignments": 72, "n_completed": 70,
                  "sources": {EVIL: 12, "gen-b": 12}, "kind": "rexval",
                  "assignment": {"strategy": "adaptive", "question": "green|bleu4"}},
        "agreement": {"raters": ["r1", "r2", "r3"], "rows": [
            {"scope": "total", "alpha_interval": 0.712, "alpha_ratio": 0.65, "icc2_1": 0.7,
             "icc2_k": 0.88, "icc_k": 3, "icc_n_pairs": 24, "n_pairs_pairable": 24}]},
        "versions": {"radconcord": "0.1.0", "kaleido": None},
        "inputs": [{"where": "files.gt.csv", "sha256": "ab" * 32}],
        "generated_at": "2026-01-01T00:00:00+00:00",
    }


def test_every_section_renders_with_its_values():
    html = html_report.render_html(_full_report(), _facts())
    for sid, title in html_report.SECTIONS:
        assert f'<section id="{sid}"><h2>{title.replace(">", "&gt;")}</h2>' in html
    # Tau table, CIs and % of ceiling (0.9 -> 90%), best metric first.
    assert "% of ceiling" in html and "90%" in html and "50%" in html
    assert html.index(">green<") < html.index(">bleu4<")
    assert "[0.300, 0.600]" in html
    # Ceiling, agreement, design, assignment strategy, versions and hashes.
    assert "0.500" in html and "[0.400, 0.600]" in html and ">r1<" in html
    assert "0.712" in html and "0.880" in html
    assert "adaptive" in html and "green|bleu4" in html
    assert "ab" * 32 in html and "files.gt.csv" in html and "not installed" in html
    # The paired row with adjusted p < 0.05 is highlighted, Williams p shown.
    assert '<tr class="sig"><td>green</td><td>bleu4</td>' in html
    assert "0.010" in html
    # Systems: ranking, randomization, corpus-level note; failure modes: the found difference.
    assert "CIDEr: recomputed per permutation" in html and "1000 permutations" in html
    assert "Differences found" in html and "No difference between sources" not in html


def test_data_texts_are_escaped():
    html = html_report.render_html(_full_report(), _facts())
    assert EVIL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "sig|model=&lt;b&gt;" in html
    parser = _Refs()
    parser.feed(html)
    assert "script" not in parser.tags and "b" not in parser.tags


def test_absent_sections_say_why():
    report = _full_report()
    for name in ("ceiling", "pairwise", "systems", "failure_modes"):
        del report[name]
    for m in report["metrics"].values():
        del m["pct_of_ceiling"]
    html = html_report.render_html(report, {})
    assert "needs &gt;= 3 raters (this study has 3)" in html
    assert "<th>% of ceiling</th>" not in html
    assert "% of ceiling: not in this correlate output" in html
    assert "System ranking is not in this correlate output" in html and ">gen-a<" in html
    assert html.count("Not available in this correlate output") == 2  # pairwise, failures
    assert "not recorded (the default order is random, seeded)" in html
    assert "records no input hashes" in html
    # An empty report (no metrics at all) still renders every section.
    bare = html_report.render_html({}, {})
    for sid, _ in html_report.SECTIONS:
        assert f'id="{sid}"' in bare


def test_figures_inline_and_self_contained():
    from plotly.offline import get_plotlyjs

    report = _full_report()
    figs = report_figures(CorrelationReport.from_json(report))
    assert set(figs) == {"forest", "paired_tests", "systems"}
    markup = {k: f.to_html(full_html=False, include_plotlyjs=False) for k, f in figs.items()}
    html = html_report.render_html(report, _facts(), figures=markup, figure_format="html",
                                   figure_note="kaleido missing", plotlyjs=get_plotlyjs())
    assert _external(html) == []
    assert "Plotly.newPlot" in html and "interactive plotly HTML" in html
    assert "kaleido missing" in html
    # Only our own script element: the library is inline, never loaded from a host.
    parser = _Refs()
    parser.feed(html)
    assert not any(tag == "script" and name == "src" for tag, name, _ in parser.refs)


def test_external_references_are_detected():
    """The self-containment check itself catches a script loaded from a host."""
    html = html_report.render_html(_full_report(), _facts(),
                                   figures={"forest": '<script src="https://cdn.x/p.js"></script>'})
    assert _external(html) == [("script", "src", "https://cdn.x/p.js")]


def test_report_figures_are_the_dashboards_drawings():
    """The report draws the dashboard's figures (backend.figures): the forest plot with the
    ceiling band, the antisymmetric paired-test matrix, the systems plot."""
    figs = report_figures(CorrelationReport.from_json(_full_report()))
    forest = figs["forest"]
    assert list(forest.data[0].y) == ["green", "bleu4"]  # best first, drawn at the top
    assert list(forest.data[0].error_x.array) == pytest.approx([0.15, 0.15])
    shapes = forest.layout.shapes
    assert any(s.type == "rect" and (s.x0, s.x1) == (0.4, 0.6) for s in shapes)
    assert any(s.type == "line" and s.x0 == 0.5 for s in shapes)
    heat = figs["paired_tests"].data[0]
    assert list(heat.x) == ["green", "bleu4"]
    assert heat.z[0][1] == 0.2 and heat.z[1][0] == -0.2
    assert heat.text[0][1] == "*" and heat.text[1][0] == "*"
    no_ceiling = _full_report()
    del no_ceiling["ceiling"], no_ceiling["pairwise"], no_ceiling["systems"]
    figs = report_figures(CorrelationReport.from_json(no_ceiling))
    assert set(figs) == {"forest"}
    assert not [s for s in figs["forest"].layout.shapes if s.type == "rect"]


def test_published_values_sit_beside_ours_only_for_a_rexval_study():
    """The papers measured ReXVal: beside a demo or an own study the difference would be one
    of datasets (issue 24)."""
    report = _full_report()
    report["published"] = {"entries": [
        {"paper": "ER2Score paper", "metric": "BLEU-4", "key": "bleu4",
         "kendall_tau_b": 0.345, "ours": 0.3}]}
    facts = _facts()
    html = html_report.render_html(report, facts)
    assert "Published values (ReXVal) beside ours" in html and "0.345" in html
    facts["study"]["kind"] = "demo"
    html = html_report.render_html(report, facts)
    assert "Published values (ReXVal) beside ours" not in html and "0.345" not in html
    assert "only for a study imported from ReXVal" in html


def test_a_tau_from_too_few_pairs_reads_n_too_small_not_a_number():
    report = _full_report()
    report["metrics"]["bleu4"].update(n=6, kendall_tau_b=0.987654, spearman=0.912345)
    html = html_report.render_html(report, _facts())
    row = html[html.index(">bleu4<"):]
    row = row[:row.index("</tr>")]
    assert "n too small" in row and "0.988" not in row and "0.912" not in row
