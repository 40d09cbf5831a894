"""Helpers for job tests: a test kind, worker subprocesses, kill -9 and resume.

Use from a test (load by path: an installed wheel ships a top-level ``tests`` package that
can shadow this folder)::

    from tests.jobs_helpers import load
    jh = load()
    proc = jh.start_worker(url, worker_id="w1", log_path=tmp_path / "w1.log",
                           setup=jh.SETUP_SCORING_DOUBLES)
    jh.wait_for_progress(db, job_id, at_least=4, proc=proc)
    jh.kill_9(proc)
    killed, final = jh.kill_and_resume(url, db, job_id, tmp_path=tmp_path, at_least=4)

:func:`kill_and_resume` does the whole round: start a worker, wait until the job has
progress, ``kill -9`` it, wait until the heartbeat is stale, start another worker and wait
for it to finish the job. The per-kind kill -9 tests call it with their kind's job.

Worker subprocesses run the real command (``python -m backend worker --once ...``) with
a short ``--stale-after`` and ``--heartbeat``; ``setup`` is Python code run first in the
subprocess (e.g. registering test doubles). Their output goes to a log file, never a pipe
(a full pipe would block the worker).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
MODULE_NAME = "jobs_helpers"

#: Name of the test kind registered by :func:`install_test_kind`.
STEPS_KIND = "test_steps"

#: Subprocess setup: register the scoring test doubles (tests/services/scoring_doubles.py).
SETUP_SCORING_DOUBLES = (
    f"import sys\nsys.path.insert(0, {str(TESTS / 'services')!r})\n"
    "import scoring_doubles\nscoring_doubles.install()\n"
)
#: Subprocess setup: register :data:`STEPS_KIND` (this module's :func:`steps_kind`).
SETUP_TEST_KIND = (
    "import importlib.util, sys\n"
    f"_spec = importlib.util.spec_from_file_location({MODULE_NAME!r}, {str(Path(__file__))!r})\n"
    "_mod = importlib.util.module_from_spec(_spec)\n"
    f"sys.modules[{MODULE_NAME!r}] = _mod\n"
    "_spec.loader.exec_module(_mod)\n"
    "_mod.install_test_kind()\n"
)


def load() -> ModuleType:
    """This module under the name ``jobs_helpers`` (one copy per process)."""
    if MODULE_NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(MODULE_NAME, Path(__file__))
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[MODULE_NAME] = mod
        spec.loader.exec_module(mod)
    return sys.modules[MODULE_NAME]


# -- a job kind for the queue's own tests ---------------------------------------------------


def steps_kind(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Test kind: ``steps`` steps of ``seconds`` each, reported through ``ctx.progress``.

    Every step appends ``job<TAB>worker<TAB>step<TAB>start<TAB>end`` (monotonic-free wall
    times) to the file ``params["log"]`` when given, so a test sees who ran what and when,
    even in a killed subprocess. ``fail_at`` raises ``RuntimeError`` at that step;
    ``result`` overrides the returned value (to test results that are not JSON).
    """
    steps = int(params.get("steps", 3))
    seconds = float(params.get("seconds", 0.0))
    log = params.get("log")
    for i in range(steps):
        ctx.progress(i, steps, f"step {i + 1} of {steps}")
        if params.get("fail_at") == i:
            raise RuntimeError(f"step {i} exploded")
        start = time.time()
        time.sleep(seconds)
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"{ctx.job_id}\t{ctx.worker_id}\t{i}\t{start:.6f}\t{time.time():.6f}\n")
                fh.flush()
                os.fsync(fh.fileno())
    ctx.progress(steps, steps, "all steps done")
    if "result" in params:
        return params["result"]
    return {"summary": f"{steps} steps by {ctx.worker_id}", "steps": steps}


def install_test_kind(setitem: Callable[[Any, Any, Any], None] | None = None) -> None:
    """Register :data:`STEPS_KIND`; ``setitem`` is pytest's ``monkeypatch.setitem``."""
    from radconcord.backend.jobs import registry

    put = setitem or (lambda d, k, v: d.__setitem__(k, v))
    put(registry.KINDS, STEPS_KIND, f"{MODULE_NAME}:steps_kind")


def step_log(path: Path) -> list[tuple[int, str, int, float, float]]:
    """Lines written by :func:`steps_kind`: ``(job, worker, step, start, end)``."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        job, worker, step, start, end = line.split("\t")
        out.append((int(job), worker, int(step), float(start), float(end)))
    return out


# -- worker subprocesses --------------------------------------------------------------------


def db_url(db: Any) -> str:
    """The URL a subprocess needs to open the same database as ``db``."""
    return str(db.url)


def _worker_code(setup: str) -> str:
    # The real entry point: ``python -m backend worker ...`` after ``setup``.
    return (
        f"{setup}\n"
        "import sys\n"
        "from radconcord.backend.cli import main\n"
        "sys.exit(main(['worker', *sys.argv[1:]]))\n"
    )


def start_worker(
    url: str,
    *,
    worker_id: str,
    log_path: Path,
    setup: str = "",
    once: bool = True,
    stale_after: float = 1.5,
    heartbeat: float = 0.2,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``python -m backend worker`` on database ``url``.

    Args:
        url: Database URL.
        worker_id: ``--worker-id``.
        log_path: File receiving the worker's stdout and stderr.
        setup: Python code run first (:data:`SETUP_SCORING_DOUBLES`, :data:`SETUP_TEST_KIND`,
            or both concatenated).
        once: ``--once`` (exit when nothing is due).
        stale_after: ``--stale-after`` seconds.
        heartbeat: ``--heartbeat`` seconds.
        args: More worker options (``--device``, ``--kinds``, ``--batch-size``...).
        env: Extra environment variables.
    """
    argv = ["--poll", "0.1", "--stale-after", str(stale_after), "--heartbeat", str(heartbeat),
            "--worker-id", worker_id, *args]
    if once:
        argv.append("--once")
    full_env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(REPO), **(env or {})}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", _worker_code(setup), *argv],
            cwd=REPO,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_for(
    db: Any,
    job_id: int,
    predicate: Callable[[Any], bool],
    *,
    timeout: float = 90.0,
    proc: subprocess.Popen[bytes] | None = None,
    log_path: Path | None = None,
    what: str = "the expected state",
) -> Any:
    """Poll job ``job_id`` until ``predicate(info)``; fail if ``proc`` exits first.

    Returns:
        The job's :class:`~backend.jobs.JobInfo` that satisfied ``predicate``.
    """
    from radconcord.backend import jobs

    deadline = time.monotonic() + timeout
    info = None
    while time.monotonic() < deadline:
        info = jobs.get(db, job_id)
        if info is not None and predicate(info):
            return info
        if proc is not None and proc.poll() is not None:
            info = jobs.get(db, job_id)
            if info is not None and predicate(info):
                return info
            raise AssertionError(
                f"worker exited ({proc.returncode}) before job {job_id} reached {what}: "
                f"{info}\n{_tail(log_path)}"
            )
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not reach {what} in {timeout} s: {info}"
                         f"\n{_tail(log_path)}")


def _tail(log_path: Path | None) -> str:
    if log_path is None or not log_path.exists():
        return ""
    return "worker log:\n" + log_path.read_text(errors="replace")[-4000:]


def wait_for_progress(
    db: Any, job_id: int, *, at_least: int = 1, timeout: float = 90.0,
    proc: subprocess.Popen[bytes] | None = None, log_path: Path | None = None,
) -> Any:
    """Wait until the running job has ``progress_done >= at_least``."""
    return wait_for(
        db, job_id,
        lambda j: j.status == "running" and j.progress_done >= at_least,
        timeout=timeout, proc=proc, log_path=log_path,
        what=f"running with progress >= {at_least}",
    )


def kill_9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker (no cleanup runs in it) and reap it."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)


def wait_until_stale(db: Any, job_id: int, stale_after: float, timeout: float = 30.0) -> None:
    """Sleep until the job's heartbeat is older than ``stale_after`` seconds."""
    from radconcord.backend import jobs

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = jobs.get(db, job_id)
        beat = info.heartbeat_at if info is not None else None
        if beat is None:
            return
        age = (dt.datetime.now(dt.UTC) - beat).total_seconds()
        if age > stale_after + 0.1:
            return
        time.sleep(min(0.2, stale_after + 0.15 - age))
    raise AssertionError(f"heartbeat of job {job_id} still fresh after {timeout} s")


def kill_and_resume(
    url: str,
    db: Any,
    job_id: int,
    *,
    tmp_path: Path,
    at_least: int = 1,
    setup: str = "",
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
    stale_after: float = 1.5,
    timeout: float = 120.0,
    after_kill: Callable[[Any], None] | None = None,
) -> tuple[Any, Any]:
    """Kill -9 a worker mid-job, then let a second worker finish the job.

    Starts worker ``w1``, waits until job ``job_id`` is running with ``progress_done >=
    at_least``, kills it with SIGKILL, calls ``after_kill(killed_job_info)`` (check there
    that nothing partial is visible), checks that nobody may take the job while its
    heartbeat is fresh, waits until it is stale, runs worker ``w2`` (``--once``) to the
    end. Logs: ``tmp_path/w1.log``, ``tmp_path/w2.log``.

    Returns:
        ``(killed, final)``: the job right after the kill and after ``w2`` exited.
    """
    from radconcord.backend.jobs import queue

    log1, log2 = tmp_path / "w1.log", tmp_path / "w2.log"
    proc = start_worker(url, worker_id="w1", log_path=log1, setup=setup, env=env, args=args,
                        stale_after=stale_after)
    try:
        wait_for_progress(db, job_id, at_least=at_least, timeout=timeout, proc=proc,
                          log_path=log1)
    finally:
        if proc.poll() is None:
            kill_9(proc)
    killed = queue.get(db, job_id)
    assert killed is not None and killed.status == "running" and killed.worker_id == "w1", (
        killed, _tail(log1))
    if after_kill is not None:
        after_kill(killed)
    # Fresh heartbeat: no worker may take the job yet (it would run twice at once).
    assert queue.claim(db, worker_id="early", kinds=[killed.kind],
                       stale_after=stale_after) is None
    wait_until_stale(db, job_id, stale_after)
    proc2 = start_worker(url, worker_id="w2", log_path=log2, setup=setup, env=env, args=args,
                         stale_after=stale_after)
    try:
        proc2.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_9(proc2)
        raise AssertionError(
            f"second worker did not finish in {timeout} s\n{_tail(log2)}") from None
    assert proc2.returncode == 0, _tail(log2)
    final = queue.get(db, job_id)
    return killed, final
