"""``radconcord.import_scores``: values computed elsewhere into a study, then read back by
``load_study``, ``correlate`` and ``correlate_study``; bad input raises ``InputError``."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from sqlalchemy import func, select

import radconcord
from radconcord.db.models import MetricScore, ScoreImport
from radconcord.db.session import Database
from tests.helpers_api import STUDY, build_rated_study


@pytest.fixture
def url(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    build_rated_study(url)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    return url


def test_import_then_load_study_and_correlate(url, tmp_path):
    study = radconcord.load_study(STUDY, database_url=url)
    n = len(study.pairs)
    errors = study.errors().mean(axis=1).to_numpy()
    values = np.where(np.isfinite(errors), errors, 0.0) + np.linspace(0, 0.5, n)
    path = tmp_path / "pred.csv"
    path.write_text("pair_id,value\n" + "".join(
        f"op{i},{float(v)!r}\n" for i, v in enumerate(values)), encoding="utf-8")

    result = radconcord.import_scores(study=STUDY, path=path, metric="err_pred",
                                      lower_is_better=True, description="an error predictor",
                                      source="https://example.org", database_url=url)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert result["file_sha256"] == digest and result["rows_written"] == n
    info = result["imports"]["err_pred"]
    assert (info["higher_is_better"], info["n_pairs"], info["n_missing"], info["missing"],
            info["signature"]) == (False, n, 0, [], f"external:err_pred|sha256:{digest}")

    study = radconcord.load_study(STUDY, database_url=url)
    assert study.scores["err_pred"].to_numpy() == pytest.approx(values)
    assert study.directions == {"err_pred": False}
    assert study.imported["err_pred"]["description"] == "an error predictor"
    assert study.signatures["err_pred"] == f"external:err_pred|sha256:{digest}"

    ours = radconcord.correlate(scores=study.scores, ratings=study.errors(),
                                higher_is_better=study.directions, bootstrap=0)
    full = radconcord.correlate_study(STUDY, database_url=url, bootstrap=0, permutations=10)
    entry = full["metrics"]["err_pred"]
    assert entry["kendall_tau_b"] == pytest.approx(ours.loc["err_pred", "kendall_tau_b"],
                                                   abs=1e-12)
    assert entry["kendall_tau_b"] > 0
    assert (entry["higher_is_better"], entry["imported"]["source"]) == (
        False, "https://example.org")


def test_bad_input_raises_input_error_and_writes_nothing(url, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"pair_number": 1, "value": 0.5}\n{"pair_number": 1, "value": 0.7}\n',
                    encoding="utf-8")
    with pytest.raises(radconcord.InputError) as err:
        radconcord.import_scores(study=STUDY, path=path, metric="ext", allow_missing=True,
                                 database_url=url)
    assert str(err.value) == (f"{path}: line 2, field 'pair_number': pair 1 is also on "
                              "line 1")
    with pytest.raises(radconcord.InputError) as err:
        radconcord.import_scores(study=STUDY, path=path, metric="cider", database_url=url)
    assert str(err.value) == ("metric key 'cider' is a registered metric family (keys cider): "
                              "imported scores need a key of their own, such as 'cider_ext'")
    with pytest.raises(radconcord.InputError) as err:
        radconcord.import_scores(study="nope", path=path, metric="ext", database_url=url)
    assert str(err.value) == "no study named 'nope'"
    with pytest.raises(radconcord.InputError) as err:
        radconcord.import_scores(study=STUDY, path=path, metric="ext", allow_missing="yes",
                                 database_url=url)
    assert str(err.value) == ("radconcord.import_scores: allow_missing: expected True or "
                              "False, got str")
    db = Database(url)
    with db.read() as s:
        assert s.scalar(select(func.count(MetricScore.id))) == 0
        assert s.scalar(select(func.count(ScoreImport.id))) == 0
    db.dispose()
