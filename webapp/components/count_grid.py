"""The ReXVal count grid: six error categories x clinically significant / insignificant.

A Streamlit components-v2 element (rendered in the page, no iframe) whose JavaScript
(``grid/count_grid.js``) saves every change itself through the JSON route
``webapp/api/rating.py`` rather than through a rerun of the page: a click is stored even
when the Streamlit session behind the page has gone, and the grid shows at once when it was
not ("Not saved"; the change is kept in the browser and sent again after the rater logs in).
Saves carry the version of the pair the grid shows; a stale one is refused and the grid
shows the stored counts with "changed in another window, reloaded".

Keyboard first: Tab / Shift+Tab and the arrow keys move between cells, ``+`` / ``-`` change
a count, digits type one; Ctrl+Enter marks the pair done once every change is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import streamlit as st

from radconcord.backend.types import CATEGORIES, Actor
from radconcord.webapp import api
from radconcord.webapp.api import rating as rating_api

MAX_COUNT = 99
SIGNIFICANCE = ((True, "Clinically significant"), (False, "Clinically insignificant"))
NOT_SAVED = "Not saved"
_ASSETS = Path(__file__).resolve().parent / "grid"
JS = (_ASSETS / "count_grid.js").read_text(encoding="utf-8")
CSS = (_ASSETS / "count_grid.css").read_text(encoding="utf-8")

_component = st.components.v2.component("radconcord_count_grid", js=JS, css=CSS)


def cell_label(category: int, significant: bool) -> str:
    """The accessible name of one cell, e.g. "Omission of finding (clinically significant)"."""
    sig_label = dict(SIGNIFICANCE)[bool(significant)]
    return f"{CATEGORIES[int(category)]} ({sig_label.lower()})"


def grid_key(opaque_id: str) -> str:
    """The element key of a pair's grid: a new pair mounts a new grid."""
    return f"count-grid-{opaque_id}"


def grid_data(
    actor: Actor,
    opaque_id: str,
    counts: Mapping[tuple[int, bool], int],
    *,
    version: int,
    read_only: bool = False,
    note: str = "",
    base_url_path: str = "",
) -> dict[str, Any]:
    """What the grid's JavaScript gets: the pair, its stored counts and version, the labels.

    Only the rater's own counts travel: no source, score or other rater's answer.
    """
    return {
        "pair": str(opaque_id),
        "tag": rating_api.grid_tag(actor, str(opaque_id)),
        "version": int(version),
        "counts": rating_api.counts_json(counts),
        "read_only": bool(read_only),
        "note": note,
        "url": api.url(base_url_path, rating_api.ROUTE),
        "rows": [{"category": c, "label": label} for c, label in CATEGORIES.items()],
        "columns": [{"significant": sig, "label": label} for sig, label in SIGNIFICANCE],
    }


def count_grid(
    actor: Actor,
    opaque_id: str,
    counts: Mapping[tuple[int, bool], int],
    *,
    version: int,
    read_only: bool = False,
    note: str = "",
) -> None:
    """Draw the grid for one pair; it saves its changes itself (see the module docstring).

    Args:
        actor: The rater (names the browser's store of unsaved changes, opaquely).
        opaque_id: The pair being rated.
        counts: Stored counts by (category, significant); missing cells are 0.
        version: The stored version of the rater's counts of this pair.
        read_only: Show the counts without letting them change (a closed study).
        note: The status line's text until the first save (how saving works, done-state).
    """
    base = str(st.get_option("server.baseUrlPath") or "")
    _component(
        key=grid_key(opaque_id),
        data=grid_data(actor, opaque_id, counts, version=version, read_only=read_only,
                       note=note, base_url_path=base),
        width="stretch",
        height="content",
    )
