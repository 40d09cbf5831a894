"""Files and names that a queued job will use, checked and kept safe until the worker runs it.

A page cannot hand a worker its uploads in memory: it saves them under the data folder
(:func:`new_upload_dir`, ``<data dir>/uploads/<stamp>-<hex>/``) and the job's params carry
paths relative to the data folder (:func:`data_relative`). The worker resolves them with
:func:`resolve_data_path`, which refuses any path that leaves the data folder, and removes
the upload folder when the job ends (:func:`remove_upload_dir`). Upload folders older than
:data:`UPLOAD_TTL` (a job cancelled while queued, a page closed mid-upload) are removed
whenever a new one is made.

:func:`check_name_not_pending` refuses a study name that a queued or running job is about
to create, so two builds or imports of one name are caught when queued, not at the end.
"""

from __future__ import annotations

import datetime as dt
import secrets
import shutil
from pathlib import Path

from radconcord.backend import clock, config
from radconcord.backend.errors import InvalidInput

UPLOADS_SUBDIR = "uploads"
#: Upload folders older than this are removed when a new one is made.
UPLOAD_TTL = dt.timedelta(days=7)
#: Job kinds that create a study named by their ``study_name`` param.
CREATING_KINDS = ("build_oracle", "import")


def uploads_root() -> Path:
    """``<data dir>/uploads``."""
    return config.data_dir() / UPLOADS_SUBDIR


def new_upload_dir() -> Path:
    """A new, empty folder for one request's uploads (old ones are cleared first)."""
    root = uploads_root()
    root.mkdir(parents=True, exist_ok=True)
    _remove_old(root, clock.utcnow() - UPLOAD_TTL)
    stamp = clock.utcnow().strftime("%Y%m%dT%H%M%S")
    folder = root / f"{stamp}-{secrets.token_hex(4)}"
    folder.mkdir()
    return folder


def _remove_old(root: Path, cutoff: dt.datetime) -> None:
    for child in root.iterdir():
        try:
            mtime = dt.datetime.fromtimestamp(child.stat().st_mtime, dt.UTC)
        except OSError:
            continue
        if child.is_dir() and mtime < cutoff:
            shutil.rmtree(child, ignore_errors=True)


def save_upload(folder: Path, name: str, data: bytes) -> Path:
    """Write an uploaded file into ``folder`` under its base name only.

    Raises:
        InvalidInput: a name with no usable base name (``""``, ``.``, ``..``).
    """
    base = Path(name).name
    if not base or base in {".", ".."}:
        raise InvalidInput(f"upload: unusable file name {name!r}")
    path = folder / base
    path.write_bytes(data)
    return path


def data_relative(path: Path) -> str:
    """``path`` relative to the data folder (``/`` separators), for a job's params.

    Raises:
        InvalidInput: the path lies outside the data folder.
    """
    root = config.data_dir()
    resolved = Path(path).resolve()
    if not resolved.is_relative_to(root):
        raise InvalidInput(f"{path} lies outside the data folder {root}")
    return resolved.relative_to(root).as_posix()


def resolve_data_path(relative: str, what: str) -> Path:
    """The absolute path of a job param that names a file inside the data folder.

    Args:
        relative: Path relative to the data folder.
        what: What the path is, for the error message (``"cases file"``).

    Raises:
        InvalidInput: an absolute path, or one that leaves the data folder.
    """
    root = config.data_dir()
    if not isinstance(relative, str) or not relative.strip():
        raise InvalidInput(f"{what}: no path given")
    if Path(relative).is_absolute():
        raise InvalidInput(f"{what}: {relative!r} must be relative to the data folder")
    resolved = (root / relative).resolve()
    if not resolved.is_relative_to(root):
        raise InvalidInput(f"{what}: {relative!r} lies outside the data folder")
    return resolved


def remove_upload_dir(relative: str | None) -> None:
    """Remove an upload folder named relative to the data folder; anything else is left."""
    if not relative:
        return
    try:
        folder = resolve_data_path(relative, "upload folder")
    except InvalidInput:
        return
    if folder.parent == uploads_root().resolve():
        shutil.rmtree(folder, ignore_errors=True)


def check_name_not_pending(db: object, study_name: str) -> None:
    """Refuse ``study_name`` when a queued or running job is about to create that study.

    Raises:
        InvalidInput: such a job exists (its id is named).
    """
    from radconcord.backend.jobs import queue

    for kind in CREATING_KINDS:
        for job in queue.list_jobs(db, kind=kind):
            if job.finished:
                continue
            if str(job.params.get("study_name", "")).strip() == study_name:
                raise InvalidInput(f"study {study_name!r} is being created by job {job.id} "
                                   f"({job.status}); choose another name")
