"""AppTest: an unexpected exception shows a reference id, never a traceback or a server path.

The router (``webapp/app.py``) wraps every page; ``webapp/server.py`` adds the same boundary
for fragments and callbacks through ``st.App(on_script_error=...)``, checked in chromium by
``tests/e2e/test_accounts_browser.py``.
"""

from __future__ import annotations

import logging
import re
import sqlite3

from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin import studies

SECRET_PATH = "/srv/radconcord/secret/location/db.py"
REFERENCE = re.compile(r"Something went wrong \(reference ([0-9A-F]{8})\)")


def _boom(*_args, **_kwargs):
    raise RuntimeError(f"disk I/O error in {SECRET_PATH}")


def test_a_page_exception_shows_a_reference_and_logs_the_details(study_env, make_app,
                                                                 all_text, monkeypatch,
                                                                 caplog):
    monkeypatch.setattr(studies, "list_studies", _boom)
    caplog.set_level(logging.ERROR, logger="radconcord.webapp.state")
    at = make_app(study_env.admin)
    assert not at.exception  # no Streamlit exception box (it can hold a traceback)
    text = all_text(at)
    match = REFERENCE.search(text)
    assert match is not None
    assert SECRET_PATH not in text and "Traceback" not in text and "RuntimeError" not in text
    # The log has the reference and the whole story.
    [record] = [r for r in caplog.records if match.group(1) in r.getMessage()]
    assert record.exc_info is not None and SECRET_PATH in str(record.exc_info[1])
    # The frame of the app (navigation, logout) is still there.
    assert at.button(key="logout") is not None


def test_a_database_error_on_the_rating_page_shows_only_a_reference(study_env, make_app,
                                                                    all_text, monkeypatch):
    def locked(*_args, **_kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(rating, "rater_studies", locked)
    at = make_app(study_env.rater)
    assert not at.exception
    assert REFERENCE.search(all_text(at))
    assert "OperationalError" not in all_text(at)
