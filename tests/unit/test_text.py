"""Unit tests of the lexical text preprocessing (backend/metrics/text.py) and the fixture."""

import json
import random
import re
import unicodedata
from pathlib import Path

import pytest

from radconcord.backend.metrics.text import (
    DEFAULT_TOKENIZER,
    TOKENIZERS,
    check_tokenizer,
    preprocess,
    radcliq_tokens,
    rouge_words,
    token_tuple,
    tokenize,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report_pairs.jsonl"


def test_default_scheme_name():
    assert DEFAULT_TOKENIZER == "lower-wordpunct"


def test_default_splits_punctuation_and_lowercases():
    text = "ETT tip 4.5 cm above the carina; R IJ CVC -> SVC."
    assert tokenize(text) == [
        "ett", "tip", "4", ".", "5", "cm", "above", "the", "carina", ";",
        "r", "ij", "cvc", "-", ">", "svc", ".",
    ]


def test_default_applies_nfkc_before_lowercasing():
    # Fullwidth letters and the ligature fold under NFKC; "°" and "×" stay symbols.
    assert tokenize("Ｎｏ eﬀusion") == ["no", "effusion"]
    assert tokenize("2×3 cm, 38.5 °C") == ["2", "×", "3", "cm", ",", "38", ".", "5", "°", "c"]


def test_default_keeps_unicode_letters_inside_words():
    assert tokenize("Épanchement pleural") == ["épanchement", "pleural"]


def test_preprocess_joins_with_single_spaces_and_drops_newlines():
    text = "FINDINGS:\n  Lungs   clear.\t\nNo effusion!!"
    out = preprocess(text)
    assert out == "findings : lungs clear . no effusion ! !"
    assert "\n" not in out and "  " not in out


def test_empty_and_whitespace_only_text_gives_no_tokens():
    for scheme in TOKENIZERS:
        assert tokenize("", scheme) == []
        assert tokenize(" \n\t ", scheme) == []
        assert preprocess("   ", scheme) == ""


def test_default_matches_the_regex_definition_on_random_text():
    pattern = re.compile(r"\w+|[^\w\s]")
    rng = random.Random(7)
    alphabet = "abcXYZ019 .,;:-_/()|\n\t°×éＮ%'\""
    for _ in range(500):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        expected = pattern.findall(unicodedata.normalize("NFKC", s).lower())
        assert tokenize(s) == expected


def test_other_schemes():
    text = "Left  Effusion, small."
    assert tokenize(text, "wordpunct") == ["Left", "Effusion", ",", "small", "."]
    assert tokenize(text, "lower-whitespace") == ["left", "effusion,", "small."]
    assert tokenize(text, "whitespace") == ["Left", "Effusion,", "small."]


def test_unknown_scheme_is_rejected_with_the_known_names():
    with pytest.raises(ValueError, match="unknown tokenize scheme 'ptb'.*lower-wordpunct"):
        check_tokenizer("ptb")
    with pytest.raises(ValueError):
        tokenize("x", "ptb")


def test_tokenize_returns_a_fresh_list_and_token_tuple_is_cached():
    a = tokenize("Lungs clear.")
    a.append("mutated")
    assert tokenize("Lungs clear.") == ["lungs", "clear", "."]
    assert token_tuple("Lungs clear.") is token_tuple("Lungs clear.")


def test_radcliq_tokens_follow_prep_reports():
    # CXR-Report-Metric prep_reports: lower, '.' -> ' .', split(" "), drop "".
    text = "No  effusion.Heart normal.\nLungs clear"
    expected = list(filter(lambda v: v != "", text.lower().replace(".", " .").split(" ")))
    assert radcliq_tokens(text) == expected == [
        "no", "effusion", ".heart", "normal", ".\nlungs", "clear",
    ]
    assert radcliq_tokens("") == []


def test_rouge_words_match_rouge_score_tokenizer_without_stemming():
    """Reference: rouge-score 0.1.2 rouge_score.tokenize.tokenize(text, None); exact."""
    from rouge_score import tokenize as rs_tokenize

    rows = [json.loads(x) for x in FIXTURE.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        for text in (r["reference"], r["candidate"]):
            assert rouge_words(text) == rs_tokenize.tokenize(text, None)


def test_fixture_is_well_formed_and_covers_the_edge_cases():
    rows = [json.loads(x) for x in FIXTURE.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 40
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert set(r) == {"id", "reference", "candidate", "source"}
        assert all(isinstance(r[k], str) for k in r)
    sources = {r["source"] for r in rows}
    for needed in ("edge-identical", "edge-short", "numbers", "punctuation", "laterality-swap",
                   "edge-single-word", "edge-empty"):
        assert needed in sources
    assert any(r["reference"] == r["candidate"] and r["reference"] for r in rows)
    assert any(len(r["candidate"].split()) == 1 for r in rows)


def _decoded(batch):
    out, pos = [], 0
    for n in batch.lengths.tolist():
        out.append([batch.vocab[i] for i in batch.ids[pos : pos + n]])
        pos += n
    assert pos == len(batch.ids)
    return out


def test_token_ids_equal_per_text_tokenize_for_every_scheme():
    """Reference: tokenize() per text; exact. Mixes ASCII texts (one joined regex pass)
    with non-ASCII ones, separators (\\x00, \\x1c-\\x1f), empty texts and repeats."""
    from radconcord.backend.metrics.text import token_ids

    rng = random.Random(11)
    ascii_only = "abcXYZ019 .,;:-_/()|\n\t%'\""
    for alphabet in (ascii_only, ascii_only + "°×éＮ\x00\x1c\x1fΣ"):
        for _ in range(150):
            texts = [
                "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
                for _ in range(rng.randint(0, 8))
            ]
            texts += texts[:2]
            for scheme in TOKENIZERS:
                batch = token_ids(texts, scheme)
                assert _decoded(batch) == [tokenize(t, scheme) for t in texts]
                assert list(batch.vocab) == sorted(batch.vocab)


def test_radcliq_token_ids_equal_per_text_radcliq_tokens():
    """Reference: radcliq_tokens() per text; exact (incl. final sigma at text ends)."""
    from radconcord.backend.metrics.text import radcliq_token_ids

    rng = random.Random(5)
    alphabet = "abcXYZ019 .,;:-_\n\t°éΣ'\x00"
    for _ in range(300):
        texts = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
            for _ in range(rng.randint(0, 8))
        ]
        assert _decoded(radcliq_token_ids(texts)) == [radcliq_tokens(t) for t in texts]
    texts = ["ΑΣ", "Σα", "aΣ'", "'Σb", "x.Σ", ""]
    assert _decoded(radcliq_token_ids(texts)) == [radcliq_tokens(t) for t in texts]
