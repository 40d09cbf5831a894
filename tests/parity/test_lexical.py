"""Parity and contract tests of the lexical metrics (backend/metrics/lexical.py).

Reference versions are pinned in requirements-dev.txt: pycocoevalcap 1.2, fast-bleu 0.0.90,
rouge-score 0.1.2 (with NLTK's Porter stemmer).
"""

import json
import random
import re
import threading
from importlib.metadata import version
from pathlib import Path

import pytest

import radconcord.backend.metrics.lexical as lexical
from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import BaseMetric, MetricInputError
from radconcord.backend.metrics.lexical import (
    Bleu,
    Bleu2RadCliQ,
    Cider,
    Meteor,
    RougeL,
    lcs_length,
    meteor_sanitize,
)
from radconcord.backend.metrics.text import preprocess, radcliq_tokens

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report_pairs.jsonl"
ROWS = [json.loads(x) for x in FIXTURE.read_text(encoding="utf-8").splitlines()]


def _recombined(n: int, seed: int) -> tuple[list[str], list[str]]:
    """Fixture sentences recombined into extra pairs (fixed seed)."""
    sentences = sorted(
        {
            s.strip()
            for r in ROWS
            for t in (r["reference"], r["candidate"])
            for s in re.split(r"(?<=[.!?])\s+|\n+", t)
            if s.strip()
        }
    )
    rng = random.Random(seed)
    refs, cands = [], []
    for _ in range(n):
        ref = rng.sample(sentences, rng.randint(1, 4))
        cand = [s if rng.random() < 0.6 else rng.choice(sentences) for s in ref]
        if rng.random() < 0.3:
            rng.shuffle(cand)
        refs.append(" ".join(ref))
        cands.append(" ".join(cand))
    return refs, cands


_EXTRA_R, _EXTRA_C = _recombined(150, seed=3)
REFS = [r["reference"] for r in ROWS] + _EXTRA_R
CANDS = [r["candidate"] for r in ROWS] + _EXTRA_C
TOK_REFS = [preprocess(t) for t in REFS]
TOK_CANDS = [preprocess(t) for t in CANDS]
GTS = {i: [TOK_REFS[i]] for i in range(len(REFS))}
RES = {i: [TOK_CANDS[i]] for i in range(len(REFS))}


def _score(metric, refs=REFS, cands=CANDS):
    return metric.score(references=refs, candidates=cands)


# ------------------------------------------------------------------------------------------
# BLEU (pycocoevalcap)
# ------------------------------------------------------------------------------------------


def test_bleu_matches_pycocoevalcap_per_pair_and_corpus():
    """Reference: pycocoevalcap 1.2 Bleu(4).compute_score on the default-tokenized strings.

    Tolerance: 1e-9 absolute per pair and for the corpus BLEU-4 (observed: <= 5e-16; the
    only non-zero differences are empty references, where pycocoevalcap returns ~1e-16).
    """
    from pycocoevalcap.bleu.bleu import Bleu as CocoBleu

    assert version("pycocoevalcap") == "1.2"
    corpus, per_pair = CocoBleu(4).compute_score(GTS, RES, verbose=0)
    ours = _score(Bleu())
    for k in range(4):
        assert ours.values[f"bleu{k + 1}"] == pytest.approx(per_pair[k], abs=1e-9, rel=0)
    assert ours.corpus["bleu4_corpus"] == pytest.approx(corpus[3], abs=1e-9, rel=0)
    # Not trivially equal: the set spans identical pairs (1.0) to unrelated ones.
    assert max(ours.values["bleu4"]) == pytest.approx(1.0)
    assert len(set(ours.values["bleu4"])) > 50


def test_bleu_large_vocabulary_path_gives_the_same_values(monkeypatch):
    """Reference: our default path; tolerance exact. Forces the int64-overflow compaction."""
    expected = _score(Bleu()).values
    monkeypatch.setattr(lexical, "_KEY_LIMIT", 1 << 12)
    assert _score(Bleu()).values == expected


# ------------------------------------------------------------------------------------------
# BLEU-2 as in RadCliQ (fast_bleu)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("smoothing", "smoothing_func"), [("method1", 1), ("none", 0)])
def test_bleu2_radcliq_matches_fast_bleu(smoothing, smoothing_func):
    """Reference: fast-bleu 0.0.90 BLEU([ref_tokens], {"bigram": (0.5, 0.5)},
    smoothing_func=...).get_score([hyp_tokens]) on RadCliQ prep_reports tokens.

    Tolerance: 1e-12 absolute (fast_bleu takes logs in long double).
    """
    from fast_bleu import BLEU

    assert version("fast-bleu") == "0.0.90"
    ours = _score(Bleu2RadCliQ(smoothing=smoothing)).values["bleu2_radcliq"]
    expected = [
        BLEU([radcliq_tokens(r)], {"bigram": (0.5, 0.5)}, smoothing_func=smoothing_func)
        .get_score([radcliq_tokens(c)])["bigram"][0]
        for r, c in zip(REFS, CANDS, strict=True)
    ]
    assert ours == pytest.approx(expected, abs=1e-12, rel=0)
    assert len(set(ours)) > 50


def test_bleu2_radcliq_smoothing_edge_values():
    """Reference: fast-bleu 0.0.90 semantics worked by hand; tolerance 1e-15.

    'a x' vs 'a b c d': p1 = 1/2, no bigram match -> 0.1/1 (method 1), BP = exp(1 - 4/2).
    """
    import math

    m1 = Bleu2RadCliQ().score(references=["a b c d"], candidates=["a x"]).values
    assert m1["bleu2_radcliq"][0] == pytest.approx(math.sqrt(0.5 * 0.1) * math.exp(-1), abs=1e-15)
    none = Bleu2RadCliQ(smoothing="none").score(references=["a b c d"], candidates=["a x"])
    assert none.values["bleu2_radcliq"] == [0.0]
    no_unigram = Bleu2RadCliQ().score(references=["a b"], candidates=["c d"])
    assert no_unigram.values["bleu2_radcliq"] == [0.0]


# ------------------------------------------------------------------------------------------
# ROUGE-L (rouge-score)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_stemmer", [True, False])
def test_rougeL_matches_rouge_score(use_stemmer):
    """Reference: rouge-score 0.1.2 RougeScorer(['rougeL'], use_stemmer=...).score(
    target=reference, prediction=candidate).fmeasure on raw text. Tolerance: exact (0.0).
    """
    from rouge_score.rouge_scorer import RougeScorer

    assert version("rouge-score") == "0.1.2"
    scorer = RougeScorer(["rougeL"], use_stemmer=use_stemmer)
    expected = [
        scorer.score(target=r, prediction=c)["rougeL"].fmeasure
        for r, c in zip(REFS, CANDS, strict=True)
    ]
    assert _score(RougeL(use_stemmer=use_stemmer)).values["rougeL"] == expected


def test_lcs_length_matches_dynamic_programme():
    """Reference: the textbook O(nm) LCS table; tolerance exact."""
    rng = random.Random(11)

    def dp(a, b):
        t = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i in range(1, len(a) + 1):
            for j in range(1, len(b) + 1):
                t[i][j] = t[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(
                    t[i - 1][j], t[i][j - 1]
                )
        return t[-1][-1]

    for _ in range(400):
        a = [rng.choice("abcde") for _ in range(rng.randint(0, 70))]
        b = [rng.choice("abcdef") for _ in range(rng.randint(0, 70))]
        assert lcs_length(a, b) == dp(a, b)


# ------------------------------------------------------------------------------------------
# CIDEr-D (pycocoevalcap)
# ------------------------------------------------------------------------------------------


def test_cider_matches_pycocoevalcap():
    """Reference: pycocoevalcap 1.2 Cider().compute_score on the default-tokenized strings
    of the same set (document frequencies from its references). Tolerance: 1e-9 absolute
    per pair and for the corpus mean (observed ~1e-15: summation order only).
    """
    from pycocoevalcap.cider.cider import Cider as CocoCider

    corpus, per_pair = CocoCider().compute_score(GTS, RES)
    ours = _score(Cider())
    assert ours.values["cider"] == pytest.approx(list(per_pair), abs=1e-9, rel=0)
    assert ours.corpus["cider_corpus"] == pytest.approx(float(corpus), abs=1e-9, rel=0)
    assert max(ours.values["cider"]) > 1.0


def test_cider_large_vocabulary_path_gives_the_same_values(monkeypatch):
    """Reference: our default path; tolerance exact. Forces the int64-overflow compaction."""
    expected = _score(Cider()).values
    monkeypatch.setattr(lexical, "_KEY_LIMIT", 1 << 12)
    assert _score(Cider()).values == expected


def test_cider_depends_on_the_scored_set():
    """Reference: CIDEr-D definition (df from the scored set's references); tolerance 1e-12.

    A single pair has idf = log(1) - log(1) = 0 for all its reference n-grams: score 0.
    """
    ref, cand = REFS[2], CANDS[2]
    alone = Cider().score(references=[ref], candidates=[cand]).values["cider"]
    assert alone == [0.0]
    in_set = _score(Cider()).values["cider"][2]
    assert in_set > 0.0


# ------------------------------------------------------------------------------------------
# METEOR 1.5 (Java jar from pycocoevalcap)
# ------------------------------------------------------------------------------------------

# METEOR needs a JRE; scripts/bootstrap.sh installs one, so a missing runtime is a failure
# of the environment, reported as such rather than skipped.
needs_java = pytest.mark.slow


@pytest.fixture(scope="module")
def meteor():
    reason = Meteor().availability()
    if reason is not None:
        pytest.fail(f"METEOR runtime missing (run scripts/bootstrap.sh test): {reason}")
    metric = Meteor()
    metric.load()
    yield metric
    metric.close()


@needs_java
@pytest.mark.slow
def test_meteor_matches_pycocoevalcap(meteor):
    """Reference: pycocoevalcap 1.2 meteor.Meteor().compute_score (meteor-1.5.jar, -l en
    -norm) on the default-tokenized strings. Tolerance: 1e-4 absolute per pair and for the
    aggregate (observed: identical, both parse the jar's printed scores).
    """
    from pycocoevalcap.meteor.meteor import Meteor as CocoMeteor

    coco = CocoMeteor()
    try:
        corpus, per_pair = coco.compute_score(GTS, RES)
    finally:
        del coco
    ours = _score(meteor)
    assert ours.values["meteor"] == pytest.approx(per_pair, abs=1e-4, rel=0)
    assert ours.corpus["meteor_corpus"] == pytest.approx(corpus, abs=1e-4, rel=0)
    assert max(ours.values["meteor"]) == pytest.approx(1.0, abs=1e-4)
    assert len(set(ours.values["meteor"])) > 50


@needs_java
@pytest.mark.slow
def test_meteor_aligns_each_distinct_pair_once_with_pycocoevalcap_values(meteor):
    """Repeated pairs (a study often holds the same candidate text twice) are sent to the jar
    once; every copy still gets its value and the aggregate counts each copy, as in
    pycocoevalcap given the full list."""
    from pycocoevalcap.meteor.meteor import Meteor as CocoMeteor

    idx = [0, 1, 2, 0, 3, 1, 0, 4]
    refs = [REFS[i] for i in idx]
    cands = [CANDS[i] for i in idx]
    coco = CocoMeteor()
    try:
        corpus, per_pair = coco.compute_score(
            {k: [TOK_REFS[i]] for k, i in enumerate(idx)},
            {k: [preprocess(CANDS[i])] for k, i in enumerate(idx)},
        )
    finally:
        del coco
    sent: list[int] = []
    original = meteor._proc.statistics

    def counting(r, c):
        sent.append(len(r))
        return original(r, c)

    meteor._proc.statistics = counting
    try:
        ours = meteor.score(references=refs, candidates=cands)
    finally:
        del meteor._proc.statistics
    assert sent == [len(set(idx))]
    assert ours.values["meteor"] == pytest.approx(per_pair, abs=1e-4, rel=0)
    assert ours.corpus["meteor_corpus"] == pytest.approx(corpus, abs=1e-4, rel=0)
    assert ours.values["meteor"][0] == ours.values["meteor"][3] == ours.values["meteor"][6]


@needs_java
@pytest.mark.slow
def test_meteor_protocol_characters_do_not_desynchronise(meteor):
    """Reference: the clean pairs scored alone by the same jar; tolerance exact.

    With the whitespace scheme '|||' and newlines reach the protocol: they are removed as
    pycocoevalcap does for hypotheses (see meteor_sanitize), and later pairs keep their
    own scores.
    """
    raw = Meteor(tokenize="lower-whitespace")
    raw._proc = meteor._proc  # share the running JVM; options only change preprocessing
    raw._loaded = True
    refs = ["a ||| b\nlungs clear", REFS[3], REFS[4]]
    cands = ["lungs|||clear\r\nok", CANDS[3], CANDS[4]]
    mixed = raw.score(references=refs, candidates=cands).values["meteor"]
    clean = raw.score(references=refs[1:], candidates=cands[1:]).values["meteor"]
    assert mixed[1:] == clean
    assert 0.0 <= mixed[0] <= 1.0
    assert meteor_sanitize("a ||| b\nc") == "a b c"


@needs_java
@pytest.mark.slow
def test_meteor_is_thread_safe(meteor):
    """Reference: the same metric called sequentially; tolerance exact."""
    expected = meteor.score(references=REFS[:60], candidates=CANDS[:60]).values["meteor"]
    results: list = [None] * 4
    errors: list = []

    def work(i):
        try:
            results[i] = meteor.score(references=REFS[:60], candidates=CANDS[:60]).values[
                "meteor"
            ]
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert all(r == expected for r in results)


def test_meteor_availability_names_the_missing_java(monkeypatch):
    monkeypatch.setattr(lexical.shutil, "which", lambda name: None)
    reason = Meteor().availability()
    assert reason is not None and "Java runtime not found" in reason and "JRE" in reason


def test_meteor_availability_names_the_missing_jar(monkeypatch):
    monkeypatch.setattr(lexical.shutil, "which", lambda name: "/usr/bin/java")
    monkeypatch.setattr(lexical, "find_meteor_jar", lambda: None)
    reason = Meteor().availability()
    assert reason is not None and "meteor-1.5.jar" in reason and "pycocoevalcap" in reason


def test_meteor_jar_is_found_in_pycocoevalcap():
    jar = lexical.find_meteor_jar()
    assert jar is not None and jar.name == "meteor-1.5.jar" and jar.is_file()


# ------------------------------------------------------------------------------------------
# Contract: signatures, options, empty strings, keyword-only API, registry
# ------------------------------------------------------------------------------------------


def test_default_signatures():
    assert Bleu().signature() == "bleu|n:4|tok:lower-wordpunct|eff:closest|smooth:coco|version:1"
    assert Bleu2RadCliQ().signature() == (
        "bleu2_radcliq|w:0.5,0.5|tok:radcliq|smooth:method1|version:1"
    )
    assert RougeL().signature() == "rougeL|score:f|tok:rouge_score|stem:porter|version:1"
    assert Meteor().signature() == "meteor|version:1.5|lang:en|norm:yes|tok:lower-wordpunct"
    assert Cider().signature() == (
        "cider|variant:D|n:4|sigma:6|df:scored-set|tok:lower-wordpunct|version:1"
    )


def test_options_that_change_numbers_change_the_signature():
    assert Bleu(tokenize="whitespace").signature() == (
        "bleu|n:4|tok:whitespace|eff:closest|smooth:coco|version:1"
    )
    assert Bleu2RadCliQ(smoothing="none").signature() == (
        "bleu2_radcliq|w:0.5,0.5|tok:radcliq|smooth:none|version:1"
    )
    assert RougeL(use_stemmer=False).signature() == (
        "rougeL|score:f|tok:rouge_score|stem:none|version:1"
    )
    assert Meteor(tokenize="wordpunct").signature() == (
        "meteor|version:1.5|lang:en|norm:yes|tok:wordpunct"
    )
    assert Cider(sigma=3.5, n=3).signature() == (
        "cider|variant:D|n:3|sigma:3.5|df:scored-set|tok:lower-wordpunct|version:1"
    )
    # The JVM heap does not change scores, so it is not in the signature.
    assert Meteor(java_heap="4G").signature() == Meteor().signature()


def test_tokenize_option_changes_the_numbers():
    refs, cands = ["Left effusion."], ["left effusion"]
    default = Bleu().score(references=refs, candidates=cands).values["bleu1"][0]
    raw = Bleu(tokenize="whitespace").score(references=refs, candidates=cands).values["bleu1"][0]
    assert default != raw


@pytest.mark.parametrize(
    ("cls", "options", "message"),
    [
        (Bleu, {"tokenize": "ptb"}, "unknown tokenize scheme"),
        (Bleu, {"n": 3}, "unknown option"),
        (Bleu2RadCliQ, {"smoothing": "method7"}, "unknown smoothing"),
        (RougeL, {"use_stemmer": "yes"}, "true or false"),
        (Cider, {"n": 0}, "positive integer"),
        (Cider, {"sigma": -1.0}, "> 0"),
        (Meteor, {"tokenize": "nope"}, "unknown tokenize scheme"),
    ],
)
def test_bad_options_raise(cls, options, message):
    with pytest.raises(ValueError, match=message):
        cls(**options)


CHEAP = [Bleu, Bleu2RadCliQ, RougeL, Cider]


@pytest.mark.parametrize("cls", CHEAP)
def test_empty_strings_score_zero_without_crashing(cls):
    refs = ["", "No effusion.", "", "   "]
    cands = ["No effusion.", "", "", "\n"]
    result = cls().score(references=refs, candidates=cands)
    for key in cls.spec.keys:
        assert result.values[key] == [0.0, 0.0, 0.0, 0.0]


@needs_java
@pytest.mark.slow
def test_meteor_empty_strings_score_zero(meteor):
    refs = ["", "No effusion.", "", "   "]
    cands = ["No effusion.", "", "", "\n"]
    assert meteor.score(references=refs, candidates=cands).values["meteor"] == [0.0] * 4


@pytest.mark.parametrize("cls", [*CHEAP, Meteor])
def test_score_is_keyword_only(cls):
    metric = cls()
    with pytest.raises(TypeError):
        metric.score(["a"], ["a"])


@pytest.mark.parametrize("cls", CHEAP)
def test_mismatched_lengths_and_empty_batches(cls):
    with pytest.raises(MetricInputError):
        cls().score(references=["a", "b"], candidates=["a"])
    empty = cls().score(references=[], candidates=[])
    assert all(v == [] for v in empty.values.values())


@pytest.mark.parametrize("family", ["bleu", "bleu2_radcliq", "rouge", "meteor", "cider"])
def test_registry_resolves_our_classes_with_matching_keys(family):
    metric = registry.create(family)
    assert isinstance(metric, BaseMetric)
    assert metric.spec.name == family
    assert metric.spec.keys == registry.ENTRIES[family].keys
    assert all(metric.spec.direction(k) is True for k in metric.spec.keys)
    card = Path(lexical.__file__).parent / "cards" / f"{family}.md"
    text = card.read_text(encoding="utf-8")
    for section in ("Description", "Inputs", "Outputs", "Values from papers", "Limitations",
                    "Citation"):
        assert f"## {section}" in text


def test_identical_texts_score_perfectly():
    """Reference: metric definitions (identical texts are a perfect match); tol 1e-9
    (pycocoevalcap's small=1e-9 keeps BLEU just under 1)."""
    text = [ROWS[0]["reference"]] * 3
    others = [ROWS[5]["reference"], ROWS[10]["reference"], ROWS[12]["reference"]]
    refs, cands = text + others, text + others
    for cls, key in ((Bleu, "bleu4"), (Bleu2RadCliQ, "bleu2_radcliq"), (RougeL, "rougeL")):
        vals = cls().score(references=refs, candidates=cands).values[key]
        assert vals == pytest.approx([1.0] * 6, abs=1e-9)


@needs_java
@pytest.mark.slow
def test_meteor_close_stops_java(meteor):
    """Runs last in this file: closing the shared instance stops its JVM."""
    proc = meteor._proc._proc
    meteor.close()
    assert proc.poll() is not None
    assert meteor._proc is None


def test_bleu2_radcliq_large_vocabulary_path_gives_the_same_values(monkeypatch):
    """Reference: our default (one-sort) path; tolerance exact. Forces the per-order path
    with int64-overflow compaction."""
    expected = _score(Bleu2RadCliQ()).values
    monkeypatch.setattr(lexical, "_KEY_LIMIT", 1 << 12)
    assert _score(Bleu2RadCliQ()).values == expected


@needs_java
def test_meteor_parallel_jvms_give_identical_values(meteor):
    """Two JVMs aligning halves of the batch, statistics evaluated once: per-pair values and
    the corpus score must equal one JVM's exactly (tolerance 0)."""
    one = meteor.score(references=REFS[:40], candidates=CANDS[:40])
    with Meteor(jvm_workers=2) as two_jvms:
        two = two_jvms.score(references=REFS[:40], candidates=CANDS[:40])
    assert two.values["meteor"] == one.values["meteor"]
    assert two.corpus["meteor_corpus"] == one.corpus["meteor_corpus"]
    assert two_jvms.signature() == meteor.signature()  # a speed option, not a setting


def test_meteor_jvm_workers_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="jvm_workers"):
        Meteor(jvm_workers=0)
