"""The scoring runner and the score cache, with test doubles of the metric contract."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select

from radconcord.backend.metrics.base import MetricUnavailable, signature_hash
from radconcord.backend.scoring import cache
from radconcord.backend.scoring.runner import (
    MetricFailed,
    MetricPool,
    ScorePair,
    ScoringError,
    corpus_identity,
    parse_set_options,
    resolve_device,
    score,
)
from radconcord.db.models import MetricScore
from radconcord.db.session import Database

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _pairs(n: int, start: int = 0) -> list[ScorePair]:
    return [
        ScorePair(
            id=f"p{i}",
            reference=f"no acute finding number {i} in the chest",
            candidate=f"no finding {i} seen" + " x" * (i % 3),
        )
        for i in range(start, start + n)
    ]


def _scored(d, family: str = "count_double") -> list[str]:
    return [c for fam, cands in d.CALLS if fam == family for c in cands]


def _rows(db) -> int:
    with db.begin() as s:
        return s.scalar(select(func.count()).select_from(MetricScore))


def test_rescoring_same_signature_computes_nothing(d, db):
    pairs = _pairs(5)
    first = score(pairs, ["count_double"], db=db, batch_size=2)
    assert sorted(_scored(d)) == sorted(p.candidate for p in pairs)
    assert len(d.LOADS) == 1
    d.reset()
    again = score(pairs, ["count_double"], db=db, batch_size=2)
    assert d.CALLS == [] and d.LOADS == []  # no compute, not even a load
    assert again.columns == first.columns
    assert again.families["count_double"].cached == 5
    assert again.families["count_double"].computed == 0
    assert _rows(db) == 5 * 2


def test_changing_an_option_recomputes_and_keeps_old_rows(d, db):
    pairs = _pairs(3)
    base = score(pairs, ["dbl_ratio"], db=db)
    d.reset()
    scaled = score(pairs, ["dbl_ratio"], db=db, options={"count_double": {"scale": 2.0}})
    assert len(_scored(d)) == 3
    for a, b in zip(base.columns["dbl_ratio"], scaled.columns["dbl_ratio"], strict=True):
        assert b == 2.0 * a
    assert (
        base.families["count_double"].signature_hash
        != scaled.families["count_double"].signature_hash
    )
    with db.begin() as s:
        n_sigs = s.scalar(select(func.count(func.distinct(MetricScore.signature_hash))))
    assert n_sigs == 2


def test_only_missing_pairs_are_scored_in_batches(d, db):
    score(_pairs(3), ["count_double"], db=db)
    d.reset()
    seen: list[tuple[int, int]] = []
    table = score(
        _pairs(8),
        ["count_double"],
        db=db,
        batch_size=2,
        progress=lambda a, b, m: seen.append((a, b)),
    )
    new = [p.candidate for p in _pairs(5, start=3)]
    assert sorted(_scored(d)) == sorted(new)
    assert [len(c) for _, c in d.CALLS] == [2, 2, 1]
    assert table.families["count_double"].cached == 3
    assert seen[-1] == (8, 8)
    assert [a for a, _ in seen] == sorted(a for a, _ in seen)


def test_identical_inputs_are_computed_once_and_shared(d, db):
    p = _pairs(1)[0]
    twins = [p, ScorePair(id="twin", reference=p.reference, candidate=p.candidate)]
    table = score(twins, ["dbl_jaccard"], db=db)
    assert len(_scored(d)) == 1
    assert table.columns["dbl_jaccard"][0] == table.columns["dbl_jaccard"][1]


def test_columns_follow_request_order(d):
    table = score(_pairs(2), ["dbl_jaccard", "corpus_double", "dbl_ratio"], db=None)
    assert list(table.columns) == ["dbl_jaccard", "dbl_df", "dbl_ratio"]
    assert table.ids == ["p0", "p1"]


def test_full_precision_nan_as_null_and_details(d, db):
    pairs = [
        ScorePair(id="a", reference="abc", candidate="NAN"),
        ScorePair(id="b", reference="x" * 7, candidate="y"),
    ]
    table = score(pairs, ["count_double"], db=db)
    assert math.isnan(table.columns["dbl_ratio"][0])
    assert table.columns["dbl_ratio"][1] == 1 / 7  # exact: no rounding anywhere
    with db.begin() as s:
        rows = {(r.input_hash, r.key): r for r in s.scalars(select(MetricScore)).all()}
    nan_row = rows[(pairs[0].input_hash, "dbl_ratio")]
    assert nan_row.value is None
    assert nan_row.details == {"n_ref_words": 1, "n_cand_words": 1}
    assert rows[(pairs[1].input_hash, "dbl_ratio")].value == 1 / 7
    assert nan_row.device == "cpu" and nan_row.seconds >= 0
    assert nan_row.signature == table.families["count_double"].signature
    # And back out of the cache: nan stays nan, the float stays exact.
    d.reset()
    again = score(pairs, ["count_double"], db=db)
    assert d.CALLS == []
    assert math.isnan(again.columns["dbl_ratio"][0])
    assert again.columns["dbl_ratio"][1] == 1 / 7


def test_corpus_dependent_metric_gets_whole_set_in_one_call(d, db):
    pairs = [
        ScorePair(id=str(i), reference=ref, candidate=cand)
        for i, (ref, cand) in enumerate(
            [("effusion left", "effusion"), ("no effusion", "edema"), ("edema mild", "edema x")]
        )
    ]
    table = score(pairs, ["corpus_double"], db=db, batch_size=1)
    assert [len(c) for _, c in d.CALLS] == [3]
    # Hand-computed from the double's definition over the whole set of 3 references.
    assert table.columns["dbl_df"] == [2 / 3, 1 / 3, 1 / 3]
    run = table.families["corpus_double"]
    ident = corpus_identity([p.input_hash for p in pairs])
    assert run.signature == f"corpus_double|df:scored-set|set:{ident}"
    assert run.corpus == {"n": 3.0}
    # Same set: cached. A different set: a different signature and a new computation.
    d.reset()
    score(list(reversed(pairs)), ["corpus_double"], db=db, batch_size=1)
    assert d.CALLS == []
    smaller = score(pairs[:2], ["corpus_double"], db=db)
    assert [len(c) for _, c in d.CALLS] == [2]
    assert smaller.families["corpus_double"].signature_hash != run.signature_hash
    assert smaller.columns["dbl_df"] == [1.0, 0.0]


def test_a_corpus_call_is_stored_in_short_transactions(d, db, monkeypatch):
    """One corpus-dependent call returns the whole set; storing it in one transaction would
    hold the SQLite write lock as long as the insert takes. Chunks store every value."""
    from radconcord.backend.scoring import runner

    monkeypatch.setattr(runner, "STORE_CHUNK_ROWS", 2)
    commits = []
    real_begin = db.begin

    def counting_begin(*args, **kwargs):
        commits.append(1)
        return real_begin(*args, **kwargs)

    monkeypatch.setattr(db, "begin", counting_begin)
    pairs = [ScorePair(id=str(i), reference=f"effusion {i}", candidate=f"edema {i}")
             for i in range(5)]
    table = score(pairs, ["corpus_double"], db=db)
    assert [len(c) for _, c in d.CALLS] == [5]
    with db.read() as s:
        stored = s.scalar(select(func.count()).select_from(MetricScore))
    keys = len(table.families["corpus_double"].keys)
    assert stored == 5 * keys
    assert len(commits) == -(-5 * keys // 2)  # ceil(rows / chunk): one write per chunk


def test_empty_reports_get_nan_and_never_reach_the_metric(d, db):
    pairs = [*_pairs(2), ScorePair(id="e", reference="   ", candidate="something")]
    table = score(pairs, ["count_double"], db=db)
    assert table.empty_ids == ["e"]
    assert "something" not in _scored(d)
    assert math.isnan(table.columns["dbl_ratio"][2])
    assert _rows(db) == 2 * 2


def test_unavailable_metric_raises_with_reason_or_is_skipped(d, db):
    with pytest.raises(MetricUnavailable, match="gone_double.*weights not found in /nowhere"):
        score(_pairs(2), ["count_double", "gone_double"], db=db)
    assert d.CALLS == []  # checked before anything is computed
    table = score(_pairs(2), ["count_double", "dbl_gone"], db=db, skip_unavailable=True)
    assert list(table.columns) == ["dbl_ratio", "dbl_jaccard"]
    assert "weights not found" in table.unavailable["gone_double"]


def test_user_errors(d):
    with pytest.raises(ScoringError, match="unknown option.*nope"):
        score(_pairs(1), ["count_double"], options={"count_double": {"nope": 1}})
    with pytest.raises(ScoringError, match="unknown metric 'bleu9'"):
        score(_pairs(1), ["bleu9"])
    with pytest.raises(ScoringError, match="not requested: corpus_double"):
        score(_pairs(1), ["count_double"], options={"corpus_double": {}})
    with pytest.raises(ScoringError, match="duplicate pair id"):
        score([*_pairs(1), *_pairs(1)], ["count_double"])
    with pytest.raises(ScoringError, match="batch size"):
        score(_pairs(1), ["count_double"], batch_size=0)
    with pytest.raises(ScoringError, match="unknown device"):
        resolve_device("tpu", needs_model=True)


def test_set_options_are_parsed():
    opts = parse_set_options(
        ["count_double.scale=2.5", "count_double.label=abc", "bleu.n=3", "x.flag=TRUE"]
    )
    assert opts == {
        "count_double": {"scale": 2.5, "label": "abc"},
        "bleu": {"n": 3},
        "x": {"flag": True},
    }
    with pytest.raises(ScoringError, match="metric.option=value"):
        parse_set_options(["scale=2"])


def test_metric_failure_names_pairs_and_keeps_committed_batches(d, db):
    pairs = [ScorePair(id=f"q{i}", reference="r", candidate=f"c{i}") for i in range(4)]
    pairs[3] = ScorePair(id="q3", reference="r", candidate="BOOM")
    with pytest.raises(MetricFailed, match="fail_double.*q2.*q3.*tokenizer exploded"):
        score(pairs, ["fail_double"], db=db, batch_size=2)
    assert _rows(db) == 2  # the first batch was committed, the failing one left nothing


def test_store_is_insert_or_ignore(db):
    row = cache.ScoreRow("h" * 64, "fam", "k", "s" * 16, "sig", 0.5, None, "cpu", 0.1)
    with db.begin() as s:
        cache.store(s, [row])
    with db.begin() as s:
        cache.store(
            s, [row, cache.ScoreRow("h" * 64, "fam", "k", "s" * 16, "sig", 9.0, None, "cpu", 0.1)]
        )
    assert _rows(db) == 1
    with db.begin() as s:
        assert cache.lookup(s, input_hashes=["h" * 64], keys=["k"], signature_hash="s" * 16) == {
            ("h" * 64, "k"): 0.5
        }


def test_concurrent_writers_never_duplicate(d, tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    Database(url).dispose()  # migrate once
    pairs = _pairs(30)
    errors: list[BaseException] = []

    def work() -> None:
        local = Database(url, migrate=False)
        try:
            score(pairs, ["count_double"], db=local, batch_size=3)
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)
        finally:
            local.dispose()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    check = Database(url, migrate=False)
    assert _rows(check) == 30 * 2
    check.dispose()


def test_pool_keeps_one_warm_instance_per_options(d, db):
    pool = MetricPool()
    score(_pairs(2), ["count_double"], db=db, pool=pool)
    score(_pairs(3, start=5), ["count_double"], db=db, pool=pool)
    assert pool.created == 1 and len(d.LOADS) == 1
    score(
        _pairs(1, start=9),
        ["count_double"],
        db=db,
        pool=pool,
        options={"count_double": {"scale": 3}},
    )
    assert pool.created == 2


def test_signature_hash_keys_the_cache(d, db):
    table = score(_pairs(1), ["count_double"], db=db)
    run = table.families["count_double"]
    assert run.signature == "count_double|scale:1.0|label:x"
    assert run.signature_hash == signature_hash(run.signature)


def test_inference_mode_only_when_torch_is_imported(d):
    import torch

    d.ModelDouble.seen.clear()
    score(_pairs(2), ["model_double"], device="auto")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert d.ModelDouble.seen == [(expected, True)]
    if torch.cuda.is_available():
        assert resolve_device("cuda", needs_model=True) == "cuda"
    else:
        with pytest.raises(ScoringError, match="CUDA is not available"):
            resolve_device("cuda", needs_model=True)


def test_text_metrics_with_device_auto_do_not_import_torch(tmp_path):
    code = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
import scoring_doubles as d
d.install()
from radconcord.backend.scoring.runner import ScorePair, score
from radconcord.db.session import Database
db = Database("sqlite:///{tmp_path}/t.db")
t = score([ScorePair(id="a", reference="r x", candidate="c x")], ["count_double"], db=db,
          device="auto")
assert t.families["count_double"].device == "cpu"
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print("HEAVY", heavy)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


def test_corpus_dependence_is_read_from_the_registry_entry_and_its_options(d, monkeypatch):
    """The runner asks the registry (entry + options), not the instance: a family declared
    corpus dependent when an option is set gets the whole set in one call only then."""
    from radconcord.backend.metrics import registry

    entry = registry.ENTRIES["count_double"]
    monkeypatch.setitem(registry.ENTRIES, "count_double", registry.Entry(
        entry.family, entry.target, entry.keys, entry.kind,
        corpus_dependent=lambda o: o.get("label") == "whole-set"))
    pairs = _pairs(3)
    per_batch = score(pairs, ["count_double"], batch_size=1)
    assert [len(c) for _, c in d.CALLS] == [1, 1, 1]
    assert "|set:" not in per_batch.families["count_double"].signature
    d.reset()
    whole = score(pairs, ["count_double"], batch_size=1,
                  options={"count_double": {"label": "whole-set"}})
    assert [len(c) for _, c in d.CALLS] == [3]
    ident = corpus_identity([p.input_hash for p in pairs])
    assert whole.families["count_double"].signature.endswith(f"|set:{ident}")
