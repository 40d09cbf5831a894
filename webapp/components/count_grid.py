"""The ReXVal count grid: six error categories x clinically significant / insignificant."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import streamlit as st

from backend.services.types import CATEGORIES

MAX_COUNT = 99
# Label column, then the two count columns: wide enough for Streamlit to show +/- steppers.
WEIGHTS = (2.0, 1.0, 1.0)
SIGNIFICANCE = ((True, "Clinically significant"), (False, "Clinically insignificant"))
NOT_SAVED = "Not saved"


def cell_key(opaque_id: str, category: int, significant: bool) -> str:
    """Widget key of one grid cell; keyed by pair so two pairs never share a widget value."""
    return f"count-{opaque_id}-{category}-{'sig' if significant else 'insig'}"


def count_grid(
    opaque_id: str,
    counts: Mapping[tuple[int, bool], int],
    *,
    on_change: Callable[[str, int, bool], None],
    disabled: bool = False,
    unsaved: Mapping[tuple[int, bool], int] | None = None,
) -> None:
    """Draw the grid with one number input (with +/- steppers) per cell.

    Every run sets each cell from ``counts`` (what the service has stored) before the widget
    is created, so a reload shows exactly what was saved; a cell whose save failed because
    the database was busy shows the rater's value from ``unsaved`` instead, marked
    "Not saved", so the count is never lost from the screen before it is written.

    Args:
        opaque_id: The pair being rated.
        counts: Saved counts by (category, significant); missing cells are 0.
        on_change: Called as ``on_change(opaque_id, category, significant)`` when a cell
            changes; it reads the new value from ``st.session_state[cell_key(...)]``.
        disabled: Draw the grid read-only.
        unsaved: Values entered but not yet stored, by (category, significant).
    """
    unsaved = unsaved or {}
    head = st.columns(WEIGHTS, vertical_alignment="bottom")
    head[0].markdown("**Error category**")
    for col, (_, label) in zip(head[1:], SIGNIFICANCE, strict=True):
        col.markdown(f"**{label}**")
    for category, label in CATEGORIES.items():
        row = st.columns(WEIGHTS, vertical_alignment="center")
        # "1\\." keeps markdown from turning the label into a numbered list.
        row[0].markdown(f"**{category}\\.** {label}")
        for col, (significant, sig_label) in zip(row[1:], SIGNIFICANCE, strict=True):
            key = cell_key(opaque_id, category, significant)
            pending = unsaved.get((category, significant))
            stored = int(counts.get((category, significant), 0))
            st.session_state[key] = int(pending) if pending is not None else stored
            col.number_input(
                f"{label} ({sig_label.lower()})",
                min_value=0,
                max_value=MAX_COUNT,
                step=1,
                key=key,
                label_visibility="collapsed",
                on_change=on_change,
                args=(opaque_id, category, significant),
                disabled=disabled,
            )
            if pending is not None:
                col.markdown(f":red[:material/sync_problem: **{NOT_SAVED}**] "
                             f":gray[(saved: {stored})]")
