"""Metric-oracle candidates: candidate stage, exact re-ranking, dedup, engines, recall.

Expected oracles are computed independently here by scoring every corpus report with the
registered metric in a plain loop (no candidate stage) and taking the arg-best.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from radconcord.backend.datasets import oracle
from radconcord.backend.datasets.corpus import CorpusReport, load_iu_corpus
from radconcord.backend.metrics import registry

TESTS = [
    CorpusReport("t1", "Heart size is normal. No focal consolidation. No pleural effusion."),
    CorpusReport("t2", "Small left pleural effusion with adjacent atelectasis. No pneumothorax."),
    CorpusReport("t3", "Stable right upper lobe nodule. Lungs otherwise clear."),
]
CORPUS = [
    CorpusReport("c1", "Heart size is normal. No focal consolidation. No pleural effusion."),
    CorpusReport("c2", "Heart size normal. No consolidation or effusion."),
    CorpusReport("c3", "The heart is normal in size. There is no focal consolidation."),
    CorpusReport("c4", "Small left pleural effusion. No pneumothorax."),
    CorpusReport("c5", "Left pleural effusion with atelectasis at the base."),
    CorpusReport("c6", "Right upper lobe nodule, stable. Lungs are clear."),
    CorpusReport("c7", "Mild cardiomegaly. Pulmonary vascular congestion."),
    CorpusReport("c8", "Large right pneumothorax. Chest tube recommended."),
    CorpusReport("c9", "Heart size normal. No consolidation or effusion."),  # duplicate of c2
    CorpusReport("t3", "Stable right upper lobe nodule. Lungs otherwise clear."),  # the test
    CorpusReport("c10", "No acute cardiopulmonary process. Lungs clear."),
]


def brute_force_best(test: CorpusReport, corpus: list[CorpusReport], key: str) -> set[str]:
    """Ids of every corpus report with the best value (the test and its duplicates left out)."""
    family = registry.KEY_TO_FAMILY[key]
    metric = registry.create(family)
    pool = [c for c in corpus
            if c.report_id != test.report_id and " ".join(c.text.split()) !=
            " ".join(test.text.split())]
    values = metric.score(references=[test.text] * len(pool),
                          candidates=[c.text for c in pool]).values[key]
    higher = metric.spec.direction(key)
    best = max(values) if higher else min(values)
    return {c.report_id for c, v in zip(pool, values, strict=True) if v == best}


def test_tfidf_search_ranks_by_cosine_excludes_and_breaks_ties_by_index():
    texts = ["a b c", "a b", "x y z", "a b", "c d"]
    index = oracle.TfidfIndex(texts)
    top = index.search(["a b"], top_k=3)[0]
    # 1 and 3 are identical to the query (cosine 1): the lower index comes first.
    assert top[:2] == [1, 3]
    assert top[2] == 0
    assert index.search(["a b"], top_k=3, exclude=[{1, 3}])[0][0] == 0
    everything = index.search(["a b"], top_k=None, exclude=[{2}])[0]
    assert sorted(everything) == [0, 1, 3, 4]
    # Rows are L2-normalised: a text's cosine with itself is 1.
    sims = (index.transform(["x y z"]) @ index.matrix.T).toarray()[0]
    assert sims[2] == pytest.approx(1.0)


def test_pool_groups_duplicates_and_excludes_the_test_and_its_duplicates():
    pool = oracle.Pool.from_reports(CORPUS)
    assert len(pool) == len(CORPUS) - 1  # c9 folds into c2
    i = pool.ids.index("c2")
    assert pool.members[i] == ("c2", "c9")
    assert pool.excluded_for(TESTS[2]) == {pool.ids.index("t3")}
    assert pool.excluded_for(TESTS[0]) == {pool.ids.index("c1")}  # exact duplicate text
    assert pool.excluded_for(CorpusReport("zz", "nothing alike")) == set()


@pytest.mark.parametrize("key", ["bleu4", "rougeL"])
def test_exhaustive_oracle_matches_brute_force(key):
    result = oracle.build_oracle(TESTS, CORPUS, [key], top_k=None)
    assert [p.test_id for p in result.picks] == ["t1", "t2", "t3"]
    for test, pick in zip(TESTS, result.picks, strict=True):
        assert pick.corpus_id in brute_force_best(test, CORPUS, key)
        assert pick.corpus_id not in {test.report_id}
        assert pick.candidate != test.text
        assert pick.source == f"oracle:{key}"
        assert pick.stage_rank is None


def test_staged_oracle_finds_the_exhaustive_best_on_a_small_corpus():
    staged = oracle.build_oracle(TESTS, CORPUS, ["bleu4", "rougeL"], top_k=4)
    full = oracle.build_oracle(TESTS, CORPUS, ["bleu4", "rougeL"], top_k=None)
    for key in ("bleu4", "rougeL"):
        for t in TESTS:
            assert staged.best_values[t.report_id][key] == full.best_values[t.report_id][key]
    assert staged.n_scored_pairs == 3 * 4
    assert all(p.stage_rank is not None and 1 <= p.stage_rank <= 4 for p in staged.picks)


def test_picks_of_several_metrics_are_deduplicated_with_every_metric_recorded():
    result = oracle.build_oracle(TESTS, CORPUS, ["bleu4", "rougeL"], top_k=None)
    by_test: dict[str, list[oracle.OraclePick]] = {}
    for p in result.picks:
        by_test.setdefault(p.test_id, []).append(p)
    for test in TESTS:
        picks = by_test[test.report_id]
        # Each key picked exactly one candidate; candidates are distinct within a test.
        assert sorted(k for p in picks for k in p.metrics) == ["bleu4", "rougeL"]
        assert len({p.corpus_id for p in picks}) == len(picks)
        best = {k: brute_force_best(test, CORPUS, k) for k in ("bleu4", "rougeL")}
        if best["bleu4"] & best["rougeL"]:
            assert len(picks) == 1 and picks[0].source == "oracle:bleu4+rougeL"
    assert result.n_picks_before_dedup == 2 * len(TESTS)
    assert len(result.picks) < result.n_picks_before_dedup  # at least one shared pick
    manifest = result.manifest()
    assert manifest["counts"]["pairs"] == len(result.picks)
    assert manifest["signatures"]["bleu4"].startswith("bleu|n:4")
    assert manifest["candidate_stage"]["top_k"] is None


def test_per_metric_k_picks_the_top_k_in_metric_order_with_unique_labels():
    result = oracle.build_oracle(TESTS[:1], CORPUS, ["bleu4"], per_metric=3, top_k=None)
    ranking = result.rankings["t1"]["bleu4"]
    pool = oracle.Pool.from_reports(CORPUS)
    assert [p.corpus_id for p in result.picks] == [pool.ids[i] for i in ranking[:3]]
    values = [p.values["bleu4"] for p in result.picks]
    assert values == sorted(values, reverse=True)
    assert [p.source for p in result.picks] == ["oracle:bleu4", "oracle:bleu4@2",
                                                "oracle:bleu4@3"]


def test_lower_is_better_keys_pick_the_minimum():
    # The selection step on real BLEU values, with the direction flipped as for RadCliQ.
    pool = oracle.Pool.from_reports(CORPUS)
    cands = list(range(len(pool)))
    metric = registry.create("bleu")
    vals = np.asarray(metric.score(references=[TESTS[0].text] * len(cands),
                                   candidates=list(pool.texts)).values["bleu4"])
    pairs = np.asarray([(0, c) for c in cands])
    picks, _, best = oracle._select([TESTS[0]], pool, [cands], pairs, {"err": vals}, ["err"],
                                    {"err": False}, 1, False)
    assert best["t1"]["err"] == float(vals.min())
    assert picks[0].corpus_id == pool.ids[int(np.argmin(vals))]


def test_bad_requests_raise_clear_errors():
    with pytest.raises(oracle.OracleError, match="unknown metric 'nope'"):
        oracle.build_oracle(TESTS, CORPUS, ["nope"])
    with pytest.raises(oracle.OracleError, match=r"top-k \(2\) must be at least per-metric"):
        oracle.build_oracle(TESTS, CORPUS, ["bleu4"], per_metric=3, top_k=2)
    with pytest.raises(oracle.OracleError, match="duplicate test report id"):
        oracle.build_oracle([TESTS[0], TESTS[0]], CORPUS, ["bleu4"])
    with pytest.raises(oracle.OracleError, match="options given for metric"):
        oracle.build_oracle(TESTS, CORPUS, ["bleu4"], options={"rouge": {"use_stemmer": False}})
    with pytest.raises(oracle.OracleError, match="unknown engine"):
        oracle.build_oracle(TESTS, CORPUS, ["bleu4"], engine="spark")


def test_ray_engine_gives_results_identical_to_local():
    import ray  # in the test install ([dev] holds [all], which holds the ray extra)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        engine = oracle.RayEngine()
        assert not engine._started  # uses the cluster started above
        on_ray = oracle.build_oracle(TESTS, CORPUS, ["bleu4", "rougeL"], top_k=5,
                                     engine=engine, chunk_size=4)
        assert ray.is_initialized()
    finally:
        ray.shutdown()
    local = oracle.build_oracle(TESTS, CORPUS, ["bleu4", "rougeL"], top_k=5, chunk_size=4)
    assert on_ray.engine == "ray" and local.engine == "local"
    assert [p.as_dict() for p in on_ray.picks] == [p.as_dict() for p in local.picks]
    for t in TESTS:
        for key in ("bleu4", "rougeL"):
            np.testing.assert_array_equal(on_ray.scores[t.report_id][key],
                                          local.scores[t.report_id][key])


def test_candidate_stage_recall_on_the_iu_corpus():
    """Recall@50 of the TF-IDF stage vs exhaustive search, 8 IU test reports x 3,927.

    bench/bench_build_study.py measures it on 50 reports (49/50 bleu4, 47/50 rougeL at k=50
    on its default sample; 49/50 and 50/50 on a second one). A small sample keeps this test
    fast; the bound (>= 7/8 per key) fails if the stage stops finding the oracles.
    """
    iu = load_iu_corpus()
    assert len(iu) == 3927 and iu.n_skipped == 28  # 3,955 reports, 28 without text
    tests = random.Random(0).sample(list(iu.reports), 8)
    recall = oracle.candidate_recall(tests, iu.reports, ["bleu4", "rougeL"], top_k=50)
    print({k: f"{r.hits}/{r.n_tests}" for k, r in recall.items()})
    assert set(recall) == {"bleu4", "rougeL"}
    for r in recall.values():
        assert r.n_tests == 8 and r.top_k == 50
        assert r.hits >= 7
        assert not math.isnan(r.recall)


def test_scoring_goes_through_the_callers_metric_pool():
    """The local engine scores with the caller's MetricPool (a worker's): instances are
    created once and reused by the next build, and results equal a build on a fresh pool."""
    from radconcord.backend.scoring.runner import MetricPool

    pool = MetricPool()
    first = oracle.build_oracle(TESTS, CORPUS, ["bleu4", "rougeL"], top_k=5, chunk_size=4,
                                metric_pool=pool)
    assert pool.created == 2
    bleu = pool.get("bleu", {})
    again = oracle.build_oracle(TESTS, CORPUS, ["bleu4", "rougeL"], top_k=5, chunk_size=4,
                                metric_pool=pool)
    assert pool.created == 2 and pool.get("bleu", {}) is bleu
    fresh = oracle.build_oracle(TESTS, CORPUS, ["bleu4", "rougeL"], top_k=5, chunk_size=4)
    assert [p.as_dict() for p in first.picks] == [p.as_dict() for p in again.picks] \
        == [p.as_dict() for p in fresh.picks]


def test_a_corpus_dependent_family_is_scored_in_one_call_on_every_engine(monkeypatch):
    """CIDEr is declared corpus dependent in the registry: whatever the chunk size, the
    engine sends every (test, candidate) pair in one call, and the signature says so."""
    from radconcord.backend.scoring.engines import LocalEngine
    from radconcord.backend.scoring.runner import MetricPool

    pool = MetricPool()
    cider = pool.get("cider", {})
    calls: list[int] = []
    real = cider.score

    def spy(**kwargs):
        calls.append(len(kwargs["references"]))
        return real(**kwargs)

    monkeypatch.setattr(cider, "score", spy)
    res = oracle.build_oracle(TESTS, CORPUS, ["cider", "bleu4"], top_k=4, chunk_size=2,
                              engine=LocalEngine(pool), metric_pool=pool)
    assert calls == [res.n_scored_pairs] and res.n_scored_pairs > 2
    assert res.signatures["cider"].endswith("|set:oracle-candidates")
    assert "|set:" not in res.signatures["bleu4"]


def test_a_bad_device_is_a_clear_oracle_error():
    with pytest.raises(oracle.OracleError, match="unknown device 'gpu0'"):
        oracle.build_oracle(TESTS, CORPUS, ["bleu4"], top_k=2, device="gpu0")
