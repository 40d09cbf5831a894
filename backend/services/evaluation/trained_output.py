"""The output folder of a training job: never half-written, and found again by a retry.

Both trainers (``er2train`` for ER2Score adapters, ``concord_train`` for concord models) run
as jobs that a worker may be killed in. A job trains into a staging folder beside the output
named after the job, writes its summary (with the job id) there, and renames the folder onto
the output in one ``os.replace``. A retried job that finds its own summary at the output
returns it instead of training again; one killed before the rename starts afresh.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from radconcord.backend.errors import InvalidInput


def check_output(output: Path) -> None:
    """Refuse an output that exists and is not an empty folder.

    Raises:
        InvalidInput: naming the folder.
    """
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise InvalidInput(f"output folder {output} already exists and is not empty")


def finished_record(output: Path, job_id: int, summary_file: str) -> dict[str, Any] | None:
    """The summary that job ``job_id`` wrote at ``output``, or ``None`` if it finished none."""
    try:
        data = json.loads((output / summary_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("job_id") != job_id:
        return None
    return data


def staging_folder(output: Path, job_id: int | None) -> Path:
    """Where to train: ``output`` itself outside a job, else a fresh ``.NAME.job-ID`` beside
    it (a killed run's leftovers removed)."""
    target = output if job_id is None else output.parent / f".{output.name}.job-{job_id}"
    if job_id is not None and target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def publish(target: Path, output: Path, record: dict[str, Any], summary_file: str) -> None:
    """Write ``record`` into ``target`` and rename it onto ``output`` (an empty or missing
    folder, checked by :func:`check_output`); on failure the staging folder is removed."""
    try:
        (target / summary_file).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if output.exists():
            output.rmdir()
        os.replace(target, output)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
