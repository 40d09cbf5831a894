"""Shared resources and per-browser-session state of the web app.

* ``get_db()`` returns one :class:`db.session.Database` per database URL and process
  (``st.cache_resource``). A ``Database`` holds an engine and a session factory, both
  thread-safe; services open their own short session per action, so no SQLAlchemy session is
  ever kept in ``st.session_state``.
* The logged-in :class:`~backend.services.types.Actor` (a frozen dataclass) is the only thing
  the app keeps about the user in ``st.session_state``.
* Demo seeding: the first time the app opens a database that has no users, it calls
  ``backend.services.seed.seed_demo`` so a fresh install opens on the demo study. This is on
  by default and is switched off with the environment variable ``RADCONCORD_SEED_DEMO=0``
  (read here, never written).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
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


def current_actor() -> Actor | None:
    """The logged-in user of this browser session, or ``None``."""
    actor = st.session_state.get(ACTOR_KEY)
    return actor if isinstance(actor, Actor) else None


def login(actor: Actor) -> None:
    """Remember ``actor`` as the logged-in user of this browser session."""
    st.session_state[ACTOR_KEY] = actor


def logout() -> None:
    """Forget the user and everything this browser session kept."""
    for key in list(st.session_state.keys()):
        del st.session_state[key]


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
