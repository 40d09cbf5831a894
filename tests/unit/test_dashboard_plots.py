"""The dashboard's figures for issue 11, built from hand-written correlate sections.

The figures are pure functions of the correlate JSON's ``ceiling``, ``pairwise`` and
``systems`` sections (layout agreed in the issue), so each test writes the section itself and
checks what the figure draws: the band's edges, the matrix cells and their marks, the order
and error bars of the per-source means.
"""

from __future__ import annotations

import pytest

from radconcord.backend.figures import correlation as plots
from radconcord.webapp.components import reviewer_panels

ROWS = [
    {"key": "bleu4", "tau": 0.30, "lo": 0.20, "hi": 0.40, "published": [("paper", 0.345)]},
    {"key": "rougeL", "tau": 0.10, "lo": -0.05, "hi": 0.25, "published": []},
]
CEILING = {"kendall_tau_b": 0.52, "kendall_ci95": [0.41, 0.63], "spearman": 0.6,
           "spearman_ci95": [0.5, 0.7], "per_rater": {"a": 0.5, "b": 0.54, "c": 0.52},
           "n_raters": 3, "unit": "pair"}
PAIRWISE = {
    "unit": "case", "correction": "holm", "resamples": 500,
    "pairs": {
        "bleu4|rougeL": {"tau_diff": 0.20, "ci95": [0.05, 0.35], "p": 0.004,
                         "p_adjusted": 0.012, "williams_p": 0.01},
        "bleu4|semb": {"tau_diff": -0.05, "ci95": [-0.2, 0.1], "p": 0.5, "p_adjusted": 1.0,
                       "williams_p": None},
        "rougeL|semb": {"tau_diff": -0.25, "ci95": [-0.4, -0.1], "p": 0.03,
                        "p_adjusted": 0.06, "williams_p": 0.04},
    },
}
SYSTEMS = {
    "sources": {
        "gen-a": {"n": 4, "human_mean": 2.5, "human_ci95": [2.0, 3.0],
                  "metrics": {"bleu4": {"mean": 0.2, "ci95": [0.1, 0.3]}}},
        "gen-b": {"n": 5, "human_mean": 1.0, "human_ci95": [0.5, 1.6],
                  "metrics": {"bleu4": {"mean": 0.4, "ci95": [0.35, 0.48]}}},
    },
    "ranking": {"bleu4": {"kendall_tau": 1.0, "metric_order": ["gen-b", "gen-a"]}},
    "human_order": ["gen-b", "gen-a"],
    "randomization": {"gen-a|gen-b": {
        "bleu4": {"diff": -0.2, "p": 0.012, "n_pairs": 4, "n_unmatched": 1},
        "human_errors": {"diff": 1.5, "p": 0.03, "n_pairs": 4, "n_unmatched": 1}}},
    "permutations": 1000,
    "corpus_level": "recomputed on each permuted corpus",
}


def test_forest_plot_draws_the_ceiling_as_a_band_with_its_mean():
    fig = plots.forest_plot(ROWS, ceiling=CEILING)
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    lines = [s for s in fig.layout.shapes if s.type == "line" and s.x0 == s.x1]
    assert [(r.x0, r.x1) for r in rects] == [(0.41, 0.63)]
    assert sorted(line.x0 for line in lines) == [0.0, 0.52]
    names = [t.name for t in fig.data]
    assert "human ceiling 0.520 [0.410, 0.630], 3 raters" in names


@pytest.mark.parametrize("ceiling", [None, {"kendall_tau_b": None, "kendall_ci95": [None, None]}])
def test_forest_plot_without_a_ceiling_draws_no_band(ceiling):
    fig = plots.forest_plot(ROWS, ceiling=ceiling)
    assert not [s for s in fig.layout.shapes if s.type == "rect"]
    assert [s.x0 for s in fig.layout.shapes] == [0.0]  # the zero line only
    assert not any("ceiling" in (t.name or "") for t in fig.data)


def test_forest_plot_ceiling_without_interval_draws_the_line_only():
    fig = plots.forest_plot(ROWS, ceiling={"kendall_tau_b": 0.4, "kendall_ci95": [None, None],
                                           "n_raters": 4})
    assert not [s for s in fig.layout.shapes if s.type == "rect"]
    assert sorted(s.x0 for s in fig.layout.shapes) == [0.0, 0.4]
    assert "human ceiling 0.400, 4 raters" in [t.name for t in fig.data]


def test_pairwise_matrix_is_antisymmetric_and_marks_corrected_significance():
    fig = plots.paired_test_matrix(PAIRWISE, keys=["rougeL", "bleu4", "semb"])
    (heat,) = fig.data
    assert list(heat.x) == list(heat.y) == ["rougeL", "bleu4", "semb"]
    z = [list(row) for row in heat.z]
    # Row A, column B holds tau(A) - tau(B); the mirrored cell the negation; no diagonal.
    assert z[1][0] == pytest.approx(0.20) and z[0][1] == pytest.approx(-0.20)
    assert z[1][2] == pytest.approx(-0.05) and z[2][1] == pytest.approx(0.05)
    assert z[0][2] == pytest.approx(-0.25) and z[2][0] == pytest.approx(0.25)
    assert [z[i][i] for i in range(3)] == [None, None, None]
    marks = [list(row) for row in heat.text]
    # Only bleu4|rougeL survives Holm (0.012); rougeL|semb has p 0.03 but adjusted 0.06.
    assert marks == [["", "*", ""], ["*", "", ""], ["", "", ""]]
    assert heat.zmid == 0.0 and heat.zmin == -0.25 and heat.zmax == 0.25
    hover = [list(row) for row in heat.customdata]
    assert hover[1][0].split("<br>") == [
        "tau(bleu4) - tau(rougeL) = 0.200", "95% CI [0.050, 0.350]",
        "p = 0.0040, Holm-adjusted p = 0.0120",
        "Williams test (dependent correlations) p = 0.0100",
    ]
    # The mirrored interval is negated and reordered.
    assert hover[0][1].split("<br>")[:2] == ["tau(rougeL) - tau(bleu4) = -0.200",
                                            "95% CI [-0.350, -0.050]"]
    assert hover[1][2].split("<br>")[3] == "Williams test: does not apply"


def test_pairwise_matrix_appends_keys_missing_from_the_order():
    fig = plots.paired_test_matrix(PAIRWISE, keys=["semb"])
    assert list(fig.data[0].x) == ["semb", "bleu4", "rougeL"]


def test_pairwise_matrix_rejects_a_malformed_entry_name():
    with pytest.raises(ValueError, match="pairwise entry 'bleu4-rougeL' is not of the form"):
        plots.paired_test_matrix({"pairs": {"bleu4-rougeL": {"tau_diff": 0.1}}})


def test_labels_name_units_and_corrections():
    assert plots.correction_label("bh") == "Benjamini-Hochberg"
    assert plots.correction_label("holm") == "Holm"
    assert plots.unit_label("case").startswith("resampling cases")
    assert plots.unit_label("rater_pair") == "resampling raters and pairs"


def test_system_means_follow_the_radiologists_order_with_their_intervals():
    fig = plots.system_means(SYSTEMS, key="bleu4")
    human, metric = fig.data
    assert list(human.y) == list(metric.y) == ["gen-b", "gen-a"]
    assert list(human.x) == [1.0, 2.5]
    assert list(human.error_x.arrayminus) == pytest.approx([0.5, 0.5])
    assert list(human.error_x.array) == pytest.approx([0.6, 0.5])
    assert list(metric.x) == [0.4, 0.2]
    assert list(metric.error_x.array) == pytest.approx([0.08, 0.1])
    assert list(metric.customdata) == [5, 4]
    assert fig.layout.annotations[1].text == "bleu4: mean per pair"


def test_system_means_skip_a_source_without_the_metric():
    systems = {**SYSTEMS, "sources": {**SYSTEMS["sources"],
                                      "gen-c": {"n": 2, "human_mean": 3.0,
                                                "human_ci95": [None, None], "metrics": {}}}}
    fig = plots.system_means(systems, key="bleu4")
    human, metric = fig.data
    assert list(human.y) == ["gen-b", "gen-a", "gen-c"]
    assert list(metric.y) == ["gen-b", "gen-a"]
    assert list(human.error_x.array)[-1] == 0.0  # no interval: no bar


def test_panel_tables_flatten_the_sections():
    rows = reviewer_panels.paired_test_rows(PAIRWISE)
    assert rows[0] == {"Metric A": "bleu4", "Metric B": "rougeL", "tau(A) - tau(B)": 0.20,
                       "CI low": 0.05, "CI high": 0.35, "p": 0.004, "p adjusted": 0.012,
                       "Significant": True, "Williams p": 0.01}
    assert [r["Significant"] for r in rows] == [True, False, False]
    assert reviewer_panels.system_rows(SYSTEMS, ["rougeL", "bleu4"]) == [
        # A ranking without the CI and n (an older correlate output) shows them blank.
        {"Metric": "bleu4", "System-level Kendall tau": 1.0, "tau 95% CI": "",
         "Systems (n)": None, "Metric's order (best first)": "gen-b > gen-a"}]
    assert reviewer_panels.randomization_rows(SYSTEMS, ["bleu4"]) == [
        {"Source A": "gen-a", "Source B": "gen-b", "Measure": "radiologists' errors",
         "Mean A - B": 1.5, "p": 0.03, "Pairs": 4, "Unmatched": 1},
        {"Source A": "gen-a", "Source B": "gen-b", "Measure": "bleu4", "Mean A - B": -0.2,
         "p": 0.012, "Pairs": 4, "Unmatched": 1}]

