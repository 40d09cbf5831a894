"""``python -m backend correlate`` and the analysis services on a small study built with ORM rows.

Expected values are recomputed here from the inserted numbers with scipy/numpy (references
named in each docstring); nothing is taken from the code under test.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from sqlalchemy import delete, select

from radconcord.backend.cli import main
from radconcord.backend.errors import NotFound, PermissionDenied
from radconcord.backend.services.evaluation.correlation import (
    study_agreement,
    study_correlation,
    study_failure_modes,
)
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Case, MetricScore, Pair, Rating, Report, Study, User
from radconcord.db.session import Database

N_CASES = 12
SOURCES = ("gen-a", "gen-b")
RATERS = ("r1", "r2", "r3", "r4")
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _build(tmp_path):
    """A study of 24 pairs rated by four raters under the data-selection rules of data.py.

    r1, r2: every pair assigned and completed. r3: all assigned, the first 16 completed, and
    pair 17 has ratings but is not completed (must be ignored). r4: no assignments, imported
    ratings on even positions (must count). Returns the database, its URL and the truth.
    """
    url = f"sqlite:///{tmp_path}/t.db"
    db = Database(url)
    rng = np.random.default_rng(42)
    n = N_CASES * len(SOURCES)
    # counts[rater, pair, category, significant]; NaN where the (rater, pair) does not count.
    counts = np.full((len(RATERS), n, 6, 2), np.nan)
    quality = rng.normal(size=n)
    with db.begin() as s:
        users = [User(username=u, role="rater", password_hash="x") for u in RATERS]
        s.add_all(users)
        study = Study(name="s1")
        s.add(study)
        s.flush()
        pairs = []
        for c in range(N_CASES):
            case = Case(external_id=f"case-{c}")
            s.add(case)
            s.flush()
            ref = Report(case_id=case.id, role="reference", text=f"ref {c}")
            s.add(ref)
            for j, src in enumerate(SOURCES):
                cand = Report(case_id=case.id, role="candidate", source=src, text=f"c{c}{src}")
                s.add(cand)
                s.flush()
                pos = c * len(SOURCES) + j
                pair = Pair(study_id=study.id, case_id=case.id, reference_id=ref.id,
                            candidate_id=cand.id, source=src, opaque_id=f"op{pos}",
                            position=pos, input_hash=f"h{pos:04d}")
                s.add(pair)
                pairs.append(pair)
        s.flush()
        for r, user in enumerate(users):
            for i, pair in enumerate(pairs):
                if r == 3 and i % 2:
                    continue
                if r < 3:
                    done = r < 2 or i < 16
                    s.add(Assignment(study_id=study.id, rater_id=user.id, pair_id=pair.id,
                                     order_index=i, completed_at=T0 if done else None))
                    if r == 2 and i >= 16 and i != 17:
                        continue
                else:
                    done = True
                lam = np.exp(0.6 * quality[i]) * (1.6 if pair.source == "gen-b" else 0.8)
                cell = rng.poisson(lam / 3, size=(6, 2))
                # A few cells with an explicit zero row, most zeros simply absent.
                for cat in range(6):
                    for sig in range(2):
                        if cell[cat, sig] or (cat == 0 and sig == 0):
                            s.add(Rating(rater_id=user.id, pair_id=pair.id, category=cat + 1,
                                         significant=bool(sig), count=int(cell[cat, sig])))
                if done:
                    counts[r, i] = cell
        # Metric scores: bleu4 (higher better, one NULL), radcliq_v1 (lower better), rougeL
        # with two signatures (the full one must win over a newer partial one), and the four
        # RadCliQ inputs for the refit.
        metric = {}
        noise = lambda scale: rng.normal(scale=scale, size=n)  # noqa: E731
        metric["bleu4"] = -quality + noise(0.8)
        metric["bleu4"][5] = np.nan
        metric["radcliq_v1"] = quality + noise(0.5)
        metric["rougeL"] = np.round(-quality + noise(1.0), 1)  # ties
        for k in ("radgraph_combined", "bertscore_f", "semb", "bleu2_radcliq"):
            metric[k] = -quality + noise(1.0)
        for key, vals in metric.items():
            for i in range(n):
                v = None if np.isnan(vals[i]) else float(vals[i])
                s.add(MetricScore(input_hash=f"h{i:04d}", family=key, key=key,
                                  signature_hash=f"sig-{key}", signature=f"{key}|v1", value=v,
                                  created_at=T0))
        for i in range(10):
            s.add(MetricScore(input_hash=f"h{i:04d}", family="rouge", key="rougeL",
                              signature_hash="sig-rougeL-new", signature="rougeL|v2",
                              value=0.5, created_at=T0 + dt.timedelta(days=1)))
        # A score for a pair outside the study must not leak in.
        s.add(MetricScore(input_hash="other", family="bleu", key="bleu4", signature_hash="x",
                          signature="x", value=1.0))
    truth = {"counts": counts, "metric": metric, "sources": np.array(
        [SOURCES[i % 2] for i in range(n)]), "cases": np.array([i // 2 for i in range(n)])}
    return db, url, truth


@pytest.fixture
def study(tmp_path):
    db, url, truth = _build(tmp_path)
    yield db, url, truth
    db.dispose()


def _mean_errors(counts, significant=False, category=None):
    c = counts if category is None else counts[:, :, category - 1 : category, :]
    c = c[..., 1:] if significant else c
    per_rater = c.sum(axis=(2, 3))
    return np.nanmean(per_rater, axis=0)


def _scipy_tau_rho(x, y):
    m = np.isfinite(x) & np.isfinite(y)
    return stats.kendalltau(x[m], y[m]).statistic, stats.spearmanr(x[m], y[m]).statistic


def _loop_ci(x, y, n, resamples, seed):
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    taus = []
    for row in idx:
        xs, ys = x[row], y[row]
        m = np.isfinite(xs)
        taus.append(stats.kendalltau(xs[m], ys[m]).statistic)
    taus = np.array(taus)
    return np.quantile(taus[np.isfinite(taus)], [0.025, 0.975])


def test_correlate_cli_layout_and_values(study, tmp_path):
    """CLI JSON vs scipy.stats.kendalltau / spearmanr on the per-pair rater means (1e-12), and
    the bootstrap CI vs a plain scipy loop over the same default_rng(seed) draws (1e-12)."""
    db, url, truth = study
    out = tmp_path / "result.json"
    rc = main(["correlate", "--study", "s1", "--output", str(out), "--database-url", url,
               "--bootstrap", "200", "--seed", "3"])
    assert rc == 0
    res = json.loads(out.read_text())
    for field in ("study", "target", "n_pairs", "seed", "resamples", "metrics", "per_category",
                  "per_rater", "per_source", "agreement", "failure_modes", "radcliq_refit",
                  "published"):
        assert field in res
    assert (res["study"], res["target"], res["seed"], res["resamples"]) == ("s1", "total", 3, 200)
    assert res["n_pairs"] == 24
    assert set(res["per_rater"]) == set(RATERS)
    assert res["per_rater"]["r3"]["n_pairs"] == 16  # pair 17 in progress, 18.. not rated
    assert res["per_rater"]["r4"]["n_pairs"] == 12  # imported, no assignments

    y = -_mean_errors(truth["counts"])
    for key, vals in truth["metric"].items():
        entry = res["metrics"][key]
        assert set(entry) >= {"kendall_tau_b", "kendall_ci95", "spearman", "spearman_ci95",
                              "higher_is_better", "signature", "n"}
        hib = key != "radcliq_v1"
        assert entry["higher_is_better"] is hib
        x = vals if hib else -vals
        tau, rho = _scipy_tau_rho(x, y)
        assert entry["kendall_tau_b"] == pytest.approx(tau, abs=1e-12)
        assert entry["spearman"] == pytest.approx(rho, abs=1e-12)
        assert entry["n"] == int(np.isfinite(x).sum())
        assert entry["signature"] == f"{key}|v1"
        assert entry["kendall_tau_b"] > 0  # every metric was built to agree
    lo, hi = _loop_ci(truth["metric"]["bleu4"], y, 24, 200, 3)
    assert res["metrics"]["bleu4"]["kendall_ci95"] == pytest.approx([lo, hi], abs=1e-12)
    assert res["metrics"]["rougeL"]["n_signatures"] == 2

    cat1 = -_mean_errors(truth["counts"], category=1)
    tau, _ = _scipy_tau_rho(truth["metric"]["bleu4"], cat1)
    assert res["per_category"]["1"]["metrics"]["bleu4"]["kendall_tau_b"] == pytest.approx(tau)

    r4 = -np.nansum(truth["counts"][3], axis=(1, 2))
    r4[np.isnan(truth["counts"][3, :, 0, 0])] = np.nan
    tau, _ = _scipy_tau_rho(truth["metric"]["radcliq_v1"] * -1, r4)
    assert res["per_rater"]["r4"]["metrics"]["radcliq_v1"]["kendall_tau_b"] == pytest.approx(tau)

    mask = truth["sources"] == "gen-b"
    tau, _ = _scipy_tau_rho(truth["metric"]["bleu4"][mask], y[mask])
    assert res["per_source"]["gen-b"]["metrics"]["bleu4"]["kendall_tau_b"] == pytest.approx(tau)

    refit = res["radcliq_refit"]
    assert refit["available"] is True and refit["n"] == 24
    assert set(refit["coef"]) == {"radgraph_combined", "bertscore_f", "semb", "bleu2_radcliq"}
    xr = np.stack([truth["metric"][k] for k in refit["columns"]], axis=1)
    design = np.column_stack([np.ones(24), xr])
    beta, *_ = np.linalg.lstsq(design, -y, rcond=None)
    resid = -y - design @ beta
    r2 = 1 - (resid**2).sum() / ((-y - (-y).mean()) ** 2).sum()
    assert refit["r2"] == pytest.approx(r2, abs=1e-10)

    alpha = res["agreement"]["total"]["krippendorff_alpha_interval"]
    import krippendorff

    per_rater = truth["counts"].sum(axis=(2, 3))
    assert alpha == pytest.approx(
        krippendorff.alpha(per_rater, level_of_measurement="interval"), abs=1e-10
    )
    keys = {e["key"] for e in res["published"]["entries"]}
    assert {"bleu4", "radcliq_v1", "green"} <= keys
    bleu_pub = next(e for e in res["published"]["entries"] if e["key"] == "bleu4")
    assert bleu_pub["kendall_tau_b"] == 0.345
    assert bleu_pub["ours"] == res["metrics"]["bleu4"]["kendall_tau_b"]
    fm = res["failure_modes"]
    assert fm["sources"] == ["gen-a", "gen-b"]
    assert len(fm["tests"]) == 7 * 2


def test_correlate_significant_only_and_metric_subset(study, tmp_path):
    """Significant-only target vs scipy.stats.kendalltau (1e-12); family name expansion."""
    db, url, truth = study
    out = tmp_path / "sig.json"
    rc = main(["correlate", "--study", "s1", "--metrics", "radcliq_v1,bleu4",
               "--significant-only", "--bootstrap", "0", "--output", str(out),
               "--database-url", url])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["target"] == "significant"
    assert list(res["metrics"]) == ["radcliq_v1", "bleu4"]
    assert res["resamples"] == 0
    assert res["metrics"]["bleu4"]["kendall_ci95"] == [None, None]
    y = -_mean_errors(truth["counts"], significant=True)
    tau, _ = _scipy_tau_rho(-truth["metric"]["radcliq_v1"], y)
    assert res["metrics"]["radcliq_v1"]["kendall_tau_b"] == pytest.approx(tau, abs=1e-12)
    # The refit still finds its inputs although they were not requested.
    assert res["radcliq_refit"]["available"] is True


def test_correlate_user_errors_write_nothing(study, tmp_path, capsys):
    """Unknown study / unscored metric: exit 2, one error line, no output file."""
    db, url, _ = study
    out = tmp_path / "bad.json"
    assert main(["correlate", "--study", "nope", "--output", str(out),
                 "--database-url", url]) == 2
    assert "no study named 'nope'" in capsys.readouterr().err
    assert main(["correlate", "--study", "s1", "--metrics", "meteor", "--output", str(out),
                 "--database-url", url]) == 2
    assert "no scores for meteor" in capsys.readouterr().err
    assert not out.exists()
    assert list(tmp_path.glob(".bad.json*")) == []


def test_services_admin_only_and_plain_data(study):
    """Services: admin only; values equal the report's; agreement vs krippendorff (1e-10)."""
    db, _, truth = study
    rater = Actor(user_id=1, username="r1", role="rater")
    with pytest.raises(PermissionDenied):
        study_correlation(db, rater, study_name="s1")
    with pytest.raises(PermissionDenied):
        study_agreement(db, rater, study_name="s1")
    with pytest.raises(PermissionDenied):
        study_failure_modes(db, rater, study_name="s1")
    admin = Actor.system()
    with pytest.raises(NotFound):
        study_correlation(db, admin, study_name="missing")

    corr = study_correlation(db, admin, study_name="s1", resamples=50, seed=1)
    taus = [m.kendall_tau_b for m in corr.metrics]
    assert taus == sorted(taus, reverse=True)
    bleu = next(m for m in corr.metrics if m.key == "bleu4")
    assert ("ER2Score paper", 0.345) in bleu.published
    assert bleu.kendall_lo <= bleu.kendall_tau_b <= bleu.kendall_hi

    agr = study_agreement(db, admin, study_name="s1", significant_only=True)
    assert [r.scope for r in agr.rows] == ["total", "1", "2", "3", "4", "5", "6"]
    import krippendorff

    sig = truth["counts"][..., 1].sum(axis=2)
    assert agr.rows[0].alpha_ratio == pytest.approx(
        krippendorff.alpha(sig, level_of_measurement="ratio"), abs=1e-10
    )
    # Complete blocks: {r1..r4} on even pairs < 16 (8) ties {r1, r2, r3} on odd ones (8);
    # the tie goes to more raters.
    assert (agr.rows[0].icc_k, agr.rows[0].icc_n_pairs) == (4, 8)

    fm = study_failure_modes(db, admin, study_name="s1", fdr=0.1)
    assert fm.sources == ("gen-a", "gen-b")
    total = next(t for t in fm.tests if t.category == "total" and t.greater == "gen-b")
    y = _mean_errors(truth["counts"])
    ref = stats.ttest_ind(y[truth["sources"] == "gen-b"], y[truth["sources"] == "gen-a"],
                          equal_var=False, alternative="greater")
    assert total.p == pytest.approx(ref.pvalue, rel=1e-10)
    assert total.mean_greater > total.mean_less


# --- ceiling, pairwise and systems sections (issue 11) -----------------------------------


def _rater_totals(counts, significant=False):
    """(R, n) totals per rater from the inserted cells, NaN where a (rater, pair) is not counted."""
    c = counts[..., 1:] if significant else counts
    return c.sum(axis=(2, 3))


def _ceiling_by_hand(totals):
    """Per rater: scipy kendalltau(rater, nanmean of the others) on the pairs both have."""
    taus, rhos = [], []
    for r in range(totals.shape[0]):
        others = np.delete(totals, r, axis=0)
        n_o = np.isfinite(others).sum(axis=0)
        om = np.where(n_o > 0, np.nansum(others, axis=0) / np.maximum(n_o, 1), np.nan)
        ok = np.isfinite(totals[r]) & np.isfinite(om)
        taus.append(stats.kendalltau(totals[r, ok], om[ok]).statistic)
        rhos.append(stats.spearmanr(totals[r, ok], om[ok]).statistic)
    return np.array(taus), np.array(rhos)


def _loop_taus(x, y, unit_of_pair, resamples, seed):
    """Tau of each row of x on the documented draws: default_rng(seed).integers over the
    units (sorted labels), every pair of a drawn unit entering (scipy.stats.kendalltau)."""
    n_units = int(unit_of_pair.max()) + 1
    idx = np.random.default_rng(seed).integers(0, n_units, size=(resamples, n_units))
    members = [np.flatnonzero(unit_of_pair == u) for u in range(n_units)]
    out = np.empty((resamples, x.shape[0]))
    for b, row in enumerate(idx):
        pairs = np.concatenate([members[u] for u in row])
        for k in range(x.shape[0]):
            xs, ys = x[k, pairs], y[pairs]
            ok = np.isfinite(xs)
            out[b, k] = stats.kendalltau(xs[ok], ys[ok]).statistic
    return out


def _bootstrap_p(d):
    d = d[np.isfinite(d)]
    return min(1.0, 2 * min(1 + np.sum(d <= 0), 1 + np.sum(d >= 0)) / (d.size + 1))


def test_correlate_ceiling_pairwise_systems(study, tmp_path):
    """Ceiling = mean over raters of scipy kendalltau(rater, others' mean) (1e-12), its CI
    from a plain loop over the same draws, pct_of_ceiling = tau / ceiling, pairwise p and
    CI of one pair from a scipy loop on the same resamples, Holm by hand; the systems section
    is present; the earlier keys are all still there."""
    db, url, truth = study
    out = tmp_path / "r.json"
    assert main(["correlate", "--study", "s1", "--output", str(out), "--database-url", url,
                 "--bootstrap", "120", "--seed", "5"]) == 0
    res = json.loads(out.read_text())
    assert (res["unit"], res["correction"]) == ("pair", "holm")
    ceil = res["ceiling"]
    assert set(ceil) >= {"kendall_tau_b", "kendall_ci95", "spearman", "spearman_ci95",
                         "per_rater", "per_rater_spearman", "per_category", "n_raters", "unit"}
    totals = _rater_totals(truth["counts"])
    taus, rhos = _ceiling_by_hand(totals)
    assert ceil["per_rater"] == pytest.approx(dict(zip(RATERS, taus, strict=True)), abs=1e-12)
    assert ceil["per_rater_spearman"] == pytest.approx(dict(zip(RATERS, rhos, strict=True)),
                                                       abs=1e-12)
    assert ceil["kendall_tau_b"] == pytest.approx(taus.mean(), abs=1e-12)
    assert ceil["spearman"] == pytest.approx(rhos.mean(), abs=1e-12)
    assert (ceil["n_raters"], ceil["unit"]) == (4, "pair")
    for name in RATERS:  # the same statistic as the per-rater section's
        assert ceil["per_rater"][name] == pytest.approx(
            res["per_rater"][name]["kendall_vs_other_raters"], abs=1e-12)
    cat2 = _ceiling_by_hand(_rater_totals(truth["counts"][:, :, 1:2, :]))[0]
    assert ceil["per_category"]["2"] == pytest.approx(cat2.mean(), abs=1e-12)
    # CI: per resample, the mean over raters of scipy's tau on the resampled pairs.
    idx = np.random.default_rng(5).integers(0, 24, size=(120, 24))
    reps = np.array([_ceiling_by_hand(totals[:, row])[0].mean() for row in idx])
    lo, hi = np.quantile(reps[np.isfinite(reps)], [0.025, 0.975])
    assert ceil["kendall_ci95"] == pytest.approx([lo, hi], abs=1e-12)
    for key, entry in res["metrics"].items():
        assert entry["pct_of_ceiling"] == pytest.approx(
            entry["kendall_tau_b"] / ceil["kendall_tau_b"], abs=1e-12), key

    pw = res["pairwise"]
    keys = list(res["metrics"])
    assert (pw["unit"], pw["correction"], pw["resamples"]) == ("pair", "holm", 120)
    assert len(pw["pairs"]) == len(keys) * (len(keys) - 1) // 2 == 21
    y = -_mean_errors(truth["counts"])
    x = np.stack([truth["metric"][k] * (-1 if k == "radcliq_v1" else 1) for k in keys])
    loop = _loop_taus(x, y, np.arange(24), 120, 5)
    raw = {}
    for name, entry in pw["pairs"].items():
        a, b = (keys.index(k) for k in name.split("|"))
        assert entry["tau_diff"] == pytest.approx(
            res["metrics"][keys[a]]["kendall_tau_b"] - res["metrics"][keys[b]]["kendall_tau_b"],
            abs=1e-12)
        d = loop[:, a] - loop[:, b]
        assert entry["p"] == pytest.approx(_bootstrap_p(d), abs=1e-15), name
        assert entry["ci95"] == pytest.approx(
            list(np.quantile(d[np.isfinite(d)], [0.025, 0.975])), abs=1e-12), name
        assert entry["williams_p"] is None or 0.0 <= entry["williams_p"] <= 1.0
        raw[name] = entry["p"]
    ordered = sorted(raw, key=raw.get)
    running = 0.0
    for rank, name in enumerate(ordered):  # Holm by hand
        running = max(running, min(1.0, (21 - rank) * raw[name]))
        assert pw["pairs"][name]["p_adjusted"] == pytest.approx(running, abs=1e-15)

    systems = res["systems"]
    assert set(systems["sources"]) == {"gen-a", "gen-b"}
    assert set(systems) >= {"sources", "ranking", "human_order", "randomization",
                            "permutations", "corpus_level"}
    # gen-b was built with twice the error rate: the radiologists rank gen-a first.
    assert systems["human_order"] == ["gen-a", "gen-b"]
    mask = truth["sources"] == "gen-b"
    assert systems["sources"]["gen-b"]["human_mean"] == pytest.approx(
        _mean_errors(truth["counts"])[mask].mean(), abs=1e-12)

    # The earlier layout is still there, with the metric CIs from the same pair draws.
    for field in ("study", "target", "n_pairs", "seed", "resamples", "cluster", "level",
                  "n_raters", "n_pairs_in_study", "metrics", "per_category", "per_rater",
                  "per_source", "agreement", "failure_modes", "radcliq_refit", "published"):
        assert field in res
    assert res["metrics"]["bleu4"]["kendall_ci95"] == pytest.approx(
        list(_loop_ci(truth["metric"]["bleu4"], y, 24, 120, 5)), abs=1e-12)


def test_correlate_unit_case_and_bh(study, tmp_path):
    """--unit case resamples cases (sorted labels, default_rng(seed)) for the ceiling and
    pairwise sections while --cluster keeps the metric CIs by pair; BH by hand."""
    db, url, truth = study
    out = tmp_path / "c.json"
    assert main(["correlate", "--study", "s1", "--output", str(out), "--database-url", url,
                 "--bootstrap", "80", "--seed", "2", "--unit", "case", "--correction", "bh",
                 "--metrics", "bleu4,radcliq_v1,rougeL"]) == 0
    res = json.loads(out.read_text())
    assert (res["unit"], res["cluster"], res["correction"]) == ("case", "pair", "bh")
    assert res["ceiling"]["unit"] == res["pairwise"]["unit"] == "case"
    keys = list(res["metrics"])
    y = -_mean_errors(truth["counts"])
    x = np.stack([truth["metric"][k] * (-1 if k == "radcliq_v1" else 1) for k in keys])
    _, unit_of_pair = np.unique([f"case-{c}" for c in truth["cases"]], return_inverse=True)
    loop = _loop_taus(x, y, unit_of_pair, 80, 2)
    ps = {}
    for name, entry in res["pairwise"]["pairs"].items():
        a, b = (keys.index(k) for k in name.split("|"))
        d = loop[:, a] - loop[:, b]
        assert entry["p"] == pytest.approx(_bootstrap_p(d), abs=1e-15), name
        ps[name] = entry["p"]
    ordered = sorted(ps, key=ps.get)
    m = len(ordered)
    scaled = [ps[name] * m / (rank + 1) for rank, name in enumerate(ordered)]
    for rank, name in enumerate(ordered):  # BH by hand: running minimum from the top
        expected = min(1.0, min(scaled[rank:]))
        assert res["pairwise"]["pairs"][name]["p_adjusted"] == pytest.approx(expected,
                                                                             abs=1e-15)
    # Metric CIs stay pair-resampled (cluster=pair), as before.
    assert res["metrics"]["bleu4"]["kendall_ci95"] == pytest.approx(
        list(_loop_ci(truth["metric"]["bleu4"], y, 24, 80, 2)), abs=1e-12)

    out2 = tmp_path / "rp.json"
    assert main(["correlate", "--study", "s1", "--output", str(out2), "--database-url", url,
                 "--bootstrap", "40", "--unit", "rater_pair", "--metrics", "bleu4,rougeL"]) == 0
    rp = json.loads(out2.read_text())
    assert rp["ceiling"]["unit"] == rp["pairwise"]["unit"] == "rater_pair"
    lo, hi = rp["ceiling"]["kendall_ci95"]
    assert lo < rp["ceiling"]["kendall_tau_b"] < hi
    assert rp["ceiling"]["kendall_tau_b"] == pytest.approx(res["ceiling"]["kendall_tau_b"])


def test_correlate_new_options_reject_bad_values(study, tmp_path, capsys):
    db, url, _ = study
    out = tmp_path / "bad.json"
    with pytest.raises(SystemExit) as exc:
        main(["correlate", "--study", "s1", "--output", str(out), "--database-url", url,
              "--unit", "rater"])
    assert exc.value.code == 2
    assert "--unit" in capsys.readouterr().err
    assert main(["correlate", "--study", "s1", "--output", str(out), "--database-url", url,
                 "--permutations", "0"]) == 2
    assert "--permutations must be >= 1" in capsys.readouterr().err
    assert not out.exists()
    admin = Actor.system()
    from radconcord.backend.errors import InvalidInput

    with pytest.raises(InvalidInput, match="correction must be one of"):
        study_correlation(db, admin, study_name="s1", resamples=0, correction="bonferroni")
    with pytest.raises(InvalidInput, match="unit must be one of"):
        study_correlation(db, admin, study_name="s1", resamples=0, unit="rater")


def test_ceiling_null_with_two_raters(tmp_path):
    """A study with fewer than 3 counted raters has ceiling null and pct_of_ceiling null."""
    db, _, _ = _build(tmp_path)
    try:
        with db.begin() as s:
            for name in ("r3", "r4"):
                uid = s.scalar(select(User.id).where(User.username == name))
                s.execute(delete(Rating).where(Rating.rater_id == uid))
                s.execute(delete(Assignment).where(Assignment.rater_id == uid))
        corr = study_correlation(db, Actor.system(), study_name="s1", resamples=0)
    finally:
        db.dispose()
    assert corr.report["n_raters"] == 2
    assert corr.report["ceiling"] is None
    assert all(m.pct_of_ceiling is None for m in corr.metrics)
    assert all(e["pct_of_ceiling"] is None for e in corr.report["metrics"].values())


# --- the ReXVal-format fixture: the documented JSON from the files themselves -------------

REXVAL = Path(__file__).resolve().parent.parent / "fixtures" / "rexval_mini"
REXVAL_TYPES = ("radgraph", "bertscore", "s_emb", "bleu")  # the file's column order


def _rexval_totals(significant=False):
    """(raters, pairs) error totals straight from the ratings CSV (csv module); pair
    position = study_number * 4 + index of candidate_type, as the importer numbers pairs."""
    rows = list(csv.DictReader((REXVAL / "6_valid_raters_per_rater_error_categories.csv")
                               .open(newline="")))
    n_studies = 1 + max(int(r["study_number"]) for r in rows)
    n_raters = 1 + max(int(r["rater_index"]) for r in rows)
    totals = np.zeros((n_raters, n_studies * len(REXVAL_TYPES)))
    for r in rows:
        if significant and r["clinically_significant"] != "True":
            continue
        pos = int(r["study_number"]) * len(REXVAL_TYPES) + REXVAL_TYPES.index(r["candidate_type"])
        totals[int(r["rater_index"]), pos] += int(r["num_errors"])
    return totals


def _williams_by_hand(r12, r13, r23, n):
    det = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    rbar = (r12 + r13) / 2
    t = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)
                                / (2 * (n - 1) / (n - 3) * det + rbar**2 * (1 - r23) ** 3))
    return 2 * stats.t.sf(abs(t), n - 3)


@pytest.mark.parametrize("significant", [False, True])
def test_rexval_fixture_gives_the_documented_sections(db, monkeypatch, significant):
    """Import tests/fixtures/rexval_mini, store three metric columns, and check the ceiling,
    pct_of_ceiling, pairwise and systems sections of study_correlation's report against a
    direct computation from the CSV (scipy.stats.kendalltau / spearmanr, Williams' formula)."""
    from argon2 import PasswordHasher

    from radconcord.backend.services.transfer import imports
    from radconcord.backend.services.transfer.imports import import_rexval

    monkeypatch.setattr(imports, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024,
                                                           parallelism=1))
    admin = Actor.system()
    import_rexval(db, admin, gt_path=REXVAL / "50_samples_gt_and_candidates.csv",
                  ratings_path=REXVAL / "6_valid_raters_per_rater_error_categories.csv",
                  study_name="rexval")
    totals = _rexval_totals(significant)
    n = totals.shape[1]
    human = totals.mean(axis=0)
    rng = np.random.default_rng(0)
    metric = {"bleu4": -human + rng.normal(scale=1.0, size=n),
              "rougeL": -human + rng.normal(scale=2.0, size=n),
              "radcliq_v1": human + rng.normal(scale=0.5, size=n)}
    with db.begin() as s:
        pairs = s.execute(select(Pair.position, Pair.input_hash, Pair.source)
                          .order_by(Pair.position)).all()
        assert [p.position for p in pairs] == list(range(n))
        for key, vals in metric.items():
            for p in pairs:
                s.add(MetricScore(input_hash=p.input_hash, family=key, key=key,
                                  signature_hash=f"sig-{key}", signature=f"{key}|v1",
                                  value=float(vals[p.position]), created_at=T0))
    corr = study_correlation(db, admin, study_name="rexval", significant_only=significant,
                             resamples=200, seed=1)
    rep = corr.report
    assert rep["target"] == ("significant" if significant else "total")
    assert rep["n_pairs"] == n == 12 and rep["n_raters"] == 3

    ceil = rep["ceiling"]
    assert set(ceil) >= {"kendall_tau_b", "kendall_ci95", "spearman", "spearman_ci95",
                         "per_rater", "per_rater_spearman", "per_category", "n_raters", "unit"}
    assert set(ceil["per_category"]) == {"1", "2", "3", "4", "5", "6"}
    taus = []
    for r in range(3):
        others = np.delete(totals, r, axis=0).mean(axis=0)
        tau = stats.kendalltau(totals[r], others).statistic
        assert ceil["per_rater"][f"rexval_rater_{r}"] == pytest.approx(tau, abs=1e-12)
        assert ceil["per_rater_spearman"][f"rexval_rater_{r}"] == pytest.approx(
            stats.spearmanr(totals[r], others).statistic, abs=1e-12)
        taus.append(tau)
    assert ceil["kendall_tau_b"] == pytest.approx(np.mean(taus), abs=1e-12)
    lo, hi = ceil["kendall_ci95"]
    assert lo <= ceil["kendall_tau_b"] <= hi
    assert (ceil["n_raters"], ceil["unit"]) == (3, "pair")

    x = {k: (-v if k == "radcliq_v1" else v) for k, v in metric.items()}
    row = {m.key: m for m in corr.metrics}
    for key, vals in x.items():
        tau = stats.kendalltau(vals, -human).statistic
        assert rep["metrics"][key]["kendall_tau_b"] == pytest.approx(tau, abs=1e-12)
        assert rep["metrics"][key]["pct_of_ceiling"] == pytest.approx(
            tau / np.mean(taus), abs=1e-12)
        assert row[key].pct_of_ceiling == rep["metrics"][key]["pct_of_ceiling"]

    pw = rep["pairwise"]
    assert (pw["unit"], pw["correction"], pw["resamples"]) == ("pair", "holm", 200)
    assert len(pw["pairs"]) == 3
    for name, entry in pw["pairs"].items():
        assert set(entry) >= {"tau_diff", "ci95", "p", "p_adjusted", "williams_p"}
        a, b = name.split("|")
        assert entry["tau_diff"] == pytest.approx(
            stats.kendalltau(x[a], -human).statistic - stats.kendalltau(x[b], -human).statistic,
            abs=1e-12)
        assert 0 < entry["p"] <= entry["p_adjusted"] <= 1
        r_ya = stats.spearmanr(-human, x[a]).statistic
        r_yb = stats.spearmanr(-human, x[b]).statistic
        r_ab = stats.spearmanr(x[a], x[b]).statistic
        assert entry["williams_p"] == pytest.approx(_williams_by_hand(r_ya, r_yb, r_ab, n),
                                                    rel=1e-9)

    systems = rep["systems"]
    assert set(systems["sources"]) == set(REXVAL_TYPES)
    sources = np.array([p.source for p in pairs])
    for src in REXVAL_TYPES:
        assert systems["sources"][src]["n"] == 3
        assert systems["sources"][src]["human_mean"] == pytest.approx(
            human[sources == src].mean(), abs=1e-12)
    assert set(systems["ranking"]) == set(metric)
    assert len(systems["randomization"]) == 6  # 4 sources: 6 pairs of sources
    # JSON-safe: no NaN or numpy values anywhere in the new sections.
    assert json.loads(json.dumps(rep, allow_nan=False))["ceiling"] == ceil
