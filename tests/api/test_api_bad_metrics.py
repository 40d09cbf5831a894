"""Arguments of the wrong type give ``radconcord.InputError`` naming the argument (issue 21.7).

Before, ``radconcord.score(..., metrics=None)`` and the like raised a raw ``TypeError`` from
deep inside (``'NoneType' object is not iterable``); every other bad argument already gave
``InputError``, and now these do too, in every public function of ``radconcord.api``.
"""

from __future__ import annotations

import numpy as np
import pytest

import radconcord

REFS = ["No pleural effusion.", "Heart size normal."]
CANDS = ["No effusion.", "Normal heart size."]
SCORES = {"bleu4": [0.1, 0.5, 0.9]}
RATINGS = [2.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metrics": None}, r"metrics: expected a list of metric names .*got NoneType"),
        ({"metrics": 5}, r"metrics: expected a list of metric names .*got int"),
        ({"metrics": b"bleu4"}, r"metrics: expected a list of metric names .*got bytes"),
        ({"metrics": ["bleu4", 5]}, r"metrics: expected metric names"),
        ({"references": None}, r"references: expected a list of texts, got NoneType"),
        ({"candidates": 5}, r"candidates: expected a list of texts, got int"),
        ({"ids": 5}, r"ids: expected one id per pair, got int"),
        ({"ids": "ab"}, r"ids: expected one id per pair, got str"),
        ({"images": 5}, r"images: expected one entry per pair, got int"),
        ({"images": [5, None]}, r"images\[0\]: expected a path, a list of paths or None"),
        ({"images": [[5], None]}, r"images\[0\]: expected a path, got int"),
        ({"options": 5}, r"options: expected a dict"),
        ({"options": {"bleu": 5}}, r"options\['bleu'\]: expected a dict"),
        ({"batch_size": None}, r"batch_size must be a whole number >= 1, got None"),
        ({"batch_size": 0}, r"batch_size must be a whole number >= 1, got 0"),
        ({"device": 5}, r"device: expected 'auto', 'cpu' or 'cuda\[:N\]', got int"),
        ({"cache": 5}, r"cache: expected a database URL or file path, got int"),
        ({"progress": "yes"}, r"progress: expected a function, got str"),
    ],
)
def test_score_refuses_arguments_of_the_wrong_type(kwargs, message):
    args = {"references": REFS, "candidates": CANDS, "metrics": ["bleu4"], **kwargs}
    with pytest.raises(radconcord.InputError, match=message) as info:
        radconcord.score(**args)
    assert str(info.value).startswith("radconcord.score: ")


def test_score_still_takes_what_it_took():
    """The checks refuse wrong types only: strings, tuples, numpy ints still work."""
    df = radconcord.score(references=tuple(REFS), candidates=CANDS, metrics="bleu4, rougeL",
                          ids=np.array([7, 8]), batch_size=np.int64(1))
    assert list(df.columns) == ["bleu4", "rougeL"]
    assert list(df.index) == ["7", "8"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metrics": 5}, r"metrics: expected a list of metric names .*got int"),
        ({"metrics": [5]}, r"metrics: expected metric names"),
        ({"cases": 5}, r"cases: expected one case label per pair, got int"),
        ({"higher_is_better": 5}, r"higher_is_better: expected a dict"),
        ({"bootstrap": None}, r"bootstrap must be a whole number >= 0, got None"),
        ({"scores": {"bleu4": 5}}, r"scores\['bleu4'\]: expected a list of values, got int"),
        ({"progress": 1}, r"progress: expected a function, got int"),
    ],
)
def test_correlate_refuses_arguments_of_the_wrong_type(kwargs, message):
    args = {"scores": SCORES, "ratings": RATINGS, "bootstrap": 0, **kwargs}
    with pytest.raises(radconcord.InputError, match=message) as info:
        radconcord.correlate(**args)
    assert str(info.value).startswith("radconcord.correlate: ")


def test_correlate_takes_metrics_as_one_string_like_score():
    by_list = radconcord.correlate(scores=SCORES, ratings=RATINGS, metrics=["bleu4"],
                                   bootstrap=0)
    by_text = radconcord.correlate(scores=SCORES, ratings=RATINGS, metrics="bleu4",
                                   bootstrap=0)
    assert list(by_text.index) == ["bleu4"]
    assert by_text.equals(by_list)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: radconcord.load_study("s", database_url=5),
         r"radconcord.load_study: database_url: expected a database URL or file path"),
        (lambda: radconcord.load_study(None, database_url="x.db"),
         r"radconcord.load_study: name: expected a study name, got NoneType"),
        (lambda: radconcord.correlate_study("s", database_url=5),
         r"radconcord.correlate_study: database_url: expected a database URL or file path"),
        (lambda: radconcord.correlate_study(["s"], database_url="x.db"),
         r"radconcord.correlate_study: name: expected a study name, got list"),
        (lambda: radconcord.correlate_study("s", database_url="x.db", metrics=5),
         r"radconcord.correlate_study: metrics: expected a list of metric names"),
        (lambda: radconcord.correlate_study("s", database_url="x.db", bootstrap="many"),
         r"radconcord.correlate_study: bootstrap must be a whole number >= 0"),
    ],
)
def test_study_functions_refuse_arguments_of_the_wrong_type(call, message, tmp_path,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)  # "x.db" would be looked for here (and is never created)
    with pytest.raises(radconcord.InputError, match=message):
        call()
    assert not (tmp_path / "x.db").exists()


def test_a_cache_in_a_folder_that_cannot_be_created_is_an_input_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(radconcord.InputError,
                       match=rf"cache: database folder {blocker}/sub does not exist and cannot "
                             rf"be created \({blocker} is a file, not a folder\)"):
        radconcord.score(references=REFS, candidates=CANDS, metrics="bleu4",
                         cache=blocker / "sub" / "cache.db")
