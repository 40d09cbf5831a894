"""Fixtures for the Streamlit AppTest page tests: a temporary SQLite study database.

Each test gets its own data folder and database (``RADCONCORD_DATA_DIR``/``DATABASE_URL``
set with monkeypatch before the app starts), holding one admin, two raters and a small study
of three cases (one with a PNG image) assigned to both raters.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.study_admin import assignment
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput, ImageInput
from radconcord.db.session import Database

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "webapp" / "app.py"
PAGES = REPO / "webapp" / "views"
STUDY = "Page test study"
PASSWORDS = {"boss": "boss-password-1", "rita": "rita-password-1", "ravi": "ravi-password-1"}
# A source label that must never reach a rater's screen.
SECRET_SOURCE = "generator-xyz-secret"

CASES = [
    ("case-a", "Heart size is normal. No focal consolidation. No pleural effusion.",
     "Mild cardiomegaly. No pleural effusion."),
    ("case-b", "Small left pleural effusion. Lungs otherwise clear.",
     "Lungs are clear. No effusion."),
    ("case-c", "Stable right upper lobe nodule compared with prior study.",
     "Right upper lobe nodule."),
]


@dataclass
class StudyEnv:
    """What a page test needs: the database and actors of the seeded study."""

    db: Database
    admin: Actor
    rater: Actor
    other_rater: Actor
    study: str
    data_dir: Path
    passwords: dict[str, str]
    secret_source: str


def _actor(info: auth.UserInfo) -> Actor:
    return Actor(user_id=info.user_id, username=info.username, role=info.role)


def _build_study(data: Path, src: Path) -> tuple[Actor, Actor, Actor]:
    db = Database(f"sqlite:///{data / 'pages.db'}")
    system = Actor.system()
    admin = _actor(auth.create_user(db, system, username="boss", password=PASSWORDS["boss"],
                                    role="admin"))
    rater = _actor(auth.create_user(db, system, username="rita", password=PASSWORDS["rita"],
                                    role="rater"))
    other = _actor(auth.create_user(db, system, username="ravi", password=PASSWORDS["ravi"],
                                    role="rater"))
    src.mkdir()
    # A small synthetic radiograph-like gradient (8-bit grey PNG).
    yy, xx = np.mgrid[0:96, 0:80]
    Image.fromarray(((xx + yy) * 255 // (96 + 80)).astype(np.uint8)).save(src / "a_pa.png")
    cases = [
        CaseInput(case_id=cid, reference=ref,
                  candidates=[CandidateInput(text=cand, source=SECRET_SOURCE)],
                  images=[ImageInput(path=src / "a_pa.png", view="PA")] if cid == "case-a"
                  else [])
        for cid, ref, cand in CASES
    ]
    imports.import_cases(db, admin, study_name=STUDY, cases=cases)
    assignment.assign_raters(db, admin, study_name=STUDY, rater_usernames=["rita", "ravi"],
                             raters_per_pair=2, seed=7)
    db.dispose()  # closing the last connection checkpoints the WAL into the file
    return admin, rater, other


@pytest.fixture(scope="session")
def _study_template(tmp_path_factory: pytest.TempPathFactory
                    ) -> tuple[Path, tuple[Actor, Actor, Actor]]:
    # Built once (migrations, password hashing, image import take seconds); each test gets a
    # copy of the folder, so tests never share a database file.
    root = tmp_path_factory.mktemp("pages-template")
    data = root / "data"
    mp = pytest.MonkeyPatch()
    mp.setenv("RADCONCORD_DATA_DIR", str(data))
    try:
        actors = _build_study(data, root / "src")
    finally:
        mp.undo()
    return data, actors


@pytest.fixture
def study_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _study_template) -> StudyEnv:
    """A fresh copy of a database with users, one imported study and its assignment."""
    template, (admin, rater, other) = _study_template
    data = tmp_path / "data"
    shutil.copytree(template, data)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{data / 'pages.db'}")
    monkeypatch.setenv("RADCONCORD_SEED_DEMO", "0")
    db = Database()
    yield StudyEnv(db=db, admin=admin, rater=rater, other_rater=other, study=STUDY,
                   data_dir=data, passwords=dict(PASSWORDS), secret_source=SECRET_SOURCE)
    db.dispose()


@pytest.fixture
def make_app() -> Callable[..., AppTest]:
    """Build and run the app as ``actor`` (None: logged out) with optional query params."""

    def _make(actor: Actor | None = None, *, script: Path = APP,
              params: dict[str, str] | None = None) -> AppTest:
        at = AppTest.from_file(str(script), default_timeout=60)
        if actor is not None:
            at.session_state["actor"] = actor
        for key, value in (params or {}).items():
            at.query_params[key] = value
        return at.run()

    return _make


def _all_text(at: AppTest) -> str:
    parts: list[str] = []
    for group in (at.markdown, at.caption, at.title, at.header, at.subheader, at.success,
                  at.info, at.warning, at.error, at.toast):
        parts.extend(str(el.value) for el in group)
    return "\n".join(parts)


@pytest.fixture
def all_text() -> Callable[[AppTest], str]:
    """Every markdown/caption/alert/title text a run drew, joined (for content checks)."""
    return _all_text
