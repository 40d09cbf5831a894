"""Runtime settings read from the environment (nothing is cached at import)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
APP_VERSION = "0.1.0"


def is_checkout() -> bool:
    """Whether the code runs from a source checkout (else from an installed package)."""
    return (REPO_ROOT / "pyproject.toml").is_file()


def data_dir() -> Path:
    """Folder for the SQLite file, imported images and exports.

    ``RADCONCORD_DATA_DIR`` when set; else ``data/`` in a checkout; else, for an installed
    package (whose code sits in site-packages), the user's data folder
    (``$XDG_DATA_HOME/radconcord``, default ``~/.local/share/radconcord``).
    """
    value = os.environ.get("RADCONCORD_DATA_DIR")
    if value:
        return Path(value).resolve()
    if is_checkout():
        return (REPO_ROOT / "data").resolve()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return (Path(base) / "radconcord").resolve()


def database_url() -> str:
    """``DATABASE_URL`` if set, else a SQLite file in the data folder."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    return f"sqlite:///{data_dir() / 'radconcord.db'}"


def model_dir() -> Path | None:
    """Optional folder of local model weights (``RADCONCORD_MODEL_DIR``)."""
    value = os.environ.get("RADCONCORD_MODEL_DIR")
    return Path(value).resolve() if value else None


def assets_dir() -> Path:
    """Bundled demo study and other project-written assets."""
    return REPO_ROOT / "assets"


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def seed_demo_requested() -> bool:
    """Whether ``RADCONCORD_SEED_DEMO`` allows the demo (on unless 0/false/no/off/empty)."""
    value = os.environ.get("RADCONCORD_SEED_DEMO", "1").strip().lower()
    return value not in {"0", "false", "no", "off", ""}


def listens_on_loopback_only(address: str | None) -> bool:
    """Whether a server bound to ``address`` is reachable from this machine only.

    ``None`` or an empty address means all interfaces (Streamlit's default).
    """
    return bool(address) and str(address).strip().lower() in LOOPBACK_HOSTS
