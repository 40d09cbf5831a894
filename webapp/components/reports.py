"""The two report texts, side by side, labelled by role only (never by their source)."""

from __future__ import annotations

import html

import streamlit as st

from radconcord.webapp.components.diff import marked_html

# No fixed height: a report of up to ~120 words shows whole at 1280x800 without an inner
# scroll bar, with the whole count grid under it (a compact font that follows the window
# height: 0.8rem at 800 px, 0.95rem from about 950 px; the box grows with the text). Only a
# very long report (past 75% of the window) scrolls inside its box, so the grid is never
# pushed out of reach.
_BOX = (
    '<div class="rc-report" style="white-space: pre-wrap;'
    ' font-size: clamp(0.8rem, 1.6vh, 0.95rem);'
    ' line-height: 1.38; padding: 0.45rem 0.6rem; border-radius: 0.5rem;'
    ' border: 1px solid {border}; background: {background}; min-height: 4rem;'
    ' max-height: {max_height}; overflow-y: auto;">{text}</div>'
)
HIGHLIGHT_NOTE = "Marked: words that differ between the two reports."


def _box(label: str, body_html: str, *, border: str, background: str, max_height: str) -> None:
    st.markdown(f"**{label}**")
    # Line breaks as character references: a blank line inside the box would end the HTML
    # block for the markdown parser and the rest of the report would be read as markdown.
    st.markdown(
        _BOX.format(text=body_html.replace("\n", "&#10;"), border=border, background=background,
                    max_height=max_height),
        unsafe_allow_html=True,
    )


def report_pair(reference_text: str, candidate_text: str, *, tall: bool = False,
                highlight: bool = False) -> None:
    """Draw the reference and the candidate report next to each other.

    Args:
        reference_text: The reference report.
        candidate_text: The candidate report.
        tall: No image beside them (the boxes may use more of the window).
        highlight: Mark the words that differ between the two reports (a per-study choice,
            off by default: marks may steer the rater's eye).
    """
    if highlight:
        from radconcord.backend.analysis.disagreement import word_diff

        ops = word_diff(reference_text, candidate_text)
        reference_html = marked_html(ops, "reference")
        candidate_html = marked_html(ops, "candidate")
    else:
        # Escaped and shown verbatim: report text is data, not markdown.
        reference_html = html.escape(reference_text)
        candidate_html = html.escape(candidate_text)
    max_height = "85vh" if tall else "75vh"
    left, right = st.columns(2, gap="medium")
    with left:
        _box("Reference report", reference_html, border="#9bb7c4", background="#f3f8fa",
             max_height=max_height)
    with right:
        _box("Candidate report", candidate_html, border="#c9b28a", background="#fbf7ef",
             max_height=max_height)
    if highlight:
        st.caption(HIGHLIGHT_NOTE)
