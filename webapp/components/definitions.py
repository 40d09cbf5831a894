"""The ReXVal category definitions panel of the rating screen, one keystroke away.

A Streamlit components-v2 element (rendered in the page, no iframe; ``definitions/``): a
"Definitions" button for the header and a floating, non-modal panel with the six error
categories (a one-line definition and a short example each, from
:mod:`backend.services.annotation.definitions`) and what makes an error clinically significant.
``?``
opens or closes it from anywhere on the page except a text field, Esc closes it; it works in
the browser alone (no rerun, no request), so the pair on screen, the grid's state and the
focus are kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from radconcord.backend.services.annotation.definitions import DEFINITIONS, SIGNIFICANCE_NOTE

NAME = "radconcord_definitions"
KEY = "rc_definitions"
TITLE = "Error categories (ReXVal)"
_ASSETS = Path(__file__).resolve().parent / "definitions"
JS = (_ASSETS / "definitions.js").read_text(encoding="utf-8")
CSS = (_ASSETS / "definitions.css").read_text(encoding="utf-8")

_component = st.components.v2.component(NAME, js=JS, css=CSS)


def definitions_data() -> dict[str, Any]:
    """What the panel's JavaScript gets: the title, the six definitions, the significance."""
    return {
        "title": TITLE,
        "definitions": [
            {"category": d.category, "name": d.name, "definition": d.definition,
             "example": d.example}
            for d in DEFINITIONS
        ],
        "significance": SIGNIFICANCE_NOTE,
    }


def definitions_button() -> None:
    """Draw the "Definitions" button (and its panel) where it is called.

    Call it on every run of the rating page from the same place, with no pair in its key, so
    the element stays mounted from pair to pair (an open panel stays open).
    """
    _component(key=KEY, data=definitions_data(), width="stretch", height="content")
