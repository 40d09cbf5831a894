"""A throwaway PostgreSQL server for tests and benchmarks.

``PgServer`` runs ``initdb`` into a temporary folder, starts ``postgres`` on 127.0.0.1 with a
free port and a unix socket inside that folder, and removes everything on ``stop()``. As root
(CI containers) the server runs as the OS user ``postgres`` because PostgreSQL refuses to run
as root. Binaries are found through ``pg_config --bindir``, ``/usr/lib/postgresql/*/bin`` or
``PATH``; when none is found ``PgServerError`` says what to install.

Usage::

    with PgServer() as server:
        url = server.create_database("t1")  # postgresql+psycopg://postgres@127.0.0.1:PORT/t1
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SUPERUSER = "postgres"


class PgServerError(RuntimeError):
    """The server could not be found, initialised or started."""


def find_bindir() -> Path:
    """Folder holding ``initdb``, ``pg_ctl`` and ``postgres``.

    Raises:
        PgServerError: when no PostgreSQL server binaries are installed.
    """
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            candidates.append(Path(out))
        except (subprocess.SubprocessError, OSError):
            pass
    # Debian's server package keeps its binaries out of PATH; prefer the newest major version.
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(Path(p) for p in versions)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for folder in candidates:
        if all((folder / name).exists() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    raise PgServerError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found via pg_config "
        "--bindir, /usr/lib/postgresql/*/bin or PATH; install them (Debian: apt-get install "
        "postgresql) to run the PostgreSQL tests"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgServer:
    """A private PostgreSQL cluster in a temporary folder.

    Args:
        fast: turn off fsync and synchronous commit (fine for tests, whose data is thrown
            away; benchmarks pass ``False`` to measure a durable configuration).
        max_connections: server ``max_connections``.
    """

    def __init__(self, *, fast: bool = True, max_connections: int = 200) -> None:
        self.fast = fast
        self.max_connections = max_connections
        self.bindir = find_bindir()
        self.root: Path | None = None
        self.port: int | None = None
        self._as_postgres = os.geteuid() == 0

    # -- process helpers -------------------------------------------------------------------

    def _run(self, args: list[str], *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        cmd = [str(a) for a in args]
        if self._as_postgres:
            runuser = shutil.which("runuser")
            if runuser:
                cmd = [runuser, "-u", SUPERUSER, "--", *cmd]
            else:
                cmd = ["su", SUPERUSER, "-s", "/bin/sh", "-c", " ".join(_quote(a) for a in cmd)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/")
        if proc.returncode != 0:
            raise PgServerError(
                f"{Path(args[0]).name} failed ({proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()[-2000:]}"
            )
        return proc

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> PgServer:
        """Initialise and start the cluster; returns ``self``."""
        self.root = Path(tempfile.mkdtemp(prefix="radconcord-pg-"))
        if self._as_postgres:
            import pwd

            pw = pwd.getpwnam(SUPERUSER)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        data = self.root / "data"
        try:
            self._run(
                [
                    self.bindir / "initdb",
                    "-D", data,
                    "-U", SUPERUSER,
                    "-A", "trust",
                    "-E", "UTF8",
                    "--no-sync",
                    "--locale=C",
                ],
                timeout=120,
            )
            options = [
                "-c listen_addresses=127.0.0.1",
                f"-k {self.root}",
                f"-c max_connections={self.max_connections}",
            ]
            if self.fast:
                options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
            last_error: PgServerError | None = None
            # A free port can be taken between probing and binding; retry a few times.
            for _ in range(5):
                self.port = _free_port()
                try:
                    self._run(
                        [
                            self.bindir / "pg_ctl",
                            "-D", data,
                            "-l", self.root / "server.log",
                            "-o", " ".join([*options, f"-p {self.port}"]),
                            "-w", "-t", "60",
                            "start",
                        ],
                        timeout=90,
                    )
                    last_error = None
                    break
                except PgServerError as exc:
                    last_error = exc
                    time.sleep(0.2)
            if last_error is not None:
                raise PgServerError(f"{last_error}\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server log (for error messages)."""
        if self.root is None:
            return ""
        log = self.root / "server.log"
        return log.read_text(errors="replace")[-chars:] if log.exists() else ""

    def stop(self) -> None:
        """Stop the server and remove its folder (safe to call twice)."""
        if self.root is None:
            return
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            try:
                self._run([self.bindir / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"])
            except PgServerError:
                pass  # already gone; the folder is removed below either way
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- databases -------------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        """SQLAlchemy URL of ``database`` on this server."""
        if self.port is None:
            raise PgServerError("server not started")
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _admin_connect(self):  # noqa: ANN202 - psycopg connection
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres", autocommit=True
        )

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create database ``name`` (a copy of ``template`` if given) and return its URL."""
        from psycopg import sql

        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query = sql.SQL("{} TEMPLATE {}").format(query, sql.Identifier(template))
        with self._admin_connect() as conn:
            conn.execute(query)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name``, closing any connection still open to it."""
        from psycopg import sql

        with self._admin_connect() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def _quote(value: str) -> str:
    import shlex

    return shlex.quote(value)
