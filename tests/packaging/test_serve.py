"""scripts/serve.sh (what run-app.sh and the Docker image run): the app and one worker,
started and stopped together.

The real script starts the real app (``streamlit run webapp/server.py``) and a real worker
(``python -m backend worker``) on a temporary data folder and port. Checked: both run on the
same database (the worker's heartbeat is in the app's database); SIGTERM or SIGINT to the
script (or Ctrl+C: SIGINT to its process group) stops both, each with one clean stop (no
orphan process); a dead worker leaves the app running;
``RADCONCORD_WORKER=0`` starts the app alone. run-app.sh itself is checked on a copy of the
checkout with stand-ins, as in test_bootstrap.py: it bootstraps, then hands over to
serve.sh with its arguments.

No fixed sleeps: every check waits, with a deadline, for the event that makes it meaningful
(the app's health answer, the worker's heartbeat, the script reaping its dead worker, a probe
worker's announcement in the same database), so a slow machine fails rather than passing
without having looked.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from radconcord.backend import jobs
from radconcord.db.session import Database
from tests.e2e.conftest import free_port
from tests.process_helpers import interruptible

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


def _wait(predicate, what: str, log: Path, timeout: float = START_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:g} s:\n{log.read_text(errors='replace')}")
        time.sleep(0.2)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.read() == b"ok"
    except OSError:
        return False


@contextmanager
def _serve(tmp_path: Path, **env: str) -> Iterator[tuple[subprocess.Popen, str, Database, Path]]:
    data = tmp_path / "data"
    data.mkdir()
    db_url = f"sqlite:///{data / 'serve.db'}"
    port = free_port()
    log = tmp_path / "serve.log"
    full_env = {**os.environ, "RADCONCORD_DATA_DIR": str(data), "DATABASE_URL": db_url,
                "RADCONCORD_SEED_DEMO": "0", "RADCONCORD_PYTHON": sys.executable,
                "RADCONCORD_STOP_GRACE_S": "20", **env}
    with open(log, "wb") as out:
        # A session of its own: whatever happens, the finally below can end every process
        # the script started, and only those.
        proc = subprocess.Popen(
            ["bash", "scripts/serve.sh", "--server.port", str(port), "--server.headless",
             "true", "--browser.gatherUsageStats", "false"],
            cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=interruptible)
    db = None
    started: list[int] = []
    try:
        url = f"http://127.0.0.1:{port}"
        _wait(lambda: _healthy(url) or proc.poll() is not None, "the app did not start", log)
        assert proc.poll() is None, log.read_text()
        started.extend(_children(proc.pid))
        db = Database(db_url, migrate=False)
        yield proc, url, db, log
    finally:
        if db is not None:
            db.dispose()
        # The children run in process groups of their own: end each one this test started
        # that is still there (after a failure), then the script.
        for pid in started:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _app_and_worker(proc: subprocess.Popen) -> tuple[int, int | None]:
    kids = _children(proc.pid)
    app = [p for p in kids if "streamlit" in _cmdline(p)]
    worker = [p for p in kids if "backend worker" in _cmdline(p)]
    assert len(app) == 1, [(_cmdline(p)) for p in kids]
    assert len(worker) <= 1
    return app[0], (worker[0] if worker else None)


def _alive_worker(db: Database) -> jobs.WorkerInfo | None:
    alive = [w for w in jobs.list_workers(db) if w.alive]
    return alive[0] if alive else None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_app_and_its_worker_start_together_and_stop_together(tmp_path, sig):
    with _serve(tmp_path) as (proc, url, db, log):
        worker = _wait(lambda: _alive_worker(db), "no worker announced itself", log)
        app_pid, worker_pid = _app_and_worker(proc)
        # The worker announced itself in the app's database: the same data folder.
        assert worker.pid == worker_pid and worker.device == "cpu"
        # Ctrl+C in a terminal signals the whole foreground group: the script's.
        os.killpg(proc.pid, sig)
        assert proc.wait(timeout=45) == 128 + sig
        assert not _alive(app_pid) and not _alive(worker_pid)
        # The worker stopped cleanly (it marks itself stopped), not killed.
        (gone,) = jobs.list_workers(db, include_gone=True)
        assert gone.stopped_at is not None and not gone.alive
        assert "serve: worker started" in log.read_text()


def test_a_dead_worker_leaves_the_app_running(tmp_path):
    with _serve(tmp_path) as (proc, url, db, log):
        _wait(lambda: _alive_worker(db), "no worker announced itself", log)
        app_pid, worker_pid = _app_and_worker(proc)
        os.kill(worker_pid, signal.SIGKILL)
        # The script has seen the death once it has reaped the worker (a zombie is still its
        # child): that is where a script that stops with its worker would start stopping.
        _wait(lambda: worker_pid not in _children(proc.pid),
              "serve.sh did not reap its dead worker", log, timeout=10)
        # After that the app still answers, and the script is still there to stop it.
        _wait(lambda: _healthy(url) or proc.poll() is not None,
              "the app stopped answering after the worker died", log, timeout=10)
        assert proc.poll() is None and _alive(app_pid), log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=45) == 143
        assert not _alive(app_pid)


def test_no_worker_when_switched_off(tmp_path):
    with _serve(tmp_path, RADCONCORD_WORKER="0") as (proc, url, db, log):
        # _serve returned once the app answered: serve.sh starts the app after the point
        # where it would have started the worker, so such a worker would be its child now.
        app_pid, worker_pid = _app_and_worker(proc)
        assert worker_pid is None
        assert "serve: worker started" not in log.read_text()
        # A worker started only now on the same database announces itself and, with nothing
        # queued, stops (--once): one started by the script, earlier, would have announced
        # itself by then too. The probe also shows that announcements reach `db`.
        probe = subprocess.run(
            [sys.executable, "-m", "backend", "worker", "--once", "--worker-id", "probe"],
            cwd=REPO, env={**os.environ, "RADCONCORD_DATA_DIR": str(tmp_path / "data"),
                           "DATABASE_URL": db.url, "RADCONCORD_SEED_DEMO": "0"},
            capture_output=True, text=True, timeout=START_TIMEOUT_S)
        assert probe.returncode == 0, probe.stderr
        assert [w.id for w in jobs.list_workers(db, include_gone=True)] == ["probe"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=45) == 143
        assert not _alive(app_pid)


def test_run_app_bootstraps_then_hands_over_to_serve(tmp_path):
    """run-app.sh: install (idempotent), then serve.sh with the same arguments."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "run-app.sh", root / "scripts" / "run-app.sh")
    calls = tmp_path / "calls.log"
    (root / "scripts" / "bootstrap.sh").write_text(f'echo "bootstrap $*" >> {calls}\n')
    (root / "scripts" / "serve.sh").write_text(
        f'echo "serve $*" >> {calls}\n')
    proc = subprocess.run(["bash", "scripts/run-app.sh", "--server.port", "8600"], cwd=root,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = calls.read_text().splitlines()
    assert lines[0] == "bootstrap app"
    assert lines[1] == "serve --server.port 8600"
