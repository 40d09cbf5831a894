"""Shared resources and per-browser-session state of the web app.

* ``get_db()`` returns one :class:`db.session.Database` per database URL and process
  (``st.cache_resource``). A ``Database`` holds an engine and a session factory, both
  thread-safe; services open their own short session per action, so no SQLAlchemy session is
  ever kept in ``st.session_state``.
* The logged-in :class:`~backend.types.Actor` and the id of its database session
  (an ``auth_sessions`` row, see ``backend/services/accounts/sessions.py``) are the only things the
  app keeps about the user in ``st.session_state``. The row is re-checked on every run of
  the router (:func:`current_actor`) and before every service call (:func:`call`), fragments
  and callbacks included: a logout elsewhere, a deactivation, a password change or expiry
  ends an open tab on its next action.
* "Remember this browser": a login issues a one-time ticket; a small script on the next run
  posts it to the server's cookie route (``webapp/server.py``), which sets the
  ``radconcord_session`` cookie itself: HttpOnly (no script can read it), SameSite=Strict,
  Secure behind TLS. Only the token's sha256 is stored, in the database, so remembered
  browsers survive a restart and are shared by several server processes. A new browser
  session (a reload, a new tab) reads the cookie from the websocket request
  (``st.context.cookies``) and is logged in if its session is still live. Logging out
  revokes the row and clears the cookie through the server's logout route. The routes exist
  only under ``streamlit run webapp/server.py``; with ``webapp/app.py`` alone (AppTest) a
  login lasts for the browser session.
* Demo seeding: the first time the app opens a database that has no users, it seeds the demo
  study with its published passwords, but only when the server listens on loopback only
  (``server.address`` 127.0.0.1, localhost or ::1) and ``RADCONCORD_SEED_DEMO`` is not 0.
  Then (once per demo study: the job row is the record) it queues a score job of the demo
  study's offline metrics for the worker that ``scripts/run-app.sh`` starts with the app.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from radconcord.backend import config
from radconcord.backend.errors import ServiceError, require_admin
from radconcord.backend.services.accounts import sessions
from radconcord.backend.types import Actor
from radconcord.db.session import Database

log = logging.getLogger(__name__)

ACTOR_KEY = "actor"
# The auth_sessions row of this browser session (None for an actor placed by a test).
SESSION_ID_KEY = "auth_session_id"
MUST_CHANGE_KEY = "must_change_password"
# Query parameters to restore after logging in (a reload starts a new browser session).
RETURN_PARAMS_KEY = "return_query_params"
SESSION_COOKIE = "radconcord_session"
SESSION_TTL = sessions.SESSION_TTL
# A cookie script waiting to be drawn on the next run (set at login, restore and logout).
COOKIE_SCRIPT_KEY = "session_cookie_script"
#: Session key: the cookie request drawn in the current run (None: none).
COOKIE_DRAWN_KEY = "session_cookie_drawn"
# Why the last session ended, shown once on the login page.
NOTICE_KEY = "session_notice"
# Set by logout: this browser session must not log in again from the cookie it started with.
_LOGGED_OUT_KEY = "logged_out"
# Key of the (hidden) container of the cookie script; CSS class "st-key-<key>".
COOKIE_CONTAINER = "rc_cookie"
# Paths of the cookie routes under server.baseUrlPath (served by webapp/server.py).
COOKIE_ROUTE = "_rc/session"
REFRESH_ROUTE = "_rc/refresh"
LOGOUT_ROUTE = "_rc/logout"
# Custom header of the cookie requests: a cross-site form cannot send it (CSRF).
CSRF_HEADER = "X-RadConcord"
SESSION_ENDED = "Your session has ended. Please log in again."

T = TypeVar("T")


def seed_demo_enabled() -> bool:
    """Whether an empty database gets the demo study and its published passwords.

    Only when ``RADCONCORD_SEED_DEMO`` allows it and the server is reachable from this
    machine alone: a server listening on all interfaces (bare ``streamlit run``, Docker's
    0.0.0.0) never creates accounts whose passwords are in the README.
    """
    return config.seed_demo_requested() and config.listens_on_loopback_only(
        st.get_option("server.address"))


def _seed_if_empty(db: Database) -> None:
    # Imported lazily: the seed module reads the bundled demo assets and is only needed once.
    from radconcord.backend.services.accounts import seed

    if not sessions.any_account(db):
        log.info("empty database at %s: seeding the demo study", db.url)
        seed.seed_demo(db)
        try:
            # The second demo study, one synthetic CT volume. A failure is logged and the app
            # starts with the chest demo all the same.
            seed.seed_ct_demo(db)
        except Exception:  # noqa: BLE001 - logged; the chest demo is already there
            log.exception("first start: could not seed the demo CT study")
    _queue_first_scoring(db)


def _queue_first_scoring(db: Database) -> None:
    """Queue the demo study's offline metrics once, so its dashboard fills in by itself.

    The worker that ``scripts/run-app.sh`` starts takes the job; the job row records that it
    was queued (see ``backend.services.scores.score_now``). A failure here never keeps the app from
    starting: the dashboard's "Score now" queues the same job.
    """
    from radconcord.backend.services.accounts import seed
    from radconcord.backend.services.scores import score_now

    try:
        score_now.queue_first_scoring(db, seed.DEMO_STUDY)
    except Exception:  # noqa: BLE001 - logged; the app starts all the same
        log.exception("first start: could not queue the demo study's scoring")


@st.cache_resource(show_spinner=False)
def _database(url: str, seed_demo: bool) -> Database:
    db = Database(url)
    if seed_demo:
        _seed_if_empty(db)
    return db


def get_db() -> Database:
    """The process-wide database for the configured URL (migrated, seeded when enabled)."""
    return _database(config.database_url(), seed_demo_enabled())


def route_url(route: str) -> str:
    """The absolute path of a server route, under ``server.baseUrlPath``."""
    base = str(st.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{base}/{route}" if base else f"/{route}"


#: Window event the cookie script sends once the server has answered (new cookie set).
SESSION_EVENT = "radconcord:session"


def _post_script(route: str, body: str = "") -> str:
    # json.dumps quotes the values for JavaScript; the ticket is URL-safe base64 anyway.
    return (
        "<script>(function () {"
        f"fetch({json.dumps(route_url(route))}, {{method: 'POST', credentials: 'same-origin',"
        f" headers: {{'Content-Type': 'text/plain', {json.dumps(CSRF_HEADER)}: '1'}},"
        f" body: {json.dumps(body)}}})"
        # A component that found the session gone (a save refused with 401 while this
        # request was still setting the new cookie) tries again on this event.
        ".then(function (r) { if (r.ok) window.dispatchEvent("
        f"new Event({json.dumps(SESSION_EVENT)})); }})"
        ".catch(function () {});"
        "})();</script>"
    )


def draw_cookie_script() -> None:
    """Run a pending cookie request in the browser (call once per run, from the router).

    ``st.html`` with JavaScript is not iframed, so ``fetch`` runs on the app's own origin
    and the server's ``Set-Cookie`` lands in the app's cookie jar; the element is hidden by
    CSS in the router.
    """
    script = st.session_state.pop(COOKIE_SCRIPT_KEY, None)
    # Kept for this run: a page switch later in the run would drop the element before the
    # browser runs it (switch_page below carries it over).
    st.session_state[COOKIE_DRAWN_KEY] = script
    # The container is drawn on every run, script or not: an element that comes and goes at
    # the top would shift every later element's position, and the browser would show the
    # previous run's widgets (a second count grid) until the new run ends.
    with st.container(key=COOKIE_CONTAINER):
        if script:
            st.html(script, unsafe_allow_javascript=True)


def switch_page(page: Any, **kwargs: Any) -> NoReturn:  # noqa: ANN401
    """``st.switch_page``, keeping a cookie request drawn in this run.

    The switch ends the run and the next one redraws the page, so the browser may never run
    the script element drawn at the top of this run: the login's cookie would never be set
    (the session then ends at the first save). The request is drawn again after the switch;
    if the browser did run it, the second try is refused (a used ticket) and changes nothing.

    Args:
        page: What ``st.switch_page`` takes (a page script path or an ``st.Page``).
        **kwargs: Passed on (``query_params``).
    """
    drawn = st.session_state.get(COOKIE_DRAWN_KEY)
    if drawn and COOKIE_SCRIPT_KEY not in st.session_state:
        st.session_state[COOKIE_SCRIPT_KEY] = drawn
    st.switch_page(page, **kwargs)


def current_client() -> sessions.Client:
    """Where this browser session connects from (see ``sessions.client_from``).

    Without a browser connection (AppTest, a bare script) the client is unknown and never
    counts as this machine.
    """
    try:
        headers = dict(st.context.headers)
        address = st.context.ip_address
    except Exception:  # noqa: BLE001 - no runtime at all
        return sessions.Client(address="unknown", loopback=False)
    if not headers:
        return sessions.Client(address="unknown", loopback=False)
    # st.context reports a loopback peer as None.
    peer = address if isinstance(address, str) and address else "127.0.0.1"
    return sessions.client_from(peer, headers)


def _remember(live: sessions.LiveSession) -> Actor:
    st.session_state[ACTOR_KEY] = live.actor
    st.session_state[SESSION_ID_KEY] = live.session_id
    st.session_state[MUST_CHANGE_KEY] = live.must_change_password
    return live.actor


def _restore_from_cookie() -> Actor | None:
    try:
        token = st.context.cookies.get(SESSION_COOKIE)
    except Exception:  # noqa: BLE001 - no browser context (bare script, AppTest)
        return None
    if not isinstance(token, str) or not token:  # AppTest hands back a stand-in object
        return None
    live = sessions.resolve_token(get_db(), token)
    if live is None:
        # Revoked, expired or unknown: drop the dead cookie, and say why nobody is logged in.
        st.session_state[COOKIE_SCRIPT_KEY] = _post_script(LOGOUT_ROUTE)
        st.session_state[NOTICE_KEY] = SESSION_ENDED
        return None
    # Set the cookie again so its lifetime follows the server-side sliding expiry.
    st.session_state[COOKIE_SCRIPT_KEY] = _post_script(REFRESH_ROUTE)
    log.info("restored the session of %s from its browser cookie", live.actor.username)
    return _remember(live)


def _end_session(notice: str) -> None:
    """Forget the user of this browser session, clear the cookie, keep a notice."""
    session_id = st.session_state.get(SESSION_ID_KEY)
    if session_id is not None:
        sessions.revoke_session(get_db(), session_id, reason="ended")
    for key in list(st.session_state.keys()):
        del st.session_state[key]
    st.session_state[COOKIE_SCRIPT_KEY] = _post_script(LOGOUT_ROUTE)
    # This session's cookies were read when it started; never restore from them again.
    st.session_state[_LOGGED_OUT_KEY] = True
    if notice:
        st.session_state[NOTICE_KEY] = notice


def _recheck() -> Actor | None:
    """The actor of this browser session if its session and account may still act."""
    actor = st.session_state.get(ACTOR_KEY)
    if not isinstance(actor, Actor):
        return None
    live = sessions.check_session(get_db(), st.session_state.get(SESSION_ID_KEY), actor=actor)
    if live is None:
        log.info("session of %s no longer valid: logged out", actor.username)
        _end_session(SESSION_ENDED)
        return None
    return _remember(live)


def current_actor() -> Actor | None:
    """The logged-in user of this browser session, re-checked in the database, or ``None``.

    A new browser session with a live "remember this browser" cookie is logged in here.
    """
    if isinstance(st.session_state.get(ACTOR_KEY), Actor):
        return _recheck()
    if st.session_state.get(_LOGGED_OUT_KEY):
        return None
    return _restore_from_cookie()


def must_change_password() -> bool:
    """Whether the logged-in account must choose a new password before anything else."""
    return bool(st.session_state.get(MUST_CHANGE_KEY))


def current_session_id() -> int | None:
    """The database session of this browser session (to keep it on one's own password
    change)."""
    value = st.session_state.get(SESSION_ID_KEY)
    return value if isinstance(value, int) else None


def login(actor: Actor, client: sessions.Client | None = None) -> None:
    """Start a database session for ``actor`` and have the browser remember it."""
    client = client or current_client()
    issued = sessions.create_session(get_db(), actor, client=client.address)
    st.session_state.pop(_LOGGED_OUT_KEY, None)
    st.session_state.pop(NOTICE_KEY, None)
    st.session_state[ACTOR_KEY] = actor
    st.session_state[SESSION_ID_KEY] = issued.session_id
    st.session_state[COOKIE_SCRIPT_KEY] = _post_script(COOKIE_ROUTE, issued.ticket)


def logout() -> None:
    """End this browser session's database session, forget the user, clear the cookie."""
    session_id = st.session_state.get(SESSION_ID_KEY)
    if session_id is not None:
        sessions.revoke_session(get_db(), session_id, reason="logout")
    _end_session("")


def require_actor() -> Actor:
    """The logged-in actor; stops the page with a message when nobody is logged in."""
    actor = current_actor()
    if actor is None:
        st.error("Please log in first.")
        st.stop()
    return actor


def in_fragment_run() -> bool:
    """Whether this is the body of a run of fragments only (a fragment's timer or one of its
    widgets), not a widget callback, where nothing can be drawn."""
    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is None or not ctx.fragment_ids_this_run:
        return False
    try:  # Streamlit's own record of where the code runs (not public API: guarded)
        from streamlit.runtime.scriptrunner_utils.script_run_context import (
            RunLocation,
            ThreadState,
        )

        return ThreadState.get().run_location is not RunLocation.CALLBACK
    except (ImportError, AttributeError, RuntimeError):
        return False  # st.rerun then, as in a callback: correct, only open to the race


def _reload_page() -> NoReturn:
    """End a fragment run whose session is gone by reloading the page in the browser.

    Not ``st.rerun``: the full run that draws the login page removes the page's fragments,
    and a timer tick of another fragment sent meanwhile makes Streamlit (1.67) finish an
    empty fragment run after it, which blanks the login page in the browser. A reload
    starts a new session on the login page (the dead cookie says why, and is cleared).
    """
    # To the app's root: a logged-out session knows no other page ("Page not found"). The
    # query (e.g. the pair on screen) is kept for the return after the login.
    root = json.dumps(route_url(""))  # "/" or "/<baseUrlPath>/"
    st.html(f"<script>window.location.replace({root} + window.location.search);</script>",
            unsafe_allow_javascript=True)
    st.stop()


def require_live_session() -> Actor:
    """Re-check this browser session before an action; a dead one goes to the login page.

    Works in the page body (``st.rerun`` reruns the whole app on the login page), in
    fragment runs (the browser reloads the page: :func:`_reload_page`) and in widget
    callbacks (``st.rerun`` ends the callback; the run that follows shows the login page).
    """
    if not isinstance(st.session_state.get(ACTOR_KEY), Actor):
        if in_fragment_run():
            _reload_page()
        st.error("Please log in first.")
        st.stop()
    actor = _recheck()
    if actor is None:
        if in_fragment_run():
            _reload_page()
        st.rerun()
        # st.rerun raises inside a script run; outside one, refuse all the same.
        raise ServiceError(SESSION_ENDED)
    return actor


def stop_with_error(exc: ServiceError) -> NoReturn:
    """Show a service error to the user and end this run of the page."""
    st.error(str(exc))
    st.stop()


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call a service for the logged-in user, re-checking the session first.

    On a :class:`ServiceError` show its message and stop the page (or fragment).
    """
    require_live_session()
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


def error_reference() -> str:
    """A short random id that ties a message on screen to a log entry."""
    return secrets.token_hex(4).upper()


def show_unexpected_error(exc: BaseException) -> str:
    """Log an unexpected exception with a reference id and show only the id.

    The error boundary of every page (the router and ``on_script_error``): a rater never
    sees a traceback or a server path, and the study lead finds the details in the log.

    Returns:
        The reference id.
    """
    reference = error_reference()
    log.error("unexpected error (reference %s)", reference, exc_info=exc)
    st.error(f"Something went wrong (reference {reference}). What you saved before is kept; "
             "please try again, and if it happens again give this reference to the study "
             "lead.", icon=":material/error:")
    return reference


def study_to_open(studies: Sequence[T], wanted: str | None) -> T | None:
    """Where a rater's screen starts: the study asked for, else the first one not finished,
    else the first (rating and pairwise studies alike: ``name``, ``resume_opaque_id``)."""
    if not studies:
        return None
    chosen = [s for s in studies if getattr(s, "name", None) == wanted]
    unfinished = [s for s in studies if getattr(s, "resume_opaque_id", None) is not None]
    return (chosen or unfinished or list(studies))[0]
