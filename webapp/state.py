"""Shared resources and per-browser-session state of the web app.

* ``get_db()`` returns one :class:`db.session.Database` per database URL and process
  (``st.cache_resource``). A ``Database`` holds an engine and a session factory, both
  thread-safe; services open their own short session per action, so no SQLAlchemy session is
  ever kept in ``st.session_state``.
* The logged-in :class:`~backend.services.types.Actor` (a frozen dataclass) is the only thing
  the app keeps about the user in ``st.session_state``.
* "Remember this browser": after a login the app issues a random session token
  (``secrets.token_urlsafe(32)``) and sets it as the ``radconcord_session`` cookie from the
  browser (``SameSite=Strict; Path=/``, a script run through ``st.html``; never in the URL).
  Only the token's sha256 is kept server-side, with the user id and an expiry that slides
  forward by :data:`SESSION_TTL` whenever the session is used. A new browser session (a
  reload, a new tab) reads the cookie with ``st.context.cookies`` and logs the same user back
  in if the token is known, unexpired and the account is still active. The token store is a
  process-wide, lock-protected dict inside ``st.cache_resource`` (the database schema has no
  session table), so **restarting the server logs everybody out**; several server processes
  behind one address do not share it. Logging out deletes the token and clears the cookie.
* Demo seeding: the first time the app opens a database that has no users, it calls
  ``backend.services.seed.seed_demo`` so a fresh install opens on the demo study. This is on
  by default and is switched off with the environment variable ``RADCONCORD_SEED_DEMO=0``
  (read here, never written).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import streamlit as st

from backend import config
from backend.services.errors import ServiceError, require_admin
from backend.services.types import Actor
from db.session import Database

log = logging.getLogger(__name__)

ACTOR_KEY = "actor"
# Query parameters to restore after logging in (a reload starts a new browser session).
RETURN_PARAMS_KEY = "return_query_params"
SEED_ENV = "RADCONCORD_SEED_DEMO"
SESSION_COOKIE = "radconcord_session"
SESSION_TTL = dt.timedelta(hours=12)
# sha256 of this browser session's token (never the token itself), for logout.
TOKEN_HASH_KEY = "session_token_sha256"
# A cookie script waiting to be drawn on the next run (set at login and logout).
COOKIE_SCRIPT_KEY = "session_cookie_script"
# Set by logout: this browser session must not log in again from the cookie it started with.
_LOGGED_OUT_KEY = "logged_out"
# Key of the (hidden) container of the cookie script; CSS class "st-key-<key>".
COOKIE_CONTAINER = "rc_cookie"

T = TypeVar("T")


def seed_demo_enabled() -> bool:
    """Whether an empty database is seeded with the demo study (``RADCONCORD_SEED_DEMO``)."""
    return os.environ.get(SEED_ENV, "1").strip().lower() not in {"0", "false", "no", "off", ""}


def _seed_if_empty(db: Database) -> None:
    # Imported lazily: the seed module reads the bundled demo assets and is only needed once.
    from backend.services import auth, seed

    if auth.list_users(db, Actor.system()):
        return
    log.info("empty database at %s: seeding the demo study", db.url)
    seed.seed_demo(db)


@st.cache_resource(show_spinner=False)
def _database(url: str, seed_demo: bool) -> Database:
    db = Database(url)
    if seed_demo:
        _seed_if_empty(db)
    return db


def get_db() -> Database:
    """The process-wide database for the configured URL (migrated, seeded when enabled)."""
    return _database(config.database_url(), seed_demo_enabled())


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass
class SessionStore:
    """Remembered browser sessions: sha256(token) -> (user id, expiry); thread-safe.

    Streamlit serves every browser session from its own thread, so every access holds the
    lock. Only hashes are stored: a leaked dump of this dict opens no session.
    """

    ttl: dt.timedelta = SESSION_TTL
    _entries: dict[str, tuple[int, dt.datetime]] = field(default_factory=dict)
    # Credential stamp at issue time: a password change invalidates remembered browsers.
    _stamps: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def issue(self, user_id: int, *, stamp: str = "", now: dt.datetime | None = None) -> str:
        """A new random token for ``user_id``; only its hash is kept."""
        token = secrets.token_urlsafe(32)
        now = now or _now()
        with self._lock:
            # Forget expired entries here so the dict cannot grow without bound.
            for digest in [d for d, (_, exp) in self._entries.items() if exp <= now]:
                del self._entries[digest]
                self._stamps.pop(digest, None)
            digest = _sha256(token)
            self._entries[digest] = (user_id, now + self.ttl)
            self._stamps[digest] = stamp
        return token

    def stamp(self, digest: str) -> str | None:
        """The credential stamp the token with this hash was issued under."""
        with self._lock:
            return self._stamps.get(digest)

    def resolve(self, token: str, *, now: dt.datetime | None = None) -> int | None:
        """The user id of a live token (and slide its expiry forward), else ``None``."""
        if not token:
            return None
        return self.touch(_sha256(token), now=now)

    def touch(self, digest: str, *, now: dt.datetime | None = None) -> int | None:
        """Slide the expiry of the token with this hash; its user id, or ``None`` if gone."""
        now = now or _now()
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            user_id, expires = entry
            if expires <= now:
                del self._entries[digest]
                return None
            self._entries[digest] = (user_id, now + self.ttl)
            return user_id

    def revoke(self, digest: str) -> None:
        """Forget the token with this hash (logout)."""
        with self._lock:
            self._entries.pop(digest, None)
            self._stamps.pop(digest, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


@st.cache_resource(show_spinner=False)
def session_store() -> SessionStore:
    """The process-wide store of remembered browser sessions (lost on a server restart)."""
    return SessionStore()


def _cookie_script(value: str, max_age: int) -> str:
    # json.dumps quotes the value for JavaScript; the token is URL-safe base64 anyway.
    return (
        "<script>(function () {"
        f"var c = {json.dumps(SESSION_COOKIE)} + '=' + {json.dumps(value)}"
        f" + '; Max-Age={max_age}; Path=/; SameSite=Strict';"
        "if (window.location.protocol === 'https:') { c += '; Secure'; }"
        "document.cookie = c;"
        "})();</script>"
    )


def draw_cookie_script() -> None:
    """Run a pending cookie change in the browser (call once per run, from the router).

    ``st.html`` with JavaScript is not iframed, so ``document.cookie`` is the app's own
    cookie jar; the element is hidden by CSS in the router.
    """
    script = st.session_state.pop(COOKIE_SCRIPT_KEY, None)
    # The container is drawn on every run, script or not: an element that comes and goes at
    # the top would shift every later element's position, and the browser would show the
    # previous run's widgets (a second count grid) until the new run ends.
    with st.container(key=COOKIE_CONTAINER):
        if script:
            st.html(script, unsafe_allow_javascript=True)


def _account_still_active(user_id: int, digest: str) -> Actor | None:
    """The account's current role if it is active and its password unchanged since the
    token was issued, else ``None``."""
    from backend.services import auth

    found = auth.session_user(get_db(), user_id=user_id)
    if found is None or session_store().stamp(digest) != found.credential_stamp:
        return None
    return found.actor


def _restore_from_cookie() -> Actor | None:
    try:
        token = st.context.cookies.get(SESSION_COOKIE)
    except Exception:  # noqa: BLE001 - no browser context (bare script, AppTest)
        return None
    if not isinstance(token, str) or not token:  # AppTest hands back a stand-in object
        return None
    store = session_store()
    user_id = store.resolve(token)
    digest = _sha256(token)
    actor = None
    if user_id is not None:
        actor = _account_still_active(user_id, digest)
    if actor is None:
        store.revoke(digest)
        st.session_state[COOKIE_SCRIPT_KEY] = _cookie_script("", 0)
        return None
    st.session_state[ACTOR_KEY] = actor
    st.session_state[TOKEN_HASH_KEY] = digest
    # Set the cookie again so its lifetime follows the server-side sliding expiry.
    st.session_state[COOKIE_SCRIPT_KEY] = _cookie_script(
        token, int(store.ttl.total_seconds()))
    log.info("restored the session of %s from its browser cookie", actor.username)
    return actor


def current_actor() -> Actor | None:
    """The logged-in user of this browser session, or ``None``.

    A new browser session with a live "remember this browser" cookie is logged in here.
    """
    actor = st.session_state.get(ACTOR_KEY)
    if isinstance(actor, Actor):
        digest = st.session_state.get(TOKEN_HASH_KEY)
        if digest is not None and session_store().touch(digest) is None:
            # Logged out in another tab, or expired: this tab is logged out too.
            logout()
            return None
        return actor
    if st.session_state.get(_LOGGED_OUT_KEY):
        return None
    return _restore_from_cookie()


def login(actor: Actor) -> None:
    """Remember ``actor`` as the logged-in user of this browser session and this browser."""
    from backend.services import auth

    st.session_state[ACTOR_KEY] = actor
    found = auth.session_user(get_db(), user_id=actor.user_id)
    token = session_store().issue(
        actor.user_id, stamp=found.credential_stamp if found is not None else "")
    st.session_state[TOKEN_HASH_KEY] = _sha256(token)
    st.session_state[COOKIE_SCRIPT_KEY] = _cookie_script(
        token, int(session_store().ttl.total_seconds()))


def logout() -> None:
    """Forget the user, this browser's remembered session and everything the session kept."""
    digest = st.session_state.get(TOKEN_HASH_KEY)
    if digest is not None:
        session_store().revoke(digest)
    for key in list(st.session_state.keys()):
        del st.session_state[key]
    st.session_state[COOKIE_SCRIPT_KEY] = _cookie_script("", 0)
    # This session's cookies were read when it started; never restore from them again.
    st.session_state[_LOGGED_OUT_KEY] = True


def require_actor() -> Actor:
    """The logged-in actor; stops the page with a message when nobody is logged in."""
    actor = current_actor()
    if actor is None:
        st.error("Please log in first.")
        st.stop()
    return actor


def stop_with_error(exc: ServiceError) -> NoReturn:
    """Show a service error to the user and end this run of the page."""
    st.error(str(exc))
    st.stop()
    raise AssertionError("unreachable")  # st.stop raises; this keeps type checkers honest


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call a service; on a :class:`ServiceError` show its message and stop the page."""
    try:
        return fn(*args, **kwargs)
    except ServiceError as exc:
        stop_with_error(exc)


def require_admin_page(actor: Actor) -> None:
    """Stop an admin page for a non-admin with the services' own access error.

    The services behind every admin page check the role again; this only keeps the page from
    drawing its frame (titles, empty forms) for someone who may not use it.
    """
    call(require_admin, actor)
