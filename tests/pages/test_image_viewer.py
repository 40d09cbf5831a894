"""The image viewers: the canvas viewer's data (films frontal first, their pixel routes, the
pair key), and the burned-in warning drawn beside the image for the admin only."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from backend.services.images import BURNED_IN_NOTE


def _panel_script(show_warnings: bool) -> None:
    import io as _io

    import numpy as _np
    from PIL import Image as _Image

    from webapp.components.image_viewer import image_panel

    buf = _io.BytesIO()
    _Image.fromarray(_np.zeros((8, 8), _np.uint8)).save(buf, format="PNG")
    image_panel(
        [("PA (DICOM)", buf.getvalue()), ("LATERAL (PNG)", buf.getvalue())],
        warnings=["Burned-in annotation: check the image.", None],
        show_warnings=show_warnings,
    )


@pytest.mark.parametrize("show", [True, False])
def test_burned_in_warning_only_when_asked(show):
    at = AppTest.from_function(_panel_script, args=(show,), default_timeout=30).run()
    assert not at.exception
    texts = [w.value for w in at.warning]
    assert texts == (["Burned-in annotation: check the image."] if show else [])


def test_panel_without_warnings_keeps_its_old_call():
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(buf, format="PNG")

    def script(png: bytes) -> None:
        from webapp.components.image_viewer import image_panel

        image_panel([("PA", png), ("LAT", "file missing")])

    at = AppTest.from_function(script, args=(buf.getvalue(),), default_timeout=30).run()
    assert not at.exception
    assert [w.value for w in at.warning] == ["LAT: file missing"]


def _viewer_data(at) -> dict | None:
    """The data the canvas viewer got on the last run (None: not drawn)."""
    for element in at.get("bidi_component"):
        if element.proto.component_name == "radconcord_film_viewer":
            return json.loads(element.proto.json)
    return None


def _viewer_script(is_admin: bool, burned_in: bool, with_images: bool) -> None:
    from types import SimpleNamespace

    from backend.services import images as image_service
    from webapp.components import image_viewer

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
    ]}
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
