"""The two report texts, side by side, labelled by role only (never by their source)."""

from __future__ import annotations

import html

import streamlit as st

_BOX = (
    '<div class="rc-report" style="white-space: pre-wrap; font-size: 1.02rem; line-height: 1.5;'
    ' padding: 0.75rem 0.9rem; border-radius: 0.5rem; border: 1px solid {border};'
    ' background: {background}; min-height: 6rem;'
    ' max-height: {max_height}; overflow-y: auto;">{text}</div>'
)


def _box(label: str, text: str, *, border: str, background: str, max_height: str) -> None:
    st.markdown(f"**{label}**")
    # Escaped and shown verbatim: report text is data, not markdown.
    st.markdown(
        _BOX.format(text=html.escape(text), border=border, background=background,
                    max_height=max_height),
        unsafe_allow_html=True,
    )


def report_pair(reference_text: str, candidate_text: str, *, tall: bool = False) -> None:
    """Draw the reference and the candidate report next to each other.

    A long report scrolls inside its box, so the count grid below stays near the top.

    Args:
        reference_text: The reference report.
        candidate_text: The candidate report.
        tall: Let the boxes grow to most of the window height (no image beside them).
    """
    max_height = "70vh" if tall else "30vh"
    left, right = st.columns(2, gap="medium")
    with left:
        _box("Reference report", reference_text, border="#9bb7c4", background="#f3f8fa",
             max_height=max_height)
    with right:
        _box("Candidate report", candidate_text, border="#c9b28a", background="#fbf7ef",
             max_height=max_height)
