"""A cheap, exact pre-test for long alternation patterns: can this pattern match this text?

The rule labelers scan short sentences with a dozen long alternations (one per observation).
Python's ``re`` tries every alternative at every word boundary, so most of a sentence's time
goes into patterns that cannot match it. :func:`prefix_gate` reads a pattern's parse tree and
lists every string of ``k`` characters a match can begin with; :class:`GateTable` reads the
``k``-character substrings of a text once for all patterns. A pattern whose prefixes share
none with the text's substrings cannot match it, so its scan can be skipped with no change to
any result.

The gate is conservative: whatever it cannot read exactly (a class such as ``\\w``, ``.``,
back-references, inline flags, a match that may be shorter than ``k``) gives ``None``, "always
scan".
"""

from __future__ import annotations

from typing import Any

__all__ = ["GateTable", "prefix_gate"]

try:  # the stdlib's own regex parser (Python 3.11+ names)
    from re import _constants as _c
    from re import _parser as _p
except ImportError:  # pragma: no cover - older layouts: no gate, every pattern is scanned
    _c = _p = None

_MAX_RANGE = 40  # a wider character range is not worth expanding
_MAX_STRINGS = 4096  # more prefixes than this: no gate


class _Unknown(Exception):
    """The pattern holds something the gate does not read exactly."""


def _charset(items: list[tuple[Any, Any]]) -> list[str]:
    out: list[str] = []
    for op, av in items:
        if op is _c.LITERAL:
            out.append(chr(av))
        elif op is _c.RANGE and av[1] - av[0] <= _MAX_RANGE:
            out.extend(chr(c) for c in range(av[0], av[1] + 1))
        else:  # NEGATE, CATEGORY, a wide range
            raise _Unknown
    return out


def _expand(items: list[tuple[Any, Any]], cur: str, k: int, out: set[str], depth: int) -> None:
    """Add to ``out`` every first-``k``-character string of ``items`` after ``cur``."""
    if depth > 400 or len(out) > _MAX_STRINGS:
        raise _Unknown
    if len(cur) >= k:
        out.add(cur[:k])
        return
    if not items:
        raise _Unknown  # a match can end before k characters
    op, av = items[0]
    rest = items[1:]
    if op is _c.LITERAL:
        _expand(rest, cur + chr(av), k, out, depth + 1)
    elif op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
        # Zero-width: ignoring a condition only widens the set of prefixes.
        _expand(rest, cur, k, out, depth + 1)
    elif op is _c.IN:
        for ch in _charset(av):
            _expand(rest, cur + ch, k, out, depth + 1)
    elif op is _c.SUBPATTERN:
        _group, add_flags, del_flags, sub = av
        if add_flags or del_flags:
            raise _Unknown
        _expand([*sub.data, *rest], cur, k, out, depth + 1)
    elif op is _c.BRANCH:
        for branch in av[1]:
            _expand([*branch.data, *rest], cur, k, out, depth + 1)
    elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
        lo, hi, sub = av
        left = hi if hi is _c.MAXREPEAT else hi - 1
        again = [(op, (max(lo - 1, 0), left, sub))] if left is _c.MAXREPEAT or left > 0 else []
        _expand([*sub.data, *again, *rest], cur, k, out, depth + 1)
        if lo == 0:
            _expand(rest, cur, k, out, depth + 1)
    else:  # ANY, NOT_LITERAL, GROUPREF, atomic groups ...
        raise _Unknown


def prefix_gate(pattern: str, k: int = 3) -> frozenset[str] | None:
    """Every ``k``-character string a match of ``pattern`` can begin with.

    Args:
        pattern: A regular expression, compiled without flags.
        k: Prefix length.

    Returns:
        The prefixes, or ``None`` when they cannot be listed exactly (scan always).
    """
    if _p is None:
        return None
    try:
        parsed = _p.parse(pattern)
        if parsed.state.flags & (_c.SRE_FLAG_IGNORECASE | _c.SRE_FLAG_LOCALE):
            return None  # the prefixes would be of one case only
        out: set[str] = set()
        _expand(list(parsed.data), "", k, out, 0)
    except Exception:  # noqa: BLE001 - _Unknown, deep recursion, a parser change: no gate
        return None
    return frozenset(out)


_last: tuple[str, int, frozenset[tuple[str, ...]]] = ("", 0, frozenset())


def _grams(text: str, k: int) -> frozenset[tuple[str, ...]]:
    """The ``k``-character substrings of ``text``, as tuples of characters.

    Tuples from ``zip`` are built in C, three times faster than slicing in a loop. The last
    text's set is kept: two labelers gating the same sentence build it once. (One tuple is
    swapped in whole, so a thread never reads one text's key with another's set.)
    """
    global _last
    last = _last
    if last[1] == k and last[0] == text:
        return last[2]
    grams = frozenset(zip(*(text[j:] for j in range(k)), strict=False))  # shorter tails end it
    _last = (text, k, grams)
    return grams


class GateTable:
    """Which of many patterns may match a text, from one pass over the text's ``k``-grams.

    Args:
        patterns: Regular expressions (``None`` entries are skipped: never a candidate).
        k: Prefix length; a pattern without an exact ``k``-prefix set is always a candidate.
    """

    __slots__ = ("_always", "_k", "_table")

    def __init__(self, patterns: list[str | None], k: int = 3) -> None:
        self._k = k
        self._always = 0
        table: dict[str, int] = {}
        for i, pattern in enumerate(patterns):
            if pattern is None:
                continue
            prefixes = prefix_gate(pattern, k)
            if prefixes is None:
                self._always |= 1 << i
                continue
            for prefix in prefixes:
                key = tuple(prefix)
                table[key] = table.get(key, 0) | (1 << i)
        self._table = table

    def candidates(self, text: str) -> int:
        """Bit ``i`` set: pattern ``i`` may match ``text`` (clear: it certainly does not)."""
        grams = _grams(text, self._k)
        mask = self._always
        table = self._table
        for gram in table.keys() & grams:
            mask |= table[gram]
        return mask
