"""Admin: the metric catalogue (available or why not), queue scoring, watch every job
(progress, Cancel), each score job's status per family (done, unavailable: why, failed:
error), and whether a worker is alive (a status line; a waiting job with no worker says how
to start one). A score job split into chunk jobs shows as one progress bar ("K chunks on N
workers"), its chunks in an expander and each failed chunk named."""

from __future__ import annotations

import json

import streamlit as st

from radconcord.backend.services import jobs
from radconcord.backend.services.scores import scoring
from radconcord.backend.services.study_admin import studies
from radconcord.webapp import state
from radconcord.webapp.components import job_panel

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()


@st.cache_data(ttl=60, show_spinner="Checking which metrics can run here...")
def _catalog() -> list[scoring.MetricInfo]:
    # Instantiating every family imports its module; a minute's cache keeps reruns quick
    # while a newly installed dependency or model still shows up soon.
    return scoring.metric_catalog()


st.title("Metrics")
catalog = _catalog()
n_available = sum(1 for m in catalog if m.available)
st.caption(f"{n_available} of {len(catalog)} metric families can run on this machine. "
           "Scoring and every other long task run in worker processes "
           "(`python -m backend worker`), never in the web app; scores are cached by pair "
           "content and metric signature.")
for message in scoring.ignored_plugins():
    st.warning(f"Metric plug-in not registered: {message}", icon=":material/extension_off:")

st.dataframe(
    [
        {
            "Family": m.family,
            "Kind": m.kind,
            "Outputs": ", ".join(
                f"{k} {'↑' if m.directions[k] else '↓'}" if k in m.directions else k
                for k in m.keys
            ),
            "Available": m.available,
            "Why not": m.reason or "",
            "Model": m.needs_model,
            "Image": m.needs_image,
            "Signature": m.signature or "",
            "Plug-in": m.origin or "",
        }
        for m in catalog
    ],
    hide_index=True,
    width="stretch",
    column_config={
        "Available": st.column_config.CheckboxColumn(width="small"),
        "Model": st.column_config.CheckboxColumn(width="small", help="Loads model weights"),
        "Image": st.column_config.CheckboxColumn(width="small", help="Needs the images"),
        "Why not": st.column_config.TextColumn(width="large"),
        "Plug-in": st.column_config.TextColumn(
            help="The package a plug-in family comes from (docs/plugins.md); blank: built in"),
    },
)

def _engine(job: jobs.JobView) -> str:
    """Where a score job computes its pairs (``ray (...)``), or ``""`` on the worker."""
    spec = job.params.get("engine") if isinstance(job.params, dict) else None
    return f"Ray {scoring.ray_where(spec)}" if isinstance(spec, dict) else ""


st.subheader("Score a study")
study_names = [s.name for s in state.call(studies.list_studies, db, actor)]
if not study_names:
    st.info("No studies yet: import cases first.")
else:
    with st.form("enqueue"):
        study_name = st.selectbox("Study", study_names, key="score_study")
        available = [m.family for m in catalog if m.available]
        families = st.multiselect(
            "Metric families", [m.family for m in catalog], default=available[:1],
            key="score_families",
            help="An unavailable family can be queued for a worker on another machine; a "
                 "worker that cannot run it records why.",
        )
        chunks = st.number_input(
            "Split into chunk jobs", min_value=1, max_value=256, value=1, step=1,
            key="score_chunks",
            help="Above 1, the study's pairs are cut into that many jobs that several workers "
                 "(e.g. one per GPU: `worker --device cuda:0`, `--device cuda:1`) take at "
                 "once. A corpus-dependent family (CIDEr, BERTScore with idf) is never cut: "
                 "one more job scores it over every pair.",
        )
        e1, e2, e3 = st.columns([2, 3, 1])
        engine = e1.radio(
            "Computed by", ["The worker", "Ray"], horizontal=True, key="score_engine",
            help="Ray: the worker that takes the job drives it, and Ray actors compute the "
                 "pairs (docs/scale_out.md). Not with chunk jobs.")
        ray_address = e2.text_input(
            "Ray address", key="score_ray_address", placeholder="blank: a local Ray instance",
            help="The cluster to join (HEAD:6379), from the worker's machine.")
        ray_workers = e3.number_input(
            "Actors", min_value=0, max_value=1024, value=0, step=1, key="score_ray_workers",
            help="0: one per CPU of the cluster.")
        submitted = st.form_submit_button("Queue scoring job", type="primary")
    if submitted:
        if not families:
            st.warning("Choose at least one metric family.")
        else:
            on_ray = engine == "Ray"
            job = state.call(
                scoring.enqueue_scoring, db, actor, study_name=study_name,
                metrics=list(families), chunks=int(chunks),
                engine="ray" if on_ray else "local",
                ray_address=(ray_address or None) if on_ray else None,
                workers=(int(ray_workers) or None) if on_ray else None)
            split = f", split into {int(chunks)} chunks" if int(chunks) > 1 else ""
            where = f", computed on {_engine(job)}" if on_ray else ""
            st.success(f"Queued job #{job.id}: {', '.join(job.metrics)} on "
                       f"{job.study_name}{split}{where}.")


def _what(job: jobs.JobView) -> str:
    """A short description of a job's inputs for the table."""
    if job.metrics:
        on = _engine(job)
        return ", ".join(job.metrics) + (f" · on {on}" if on else "")
    text = json.dumps(job.params, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


@st.fragment(run_every="3s")
def jobs_panel() -> None:
    """Every job with its live progress, Cancel for unfinished ones, and the workers alive."""
    me = state.require_live_session()
    live_db = state.get_db()
    all_jobs = state.call(jobs.list_jobs, live_db, me)
    workers = state.call(jobs.list_workers, live_db, me)
    status = state.call(jobs.worker_status, live_db, me)
    with st.container(key="worker_status"):
        if status.any_alive:
            st.success(f"Worker: {status.message}.", icon=":material/check_circle:")
        else:
            st.warning(f"{status.message}.", icon=":material/error:")
    unserved = jobs.unserved(all_jobs, workers)
    if unserved and not any(w.alive for w in workers):
        waiting = ", ".join(f"#{j.id}" for j in unserved)
        st.warning(f"Job {waiting} {'is' if len(unserved) == 1 else 'are'} waiting. "
                   f"{job_panel.NO_WORKER}")
    else:
        for job in unserved:
            st.warning(f"Job #{job.id}: {job_panel.waiting_reason(job, workers)}")

    st.markdown("**Workers alive**")
    if workers:
        st.dataframe(
            [
                {
                    "Worker": w.id,
                    "Device": w.device,
                    "Kinds": ", ".join(w.kinds) or "all",
                    "Current job": f"#{w.current_job_id}" if w.current_job_id else "idle",
                    "Last heartbeat": w.heartbeat_at,
                    "Started": w.started_at,
                }
                for w in workers
            ],
            hide_index=True,
            width="stretch",
            key="workers_table",
            column_config={
                "Last heartbeat": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
                "Started": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
            },
        )
    else:
        st.caption("No worker is running. Start one with `python -m backend worker` "
                   "(`--device cuda:N` for a GPU).")

    st.markdown("**Jobs**")
    if not all_jobs:
        st.caption("No jobs yet.")
        return
    groups = {g.parent.id: g for g in state.call(jobs.job_groups, live_db, me, all_jobs)}
    # A split job is one row (its group's status and progress); its chunks are listed in the
    # group's expander below, not again as rows of their own.
    chunk_ids = {c.id for g in groups.values() for c in g.children}
    st.dataframe(
        [
            {
                "Job": j.id,
                "Kind": j.kind,
                "Study": j.study_name or "",
                "What": _what(j),
                "Status": _status(j, groups.get(j.id)),
                "Progress": (groups[j.id] if j.id in groups else j).fraction,
                "Done": _done(groups[j.id] if j.id in groups else j),
                "Message": j.error or j.message,
                "Worker": j.worker_id or "",
                "Queued": j.created_at,
            }
            for j in all_jobs
            if j.id not in chunk_ids
        ],
        hide_index=True,
        width="stretch",
        key="jobs_table",
        column_config={
            "Progress": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0),
            "Queued": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
            "Message": st.column_config.TextColumn(width="large"),
        },
    )
    scored = [j for j in all_jobs if jobs.score_families(j)][:10]
    if scored:
        st.markdown("**Scoring: status per metric family**")
        st.dataframe(
            [
                {"Job": j.id, "Study": j.study_name or "", "Family": f.family,
                 "Status": f.status, "Reason or error": f.detail, "Computed": f.computed,
                 "Cached": f.cached}
                for j in scored for f in jobs.score_families(j)
            ],
            hide_index=True,
            width="stretch",
            key="families_table",
            column_config={"Reason or error": st.column_config.TextColumn(width="large")},
        )
    if groups:
        _groups_panel(list(groups.values())[:5])
    cancellable = [j for j in all_jobs if (j.status in ("queued", "running")
                   and not j.cancel_requested) or _cancellable_group(groups.get(j.id))]
    if cancellable:
        cols = st.columns(min(len(cancellable), 4))
        for i, job in enumerate(cancellable):
            cols[i % len(cols)].button(
                f"Cancel job #{job.id}", key=f"cancel_job_{job.id}", icon=":material/cancel:",
                on_click=_cancel, args=(job.id,),
            )


def _done(job: jobs.JobView | jobs.JobGroupView) -> str:
    return f"{job.progress_done} / {job.progress_total}"


def _cancellable_group(group: jobs.JobGroupView | None) -> bool:
    """Whether a split job still has a chunk that Cancel would stop."""
    return group is not None and any(
        c.status == "queued" or (c.status == "running" and not c.cancel_requested)
        for c in group.children)


def _groups_panel(groups: list[jobs.JobGroupView]) -> None:
    """One progress bar per split score job, its chunks' lines in an expander."""
    st.markdown("**Split scoring jobs**")
    for g in groups:
        n, k = len(set(g.workers)), len(g.children)
        with st.container(key=f"group_{g.parent.id}"):
            st.progress(
                g.fraction,
                text=(f"Job #{g.parent.id} ({g.parent.study_name or ''}): {g.status}, "
                      f"{g.progress_done} / {g.progress_total} steps; {k} chunk"
                      f"{'s' if k != 1 else ''} on {n} worker{'s' if n != 1 else ''}"),
            )
            for problem in g.problems:
                st.error(problem, icon=":material/error:")
            with st.expander(f"Chunks of job #{g.parent.id}"):
                st.markdown("\n".join(_chunk_line(c) for c in g.children))


def _chunk_line(c: jobs.JobView) -> str:
    """``- chunk 1/3 (#12): running on gpu0, 5 / 12 (bleu): <message>``."""
    text = (c.error or c.message or "").splitlines()
    where = f" on {c.worker_id}" if c.worker_id else ""
    return (f"- {jobs.chunk_name(c)}: {c.status}{where}, {_done(c)} "
            f"({', '.join(c.metrics)}){': ' + text[0] if text else ''}")


def _status(job: jobs.JobView, group: jobs.JobGroupView | None = None) -> str:
    """The job's status, with a partial success said plainly (a split job: its chunks')."""
    if group is not None:
        bad = len(group.problems)
        return group.status + (f" ({bad} chunk{'s' if bad != 1 else ''} not done)"
                               if bad else "")
    if job.status == "running" and job.cancel_requested:
        return "running (cancelling)"
    if jobs.partial(job):
        bad = [f for f in jobs.score_families(job) if f.status != "done"]
        kinds = sorted({f.status for f in bad})
        return (f"done with {len(bad)} {'family' if len(bad) == 1 else 'families'} "
                f"{' or '.join(kinds)}")
    return job.status


def _cancel(job_id: int) -> None:
    # A callback: the run that follows (page or fragment) already shows the new state.
    done = state.call(jobs.cancel_job, state.get_db(), state.require_live_session(),
                      job_id=job_id)
    if done.child_ids:
        st.toast(f"Job #{done.id}: its queued chunk jobs are cancelled, running ones stop at "
                 "their next step.")
        return
    st.toast(f"Job #{done.id} " + ("cancelled." if done.status == "cancelled"
                                   else "will stop at its next step."))


st.subheader("Jobs and workers")
jobs_panel()
