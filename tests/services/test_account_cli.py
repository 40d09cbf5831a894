"""``python -m backend`` account commands: create-user (one-time or given password),
reset-password, deactivate, reactivate, list-users; user errors are one line, exit status 2.
"""

from __future__ import annotations

import datetime as dt
import io
import re

import pytest
from sqlalchemy import select

from radconcord.backend.cli import main
from radconcord.backend.services.accounts import auth
from radconcord.backend.types import Actor
from radconcord.db.models import AuthSession
from radconcord.db.session import Database

OTP_LINE = re.compile(r"^  ([a-z2-9]{4}(?:-[a-z2-9]{4}){3})$", re.MULTILINE)


@pytest.fixture
def cli_db(tmp_path, monkeypatch, fast_password_hashing):
    """The database the commands open (``DATABASE_URL``), migrated, with one admin."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    db = Database(url)
    auth.create_user(db, Actor.system(), username="lead", password="lead-password",
                     role="admin")
    yield db
    db.dispose()


def _one_time_password(out: str) -> str:
    found = OTP_LINE.findall(out)
    assert len(found) == 1, out
    return found[0]


def _live_sessions(db, user_id: int) -> int:
    with db.begin() as s:
        return len(s.scalars(select(AuthSession.id).where(
            AuthSession.user_id == user_id, AuthSession.revoked_at.is_(None))).all())


def _add_session(db, user_id: int) -> None:
    with db.begin() as s:
        s.add(AuthSession(user_id=user_id,
                          expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)))


def test_create_user_without_a_password_prints_a_one_time_password(cli_db, capsys,
                                                                   monkeypatch):
    assert main(["create-user", "--username", "rosa", "--role", "rater",
                 "--display-name", "Dr Rosa"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("created rater rosa\n")
    otp = _one_time_password(out)
    actor = auth.authenticate(cli_db, username="rosa", password=otp)
    assert actor is not None and actor.role == "rater"
    assert auth.session_user(cli_db, user_id=actor.user_id).must_change_password

    # A password given on stdin is the owner's own: no change required.
    monkeypatch.setattr("sys.stdin", io.StringIO("chosen-password\n"))
    assert main(["create-user", "--username", "lead2", "--role", "admin",
                 "--password-stdin"]) == 0
    assert capsys.readouterr().out == "created admin lead2\n"
    lead2 = auth.authenticate(cli_db, username="lead2", password="chosen-password")
    assert not auth.session_user(cli_db, user_id=lead2.user_id).must_change_password


def test_reset_deactivate_reactivate_and_list(cli_db, capsys):
    created = auth.create_user(cli_db, Actor.system(), username="rosa",
                               password="rosa-password", role="rater")
    _add_session(cli_db, created.user_id)
    assert main(["reset-password", "ROSA"]) == 0
    out = capsys.readouterr().out
    assert "reset the password of rosa" in out
    otp = _one_time_password(out)
    assert auth.authenticate(cli_db, username="rosa", password="rosa-password") is None
    assert auth.authenticate(cli_db, username="rosa", password=otp) is not None
    assert _live_sessions(cli_db, created.user_id) == 0

    _add_session(cli_db, created.user_id)
    assert main(["deactivate", "rosa"]) == 0
    assert capsys.readouterr().out.startswith("deactivated rosa;")
    assert _live_sessions(cli_db, created.user_id) == 0
    assert auth.authenticate(cli_db, username="rosa", password=otp) is None

    assert main(["list-users"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["username", "role", "active"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["lead", "admin", "yes", "no"], ["rosa", "rater", "no", "yes"]]

    assert main(["reactivate", "rosa"]) == 0
    assert capsys.readouterr().out.startswith("reactivated rosa")
    assert auth.authenticate(cli_db, username="rosa", password=otp) is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["reset-password", "ghost"], "error: no account named 'ghost'"),
        (["deactivate", "ghost"], "error: no account named 'ghost'"),
        (["reactivate", "ghost"], "error: no account named 'ghost'"),
        (["deactivate", "lead"], "error: cannot deactivate 'lead': it is the last active admin"),
        (["create-user", "--username", "lead", "--role", "rater"],
         "error: username: 'lead' is already taken"),
        (["create-user", "--username", "bad name", "--role", "rater"], "error: username: use"),
    ],
)
def test_user_errors_are_one_line_and_change_nothing(cli_db, capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err
    users = auth.list_users(cli_db, Actor.system())
    assert [(u.username, u.active, u.must_change_password) for u in users] == [
        ("lead", True, False)]


def test_create_user_refuses_a_demo_password_on_stdin(cli_db, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("radconcord-rater1\n"))
    assert main(["create-user", "--username", "rosa", "--role", "rater",
                 "--password-stdin"]) == 2
    assert "demo password" in capsys.readouterr().err
    assert [u.username for u in auth.list_users(cli_db, Actor.system())] == ["lead"]
