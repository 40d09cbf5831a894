""""Score now": what a page that needs metric scores shows instead of a command to type.

:func:`score_now` draws, for an admin, the study's scoring state (no scores yet, a score job
queued or running with its live progress and Cancel, the last job's outcome, whether a
worker is alive and how to start one) and a button that queues a score job of the metrics
that run here without a model (``backend.services.scores.score_now``). The web process only
queues; the worker scores. A rater never sees any of it (nothing is drawn).
"""

from __future__ import annotations

import streamlit as st

from radconcord.backend.services import jobs
from radconcord.backend.services.scores import score_now as service
from radconcord.backend.services.scores import scoring
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from radconcord.webapp import state
from radconcord.webapp.components import job_ref
from radconcord.webapp.components.job_panel import draw_job, job_panel

#: How a lead starts a worker without a second terminal: the run script starts one.
START_HINT = (f"start one with `{jobs.START_WORKER}` in a second terminal, or restart the app "
              "with `bash scripts/run-app.sh`, which starts a worker with it")


@st.cache_data(ttl=60, show_spinner="Checking which metrics can run here...")
def _catalog() -> list[scoring.MetricInfo]:
    # Describing a family imports its module (never its weights); a minute's cache keeps
    # reruns quick while a newly installed dependency still shows up soon.
    return scoring.metric_catalog()


def score_now(db: Database, actor: Actor, study_name: str, *, key: str = "score_now") -> None:
    """The study's scoring state and a "Score now" button (admins only; nothing for others).

    Args:
        db: The database.
        actor: The logged-in user; a non-admin sees nothing.
        study_name: The study whose scores the page needs.
        key: Widget key prefix (one panel per key on a page).
    """
    if not actor.is_admin:
        return
    catalog = _catalog()
    now = state.call(service.score_state, db, actor, study_name, catalog=catalog)
    job_key = f"{key}_job"
    with st.container(key=f"{key}_panel", border=True):
        if now.scored:
            st.caption(f"{now.n_scored_pairs} of {now.n_pairs} pairs of **{study_name}** have "
                       "metric scores.")
        else:
            st.markdown(f"**{study_name}** has no metric scores yet.")
        shown = job_ref.current(job_key)
        pending = now.pending
        if pending is not None:
            # The job panel says that no worker takes the job; this adds the way that needs
            # no second terminal.
            job_panel(pending.id, key=key)
            if not now.worker.any_alive:
                st.caption("The scoring job waits for a worker: restart the app with "
                           "`bash scripts/run-app.sh`, which starts one with it, or run "
                           f"`{jobs.START_WORKER}` in a second terminal.")
            return
        if now.last is not None and (shown == now.last.id or now.last.status != "done"
                                     or jobs.partial(now.last)):
            draw_job(now.last)
        families = ", ".join(now.offline) or "none"
        if not now.worker.any_alive:
            st.caption(f"{now.worker.message.split(':')[0]}: {START_HINT}. A job queued now "
                       "waits for it.")
        clicked = st.button(
            "Score now", key=f"{key}_button", type="primary", icon=":material/play_arrow:",
            disabled=not now.offline,
            help=f"Queue a scoring job of the metrics that run here without a model "
                 f"({families}); the worker scores, this page follows. Model-based metrics "
                 "are on the Metrics page.")
        st.caption(f"Score now queues: {families}.")
        if clicked:
            me = state.require_live_session()
            job = state.call(service.score_now, state.get_db(), me, study_name,
                             catalog=catalog)
            job_ref.remember(job_key, job.id)
            st.rerun()
