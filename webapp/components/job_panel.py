"""A live panel for one job: kind, status, progress, Cancel, and why it is not moving; a
finished ``score`` job shows its status per metric family (a partial success as a warning).

Pages that queue a long task (scoring, probes, an oracle build, an import) show it with
:func:`job_panel`. While the job is queued or running the panel is a fragment that polls
the database every ``run_every`` seconds; when it sees the job finish it reruns the whole
page once, so the page can draw the result, and from then on it is drawn without polling.
"""

from __future__ import annotations

import streamlit as st

from radconcord.backend.errors import ServiceError
from radconcord.backend.services import jobs
from radconcord.backend.services.jobs import JobView
from radconcord.webapp import state

NO_WORKER = f"No worker is running: start one with `{jobs.START_WORKER}`."


def waiting_reason(job: JobView, workers: list[jobs.WorkerView]) -> str | None:
    """Why a queued job is not being picked up, or ``None`` when a worker can take it."""
    if job.status != "queued" or jobs.unserved([job], workers) == []:
        return None
    if not any(w.alive for w in workers):
        return NO_WORKER
    need = f"device {job.device}" if job.device else f"kind {job.kind}"
    return (f"No running worker takes this job ({need}): start one with "
            f"`python -m backend worker --device {job.device or 'cpu'} --kinds {job.kind}`.")


def draw_job(job: JobView, workers: list[jobs.WorkerView] | None = None) -> None:
    """Draw one job's state (no buttons): progress, message, error or outcome."""
    where = f" on {job.study_name}" if job.study_name else ""
    st.markdown(f"**Job #{job.id}** · `{job.kind}`{where} · {job.status}")
    if job.status in ("queued", "running"):
        text = job.message or ("waiting for a worker" if job.status == "queued" else "")
        if job.progress_total:
            text = f"{job.progress_done} / {job.progress_total} · {text}"
        if job.cancel_requested:
            text = f"cancelling... {text}"
        st.progress(job.fraction, text=text.strip(" ·") or None)
        reason = waiting_reason(job, workers or [])
        if reason:
            st.warning(reason)
    elif job.status == "done":
        families = jobs.score_families(job)
        if jobs.partial(job):
            st.warning(job.message)
        else:
            st.success(job.message or "done")
        if families:
            family_table(families, key=f"families-{job.id}")
    elif job.status == "failed":
        st.error(f"Job #{job.id} failed: {job.error or 'no reason recorded'}")
    else:
        st.info(f"Job #{job.id} was cancelled. {job.message}".strip())


def family_table(families: list[jobs.FamilyStatus], *, key: str) -> None:
    """A score job's status per metric family: done, unavailable (why) or failed (error)."""
    st.dataframe(
        [{"Family": f.family, "Status": f.status, "Reason or error": f.detail,
          "Computed": f.computed, "Cached": f.cached} for f in families],
        hide_index=True, width="stretch", key=key,
        column_config={"Reason or error": st.column_config.TextColumn(width="large")},
    )


def job_panel(job_id: int, *, key: str, run_every: float = 1.0) -> JobView | None:
    """Show job ``job_id`` live; return its final state once it is finished, else ``None``.

    Args:
        job_id: The job to show.
        key: Unique widget key prefix on the page.
        run_every: Seconds between polls while the job is queued or running.
    """
    db = state.get_db()
    actor = state.require_live_session()
    try:
        job = jobs.job_status(db, actor, job_id=job_id)
    except ServiceError as exc:
        st.error(str(exc))
        return None
    if job.finished:
        with st.container(key=f"{key}-job"):
            draw_job(job)
        return job

    @st.fragment(run_every=run_every)
    def live() -> None:
        me = state.require_live_session()
        try:
            now = jobs.job_status(db, me, job_id=job_id)
            workers = jobs.list_workers(db, me)
        except ServiceError as exc:
            st.error(str(exc))
            return
        if now.finished:
            # The page draws the outcome (and whatever it built from the result).
            st.rerun(scope="app")
        draw_job(now, workers)
        if now.status in ("queued", "running") and not now.cancel_requested and st.button(
            "Cancel", key=f"{key}-cancel", icon=":material/cancel:"
        ):
            state.call(jobs.cancel_job, db, me, job_id=job_id)
            st.rerun(scope="app")

    with st.container(key=f"{key}-job"):
        live()
    return None
