"""The real server (uvicorn + ``webapp/server.py``) against oversized request bodies.

A probe posted 1.5 GB to ``/_rc/session`` (no login needed) and the app's resident memory
grew from 0.43 to 3.48 GB: the body was read whole before the 512-byte cut. Here a 100 MB body,
announced by ``Content-Length`` and then again chunked with no length, must be answered 413
while the server's RSS grows by less than 50 MB (the cap is 64 KB, so anything near 100 MB
means the body was buffered).

No browser: these are raw sockets against the process the e2e fixture starts.
"""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import psutil
import pytest

from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from tests.e2e.conftest import start_server

BODY_MB = 100
RSS_GROWTH_LIMIT = 50 * 2**20
CHUNK = b"x" * 2**20


def _server_process(data) -> psutil.Process:
    return psutil.Process(int((data / "streamlit.pid").read_text()))


def _cookie(data) -> str:
    """A live session of a rater, made in the server's own database (no browser needed)."""
    db = Database(f"sqlite:///{data / 'e2e.db'}")
    try:
        auth.create_user(db, Actor.system(), username="prober", password="prober-password",
                         role="rater")
        actor = auth.authenticate(db, username="prober", password="prober-password")
        token = sessions.exchange_ticket(db, sessions.create_session(db, actor).ticket).token
    finally:
        db.dispose()
    return token


def _post(url: str, path: str, *, chunked: bool, cookie: str) -> tuple[int, dict]:
    """POST a 100 MB body, sending as much as the server lets us; return its answer."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    head = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", "X-RadConcord: 1",
            "Content-Type: application/json", f"Cookie: radconcord_session={cookie}"]
    head.append("Transfer-Encoding: chunked" if chunked
                else f"Content-Length: {BODY_MB * 2**20}")
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        try:
            for _ in range(BODY_MB):
                if chunked:
                    sock.sendall(f"{len(CHUNK):x}\r\n".encode() + CHUNK + b"\r\n")
                else:
                    sock.sendall(CHUNK)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed: what we want
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply) < _expected_length(reply):
            try:
                got = sock.recv(65536)
            except ConnectionResetError:
                break
            if not got:
                break
            reply += got
    finally:
        sock.close()
    status = int(reply.split(b" ", 2)[1])
    body = reply.split(b"\r\n\r\n", 1)[1]
    return status, json.loads(body) if body else {}


def _expected_length(reply: bytes) -> int:
    head, _, _ = reply.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(head) + 4 + int(line.split(b":", 1)[1])
    return 0


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    with start_server(tmp_path_factory.mktemp("limits")) as (url, data):
        yield url, _server_process(data), _cookie(data)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("route", ["/_rc/session", "/_rc/api/rating/counts",
                                   "/_rc/api/activity", "/_rc/api/error-records/add"])
def test_a_100_mb_body_gets_413_and_the_server_does_not_hold_it(running, route, chunked):
    url, proc, cookie = running
    before = proc.memory_info().rss
    status, body = _post(url, route, chunked=chunked, cookie=cookie)
    # Python hands freed memory back lazily: read RSS once the answer is in, not later.
    after = proc.memory_info().rss
    assert status == 413, body
    assert body["reason"] == "too_large" and "over" in body["message"]
    assert after - before < RSS_GROWTH_LIMIT, (
        f"RSS grew by {(after - before) / 2**20:.1f} MB on {route} ({chunked=})")


def test_the_server_still_answers_after_the_oversized_posts(running):
    url, _, _ = running
    deadline = time.monotonic() + 10
    while True:
        parts = urlsplit(url)
        with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
            sock.sendall(f"GET /_stcore/health HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                         "Connection: close\r\n\r\n".encode())
            reply = sock.recv(4096)
        if reply.startswith(b"HTTP/1.1 200"):
            break
        assert time.monotonic() < deadline, reply
