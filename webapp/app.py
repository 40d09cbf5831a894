"""RadConcord web app router (served by ``streamlit run webapp/server.py``).

The pages offered depend on the logged-in user's role: nobody logged in sees only the login
page; a rater sees "Rate" and "My studies"; an admin sees the study pages, the metric
catalogue and the analysis pages (dashboard, explorer, probes, oracle study builder).
Pages that are not offered are not registered with ``st.navigation``, so their URL paths
fall back to the role's default page. Every page URL opens directly (a bookmark): "/" is a
hidden page that switches to the role's landing page (``/studies``, ``/rate``), and logged
out, every page path shows the login page, whose rerun after the login keeps the path, so
the page asked for opens. Each page still checks the role through the services
it calls, so a page script reached some other way cannot show admin data to a rater.

A login is remembered by this browser for a while (an HttpOnly cookie set by the server,
see ``webapp/state.py`` and ``webapp/server.py``), so a reload keeps the rater on their pair
without a new login, also across a server restart. Every run re-checks the session in the
database: a deactivated account's open tab is logged out on its next action. An account that
must change its password is offered only "My account" until it has.

Real servers run ``streamlit run webapp/server.py`` (cookie routes, error boundary for
fragments); this file alone still runs (AppTest, ``streamlit run webapp/app.py``).

Every page runs inside an error boundary: an unexpected exception is logged with a reference
id and the page shows only that id, never a traceback or a server path.

On first start with an empty database the demo study is seeded when the server listens on
loopback only (see ``webapp/state.py``; ``RADCONCORD_SEED_DEMO=0`` starts empty).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

# `streamlit run webapp/app.py` puts webapp/ on sys.path, not the repository root.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import streamlit as st  # noqa: E402
from streamlit.errors import FragmentHandledException  # noqa: E402

from radconcord.backend.services.accounts import roles  # noqa: E402
from radconcord.backend.types import Actor  # noqa: E402
from radconcord.db.session import DataFolderError  # noqa: E402
from radconcord.webapp import state  # noqa: E402
from radconcord.webapp.components import getting_started  # noqa: E402

# Not "pages/": a folder of that name beside the entry script switches Streamlit to its
# legacy multipage mode, which would route to EVERY script in it whatever the role.
PAGES = Path(__file__).resolve().parent / "views"

#: The URL path of every page any role may open. Logged out, each of them shows the login
#: page (a hidden page of that path), so a bookmark is not "Page not found"; the login's
#: rerun then keeps the path, and the role's own page of that path opens.
PAGE_PATHS = (
    "studies", "import", "assign", "qc", "adjudicate", "export", "accounts", "metrics",
    "dashboard", "explorer", "probes", "build-study", "account", "rate", "compare",
    "my-studies",
)


def _home(target: st.Page) -> st.Page:
    """The default page ("/"), hidden: it opens the role's landing page under its own path.

    Streamlit serves its default page at "/" only, so a landing page marked default would be
    "Page not found" at its own URL (``/studies``, ``/rate``) from a bookmark. Instead every
    page keeps its path and "/" switches to the landing page, query (``?pair=``) kept.
    """
    def home() -> None:
        state.switch_page(target, query_params=st.query_params.to_dict())

    return st.Page(home, title="RadConcord", url_path="home", default=True,
                   visibility="hidden")


def _pages(actor: Actor | None) -> list[st.Page] | dict[str, list[st.Page]]:
    """The pages this user may open (unregistered URL paths fall back to the default)."""
    if actor is None:
        login = PAGES / "login.py"
        return [st.Page(login, title="Log in", icon=":material/login:", url_path="login",
                        default=True),
                *(st.Page(login, title="Log in", url_path=path, visibility="hidden")
                  for path in PAGE_PATHS)]
    if state.must_change_password():
        # Nothing else until the one-time or published password is replaced.
        return [st.Page(PAGES / "account.py", title="My account", icon=":material/person:",
                        url_path="account", default=True)]
    my_account = st.Page(PAGES / "account.py", title="My account", icon=":material/person:",
                         url_path="account")
    if actor.is_admin:
        landing = st.Page(PAGES / "studies.py", title="Studies & progress",
                          icon=":material/monitoring:", url_path="studies")
        return {
            "Study": [
                landing,
                st.Page(PAGES / "import_data.py", title="Import", icon=":material/upload:",
                        url_path="import"),
                st.Page(PAGES / "assign.py", title="Assign raters", icon=":material/group_add:",
                        url_path="assign"),
                st.Page(PAGES / "qc.py", title="Quality control", icon=":material/fact_check:",
                        url_path="qc"),
                st.Page(PAGES / "adjudicate.py", title="Adjudicate", icon=":material/gavel:",
                        url_path="adjudicate"),
                st.Page(PAGES / "export.py", title="Export", icon=":material/download:",
                        url_path="export"),
                st.Page(PAGES / "accounts.py", title="Accounts", icon=":material/manage_accounts:",
                        url_path="accounts"),
            ],
            "Metrics": [
                st.Page(PAGES / "metrics.py", title="Metrics", icon=":material/functions:",
                        url_path="metrics"),
                st.Page(PAGES / "dashboard.py", title="Agreement dashboard",
                        icon=":material/insights:", url_path="dashboard"),
                st.Page(PAGES / "explorer.py", title="Disagreement explorer",
                        icon=":material/compare:", url_path="explorer"),
                st.Page(PAGES / "probes.py", title="Perturbation probes",
                        icon=":material/science:", url_path="probes"),
                st.Page(PAGES / "build_study.py", title="Build oracle study",
                        icon=":material/construction:", url_path="build-study"),
            ],
            "You": [my_account, _home(landing)],
        }
    # A rater's screens follow their work: counts, pairwise judgements, adjudication.
    can = roles.capabilities(state.get_db(), actor)
    work = []
    if can.rates_pairs or not (can.judges_pairs or can.adjudicates):
        work.append(st.Page(PAGES / "rate.py", title="Rate", icon=":material/rate_review:",
                            url_path="rate"))
    if can.judges_pairs:
        work.append(st.Page(PAGES / "compare.py", title="Compare", icon=":material/compare:",
                            url_path="compare"))
    if can.adjudicates:
        work.append(st.Page(PAGES / "adjudicate.py", title="Adjudicate", icon=":material/gavel:",
                            url_path="adjudicate"))
    return [
        *work,
        st.Page(PAGES / "my_studies.py", title="My studies", icon=":material/list:",
                url_path="my-studies"),
        my_account,
        _home(work[0]),  # the first of the rater's work pages is where they land
    ]


def main() -> None:
    """Route this run: check the session, draw the frame, run the chosen page."""
    state.get_db()  # open (migrate, maybe seed) before any page runs
    actor = state.current_actor()

    # Raters need the whole width for images, texts and the grid; the sidebar (account,
    # help) starts collapsed for them.
    st.set_page_config(
        page_title="RadConcord", page_icon=":material/radiology:", layout="wide",
        initial_sidebar_state=(
            "collapsed" if actor is not None and not actor.is_admin else "auto"),
    )
    st.markdown(
        # Less blank space above the page title under the top navigation bar; the container
        # of the session cookie script takes no room.
        "<style>[data-testid='stMainBlockContainer'] {padding-top: 3.5rem;}"
        f" .st-key-{state.COOKIE_CONTAINER} {{display: none;}}"
        # Its layout wrapper too: a hidden item still takes a flex gap (16 px) above the page
        # while it holds a cookie request (the first page after a login), moving the grid.
        f" [data-testid='stLayoutWrapper']:has(> .st-key-{state.COOKIE_CONTAINER})"
        " {display: none;}</style>",
        unsafe_allow_html=True,
    )
    state.draw_cookie_script()

    nav = st.navigation(_pages(actor), position="top")

    if actor is not None:
        with st.sidebar:
            st.caption(f"Logged in as **{actor.username}** ({actor.role})")
            if actor.is_admin:
                with st.popover("Help", icon=":material/help:"):
                    st.markdown("The **Getting started** panel on *Studies & progress* lists "
                                "the next steps of the newest study.")
                    if st.button("Show getting started", key="help_getting_started",
                                 icon=":material/checklist:"):
                        getting_started.show_again()
                        state.switch_page(PAGES / "studies.py")
            if st.button("Log out", icon=":material/logout:", key="logout"):
                state.logout()
                st.query_params.clear()
                st.rerun()

    nav.run()


try:
    main()
except FragmentHandledException:
    # A fragment's exception, already shown through on_script_error (webapp/server.py).
    raise
except DataFolderError as exc:
    # The database's folder is unusable: webapp/server.py stops at start with this line; a
    # bare `streamlit run webapp/app.py` gets here. No traceback (the line says it all) and
    # no server path on the page.
    logging.getLogger(__name__).error("radconcord: %s", exc)
    st.error("The server cannot open its database; its log says why.",
             icon=":material/error:")
except Exception as exc:  # noqa: BLE001 - the error boundary of every page
    # st.stop and st.rerun raise BaseException subclasses and pass through untouched.
    state.show_unexpected_error(exc)
