"""The scoring runner on an engine (issue 26): the in-process engine, no Ray needed.

With ``score(..., engine=LocalEngine(...))`` the driver keeps the cache lookup and writes and
the engine computes chunks of ``batch_size`` pairs; a corpus-dependent family with the
``corpus_statistics`` hook (CIDEr) gets its statistics once and is then chunked too, with
values equal bit for bit to the in-process one call over the whole set.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pytest
from sqlalchemy import func, select

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
)
from radconcord.backend.metrics.lexical import Cider
from radconcord.backend.scoring.engines import LocalEngine
from radconcord.backend.scoring.runner import MetricPool, ScorePair, score
from radconcord.db.models import MetricScore
from radconcord.db.session import Database

WORDS = ("no acute finding lungs clear pleural effusion heart size normal mild edema left"
         " right lobe opacity stable small basilar atelectasis").split()


def report_pairs(n: int = 23) -> list[ScorePair]:
    """Deterministic pairs with a repeated input and an empty candidate among them."""
    out = []
    for i in range(n):
        ref = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(4 + i % 9))
        cand = " ".join(WORDS[(i * 5 + j * 2) % len(WORDS)] for j in range(3 + i % 7))
        out.append(ScorePair(id=f"p{i}", reference=ref, candidate=cand))
    if n > 5:
        out[5] = ScorePair(id="p5", reference=out[3].reference, candidate=out[3].candidate)
    if n > 8:
        out[8] = ScorePair(id="p8", reference=out[8].reference, candidate="")
    return out


def cache_rows(db: Database) -> list[tuple[Any, ...]]:
    """Every score cell, sorted (value as its repr, so -0.0 and nan compare exactly)."""
    with db.begin() as s:
        rows = s.execute(select(MetricScore.input_hash, MetricScore.family, MetricScore.key,
                                MetricScore.signature_hash, MetricScore.signature,
                                MetricScore.value, MetricScore.device)).all()
    return sorted((*r[:5], repr(r[5]), r[6]) for r in rows)


def n_rows(db: Database) -> int:
    with db.begin() as s:
        return s.scalar(select(func.count()).select_from(MetricScore))


def other_db(tmp_path, name: str) -> Database:
    return Database(f"sqlite:///{tmp_path / name}")


def same(a: list[float], b: list[float]) -> bool:
    """Equal bit for bit (nan where nan)."""
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True))


def test_engine_values_and_cache_rows_equal_in_process(db, tmp_path):
    pairs = report_pairs()
    metrics = ["bleu", "rouge", "cider"]
    local_db = other_db(tmp_path, "inproc.db")
    try:
        ref = score(pairs, metrics, db=local_db, batch_size=4)
        on = score(pairs, metrics, db=db, batch_size=4, engine=LocalEngine(MetricPool()))
        assert list(on.columns) == list(ref.columns)
        for key in ref.columns:
            assert same(on.columns[key], ref.columns[key]), key
        # Same cells (input, key, signature incl. the scored set's identity, value, device).
        assert cache_rows(db) == cache_rows(local_db)
    finally:
        local_db.dispose()
    distinct = len({p.input_hash for p in pairs if p.candidate})
    n_keys = len(on.columns)
    assert n_rows(db) == distinct * n_keys  # once per pair and key
    for fam in metrics:
        run = on.families[fam]
        assert run.status == "done" and run.computed == distinct and run.cached == 0
        assert run.seconds > 0 and run.device == "cpu"
    # Rescoring on the engine finds everything in the cache and writes nothing new.
    again = score(pairs, metrics, db=db, batch_size=4, engine=LocalEngine(MetricPool()))
    assert all(r.computed == 0 and r.cached == distinct for r in again.families.values())
    assert n_rows(db) == distinct * n_keys


def test_corpus_statistics_are_computed_once_not_per_chunk(monkeypatch, db):
    stats_calls: list[int] = []
    chunk_calls: list[tuple[int, bool]] = []
    real_stats, real_score = Cider.corpus_statistics, Cider._score

    def counting_stats(self, **kw):
        stats_calls.append(len(kw["references"]))
        return real_stats(self, **kw)

    def counting_score(self, **kw):
        chunk_calls.append((len(kw["references"]), kw.get("corpus") is not None))
        return real_score(self, **kw)

    monkeypatch.setattr(Cider, "corpus_statistics", counting_stats)
    monkeypatch.setattr(Cider, "_score", counting_score)
    pairs = report_pairs()
    scored = sum(1 for p in pairs if p.candidate)
    distinct = len({p.input_hash for p in pairs if p.candidate})
    score(pairs, ["cider"], db=db, batch_size=5, engine=LocalEngine(MetricPool()))
    # Once over the whole scored set (duplicates included), then every chunk with it.
    assert stats_calls == [scored]
    assert [n for n, _ in chunk_calls] == [5] * (distinct // 5) + (
        [distinct % 5] if distinct % 5 else [])
    assert all(with_stats for _, with_stats in chunk_calls)


def test_a_family_without_the_hook_is_one_call_on_the_engine(d, db):
    pairs = report_pairs(9)
    table = score(pairs, ["corpus_double"], db=db, batch_size=2,
                  engine=LocalEngine(MetricPool()))
    assert len([c for fam, c in d.CALLS if fam == "corpus_double"]) == 1
    assert table.families["corpus_double"].status == "done"
    ref = score(pairs, ["corpus_double"], batch_size=2)
    assert same(table.columns["dbl_df"], ref.columns["dbl_df"])


def test_keep_going_on_the_engine(d, db, monkeypatch):
    """A family failing on a worker is failed, one whose model will not load there is
    unavailable, the others are scored."""

    def no_weights(self):
        raise MetricUnavailable("weights missing on this worker")

    monkeypatch.setattr(d.ModelDouble, "_load", no_weights)
    pairs = report_pairs(6)
    pairs[4] = ScorePair(id="p4", reference="x y", candidate="BOOM here")
    driver_pool = MetricPool()
    table = score(pairs, ["fail_double", "model_double", "count_double"], db=db, batch_size=2,
                  keep_going=True, pool=driver_pool, engine=LocalEngine(MetricPool()))
    assert table.families["fail_double"].status == "failed"
    assert "failed on pairs p4" in table.families["fail_double"].failed
    assert "RuntimeError: tokenizer exploded" in table.families["fail_double"].failed
    assert table.families["model_double"].unavailable == "weights missing on this worker"
    assert table.families["count_double"].status == "done"
    assert list(table.columns) == ["dbl_ratio", "dbl_jaccard"]
    # The driver never loaded a model: the engine did.
    assert not driver_pool.get("model_double", {})._loaded


def test_stop_through_progress_stops_the_engine_with_committed_chunks_kept(d, db):
    pairs = report_pairs(10)
    distinct = len({p.input_hash for p in pairs if p.candidate})

    class Stop(Exception):
        pass

    ticks: list[int] = []

    def progress(done: int, total: int, message: str) -> None:
        ticks.append(done)
        if "computed" in message:
            raise Stop

    with pytest.raises(Stop):
        score(pairs, ["count_double"], db=db, batch_size=3, progress=progress,
              engine=LocalEngine(MetricPool()))
    assert n_rows(db) == 3 * 2  # the one chunk finished before the stop, both keys
    assert len([c for fam, c in d.CALLS if fam == "count_double"]) == 1
    table = score(pairs, ["count_double"], db=db, batch_size=3,
                  engine=LocalEngine(MetricPool()))
    assert table.families["count_double"].cached == 3
    assert table.families["count_double"].computed == distinct - 3


class EndpointDouble(BaseMetric):
    """An LLM-like family: a candidate saying ``DOWN`` got no endpoint answer."""

    spec: ClassVar[MetricSpec] = MetricSpec(name="endpoint_double",
                                            outputs=(OutputSpec("dbl_endpoint"),))

    def signature(self) -> str:
        return "endpoint_double|v1"

    def _score(self, *, references, candidates, images) -> MetricResult:
        down = ["DOWN" in c for c in candidates]
        return MetricResult(
            values={"dbl_endpoint": [math.nan if x else 1.0 for x in down]},
            details=[{"endpoint_error": "no endpoint answered"} if x else {"ok": True}
                     for x in down],
        )


def test_endpoint_errors_from_the_engine_are_never_cached(monkeypatch, db):
    entry = registry.Entry("endpoint_double", f"{__name__}:EndpointDouble",
                           ("dbl_endpoint",), "test-double")
    monkeypatch.setitem(registry.ENTRIES, "endpoint_double", entry)
    monkeypatch.setitem(registry.KEY_TO_FAMILY, "dbl_endpoint", "endpoint_double")
    pairs = [ScorePair(id=f"e{i}", reference=f"ref {i}", candidate=f"cand {i}" +
                       (" DOWN" if i % 3 == 0 else "")) for i in range(7)]
    table = score(pairs, ["endpoint_double"], db=db, batch_size=2,
                  engine=LocalEngine(MetricPool()))
    assert table.families["endpoint_double"].endpoint_failed == 3
    assert n_rows(db) == 4
    with db.begin() as s:
        details = s.scalars(select(MetricScore.details)).all()
    assert details == [{"ok": True}] * 4  # the details travel into the cache rows


def test_vlscore_calibrated_c_is_computed_once_over_the_whole_set(db, tmp_path, monkeypatch):
    """VLScore without an explicit C: C (the set's largest triangle) is computed once, by the
    engine, with the images given as paths, and every chunk is scored with it.

    C equals the in-process one call's bit for bit: the hook embeds the whole set in the same
    batches as that call. The per-pair values are compared to a tolerance: a chunk embeds its
    texts and images in other fp32 batches, which moves unit embeddings by up to ~1e-6
    (tests/unit/test_vlscore.py, EMBED_TOL), and this random-weight model's thin triangles
    (T ~ 1e-3) turn that into up to ~1e-3 on T / C there; 2e-3 is allowed here.
    """
    from radconcord.backend.metrics.vlscore import VLScore
    from tests.unit.test_vlscore import _png, _tiny_dual_encoder

    path, _ = _tiny_dual_encoder(tmp_path)
    imgs = [_png(tmp_path / f"im{k}.png", k) for k in range(4)]
    calls: list[int] = []
    real = VLScore.corpus_statistics

    def counting(self, **kw):
        calls.append(len(kw["references"]))
        return real(self, **kw)

    monkeypatch.setattr(VLScore, "corpus_statistics", counting)
    base = report_pairs(7)
    pairs = [ScorePair(id=p.id, reference=p.reference, candidate=p.candidate or "x",
                       images=(imgs[k % 4],)) for k, p in enumerate(base)]
    opts = {"vlscore": {"model": str(path)}}
    on = score(pairs, ["vlscore"], options=opts, db=db, batch_size=2,
               engine=LocalEngine(MetricPool()))
    assert calls == [len(pairs)]
    whole = score(pairs, ["vlscore"], options=opts, batch_size=2)
    with db.begin() as s:
        cs = {row["C"] for row in s.scalars(select(MetricScore.details)).all()}
    assert cs == {whole.families["vlscore"].corpus["vlscore_C"]}
    for key in whole.columns:
        assert on.columns[key] == pytest.approx(whole.columns[key], abs=2e-3), key


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workers", "2"], "--workers works with --engine ray"),
        (["--ray-address", "host:6379"], "--ray-address works with --engine ray"),
        (["--engine", "ray", "--workers", "0"], "--workers must be at least 1 (got 0)"),
    ],
)
def test_score_cli_refuses_engine_options_that_do_not_fit(tmp_path, monkeypatch, capsys, extra,
                                                          message):
    from radconcord.backend import cli

    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/cli.db")
    src = tmp_path / "pairs.csv"
    src.write_text("id,reference,candidate\na,no acute process,no acute disease\n",
                   encoding="utf-8")
    out = tmp_path / "scores.csv"
    code = cli.main(["score", "--input", str(src), "--metrics", "bleu4", "--output", str(out),
                     *extra])
    assert code == 2
    assert f"error: {message}" in capsys.readouterr().err
    assert not out.exists()


def test_score_cli_says_it_scored_in_this_process(tmp_path, monkeypatch, capsys):
    from radconcord.backend import cli

    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/cli.db")
    src = tmp_path / "pairs.csv"
    src.write_text("id,reference,candidate\na,no acute process,no acute disease\n",
                   encoding="utf-8")
    code = cli.main(["score", "--input", str(src), "--metrics", "bleu4", "--output",
                     str(tmp_path / "s.csv"), "--engine", "local"])
    assert code == 0
    assert "engine: local (this process)" in capsys.readouterr().out


def test_each_ray_actor_holds_one_device():
    """On a CUDA device each actor asks Ray for one GPU and sees it as ``cuda`` (Ray makes only
    that GPU visible); on CPU, or ``auto`` on a cluster without GPUs, none."""
    from radconcord.backend.scoring.engines import actor_placement

    assert actor_placement("cuda:3", {"CPU": 16, "GPU": 4}) == (1, "cuda")
    assert actor_placement("cuda", {"CPU": 16}) == (1, "cuda")
    assert actor_placement("auto", {"CPU": 16, "GPU": 2}) == (1, "cuda")
    assert actor_placement("auto", {"CPU": 16}) == (0, "auto")
    assert actor_placement("cpu", {"CPU": 16, "GPU": 2}) == (0, "cpu")
