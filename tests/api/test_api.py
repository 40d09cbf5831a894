"""The public Python API (``radconcord``) against the command line on the same data.

``radconcord.score`` must give the values of ``python -m backend score`` (SCORES.csv, written
with full-precision floats) exactly, without creating any database unless ``cache=`` names
one; ``radconcord.correlate`` on ``radconcord.load_study`` must give the ``metrics`` section
of ``python -m backend correlate`` exactly (same seed, same resamples).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import func, select

import radconcord
from radconcord.backend.cli import main
from radconcord.db.models import MetricScore
from radconcord.db.session import Database
from tests.helpers_api import build_rated_study

REFERENCES = [
    "No pleural effusion. Heart size is normal.",
    "Small left pleural effusion with adjacent atelectasis.",
    "Right upper lobe consolidation concerning for pneumonia.",
    "Mild cardiomegaly. No pneumothorax.",
    "Endotracheal tube terminates 3 cm above the carina.",
    "",  # an empty reference: NaN for every metric in both paths
]
CANDIDATES = [
    "No effusion. The heart is normal in size.",
    "Left pleural effusion and atelectasis.",
    "Consolidation in the right upper lobe, likely pneumonia.",
    "Heart is enlarged. No pneumothorax is seen.",
    "ET tube tip 3 cm above carina.",
    "Clear lungs.",
]
IDS = ["p1", "p2", "p3", "p4", "p5", "p6"]
# Lexical, corpus-dependent (CIDEr's df over the scored set), rule-based clinical, and a
# model metric on the packaged MiniLM encoder.
METRICS = ["bleu", "rougeL", "cider", "chexpert_f1", "bertscore_f"]


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    """Data folder in tmp_path and no DATABASE_URL: any database written would show there."""
    data = tmp_path / "data"
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return data


def _write_pairs(path):
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "reference", "candidate"])
        w.writerows(zip(IDS, REFERENCES, CANDIDATES, strict=True))


def _read_scores(path) -> pd.DataFrame:
    with path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    frame = pd.DataFrame(rows).set_index("id")
    return frame.astype(float)


def test_score_equals_the_cli_scores_csv_and_writes_no_database(clean_env, tmp_path, capsys):
    _write_pairs(tmp_path / "pairs.csv")
    assert main(["score", "--input", str(tmp_path / "pairs.csv"), "--metrics", ",".join(METRICS),
                 "--output", str(tmp_path / "scores.csv"), "--no-cache"]) == 0
    cli_out = capsys.readouterr().out
    cli = _read_scores(tmp_path / "scores.csv")

    seen: list[tuple[int, int, str]] = []
    df = radconcord.score(references=REFERENCES, candidates=CANDIDATES, ids=IDS,
                          metrics=METRICS, progress=lambda d, t, m: seen.append((d, t, m)))

    assert list(df.columns) == list(cli.columns)
    assert list(df.index) == IDS and df.index.name == "id"
    for key in cli.columns:
        for pid in IDS:
            a, b = df.loc[pid, key], cli.loc[pid, key]
            assert (math.isnan(a) and math.isnan(b)) or a == b, (key, pid, a, b)
    assert df.loc["p6"].isna().all() and df.attrs["empty_ids"] == ["p6"]
    # The signatures are the CLI's (it prints "family: ... [hash] signature").
    for key in df.columns:
        assert f"[{df.attrs['signature_hashes'][key]}] {df.attrs['signatures'][key]}" in cli_out
    assert "bleu4_corpus" in df.attrs["corpus"]
    assert df.attrs["unavailable"] == {}
    # Progress: monotone, ending at pairs x families.
    done = [d for d, _, _ in seen]
    assert done == sorted(done) and seen[-1][0] == seen[-1][1] == len(IDS) * 5
    # Nothing written: neither the data folder nor a database file anywhere in tmp_path.
    assert not clean_env.exists()
    assert not list(tmp_path.rglob("*.db"))


def test_score_with_a_cache_shares_the_cli_cache(clean_env, tmp_path, capsys, monkeypatch):
    """cache= fills the same score cache the CLI reads: the CLI then computes nothing."""
    cache = tmp_path / "cache.db"
    first = radconcord.score(references=REFERENCES, candidates=CANDIDATES, ids=IDS,
                             metrics=["bleu4", "rougeL"], cache=cache)
    assert cache.is_file()
    db = Database(f"sqlite:///{cache}")
    with db.begin() as s:
        # 5 scorable distinct inputs x (4 bleu keys + rouge1, rouge2, rougeL) stored.
        assert s.scalar(select(func.count()).select_from(MetricScore)) == 5 * 7
    db.dispose()
    again = radconcord.score(references=REFERENCES, candidates=CANDIDATES, ids=IDS,
                             metrics=["bleu4", "rougeL"], cache=str(cache))
    pd.testing.assert_frame_equal(first, again)

    _write_pairs(tmp_path / "pairs.csv")
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{cache}")
    assert main(["score", "--input", str(tmp_path / "pairs.csv"), "--metrics",
                 "bleu4,rougeL", "--output", str(tmp_path / "s.csv")]) == 0
    out = capsys.readouterr().out
    assert "bleu: 0 computed, 5 from cache" in out
    assert "rouge: 0 computed, 5 from cache" in out
    assert not clean_env.exists()


def test_score_options_and_metric_string(clean_env):
    """Options go to the metric (and its signature) as with --set; "a,b" names two metrics."""
    plain = radconcord.score(references=REFERENCES[:3], candidates=CANDIDATES[:3],
                             metrics="rougeL,bleu4")
    assert list(plain.columns) == ["rougeL", "bleu4"]
    unstemmed = radconcord.score(references=REFERENCES[:3], candidates=CANDIDATES[:3],
                                 metrics=["rougeL"], options={"rougeL": {"use_stemmer": False}})
    assert "stem:porter" in plain.attrs["signatures"]["rougeL"]
    assert "stem:porter" not in unstemmed.attrs["signatures"]["rougeL"]


def test_unavailable_metric_raises_or_gives_nan_columns(clean_env, monkeypatch, tmp_path):
    """chexbert needs a checkpoint that is not here: an error naming it, or NaN + the reason."""
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path / "no-models"))
    with pytest.raises(radconcord.MetricUnavailable, match="chexbert"):
        radconcord.score(references=REFERENCES[:2], candidates=CANDIDATES[:2],
                         metrics=["bleu4", "chexbert_f1"])
    df = radconcord.score(references=REFERENCES[:2], candidates=CANDIDATES[:2],
                          metrics=["bleu4", "chexbert_f1"], skip_unavailable=True)
    assert list(df.columns) == ["bleu4", "chexbert_f1"]
    assert df["chexbert_f1"].isna().all() and df["bleu4"].notna().all()
    assert "chexbert" in df.attrs["unavailable"]
    assert "chexbert_f1" not in df.attrs["signatures"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"references": ["a", "b"], "candidates": ["a"]}, "2 references but 1 candidates"),
        ({"references": ["a", 3], "candidates": ["a", "b"]}, r"references\[1\]"),
        ({"references": "a", "candidates": "a"}, "expected a list of texts"),
        ({"references": ["a"], "candidates": ["a\x00"]}, r"candidates\[0\]"),
        ({"references": ["a"], "candidates": ["b"], "metrics": ["nosuch"]}, "nosuch"),
        ({"references": ["a", "b"], "candidates": ["a", "b"], "ids": ["x", "x"]},
         "duplicate id 'x'"),
        ({"references": ["a"], "candidates": ["b"], "options": {"rouge": {"nope": 1}}}, "nope"),
        ({"references": ["a"], "candidates": ["b"], "device": "tpu"}, "unknown device"),
        ({"references": ["a"], "candidates": ["b"], "images": ["/no/such.png"]},
         r"images\[0\]: no such file"),
    ],
)
def test_score_refuses_bad_input_naming_it(clean_env, kwargs, message):
    kwargs.setdefault("metrics", ["rougeL"])
    with pytest.raises(radconcord.InputError, match=message):
        radconcord.score(**kwargs)
    assert not clean_env.exists()


def test_score_is_keyword_only():
    with pytest.raises(TypeError):
        radconcord.score(["a"], ["b"], ["bleu4"])  # type: ignore[misc]


def test_metrics_catalogue_matches_the_cli(capsys):
    assert main(["metrics", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    df = radconcord.metrics()
    expected = [(k["key"], m["family"], k["higher_is_better"], m["available"], m["reason"])
                for m in cli for k in m["keys"]]
    # pandas stores a missing reason as NaN in its string column.
    got = [(k, f, h, a, r if isinstance(r, str) else None) for k, f, h, a, r in
           df[["key", "family", "higher_is_better", "available", "reason"]]
           .itertuples(index=False, name=None)]
    assert got == expected
    assert df.set_index("key").loc["radcliq_v1", "higher_is_better"] == False  # noqa: E712


# --- correlate / load_study against `correlate --study` -------------------------------------

@pytest.fixture
def rated_study(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    build_rated_study(url)
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    assert main(["score", "--study", "api-study", "--metrics", "bleu4,rougeL,chexpert_f1"]) == 0
    return url


@pytest.mark.parametrize(
    ("cli_args", "target", "by_case"),
    [([], "total", False), (["--significant-only", "--cluster", "case"], "significant", True)],
)
def test_correlate_on_load_study_equals_the_cli(rated_study, tmp_path, cli_args, target,
                                                by_case):
    out = tmp_path / "r.json"
    assert main(["correlate", "--study", "api-study", "--bootstrap", "300", "--seed", "3",
                 "--database-url", rated_study, "--output", str(out), *cli_args]) == 0
    cli = json.loads(out.read_text())

    study = radconcord.load_study("api-study", database_url=rated_study)
    seen: list[tuple[int, int, str]] = []
    result = radconcord.correlate(
        scores=study.scores, ratings=study.errors(target), bootstrap=300, seed=3,
        cases=study.pairs["case_id"] if by_case else None,
        progress=lambda done, total, key: seen.append((done, total, key)),
    )
    assert list(result.index) == list(cli["metrics"])
    # One progress step per key, in order, ending at total/total.
    keys = list(cli["metrics"])
    assert seen == [(i + 1, len(keys), k) for i, k in enumerate(keys)]
    assert result.attrs["n_pairs"] == cli["n_pairs"]
    assert result.attrs["resamples"] == cli["resamples"] == 300
    for key, entry in cli["metrics"].items():
        row = result.loc[key]
        assert row["kendall_tau_b"] == entry["kendall_tau_b"]
        assert [row["kendall_ci_low"], row["kendall_ci_high"]] == entry["kendall_ci95"]
        assert row["spearman"] == entry["spearman"]
        assert [row["spearman_ci_low"], row["spearman_ci_high"]] == entry["spearman_ci95"]
        assert row["n"] == entry["n"]
        assert row["higher_is_better"] == entry["higher_is_better"]
        assert study.signatures[key] == entry["signature"]


def test_correlate_study_is_the_clis_json(rated_study, tmp_path):
    out = tmp_path / "r.json"
    assert main(["correlate", "--study", "api-study", "--bootstrap", "100", "--unit",
                 "rater_pair", "--permutations", "50", "--database-url", rated_study,
                 "--output", str(out)]) == 0
    result = radconcord.correlate_study("api-study", database_url=rated_study, bootstrap=100,
                                        unit="rater_pair", permutations=50)
    assert json.loads(json.dumps(result)) == json.loads(out.read_text())
    sections: list[tuple[int, int, str]] = []
    again = radconcord.correlate_study(
        "api-study", database_url=rated_study, bootstrap=100, unit="rater_pair",
        permutations=50, progress=lambda done, total, name: sections.append((done, total, name)))
    assert json.loads(json.dumps(again)) == json.loads(out.read_text())
    assert [d for d, _, _ in sections] == list(range(1, len(sections) + 1))
    assert sections[-1][0] == sections[-1][1] > 1
    with pytest.raises(radconcord.InputError, match="unit must be one of"):
        radconcord.correlate_study("api-study", database_url=rated_study, unit="nope")
    with pytest.raises(radconcord.InputError, match="unexpected keyword"):
        radconcord.correlate_study("api-study", database_url=rated_study, nope=1)


def test_load_study_contents(rated_study):
    study = radconcord.load_study("api-study", database_url=rated_study)
    assert len(study.pairs) == 20 and list(study.pairs["position"]) == list(range(20))
    assert study.pairs["reference"].iloc[0].startswith("There is a small effusion")
    assert study.raters == ("ann", "bob", "cat", "imp")
    errors = study.errors()
    assert list(errors.columns) == ["ann", "bob", "cat", "imp"]
    # cat's unfinished pair 3 does not count; imp (no assignments) counts where rated.
    assert np.isnan(errors["cat"].iloc[3]) and not np.isnan(errors["cat"].iloc[2])
    assert errors["ann"].notna().all()
    long = study.ratings
    summed = long.groupby(["pair_id", "rater"])["count"].sum()
    pid = study.pairs.index[0]
    assert summed.loc[(pid, "ann")] == errors.loc[pid, "ann"]
    # Every key the families stored: the bleu family stores bleu1..4, chexpert its accuracy.
    assert set(study.scores.columns) == {"bleu1", "bleu2", "bleu3", "bleu4", "rouge1", "rouge2",
                                         "rougeL", "chexpert_acc", "chexpert_f1"}
    # The stored values are what radconcord.score computes for the same texts.
    fresh = radconcord.score(references=list(study.pairs["reference"]),
                             candidates=list(study.pairs["candidate"]), metrics=["rougeL"])
    assert list(fresh["rougeL"]) == list(study.scores["rougeL"])


def test_load_study_errors(rated_study, tmp_path):
    with pytest.raises(radconcord.InputError, match="no study named 'nope'"):
        radconcord.load_study("nope", database_url=rated_study)
    missing = tmp_path / "missing.db"
    with pytest.raises(radconcord.InputError, match="no study database"):
        radconcord.load_study("api-study", database_url=str(missing))
    assert not missing.exists()


def test_correlate_in_memory_inputs_agree():
    """A dict and arrays (by position) give what DataFrames aligned by index give; a per-pair
    target equals the mean of the raters' columns; a known direction is applied."""
    rng = np.random.default_rng(0)
    n = 30
    errors = rng.poisson(2.0, size=(n, 3)).astype(float)
    errors[::7, 1] = np.nan
    quality = -np.nanmean(errors, axis=1) + rng.normal(scale=0.5, size=n)
    ids = [f"x{i}" for i in range(n)]
    scores = pd.DataFrame({"bleu4": quality, "radcliq_v1": -quality}, index=ids)
    by_frame = radconcord.correlate(scores=scores[::-1],
                                    ratings=pd.DataFrame(errors, index=ids), bootstrap=50)
    by_array = radconcord.correlate(scores={"bleu4": quality[::-1],
                                            "radcliq_v1": -quality[::-1]},
                                    ratings=errors[::-1], bootstrap=50)
    mean = np.nanmean(errors, axis=1)
    by_mean = radconcord.correlate(scores=scores, ratings=pd.Series(mean, index=ids),
                                   bootstrap=0)
    pd.testing.assert_frame_equal(by_frame.reset_index(drop=True),
                                  by_array.reset_index(drop=True))
    # radcliq is lower-is-better: oriented, it agrees exactly as bleu4 does.
    assert by_mean.loc["bleu4", "kendall_tau_b"] == by_mean.loc["radcliq_v1", "kendall_tau_b"]
    assert by_mean.loc["bleu4", "kendall_tau_b"] > 0.3
    assert math.isnan(by_mean.loc["bleu4", "kendall_ci_low"])
    from scipy import stats

    tau = stats.kendalltau(quality, -mean).statistic
    assert by_mean.loc["bleu4", "kendall_tau_b"] == pytest.approx(tau, abs=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scores": {"mystery": [1, 2, 3]}, "ratings": [1, 2, 3]}, "higher_is_better"),
        ({"scores": {"bleu4": [1, 2, 3]}, "ratings": [1, 2]}, "2 values for 3 pairs"),
        ({"scores": {"bleu4": [1, 2, 3]}, "ratings": [1, np.nan, np.nan]}, "at least 2"),
        ({"scores": {"bleu4": [1, 2]}, "ratings": [1, 2], "metrics": ["rougeL"]},
         "no column rougeL"),
        ({"scores": pd.DataFrame({"bleu4": [1.0, 2.0]}, index=["a", "b"]),
          "ratings": pd.Series([1.0, 2.0], index=["a", "c"])}, "no row for pair"),
        ({"scores": [1, 2], "ratings": [1, 2]}, "expected a DataFrame"),
    ],
)
def test_correlate_refuses_bad_input(kwargs, message):
    with pytest.raises(radconcord.InputError, match=message):
        radconcord.correlate(**kwargs)


def test_correlate_with_unknown_key_and_given_direction():
    df = radconcord.correlate(scores={"mine": [3.0, 2.0, 1.0, 0.0]},
                              ratings=[0.0, 1.0, 2.0, 3.0], higher_is_better={"mine": True},
                              bootstrap=0)
    assert df.loc["mine", "kendall_tau_b"] == 1.0
    df = radconcord.correlate(scores={"mine": [3.0, 2.0, 1.0, 0.0]},
                              ratings=[0.0, 1.0, 2.0, 3.0], higher_is_better={"mine": False},
                              bootstrap=0)
    assert df.loc["mine", "kendall_tau_b"] == -1.0


def test_import_loads_no_model_and_opens_no_database(tmp_path):
    """`import radconcord` (and its rewards) imports neither torch, pandas nor the database."""
    import subprocess
    import sys

    code = ("import sys, radconcord, radconcord.rewards; print(sorted(m for m in ('torch',"
            " 'transformers', 'pandas', 'numpy', 'sqlalchemy', 'radconcord.db.session',"
            " 'streamlit') if m in sys.modules))")
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin",
           "RADCONCORD_DATA_DIR": str(tmp_path / "data")}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert not (tmp_path / "data").exists()


def test_pairs_with_images_share_the_clis_cache_keys(clean_env, tmp_path, capsys, monkeypatch):
    """A pair's cache key covers its image files' bytes: images= gives the key the CLI's
    image column gives, so the CLI finds what the API stored (and a pair without the image
    is another input)."""
    from PIL import Image

    img = tmp_path / "cxr.png"
    Image.new("L", (8, 8), color=90).save(img)
    cache = tmp_path / "c.db"
    radconcord.score(references=REFERENCES[:2], candidates=CANDIDATES[:2], ids=IDS[:2],
                     images=[img, [img]], metrics=["rougeL"], cache=cache)
    pairs = tmp_path / "pairs.csv"
    with pairs.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "reference", "candidate", "image"])
        w.writerows([(IDS[i], REFERENCES[i], CANDIDATES[i], img.name) for i in range(2)])
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{cache}")
    assert main(["score", "--input", str(pairs), "--metrics", "rougeL", "--output",
                 str(tmp_path / "s.csv")]) == 0
    assert "rouge: 0 computed, 2 from cache" in capsys.readouterr().out
    seen: list[str] = []
    for _ in range(2):
        radconcord.score(references=REFERENCES[:2], candidates=CANDIDATES[:2],
                         metrics=["rougeL"], cache=cache, progress=lambda d, t, m: seen.append(m))
    # Without the image: new inputs the first time, cached the second.
    assert seen[0] == "rouge: 0 cached" and "rouge: 2 cached" in seen
