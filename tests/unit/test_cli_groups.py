"""The grouped command line: ``radconcord study archive``, ``radconcord user create``...

The everyday commands stay top-level; the rest sit in groups, and every flat name they had
before the grouping still works as a hidden alias (same flags, same handler, same exit
codes) that ``--help`` does not show.
"""

from __future__ import annotations

import argparse

import pytest

from radconcord.backend import cli
from radconcord.backend.cli import common

#: The old flat name of each grouped command: what users' scripts call.
OLD_TO_NEW = {
    "create-user": ("user", "create"),
    "reset-password": ("user", "reset-password"),
    "deactivate": ("user", "deactivate"),
    "reactivate": ("user", "reactivate"),
    "list-users": ("user", "list"),
    "build-study": ("study", "build"),
    "import-scores": ("study", "import-scores"),
    "export-radpref": ("study", "export-radpref"),
    "study-settings": ("study", "settings"),
    "assign": ("study", "assign"),
    "assign-strategy": ("study", "assign-strategy"),
    "adjudicators": ("study", "adjudicators"),
    "training-items": ("study", "training-items"),
    "qualification": ("study", "qualification"),
    "qc": ("study", "qc"),
    "simulate-rating": ("study", "simulate-rating"),
    "archive-study": ("study", "archive"),
    "delete-study": ("study", "delete"),
    "init-db": ("db", "init"),
    "seed-demo": ("db", "seed-demo"),
    "import-demo": ("db", "import-demo"),
    "train-er2score": ("model", "train-er2score"),
    "train-concord": ("model", "train-concord"),
    "llm-serve": ("model", "serve-llm"),
    "uncertainty": ("model", "uncertainty"),
}

#: Unchanged, top-level: users' scripts rely on them.
TOP_LEVEL = ("score", "metrics", "import-pairs", "import-rexval", "import-radpref", "correlate",
             "export", "report", "worker", "benchmark")

GROUPS = ("study", "user", "db", "model", "jobs", "pairwise")


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _command(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    for name in names:
        parser = _subcommands(parser).choices[name]
    return parser


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.build_parser(prog="radconcord").parse_args([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def _listed(help_text: str) -> set[str]:
    """The commands a help text lists (its indented 'name  help' lines and the usage set)."""
    names = set()
    for line in help_text.splitlines():
        if line.startswith("    ") and not line.startswith("     "):
            names.add(line.split()[0])
        if "{" in line and "}" in line:
            names.update(line[line.index("{") + 1:line.index("}")].split(","))
    return names


def _signature(parser: argparse.ArgumentParser) -> list[tuple]:
    return sorted(
        (tuple(a.option_strings), a.dest, repr(a.default), a.required, repr(a.choices), a.nargs)
        for a in parser._actions
    )


def test_the_aliases_are_exactly_the_old_flat_names():
    assert cli.old_names() == OLD_TO_NEW


@pytest.mark.parametrize("group", GROUPS)
def test_each_group_help_lists_its_subcommands(group, capsys):
    parser = cli.build_parser(prog="radconcord")
    expected = set(_subcommands(_command(parser, group)).choices)
    assert expected
    text = _help(capsys, group)
    assert text.startswith(f"usage: radconcord {group} ")
    assert expected <= _listed(text)


def test_the_groups_hold_the_grouped_commands(capsys):
    for old, (group, name) in OLD_TO_NEW.items():
        text = _help(capsys, group)
        assert name in _listed(text), (old, group, name)
        assert old not in _listed(text) or old == name


def test_top_level_help_shows_the_groups_and_the_unchanged_commands_only(capsys):
    listed = _listed(_help(capsys))
    assert set(TOP_LEVEL) <= listed
    assert set(GROUPS) <= listed
    assert listed.isdisjoint(OLD_TO_NEW), sorted(listed & set(OLD_TO_NEW))
    assert listed == set(TOP_LEVEL) | set(GROUPS)


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_the_unchanged_commands_are_still_top_level(name, capsys):
    parser = cli.build_parser()
    assert name in _subcommands(parser).choices
    assert _help(capsys, name).startswith(f"usage: radconcord {name} ")


@pytest.mark.parametrize(("old", "new"), sorted(OLD_TO_NEW.items()))
def test_an_old_name_has_the_same_flags_and_handler_as_its_new_name(old, new):
    parser = cli.build_parser()
    alias, grouped = _command(parser, old), _command(parser, *new)
    assert alias is not grouped
    assert _signature(alias) == _signature(grouped)
    assert alias.get_default("func") is grouped.get_default("func") is not None


def test_an_old_name_parses_to_the_same_arguments():
    parser = cli.build_parser()
    argv = ["--study", "s", "--raters", "a,b", "--per-pair", "2"]
    old = vars(parser.parse_args(["assign", *argv]))
    new = vars(parser.parse_args(["study", "assign", *argv]))
    assert old.pop("command") == "assign" and new.pop("command") == "study"
    assert new.pop("study_command") == "assign"
    assert old == new


def test_an_old_name_still_shows_its_own_help(capsys):
    text = _help(capsys, "archive-study")
    assert text.startswith("usage: radconcord archive-study [-h] --study STUDY [--undo]")
    assert "old name of 'study archive'" in text


@pytest.mark.parametrize("argv", [["archive-study"], ["study", "archive"]])
def test_a_usage_error_exits_2_under_either_name(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "the following arguments are required: --study" in capsys.readouterr().err


def test_a_group_without_a_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["user"])
    assert exc.value.code == 2
    assert "usage: python -m backend user" in capsys.readouterr().err


def test_old_and_new_names_behave_the_same(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/c.db")
    assert cli.main(["db", "init"]) == 0
    assert cli.main(["init-db"]) == 0
    capsys.readouterr()
    assert cli.main(["user", "list"]) == 0
    new = capsys.readouterr()
    assert cli.main(["list-users"]) == 0
    assert capsys.readouterr() == new


def test_an_unknown_group_is_refused():
    commands = common.Commands(argparse.ArgumentParser().add_subparsers())
    with pytest.raises(KeyError):
        commands.group("no-such-group")
