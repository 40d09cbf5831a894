"""AppTest: the rating page of a per-error records study draws the records panel with the
candidate, the reference's sentences, the rater's own records and the routes (never another
rater's records, a source or a database id of the pair); a counts study draws no panel.
Behaviour in a browser: tests/e2e/test_error_records_browser.py."""

from __future__ import annotations

import json

from radconcord.backend.services.annotation import error_records, rating
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.types import Actor
from radconcord.webapp.components.error_records import panel_key


def _panel(at, opaque_id):
    for element in at.get("bidi_component"):
        if element.proto.component_name == "radconcord_error_records" and \
                element.proto.id.endswith(panel_key(opaque_id)):
            return json.loads(element.proto.json), element.proto.js_content
    return None


def test_the_panel_gets_the_texts_sentences_and_only_the_raters_records(study_env, make_app):
    study_settings.update_study_settings(study_env.db, Actor.system(),
                                         study_name=study_env.study,
                                         annotation_mode="error_records")
    first = rating.rater_queue(study_env.db, study_env.rater, study_name=study_env.study)[0]
    view = rating.get_pair(study_env.db, study_env.rater, opaque_id=first.opaque_id)
    mine = error_records.add_record(study_env.db, study_env.rater, opaque_id=first.opaque_id,
                                    kind="span", category=1, significant=True,
                                    candidate_start=0, candidate_end=4, note="mine")
    # The other rater's record of the same pair must not reach this rater's page.
    error_records.add_record(study_env.db, study_env.other_rater, opaque_id=first.opaque_id,
                             kind="span", category=5, significant=False,
                             candidate_start=0, candidate_end=4, note="theirs")
    at = make_app(study_env.rater, params={"pair": first.opaque_id})
    assert not at.exception
    data, js = _panel(at, first.opaque_id)
    assert "export default function errorRecords" in js
    assert data["pair"] == first.opaque_id and data["version"] == mine.version
    assert data["url"] == "/_rc/api/error-records"
    assert data["candidate"] == view.candidate_text
    ref = view.reference_text
    assert [s["text"] for s in data["sentences"]] == [
        ref[a:b] for a, b in error_records.reference_sentences(ref)]
    assert data["sentences"] and data["sentences"][0]["start"] == 0
    assert [(r["category"], r["note"]) for r in data["records"]] == [(1, "mine")]
    assert data["read_only"] is False
    assert [c["category"] for c in data["categories"]] == [1, 2, 3, 4, 5, 6]
    # Why a category does not fit the kind, in the service's words (issue 24).
    assert data["refusals"] == {
        kind: {str(c): why for c, why in reasons.items()}
        for kind, reasons in error_records.category_refusals().items()}
    assert data["refusals"]["span"]["2"].startswith(
        "category 2 is an omission: press O on a reference sentence")
    assert set(data["refusals"]["omission"]) == {"1", "3", "4", "5"}
    raw = json.dumps(data)
    assert "theirs" not in raw and study_env.secret_source not in raw
    assert "pair_id" not in raw and "rater" not in raw


def test_a_counts_study_draws_no_panel(study_env, make_app):
    first = rating.rater_queue(study_env.db, study_env.rater, study_name=study_env.study)[0]
    at = make_app(study_env.rater, params={"pair": first.opaque_id})
    assert not at.exception
    assert _panel(at, first.opaque_id) is None
