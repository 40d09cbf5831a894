"""The ``radconcord`` console script: ``python -m backend`` under the package's name.

``radconcord app [streamlit args]`` starts the web app from the installed package (the same
``streamlit run webapp/server.py`` that ``scripts/run-app.sh`` runs in a checkout); every
other command is ``python -m backend``'s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The checkout's .streamlit/config.toml, which an installed package does not have beside the
# current folder (tests/packaging checks that the two agree).
STREAMLIT_SETTINGS: dict[str, str] = {
    "server.headless": "true",
    "server.runOnSave": "false",
    "server.maxUploadSize": "1024",
    "browser.gatherUsageStats": "false",
    "client.toolbarMode": "minimal",
    "client.showErrorDetails": "none",
    "client.disableDataExport": "true",
    "theme.base": "light",
    "theme.primaryColor": "#1f6f8b",
}


# `app` is not a backend command (it replaces this process by Streamlit's), so --help would
# not list it.
APP_HELP = ("radconcord app [STREAMLIT OPTIONS]: start the web app (127.0.0.1:8501 unless"
            " RADCONCORD_HOST or --server.port say otherwise)")


def app_command(argv: list[str]) -> list[str]:
    """The ``streamlit run`` command line of ``radconcord app``.

    It listens on loopback unless ``RADCONCORD_HOST`` says otherwise, as
    ``scripts/run-app.sh``.

    Args:
        argv: Extra ``streamlit run`` options (``--server.port 8600``), passed last.
    """
    import radconcord.webapp as webapp

    server = Path(webapp.__file__).resolve().parent / "server.py"
    address = os.environ.get("RADCONCORD_HOST", "127.0.0.1")
    settings = [f"--{name}={value}" for name, value in STREAMLIT_SETTINGS.items()]
    return [sys.executable, "-m", "streamlit", "run", str(server),
            f"--server.address={address}", *settings, *argv]


def _app(argv: list[str]) -> int:
    """Replace this process by the Streamlit server (signals reach it directly)."""
    cmd = app_command(argv)
    os.execv(cmd[0], cmd)
    return 0  # not reached


def installed_data_dir() -> Path | None:
    """The data folder for an installed package, or None when running from a checkout.

    ``backend.config.data_dir`` already chooses the user's data folder for an installed
    package; the script also exports it so the app's server process inherits the same one.
    """
    from radconcord.backend import config

    if config.is_checkout():
        return None
    return config.data_dir()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``radconcord`` script; returns the exit status.

    Args:
        argv: The arguments (default ``sys.argv[1:]``).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    data = installed_data_dir()
    if data is not None and "RADCONCORD_DATA_DIR" not in os.environ:
        # Set at the start of the process (the app's server inherits it), never in the
        # library: an explicit RADCONCORD_DATA_DIR or DATABASE_URL always wins.
        os.environ["RADCONCORD_DATA_DIR"] = str(data)
    if args[:1] == ["app"]:
        return _app(args[1:])
    from radconcord.backend.cli import main as backend_main

    # Usage lines and --help name the command the user typed, not `python -m backend`.
    return backend_main(args, prog="radconcord", epilog=APP_HELP)


if __name__ == "__main__":
    sys.exit(main())
