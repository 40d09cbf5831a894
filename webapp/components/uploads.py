"""Errors about uploaded files, told with the names the files were uploaded under.

Pages save uploads into a temporary folder on the server before calling a service, so the
service's messages name paths such as ``/tmp/radconcord-upload-1a2b/cases.csv``. The admin
never saw that path; they uploaded ``cases.csv``. These helpers put the uploaded names back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from radconcord.backend.errors import InvalidInput, ServiceError
from radconcord.webapp import state

T = TypeVar("T")


def named_after_uploads(exc: ServiceError, folder: Path,
                        names: Mapping[Path, str]) -> ServiceError:
    """``exc`` with the temporary upload paths in its message replaced by the uploads' names.

    Args:
        exc: The error raised by a parser or a service.
        folder: The temporary folder the uploads were saved in.
        names: Saved path -> the name the file was uploaded under.

    Returns:
        ``exc`` itself when its message names no temporary path, else an ``InvalidInput``
        with the rewritten message.
    """
    text = str(exc)
    for saved, name in names.items():
        for form in {str(saved.resolve()), str(saved)}:
            text = text.replace(form, name)
    for form in {str(folder.resolve()), str(folder)}:
        text = text.replace(form + "/", "").replace(form, "the uploaded files")
    return exc if text == str(exc) else InvalidInput(text)


def call_with_uploads(folder: Path, names: Mapping[Path, str], fn: Callable[..., T],
                      *args: Any, **kwargs: Any) -> T:
    """Call ``fn``; on a service error show it (uploads named as uploaded) and stop the page.

    Args:
        folder: The temporary folder the uploads were saved in.
        names: Saved path -> the name the file was uploaded under.
        fn: The parser or service to call.
        args: Positional arguments for ``fn``.
        kwargs: Keyword arguments for ``fn``.
    """
    try:
        return fn(*args, **kwargs)
    except ServiceError as exc:
        state.stop_with_error(named_after_uploads(exc, folder, names))
