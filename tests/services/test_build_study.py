"""build_study / export_build services and the ``build-study`` command."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from radconcord.backend.cli import main
from radconcord.backend.datasets import oracle, rexval
from radconcord.backend.datasets.corpus import CorpusReport, ensure_iu_archive, file_sha256
from radconcord.backend.errors import InvalidInput, PermissionDenied
from radconcord.backend.metrics import registry
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin.build_study import build_study, export_build
from radconcord.backend.types import Actor
from radconcord.db.models import Pair, Study

ADMIN = Actor.system()

TESTS = [
    {"id": "T1", "text": "Heart size is normal. No focal consolidation. No pleural effusion."},
    {"id": "T2", "text": "Small left pleural effusion with adjacent atelectasis."},
    {"id": "T3", "text": "Stable right upper lobe nodule. Lungs otherwise clear."},
    {"id": "T4", "text": "Mild cardiomegaly with pulmonary vascular congestion."},
    {"id": "T5", "text": "Right pneumothorax, moderate in size. No mediastinal shift."},
]
CORPUS = [
    {"id": "C1", "text": "Heart size normal. No consolidation or effusion."},
    {"id": "C2", "text": "The heart is normal in size. There is no focal consolidation."},
    {"id": "C3", "text": "Small left pleural effusion. No pneumothorax."},
    {"id": "C4", "text": "Left pleural effusion with atelectasis at the base."},
    {"id": "C5", "text": "Right upper lobe nodule, stable. Lungs are clear."},
    {"id": "C6", "text": "Cardiomegaly. Mild pulmonary edema and vascular congestion."},
    {"id": "C7", "text": "Large right pneumothorax with mediastinal shift."},
    {"id": "C8", "text": "No acute cardiopulmonary process."},
    {"id": "T1", "text": TESTS[0]["text"]},  # the test report itself is in the corpus
    {"id": "C9", "text": TESTS[2]["text"]},  # an exact duplicate of a test report
]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return _jsonl(tmp_path / "tests.jsonl", TESTS), _jsonl(tmp_path / "corpus.jsonl", CORPUS)


def _best(test: dict, key: str) -> set[str]:
    """Brute force: texts of the corpus reports with the best value (self/duplicates out)."""
    pool = [c for c in CORPUS if c["id"] != test["id"] and c["text"] != test["text"]]
    metric = registry.create(registry.KEY_TO_FAMILY[key])
    vals = metric.score(references=[test["text"]] * len(pool),
                        candidates=[c["text"] for c in pool]).values[key]
    return {c["text"] for c, v in zip(pool, vals, strict=True) if v == max(vals)}


def _pairs(db, name: str) -> list[tuple[str, str, str]]:
    with db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == name))
        return [(p.case.external_id, p.source, p.candidate.text)
                for p in sorted(study.pairs, key=lambda p: p.position)]


def test_build_creates_a_study_of_deduplicated_metric_oracle_pairs(db, files):
    tests, corpus = files
    summary = build_study(db, ADMIN, study_name="oracle", tests=tests, corpus=corpus,
                          metrics=["bleu4", "rougeL"], top_k=None)
    pairs = _pairs(db, "oracle")
    assert summary.n_pairs == len(pairs) and summary.n_cases == len(TESTS)
    assert summary.n_picks_before_dedup == 2 * len(TESTS)
    assert len(pairs) < summary.n_picks_before_dedup  # some candidates were shared
    for test in TESTS:
        mine = [(src, text) for case, src, text in pairs if case == test["id"]]
        keys = [k for src, _ in mine for k in src.removeprefix("oracle:").split("+")]
        assert sorted(keys) == ["bleu4", "rougeL"]  # every metric recorded exactly once
        for src, text in mine:
            assert text != test["text"]  # never the test report or its duplicate
            for key in src.removeprefix("oracle:").split("+"):
                assert text in _best(test, key)
    with db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == "oracle"))
        prov = study.provenance
        assert study.status == "open"
    assert prov["kind"] == "metric-oracle"
    assert prov["corpus"]["sha256"] == file_sha256(corpus)
    assert prov["oracle"]["signatures"]["rougeL"].startswith("rougeL|")
    assert prov["oracle"]["candidate_stage"]["method"] == "tfidf-cosine"
    picks = prov["oracle"]["picks"]
    assert sorted((p["test_id"], p["source"]) for p in picks) == sorted(
        (case, src) for case, src, _ in pairs)


def test_staged_build_agrees_with_exhaustive_on_a_small_corpus(db, files):
    tests, corpus = files
    build_study(db, ADMIN, study_name="staged", tests=tests, corpus=corpus,
                metrics=["bleu4", "rougeL"], top_k=6)
    build_study(db, ADMIN, study_name="full", tests=tests, corpus=corpus,
                metrics=["bleu4", "rougeL"], top_k=None)
    assert _pairs(db, "staged") == _pairs(db, "full")


def test_raters_get_every_pair_in_their_own_shuffled_order(db, files):
    tests, corpus = files
    for name in ("rita", "ravi"):
        auth.create_user(db, ADMIN, username=name, password=f"{name}-password-1", role="rater")
    summary = build_study(db, ADMIN, study_name="rated", tests=tests, corpus=corpus,
                          metrics=["bleu4", "rougeL"], per_metric=2, top_k=None,
                          raters=["rita", "ravi"], raters_per_pair=2, seed=3)
    assert summary.n_assigned == 2 * summary.n_pairs
    queues = {}
    for uid, name in ((1, "rita"), (2, "ravi")):
        me = Actor(user_id=uid, username=name, role="rater")
        queues[name] = [q.opaque_id for q in rating.rater_queue(db, me, study_name="rated")]
    assert sorted(queues["rita"]) == sorted(queues["ravi"])
    assert len(queues["rita"]) == summary.n_pairs
    assert queues["rita"] != queues["ravi"]  # shuffled per rater


def test_only_admins_build_and_bad_input_creates_nothing(db, files, tmp_path):
    tests, corpus = files
    rater = Actor(user_id=5, username="rita", role="rater")
    with pytest.raises(PermissionDenied):
        build_study(db, rater, study_name="x", tests=tests, corpus=corpus, metrics=["bleu4"])
    with pytest.raises(InvalidInput, match="unknown metric 'bleu9'"):
        build_study(db, ADMIN, study_name="x", tests=tests, corpus=corpus, metrics=["bleu9"])
    with pytest.raises(InvalidInput, match="'nobody' is not an active rater"):
        build_study(db, ADMIN, study_name="x", tests=tests, corpus=corpus, metrics=["bleu4"],
                    raters=["nobody"])
    bad = _jsonl(tmp_path / "bad.jsonl", [{"id": "A", "text": "x"}, {"id": "B"}])
    with pytest.raises(InvalidInput, match=r"bad\.jsonl: line 2: missing field 'text'"):
        build_study(db, ADMIN, study_name="x", tests=tests, corpus=bad, metrics=["bleu4"])
    build_study(db, ADMIN, study_name="x", tests=tests, corpus=corpus, metrics=["bleu4"],
                limit_tests=2)
    with pytest.raises(InvalidInput, match="already exists"):
        build_study(db, ADMIN, study_name="x", tests=tests, corpus=corpus, metrics=["bleu4"])
    with db.begin() as s:
        assert s.scalar(select(func.count()).select_from(Study)) == 1
        assert s.scalar(select(func.count()).select_from(Pair)) == 2  # limit-tests 2, 1 each


def test_export_writes_rexval_jsonl_hf_and_a_manifest(db, files, tmp_path):
    from datasets import load_from_disk

    tests, corpus = files
    summary = build_study(db, ADMIN, study_name="exp", tests=tests, corpus=corpus,
                          metrics=["bleu4", "rougeL"], per_metric=2, top_k=None, seed=11)
    out = tmp_path / "bundle"
    bundle = export_build(db, ADMIN, study_name="exp", out_dir=out)
    assert bundle.n_pairs == summary.n_pairs
    manifest = json.loads((out / "manifest.json").read_text())
    from radconcord.backend.imaging.deid import DEID_PROFILE
    assert manifest["deidentification"] == json.loads(json.dumps(DEID_PROFILE))
    prov = manifest["study"]["provenance"]
    assert prov["seed"] == 11 and manifest["study"]["seed"] == 11
    assert prov["corpus"]["sha256"] == file_sha256(corpus)
    assert set(prov["oracle"]["signature_hashes"]) == {"bleu4", "rougeL"}
    assert prov["oracle"]["candidate_stage"]["top_k"] is None
    for name, meta in manifest["files"].items():
        assert file_sha256(out / name) == meta["sha256"]
    # Which metric picked which candidate, per exported pair.
    for row in manifest["pairs"]:
        assert row["oracle_metrics"] == [
            part.split("@")[0] for part in row["source"].removeprefix("oracle:").split("+")]
    with open(out / "rexval" / rexval.GT_FILENAME, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert header[:2] == ["study_id", "gt_report"]
    assert set(header[2:]) == set(summary.sources)
    hf = load_from_disk(str(out / "hf"))
    assert set(hf) == {"pairs", "ratings"}
    assert hf["pairs"].num_rows == summary.n_pairs and hf["ratings"].num_rows == 0
    jsonl_pairs = [json.loads(line) for line in (out / "jsonl" / "pairs.jsonl").open()]
    assert hf["pairs"]["candidate"] == [p["candidate"] for p in jsonl_pairs]
    assert hf["pairs"]["oracle_metrics"] == [r["oracle_metrics"] for r in manifest["pairs"]]
    with pytest.raises(InvalidInput, match="not empty"):
        export_build(db, ADMIN, study_name="exp", out_dir=out)


def test_cli_build_study_and_its_errors(tmp_path, monkeypatch, capsys, files):
    tests, corpus = files
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    code = main(["build-study", "--tests", str(tests), "--corpus", str(corpus),
                 "--metrics", "bleu4,rougeL", "--per-metric", "1", "--name", "cli",
                 "--top-k", "5", "--limit-tests", "3", "--quiet",
                 "--export", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0
    assert "study 'cli':" in out and "for 3 test reports" in out
    assert (tmp_path / "out" / "hf" / "dataset_dict.json").is_file()
    code = main(["build-study", "--tests", str(tests), "--corpus", str(corpus),
                 "--metrics", "bleu4", "--name", "cli2", "--per-metric", "3", "--top-k", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == "error: top-k (2) must be at least per-metric (3)"


def test_build_on_the_real_iu_corpus(db, tmp_path):
    """Three IU test reports (seeded sample) against the other 3,926 reports, bleu4+rougeL."""
    archive = ensure_iu_archive()
    summary = build_study(db, ADMIN, study_name="iu", tests="iu", corpus="iu",
                          metrics=["bleu4", "rougeL"], limit_tests=3, seed=0)
    assert summary.n_tests == 3 and summary.corpus_sha256 == file_sha256(archive)
    with db.begin() as s:
        prov = s.scalar(select(Study.provenance).where(Study.name == "iu"))
    assert prov["corpus"]["n_reports"] == 3927
    assert prov["corpus"]["source"]["license"] == "CC BY-NC-ND 4.0"
    test_ids = set(prov["tests"]["ids"])
    assert len(test_ids) == 3
    for pick in prov["oracle"]["picks"]:
        assert pick["corpus_id"] != pick["test_id"] and pick["corpus_id"].startswith("CXR")
        assert pick["stage_rank"] <= 50
    # The same seed draws the same tests; the oracle agrees with a direct build.
    from radconcord.backend.datasets.corpus import load_iu_corpus

    iu = load_iu_corpus()
    chosen = [r for r in iu.reports if r.report_id in test_ids]
    direct = oracle.build_oracle(chosen, iu.reports, ["bleu4", "rougeL"], top_k=50)
    assert [p.as_dict() for p in direct.picks] == prov["oracle"]["picks"]
    assert isinstance(chosen[0], CorpusReport)
