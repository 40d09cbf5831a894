"""Text preprocessing shared by the lexical metrics.

The default scheme (signature ``tok:lower-wordpunct``) is Unicode NFKC, lowercase, tokens =
``\\w+|[^\\w\\s]`` (every punctuation character becomes its own token), joined by single
spaces. Metrics that take a string (pycocoevalcap-style scorers split on whitespace) use
:func:`preprocess`; metrics that take tokens use :func:`tokenize`.

Other schemes are options of the metric and appear in its signature, because they change the
numbers. Reference-specific tokenizers (RadCliQ's BLEU-2, rouge-score's) live here too so that
the rules are written once.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import lru_cache

# re's \w and \s are Unicode-aware for str patterns, so "é" stays inside its word and "°"
# becomes its own token.
_WORDPUNCT_RE = re.compile(r"\w+|[^\w\s]")
# rouge-score 0.1.2 (rouge_score/tokenize.py): lowercase, non [a-z0-9] -> space.
_ROUGE_NON_ALNUM_RE = re.compile(r"[^a-z0-9]+")
_ROUGE_VALID_RE = re.compile(r"^[a-z0-9]+$")

DEFAULT_TOKENIZER = "lower-wordpunct"


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def _lower_wordpunct(text: str) -> list[str]:
    return _WORDPUNCT_RE.findall(_nfkc(text).lower())


def _wordpunct(text: str) -> list[str]:
    return _WORDPUNCT_RE.findall(_nfkc(text))


def _lower_whitespace(text: str) -> list[str]:
    return _nfkc(text).lower().split()


def _whitespace(text: str) -> list[str]:
    return text.split()


TOKENIZERS: dict[str, Callable[[str], list[str]]] = {
    "lower-wordpunct": _lower_wordpunct,
    "wordpunct": _wordpunct,
    "lower-whitespace": _lower_whitespace,
    "whitespace": _whitespace,
}
"""Scheme name (as written in signatures) -> tokenizer.

- ``lower-wordpunct`` (default): NFKC, lowercase, ``\\w+|[^\\w\\s]``.
- ``wordpunct``: NFKC, case kept, ``\\w+|[^\\w\\s]``.
- ``lower-whitespace``: NFKC, lowercase, split on whitespace (punctuation stays attached).
- ``whitespace``: the text as given, split on whitespace (for pre-tokenized input).
"""


def check_tokenizer(scheme: str) -> str:
    """Return ``scheme`` if it is a known tokenizer name.

    Raises:
        ValueError: naming the unknown scheme and the known ones.
    """
    if scheme not in TOKENIZERS:
        raise ValueError(
            f"unknown tokenize scheme {scheme!r} (known: {', '.join(sorted(TOKENIZERS))})"
        )
    return scheme


@lru_cache(maxsize=65536)
def _tokenize_cached(text: str, scheme: str) -> tuple[str, ...]:
    return tuple(TOKENIZERS[scheme](text))


def clear_token_cache() -> None:
    """Forget cached tokenizations (benchmarks use it to time cold runs)."""
    _tokenize_cached.cache_clear()


def tokenize(text: str, scheme: str = DEFAULT_TOKENIZER) -> list[str]:
    """Split ``text`` into tokens with the named scheme.

    Args:
        text: Raw report text.
        scheme: One of :data:`TOKENIZERS`.

    Returns:
        The tokens (empty for empty or whitespace-only text).

    Raises:
        ValueError: for an unknown scheme.
    """
    check_tokenizer(scheme)
    # Reference reports repeat across candidates; caching saves re-tokenizing them.
    return list(_tokenize_cached(text, scheme))


def token_tuple(text: str, scheme: str = DEFAULT_TOKENIZER) -> tuple[str, ...]:
    """Like :func:`tokenize` but returns the cached tuple itself (no copy).

    Args:
        text: Raw report text.
        scheme: One of :data:`TOKENIZERS`.

    Returns:
        The tokens as an immutable tuple.
    """
    check_tokenizer(scheme)
    return _tokenize_cached(text, scheme)


def preprocess(text: str, scheme: str = DEFAULT_TOKENIZER) -> str:
    """Tokenize ``text`` and join the tokens with single spaces.

    This is the string fed to whitespace-splitting scorers (BLEU, CIDEr, METEOR); it never
    contains newlines or repeated spaces.

    Args:
        text: Raw report text.
        scheme: One of :data:`TOKENIZERS`.

    Returns:
        Space-joined tokens.
    """
    check_tokenizer(scheme)
    return " ".join(_tokenize_cached(text, scheme))


def radcliq_tokens(text: str) -> list[str]:
    """Tokens as RadCliQ (CXR-Report-Metric ``prep_reports``) makes them for BLEU-2.

    Python ``str.lower``, ``'.' -> ' .'``, split on the single space character (tabs and
    newlines stay inside tokens, as in the original), empty strings dropped.

    Args:
        text: Raw report text.

    Returns:
        The token list.
    """
    return [t for t in text.lower().replace(".", " .").split(" ") if t != ""]


def rouge_words(text: str) -> list[str]:
    """rouge-score 0.1.2's default tokenization, before stemming.

    Lowercase, every run of characters outside ``[a-z0-9]`` becomes a separator (so non-ASCII
    letters separate words), empty strings dropped.

    Args:
        text: Raw report text.

    Returns:
        Lowercase ASCII alphanumeric words.
    """
    parts = _ROUGE_NON_ALNUM_RE.sub(" ", text.lower()).split(" ")
    return [p for p in parts if p]


def rouge_valid(token: str) -> bool:
    """Whether rouge-score keeps ``token`` after stemming (``^[a-z0-9]+$``)."""
    return _ROUGE_VALID_RE.match(token) is not None
