"""The image viewers: the canvas viewer's data (films frontal first, their pixel routes, the
pair key), and the burned-in warning drawn beside the image for the admin only."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from radconcord.backend.services.annotation.images import BURNED_IN_NOTE


def _viewer_data(at) -> dict | None:
    """The data the canvas viewer got on the last run (None: not drawn)."""
    for element in at.get("bidi_component"):
        if element.proto.component_name == "radconcord_film_viewer":
            return json.loads(element.proto.json)
    return None


def _viewer_script(is_admin: bool, burned_in: bool, with_images: bool) -> None:
    from types import SimpleNamespace

    from radconcord.backend.services.annotation import images as image_service
    from radconcord.webapp.components import image_viewer

    # The service's own rule (admins only) with a stand-in database: the panel must pass the
    # actor through, and show what comes back beside the films.
    def warnings(db, actor, *, image_ids):
        if not (burned_in and actor.is_admin):
            return {}
        return {image_ids[0]: image_service.BURNED_IN_NOTE}

    real = image_service.image_warnings
    image_service.image_warnings = warnings
    try:
        refs = [(12, "LATERAL", "png"), (11, "PA", "dicom")] if with_images else []
        image_viewer.viewer_panel(None, SimpleNamespace(is_admin=is_admin), refs,
                                  pair_key="pair-abc")
    finally:
        image_service.image_warnings = real  # the test process goes on with the real one


def test_the_viewer_gets_the_films_frontal_first_and_their_pixel_routes():
    at = AppTest.from_function(_viewer_script, args=(False, True, True),
                               default_timeout=30).run()
    assert not at.exception
    data = _viewer_data(at)
    assert data == {"pair_key": "pair-abc", "images": [
        {"image_id": 11, "caption": "PA (DICOM)", "url": "/_rc/api/images/11/pixels"},
        {"image_id": 12, "caption": "LATERAL (PNG)", "url": "/_rc/api/images/12/pixels"},
    ], "split_owner": None}  # no film/reports split unless the page asks for one (issue 24)
    # A rater never sees the burned-in note, even where the header says so.
    assert not at.warning


def test_the_admin_sees_the_burned_in_note_under_the_viewer():
    at = AppTest.from_function(_viewer_script, args=(True, True, True),
                               default_timeout=30).run()
    assert not at.exception
    assert [w.value for w in at.warning] == [
        f"PA (DICOM): {BURNED_IN_NOTE}"]


def test_no_images_no_viewer():
    at = AppTest.from_function(_viewer_script, args=(False, False, False),
                               default_timeout=30).run()
    assert not at.exception
    assert _viewer_data(at) is None
    assert [i.value for i in at.info] == ["No images for this case."]


def test_a_volume_gets_the_plane_route_and_the_volume_flag():
    """A CT volume beside films: the films keep their pixel routes, the volume (format
    ``volume``) is flagged for the browser's volume pane and gets the plane route."""
    from radconcord.webapp.components.image_viewer import viewer_items

    assert viewer_items([(21, "CT", "volume"), (22, "PA", "png"), (23, None, "volume")]) == [
        {"image_id": 22, "caption": "PA (PNG)", "url": "/_rc/api/images/22/pixels"},
        {"image_id": 21, "volume": True, "caption": "CT volume",
         "url": "/_rc/api/images/21/plane"},
        {"image_id": 23, "volume": True, "caption": "Volume",
         "url": "/_rc/api/images/23/plane"},
    ]
