"""An unusable data folder or output folder gives one line, not a traceback (issue 21.6).

``init-db``, ``export`` and the server's start open (and migrate) the SQLite database in the
data folder. A folder that is missing and cannot be created, or that is read-only, used to
end them with a 20-line SQLAlchemy or pathlib traceback; now the command line prints one line
naming the folder and the problem (``error: data folder ... is not writable (read-only file
system)``) and exits non-zero, and the server prints it and stops
(:func:`db.session.exit_on_data_folder_error`). An export into a folder that cannot be
written fails the same way and leaves nothing behind, and an existing file is never
truncated.

The tests run as root in CI, where ``chmod`` stops nothing: a read-only folder is a read-only
bind mount when the process may mount (root), a ``chmod 555`` folder otherwise; a folder under
a regular file is "missing and cannot be created" for everyone. The in-process tests that
simulate a read-only file system at the OS boundary (the SQLite driver's connect, the
temporary file probe) run everywhere.
"""

from __future__ import annotations

import errno
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from radconcord.backend.cli import main
from radconcord.backend.errors import InvalidInput
from radconcord.backend.services.transfer import exports
from radconcord.backend.types import Actor
from radconcord.db import session as db_session
from radconcord.db.session import Database, DataFolderError, exit_on_data_folder_error

REPO = Path(__file__).resolve().parents[2]
STUDY = "Folder study"


def _cli(args: list[str], *, data_dir: Path, database_url: str | None = None,
         ) -> subprocess.CompletedProcess[str]:
    """``python -m backend ARGS`` in a child process, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["RADCONCORD_DATA_DIR"] = str(data_dir)
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    return subprocess.run([sys.executable, "-m", "backend", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The child's only line on stderr (it failed)."""
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def blocked(tmp_path: Path) -> Path:
    """A data folder that does not exist and cannot be created: its parent is a file."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a regular file\n")
    return blocker / "data"


def _mount_read_only(src: Path, dst: Path) -> bool:
    def run(*cmd: str) -> bool:
        try:
            return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    if not run("mount", "--bind", str(src), str(dst)):
        return False
    if not run("mount", "-o", "remount,ro,bind", str(dst)):
        run("umount", str(dst))
        return False
    return True


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody (root included) can write to; ``src`` beside it is its writable side.

    Root gets a read-only bind mount of ``src``; other users a ``chmod 555`` copy. Root that
    may not mount (a container without CAP_SYS_ADMIN) skips: the in-process tests below
    cover the same code through a simulated read-only file system.
    """
    src = tmp_path / "src"
    ro = tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        if not _mount_read_only(src, ro):
            pytest.skip("root without the right to mount: no read-only folder to test with")
        try:
            probe_failed = False
            try:
                (ro / "probe").write_text("x")
            except OSError:
                probe_failed = True
            assert probe_failed, "the read-only bind mount is writable"
            yield ro
        finally:
            subprocess.run(["umount", str(ro)], capture_output=True, timeout=30)
        return
    ro.chmod(0o555)
    try:
        yield ro
    finally:
        ro.chmod(0o755)


@pytest.fixture
def study_db(tmp_path: Path, make_study) -> Iterator[str]:
    """URL of a migrated SQLite database holding a small study (for export)."""
    url = f"sqlite:///{tmp_path / 'good' / 'radconcord.db'}"
    db = Database(url)
    make_study(db, STUDY, 3)
    db.dispose()
    yield url


# ---------------------------------------------------------------- the data folder, by the CLI

def test_init_db_in_a_folder_that_cannot_be_created_prints_one_line(blocked):
    line = _one_line(_cli(["init-db"], data_dir=blocked))
    assert line == (f"error: data folder {blocked} does not exist and cannot be created "
                    f"({blocked.parent} is a file, not a folder)")


def test_export_with_a_data_folder_that_cannot_be_created_prints_one_line(blocked, tmp_path):
    out = tmp_path / "out"
    proc = _cli(["export", "--study", STUDY, "--format", "jsonl", "--output", str(out)],
                data_dir=blocked)
    assert _one_line(proc).startswith(f"error: data folder {blocked} does not exist and "
                                      "cannot be created")
    assert not out.exists()


def test_a_data_folder_that_is_a_file_prints_one_line(tmp_path):
    afile = tmp_path / "data"
    afile.write_text("x")
    line = _one_line(_cli(["init-db"], data_dir=afile))
    assert line == f"error: data folder {afile} is a file, not a folder"


def test_init_db_in_a_read_only_data_folder_prints_one_line(read_only_dir):
    line = _one_line(_cli(["init-db"], data_dir=read_only_dir))
    assert line.startswith(f"error: data folder {read_only_dir} is not writable (")
    assert line.endswith(("(read-only file system)", "(permission denied)"))
    assert not any(read_only_dir.iterdir())


def test_export_from_a_database_in_a_read_only_folder_prints_one_line(read_only_dir, tmp_path,
                                                                     make_study):
    # A database that exists but whose folder became read-only (WAL needs its -shm file).
    src = tmp_path / "src"
    db = Database(f"sqlite:///{src / 'radconcord.db'}")
    make_study(db, STUDY, 2)
    db.dispose()
    before = sorted(p.name for p in read_only_dir.iterdir())
    out = tmp_path / "out"
    proc = _cli(["export", "--study", STUDY, "--format", "jsonl", "--output", str(out)],
                data_dir=read_only_dir)
    assert _one_line(proc).startswith(f"error: data folder {read_only_dir} is not writable (")
    assert not out.exists()
    assert sorted(p.name for p in read_only_dir.iterdir()) == before


# ------------------------------------------------- the data folder, simulated at the OS boundary

def _sqlite_refuses(monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    """SQLite's connect (the driver SQLAlchemy calls) fails with ``message``."""
    def refuse(*_args, **_kwargs):
        raise sqlite3.OperationalError(message)

    monkeypatch.setattr(sqlite3.dbapi2, "connect", refuse)


def _read_only_file_system(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """What a read-only mount of ``folder`` does to the two things that write there: SQLite
    and the probe's temporary file (elsewhere temporary files work as usual)."""
    _sqlite_refuses(monkeypatch, "unable to open database file")
    real = tempfile.TemporaryFile

    def temporary_file(*args, **kwargs):
        if Path(kwargs.get("dir") or tempfile.gettempdir()) == folder:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", temporary_file)


def test_sqlite_errors_of_a_read_only_folder_become_one_error(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    _read_only_file_system(monkeypatch, data)
    with pytest.raises(DataFolderError) as info:
        Database()
    assert str(info.value) == f"data folder {data} is not writable (read-only file system)"


def test_the_cli_prints_the_read_only_folder_as_one_line(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    _read_only_file_system(monkeypatch, data)
    assert main(["init-db"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: data folder {data} is not writable (read-only file system)\n"
    assert captured.out == ""


def test_a_read_only_database_file_is_named(tmp_path, monkeypatch):
    db_file = tmp_path / "other" / "rc.db"
    url = f"sqlite:///{db_file}"
    Database(url).dispose()
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    _sqlite_refuses(monkeypatch, "attempt to write a readonly database")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if Path(path) == db_file
                        else real_access(path, mode, *a, **k))
    with pytest.raises(DataFolderError, match=f"^database {db_file} is read-only$"):
        Database(url)


def test_other_database_errors_pass_unchanged(tmp_path, monkeypatch):
    """A locked or broken database is not the folder's fault: its own error stays."""
    from sqlalchemy.exc import OperationalError

    _sqlite_refuses(monkeypatch, "database is locked")
    with pytest.raises(OperationalError, match="database is locked"):
        Database(f"sqlite:///{tmp_path / 'rc.db'}")


def test_a_database_outside_the_data_folder_is_called_database_folder(blocked, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(DataFolderError, match=f"^database folder {blocked} does not exist"):
        Database(f"sqlite:///{blocked / 'rc.db'}")


# ------------------------------------------------------------------------- the server's start

def test_the_server_start_helper_prints_one_line_and_exits(blocked):
    code = ("from radconcord.db.session import Database, exit_on_data_folder_error\n"
            "exit_on_data_folder_error(Database)\n"
            "print('not reached')\n")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["RADCONCORD_DATA_DIR"] = str(blocked)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == db_session.DATA_FOLDER_EXIT_STATUS
    assert proc.stdout == ""
    assert _one_line(proc) == (f"radconcord: data folder {blocked} does not exist and cannot "
                               f"be created ({blocked.parent} is a file, not a folder)")


def test_the_real_server_start_prints_one_line_and_exits(blocked):
    """``streamlit run webapp/server.py`` itself: the lifespan opens the database before the
    first request, so the process ends with the one line instead of serving pages that fail."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["RADCONCORD_DATA_DIR"] = str(blocked)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "streamlit", "run", "webapp/server.py", "--server.headless",
         "true", "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == db_session.DATA_FOLDER_EXIT_STATUS, proc.stderr
    assert _one_line(proc) == (f"radconcord: data folder {blocked} does not exist and cannot "
                               f"be created ({blocked.parent} is a file, not a folder)")


def test_the_server_start_helper_returns_the_database(tmp_path, monkeypatch):
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    db = exit_on_data_folder_error(Database)
    try:
        assert db.url == f"sqlite:///{tmp_path / 'radconcord.db'}"
    finally:
        db.dispose()


def test_the_app_shows_no_traceback_and_logs_one_line(blocked, monkeypatch, caplog):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(blocked))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    caplog.set_level("ERROR")
    at = AppTest.from_file(str(REPO / "webapp" / "app.py"), default_timeout=60).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "The server cannot open its database; its log says why."]
    [record] = [r for r in caplog.records if "data folder" in r.getMessage()]
    assert record.getMessage().startswith(f"radconcord: data folder {blocked} does not exist")
    assert record.exc_info is None


# --------------------------------------------------------------------------- the output folder

def _staging_left(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name] if folder.is_dir() else []


def test_export_under_a_file_prints_one_line_and_writes_nothing(study_db, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    out = blocker / "export"
    proc = _cli(["export", "--study", STUDY, "--format", "jsonl", "--output", str(out)],
                data_dir=tmp_path / "data", database_url=study_db)
    assert _one_line(proc) == (f"error: output folder {out} cannot be created "
                               f"({blocker} is a file, not a folder)")
    assert blocker.read_text() == "x"


def test_export_into_a_read_only_folder_prints_one_line_and_writes_nothing(study_db,
                                                                          read_only_dir,
                                                                          tmp_path):
    out = read_only_dir / "export"
    proc = _cli(["export", "--study", STUDY, "--format", "rexval", "--output", str(out)],
                data_dir=tmp_path / "data", database_url=study_db)
    line = _one_line(proc)
    assert line.startswith(f"error: output folder {out} cannot be created ({read_only_dir} "
                           "is not writable: ")
    assert not any(read_only_dir.iterdir())


def test_export_into_a_read_only_folder_simulated(db, make_study, tmp_path, monkeypatch):
    make_study(db, STUDY, 2)

    out = tmp_path / "exports" / "x"
    real = tempfile.TemporaryFile

    def temporary_file(*args, **kwargs):
        if kwargs.get("dir") == out.parent:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", temporary_file)
    with pytest.raises(InvalidInput, match=(
            f"^output folder {out} cannot be created \\({out.parent} is not writable: "
            "read-only file system\\)$")):
        exports.export_study(db, Actor.system(), study_name=STUDY, fmt="jsonl", out_dir=out)
    assert not out.exists()


def _fail_after_the_first_files(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Make the export write pairs.jsonl and ratings.jsonl, then find the disk full."""
    real = exports._jsonl_files
    written: list[Path] = []

    def then_disk_full(tmp, pairs, cells):
        real(tmp, pairs, cells)
        written.extend(p for p in tmp.iterdir() if p.is_file())
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp / "next.jsonl"))

    monkeypatch.setattr(exports, "_jsonl_files", then_disk_full)
    return written


def test_an_export_that_fails_half_way_leaves_nothing(db, make_study, tmp_path, monkeypatch):
    make_study(db, STUDY, 2)
    written = _fail_after_the_first_files(monkeypatch)
    parent = tmp_path / "exports"
    out = parent / "x"
    with pytest.raises(OSError, match="No space left on device"):
        exports.export_study(db, Actor.system(), study_name=STUDY, fmt="jsonl", out_dir=out)
    assert {p.name for p in written} == {"pairs.jsonl", "ratings.jsonl"}
    assert not out.exists()
    assert list(parent.iterdir()) == []


def test_the_cli_prints_a_half_way_failure_as_one_line(db, make_study, tmp_path, monkeypatch,
                                                       capsys):
    make_study(db, STUDY, 2)
    monkeypatch.setenv("DATABASE_URL", db.url)
    _fail_after_the_first_files(monkeypatch)
    out = tmp_path / "x"
    out.mkdir()  # an empty folder is a valid target; it must stay as it was
    assert main(["export", "--study", STUDY, "--format", "jsonl", "--output", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: output folder {out} was not written "
                                   "(No space left on device: ")
    assert out.is_dir() and not any(out.iterdir())
    assert _staging_left(tmp_path) == []


def test_a_failed_pairwise_export_keeps_the_existing_file(tmp_path, monkeypatch, capsys,
                                                          fast_password_hashing):
    from radconcord.backend.util import SafeCsvWriter
    from tests.services.test_pairwise import build

    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    db = Database(f"sqlite:///{tmp_path / 'pw.db'}")
    build(db)
    db.dispose()
    out = tmp_path / "pw.csv"
    out.write_text("the previous export\n")

    def disk_full(self, row):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(SafeCsvWriter, "writerow", disk_full)
    assert main(["pairwise", "export", "--study", "PW", "--output", str(out),
                 "--database-url", db.url]) == 2
    assert capsys.readouterr().err == f"error: {out}: cannot write (No space left on device)\n"
    assert out.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".pw.csv")) == []


def test_the_probes_leave_no_file(tmp_path):
    """The writability probes use anonymous temporary files: nothing stays in the folder."""
    exports._check_output_parent(tmp_path / "x")
    assert db_session.data_folder_problem(tmp_path / "radconcord.db") is None
    assert list(tmp_path.iterdir()) == []
