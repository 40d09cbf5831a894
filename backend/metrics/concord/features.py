"""Hand-made features of a reference/candidate pair for the ``gbm`` variant of ``concord``.

Every feature comes from the rule analysis of :mod:`.rules` (one analysis per distinct report
per call, one per distinct sentence) and plain token statistics; the order is
:data:`FEATURE_NAMES`, which a trained ``gbm`` folder records so that a model can never be
applied to features in another order.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping, Sequence
from typing import Any

import numpy as np

from radconcord.backend.metrics.concord.rules import (
    COUNT_NAMES,
    FINDINGS,
    ReportAnalysis,
    RuleError,
    analyze_reports,
    compare,
    count_vector,
)

__all__ = ["FEATURE_NAMES", "FEATURES_VERSION", "feature_matrix", "pair_features"]

#: Bump whenever a feature's definition changes: a trained model records it.
FEATURES_VERSION = "2"

_SIDE_FEATURES = (
    "n_sent", "n_tokens", "n_present", "n_uncertain", "n_minor_present", "n_abnormal_sent",
    "n_normal_sent", "n_abnormal_unmatched", "n_sent_unmatched", "n_side_words",
    "n_zone_words", "n_severity_words", "n_negations", "n_claims", "n_change_claims",
    "n_mentioned",
)

#: Column names of :func:`feature_matrix`, in order (58 features).
FEATURE_NAMES: tuple[str, ...] = (
    *(f"rule_{n}" for n in COUNT_NAMES),
    "rule_total",
    "rule_sig",
    *(f"ref_{n}" for n in _SIDE_FEATURES),
    *(f"cand_{n}" for n in _SIDE_FEATURES),
    "token_jaccard",
    "bigram_jaccard",
    "unigram_precision",
    "unigram_recall",
    "bleu1",
    "length_ratio",
    "sentences_shared",
    "label_agree",
    "label_disagree",
    "present_shared",
    "status_conflicts",
    "findings_only_ref",
)

_JACCARD_MATCH = 0.5  # a sentence with no counterpart this similar is "unmatched"


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def _unmatched(ref: ReportAnalysis, cand: ReportAnalysis) -> tuple[int, int, int, int]:
    """Sentences with no similar sentence on the other side (token Jaccard below 0.5).

    Returns:
        ``(ref abnormal, ref all, cand abnormal, cand all)`` unmatched sentence counts.
    """
    rs, cs = ref.sentence_tokens, cand.sentence_tokens
    r_best = [1.0 if t in cs else 0.0 for t in rs]  # identical token sets: matched at once
    c_best = [1.0 if t in rs else 0.0 for t in cs]
    for i, a in enumerate(rs):
        if r_best[i] == 1.0:
            continue
        for j, b in enumerate(cs):
            if c_best[j] == 1.0 and r_best[i] >= _JACCARD_MATCH:
                continue
            sim = _jaccard(a, b)
            if sim > r_best[i]:
                r_best[i] = sim
            if sim > c_best[j]:
                c_best[j] = sim
    out = []
    for best, present in ((r_best, ref.sentence_findings), (c_best, cand.sentence_findings)):
        low = [k for k, v in enumerate(best) if v < _JACCARD_MATCH]
        out.extend((sum(1 for k in low if present[k]), len(low)))
    return out[0], out[1], out[2], out[3]


def _side(a: ReportAnalysis, abnormal_unmatched: int, sent_unmatched: int) -> list[float]:
    present = a.present
    n_abn = sum(1 for p in a.sentence_findings if p)
    return [
        len(a.sentences),
        len(a.tokens),
        len(present),
        a.n_uncertain,
        sum(1 for n in present if a.findings[n].minor),
        n_abn,
        len(a.sentences) - n_abn,
        abnormal_unmatched,
        sent_unmatched,
        a.n_side,
        a.n_zone,
        a.n_severity,
        a.n_negation,
        len(a.claims),
        sum(1 for c in a.claims if c.significant),
        len(a.findings),
    ]


def pair_features(
    ref: ReportAnalysis, cand: ReportAnalysis, errors: Sequence[RuleError] | None = None
) -> list[float]:
    """The :data:`FEATURE_NAMES` values of one analysed pair.

    Args:
        ref: Analysis of the reference.
        cand: Analysis of the candidate.
        errors: The rule errors of the pair, when already computed.
    """
    errs = compare(ref, cand) if errors is None else errors
    counts = count_vector(errs)
    rc, cc = ref.token_counts, cand.token_counts
    if len(rc) > len(cc):
        overlap = sum(min(n, rc[t]) for t, n in cc.items() if t in rc)
    else:
        overlap = sum(min(n, cc[t]) for t, n in rc.items() if t in cc)
    n_ref, n_cand = len(ref.tokens), len(cand.tokens)
    precision = overlap / n_cand if n_cand else float(n_ref == 0)
    recall = overlap / n_ref if n_ref else float(n_cand == 0)
    if n_cand == 0:
        bleu1 = float(n_ref == 0)
    else:
        bp = 1.0 if n_cand >= n_ref else math.exp(1.0 - n_ref / n_cand)
        bleu1 = bp * precision
    agree = disagree = conflicts = 0
    for name in FINDINGS:
        rf, cf = ref.findings.get(name), cand.findings.get(name)
        if rf is None and cf is None:
            continue
        r_pos = rf is not None and rf.present
        c_pos = cf is not None and cf.present
        if r_pos == c_pos:
            agree += 1
        else:
            disagree += 1
            if rf is not None and cf is not None:
                conflicts += 1  # mentioned on both sides with opposite status
    rp, cp = ref.present, cand.present
    r_abn, r_un, c_abn, c_un = _unmatched(ref, cand)
    return [
        *counts,
        sum(counts),
        sum(counts[0::2]),
        *_side(ref, r_abn, r_un),
        *_side(cand, c_abn, c_un),
        _jaccard(ref.token_set, cand.token_set),
        _jaccard(ref.bigrams, cand.bigrams),
        precision,
        recall,
        bleu1,
        (min(n_ref, n_cand) / max(n_ref, n_cand)) if max(n_ref, n_cand) else 1.0,
        len(ref.sentence_keys & cand.sentence_keys),
        agree,
        disagree,
        len(rp & cp),
        conflicts,
        len(set(ref.findings) - set(cand.findings)),
    ]


def feature_matrix(
    references: Sequence[str],
    candidates: Sequence[str],
    *,
    cache: MutableMapping[str, Any] | None = None,
    errors_out: list[list[RuleError]] | None = None,
) -> np.ndarray:
    """Features of aligned pairs.

    Args:
        references: Reference reports.
        candidates: Candidate reports (same length).
        cache: Optional sentence cache shared with other calls (see
            :func:`~backend.metrics.concord.rules.analyze_report`); a fresh one otherwise.
        errors_out: When given, the rule errors of each pair are appended to it (the
            family's evidence, at no extra cost).

    Returns:
        ``float32`` array of shape ``(n, len(FEATURE_NAMES))``.

    Raises:
        ValueError: when the two sequences differ in length.
    """
    if len(references) != len(candidates):
        raise ValueError(
            f"references ({len(references)}) and candidates ({len(candidates)}) differ in length"
        )
    n = len(references)
    out = np.zeros((n, len(FEATURE_NAMES)), dtype=np.float32)
    if n == 0:
        return out
    analyses = analyze_reports([*references, *candidates], {} if cache is None else cache)
    for i in range(n):
        ref, cand = analyses[i], analyses[n + i]
        errs = compare(ref, cand)
        if errors_out is not None:
            errors_out.append(errs)
        out[i] = pair_features(ref, cand, errs)
    return out
