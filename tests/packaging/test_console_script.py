"""The ``radconcord`` console script: the same commands as ``python -m backend``, plus ``app``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

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


def test_help_names_the_script_and_lists_app(capsys):
    """`radconcord --help` and a subcommand's usage say `radconcord`, and the help shows
    `radconcord app`, which is not a backend command."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: radconcord [-h]")
    assert "radconcord app" in text
    assert "python -m backend" not in text
    with pytest.raises(SystemExit):
        cli.main(["score", "--help"])
    assert capsys.readouterr().out.startswith("usage: radconcord score ")
    # The checkout's module keeps its own name.
    from radconcord.backend.cli import main as backend_main

    with pytest.raises(SystemExit):
        backend_main(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m backend [-h]")
