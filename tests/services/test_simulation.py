"""The simulate-rating replay: service, CSV, job kind and command line."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from radconcord.backend.analysis import adaptive
from radconcord.backend.analysis.stats import orient
from radconcord.backend.cli import main
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.evaluation import simulation
from tests.helpers_adaptive import SYSTEM, build_study, rate_everything, rater_actor

RATERS = ("ra", "rb", "rc", "rd")


@pytest.fixture
def rated(db):
    truth = build_study(db, "sim", n_pairs=24, raters=RATERS, k=4, seed=3, data_seed=2)
    assert rate_everything(db, "sim", truth["counts"], RATERS) == 96
    return db, truth


def test_simulate_study_replays_the_stored_ratings(rated):
    db, truth = rated
    out = simulation.simulate_study(db, SYSTEM, study_name="sim", strategy="both", seeds=3,
                                    question="tau_diff:bleu4,radcliq_v1", resamples=50,
                                    checkpoints=6)
    assert (out.n_pairs, out.n_raters, out.n_ratings) == (24, 4, 96)
    assert out.strategies == ("random", "adaptive") and out.seeds == (0, 1, 2)
    assert out.metrics == ("bleu4", "radcliq_v1") and out.quantity == "tau_diff"
    # The replay equals the analysis function on the same arrays (the DB adds nothing).
    oriented = np.stack([orient(truth["metrics"]["bleu4"], True),
                         orient(truth["metrics"]["radcliq_v1"], False)])
    direct = adaptive.simulate(oriented, truth["counts"], strategy="adaptive", seed=1,
                               question_kind="tau_diff", checkpoints=6, resamples=50)
    got = [r for r in out.records if r["strategy"] == "adaptive" and r["seed"] == 1]
    assert [r["n_ratings"] for r in got] == direct.n_ratings.tolist()
    assert [r["ci_width"] for r in got] == pytest.approx(direct.ci_width.tolist(), abs=0)
    # Both strategies end on the same data, so at the same width.
    finals = {(r["strategy"], r["seed"]): r["ci_width"] for r in out.records
              if r["n_ratings"] == 96}
    assert len(set(finals.values())) <= 3 and finals[("random", 2)] == finals[("adaptive", 2)]
    s = out.summary
    assert s["total_ratings"] == 96 and s["final_random_ci_width"] == pytest.approx(
        np.mean([finals[("random", k)] for k in range(3)]))
    assert {"random_ratings_to_target", "adaptive_ratings_to_target", "saved_to_target",
            "at_random_checkpoints"} <= set(s)


def test_csv_has_the_documented_columns(rated, tmp_path):
    db, _ = rated
    out = simulation.simulate_study(db, SYSTEM, study_name="sim", strategy="random", seeds=2,
                                    resamples=30, checkpoints=5)
    assert out.summary is None  # one strategy: nothing to compare
    path = simulation.write_curves_csv(tmp_path / "curves.csv", out)
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["strategy", "seed", "n_ratings", "ci_width", "abs_error",
                             "quantity", "question"]
    # With every rating revealed the estimate is the full-data one.
    assert float(rows[-1]["abs_error"]) == 0.0
    assert len(rows) == len(out.records) and {r["strategy"] for r in rows} == {"random"}
    assert {r["quantity"] for r in rows} == {"max_tau"} and rows[0]["question"] == "all"
    assert float(rows[-1]["ci_width"]) == out.records[-1]["ci_width"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_bad_requests_name_what_is_wrong(rated):
    db, _ = rated
    with pytest.raises(InvalidInput, match="strategy: must be one of random, adaptive, both"):
        simulation.simulate_study(db, SYSTEM, study_name="sim", strategy="greedy")
    with pytest.raises(InvalidInput, match="seeds: must be an integer 1-1000"):
        simulation.simulate_study(db, SYSTEM, study_name="sim", seeds=0)
    with pytest.raises(InvalidInput, match="no scores for bertscore_f"):
        simulation.simulate_study(db, SYSTEM, study_name="sim",
                                  question="tau_diff:bleu4,bertscore_f")
    with pytest.raises(NotFound):
        simulation.simulate_study(db, SYSTEM, study_name="nope")
    with pytest.raises(PermissionDenied):
        simulation.simulate_study(db, rater_actor(db, "ra"), study_name="sim")


def test_unrated_or_unscored_study_is_refused(db):
    build_study(db, "empty", n_pairs=5, raters=RATERS[:2], k=2)
    with pytest.raises(InvalidInput, match="0 rated pair"):
        simulation.simulate_study(db, SYSTEM, study_name="empty")
    truth = build_study(db, "noscores", n_pairs=5, raters=RATERS[:2], k=2, scores=False)
    rate_everything(db, "noscores", truth["counts"], RATERS[:2])
    with pytest.raises(InvalidInput, match="no metric scores"):
        simulation.simulate_study(db, SYSTEM, study_name="noscores")


def test_job_result_is_the_service_result(rated):
    db, _ = rated
    job = simulation.enqueue_simulation(db, SYSTEM, study_name="sim", strategy="both",
                                        seeds=2, question="all", resamples=30)
    assert job.kind == "simulate_rating" and job.study_name == "sim"
    done = Worker(db).run_once()
    assert done.status == "done", done.error
    direct = simulation.simulate_study(db, SYSTEM, study_name="sim", strategy="both", seeds=2,
                                       question="all", resamples=30).as_json()
    result = done.result
    assert result["curves"] == direct["curves"] and result["savings"] == direct["savings"]
    assert {r["strategy"] for r in result["curves"]} == {"random", "adaptive"}
    assert set(result["curves"][0]) == set(simulation.CSV_COLUMNS)
    assert "CI width within 5% of the final" in done.message
    with pytest.raises(InvalidInput, match="expected 'all' or 'tau_diff:A,B'"):
        simulation.enqueue_simulation(db, SYSTEM, study_name="sim", question="tau_diff:x")


def test_cli_simulate_rating(rated, tmp_path, capsys):
    db, _ = rated
    url = str(db.engine.url)
    out = tmp_path / "curves.csv"
    rc = main(["simulate-rating", "--study", "sim", "--strategy", "both", "--seeds", "2",
               "--question", "tau_diff:bleu4,rougeL", "--resamples", "30", "--output",
               str(out), "--database-url", url])
    assert rc == 0
    text = capsys.readouterr().out
    assert "sim: 96 ratings (24 pairs, 4 raters), question tau_diff:bleu4,rougeL" in text
    assert "adaptive after" in text
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["strategy"], r["seed"]) for r in rows} == {
        (s, str(k)) for s in ("random", "adaptive") for k in (0, 1)}
    bad = tmp_path / "bad.csv"
    rc = main(["simulate-rating", "--study", "sim", "--question", "tau_diff:bleu4",
               "--output", str(bad), "--database-url", url])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: question: expected")
    assert not bad.exists()
    rc = main(["simulate-rating", "--study", "sim", "--output",
               str(tmp_path / "no" / "x.csv"), "--database-url", url])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
