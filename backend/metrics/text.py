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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import numpy as np

# re's \w and \s are Unicode-aware for str patterns, so "é" stays inside its word and "°"
# becomes its own token.
_WORDPUNCT_RE = re.compile(r"\w+|[^\w\s]")
# rouge-score 0.1.2 (rouge_score/tokenize.py): lowercase, non [a-z0-9] -> space.
_ROUGE_NON_ALNUM_RE = re.compile(r"[^a-z0-9]+")
# rouge-score's own test, `$` and all: tokens come from a whitespace split, so none ends in a
# newline and `match` with `$` equals `fullmatch` here; kept verbatim for parity.
_ROUGE_VALID_RE = re.compile(r"^[a-z0-9]+$")
# For ASCII text without the separators \x1c-\x1f (whitespace for str patterns but not for
# re.ASCII ones) the ASCII-mode pattern finds the same tokens, faster.
_WORDPUNCT_ASCII_RE = re.compile(r"\w+|[^\w\s]", re.ASCII)
_ASCII_UNSAFE_RE = re.compile(r"[\x00\x1c-\x1f]")
# Joins texts for one pass of the ASCII pattern: a token of its own that no safe text holds.
_SEP = "\x00"

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


@dataclass(frozen=True)
class TokenIds:
    """Several texts tokenized at once, as integer ids.

    Attributes:
        ids: int64 ids of every token of every text, text after text.
        lengths: int64 number of tokens of each text.
        vocab: The token strings, sorted; ``vocab[i]`` is the token with id ``i`` (it may
            hold strings that no text uses), so ids order tokens as strings compare.
    """

    ids: np.ndarray
    lengths: np.ndarray
    vocab: tuple[str, ...]


def _assemble(
    per_unique: Sequence[Sequence[str]], which: np.ndarray, extra_vocab: Sequence[str] = ()
) -> TokenIds:
    """Ids of the distinct texts' tokens, gathered back into the order of ``which``."""
    vocab = tuple(sorted(set(chain(chain.from_iterable(per_unique), extra_vocab))))
    lookup = {tok: i for i, tok in enumerate(vocab)}
    u_len = np.fromiter(map(len, per_unique), dtype=np.int64, count=len(per_unique))
    u_ids = np.fromiter(
        map(lookup.__getitem__, chain.from_iterable(per_unique)),
        dtype=np.int64,
        count=int(u_len.sum()),
    )
    return _gather(u_ids, u_len, which, vocab)


def _gather(
    u_ids: np.ndarray, u_len: np.ndarray, which: np.ndarray, vocab: tuple[str, ...]
) -> TokenIds:
    """Concatenate the id runs of distinct texts ``which[0], which[1], ...``."""
    u_start = np.cumsum(u_len) - u_len
    lengths = u_len[which]
    total = int(lengths.sum())
    out_start = np.cumsum(lengths) - lengths
    idx = np.repeat(u_start[which] - out_start, lengths) + np.arange(total, dtype=np.int64)
    return TokenIds(ids=u_ids[idx], lengths=lengths, vocab=vocab)


def _distinct(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Distinct texts in first-seen order and each text's index among them."""
    # References repeat across the candidates of a study: tokenize each text once.
    position: dict[str, int] = {}
    for t in texts:
        position.setdefault(t, len(position))
    which = np.fromiter(map(position.__getitem__, texts), dtype=np.int64, count=len(texts))
    return list(position), which


def token_ids(texts: Sequence[str], scheme: str = DEFAULT_TOKENIZER) -> TokenIds:
    """Tokenize many texts at once; text ``j``'s tokens equal ``tokenize(texts[j], scheme)``.

    Each distinct text is tokenized once. For the ``wordpunct`` schemes the ASCII texts are
    joined and split by one ASCII-mode regex pass (same tokens: NFKC and lowercasing leave
    ASCII text ASCII, and ``\\w``/``\\s`` agree on ASCII once ``\\x1c``-``\\x1f`` are
    excluded); every other text goes through :func:`tokenize`'s cache.

    Args:
        texts: Raw report texts.
        scheme: One of :data:`TOKENIZERS`.

    Returns:
        The ids, per-text lengths and sorted vocabulary.

    Raises:
        ValueError: for an unknown scheme.
    """
    check_tokenizer(scheme)
    uniq, which = _distinct(texts)
    if scheme not in ("lower-wordpunct", "wordpunct") or not uniq:
        return _assemble([_tokenize_cached(t, scheme) for t in uniq], which)
    fast = [t for t in uniq if t.isascii()]
    if _ASCII_UNSAFE_RE.search("".join(fast)) is not None:
        fast = [t for t in fast if _ASCII_UNSAFE_RE.search(t) is None]
    if len(fast) < 2:
        return _assemble([_tokenize_cached(t, scheme) for t in uniq], which)
    fast_set = set(fast)
    slow = [t for t in uniq if t not in fast_set]
    joined = _SEP.join(fast)
    if scheme == "lower-wordpunct":
        joined = joined.lower()
    return _joined_ids(
        _WORDPUNCT_ASCII_RE.findall(joined),
        fast,
        slow,
        [_tokenize_cached(t, scheme) for t in slow],
        uniq,
        which,
    )


def _joined_ids(
    flat: list[str],
    fast: list[str],
    slow: list[str],
    slow_tokens: list[Sequence[str]],
    uniq: list[str],
    which: np.ndarray,
    drop: str | None = None,
) -> TokenIds:
    """Ids from one split of the ``fast`` texts joined by ``_SEP`` plus per-text ``slow`` ones.

    ``flat`` holds every token of the joined string, each separator as a token of its own,
    and, if ``drop`` is given, tokens equal to it that are removed.
    """
    vocab = tuple(sorted(set(chain(flat, chain.from_iterable(slow_tokens)))))
    lookup = {tok: i for i, tok in enumerate(vocab)}
    flat_ids = np.fromiter(map(lookup.__getitem__, flat), dtype=np.int64, count=len(flat))
    if drop is not None and drop in lookup:
        flat_ids = flat_ids[flat_ids != lookup[drop]]
    # No fast text holds the separator, so every separator token is a boundary.
    is_sep = flat_ids == lookup[_SEP]
    bounds = np.concatenate(([-1], np.flatnonzero(is_sep), [len(flat_ids)]))
    fast_len = np.diff(bounds) - 1
    slow_len = np.fromiter(map(len, slow_tokens), dtype=np.int64, count=len(slow_tokens))
    slow_ids = np.fromiter(
        map(lookup.__getitem__, chain.from_iterable(slow_tokens)),
        dtype=np.int64,
        count=int(slow_len.sum()),
    )
    # Block order: fast texts, then slow texts; map each distinct text to its block slot.
    slot = {t: i for i, t in enumerate(chain(fast, slow))}
    u_slot = np.fromiter(map(slot.__getitem__, uniq), dtype=np.int64, count=len(uniq))
    block_ids = np.concatenate((flat_ids[~is_sep], slow_ids))
    block_len = np.concatenate((fast_len, slow_len))
    return _gather(block_ids, block_len, u_slot[which], vocab)


def radcliq_token_ids(texts: Sequence[str]) -> TokenIds:
    """Like :func:`token_ids` with :func:`radcliq_tokens` as the tokenizer.

    Args:
        texts: Raw report texts.

    Returns:
        The ids, per-text lengths and sorted vocabulary.
    """
    uniq, which = _distinct(texts)
    fast = [t for t in uniq if _SEP not in t]
    if len(fast) < 2:
        return _assemble([radcliq_tokens(t) for t in uniq], which)
    fast_set = set(fast)
    slow = [t for t in uniq if t not in fast_set]
    # One split for all texts: the spaces around each separator keep it a token of its own
    # and stop lowercasing's final-sigma context at text boundaries, as per text.
    joined = f" {_SEP} ".join(t.lower() for t in fast).replace(".", " .")
    return _joined_ids(
        joined.split(" "), fast, slow, [radcliq_tokens(t) for t in slow], uniq, which, drop=""
    )
