"""AppTest: the first start on an empty database seeds the demo study unless switched off."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend.services import auth, rating
from backend.services.seed import DEMO_STUDY
from backend.services.types import Actor
from db.session import Database

APP = Path(__file__).resolve().parents[2] / "webapp" / "app.py"


def _start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: str) -> Database:
    data = tmp_path / "data"
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{data / 'seed.db'}")
    monkeypatch.setenv("RADCONCORD_SEED_DEMO", seed)
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    assert not at.exception
    return Database(f"sqlite:///{data / 'seed.db'}", migrate=False)


def test_an_empty_database_opens_on_the_demo_study(tmp_path, monkeypatch):
    db = _start(tmp_path, monkeypatch, "1")
    try:
        names = {u.username for u in auth.list_users(db, Actor.system())}
        assert {"admin", "rater1", "rater2"} <= names
        rater = auth.authenticate(db, username="rater1", password="radconcord-rater1")
        assert [s.name for s in rating.rater_studies(db, rater)] == [DEMO_STUDY]
    finally:
        db.dispose()


def test_seeding_is_switched_off_with_the_environment_variable(tmp_path, monkeypatch):
    db = _start(tmp_path, monkeypatch, "0")
    try:
        assert auth.list_users(db, Actor.system()) == []
    finally:
        db.dispose()
