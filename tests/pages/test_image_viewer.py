"""The image panel: the burned-in warning is drawn beside the image for the admin only."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest


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
