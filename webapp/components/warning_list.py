"""A list of warnings that stays readable when it is long.

A few warnings are shown as boxes; more as one box that says how many, with the list folded
under it in a copyable block (the published RadPref files give 18 warnings about one case,
and an export of a half-rated study one per comparison left out: as boxes they push the
result off the screen).
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

#: Up to this many warnings are shown one box each.
MAX_BOXES = 3


def show_warnings(warnings: Sequence[str], *, summary: str) -> None:
    """Draw ``warnings``: each as a box, or one box ``"<n> warnings: <summary>"`` and the list
    in an expander "The <n> warnings" when there are more than :data:`MAX_BOXES`.

    Args:
        warnings: The messages, in the order to list them.
        summary: What the warnings have in common, after the count (e.g. "each names
            something kept as it is in the files").
    """
    if len(warnings) <= MAX_BOXES:
        for warning in warnings:
            st.warning(warning)
        return
    st.warning(f"{len(warnings)} warnings: {summary}.")
    with st.expander(f"The {len(warnings)} warnings"):
        st.code("\n".join(warnings), language=None, wrap_lines=True)
