"""Per-error records on the rating screen: mark the erroneous words of the candidate, or a
sentence of the reference it leaves out, with category, significance and an optional note.

A Streamlit components-v2 element (in the page, no iframe) whose JavaScript
(``errors/error_records.js``) stores each record itself through the JSON routes of
``webapp/api/error_records.py``, with the version of the pair it shows (a stale one is refused
and the stored records are shown). After each stored change it sets the trigger ``saved``,
which reruns the page: the read-only count grid below then shows the counts derived from the
records (``backend/services/annotation/error_records.py``).

Keyboard first, in the words box: Left/Right move the word cursor, Shift+Left/Right extend
the selection, 1-6 pick the category, S marks the error clinically significant and I
insignificant, Enter saves, Delete removes the record under the cursor, O switches to
omissions (Up/Down pick a sentence of the reference), Escape clears. The mouse works too
(drag over words, click a sentence).

Significance has no default: every error starts with none chosen, shown as such, and is
saved only once the rater has pressed S or I for it. S and I set it (they never toggle), and
every save, stored or refused, clears it again, so a choice made for one error can never
reach the next one. A refused save says why in the panel, in the service's words
(:func:`backend.services.annotation.error_records.category_refusal` for a category the kind
cannot carry).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from radconcord.backend.services.annotation import error_records, rating
from radconcord.backend.types import CATEGORIES, Actor
from radconcord.db.session import Database
from radconcord.webapp import api, state
from radconcord.webapp.api import error_records as records_api

_ASSETS = Path(__file__).resolve().parent / "errors"
JS = (_ASSETS / "error_records.js").read_text(encoding="utf-8")
CSS = (_ASSETS / "error_records.css").read_text(encoding="utf-8")

_component = st.components.v2.component("radconcord_error_records", js=JS, css=CSS)


def panel_key(opaque_id: str) -> str:
    """The element key of a pair's panel: a new pair mounts a new panel."""
    return f"error-records-{opaque_id}"


def panel_data(view: rating.RaterPairView, stored: error_records.PairRecords, *,
               base_url_path: str = "") -> dict[str, Any]:
    """What the panel's JavaScript gets: the texts, the sentences, the rater's own records.

    Only the rater's own records travel: no source, score or other rater's answer.
    """
    reference = view.reference_text
    return {
        "pair": view.opaque_id,
        "url": api.url(base_url_path, records_api.ROUTE),
        "version": stored.version,
        "candidate": view.candidate_text,
        "sentences": [{"start": a, "end": b, "text": reference[a:b]}
                      for a, b in error_records.reference_sentences(reference)],
        "records": [records_api.record_json(r) for r in stored.records],
        "read_only": bool(view.read_only),
        "categories": [{"category": c, "label": label} for c, label in CATEGORIES.items()],
        # Why a category does not fit the kind being marked, as the service says it.
        "refusals": {kind: {str(c): why for c, why in reasons.items()}
                     for kind, reasons in error_records.category_refusals().items()},
    }


def error_records_panel(db: Database, actor: Actor, view: rating.RaterPairView) -> None:
    """Draw the records panel of one pair; it saves its records itself.

    Args:
        db: The study database.
        actor: The rater.
        view: The pair as the rating page read it.
    """
    stored = state.call(error_records.list_records, db, actor, opaque_id=view.opaque_id)
    base = str(st.get_option("server.baseUrlPath") or "")
    # ``on_saved_change``: a stored record reruns the page so the grid shows the new counts.
    _component(
        key=panel_key(view.opaque_id),
        data=panel_data(view, stored, base_url_path=base),
        on_saved_change=lambda: None,
        width="stretch",
        height="content",
    )
