"""The command-line package: every listed command family registers, none is dropped silently."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from radconcord.backend import cli
from radconcord.backend.cli import common

REPO = Path(__file__).resolve().parents[2]

# The stable command line (README "Command line") plus the admin commands.
EXPECTED_COMMANDS = {
    "metrics", "uncertainty", "train-er2score", "score", "import-pairs", "import-rexval",
    "export", "import-demo", "build-study", "init-db", "seed-demo", "assign", "create-user",
    "reset-password", "deactivate", "reactivate", "list-users", "correlate",
}


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_every_command_family_is_registered():
    commands = _commands(cli.build_parser())
    assert EXPECTED_COMMANDS <= commands
    if (REPO / "backend" / "cli" / "jobs.py").is_file():
        assert {"worker", "jobs"} <= commands


def test_command_modules_all_live_in_the_cli_package_one_per_file():
    assert all(name.startswith("radconcord.backend.cli.") for name in cli.COMMAND_MODULES)
    # common and progress are what the command modules share, not commands.
    helpers = {"__init__", "common", "progress"}
    files = {p.stem for p in (REPO / "backend" / "cli").glob("*.py")} - helpers
    assert {name.removeprefix("radconcord.backend.cli.") for name in cli.COMMAND_MODULES} == files


def test_a_missing_command_module_fails_loudly(monkeypatch):
    """The old parser skipped a family whose module was missing ("not built yet")."""
    monkeypatch.setattr(
        cli, "COMMAND_MODULES", (*cli.COMMAND_MODULES, "radconcord.backend.cli.no_such_family")
    )
    with pytest.raises(cli.CommandModuleError, match=r"backend\.cli\.no_such_family failed to"
                                                     r" import: ModuleNotFoundError"):
        cli.build_parser()


def test_a_command_module_whose_own_import_breaks_fails_loudly(tmp_path, monkeypatch):
    (tmp_path / "rc_broken_family.py").write_text(
        "raise ImportError('cannot import name X from somewhere')\n", encoding="utf-8"
    )
    (tmp_path / "rc_no_register.py").write_text("x = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "COMMAND_MODULES",
                        ("radconcord.backend.cli.metrics", "rc_broken_family"))
    with pytest.raises(cli.CommandModuleError, match="rc_broken_family failed to import:"
                                                     " ImportError: cannot import name X"):
        cli.build_parser()
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("rc_no_register",))
    with pytest.raises(cli.CommandModuleError, match=r"rc_no_register has no register"):
        cli.build_parser()
    for name in ("rc_broken_family", "rc_no_register"):
        sys.modules.pop(name, None)


def test_user_errors_maps_only_the_named_types():
    with pytest.raises(cli.UserError, match="^bad value$"), common.user_errors(ValueError):
        raise ValueError("bad value")
    with pytest.raises(KeyError), common.user_errors(ValueError):
        raise KeyError("not a user error")
    assert cli.UserError is common.UserError


def test_database_is_disposed_when_the_command_fails(tmp_path, monkeypatch):
    import radconcord.db.session as db_session

    disposed = []
    real = db_session.Database.dispose

    def dispose(self):
        disposed.append(self.url)
        real(self)

    monkeypatch.setattr(db_session.Database, "dispose", dispose)
    url = f"sqlite:///{tmp_path}/c.db"
    with pytest.raises(cli.UserError), common.database(url), common.service_errors():
        from radconcord.backend.errors import NotFound

        raise NotFound("no study named 'x'")
    assert disposed == [url]


def test_service_error_becomes_one_error_line_and_status_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/c.db")
    code = cli.main(["assign", "--study", "nope", "--raters", "a", "--per-pair", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "nope" in err
