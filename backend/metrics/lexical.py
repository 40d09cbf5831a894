"""Lexical overlap metrics: BLEU, RadCliQ's BLEU-2, ROUGE-L, METEOR and CIDEr-D.

Each family reproduces one public reference implementation exactly (see the metric cards in
``backend/metrics/cards``) while avoiding its per-pair overhead:

- ``Bleu``: pycocoevalcap 1.2 ``BleuScorer`` ('closest' reference length, tiny=1e-15 and
  small=1e-9 smoothing), all pairs' n-grams counted with one sort of packed integer keys.
- ``Bleu2RadCliQ``: fast_bleu 0.0.90 ``BLEU([ref], {"bigram": (.5, .5)})`` on RadCliQ's
  tokens, i.e. NLTK-style sentence BLEU with smoothing method 1 (its default); same counting.
- ``Bleu`` with ``tokenize="radeval"``: RadEval 2.2's ``bleu`` (the same scorer on
  whitespace-split tokens, pycocoevalcap's value kept for an empty reference).
- ``RougeL``: rouge-score 0.1.2 ``RougeScorer(['rouge1', 'rouge2', 'rougeL'],
  use_stemmer=True)`` F-measures, with cached Porter stems, all pairs' clipped unigram and
  bigram matches counted in one sort, and a bit-parallel LCS.
- ``Meteor``: the METEOR 1.5 jar shipped with pycocoevalcap, driven by one long-lived Java
  process per instance with pipelined ``SCORE`` lines and one ``EVAL`` line per call.
- ``Cider``: pycocoevalcap 1.2 ``CiderScorer`` (CIDEr-D: clipped tf-idf, Gaussian length
  penalty, sigma 6), document frequencies from the references of the scored set.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import shutil
import subprocess
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricInputError,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
)
from radconcord.backend.metrics.text import (
    DEFAULT_TOKENIZER,
    TOKENIZERS,
    TokenIds,
    preprocess,
    radcliq_token_ids,
    rouge_valid,
    rouge_words,
    token_ids,
)

logger = logging.getLogger(__name__)

# pycocoevalcap BleuScorer constants: tiny keeps a zero match count from giving log(0);
# small keeps a zero guess count from dividing by zero.
_BLEU_TINY = 1e-15
_BLEU_SMALL = 1e-9


_KEY_LIMIT = 1 << 62  # keep every packed n-gram key inside int64


@dataclass
class _OrderStats:
    """Unique (pair, n-gram, side) entries of one n-gram order, sorted by (pair, n-gram, side).

    Attributes:
        pair: Pair index of each entry.
        gram: Integer id of the n-gram (consistent across pairs within one batch).
        side: 0 for the reference, 1 for the candidate.
        count: Occurrences of the n-gram in that text.
        cand: Indices of candidate entries whose n-gram also occurs in the reference.
        ref: Index of that reference entry (always ``cand - 1``: the sort puts it first).
    """

    pair: np.ndarray
    gram: np.ndarray
    side: np.ndarray
    count: np.ndarray
    cand: np.ndarray
    ref: np.ndarray
    #: Position in the token ids of one occurrence of each entry's n-gram (only when asked).
    pos: np.ndarray | None = None


def _ngram_stats_from_ids(
    ids: np.ndarray, lengths: np.ndarray, n_vocab: int, n: int, *, positions: bool = False
) -> tuple[list[_OrderStats], np.ndarray, np.ndarray]:
    """Count the 1..n-grams of every reference and candidate in a few vectorised sorts.

    ``ids``/``lengths`` hold the references then the candidates (see ``TokenIds``; ids are
    ordered as the token strings, so sums run in a hash-seed-independent order). A k-gram
    starting at position i is packed into one integer
    ``key(k-1, i) * V + id[i + k - 1]`` (compacted with ``np.unique`` whenever the packed range
    could overflow int64), so counting and matching n-grams across the whole batch costs one
    sort per order instead of a Python dictionary per text.

    With ``positions`` each entry also carries where in ``ids`` one of its occurrences starts,
    so that its n-gram can be spelled out (CIDEr's document frequencies of a whole set).

    Returns:
        Per order (index k-1) the entry table, the reference lengths and the candidate lengths.
    """
    n_pairs = len(lengths) // 2
    texts = lengths
    seg = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
    side_pos = (seg >= n_pairs).astype(np.int64)
    pair_pos = seg - n_pairs * side_pos
    n_vocab = max(n_vocab, 1)
    total = len(ids)

    key = ids
    key_range = n_vocab
    orders: list[_OrderStats] = []
    for k in range(1, n + 1):
        if k == 1:
            starts = np.arange(total, dtype=np.int64)
        else:
            m = max(total - k + 1, 0)
            valid = seg[:m] == seg[k - 1 : k - 1 + m]
            prev = key[:m]
            if key_range * n_vocab >= _KEY_LIMIT:
                uniq, inv = np.unique(prev[valid], return_inverse=True)
                prev = np.zeros(m, dtype=np.int64)
                prev[valid] = inv
                key_range = max(len(uniq), 1)
            key = prev * n_vocab + ids[k - 1 : k - 1 + m]
            key_range *= n_vocab
            starts = np.flatnonzero(valid)
        gram = key[starts]
        gram_range = key_range
        if 2 * max(n_pairs, 1) * gram_range >= _KEY_LIMIT:
            uniq, gram = np.unique(gram, return_inverse=True)
            gram_range = max(len(uniq), 1)
        packed = (pair_pos[starts] * gram_range + gram) * 2 + side_pos[starts]
        first: np.ndarray | None = None
        if positions:
            entries, first, count = np.unique(packed, return_index=True, return_counts=True)
            first = starts[first]
        else:
            entries, count = np.unique(packed, return_counts=True)
        side = entries & 1
        base = entries >> 1
        cand = np.flatnonzero(side == 1)
        cand = cand[cand > 0]
        ref = cand - 1
        twin = (side[ref] == 0) & (base[ref] == base[cand])
        orders.append(
            _OrderStats(
                pair=base // gram_range,
                gram=base % gram_range,
                side=side,
                count=count,
                cand=cand[twin],
                ref=ref[twin],
                pos=first,
            )
        )
    return orders, lengths[:n_pairs], lengths[n_pairs:]


def _clipped_match_counts(
    ids: np.ndarray, lengths: np.ndarray, n_vocab: int, n: int
) -> np.ndarray | None:
    """Per pair and order, sum over candidate k-grams of min(candidate count, reference count).

    ``ids``/``lengths`` hold the references (texts ``0..P-1``) then the candidates (texts
    ``P..2P-1``). Every token position gets one integer key: pair, then the ids of the next
    ``n`` tokens of its text (0 past the text's end), then the side. One sort of these keys
    puts every k-gram of a pair next to its equal ones for all k at once (they share the
    key prefix), so each order costs a few linear passes instead of a sort.

    Returns:
        int64 array ``(n, P)``, or ``None`` when the key would not fit in int64 (the caller
        then uses :func:`_ngram_stats_from_ids`).
    """
    n_texts = len(lengths)
    n_pairs = n_texts // 2
    radix = n_vocab + 1
    if 2 * max(n_pairs, 1) * radix**n >= _KEY_LIMIT:
        return None
    total = len(ids)
    out = np.zeros((n, n_pairs), dtype=np.int64)
    if total == 0:
        return out
    seg = np.repeat(np.arange(n_texts, dtype=np.int64), lengths)
    side = (seg >= n_pairs).astype(np.int64)
    text_end = np.cumsum(lengths)
    remaining = text_end[seg] - np.arange(total, dtype=np.int64)
    padded = np.concatenate((ids + 1, np.zeros(n, dtype=np.int64)))
    key = seg - n_pairs * side
    for j in range(n):
        digit = padded[j : j + total]
        if j:
            digit = np.where(remaining > j, digit, 0)
        key = key * radix + digit
    key = key * 2 + side
    key.sort()
    side = key & 1
    body = key >> 1
    pair = body // radix**n
    for k in range(1, n + 1):
        prefix = body // radix ** (n - k)
        start = np.flatnonzero(np.concatenate(([True], prefix[1:] != prefix[:-1])))
        # A group is all k-grams (last digit != 0) or all shorter tails (digit 0).
        valid = prefix[start] % radix != 0
        size = np.diff(np.append(start, total))
        cand = np.add.reduceat(side, start)
        matched = np.minimum(cand, size - cand) * valid
        out[k - 1] = np.bincount(pair[start], weights=matched, minlength=n_pairs)
    return out


def _match_counts(tok: TokenIds, n: int) -> np.ndarray:
    """Clipped k-gram matches, int64 ``(n, pairs)``, for references then candidates in ``tok``."""
    counts = _clipped_match_counts(tok.ids, tok.lengths, len(tok.vocab), n)
    if counts is not None:
        return counts
    n_pairs = len(tok.lengths) // 2
    orders, _, _ = _ngram_stats_from_ids(tok.ids, tok.lengths, len(tok.vocab), n)
    return np.array(
        [
            np.bincount(
                o.pair[o.cand],
                weights=np.minimum(o.count[o.cand], o.count[o.ref]),
                minlength=n_pairs,
            )
            for o in orders
        ],
        dtype=np.int64,
    ).reshape(n, n_pairs)


class _TokenizedMetric(BaseMetric):
    """Validates the ``tokenize`` option at construction time.

    ``_EXTRA_SCHEMES`` names values a family accepts beyond the shared
    ``backend.metrics.text.TOKENIZERS`` (reference-specific ones such as BLEU's ``radeval``).
    """

    _EXTRA_SCHEMES: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if "tokenize" in self.options:
            scheme = self.options["tokenize"]
            known = (*TOKENIZERS, *self._EXTRA_SCHEMES)
            if not isinstance(scheme, str) or scheme not in known:
                raise ValueError(
                    f"unknown tokenize scheme {scheme!r} for metric '{self.spec.name}'"
                    f" (known: {', '.join(sorted(known))})"
                )

    def _prep(self, texts: list[str]) -> list[str]:
        scheme = self.options["tokenize"]
        return [preprocess(t, scheme) for t in texts]


# --------------------------------------------------------------------------------------------
# BLEU (pycocoevalcap)
# --------------------------------------------------------------------------------------------


#: ``tokenize`` value of :class:`Bleu` that reproduces RadEval's ``bleu``: RadEval 2.2 hands
#: the raw strings to pycocoevalcap's ``BleuScorer``, which splits them on whitespace (no PTB
#: tokenizer, no lowercasing).
RADEVAL_TOKENIZER = "radeval"


class Bleu(_TokenizedMetric):
    """Per-pair BLEU-1..4 with pycocoevalcap ``BleuScorer`` semantics, plus corpus BLEU-4.

    Options:
        tokenize: preprocessing scheme (see ``backend.metrics.text.TOKENIZERS``), or
            ``"radeval"``: the ``whitespace`` tokens, and for a pair with an empty reference
            pycocoevalcap's own value (positive, below 1e-8) instead of 0.0, so that every
            per-pair value and the corpus value equal RadEval 2.2's ``bleu``.
    """

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="bleu",
        outputs=tuple(
            OutputSpec(f"bleu{k}", True, f"BLEU-{k} (pycocoevalcap BleuScorer, per pair)")
            for k in range(1, 5)
        ),
        citation="Papineni et al., ACL 2002",
        corpus_outputs=("bleu4_corpus",),
    )
    defaults: ClassVar[dict[str, Any]] = {"tokenize": DEFAULT_TOKENIZER}
    _EXTRA_SCHEMES: ClassVar[tuple[str, ...]] = (RADEVAL_TOKENIZER,)
    _N = 4

    def signature(self) -> str:
        """``bleu|n:4|tok:<scheme>|eff:closest|smooth:coco|version:1``."""
        return f"bleu|n:{self._N}|tok:{self.options['tokenize']}|eff:closest|smooth:coco|version:1"

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        n = self._N
        n_pairs = len(references)
        radeval = self.options["tokenize"] == RADEVAL_TOKENIZER
        # str.split(), as BleuScorer's precook: the 'whitespace' scheme's tokens.
        scheme = "whitespace" if radeval else self.options["tokenize"]
        tok = token_ids([*references, *candidates], scheme)
        counts = _match_counts(tok, n)
        testlen = tok.lengths[n_pairs:]
        reflen = tok.lengths[:n_pairs]
        # Same float operations in the same order as BleuScorer.compute_score, so the values
        # agree to the last bit: +, *, / are correctly rounded in numpy as in Python, and
        # pow/exp (whose last bit may differ between libm and numpy's SIMD code) stay in
        # Python.
        prod = np.ones(n_pairs, dtype=np.float64)
        per_key: list[list[float]] = []
        for k in range(n):
            guess = np.maximum(testlen - k, 0).astype(np.float64)
            prod = prod * ((counts[k].astype(np.float64) + _BLEU_TINY) / (guess + _BLEU_SMALL))
            root = 1.0 / (k + 1)
            per_key.append([p**root for p in prod.tolist()])
        ratio = (testlen.astype(np.float64) + _BLEU_TINY) / (reflen + _BLEU_SMALL)
        short = np.flatnonzero(ratio < 1)
        exponent = 1 - 1 / ratio[short]
        # pycocoevalcap gives 0.0 for an empty candidate and, through its tiny constant, a
        # positive value below 1e-8 for an empty reference; 0.0 is stored for both (see the
        # card), except under 'radeval', whose point is RadEval's value for every input.
        empty = [] if radeval else np.flatnonzero((testlen == 0) | (reflen == 0)).tolist()
        for i, e in zip(short.tolist(), exponent.tolist(), strict=True):
            bp = math.exp(e)
            for vals in per_key:
                vals[i] *= bp
        for i in empty:
            for vals in per_key:
                vals[i] = 0.0

        testlens = testlen.tolist()
        total_test = sum(testlens)
        total_ref = int(reflen.sum())  # one reference per pair: 'closest' is its length
        bleu = 1.0
        corpus = []
        for k in range(n):
            total_guess = sum(t - k for t in testlens if t > k)
            bleu *= float(int(counts[k].sum()) + _BLEU_TINY) / (total_guess + _BLEU_SMALL)
            corpus.append(bleu ** (1.0 / (k + 1)))
        ratio_c = (total_test + _BLEU_TINY) / (total_ref + _BLEU_SMALL)
        if ratio_c < 1:
            corpus = [c * math.exp(1 - 1 / ratio_c) for c in corpus]
        return MetricResult(
            values={f"bleu{k + 1}": per_key[k] for k in range(n)},
            corpus={"bleu4_corpus": corpus[n - 1]},
        )


# --------------------------------------------------------------------------------------------
# BLEU-2 as in RadCliQ (fast_bleu)
# --------------------------------------------------------------------------------------------


class Bleu2RadCliQ(BaseMetric):
    """Sentence BLEU-2 exactly as RadCliQ computes it with fast_bleu.

    Tokens: RadCliQ's ``prep_reports`` (lowercase, ``'.' -> ' .'``, split on spaces).
    Score: weights (1/2, 1/2), single reference, brevity penalty ``exp(1 - r/c)`` for
    ``c <= r`` (0 when ``c == 0``), 0 when no unigram matches.

    Options:
        smoothing: ``"method1"`` (fast_bleu's default, which RadCliQ uses: a zero bigram
            match count becomes 0.1 / bigram count) or ``"none"`` (fast_bleu
            ``smoothing_func=0``: a zero bigram match count gives 0.0).
    """

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="bleu2_radcliq",
        outputs=(OutputSpec("bleu2_radcliq", True, "BLEU-2 with RadCliQ tokens (fast_bleu)"),),
        citation="Yu et al., Patterns 2023 (RadCliQ)",
    )
    defaults: ClassVar[dict[str, Any]] = {"smoothing": "method1"}
    _SMOOTHINGS = ("method1", "none")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.options["smoothing"] not in self._SMOOTHINGS:
            raise ValueError(
                f"unknown smoothing {self.options['smoothing']!r} for metric 'bleu2_radcliq'"
                f" (known: {', '.join(self._SMOOTHINGS)})"
            )

    def signature(self) -> str:
        """``bleu2_radcliq|w:0.5,0.5|tok:radcliq|smooth:<smoothing>|version:1``."""
        return f"bleu2_radcliq|w:0.5,0.5|tok:radcliq|smooth:{self.options['smoothing']}|version:1"

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        smooth = self.options["smoothing"] == "method1"
        n_pairs = len(references)
        tok = radcliq_token_ids([*references, *candidates])
        counts = _match_counts(tok, 2)
        out: list[float] = []
        for num1, num2, reflen, hyplen in zip(
            counts[0].tolist(),
            counts[1].tolist(),
            tok.lengths[:n_pairs].tolist(),
            tok.lengths[n_pairs:].tolist(),
            strict=True,
        ):
            if num1 == 0:  # also covers an empty candidate or reference
                out.append(0.0)
                continue
            den1 = max(1, hyplen)
            den2 = max(1, hyplen - 1)
            if num2 == 0:
                if not smooth:
                    # fast_bleu smooth_0: 1/LLONG_MAX, then log(LDBL_MIN): underflows to 0.
                    out.append(0.0)
                    continue
                p2 = 0.1 / den2
            else:
                p2 = num2 / den2
            s = 0.5 * math.log(num1 / den1) + 0.5 * math.log(p2)
            bp = 1.0 if hyplen > reflen else math.exp(1 - reflen / hyplen)
            out.append(bp * math.exp(s))
        return MetricResult(values={"bleu2_radcliq": out})


# --------------------------------------------------------------------------------------------
# ROUGE-1, ROUGE-2, ROUGE-L (rouge-score)
# --------------------------------------------------------------------------------------------


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token sequences.

    Bit-parallel (Allison-Dix / Hyyro): one big-integer update per token of ``b`` instead of a
    ``len(a) x len(b)`` table; same result as the dynamic programme.

    Args:
        a: First sequence.
        b: Second sequence.

    Returns:
        The LCS length.
    """
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    masks: dict[str, int] = {}
    for i, tok in enumerate(a):
        masks[tok] = masks.get(tok, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for tok in b:
        m = masks.get(tok)
        if m is None:
            continue
        u = v & m
        v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def _ids_of_token_lists(per_text: Sequence[Sequence[str]], which: np.ndarray) -> TokenIds:
    """Integer ids of already tokenized texts, text ``which[0]``, ``which[1]``, ... in turn.

    Args:
        per_text: The tokens of each distinct text.
        which: For each position of the output, the index of its text in ``per_text``.

    Returns:
        The ids, per-text lengths and sorted vocabulary (as ``text.token_ids`` gives them).
    """
    vocab = tuple(sorted({t for toks in per_text for t in toks}))
    lookup = {t: i for i, t in enumerate(vocab)}
    ids = [
        np.fromiter(map(lookup.__getitem__, toks), dtype=np.int64, count=len(toks))
        for toks in per_text
    ]
    lengths = np.fromiter(map(len, per_text), dtype=np.int64, count=len(per_text))[which]
    chunks = [ids[i] for i in which.tolist()]
    flat = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    return TokenIds(ids=flat, lengths=lengths, vocab=vocab)


def _fmeasure(precision: float, recall: float) -> float:
    """rouge-score's ``scoring.fmeasure``: the harmonic mean, 0.0 when both are 0."""
    if precision + recall > 0:
        return 2 * precision * recall / (precision + recall)
    return 0.0


class RougeL(BaseMetric):
    """ROUGE-1, ROUGE-2 and ROUGE-L F-measures identical to rouge-score 0.1.2's.

    That is ``RougeScorer(['rouge1', 'rouge2', 'rougeL'], use_stemmer=True)``: rouge-score's
    tokenizer on the raw text and NLTK's Porter stemmer (the one rouge-score uses) for words
    longer than three characters. These are the settings and outputs of RadEval 2.2's
    ``rouge`` (F-measure only); the family keeps its historical class name and signature
    (``rougeL|...``), so that cached ``rougeL`` values stay valid.

    Options:
        use_stemmer: Porter stemming on (default, as RadCliQ/ER2Score/RadEval report it) or
            off; applies to all three keys.
    """

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="rouge",
        outputs=(
            OutputSpec("rouge1", True, "ROUGE-1 F-measure (rouge-score, Porter stems)"),
            OutputSpec("rouge2", True, "ROUGE-2 F-measure (rouge-score, Porter stems)"),
            OutputSpec("rougeL", True, "ROUGE-L F-measure (rouge-score, Porter stems)"),
        ),
        citation="Lin, ACL Workshop 2004",
    )
    defaults: ClassVar[dict[str, Any]] = {"use_stemmer": True}
    _STEM_CACHE_MAX = 200_000

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if not isinstance(self.options["use_stemmer"], bool):
            raise ValueError("option use_stemmer of metric 'rouge' must be true or false")
        self._stemmer: Any = None
        self._stems: dict[str, str] = {}

    def availability(self) -> str | None:
        """``None`` when NLTK is importable (needed only with stemming)."""
        if self.options["use_stemmer"] and importlib.util.find_spec("nltk") is None:
            return "unavailable: NLTK is not installed (pip install nltk; its Porter stemmer)"
        return None

    def _load(self) -> None:
        if self.options["use_stemmer"]:
            from nltk.stem import porter

            self._stemmer = porter.PorterStemmer()

    def signature(self) -> str:
        """``rougeL|score:f|tok:rouge_score|stem:porter|version:1`` (``stem:none`` if off).

        One signature for all three keys (the cache is keyed by output key and signature);
        it names ``rougeL`` because that was the family's only key when values were first
        cached under it.
        """
        stem = "porter" if self.options["use_stemmer"] else "none"
        return f"rougeL|score:f|tok:rouge_score|stem:{stem}|version:1"

    def _tokens(self, text: str) -> list[str]:
        words = rouge_words(text)
        if self._stemmer is None:
            return words
        stems = self._stems
        if len(stems) > self._STEM_CACHE_MAX:
            stems.clear()
        out = []
        for w in words:
            if len(w) > 3:
                s = stems.get(w)
                if s is None:
                    # Stemming dominates rouge-score's cost; a word's stem never changes.
                    s = stems[w] = self._stemmer.stem(w)
                w = s
            if rouge_valid(w):
                out.append(w)
        return out

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        n_pairs = len(references)
        # References repeat across the candidates of a study: tokenize each text once.
        position: dict[str, int] = {}
        for t in (*references, *candidates):
            position.setdefault(t, len(position))
        tokens = [self._tokens(t) for t in position]
        which = np.fromiter(
            (position[t] for t in (*references, *candidates)), dtype=np.int64, count=2 * n_pairs
        )
        # Clipped unigram and bigram matches = rouge-score's n-gram intersection counts.
        matches = _match_counts(_ids_of_token_lists(tokens, which), 2).tolist()
        ref_tok = [tokens[i] for i in which[:n_pairs].tolist()]
        cand_tok = [tokens[i] for i in which[n_pairs:].tolist()]
        out: dict[str, list[float]] = {"rouge1": [], "rouge2": [], "rougeL": []}
        for i, (rt, ct) in enumerate(zip(ref_tok, cand_tok, strict=True)):
            # rouge-score's operations, in its order: P = hits / max(candidate n-grams, 1),
            # R = hits / max(reference n-grams, 1), F = 2PR / (P + R).
            for k, key in ((0, "rouge1"), (1, "rouge2")):
                hits = matches[k][i]
                precision = hits / max(len(ct) - k, 1)
                recall = hits / max(len(rt) - k, 1)
                out[key].append(_fmeasure(precision, recall))
            if not rt or not ct:
                out["rougeL"].append(0.0)
                continue
            lcs = lcs_length(rt, ct)
            out["rougeL"].append(_fmeasure(lcs / len(ct), lcs / len(rt)))
        return MetricResult(values=out)


# --------------------------------------------------------------------------------------------
# METEOR 1.5 (Java jar shipped by pycocoevalcap)
# --------------------------------------------------------------------------------------------

METEOR_JAR_NAME = "meteor-1.5.jar"
_JAVA_MISSING = (
    "unavailable: Java runtime not found (install a JRE 11+, e.g. "
    "apt-get install default-jre-headless)"
)


def find_meteor_jar() -> Path | None:
    """Locate ``meteor-1.5.jar`` inside the installed pycocoevalcap package.

    Returns:
        The jar path, or ``None`` when pycocoevalcap or the jar is missing.
    """
    try:
        spec = importlib.util.find_spec("pycocoevalcap")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    # pycocoevalcap is a namespace package, so look in every location it spans.
    for base in spec.submodule_search_locations:
        jar = Path(base) / "meteor" / METEOR_JAR_NAME
        if jar.is_file():
            return jar
    return None


def meteor_sanitize(text: str) -> str:
    """Make ``text`` safe for one field of the METEOR ``-stdio`` protocol.

    pycocoevalcap removes ``|||`` from the hypothesis and replaces double spaces with one;
    this does the same, for both sides, and also turns line breaks into spaces. Inputs from
    the default tokenizer never contain any of these, so the rule only matters for the
    ``whitespace`` schemes. (pycocoevalcap leaves references untouched: a ``|||`` there
    splits the reference in two and a newline desynchronises its pipe.)

    Args:
        text: One already preprocessed report.

    Returns:
        The text to send.
    """
    text = text.replace("\r", " ").replace("\n", " ")
    return text.replace("|||", "").replace("  ", " ")


def _shutdown_process(proc: subprocess.Popen, lock: threading.Lock) -> None:
    with lock:
        if proc.poll() is not None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _MeteorProcess:
    """One ``java -jar meteor-1.5.jar - - -stdio -l en -norm`` process.

    The jar's arguments and working directory are pycocoevalcap's, so the jar sees the same
    options (only the JVM's garbage collector is chosen here). Calls are serialised by a
    lock; within a call all ``SCORE`` lines are written by a helper thread while this thread
    reads the statistics back, so the pipe never blocks on per-line round trips.
    """

    def __init__(self, jar: Path, heap: str) -> None:
        # -XX:+UseSerialGC: the jar scores in one thread, and the default G1's concurrent
        # threads compete with it (and with Python) on small machines; measured 5-25 % less
        # JVM CPU per scored pair, same numbers (see bench/bench_lexical.py --meteor-profile).
        self._cmd = [
            "java", "-XX:+UseSerialGC", "-jar", f"-Xmx{heap}", str(jar), "-", "-", "-stdio",
            "-l", "en", "-norm",
        ]
        self._proc = subprocess.Popen(
            self._cmd,
            cwd=str(jar.parent),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._lock = threading.Lock()
        self._stderr_tail: deque[str] = deque(maxlen=20)
        # Drain stderr so that a chatty JVM cannot fill the pipe and stall.
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, name="meteor-stderr", daemon=True
        )
        self._stderr_thread.start()
        self._finalizer = weakref.finalize(self, _shutdown_process, self._proc, self._lock)

    def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._stderr_tail.append(line)
                logger.debug("meteor stderr: %s", line)

    def _died(self) -> RuntimeError:
        code = self._proc.poll()
        tail = " | ".join(self._stderr_tail) or "no stderr output"
        return RuntimeError(f"METEOR java process stopped (exit code {code}): {tail}")

    def _readline(self) -> str:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise self._died()
        return line.decode("utf-8").strip()

    def score(self, references: list[str], candidates: list[str]) -> tuple[list[float], float]:
        """Score aligned, sanitised pairs; return per-pair scores and the jar's aggregate."""
        return self.evaluate(self.statistics(references, candidates))

    def statistics(self, references: list[str], candidates: list[str]) -> list[str]:
        """The jar's sufficient statistics (one ``SCORE`` answer line) per pair."""
        lines = [
            f"SCORE ||| {ref} ||| {cand}\n".encode()
            for ref, cand in zip(references, candidates, strict=True)
        ]
        with self._lock:
            if self._proc.poll() is not None:
                raise self._died()
            stdin = self._proc.stdin
            assert stdin is not None
            write_error: list[BaseException] = []

            def write_all() -> None:
                try:
                    # Chunks keep memory flat for very large calls.
                    for start in range(0, len(lines), 256):
                        stdin.write(b"".join(lines[start : start + 256]))
                    stdin.flush()
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                    write_error.append(exc)

            writer = threading.Thread(target=write_all, name="meteor-writer", daemon=True)
            writer.start()
            try:
                stats = [self._readline() for _ in lines]
            finally:
                writer.join()
            if write_error:
                raise self._died() from write_error[0]
        return stats

    def evaluate(self, stats: list[str]) -> tuple[list[float], float]:
        """Per-pair scores and the aggregate from statistics (from any METEOR process: the
        ``EVAL`` step is a pure function of them)."""
        if not stats:
            return [], 0.0
        with self._lock:
            if self._proc.poll() is not None:
                raise self._died()
            stdin = self._proc.stdin
            assert stdin is not None
            stdin.write(("EVAL ||| " + " ||| ".join(stats) + "\n").encode())
            stdin.flush()
            scores = [float(self._readline()) for _ in stats]
            aggregate = float(self._readline())
        return scores, aggregate

    def close(self) -> None:
        """Close stdin and wait for the JVM to exit (kill after 5 s)."""
        self._finalizer()


class Meteor(_TokenizedMetric):
    """METEOR 1.5 through the jar that pycocoevalcap ships (``-l en -norm``).

    One Java process per instance, started in :meth:`load` (takes a few seconds: the jar
    loads its paraphrase table) and stopped by :meth:`close`, by garbage collection or at
    interpreter exit. Thread-safe: concurrent ``score`` calls are serialised.

    Options:
        tokenize: preprocessing applied before the jar's own ``-norm`` normalisation.
        java_heap: JVM ``-Xmx`` value (does not change scores).
        jvm_workers: Java processes aligning pairs in parallel (does not change scores; each
            holds the paraphrase table, about 1-2 GB). One JVM already keeps about two cores
            busy (measured: 2.75 s CPU in 1.42 s wall for 1,960 pairs), so this helps only on
            machines with more than two cores.
    """

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="meteor",
        outputs=(OutputSpec("meteor", True, "METEOR 1.5 (exact, stem, synonym, paraphrase)"),),
        citation="Denkowski & Lavie, WMT 2014",
        corpus_outputs=("meteor_corpus",),
    )
    defaults: ClassVar[dict[str, Any]] = {
        "tokenize": DEFAULT_TOKENIZER,
        "java_heap": "2G",
        "jvm_workers": 1,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        workers = self.options["jvm_workers"]
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"meteor: jvm_workers must be a positive integer (got {workers!r})")
        self._proc: _MeteorProcess | None = None
        self._extra: list[_MeteorProcess] = []

    def availability(self) -> str | None:
        """Reason when ``java`` is not on PATH or the jar is missing, else ``None``."""
        if shutil.which("java") is None:
            return _JAVA_MISSING
        if find_meteor_jar() is None:
            return (
                "unavailable: meteor-1.5.jar not found (it ships with pycocoevalcap: "
                "pip install pycocoevalcap==1.2)"
            )
        return None

    def _load(self) -> None:
        jar = find_meteor_jar()
        if jar is None:  # availability() was checked by load(); guard a race with uninstall
            raise MetricUnavailable("unavailable: meteor-1.5.jar not found")
        heap = str(self.options["java_heap"])
        self._proc = _MeteorProcess(jar, heap)
        self._extra = [_MeteorProcess(jar, heap) for _ in range(self.options["jvm_workers"] - 1)]

    def signature(self) -> str:
        """``meteor|version:1.5|lang:en|norm:yes|tok:<scheme>``."""
        return f"meteor|version:1.5|lang:en|norm:yes|tok:{self.options['tokenize']}"

    def close(self) -> None:
        """Stop the Java process; a later ``score`` starts a new one."""
        for proc in [self._proc, *self._extra]:
            if proc is not None:
                proc.close()
        self._proc, self._extra = None, []
        self._loaded = False

    def __enter__(self) -> Meteor:
        self.load(self.device)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        assert self._proc is not None
        all_refs = [meteor_sanitize(r) for r in self._prep(references)]
        all_cands = [meteor_sanitize(c) for c in self._prep(candidates)]
        # The jar's statistics are a function of the (reference, candidate) line alone: align
        # each distinct pair once and give every copy its statistics before the EVAL step,
        # which sees the full list in input order (so the aggregate is unchanged).
        first: dict[tuple[str, str], int] = {}
        slot = [first.setdefault(rc, len(first)) for rc in zip(all_refs, all_cands, strict=True)]
        refs = [r for r, _ in first]
        cands = [c for _, c in first]
        procs = [self._proc, *self._extra]
        if len(procs) == 1 or len(refs) < 2 * len(procs):
            unique = self._proc.statistics(refs, cands)
        else:
            # Contiguous slices aligned in parallel, statistics re-joined in input order and
            # evaluated once: identical to one process by construction.
            bounds = [round(k * len(refs) / len(procs)) for k in range(len(procs) + 1)]
            with ThreadPoolExecutor(max_workers=len(procs)) as pool:
                parts = list(pool.map(
                    lambda k: procs[k].statistics(refs[bounds[k]:bounds[k + 1]],
                                                  cands[bounds[k]:bounds[k + 1]]),
                    range(len(procs)),
                ))
            unique = [st for part in parts for st in part]
        scores, aggregate = self._proc.evaluate([unique[i] for i in slot])
        return MetricResult(values={"meteor": scores}, corpus={"meteor_corpus": aggregate})


# --------------------------------------------------------------------------------------------
# CIDEr-D (pycocoevalcap)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CiderCorpus:
    """CIDEr's statistics of a whole scored set (:meth:`Cider.corpus_statistics`).

    Attributes:
        n_pairs: Pairs (documents) in the set, duplicates included.
        df: Per order (index k-1), k-gram of tokens -> number of pairs whose reference holds it.
    """

    n_pairs: int
    df: list[dict[tuple[str, ...], int]]


class Cider(_TokenizedMetric):
    """CIDEr-D per pair, identical to pycocoevalcap 1.2 ``Cider`` on the same strings.

    Document frequencies come from the references of the set passed to one ``score`` call
    (one document per pair), so a pair's value depends on the rest of the set: score a
    study in one call.

    Options:
        tokenize: preprocessing scheme.
        n: largest n-gram order (4).
        sigma: standard deviation of the Gaussian length penalty (6.0).
    """

    # Corpus dependent: declared in the registry (the runner scores the whole set in one call).

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="cider",
        outputs=(OutputSpec("cider", True, "CIDEr-D (pycocoevalcap), df from the scored set"),),
        citation="Vedantam et al., CVPR 2015",
        corpus_outputs=("cider_corpus",),
    )
    defaults: ClassVar[dict[str, Any]] = {"tokenize": DEFAULT_TOKENIZER, "n": 4, "sigma": 6.0}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        n, sigma = self.options["n"], self.options["sigma"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"option n of metric 'cider' must be a positive integer, got {n!r}")
        if isinstance(sigma, bool) or not isinstance(sigma, int | float) or sigma <= 0:
            raise ValueError(f"option sigma of metric 'cider' must be > 0, got {sigma!r}")

    def signature(self) -> str:
        """``cider|variant:D|n:4|sigma:6|df:scored-set|tok:<scheme>|version:1``."""
        sigma = float(self.options["sigma"])
        sigma_s = f"{sigma:g}"
        return (
            f"cider|variant:D|n:{self.options['n']}|sigma:{sigma_s}|df:scored-set"
            f"|tok:{self.options['tokenize']}|version:1"
        )

    def corpus_statistics(
        self,
        *,
        references: Sequence[str],
        candidates: Sequence[str],
        images: Sequence[Any] | None = None,
    ) -> CiderCorpus:
        """Document frequencies of the whole scored set, for scoring it in several calls.

        ``score(references=chunk_refs, candidates=chunk_cands, corpus=stats)`` then gives
        each pair exactly (bit for bit) the value it gets when the whole set is scored in one
        call: the idf terms are the same numbers and every per-pair sum runs over the n-grams
        in the same order (token strings compare the same whatever the batch's vocabulary).

        Args:
            references: The references of every pair of the set, duplicates included.
            candidates: Their candidates (unused: df counts references only).
            images: Unused.

        Returns:
            Picklable statistics for ``score(..., corpus=...)``.
        """
        refs = [str(r) for r in references]
        n = int(self.options["n"])
        df: list[dict[tuple[str, ...], int]] = [{} for _ in range(n)]
        # One document per pair: a reference repeated m times counts m times.
        multiplicity: dict[str, int] = {}
        for r in refs:
            multiplicity[r] = multiplicity.get(r, 0) + 1
        distinct = list(multiplicity)
        tok = token_ids(distinct, self.options["tokenize"])
        ends = np.cumsum(tok.lengths).tolist()
        ids = tok.ids.tolist()
        start = 0
        for text, end in zip(distinct, ends, strict=True):
            words = [tok.vocab[t] for t in ids[start:end]]
            start = end
            m = multiplicity[text]
            for k in range(1, n + 1):
                table = df[k - 1]
                for gram in {tuple(words[i:i + k]) for i in range(len(words) - k + 1)}:
                    table[gram] = table.get(gram, 0) + m
        return CiderCorpus(n_pairs=len(refs), df=df)

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
        corpus: CiderCorpus | None = None,
    ) -> MetricResult:
        n = int(self.options["n"])
        sigma = float(self.options["sigma"])
        n_pairs = len(references)
        tok = token_ids([*references, *candidates], self.options["tokenize"])
        orders, ref_len, cand_len = _ngram_stats_from_ids(
            tok.ids, tok.lengths, len(tok.vocab), n, positions=corpus is not None
        )
        if corpus is not None and len(corpus.df) < n:
            raise MetricInputError(
                f"cider: corpus statistics hold {len(corpus.df)} n-gram orders, need {n}"
            )
        # pycocoevalcap: ref_len = log(number of pairs); idf = ref_len - log(max(1, df)).
        log_n = np.log(float(n_pairs if corpus is None else corpus.n_pairs))
        # Its 'length' is the bigram count (it tests the 0-based order index == 1).
        if n >= 2:
            len_h = np.maximum(cand_len - 1, 0)
            len_r = np.maximum(ref_len - 1, 0)
        else:
            len_h = len_r = np.zeros(n_pairs, dtype=np.int64)
        denom = 2 * sigma**2
        penalty = np.array(
            [math.e ** (-(float(d) ** 2) / denom) for d in (len_h - len_r).tolist()],
            dtype=np.float64,
        )
        total = np.zeros(n_pairs, dtype=np.float64)
        token_list = tok.ids.tolist() if corpus is not None else []
        for k, o in enumerate(orders, start=1):
            # Document frequency: number of pairs whose reference holds the n-gram.
            if corpus is not None:
                assert o.pos is not None
                table = corpus.df[k - 1]
                df = np.asarray(
                    [table.get(tuple(tok.vocab[t] for t in token_list[p:p + k]), 0)
                     for p in o.pos.tolist()],
                    dtype=np.int64,
                ).astype(np.float64)
            else:
                df = _scored_set_df(o)
            vec = o.count.astype(np.float64) * (log_n - np.log(np.maximum(1.0, df)))
            norm = np.sqrt(
                np.bincount(o.pair * 2 + o.side, weights=vec * vec, minlength=2 * n_pairs)
            )
            norm_r, norm_h = norm[0::2], norm[1::2]
            vr = vec[o.ref]
            # astype: bincount of an empty selection comes back as int64.
            dot = np.bincount(
                o.pair[o.cand], weights=np.minimum(vec[o.cand], vr) * vr, minlength=n_pairs
            ).astype(np.float64)
            both = (norm_h != 0) & (norm_r != 0)
            val = np.divide(dot, norm_h * norm_r, out=dot.copy(), where=both)
            total += val * penalty
        # Mean over orders, / number of references (1), * 10, as pycocoevalcap.
        scores = (total / n / 1 * 10.0).tolist()
        aggregate = math.fsum(scores) / len(scores)
        return MetricResult(values={"cider": scores}, corpus={"cider_corpus": aggregate})


def _scored_set_df(o: _OrderStats) -> np.ndarray:
    """Per entry, the number of pairs of this batch whose reference holds the entry's n-gram."""
    df_grams, df_counts = np.unique(o.gram[o.side == 0], return_counts=True)
    if not len(df_grams):
        return np.zeros(len(o.gram), dtype=np.float64)
    pos = np.minimum(np.searchsorted(df_grams, o.gram), len(df_grams) - 1)
    return np.where(df_grams[pos] == o.gram, df_counts[pos], 0).astype(np.float64)
