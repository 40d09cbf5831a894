"""``radconcord benchmark`` on ReXVal- and RadPref-shaped folders the tests write themselves.

The figures are checked against what the project's other entry points compute for the same
data: ``correlate`` (cluster by case) on the study ``import-rexval`` makes of the folder, and
``study_preference_stats`` on the study ``import-radpref`` makes. The folders are synthetic
(made-up texts and counts, in the published layouts written by the project's own writers
and ``tests/helpers_radpref.py``); the real data sets stay outside the repository.
"""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from radconcord.backend import cli
from radconcord.backend.analysis import leaderboard as lb
from radconcord.backend.datasets import rexval
from radconcord.backend.errors import InvalidInput, PermissionDenied
from radconcord.backend.metrics import registry
from radconcord.backend.scoring.jobs import study_id_by_name, study_pairs
from radconcord.backend.scoring.runner import score
from radconcord.backend.services.annotation import pairwise
from radconcord.backend.services.evaluation import benchmark
from radconcord.backend.services.evaluation.correlation import correlate_study
from radconcord.backend.services.transfer.imports import import_rexval
from radconcord.backend.services.transfer.radpref import import_radpref
from radconcord.backend.types import Actor
from radconcord.backend.util import file_sha256
from radconcord.db.models import MetricScore
from tests.helpers_radpref import write_set

ADMIN = Actor.system()
METRICS = ["bleu", "rouge"]
KEYS = ["bleu1", "bleu2", "bleu3", "bleu4", "rouge1", "rouge2", "rougeL"]
FINDINGS = (
    "Heart size is normal.", "No pleural effusion.", "No pneumothorax.",
    "Small left pleural effusion.", "Mild pulmonary edema.", "Right lower lobe opacity.",
    "Moderate cardiomegaly.", "Stable nodule in the right upper lobe.",
    "Endotracheal tube 4 cm above the carina.", "Degenerative changes of the spine.",
)
TYPES = ("radgraph", "bertscore", "s_emb", "bleu")


def _reports(rng: np.random.Generator, n_wrong: int) -> tuple[str, str]:
    """A reference of three findings and a candidate with ``n_wrong`` of them replaced."""
    picks = rng.choice(len(FINDINGS), size=6, replace=False)
    ref = [FINDINGS[i] for i in picks[:3]]
    cand = list(ref)
    for j in range(n_wrong):
        cand[j] = FINDINGS[picks[3 + j]]
    return " ".join(ref), " ".join(cand)


def write_rexval(folder: Path, n_studies: int = 10, n_raters: int = 4, seed: int = 0) -> Path:
    """ReXVal's two files (its public layout) for ``n_studies`` x 4 candidate types."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    gt_rows, rating_rows = [], []
    for s in range(n_studies):
        reference = None
        candidates = []
        wrong = rng.integers(0, 4, size=len(TYPES))
        for w in wrong:
            ref, cand = _reports(np.random.default_rng((seed, s)), int(w))
            reference = ref
            candidates.append(cand)
        gt_rows.append(rexval.GtRow(f"s{50000000 + s}", reference, tuple(candidates)))
        for t, ctype in enumerate(TYPES):
            for r in range(n_raters):
                for category in range(1, 7):
                    noisy = max(0, int(wrong[t]) + int(rng.integers(-1, 2))) if category == 1 \
                        else int(rng.integers(0, 2) * (rng.random() < 0.2))
                    sig = noisy // 2
                    rating_rows.append(rexval.RatingRow(s, ctype, category, r, True, sig))
                    rating_rows.append(rexval.RatingRow(s, ctype, category, r, False,
                                                        noisy - sig))
    rexval.write_gt(folder / rexval.GT_FILENAME, rexval.GtFile(TYPES, tuple(gt_rows)))
    rexval.write_ratings(folder / rexval.RATINGS_FILENAME, rexval.RatingsFile(tuple(rating_rows)))
    return folder


def write_radpref(root: Path, n_cases: int = 12, n_annotators: int = 3, seed: int = 0) -> Path:
    """RadPref's files (published layout, tests/helpers_radpref.py's writer)."""
    rng = np.random.default_rng(seed)
    cases, users = [], {}
    wrong = rng.integers(0, 4, size=(n_cases, 2))
    for c in range(n_cases):
        picks = np.random.default_rng((seed, c))
        ref, c1 = _reports(picks, int(wrong[c, 0]))
        _, c2 = _reports(np.random.default_rng((seed, c)), int(wrong[c, 1]))
        cases.append({
            "id": f"case-{c:03d}", "ground_truth_report": ref,
            "ground_truth_findings": ref.split(". "), "C1_report": c1,
            "C1_findings": c1.split(". "), "C1_source": "gen-m", "C2_report": c2,
            "C2_findings": c2.split(". "), "C2_source": "gen-g",
        })
    for u in range(n_annotators):
        annotations = {}
        for c in range(n_cases):
            if u == n_annotators - 1 and c % 4 == 3:
                continue  # the last annotator skipped some cases
            annotations[f"case-{c:03d}"] = {
                cand: {"finding_errors": {}, "missing_findings": {},
                       "rating": int(np.clip(5 - wrong[c, i] + rng.integers(-1, 2), 1, 5))}
                for i, cand in enumerate(("C1", "C2"))}
        users[f"user_{u + 1}.json"] = {"user_id": str(u + 1), "annotations": annotations}
    write_set(root, users=users, cases=cases)
    return root


@pytest.fixture
def rexval_dir(tmp_path: Path) -> Path:
    return write_rexval(tmp_path / "rexval")


@pytest.fixture
def radpref_dir(tmp_path: Path) -> Path:
    return write_radpref(tmp_path / "radpref")


def _run(db, datasets, metrics=METRICS, bootstrap=200, seed=3, **kwargs):
    return benchmark.run_benchmark(db, ADMIN, datasets=datasets, metrics=metrics,
                                   bootstrap=bootstrap, seed=seed, **kwargs)


def _score_study(db, name, metrics=METRICS):
    with db.read() as s:
        study_id = study_id_by_name(s, name)
    score(study_pairs(db, study_id), metrics, db=db)


def _rows(target_block):
    return {r["key"]: r for r in target_block["rows"]}


def test_rexval_folder_gives_correlates_figures_for_the_imported_study(db, rexval_dir):
    folder = _run(db, [f"rexval={rexval_dir}"]).doc["datasets"][0]
    import_rexval(db, ADMIN, gt_path=rexval_dir / rexval.GT_FILENAME,
                  ratings_path=rexval_dir / rexval.RATINGS_FILENAME, study_name="RX")
    _score_study(db, "RX")
    for target, significant in (("total", False), ("significant", True)):
        corr = correlate_study(db, study_name="RX", metrics=KEYS, significant_only=significant,
                               bootstrap=200, seed=3, cluster="case")
        tb = folder["board"]["targets"][target]
        assert tb["n_pairs"] == corr["n_pairs"] == 40
        rows = _rows(tb)
        for key in KEYS:
            ours, theirs = rows[key], corr["metrics"][key]
            assert ours["kendall_tau_b"]["value"] == pytest.approx(theirs["kendall_tau_b"],
                                                                   abs=1e-12)
            assert ours["kendall_tau_b"]["ci95"] == pytest.approx(theirs["kendall_ci95"],
                                                                  abs=1e-12)
            assert ours["pct_of_ceiling"] == pytest.approx(theirs["pct_of_ceiling"])
            assert ours["signature"] == theirs["signature"]
            if ours["vs_best"] is not None:
                # The raw paired p is correlate's for the same two metrics (same replicates).
                best = ours["vs_best"]["best"]
                pair = corr["pairwise"]["pairs"].get(f"{best}|{key}") or \
                    corr["pairwise"]["pairs"][f"{key}|{best}"]
                assert ours["vs_best"]["p"] == pytest.approx(pair["p"])
        assert tb["ceiling"]["value"] == pytest.approx(corr["ceiling"]["kendall_tau_b"])
        assert tb["ceiling"]["ci95"] == pytest.approx(corr["ceiling"]["kendall_ci95"])
        assert tb["ceiling"]["per_rater"] == pytest.approx(corr["ceiling"]["per_rater"])
        for src, block in tb["per_source"].items():
            assert block["n_pairs"] == corr["per_source"][src]["n_pairs"]
            for r in block["rows"]:
                theirs = corr["per_source"][src]["metrics"][r["key"]]
                assert r["kendall_tau_b"]["value"] == pytest.approx(theirs["kendall_tau_b"])
                assert r["kendall_tau_b"]["ci95"] == pytest.approx(theirs["kendall_ci95"])
    # The study itself as a dataset gives the folder's board, number for number.
    study = _run(db, ["study=RX"]).doc["datasets"][0]
    assert study["name"] == "study:RX" and study["gold_set"] == "ReXVal"
    assert study["board"] == folder["board"]
    assert study["files"]["files.50_samples_gt_and_candidates.csv"] == folder["files"][
        rexval.GT_FILENAME]


def test_holm_over_the_metrics_tested_against_the_best(db, rexval_dir):
    tb = _run(db, [f"rexval={rexval_dir}"], bootstrap=300).doc["datasets"][0]["board"][
        "targets"]["total"]
    tested = [r for r in tb["rows"] if r["vs_best"] is not None]
    assert len(tested) == len(KEYS) - 1
    p = [r["vs_best"]["p"] for r in tested]
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    expected, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        expected[i] = running
    assert [r["vs_best"]["p_holm"] for r in tested] == pytest.approx(expected)
    assert all(r["vs_best"]["best"] == tb["best"] for r in tested)
    assert _rows(tb)[tb["best"]]["rank"] == 1


def test_radpref_folder_gives_the_pairwise_statistics_of_the_imported_study(db, radpref_dir):
    from radconcord.backend.datasets import radpref as files

    folder = _run(db, [f"radpref={radpref_dir}"]).doc["datasets"][0]
    board = folder["board"]
    assert board["kind"] == "preference" and board["n_comparisons"] == 12
    data = files.read(radpref_dir / "preference_data.json",
                      radpref_dir / "radiologist_annotations")
    import_radpref(db, ADMIN, data=data, study_name="RP")
    _score_study(db, "RP")
    stats = pairwise.study_preference_stats(db, ADMIN, "RP", metrics=KEYS, resamples=200,
                                            seed=3).as_dict()
    rows = {r["key"]: r for r in board["rows"]}
    for key in KEYS:
        theirs = stats["metrics"][key]
        agreement = rows[key]["pairwise_agreement"]
        assert agreement["value"] == pytest.approx(theirs["pairwise_agreement"])
        assert agreement["ci95"] == pytest.approx([theirs["ci_low"], theirs["ci_high"]])
        assert agreement["n"] == theirs["n_comparisons"]
        assert rows[key]["n_ties_excluded"] == theirs["n_ties_excluded"]
        assert rows[key]["kendall_tau_b_rating"]["value"] == pytest.approx(
            theirs["kendall_tau_b_rating"], abs=1e-12)
        assert rows[key]["kendall_tau_b_rating"]["n"] == theirs["n"]
    assert board["ceiling"]["n_raters"] == 3
    study = _run(db, ["study=RP"]).doc["datasets"][0]
    assert study["gold_set"] == "RadPref" and study["board"] == board


def test_a_second_run_with_the_same_inputs_scores_nothing(db, rexval_dir, radpref_dir):
    datasets = [f"rexval={rexval_dir}", f"radpref={radpref_dir}"]
    first = _run(db, datasets)
    with db.read() as s:
        rows = s.scalar(select(func.count()).select_from(MetricScore))
    # Each family computes every distinct pair input once (the fixtures repeat some texts,
    # within and across the two sets) and finds the repeats in the cache.
    per_set = [{p.input_hash for p in ds.pairs} for ds in (
        benchmark.load_rexval_folder(rexval_dir), benchmark.load_radpref_folder(radpref_dir))]
    assert first.computed == len(METRICS) * len(per_set[0] | per_set[1])
    assert first.computed + first.cached == len(METRICS) * sum(map(len, per_set))
    assert rows == len(per_set[0] | per_set[1]) * len(KEYS)  # one row per input and key
    second = _run(db, datasets)
    assert second.computed == 0 and second.cached == first.computed + first.cached
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(MetricScore)) == rows
    assert all(fam["computed"] == 0 for ds in second.doc["datasets"]
               for fam in ds["scoring"].values())
    assert [d["board"] for d in second.doc["datasets"]] == [
        d["board"] for d in first.doc["datasets"]]


def test_na_with_the_reason_in_every_output(db, d, rexval_dir, radpref_dir, tmp_path,
                                            monkeypatch):
    # A candidate the failing double chokes on; vlscore counted as available so that only
    # the missing images keep it off the text-only sets.
    gt = rexval.read_gt(rexval_dir / rexval.GT_FILENAME)
    first = gt.rows[0]
    rows = (rexval.GtRow(first.study_id, first.gt_report, ("BOOM " + first.candidates[0],
                                                           *first.candidates[1:])),
            *gt.rows[1:])
    rexval.write_gt(rexval_dir / rexval.GT_FILENAME, rexval.GtFile(gt.candidate_types, rows))
    real = benchmark._availability
    monkeypatch.setattr(benchmark, "_availability",
                        lambda fam: None if fam == "vlscore" else real(fam))
    result = _run(db, [f"rexval={rexval_dir}", f"radpref={radpref_dir}"],
                  metrics=["bleu4", "vlscore", "gone_double", "dbl_fail"], bootstrap=50)
    paths = benchmark.write_outputs(result.doc, tmp_path / "out", inline_plotlyjs=False)
    reasons = {
        "vlscore": "needs images: rexval has none (a text-only gold set)",
        "gone_double": "unavailable here: weights not found in /nowhere (set "
                       "RADCONCORD_MODEL_DIR)",
        "dbl_fail": "failed: metric 'fail_double' failed on pairs",
    }
    tb = result.doc["datasets"][0]["board"]["targets"]["total"]
    got = _rows(tb)
    assert got["bleu4"]["status"] == "ranked" and got["bleu4"]["rank"] == 1
    for key, reason in reasons.items():
        assert got[key]["status"] == "n/a" and got[key]["rank"] is None
        assert got[key]["reason"].startswith(reason), got[key]["reason"]
    assert list(got) == ["bleu4", "vlscore", "gone_double", "dbl_fail"]
    pref_rows = {r["key"]: r for r in result.doc["datasets"][1]["board"]["rows"]}
    assert pref_rows["vlscore"]["reason"] == (
        "needs images: radpref has none (a text-only gold set)")
    # A family named whole is one n/a row under its name, a key named alone its own row; the
    # failing double does not fail on RadPref: it is ranked there.
    assert pref_rows["dbl_fail"]["status"] == "ranked"
    by_name = {p.name: p.read_text(encoding="utf-8") for p in paths}
    table = list(csv.DictReader(io.StringIO(by_name["leaderboard.csv"])))
    for key, reason in reasons.items():
        hits = [r for r in table if r["dataset"] == "rexval" and r["key"] == key
                and r["status"] != "reported"]  # VLScore's published figure sits beside it
        assert hits and all(r["status"] == "n/a" and r["reason"].startswith(reason)
                            for r in hits)
        assert html.escape(reason, quote=True) in by_name["leaderboard.html"]
        assert reason in by_name["leaderboard.json"]
    assert result.doc["datasets"][0]["scoring"]["fail_double"]["status"] == "failed"


def test_available_is_every_registered_family_that_runs_here(db, d, rexval_dir, monkeypatch):
    # A small registry: two real families and the doubles (as a plug-in's entry would be).
    keep = {f: e for f, e in registry.ENTRIES.items()
            if f in ("bleu", "rouge", "count_double", "gone_double", "vlscore", "smas_var")}
    monkeypatch.setattr(registry, "ENTRIES", keep)
    result = _run(db, [f"rexval={rexval_dir}"], metrics=["available"], bootstrap=0)
    rows = _rows(result.doc["datasets"][0]["board"]["targets"]["total"])
    assert {"bleu4", "rougeL", "dbl_ratio", "dbl_jaccard"} <= {
        k for k, r in rows.items() if r["status"] == "ranked"}
    # Whole families that cannot run are one n/a row each, named by the family.
    assert rows["gone_double"]["status"] == "n/a"
    assert rows["vlscore"]["status"] == "n/a"
    assert "smas_var" not in rows  # not a pair metric
    assert result.doc["protocol"]["metrics_requested"] == ["available"]
    assert set(result.doc["unavailable_here"]) >= {"gone_double", "vlscore"}


def test_reported_figures_are_listed_with_their_source_and_never_ranked(db, rexval_dir):
    board = _run(db, [f"rexval={rexval_dir}"], bootstrap=0).doc["datasets"][0]["board"]
    total = board["targets"]["total"]
    reported = {(r["source"], r["key"]): r for r in total["reported"]}
    assert reported[("ER2Score paper", "bleu4")]["value"] == 0.345
    assert reported[("VLScore paper", "vlscore")]["value"] == 0.718
    assert reported[("ER2Score paper", "green")]["where"] == "backend/metrics/cards/green.md"
    assert all(r["rank"] is None and r["status"] == "reported" for r in total["reported"])
    assert reported[("ER2Score paper", "bleu4")]["ours"] == _rows(total)["bleu4"][
        "kendall_tau_b"]["value"]
    assert all(Path(cli.__file__).parents[2].joinpath(r["where"]).is_file()
               for r in total["reported"] if r["where"])
    # Ranks count computed rows only.
    ranks = sorted(r["rank"] for r in total["rows"] if r["rank"] is not None)
    assert ranks[0] == 1 and len(ranks) == len(KEYS)
    assert board["targets"]["significant"]["reported"] == []


def _cli(capsys, *args):
    code = cli.main(["benchmark", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_missing_files_and_columns_are_one_line_errors(db, rexval_dir, radpref_dir, capsys,
                                                       tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the default ./leaderboard would go
    url = ["--database-url", f"sqlite:///{tmp_path / 'radconcord.db'}"]
    (rexval_dir / rexval.RATINGS_FILENAME).rename(tmp_path / "ratings.csv")
    code, _, err = _cli(capsys, "--dataset", f"rexval={rexval_dir}", *url)
    assert code == 2
    assert err == (f"error: {rexval_dir / rexval.RATINGS_FILENAME}: missing file (a ReXVal "
                   f"folder holds {rexval.GT_FILENAME} and {rexval.RATINGS_FILENAME})\n")
    # The ratings file without its num_errors column.
    text = (tmp_path / "ratings.csv").read_text(encoding="utf-8").splitlines()
    (rexval_dir / rexval.RATINGS_FILENAME).write_text(
        "\n".join(",".join(line.split(",")[:-1]) for line in text) + "\n", encoding="utf-8")
    code, _, err = _cli(capsys, "--dataset", f"rexval={rexval_dir}", *url)
    assert (code, err) == (2, f"error: {rexval_dir / rexval.RATINGS_FILENAME}: header: "
                              "missing column 'num_errors'\n")
    (radpref_dir / "preference_data.json").unlink()
    code, _, err = _cli(capsys, "--dataset", f"radpref={radpref_dir}", *url)
    assert (code, err) == (2, f"error: {radpref_dir / 'preference_data.json'}: missing file "
                              "(a RadPref folder holds preference_data.json and "
                              "radiologist_annotations/user_N.json)\n")
    other = tmp_path / "rp2"
    write_radpref(other)
    cases = json.loads((other / "preference_data.json").read_text(encoding="utf-8"))
    del cases[1]["C2_source"]
    (other / "preference_data.json").write_text(json.dumps(cases), encoding="utf-8")
    code, _, err = _cli(capsys, "--dataset", f"radpref={other}", *url)
    assert (code, err) == (2, "error: preference_data.json: case 'case-001', field "
                              "'C2_source': missing\n")
    code, _, err = _cli(capsys, "--dataset", "mimic=/data", *url)
    assert (code, err) == (2, "error: --dataset 'mimic=/data': unknown kind 'mimic' (known: "
                              "rexval, radpref, study)\n")
    code, _, err = _cli(capsys, "--dataset", "study=Nope", *url)
    assert (code, err) == (2, "error: study=Nope: no study named 'Nope'\n")
    code, _, err = _cli(capsys, "--dataset", f"radpref={other}", "--metrics", "blue", *url)
    assert (code, err) == (2, "error: --metrics: unknown metric 'blue' (see `python -m "
                              "backend metrics`)\n")
    assert not (tmp_path / "leaderboard").exists()  # nothing is written on an error


def test_cli_end_to_end_writes_json_csv_and_html(db, rexval_dir, radpref_dir, tmp_path,
                                                 capsys):
    out = tmp_path / "lb"
    code, stdout, _ = _cli(capsys, "--dataset", f"rexval={rexval_dir}", "--dataset",
                           f"radpref={radpref_dir}", "--metrics", "bleu4,rougeL", "--output",
                           str(out), "--bootstrap", "100", "--seed", "7", "--database-url",
                           f"sqlite:///{tmp_path / 'radconcord.db'}")
    assert code == 0
    assert "rexval: 40 rated pairs, headline Kendall tau-b vs total errors (pooled)" in stdout
    assert f"wrote {out / 'leaderboard.html'}" in stdout
    doc = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))
    assert doc["protocol"]["text"] == list(lb.PROTOCOL)
    assert (doc["seed"], doc["bootstrap"]) == (7, 100)
    assert doc["protocol"]["metrics_requested"] == ["bleu4", "rougeL"]
    assert doc["versions"]["numpy"] == np.__version__
    assert doc["datasets"][0]["files"] == {
        name: file_sha256(rexval_dir / name)
        for name in (rexval.GT_FILENAME, rexval.RATINGS_FILENAME)}
    assert doc["datasets"][1]["files"]["preference_data.json"] == file_sha256(
        radpref_dir / "preference_data.json")
    assert doc["signatures"]["rexval"]["bleu4"]["signature"].startswith("bleu|")
    assert doc["command"][:4] == ["radconcord", "benchmark", "--dataset", f"rexval={rexval_dir}"]
    table = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text("utf-8"))))
    assert tuple(table[0]) == lb.CSV_COLUMNS
    assert {r["dataset"] for r in table} == {"rexval", "radpref"}
    assert any(r["status"] == "reported" and r["source"].startswith("ER2Score paper")
               for r in table)
    page = (out / "leaderboard.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<script src=" not in page
    assert "Plotly" in page and 'id="forest-0-total"' in page
    assert "Reported in papers (not ranked)" in page and "Human ceiling" in page


def test_study_leaderboard_reads_stored_scores_and_is_for_admins(db, rexval_dir):
    import_rexval(db, ADMIN, gt_path=rexval_dir / rexval.GT_FILENAME,
                  ratings_path=rexval_dir / rexval.RATINGS_FILENAME, study_name="RX")
    with pytest.raises(InvalidInput, match="no metric scores yet"):
        benchmark.study_leaderboard(db, ADMIN, study_names=["RX"], bootstrap=0)
    _score_study(db, "RX")
    doc = benchmark.study_leaderboard(db, ADMIN, study_names=["RX"], bootstrap=200, seed=3)
    cli_doc = _run(db, ["study=RX"]).doc
    assert doc["datasets"][0]["board"] == cli_doc["datasets"][0]["board"]
    assert doc["protocol"]["text"] == list(lb.PROTOCOL)
    rater = Actor(user_id=5, username="rita", role="rater")
    with pytest.raises(PermissionDenied):
        benchmark.study_leaderboard(db, rater, study_names=["RX"])
    with pytest.raises(PermissionDenied):
        benchmark.run_benchmark(db, rater, datasets=["study=RX"])
