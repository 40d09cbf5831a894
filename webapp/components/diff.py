"""Word-level diff of two reports, rendered safely.

Every piece of report text is HTML-escaped before it is wrapped in the highlight spans, so a
report containing markup ("<script>", "**bold**") shows up as literal text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

import streamlit as st

from radconcord.backend.analysis.disagreement import DiffOp

_DEL = '<span style="background:#fbd3d0;text-decoration:line-through;">{}</span>'
_INS = '<span style="background:#cdeccf;">{}</span>'
_BOX = ('<div style="white-space: pre-wrap; line-height: 1.55; padding: 0.7rem 0.9rem;'
        ' border-radius: 0.5rem; border: 1px solid #ccc; min-height: 5rem;">{}</div>')
# The rating screen's optional marks: one neutral colour on both sides. Struck-through red
# and green would tell the rater which words are "wrong"; a mark only says "differs".
_MARK = '<mark class="rc-diff" style="background:#fff0a8;color:inherit;padding:0 1px;">{}</mark>'
SIDES = ("reference", "candidate")


def _check_side(side: str) -> None:
    if side not in SIDES:
        raise ValueError(f"side must be 'reference' or 'candidate', got {side!r}")


def marked_html(ops: Sequence[DiffOp], side: str) -> str:
    """One side's escaped text with the words that differ from the other side marked.

    Whitespace between marked words stays outside the marks, so a marked run reads as words,
    not as a highlighted block. Joined without the marks, the result is the side's text.

    Args:
        ops: ``backend.analysis.disagreement.word_diff(reference, candidate)``.
        side: ``"reference"`` or ``"candidate"``.

    Returns:
        HTML (no enclosing box).

    Raises:
        ValueError: for another ``side``.
    """
    _check_side(side)
    parts: list[str] = []
    for op in ops:
        text = op.a_text if side == "reference" else op.b_text
        if not text:
            continue
        if op.op == "equal":
            parts.append(html.escape(text))
            continue
        # Mark each word; keep the spaces and line breaks between them unmarked.
        for chunk in re.split(r"(\s+)", text):
            if not chunk:
                continue
            parts.append(html.escape(chunk) if chunk.isspace()
                         else _MARK.format(html.escape(chunk)))
    return "".join(parts)


def diff_html(ops: Sequence[DiffOp], side: str) -> str:
    """HTML of one side of the diff: ``"reference"`` marks deletions, ``"candidate"`` insertions.

    Raises:
        ValueError: for another ``side``.
    """
    _check_side(side)
    parts: list[str] = []
    for op in ops:
        text = op.a_text if side == "reference" else op.b_text
        if not text:
            continue
        escaped = html.escape(text)
        if op.op == "equal":
            parts.append(escaped)
        else:
            parts.append((_DEL if side == "reference" else _INS).format(escaped))
    return _BOX.format("".join(parts))


def show_diff(ops: Sequence[DiffOp]) -> None:
    """Draw the reference (deletions struck through) beside the candidate (insertions)."""
    left, right = st.columns(2, gap="medium")
    with left:
        st.markdown("**Reference report**")
        st.markdown(diff_html(ops, "reference"), unsafe_allow_html=True)
    with right:
        st.markdown("**Candidate report**")
        st.markdown(diff_html(ops, "candidate"), unsafe_allow_html=True)
