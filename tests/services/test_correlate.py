"""``python -m backend correlate`` and the analysis services on a small study built with ORM rows.

Expected values are recomputed here from the inserted numbers with scipy/numpy (references
named in each docstring); nothing is taken from the code under test.
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest
from scipy import stats

from backend.cli import main
from backend.services.analysis import study_agreement, study_correlation, study_failure_modes
from backend.services.errors import NotFound, PermissionDenied
from backend.services.types import Actor
from db.models import Assignment, Case, MetricScore, Pair, Rating, Report, Study, User
from db.session import Database

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
