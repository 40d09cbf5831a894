"""Training Concord on synthetic errors: service, job kind and command, end to end.

A corpus of 40 hand-written reports (``corpus=``) and a few hundred synthetic pairs keep a
``gbm`` run to seconds. The trained folder is loaded by the ``concord`` family, whose
signature names the folder's sha256. No human ratings are involved anywhere.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from radconcord.backend import jobs
from radconcord.backend.analysis.synthetic_errors import COUNT_KEYS
from radconcord.backend.cli import main
from radconcord.backend.errors import InvalidInput, PermissionDenied
from radconcord.backend.metrics import registry
from radconcord.backend.metrics.concord.folder import META_FILE, folder_sha256, read_meta
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.evaluation import concord_train
from radconcord.backend.types import Actor

ADMIN = Actor.system()
RATER = Actor(user_id=77, username="rita", role="rater")
N_PAIRS = 240

REPORTS = [
    "The lungs are clear. There is no pleural effusion or pneumothorax. Heart size is normal.",
    "Mild cardiomegaly. Small bilateral pleural effusions. No pneumothorax.",
    "Right lower lobe consolidation concerning for pneumonia. No pleural effusion.",
    "Heart size is normal. Mediastinal contours are within normal limits. Lungs are clear.",
    "Moderate pulmonary edema. Stable cardiomegaly. Small right pleural effusion.",
    "Low lung volumes with bibasilar atelectasis. No focal consolidation.",
    "No acute cardiopulmonary process.",
    "Large left pleural effusion with adjacent compressive atelectasis.",
    "Small right apical pneumothorax. No mediastinal shift.",
    "Stable right upper lobe nodule. Lungs otherwise clear.",
    "Interval increase in left basilar opacity compared with the prior study.",
    "Endotracheal tube terminates 4 cm above the carina. No pneumothorax.",
    "Degenerative changes of the thoracic spine. No acute osseous abnormality.",
    "Severe cardiomegaly with pulmonary vascular congestion.",
    "Hyperinflated lungs consistent with emphysema. No focal airspace disease.",
    "Left lower lobe pneumonia. Small left pleural effusion.",
    "Calcified granuloma in the right lower lobe. No active disease.",
    "Mild interstitial edema. Heart size is enlarged.",
    "Right-sided chest tube in place. Decreased right pneumothorax.",
    "Bilateral lower lobe airspace opacities, likely atelectasis or pneumonia.",
    "The heart is normal in size. The lungs are clear bilaterally.",
    "Tortuous aorta. No pleural effusion. No pneumothorax.",
    "Healed left rib fractures. Lungs are clear.",
    "Moderate hiatal hernia. No acute cardiopulmonary abnormality.",
    "Small left apical pneumothorax. Subcutaneous emphysema in the left chest wall.",
    "Diffuse bilateral interstitial opacities. Cardiomegaly.",
    "Right middle lobe atelectasis. No pleural effusion.",
    "Stable mild cardiomegaly. No focal consolidation, effusion or pneumothorax.",
    "Large right pleural effusion. Mediastinal shift to the left.",
    "Lungs are hyperexpanded. Flattened diaphragms. No consolidation.",
    "Left upper lobe mass. Recommend CT for further evaluation.",
    "Normal chest radiograph.",
    "Bibasilar opacities, increased from prior. Small bilateral effusions.",
    "Pacemaker leads in the right atrium and ventricle. Heart size normal.",
    "Trace left pleural effusion. Mild left basilar atelectasis.",
    "No pneumothorax after line placement. Lungs clear.",
    "Mild pulmonary vascular congestion without frank edema.",
    "Right lower lobe opacity, possibly aspiration. No effusion.",
    "Stable appearance of the chest. No new focal opacity.",
    "Enlarged cardiac silhouette. Small right effusion. Mild edema.",
]


def _train(tmp_path, name: str = "gbm", **kw):
    return concord_train.train_concord(variant="gbm", output=tmp_path / name, seed=0,
                                       n_pairs=N_PAIRS, heldout=0.25, corpus=REPORTS, **kw)


@pytest.fixture(scope="module")
def gbm_folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("concord")
    return _train(tmp), tmp / "gbm"


def test_gbm_end_to_end_and_loaded_by_the_family(gbm_folder):
    summary, out = gbm_folder
    assert (out / "gbm.json").is_file() and (out / META_FILE).is_file()
    assert [p.name for p in out.parent.iterdir()] == ["gbm"]  # no staging left behind
    assert summary.variant == "gbm" and summary.corpus == "inline"
    assert summary.n_train_pairs + summary.n_heldout_pairs == N_PAIRS
    assert summary.n_heldout_pairs == round(N_PAIRS * 0.25)
    assert summary.n_reports_train + summary.n_reports_heldout == len(REPORTS)
    fig = summary.figures
    assert fig["n"] == summary.n_heldout_pairs
    assert set(fig["mae"]) == set(COUNT_KEYS)
    for key in ("tau_total", "tau_sig"):
        assert fig[key] is None or -1.0 <= fig[key] <= 1.0
    assert 0.0 <= fig["exact_match"] <= 1.0 and 0.0 <= fig["exact_total"] <= 1.0
    meta = read_meta(out)
    assert meta["variant"] == "gbm" and meta["heldout"] == fig
    training = meta["training"]
    assert training["corpus"]["sha256"] == summary.corpus_sha256
    assert training["seed"] == 0 and training["human_ratings_used"] is False
    assert sum(training["recipes_train"].values()) >= summary.n_train_pairs

    metric = registry.create("concord", variant="gbm", model=str(out))
    assert metric.availability() is None
    metric.load("cpu")
    refs, cands = REPORTS[:5], REPORTS[5:10]
    values = metric.score(references=refs, candidates=cands).values
    assert len(values["concord_total"]) == 5
    assert all(v >= 0 for v in values["concord_total"])
    assert folder_sha256(out)[:12] in metric.signature()


def test_same_seed_gives_the_same_bytes(gbm_folder, tmp_path):
    _, out = gbm_folder
    _train(tmp_path, "again")
    assert (tmp_path / "again" / "gbm.json").read_bytes() == (out / "gbm.json").read_bytes()
    assert (tmp_path / "again" / META_FILE).read_bytes() == (out / META_FILE).read_bytes()
    assert folder_sha256(tmp_path / "again") == folder_sha256(out)


def test_heldout_figures():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=(30, 12)).astype(float)
    perfect = concord_train.heldout_figures(y + 0.25, y, rounded=False)
    assert perfect["tau_total"] == 1.0 and perfect["tau_sig"] == 1.0
    # Every count rounds right, but the total is off by 12 x 0.25 = 3.
    assert perfect["exact_match"] == 1.0 and perfect["exact_total"] == 0.0
    assert perfect["mae"][COUNT_KEYS[0]] == pytest.approx(0.25)
    assert perfect["mae_total"] == pytest.approx(3.0)
    # Rounded, as the family outputs by default: the same predictions are exact.
    rounded = concord_train.heldout_figures(y + 0.25, y)
    assert rounded["rounded"] is True and rounded["mae_total"] == 0.0
    assert rounded["tau_total"] == 1.0 and rounded["tau_total_unrounded"] == 1.0
    # Noise below half an error breaks the truth's ties: tau-b drops unrounded only.
    noisy = y + rng.uniform(-0.4, 0.4, size=y.shape)
    fig = concord_train.heldout_figures(noisy, y)
    assert fig["tau_total"] == 1.0 and fig["tau_total_unrounded"] < 1.0
    exact = concord_train.heldout_figures(y, y)
    assert exact["exact_match"] == 1.0 and exact["exact_total"] == 1.0
    assert exact["mae_sig"] == 0.0
    flat = concord_train.heldout_figures(np.ones_like(y), y)
    assert flat["tau_total"] is None  # constant predictions: undefined, not NaN
    assert concord_train.heldout_figures(np.zeros((0, 12)), np.zeros((0, 12))) == {"n": 0}


@pytest.mark.parametrize(("change", "message"), [
    ({"variant": "rules"}, "variant"),
    ({"heldout": 0.0}, "heldout"),
    ({"heldout": 1.0}, "heldout"),
    ({"n_pairs": 1}, "pairs"),
    ({"max_steps": 5}, "ce variant only"),
])
def test_bad_settings_are_refused(tmp_path, change, message):
    kw = {"variant": "gbm", "output": tmp_path / "x", "n_pairs": 10, "corpus": REPORTS,
          **change}
    with pytest.raises(InvalidInput, match=message):
        concord_train.train_concord(**kw)
    assert not (tmp_path / "x").exists()


def test_taken_output_and_tiny_corpus_are_refused(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "f").write_text("x")
    with pytest.raises(InvalidInput, match="not empty"):
        _train(tmp_path, "taken")
    with pytest.raises(InvalidInput, match="too few reports"):
        concord_train.train_concord(variant="gbm", output=tmp_path / "y", n_pairs=10,
                                    corpus=REPORTS[:3], heldout=0.1)


def _corpus_file(tmp_path) -> str:
    path = tmp_path / "reports.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": t}) + "\n"
                            for i, t in enumerate(REPORTS)), encoding="utf-8")
    return str(path)


def test_training_job_writes_the_folder_once(db, tmp_path):
    corpus = _corpus_file(tmp_path)
    job = concord_train.enqueue_training(db, ADMIN, variant="gbm", output="models/concord",
                                         n_pairs=N_PAIRS, heldout=0.25, corpus=corpus)
    assert job.kind == "train_concord"
    done = Worker(db).run_once()
    assert done.status == "done", done.error
    out = tmp_path / "models" / "concord"
    for name in ("gbm.json", META_FILE, concord_train.SUMMARY_FILE):
        assert (out / name).is_file(), name
    assert done.result["output"] == "models/concord" and done.result["variant"] == "gbm"
    assert done.result["figures"]["n"] == round(N_PAIRS * 0.25)
    assert "held-out Kendall tau" in done.result["summary"]
    record = json.loads((out / concord_train.SUMMARY_FILE).read_text())
    assert record["job_id"] == done.id
    assert [p.name for p in out.parent.iterdir()] == ["concord"]  # no staging left
    # The same inputs as a file or as texts: the same model.
    inline = _train(tmp_path, "inline")
    assert (out / "gbm.json").read_bytes() == (tmp_path / "inline" / "gbm.json").read_bytes()
    assert inline.figures == done.result["figures"]
    # Run again (killed after the rename): the finished folder is reported, not retrained.
    before = (out / "gbm.json").stat().st_mtime_ns
    again = concord_train.train_concord(variant="gbm", output=out, n_pairs=N_PAIRS,
                                        heldout=0.25, corpus=corpus, job_id=done.id)
    assert again.figures == done.result["figures"]
    assert (out / "gbm.json").stat().st_mtime_ns == before


def test_enqueue_refuses_bad_requests(db, tmp_path):
    corpus = _corpus_file(tmp_path)
    ok = {"variant": "gbm", "output": "models/a", "n_pairs": 20, "corpus": corpus}
    for change, message in [
        ({"variant": "rules"}, "variant"),
        ({"heldout": 1.0}, "heldout"),
        ({"max_steps": 3}, "ce variant only"),
        ({"output": "../outside"}, "lies outside the data folder"),
        ({"output": "/abs/path"}, "must be relative"),
        ({"corpus": str(tmp_path / "missing.jsonl")}, "missing.jsonl"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            concord_train.enqueue_training(db, ADMIN, **{**ok, **change})
    with pytest.raises(PermissionDenied):
        concord_train.enqueue_training(db, RATER, **ok)
    assert jobs.list_jobs(db) == []
    first = concord_train.enqueue_training(db, ADMIN, **ok)
    assert first.params["corpus"] == corpus
    with pytest.raises(InvalidInput, match=f"being written by job {first.id}"):
        concord_train.enqueue_training(db, ADMIN, **ok)


def test_command_prints_the_figures_and_the_set_line(tmp_path, capsys):
    out = tmp_path / "cli-gbm"
    code = main(["train-concord", "--variant", "gbm", "--output", str(out), "--pairs",
                 str(N_PAIRS), "--heldout", "0.25", "--corpus", _corpus_file(tmp_path)])
    assert code == 0
    text = capsys.readouterr().out
    assert "held-out synthetic figures" in text and "Kendall tau total" in text
    assert f"--set concord.variant=gbm concord.model={out}" in text
    assert (out / "gbm.json").is_file()
    code = main(["model", "train-concord", "--variant", "gbm", "--output", str(out),
                 "--pairs", "20", "--corpus", _corpus_file(tmp_path)])
    assert code != 0
    assert "not empty" in capsys.readouterr().err
