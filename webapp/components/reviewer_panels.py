"""Dashboard panels that answer a paper reviewer: human ceiling, paired metric tests, systems.

Each function draws one panel from a section of the typed ``correlate`` report
(``backend/analysis/correlation.py``): ``ceiling``, ``paired_tests`` and ``systems``. They
render only (the report in, Streamlit elements out); the dashboard view fetches it. A
missing or empty section draws a caption that says why, never an empty chart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import streamlit as st

from radconcord.backend.analysis import reliability
from radconcord.backend.analysis.correlation import CorrelationReport
from radconcord.backend.figures import correlation as figures
from radconcord.webapp.components import tables
from radconcord.webapp.components.csv_download import csv_download
from radconcord.webapp.components.simulation_plot import curves_frame, simulation_plot

#: Corrected p-values below this mark a cell of the paired matrix.
ALPHA = 0.05
#: The ``systems.randomization`` entry that tests the radiologists' errors themselves.
HUMAN_KEY = "human_errors"
HUMAN_LABEL = "radiologists' errors"


def _ci(ci: Sequence[float | None] | None) -> str:
    lo, hi = (list(ci or []) + [None, None])[:2]
    return "" if lo is None or hi is None else f"[{lo:.3f}, {hi:.3f}]"


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def ceiling_summary(report: CorrelationReport) -> None:
    """The human ceiling in one line, or why there is none (fewer than 3 raters).

    Args:
        report: The typed correlate report.
    """
    ceiling = report.ceiling
    if not ceiling or ceiling.get("kendall_tau_b") is None:
        st.caption(
            f"Human ceiling: needs at least 3 raters (this study has {report.n_raters})"
            "; with 3 or more, each rater is compared with the mean of the others and the "
            "metrics' taus are shown as a share of that agreement."
        )
        return
    if not reliability.judge(ceiling["kendall_tau_b"], report.n_pairs).shown:
        st.caption(f"Human ceiling ({ceiling.get('n_raters')} raters, n = {report.n_pairs} "
                   f"pairs): :gray[*{reliability.N_TOO_SMALL}*] (fewer than "
                   f"{reliability.MIN_PAIRS} pairs).")
        return
    st.caption(
        f"**Human ceiling** (the shaded band below, n = {report.n_pairs} pairs): each of "
        f"{ceiling.get('n_raters')} raters' "
        f"{report.target} errors against the mean of the other raters, tau-b averaged "
        f"over raters: **{_num(ceiling['kendall_tau_b'])}** "
        f"{_ci(ceiling.get('kendall_ci95'))}, Spearman {_num(ceiling.get('spearman'))} "
        f"{_ci(ceiling.get('spearman_ci95'))} (bootstrap "
        f"{figures.unit_label(ceiling.get('unit'))}). '% of ceiling' is a metric's |tau-b| over "
        "this mean."
    )


def ceiling_raters(report: CorrelationReport) -> None:
    """Table of each rater's leave-one-out tau (the values the ceiling averages).

    Args:
        report: The typed correlate report.
    """
    ceiling = report.ceiling
    if not ceiling or not ceiling.get("per_rater"):
        return
    st.dataframe(tables.grey_judged(pd.DataFrame(ceiling_rater_rows(report))),
                 hide_index=True, width="stretch", key="dash_ceiling_raters",
                 column_config={"n": st.column_config.NumberColumn(
                     help="Pairs this rater shares with the others' mean. Below "
                          f"{reliability.MIN_PAIRS} the value reads "
                          f"'{reliability.N_TOO_SMALL}'.")})


def ceiling_rater_rows(report: CorrelationReport) -> list[dict[str, Any]]:
    """Each rater's leave-one-out tau and rho as table cells, judged by the pairs that rater
    shares with the others' mean (one rater may have rated far fewer pairs than the study
    has, so the study's n would not do)."""
    ceiling = report.ceiling or {}
    spearman = ceiling.get("per_rater_spearman") or {}
    # An older correlate output has no per-rater n: the study's pairs are the upper bound.
    shared = ceiling.get("n_shared_pairs") or {}
    rows = []
    for name, tau in (ceiling.get("per_rater") or {}).items():
        n = shared.get(name, report.n_pairs)
        rows.append({"Rater": name, "n": n,
                     "tau-b vs the other raters' mean": tables.judged(tau, n),
                     "Spearman": tables.judged(spearman.get(name), n)})
    return rows


def paired_test_rows(pairwise: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per tested metric pair, as the panel's table and CSV show it."""
    rows = []
    for name, e in (pairwise.get("pairs") or {}).items():
        a, _, b = str(name).partition("|")
        lo, hi = (list(e.get("ci95") or []) + [None, None])[:2]
        rows.append({
            "Metric A": a, "Metric B": b, "tau(A) - tau(B)": e.get("tau_diff"),
            "CI low": lo, "CI high": hi, "p": e.get("p"), "p adjusted": e.get("p_adjusted"),
            "Significant": e.get("p_adjusted") is not None and e["p_adjusted"] < ALPHA,
            "Williams p": e.get("williams_p"),
        })
    return rows


def paired_tests_panel(report: CorrelationReport, keys: Sequence[str]) -> None:
    """Matrix of paired tau differences with its unit and correction named, and its table.

    Args:
        report: The typed correlate report.
        keys: Metric keys in the tau table's order.
    """
    pairwise = report.paired_tests or {}
    if not pairwise.get("pairs"):
        st.caption("Paired tests need at least two scored metrics and bootstrap resamples "
                   "(Resamples > 0).")
        return
    if report.n_pairs < reliability.MIN_PAIRS:
        st.caption(f"Paired tests (n = {report.n_pairs} pairs): :gray[*"
                   f"{reliability.N_TOO_SMALL}*] (fewer than {reliability.MIN_PAIRS} pairs).")
        return
    correction = figures.correction_label(pairwise.get("correction"))
    st.plotly_chart(figures.paired_test_matrix(pairwise, keys=keys, alpha=ALPHA),
                    key="dash_pairwise", width="stretch")
    st.caption(
        f"Cell (row A, column B): tau-b(A) - tau-b(B) against the radiologists, from a paired "
        f"bootstrap on n = {report.n_pairs} pairs ({pairwise.get('resamples')} resamples, "
        f"{figures.unit_label(pairwise.get('unit'))}; the same resamples for both metrics). "
        f"\\* marks p < {ALPHA:g} after {correction} correction over the matrix. Hover for the "
        "95% interval, the raw and adjusted p and, where it applies, the Williams test for "
        "dependent correlations."
    )
    rows = paired_test_rows(pairwise)
    with st.expander(f"Paired tests as a table ({len(rows)} metric pairs)"):
        numeric = ("tau(A) - tau(B)", "CI low", "CI high", "p", "p adjusted", "Williams p")
        # Text cells: st.dataframe draws a missing value as "None"; here it is a blank.
        st.dataframe([{c: tables.num(v, 4) if c in numeric else v for c, v in r.items()}
                      for r in rows], hide_index=True, width="stretch",
                     key="dash_pairwise_table")
        st.caption("Williams p: Williams' T2 test for dependent correlations sharing the "
                   "radiologists as target (Steiger 1980), on Spearman's rho; blank where it "
                   "does not apply.")
    csv_download(rows, file_name=f"{report.study}-paired-tests.csv",
                 key="dash_pairwise_download", label="Download paired tests (CSV)")


def system_rows(systems: Mapping[str, Any], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Per metric: the system-level Kendall tau against the radiologists' ranking."""
    ranking = systems.get("ranking") or {}
    order = [k for k in keys if k in ranking] + sorted(k for k in ranking if k not in keys)
    def ci(entry: Mapping[str, Any]) -> str:
        return _ci(entry.get("kendall_ci95"))

    return [
        {"Metric": key, "System-level Kendall tau": ranking[key].get("kendall_tau"),
         "tau 95% CI": ci(ranking[key]), "Systems (n)": ranking[key].get("n_systems"),
         "Metric's order (best first)": " > ".join(ranking[key].get("metric_order") or [])}
        for key in order
    ]


def few_systems_warning(systems: Mapping[str, Any]) -> str | None:
    """The warning a system-level tau from fewer than :data:`reliability.MIN_SYSTEMS`
    systems carries (None with enough systems)."""
    ranking = systems.get("ranking") or {}
    counts = [e.get("n_systems") for e in ranking.values() if e.get("kendall_tau") is not None]
    n = max((int(c) for c in counts if c is not None), default=len(systems.get("sources") or {}))
    if n >= reliability.MIN_SYSTEMS:
        return None
    return (f"System-level tau from only {n} systems (fewer than {reliability.MIN_SYSTEMS}): "
            f"a random ranking matches the radiologists' exactly 1 time in {math.factorial(n)},"
            " so even tau = 1.000 is weak evidence. Read it with its interval.")


def randomization_rows(systems: Mapping[str, Any], keys: Sequence[str]
                       ) -> list[dict[str, Any]]:
    """One row per source pair and measure (the radiologists' errors first, then each metric):
    mean paired difference, p-value, matched pairs used and pairs left unmatched."""
    rows = []
    for name, per_key in (systems.get("randomization") or {}).items():
        a, _, b = str(name).partition("|")
        order = [HUMAN_KEY] if HUMAN_KEY in per_key else []
        order += [k for k in keys if k in per_key]
        order += sorted(k for k in per_key if k not in order)
        for key in order:
            e = per_key[key]
            rows.append({"Source A": a, "Source B": b,
                         "Measure": HUMAN_LABEL if key == HUMAN_KEY else key,
                         "Mean A - B": e.get("diff"), "p": e.get("p"),
                         "Pairs": e.get("n_pairs"), "Unmatched": e.get("n_unmatched")})
    return rows


def systems_panel(report: CorrelationReport, keys: Sequence[str]) -> None:
    """Per-source means (metric chosen by the user), system-level taus, randomization tests.

    Args:
        report: The typed correlate report.
        keys: Metric keys in the tau table's order.
    """
    systems = report.systems or {}
    sources = systems.get("sources") or {}
    if len(sources) < 2:
        st.caption(f"Ranking systems needs at least two candidate sources with rated pairs "
                   f"(this study has {len(sources)}).")
        return
    choices = [k for k in keys if any(k in (s.get("metrics") or {}) for s in sources.values())]
    if not choices:
        st.caption("No metric has a mean per source yet.")
        return
    key = st.selectbox("Metric for the system means", choices, key="dash_system_key")
    st.plotly_chart(figures.system_means(systems, key=key), key="dash_systems",
                    width="stretch")
    human = " > ".join(systems.get("human_order") or [])
    st.caption(f"Radiologists' order (fewest errors first): {human}. Intervals are 95% "
               "bootstrap intervals of the per-source means.")
    ranking = system_rows(systems, keys)
    warning = few_systems_warning(systems)
    if warning:
        st.warning(warning)
    st.dataframe(ranking, hide_index=True, width="stretch", key="dash_system_ranking",
                 column_config={"System-level Kendall tau":
                                st.column_config.NumberColumn(format="%.3f")})
    tests = randomization_rows(systems, keys)
    st.markdown(f"**Paired approximate randomization tests** ({systems.get('permutations')} "
                "permutations, on pairs of the two sources with the same reference)")
    if tests:
        # A test from fewer than MIN_PAIRS matched pairs reads "n too small" (greyed) with
        # its n, as every pair-level statistic of the dashboard does; the CSV keeps numbers.
        shown = [{**r, "Mean A - B": tables.judged(r["Mean A - B"], r["Pairs"], digits=4),
                  "p": tables.judged(r["p"], r["Pairs"], digits=4)} for r in tests]
        st.dataframe(tables.grey_judged(pd.DataFrame(shown)), hide_index=True,
                     width="stretch", key="dash_randomization")
        st.caption(f"Pairs: matched pairs behind each test; fewer than "
                   f"{reliability.MIN_PAIRS} read '{reliability.N_TOO_SMALL}'.")
    if systems.get("corpus_level"):
        st.caption(f"Corpus-level metrics: {systems['corpus_level']}")
    csv_download(tests, file_name=f"{report.study}-system-tests.csv",
                 key="dash_systems_download", label="Download system tests (CSV)")


def simulation_result(job_id: int, result: Mapping[str, Any]) -> None:
    """The curves of one finished ``simulate_rating`` job and what adaptive saved.

    Drawn with :func:`webapp.components.simulation_plot.simulation_plot` (the same figure as
    the assignment page), with the job's settings in a caption below.

    Args:
        job_id: The job (named in the caption).
        result: Its result
        (:meth:`backend.services.evaluation.simulation.SimulationOutput.as_json`).
    """
    curves = result.get("curves") or []
    if not curves:
        st.caption(f"Simulation job #{job_id} produced no curve points.")
        return
    simulation_plot(curves_frame(result), result.get("savings"), key="dash_simulation")
    seeds = result.get("seeds") or []
    st.caption(
        f"Job #{job_id}: question **{result.get('question')}** "
        f"({result.get('quantity')}); {', '.join(result.get('strategies') or [])} orders, "
        f"{len(seeds)} seed(s), {result.get('resamples')} bootstrap resamples per point, "
        f"{result.get('n_ratings')} ratings of {result.get('n_pairs')} pairs by "
        f"{result.get('n_raters')} raters."
    )
    csv_download(curves, file_name=f"{result.get('study')}-simulation.csv",
                 key="dash_simulation_download", label="Download curves (CSV)")
