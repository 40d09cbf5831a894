"""Metric-oracle candidates: for each test report, the corpus report a metric scores best.

Following the RadCliQ paper (Yu et al., Patterns 2023), the *metric-oracle* of a test report
under metric M is the report of a corpus (the test report itself and exact duplicates of it
excluded) that maximises M against the test report as reference (minimises it where
``higher_is_better`` is False, e.g. RadCliQ). ReXVal's candidates were made this way.

Two stages keep this tractable on large corpora:

1. **Candidate stage** (:class:`TfidfIndex`): TF-IDF cosine similarity over word 1- to
   3-grams (scipy sparse; 3 beat 1 and 2 on BLEU-4 recall on IU), top ``k`` per test report.
   Deterministic: ties are broken by corpus order.
2. **Exact re-ranking**: every requested metric scores the ``k`` candidates of each test
   report with the metric's instance from the scoring pool; the best
   ``per_metric`` per key are picked. With ``top_k=None`` the whole pool is scored
   (exhaustive search), which :func:`candidate_recall` uses to measure stage 1.

The pool holds each distinct corpus text once (whitespace-normalised); a picked text keeps the
first corpus id that carries it and lists the others. Picks of several metrics that land on
the same text for the same test report are merged into one :class:`OraclePick` whose
``metrics`` name every key that picked it (source label ``oracle:bleu4+rougeL``).

Scoring runs on an engine of the scoring runner (:mod:`backend.scoring.engines`): ``local``
(batched loop in this process, with the caller's :class:`~backend.scoring.runner.MetricPool`)
or ``ray`` (chunks of (test, candidate) index pairs as tasks of Ray actors that each hold a
pool; the pool texts go to the object store once). Both call the same metric code on the same
chunks, so their values are identical. Metrics whose values depend on the scored set (the
registry's ``corpus_dependent``, e.g. CIDEr) are scored in ONE call over every (test,
candidate) pair on either engine, as the scoring runner does.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import sparse

from radconcord.backend.datasets.corpus import CorpusReport, normalise
from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import MetricUnavailable, signature_hash
from radconcord.backend.scoring import engines
from radconcord.backend.scoring.engines import Engine
from radconcord.backend.scoring.engines import LocalEngine as LocalEngine  # re-exported for callers
from radconcord.backend.scoring.engines import RayEngine as RayEngine  # re-exported for callers
from radconcord.backend.scoring.runner import MetricPool, ScoringError, resolve_device

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int, str], None]
DEFAULT_TOP_K = 50
DEFAULT_CHUNK = 2048
SOURCE_PREFIX = "oracle:"


class OracleError(ValueError):
    """A request the oracle cannot honour (unknown metric, bad k, unavailable metric)."""


# --------------------------------------------------------------------------- candidate stage


@dataclass(frozen=True)
class CandidateStage:
    """Settings of the TF-IDF candidate stage (all of them change the candidates).

    Attributes:
        top_k: Candidates kept per test report (``None``: the whole pool, exhaustive).
        ngram_max: Word n-grams from 1 to this length.
        sublinear_tf: ``1 + ln(tf)`` instead of raw counts.
        token_pattern: Regex over the lower-cased text.
    """

    top_k: int | None = DEFAULT_TOP_K
    ngram_max: int = 3
    sublinear_tf: bool = True
    token_pattern: str = r"[a-z0-9]+"

    def as_dict(self) -> dict[str, Any]:
        """JSON-able settings for manifests."""
        return {
            "method": "tfidf-cosine",
            "idf": "ln((1+N)/(1+df))+1",
            "norm": "l2",
            "lowercase": True,
            "tie_break": "corpus order",
            **asdict(self),
        }


class TfidfIndex:
    """TF-IDF vectors of a pool of texts and cosine top-k search against it."""

    def __init__(self, texts: Sequence[str], stage: CandidateStage | None = None) -> None:
        """Fit the vocabulary and idf on ``texts`` and vectorise them.

        Args:
            texts: The pool (one row each).
            stage: Settings (defaults: 1- to 3-grams, sublinear tf).
        """
        self.stage = stage or CandidateStage()
        self._token_re = re.compile(self.stage.token_pattern)
        counts = [self._features(t) for t in texts]
        vocab: dict[str, int] = {}
        for c in counts:
            for f in c:
                if f not in vocab:
                    vocab[f] = len(vocab)
        self.vocab = vocab
        matrix = self._matrix(counts)
        n = len(texts)
        df = np.bincount(matrix.indices, minlength=len(vocab)).astype(np.float64)
        self.idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
        self.matrix = self._weight(matrix)

    def _features(self, text: str) -> Counter[str]:
        tokens = self._token_re.findall(text.lower())
        feats: Counter[str] = Counter()
        for n in range(1, self.stage.ngram_max + 1):
            for i in range(len(tokens) - n + 1):
                feats[" ".join(tokens[i : i + n])] += 1
        return feats

    def _matrix(self, counts: Sequence[Counter[str]]) -> sparse.csr_matrix:
        indptr = [0]
        indices: list[int] = []
        data: list[float] = []
        for c in counts:
            # Sorted columns keep the CSR canonical (and the products reproducible).
            cols = sorted((self.vocab[f], v) for f, v in c.items() if f in self.vocab)
            indices.extend(col for col, _ in cols)
            data.extend(float(v) for _, v in cols)
            indptr.append(len(indices))
        return sparse.csr_matrix(
            (np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int64),
             np.asarray(indptr, dtype=np.int64)),
            shape=(len(counts), len(self.vocab)),
        )

    def _weight(self, matrix: sparse.csr_matrix) -> sparse.csr_matrix:
        m = matrix.copy()
        if self.stage.sublinear_tf:
            m.data = 1.0 + np.log(m.data)
        m = m.multiply(self.idf[np.newaxis, :]).tocsr()
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return sparse.diags(1.0 / norms).dot(m).tocsr()

    def transform(self, texts: Sequence[str]) -> sparse.csr_matrix:
        """L2-normalised TF-IDF rows of ``texts`` (features outside the vocabulary dropped)."""
        return self._weight(self._matrix([self._features(t) for t in texts]))

    def search(
        self,
        queries: Sequence[str],
        *,
        top_k: int | None,
        exclude: Sequence[set[int]] | None = None,
        chunk: int = 128,
    ) -> list[list[int]]:
        """Pool indices per query, best cosine first (ties: lower index first).

        Args:
            queries: Query texts.
            top_k: How many to keep (``None``: every non-excluded pool index).
            exclude: Per query, pool indices never to return.
            chunk: Queries per dense similarity block (memory: chunk x pool floats).
        """
        q = self.transform(queries)
        n_pool = self.matrix.shape[0]
        out: list[list[int]] = []
        for start in range(0, len(queries), chunk):
            sims = (q[start : start + chunk] @ self.matrix.T).toarray()
            for row, sim in enumerate(sims):
                banned = exclude[start + row] if exclude is not None else set()
                if banned:
                    sim[list(banned)] = -np.inf
                keep = n_pool - len(banned) if top_k is None else min(top_k,
                                                                      n_pool - len(banned))
                if keep <= 0:
                    out.append([])
                    continue
                # lexsort: last key is primary -> by -sim, then by index.
                if keep < n_pool:
                    part = np.argpartition(-sim, keep - 1)[:keep]
                    # Ties at the cut-off must resolve by index, as in a full sort.
                    cut = sim[part].min()
                    part = np.union1d(part, np.flatnonzero(sim == cut))
                else:
                    part = np.arange(n_pool)
                order = part[np.lexsort((part, -sim[part]))][:keep]
                out.append([int(i) for i in order if np.isfinite(sim[i])])
        return out


# --------------------------------------------------------------------------------- the pool


@dataclass(frozen=True)
class Pool:
    """Distinct corpus texts (first occurrence wins) and the corpus ids sharing each."""

    texts: tuple[str, ...]
    ids: tuple[str, ...]
    members: tuple[tuple[str, ...], ...]
    index_of_key: dict[str, int]
    index_of_id: dict[str, int]

    @classmethod
    def from_reports(cls, reports: Sequence[CorpusReport]) -> Pool:
        """Group ``reports`` by whitespace-normalised text."""
        texts: list[str] = []
        ids: list[str] = []
        members: list[list[str]] = []
        index_of_key: dict[str, int] = {}
        index_of_id: dict[str, int] = {}
        for r in reports:
            key = normalise(r.text)
            if not key:
                continue
            i = index_of_key.get(key)
            if i is None:
                i = index_of_key[key] = len(texts)
                texts.append(r.text)
                ids.append(r.report_id)
                members.append([])
            members[i].append(r.report_id)
            index_of_id.setdefault(r.report_id, i)
        return cls(tuple(texts), tuple(ids), tuple(tuple(m) for m in members), index_of_key,
                   index_of_id)

    def __len__(self) -> int:
        return len(self.texts)

    def excluded_for(self, test: CorpusReport) -> set[int]:
        """The test report itself (by id) and exact duplicates of its text."""
        out: set[int] = set()
        by_text = self.index_of_key.get(normalise(test.text))
        if by_text is not None:
            out.add(by_text)
        by_id = self.index_of_id.get(test.report_id)
        if by_id is not None:
            out.add(by_id)
        return out


# ---------------------------------------------------------------------------------- engines


def make_engine(name: str | Engine, *, pool: MetricPool | None = None, device: str = "cpu",
                **kwargs: Any) -> Engine:
    """``"local"`` (scoring with ``pool``) or ``"ray"``; an engine object is returned unchanged.

    Raises:
        OracleError: an unknown engine name, or Ray missing.
    """
    try:
        return engines.make_engine(name, pool=pool, device=device, **kwargs)
    except ScoringError as exc:
        raise OracleError(str(exc)) from None


# ---------------------------------------------------------------------------- the oracle


@dataclass(frozen=True)
class OraclePick:
    """One (test report, corpus report) pair picked by one or more metrics.

    Attributes:
        test_id: The test report's id (the study case).
        reference: The test report's text.
        corpus_id: First corpus id carrying the candidate text.
        candidate: The candidate text.
        metrics: Every key that picked it, in request order.
        ranks: ``key -> 1-based rank`` under each picking key.
        values: ``key -> value`` of every requested key for this pair.
        stage_rank: 1-based rank in the candidate stage (``None`` when exhaustive).
        duplicate_ids: Other corpus ids with the same text.
    """

    test_id: str
    reference: str
    corpus_id: str
    candidate: str
    metrics: tuple[str, ...]
    ranks: dict[str, int]
    values: dict[str, float]
    stage_rank: int | None
    duplicate_ids: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        """The pair's source label: ``oracle:bleu4+rougeL``; ``@r`` marks a rank r > 1.

        Each (key, rank) belongs to one pick of a test report, so labels never repeat within
        a case (the ReXVal layout needs one column per source).
        """
        parts = [k if self.ranks[k] == 1 else f"{k}@{self.ranks[k]}" for k in self.metrics]
        return SOURCE_PREFIX + "+".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able record for manifests (no report texts)."""
        return {
            "test_id": self.test_id,
            "corpus_id": self.corpus_id,
            "source": self.source,
            "metrics": list(self.metrics),
            "ranks": dict(self.ranks),
            "values": {k: (None if math.isnan(v) else v) for k, v in self.values.items()},
            "stage_rank": self.stage_rank,
            "duplicate_ids": list(self.duplicate_ids),
        }


@dataclass
class OracleResult:
    """Everything a metric-oracle build produced."""

    picks: list[OraclePick]
    keys: list[str]
    directions: dict[str, bool]
    signatures: dict[str, str]
    stage: CandidateStage
    per_metric: int
    engine: str
    n_tests: int
    n_corpus: int
    n_pool: int
    n_scored_pairs: int
    seconds: dict[str, float] = field(default_factory=dict)
    # test id -> key -> pool indices in metric order (best first); for recall and tests.
    rankings: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    best_values: dict[str, dict[str, float]] = field(default_factory=dict)
    candidates: dict[str, list[int]] = field(default_factory=dict)
    # test id -> key -> values aligned with ``candidates[test id]``.
    scores: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def n_picks_before_dedup(self) -> int:
        """Sum over picks of the number of metrics that chose them."""
        return sum(len(p.metrics) for p in self.picks)

    def signature_hashes(self) -> dict[str, str]:
        """``key -> 16-hex signature hash``."""
        return {k: signature_hash(s) for k, s in self.signatures.items()}

    def manifest(self) -> dict[str, Any]:
        """JSON-able description: keys, directions, signatures, stage settings, picks."""
        return {
            "method": "metric-oracle (RadCliQ paper): best corpus report per metric",
            "metrics": list(self.keys),
            "directions": {k: ("higher" if v else "lower") for k, v in self.directions.items()},
            "signatures": dict(self.signatures),
            "signature_hashes": self.signature_hashes(),
            "per_metric": self.per_metric,
            "candidate_stage": self.stage.as_dict(),
            "engine": self.engine,
            "counts": {
                "tests": self.n_tests,
                "corpus_reports": self.n_corpus,
                "distinct_corpus_texts": self.n_pool,
                "scored_pairs": self.n_scored_pairs,
                "picks_before_dedup": self.n_picks_before_dedup,
                "pairs": len(self.picks),
            },
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "picks": [p.as_dict() for p in self.picks],
        }


def resolve_keys(metrics: Sequence[str]) -> dict[str, list[str]]:
    """``family -> keys`` for requested families/keys (registry semantics).

    Raises:
        OracleError: Unknown name or nothing requested.
    """
    try:
        resolved = registry.resolve(list(metrics))
    except registry.UnknownMetric as exc:
        raise OracleError(str(exc)) from None
    if not resolved:
        raise OracleError("no metrics requested")
    return resolved


def build_oracle(
    tests: Sequence[CorpusReport],
    corpus: Sequence[CorpusReport],
    metrics: Sequence[str],
    *,
    per_metric: int = 1,
    top_k: int | None = DEFAULT_TOP_K,
    stage: CandidateStage | None = None,
    engine: str | Engine = "local",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    progress: ProgressFn | None = None,
    metric_pool: MetricPool | None = None,
    device: str = "cpu",
) -> OracleResult:
    """Pick the metric-oracle candidates of each test report from ``corpus``.

    Args:
        tests: Test reports (references); ids must be unique.
        corpus: Candidate reports (may contain the tests: they are excluded per test).
        metrics: Families or output keys (``["bleu4", "rougeL"]``).
        per_metric: How many best candidates each key picks per test report.
        top_k: Candidate-stage size (``None``: exhaustive, score the whole pool).
        stage: Candidate-stage settings (``top_k`` here overrides ``stage.top_k``).
        engine: ``"local"``, ``"ray"`` or an engine object (closed only if made here).
        options: ``family -> {option: value}`` for the metric constructors.
        chunk_size: Pairs per scoring call / Ray task.
        progress: ``progress(done, total, message)`` over scored pairs x families.
        metric_pool: Warm metric instances (a worker's); a new one when ``None``. The local engine
            scores with it; a Ray engine's actors hold their own.
        device: Device the local engine loads models on (``cpu`` by default, as before).

    Returns:
        The deduplicated picks (test order, then first picking key, then rank) and metadata.

    Raises:
        OracleError: Bad arguments, unknown or unavailable metric.
    """
    options = {k: dict(v) for k, v in (options or {}).items()}
    resolved = resolve_keys(metrics)
    stray = sorted(set(options) - set(resolved))
    if stray:
        raise OracleError(f"options given for metric(s) not requested: {', '.join(stray)}")
    if per_metric < 1:
        raise OracleError(f"per-metric must be at least 1 (got {per_metric})")
    if top_k is not None and top_k < per_metric:
        raise OracleError(f"top-k ({top_k}) must be at least per-metric ({per_metric})")
    if chunk_size < 1:
        raise OracleError(f"chunk size must be at least 1 (got {chunk_size})")
    try:
        resolve_device(device, needs_model=False)  # the spelling only; CUDA checked at load
    except ScoringError as exc:
        raise OracleError(str(exc)) from None
    tests = list(tests)
    if not tests:
        raise OracleError("no test reports")
    ids = [t.report_id for t in tests]
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})[:3]
        raise OracleError(f"duplicate test report id(s): {', '.join(dupes)}")
    stage = CandidateStage(**{**asdict(stage or CandidateStage()), "top_k": top_k})

    # Create and check every family before any work.
    metric_pool = metric_pool if metric_pool is not None else MetricPool()
    family_sigs: dict[str, str] = {}
    signatures: dict[str, str] = {}
    directions: dict[str, bool] = {}
    for family, keys in resolved.items():
        try:
            m = metric_pool.get(family, options.get(family, {}))
        except ScoringError as exc:
            raise OracleError(str(exc)) from None
        except MetricUnavailable as exc:
            raise OracleError(f"metric '{family}' is unavailable: {exc}") from None
        reason = m.availability()
        if reason is not None:
            raise OracleError(f"metric '{family}' is unavailable: {reason}")
        if getattr(m.spec, "needs_image", False):
            raise OracleError(f"metric '{family}' needs images; a report corpus has none")
        family_sigs[family] = m.signature()
        directions.update(registry.directions(keys))
    all_keys = [k for keys in resolved.values() for k in keys]

    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    pool = Pool.from_reports(corpus)
    if not len(pool):
        raise OracleError("the corpus has no reports with text")
    excluded = [pool.excluded_for(t) for t in tests]
    if stage.top_k is None:
        cand_lists = [[i for i in range(len(pool)) if i not in ex] for ex in excluded]
    else:
        index = TfidfIndex(pool.texts, stage)
        cand_lists = index.search([t.text for t in tests], top_k=stage.top_k, exclude=excluded)
    seconds["candidate_stage"] = time.perf_counter() - t0

    pairs = np.asarray([(ti, ci) for ti, cl in enumerate(cand_lists) for ci in cl],
                       dtype=np.int64).reshape(-1, 2)
    total = len(pairs) * len(resolved)
    done = 0
    if progress is not None:
        progress(0, total, "candidate stage done")
    test_texts = [t.text for t in tests]
    values: dict[str, np.ndarray] = {}
    own_engine = isinstance(engine, str)
    eng = make_engine(engine, pool=metric_pool, device=device)
    try:
        for family, keys in resolved.items():
            corpus_dependent = registry.corpus_dependent(family, options.get(family, {}))
            sig = family_sigs[family]
            t1 = time.perf_counter()

            def tick(n: int, family: str = family) -> None:
                nonlocal done
                done += n
                if progress is not None:
                    progress(done, total, f"{family}: {done}/{total} pairs scored")

            try:
                out = eng.score(family, options.get(family, {}), test_texts, pool.texts,
                                pairs, chunk_size=chunk_size, progress=tick)
            except MetricUnavailable as exc:
                raise OracleError(f"metric '{family}' is unavailable: {exc}") from None
            except ScoringError as exc:
                raise OracleError(str(exc)) from None
            seconds[f"score:{family}"] = time.perf_counter() - t1
            for k in keys:
                if k not in out and len(pairs):
                    raise OracleError(f"metric '{family}' returned no values for '{k}'")
                values[k] = out.get(k, np.zeros(0))
                # A corpus-dependent value is defined by the scored set; say which one.
                signatures[k] = f"{sig}|set:oracle-candidates" if corpus_dependent else sig
    finally:
        if own_engine:
            eng.close()

    scores: dict[str, dict[str, np.ndarray]] = {}
    offset = 0
    for t, cl in zip(tests, cand_lists, strict=True):
        scores[t.report_id] = {k: values[k][offset : offset + len(cl)] for k in all_keys}
        offset += len(cl)
    picks, rankings, best = _select(tests, pool, cand_lists, pairs, values, all_keys,
                                    directions, per_metric, stage.top_k is not None)
    seconds["total"] = time.perf_counter() - t0
    return OracleResult(
        picks=picks, keys=all_keys, directions=directions, signatures=signatures, stage=stage,
        per_metric=per_metric, engine=eng.name, n_tests=len(tests), n_corpus=len(corpus),
        n_pool=len(pool), n_scored_pairs=len(pairs), seconds=seconds, rankings=rankings,
        best_values=best,
        candidates={t.report_id: list(cl) for t, cl in zip(tests, cand_lists, strict=True)},
        scores=scores,
    )


def _select(
    tests: list[CorpusReport], pool: Pool, cand_lists: list[list[int]], pairs: np.ndarray,
    values: dict[str, np.ndarray], keys: list[str], directions: dict[str, bool],
    per_metric: int, staged: bool,
) -> tuple[list[OraclePick], dict[str, dict[str, list[int]]], dict[str, dict[str, float]]]:
    picks: list[OraclePick] = []
    rankings: dict[str, dict[str, list[int]]] = {}
    best: dict[str, dict[str, float]] = {}
    offset = 0
    for test, cands in zip(tests, cand_lists, strict=True):
        n = len(cands)
        rows = slice(offset, offset + n)
        offset += n
        rankings[test.report_id] = {}
        best[test.report_id] = {}
        chosen: dict[int, dict[str, int]] = {}  # position in cands -> key -> rank
        for key in keys:
            v = values[key][rows]
            signed = -v if directions[key] else v
            # NaN (undefined) sorts last; ties go to the earlier candidate-stage rank.
            signed = np.where(np.isnan(signed), np.inf, signed)
            order = np.lexsort((np.arange(n), signed))
            order = [int(j) for j in order if not math.isnan(v[j])]
            rankings[test.report_id][key] = [cands[j] for j in order]
            best[test.report_id][key] = float(v[order[0]]) if order else math.nan
            for rank, j in enumerate(order[:per_metric], start=1):
                chosen.setdefault(j, {})[key] = rank
        # Pairs in order of the first key (request order) that picked them, then by rank.
        def sort_key(j: int, chosen: dict[int, dict[str, int]] = chosen) -> tuple[int, int, int]:
            ranks = chosen[j]
            first = min(keys.index(k) for k in ranks)
            return first, ranks[keys[first]], j

        for j in sorted(chosen, key=sort_key):
            pool_i = cands[j]
            ranks = chosen[j]
            picks.append(OraclePick(
                test_id=test.report_id,
                reference=test.text,
                corpus_id=pool.ids[pool_i],
                candidate=pool.texts[pool_i],
                metrics=tuple(k for k in keys if k in ranks),
                ranks=dict(ranks),
                values={k: float(values[k][rows][j]) for k in keys},
                stage_rank=j + 1 if staged else None,
                duplicate_ids=tuple(i for i in pool.members[pool_i] if i != pool.ids[pool_i]),
            ))
    return picks, rankings, best


@dataclass(frozen=True)
class Recall:
    """Candidate-stage recall@k of one key against exhaustive search.

    A test report is a hit when the best value inside the top-k candidates equals the
    exhaustive best (i.e. one of the exhaustive argmaxes, ties included, is inside the top-k).
    """

    key: str
    top_k: int
    n_tests: int
    hits: int

    @property
    def recall(self) -> float:
        """``hits / n_tests``."""
        return self.hits / self.n_tests if self.n_tests else math.nan


def candidate_recall(
    tests: Sequence[CorpusReport],
    corpus: Sequence[CorpusReport],
    metrics: Sequence[str],
    *,
    top_k: int = DEFAULT_TOP_K,
    stage: CandidateStage | None = None,
    engine: str | Engine = "local",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    chunk_size: int = DEFAULT_CHUNK,
) -> dict[str, Recall]:
    """Recall@k of the candidate stage against exhaustive search, per key.

    Exhaustive search scores every pool text against every test report, so keep ``tests``
    small (tens) on corpora of thousands.
    """
    exhaustive = build_oracle(list(tests), corpus, metrics, per_metric=1, top_k=None,
                              stage=stage, engine=engine, options=options,
                              chunk_size=chunk_size)
    table = recall_table(exhaustive, list(tests), corpus, [top_k], stage=stage)
    return {key: by_k[top_k] for key, by_k in table.items()}


def recall_table(
    exhaustive: OracleResult,
    tests: Sequence[CorpusReport],
    corpus: Sequence[CorpusReport],
    top_ks: Sequence[int],
    *,
    stage: CandidateStage | None = None,
) -> dict[str, dict[int, Recall]]:
    """``key -> k -> Recall`` of the candidate stage, from one exhaustive build.

    Args:
        exhaustive: ``build_oracle(tests, corpus, ..., top_k=None)``.
        tests: The same test reports.
        corpus: The same corpus.
        top_ks: Candidate-stage sizes to evaluate.
        stage: Candidate-stage settings (``top_k`` ignored).
    """
    if exhaustive.stage.top_k is not None:
        raise OracleError("recall needs an exhaustive build (top_k=None)")
    tests = list(tests)
    pool = Pool.from_reports(corpus)
    index = TfidfIndex(pool.texts, stage or CandidateStage())
    widest = index.search([t.text for t in tests], top_k=max(top_ks),
                          exclude=[pool.excluded_for(t) for t in tests])
    out: dict[str, dict[int, Recall]] = {}
    for key in exhaustive.keys:
        sign = 1.0 if exhaustive.directions[key] else -1.0
        out[key] = {}
        for k in top_ks:
            hits = 0
            for t, ranked in zip(tests, widest, strict=True):
                # Exhaustive candidates are every non-excluded pool index, so every top-k
                # index has an exhaustive value.
                value = dict(zip(exhaustive.candidates[t.report_id],
                                 exhaustive.scores[t.report_id][key], strict=True))
                best = exhaustive.best_values[t.report_id][key]
                inside = [sign * value[i] for i in ranked[:k] if not math.isnan(value[i])]
                if inside and not math.isnan(best) and max(inside) == sign * best:
                    hits += 1
            out[key][k] = Recall(key=key, top_k=k, n_tests=len(tests), hits=hits)
    return out
