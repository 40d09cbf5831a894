"""AppTest: the demo (accounts with published passwords) is seeded only on a loopback server.

An empty database gets the demo study when the server listens on 127.0.0.1/localhost/::1
(``scripts/run-app.sh``) and ``RADCONCORD_SEED_DEMO`` is not 0. A server listening on all
interfaces (bare ``streamlit run``, the Dockerfile's 0.0.0.0) starts empty and its login
page tells how to create the first admin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.accounts.seed import DEMO_CT_STUDY, DEMO_STUDY
from radconcord.backend.services.annotation import rating
from radconcord.backend.types import Actor
from radconcord.db.session import Database

APP = Path(__file__).resolve().parents[2] / "webapp" / "app.py"


@pytest.fixture
def server_address() -> Iterator[Callable[[str | None], None]]:
    """Set Streamlit's ``server.address`` for one test (restored afterwards)."""
    before = st_config.get_option("server.address")

    def _set(value: str | None) -> None:
        st_config.set_option("server.address", value)

    yield _set
    st_config.set_option("server.address", before)


def _start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: str) -> tuple[AppTest,
                                                                                Database]:
    data = tmp_path / "data"
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{data / 'seed.db'}")
    monkeypatch.setenv("RADCONCORD_SEED_DEMO", seed)
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    assert not at.exception
    return at, Database(f"sqlite:///{data / 'seed.db'}", migrate=False)


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost", "::1"])
def test_a_loopback_server_opens_on_the_demo_study(tmp_path, monkeypatch, server_address,
                                                   address):
    server_address(address)
    _, db = _start(tmp_path, monkeypatch, "1")
    try:
        names = {u.username for u in auth.list_users(db, Actor.system())}
        assert {"admin", "rater1", "rater2"} <= names
        rater = auth.authenticate(db, username="rater1", password="radconcord-rater1")
        # The chest demo first (a rater's screen opens on it), then the demo CT study.
        assert [s.name for s in rating.rater_studies(db, rater)] == [DEMO_STUDY, DEMO_CT_STUDY]
    finally:
        db.dispose()


@pytest.mark.parametrize("address", [None, "", "0.0.0.0", "::", "10.1.2.3"])
def test_a_server_reachable_from_other_computers_starts_empty(tmp_path, monkeypatch,
                                                              server_address, address):
    server_address(address)
    at, db = _start(tmp_path, monkeypatch, "1")
    try:
        assert auth.list_users(db, Actor.system()) == []
        guidance = "\n".join(w.value for w in at.warning)
        assert "no account yet" in guidance
        assert "python -m backend create-user --role admin" in guidance
    finally:
        db.dispose()


def test_seeding_is_switched_off_with_the_environment_variable(tmp_path, monkeypatch,
                                                               server_address):
    server_address("127.0.0.1")
    _, db = _start(tmp_path, monkeypatch, "0")
    try:
        assert auth.list_users(db, Actor.system()) == []
    finally:
        db.dispose()


def test_the_first_start_queues_the_demo_scoring_once(tmp_path, monkeypatch, server_address):
    """The demo study's offline metrics are queued for the worker of run-app.sh, once."""
    from radconcord.backend import jobs
    from radconcord.backend.services.scores import score_now
    from radconcord.webapp import state

    server_address("127.0.0.1")
    at, db = _start(tmp_path, monkeypatch, "1")
    try:
        (job,) = jobs.list_jobs(db, kind="score")
        assert job.study_name == DEMO_STUDY and job.status == "queued"
        assert job.created_by == score_now.FIRST_START
        assert list(job.metrics) == score_now.offline_families()
        # A restart of the app (a new process: its cached database is gone) queues nothing
        # more, even after the lead cancelled the job.
        jobs.cancel(db, job.id)
        checks = []
        real = score_now.queue_first_scoring
        monkeypatch.setattr(score_now, "queue_first_scoring",
                            lambda *a, **k: checks.append(real(*a, **k)))
        state._database.clear()
        again = AppTest.from_file(str(APP), default_timeout=120).run()
        assert not again.exception
        assert checks == [None]  # it looked, and found the record
        assert [j.id for j in jobs.list_jobs(db)] == [job.id]
    finally:
        db.dispose()


def test_no_demo_means_no_first_start_job(tmp_path, monkeypatch, server_address):
    from radconcord.backend import jobs

    server_address("0.0.0.0")
    _, db = _start(tmp_path, monkeypatch, "1")
    try:
        assert jobs.list_jobs(db) == []
    finally:
        db.dispose()
