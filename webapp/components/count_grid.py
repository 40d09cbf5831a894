"""The ReXVal count grid: six error categories x clinically significant / insignificant."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import streamlit as st

from backend.services.types import CATEGORIES

MAX_COUNT = 99
# Label column, then the two count columns: wide enough for Streamlit to show +/- steppers.
WEIGHTS = (2.0, 1.0, 1.0)
SIGNIFICANCE = ((True, "Clinically significant"), (False, "Clinically insignificant"))


def cell_key(opaque_id: str, category: int, significant: bool) -> str:
    """Widget key of one grid cell; keyed by pair so two pairs never share a widget value."""
    return f"count-{opaque_id}-{category}-{'sig' if significant else 'insig'}"


def count_grid(
    opaque_id: str,
    counts: Mapping[tuple[int, bool], int],
    *,
    on_change: Callable[[str, int, bool], None],
    disabled: bool = False,
) -> None:
    """Draw the grid with one number input (with +/- steppers) per cell.

    Every run sets each cell from ``counts`` (what the service has stored) before the widget
    is created, so a reload or a failed save always shows exactly what was saved.

    Args:
        opaque_id: The pair being rated.
        counts: Saved counts by (category, significant); missing cells are 0.
        on_change: Called as ``on_change(opaque_id, category, significant)`` when a cell
            changes; it reads the new value from ``st.session_state[cell_key(...)]``.
        disabled: Draw the grid read-only.
    """
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
            st.session_state[key] = int(counts.get((category, significant), 0))
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
