"""Systems ranked by metrics and by radiologists (backend.analysis.systems).

References: hand computations on 3 sources x 4 cases; exact enumeration of all 2^n swaps;
straightforward loops with the same seeds (bootstrap: ``draw_resamples(...).pair_indices``
and ``numpy.nanmean``; randomization: swapping the two systems' values pair by pair);
``scipy.stats.kendalltau`` (tau-b) for the system-level rank correlation.
"""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pytest
from scipy import stats

from radconcord.backend.analysis.bootstrap import draw_resamples
from radconcord.backend.analysis.systems import HUMAN_KEY, paired_randomization, systems_json

NAN = np.nan


def hand_data() -> tuple[np.ndarray, list[str], list[bool], np.ndarray, list[str], list[str]]:
    """3 sources x 4 cases. Means: bleu A .5 B .2 C .4 (C's c3 unscored); radcliq (lower is
    better) A 1 B 3 C 2; bad (higher is better) A 0 B 1 C .5; errors A .5 B 2 C 1."""
    cases = ["c1", "c2", "c3", "c4"] * 3
    sources = ["A"] * 4 + ["B"] * 4 + ["C"] * 4
    bleu = [0.5, 0.7, 0.6, 0.2, 0.1, 0.3, 0.2, 0.2, 0.4, 0.4, NAN, 0.4]
    radcliq = [1, 1, 1, 1, 3, 2, 3, 4, 2, 2, 2, 2]
    bad = [0, 0, 0, 0, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5]
    human = np.array([0, 1, 0, 1, 3, 2, 2, 1, 1, 1, 2, 0], dtype=float)
    values = np.column_stack([bleu, radcliq, bad]).astype(float)
    return values, ["bleu", "radcliq", "bad"], [True, False, True], human, sources, cases


def test_hand_computed_means_orders_and_taus() -> None:
    values, keys, hib, human, sources, cases = hand_data()
    out = systems_json(values, keys, hib, human, sources, cases, resamples=200,
                       permutations=100, seed=3)
    src = out["sources"]
    assert set(src) == {"A", "B", "C"}
    assert [src[s]["n"] for s in "ABC"] == [4, 4, 4]
    assert [src[s]["human_mean"] for s in "ABC"] == pytest.approx([0.5, 2.0, 1.0])
    assert [src[s]["metrics"]["bleu"]["mean"] for s in "ABC"] == pytest.approx([0.5, 0.2, 0.4])
    assert [src[s]["metrics"]["radcliq"]["mean"] for s in "ABC"] == pytest.approx([1, 3, 2])
    # A constant source has a zero-width interval; others contain their mean.
    assert src["A"]["metrics"]["radcliq"]["ci95"] == pytest.approx([1.0, 1.0])
    lo, hi = src["B"]["human_ci95"]
    assert lo <= 2.0 <= hi and lo < hi
    assert out["human_order"] == ["A", "C", "B"]
    assert out["ranking"]["bleu"] == {"kendall_tau": pytest.approx(1.0),
                                      "metric_order": ["A", "C", "B"],
                                      "kendall_ci95": pytest.approx([1 / 3, 1.0]),
                                      "n_systems": 3}
    # Lower is better: ascending means is the metric's best-first order.
    assert out["ranking"]["radcliq"]["metric_order"] == ["A", "C", "B"]
    assert out["ranking"]["radcliq"]["kendall_tau"] == pytest.approx(1.0)
    assert out["ranking"]["bad"]["metric_order"] == ["B", "C", "A"]
    assert out["ranking"]["bad"]["kendall_tau"] == pytest.approx(-1.0)
    assert out["permutations"] == 100
    assert set(out) == {"sources", "ranking", "human_order", "randomization", "permutations",
                        "corpus_level"}
    json.dumps(out, allow_nan=False)


def test_hand_computed_randomization() -> None:
    values, keys, hib, human, sources, cases = hand_data()
    r = 20000
    out = systems_json(values, keys, hib, human, sources, cases, resamples=0, permutations=r,
                       seed=1)["randomization"]
    assert set(out) == {"A|B", "A|C", "B|C"}
    assert set(out["A|B"]) == {"bleu", "radcliq", "bad", HUMAN_KEY}
    ab = out["A|B"]["bleu"]
    # Differences .4 .4 .4 0: |sum| reaches 1.2 only when the first three keep one sign,
    # 4 of the 16 swap patterns, so the exact p is 1/4.
    assert ab["diff"] == pytest.approx(0.3)
    assert ab["n_pairs"] == 4 and ab["n_unmatched"] == 0
    assert ab["p"] == pytest.approx(0.25, abs=0.015)
    # C's c3 is unscored: c3 leaves the test (A's c3 pair is unmatched for bleu).
    ac = out["A|C"]["bleu"]
    assert ac["n_pairs"] == 3 and ac["n_unmatched"] == 1
    assert ac["diff"] == pytest.approx((0.1 + 0.3 - 0.2) / 3)
    assert out["A|C"]["radcliq"]["n_pairs"] == 4
    hb = out["A|B"][HUMAN_KEY]
    assert hb["diff"] == pytest.approx(0.5 - 2.0) and hb["n_pairs"] == 4
    # Differences -3 -1 -2 0: patterns with |sum| >= 6 are the 2 with equal signs on the
    # first three (x2 for the zero): 4/16.
    assert hb["p"] == pytest.approx(0.25, abs=0.015)
    # bad: A - B is -1 on every case: only all-kept or all-swapped reach |d|: 2/16.
    assert out["A|B"]["bad"]["p"] == pytest.approx(0.125, abs=0.012)


def exact_p(diffs: np.ndarray) -> float:
    """Exact two-sided p over all 2^n swap patterns (the limit of the randomization test)."""
    observed = abs(diffs.sum())
    hits = sum(abs(np.dot(s, diffs)) >= observed - 1e-12
               for s in itertools.product((-1.0, 1.0), repeat=diffs.size))
    return hits / 2 ** diffs.size


def test_randomization_converges_to_exact_enumeration() -> None:
    rng = np.random.default_rng(5)
    diffs = rng.normal(0.3, 1.0, size=(9, 3))
    _, p, n = paired_randomization(diffs, permutations=40000, seed=2)
    assert n.tolist() == [9, 9, 9]
    for k in range(3):
        assert p[k] == pytest.approx(exact_p(diffs[:, k]), abs=0.01)


def loop_systems_randomization(
    values: np.ndarray, human: np.ndarray, sources: list[str], cases: list[str],
    permutations: int, seed: int,
) -> dict[str, list[tuple[float, float, int]]]:
    """Reference: match by case (repeats averaged), then swap value by value in a loop."""
    table = np.column_stack([values, human])
    src = np.asarray(sources)
    cas = np.asarray(cases)
    names = sorted(set(sources))
    per_case = {}
    for name in names:
        rows = {}
        for c in sorted(set(cas[src == name])):
            block = table[(src == name) & (cas == c)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN column -> NaN
                rows[c] = np.nanmean(block, axis=0)
        per_case[name] = rows
    out = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            matched = sorted(set(per_case[a]) & set(per_case[b]))
            signs = np.random.default_rng(seed).integers(0, 2, size=(permutations, len(matched)))
            res = []
            for k in range(table.shape[1]):
                xa = np.array([per_case[a][c][k] for c in matched])
                xb = np.array([per_case[b][c][k] for c in matched])
                ok = np.isfinite(xa) & np.isfinite(xb)
                if not ok.any():
                    res.append((NAN, NAN, 0))
                    continue
                d = xa[ok].mean() - xb[ok].mean()
                hits = 0
                for row in signs:
                    keep = row[ok] == 1
                    a_star = np.where(keep, xa[ok], xb[ok])
                    b_star = np.where(keep, xb[ok], xa[ok])
                    if abs(a_star.mean() - b_star.mean()) >= abs(d) * (1 - 1e-9):
                        hits += 1
                res.append((d, (hits + 1) / (permutations + 1), int(ok.sum())))
            out[f"{a}|{b}"] = res
    return out


def random_study(seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """3 sources over partly overlapping cases, one repeated pair, scattered NaNs."""
    rng = np.random.default_rng(seed)
    sources, cases = [], []
    for name, case_ids in {"gen_b": range(0, 25), "gen_a": range(5, 30),
                           "gen_c": range(0, 30, 2)}.items():
        ids = list(case_ids)
        rng.shuffle(ids)
        sources += [name] * len(ids)
        cases += [f"case{i}" for i in ids]
    sources.append("gen_a")  # a repeat of one case by one source: averaged per case
    cases.append("case7")
    n = len(sources)
    values = rng.normal(size=(n, 4))
    values[rng.random((n, 4)) < 0.1] = NAN
    human = rng.poisson(2.0, n).astype(float)
    human[rng.random(n) < 0.05] = NAN
    return values, human, sources, cases


def test_randomization_matches_reference_loop_with_same_seed() -> None:
    values, human, sources, cases = random_study()
    keys = ["m0", "m1", "m2", "m3"]
    out = systems_json(values, keys, [True, False, True, True], human, sources, cases,
                       resamples=0, permutations=300, seed=11)["randomization"]
    ref = loop_systems_randomization(values, human, sources, cases, 300, 11)
    assert set(out) == set(ref) == {"gen_a|gen_b", "gen_a|gen_c", "gen_b|gen_c"}
    for pair, rows in ref.items():
        for key, (d, p, n) in zip([*keys, HUMAN_KEY], rows, strict=True):
            got = out[pair][key]
            assert got["diff"] == pytest.approx(d, rel=1e-12, abs=1e-12), (pair, key)
            assert got["p"] == pytest.approx(p), (pair, key)
            assert got["n_pairs"] == n, (pair, key)


def test_source_intervals_match_reference_loop_with_same_seed() -> None:
    values, human, sources, cases = random_study(1)
    out = systems_json(values, ["m0", "m1", "m2", "m3"], [True] * 4, human, sources, cases,
                       resamples=250, permutations=10, seed=4)["sources"]
    src = np.asarray(sources)
    cas = np.asarray(cases)
    table = np.column_stack([values, human])
    for name in sorted(set(sources)):
        rows = np.flatnonzero(src == name)
        draws = draw_resamples(rows.size, 250, 4, clusters=cas[rows])
        boot = np.array([np.nanmean(table[rows][draws.pair_indices(b)], axis=0)
                         for b in range(250)])
        ci = np.quantile(boot, [0.025, 0.975], axis=0).T
        entry = out[name]
        assert entry["n"] == rows.size
        assert entry["human_mean"] == pytest.approx(np.nanmean(human[rows]))
        assert entry["human_ci95"] == pytest.approx(ci[4].tolist())
        for k in range(4):
            m = entry["metrics"][f"m{k}"]
            assert m["mean"] == pytest.approx(np.nanmean(values[rows, k]))
            assert m["ci95"] == pytest.approx(ci[k].tolist())


def test_matching_is_by_case_not_by_row_order() -> None:
    values, keys, hib, human, sources, cases = hand_data()
    perm = np.random.default_rng(0).permutation(len(sources))
    shuffled = systems_json(values[perm], keys, hib, human[perm],
                            [sources[i] for i in perm], [cases[i] for i in perm],
                            resamples=0, permutations=500, seed=0)
    ordered = systems_json(values, keys, hib, human, sources, cases, resamples=0,
                           permutations=500, seed=0)
    assert shuffled["randomization"] == ordered["randomization"]
    assert shuffled["ranking"] == ordered["ranking"]
    # Source D shares c1, c2 with A and has c9 alone.
    values_d = np.vstack([values, [[0.9, 1, 0], [0.1, 1, 0], [0.5, 1, 0]]])
    human_d = np.concatenate([human, [0, 0, 0]])
    out = systems_json(values_d, keys, hib, human_d, [*sources, "D", "D", "D"],
                       [*cases, "c2", "c1", "c9"], resamples=0, permutations=50, seed=0)
    ad = out["randomization"]["A|D"]["bleu"]
    assert ad["n_pairs"] == 2
    assert ad["n_unmatched"] == 3  # A's c3 and c4, D's c9
    assert ad["diff"] == pytest.approx((0.5 + 0.7) / 2 - (0.1 + 0.9) / 2)
    cd = out["randomization"]["C|D"]["bleu"]
    assert cd["n_pairs"] == 2 and cd["n_unmatched"] == 2  # C's c4, D's c9 (C's c3 unscored)


def test_identical_systems_give_p_one_and_clearly_different_give_minimum() -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(size=(30, 2))
    r = 999
    same = systems_json(np.vstack([a, a]), ["x", "y"], [True, True], np.zeros(60),
                        ["A"] * 30 + ["B"] * 30, [f"c{i}" for i in range(30)] * 2,
                        resamples=0, permutations=r)["randomization"]["A|B"]
    assert {k: v["p"] for k, v in same.items()} == {"x": 1.0, "y": 1.0, HUMAN_KEY: 1.0}
    assert same["x"]["diff"] == 0.0
    b = a - 1.0 + rng.normal(scale=0.05, size=a.shape)
    far = systems_json(np.vstack([a, b]), ["x", "y"], [True, True],
                       np.r_[np.zeros(30), np.full(30, 3.0)], ["A"] * 30 + ["B"] * 30,
                       [f"c{i}" for i in range(30)] * 2, resamples=0,
                       permutations=r)["randomization"]["A|B"]
    assert far["x"]["p"] == pytest.approx(1 / (r + 1))
    assert far["y"]["p"] == pytest.approx(1 / (r + 1))
    assert far[HUMAN_KEY]["p"] == pytest.approx(1 / (r + 1))
    assert far[HUMAN_KEY]["diff"] == pytest.approx(-3.0)


def test_p_values_hold_their_level_under_the_null() -> None:
    """Exchangeable systems: about 5% of tests reject at 0.05 (400 data sets)."""
    rng = np.random.default_rng(8)
    diffs = rng.normal(size=(40, 400)) - rng.normal(size=(40, 400))
    _, p, _ = paired_randomization(diffs, permutations=999, seed=1)
    assert 0.025 <= (p <= 0.05).mean() <= 0.08
    assert p.min() >= 1 / 1000


def test_kendall_matches_scipy_with_ties() -> None:
    rng = np.random.default_rng(2)
    names = [f"s{i}" for i in range(6)]
    sources = [n for n in names for _ in range(5)]
    cases = [f"c{j}" for _ in names for j in range(5)]
    noisy = rng.normal(size=30)
    tied = np.repeat([1.0, 2.0, 1.0, 3.0, 2.0, 1.0], 5)  # tied source means
    human = rng.poisson(2.0, 30).astype(float)
    values = np.column_stack([noisy, tied])
    out = systems_json(values, ["noisy", "tied"], [True, False], human, sources, cases,
                       resamples=0, permutations=10)
    h = np.array([human[5 * i:5 * i + 5].mean() for i in range(6)])
    for k, (key, sign) in enumerate([("noisy", 1.0), ("tied", -1.0)]):
        m = np.array([values[5 * i:5 * i + 5, k].mean() for i in range(6)])
        expected = stats.kendalltau(sign * m, -h).statistic
        assert out["ranking"][key]["kendall_tau"] == pytest.approx(expected)
    assert out["ranking"]["tied"]["metric_order"] == ["s0", "s2", "s5", "s1", "s4", "s3"]
    assert out["human_order"] == [names[i] for i in np.lexsort((np.arange(6), h))]


def test_nan_handling_and_corpus_only_keys() -> None:
    values, keys, hib, human, sources, cases = hand_data()
    human = human.copy()
    human[4] = NAN  # B's c1 uncounted
    corpus_only = np.full((12, 1), NAN)
    out = systems_json(np.hstack([values, corpus_only, values[:, :1]]),
                       [*keys, "bleu4_corpus", "cider"], [*hib, True, True], human, sources,
                       cases, resamples=100, permutations=200, seed=0,
                       corpus_dependent=["cider", "bertscore_f1"])
    assert out["sources"]["B"]["human_mean"] == pytest.approx((2 + 2 + 1) / 3)
    assert out["sources"]["B"]["n"] == 4
    assert out["randomization"]["A|B"][HUMAN_KEY]["n_pairs"] == 3
    assert out["randomization"]["A|B"][HUMAN_KEY]["n_unmatched"] == 1
    assert "bleu4_corpus" not in out["ranking"]
    assert "bleu4_corpus" not in out["sources"]["A"]["metrics"]
    assert "bleu4_corpus" not in out["randomization"]["A|B"]
    text = out["corpus_level"]
    assert "bleu4_corpus" in text and "cider" in text and "not recomputed" in text
    assert "bertscore_f1" not in text  # named only when present
    json.dumps(out, allow_nan=False)


def test_a_source_without_values_of_a_metric_is_left_out_of_its_ranking() -> None:
    values, keys, hib, human, sources, cases = hand_data()
    values = values.copy()
    values[8:, 0] = NAN  # C never scored on bleu
    out = systems_json(values, keys, hib, human, sources, cases, resamples=50,
                       permutations=50)
    assert out["sources"]["C"]["metrics"]["bleu"] == {"mean": None, "ci95": [None, None]}
    assert out["ranking"]["bleu"]["metric_order"] == ["A", "B"]
    assert out["ranking"]["bleu"]["kendall_tau"] == pytest.approx(1.0)
    ac = out["randomization"]["A|C"]["bleu"]
    assert ac == {"diff": None, "p": None, "n_pairs": 0, "n_unmatched": 4}


def test_one_source_and_no_resamples() -> None:
    values, keys, hib, human, _, _ = hand_data()
    out = systems_json(values[:4], keys, hib, human[:4], ["A"] * 4, ["c1", "c2", "c3", "c4"],
                       resamples=0, permutations=10)
    assert out["randomization"] == {}
    assert out["ranking"]["bleu"] == {"kendall_tau": None, "metric_order": ["A"],
                                      "kendall_ci95": [None, None], "n_systems": 1}
    assert out["sources"]["A"]["human_ci95"] == [None, None]


def test_seeded_and_reproducible() -> None:
    values, human, sources, cases = random_study(2)
    keys = ["m0", "m1", "m2", "m3"]
    first = systems_json(values, keys, [True] * 4, human, sources, cases, resamples=100,
                         permutations=100, seed=5)
    assert first == systems_json(values, keys, [True] * 4, human, sources, cases,
                                 resamples=100, permutations=100, seed=5)
    other = systems_json(values, keys, [True] * 4, human, sources, cases, resamples=100,
                         permutations=100, seed=6)
    assert other["sources"] != first["sources"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"values": np.zeros((3, 2, 1))}, "values must be"),
        ({"keys": ["a"]}, "1 keys for 2 value columns"),
        ({"keys": ["a", "a"]}, "duplicate metric keys"),
        ({"keys": ["a", HUMAN_KEY]}, "reserved"),
        ({"higher_is_better": [True]}, "1 directions"),
        ({"human": np.zeros(2)}, "human must have shape"),
        ({"sources": ["A", "B"]}, "2 sources for 3 pairs"),
        ({"cases": ["c"]}, "1 cases for 3 pairs"),
        ({"permutations": 0}, "permutations must be >= 1"),
        ({"resamples": -1}, "resamples must be >= 0"),
    ],
)
def test_bad_input_names_the_argument(change: dict, message: str) -> None:
    args = {"values": np.zeros((3, 2)), "keys": ["a", "b"], "higher_is_better": [True, True],
            "human": np.zeros(3), "sources": ["A", "B", "A"], "cases": ["c", "c", "d"]}
    kwargs = {}
    for k, v in change.items():
        (kwargs if k in ("permutations", "resamples") else args)[k] = v
    with pytest.raises(ValueError, match=message):
        systems_json(**args, **kwargs)
