"""The ``radconcord`` console script: the same commands as ``python -m backend``, plus ``app``."""

from __future__ import annotations

import tomllib
from pathlib import Path

from radconcord import cli

REPO = Path(__file__).resolve().parents[2]


def _flatten(table: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def test_app_settings_are_the_checkouts_streamlit_config():
    """An installed package has no .streamlit/ beside the current folder: `radconcord app`
    passes the same settings on the command line (CSV export off, no error details, ...)."""
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert cli.STREAMLIT_SETTINGS == _flatten(config)


def test_app_command_runs_the_packaged_server_on_loopback(monkeypatch):
    monkeypatch.delenv("RADCONCORD_HOST", raising=False)
    cmd = cli.app_command(["--server.port", "8600"])
    assert cmd[1:4] == ["-m", "streamlit", "run"]
    assert Path(cmd[4]) == REPO / "webapp" / "server.py"
    assert "--server.address=127.0.0.1" in cmd
    assert "--client.disableDataExport=true" in cmd
    assert cmd[-2:] == ["--server.port", "8600"]
    monkeypatch.setenv("RADCONCORD_HOST", "0.0.0.0")
    assert "--server.address=0.0.0.0" in cli.app_command([])


def test_other_commands_are_python_m_backend(capsys):
    """Exit status and output of a user error are the backend command line's."""
    assert cli.main(["score", "--input", "x.csv", "--metrics", "nosuchmetric",
                     "--output", "o.csv"]) == 2
    assert "error:" in capsys.readouterr().err
