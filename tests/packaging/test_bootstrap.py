"""scripts/bootstrap.sh (behind both README commands): when it reinstalls and when it does not.

It runs on a copy of the script and pyproject.toml with a stand-in ``.venv/bin/python`` that
logs every pip call, and a stand-in ``java`` on PATH (the app mode's only system package), so
no package is installed and nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "bootstrap.sh", root / "scripts" / "bootstrap.sh")
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copy2(REPO / "setup.py", root / "setup.py")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    log = root / "pip.log"
    python = bin_dir / "python"
    # `python -c "import torch"` succeeds; every other call (pip) is logged.
    python.write_text(f'#!/bin/sh\n[ "$1" = "-c" ] && exit 0\necho "$*" >> {log}\n')
    (bin_dir / "radconcord").write_text("#!/bin/sh\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "java").write_text("#!/bin/sh\n")
    for f in (python, bin_dir / "radconcord", tools / "java"):
        f.chmod(0o755)
    return root


def _bootstrap(root: Path, mode: str) -> str:
    env = dict(os.environ, PATH=f"{root.parent / 'tools'}:{os.environ['PATH']}")
    proc = subprocess.run(["bash", "scripts/bootstrap.sh", mode], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _stamp(root: Path, mode: str) -> str:
    # pyproject.toml, setup.py (the package layout) and the script's own steps: a changed
    # step reinstalls.
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes()
                            + (root / "setup.py").read_bytes()
                            + (root / "scripts" / "bootstrap.sh").read_bytes()).hexdigest()
    return f"{mode} {digest}"


def _pip_calls(root: Path) -> list[str]:
    log = root / "pip.log"
    return log.read_text().splitlines() if log.exists() else []


def test_app_after_a_test_install_does_not_reinstall(checkout):
    """[dev] includes [all]: run-app.sh after test.sh starts at once, without pip."""
    stamp = checkout / ".venv" / ".radconcord-installed"
    stamp.write_text(_stamp(checkout, "test") + "\n")
    assert "bootstrap: ready (app, unchanged)" in _bootstrap(checkout, "app")
    assert _pip_calls(checkout) == []
    assert stamp.read_text().strip() == _stamp(checkout, "test")  # still a test install


def test_app_install_is_kept_until_pyproject_changes(checkout):
    stamp = checkout / ".venv" / ".radconcord-installed"
    stamp.write_text(_stamp(checkout, "app") + "\n")
    assert "unchanged" in _bootstrap(checkout, "app")
    assert _pip_calls(checkout) == []

    stamp.write_text("app 0000\n")  # installed from another pyproject.toml
    out = _bootstrap(checkout, "app")
    assert "bootstrap: ready (app)" in out and "unchanged" not in out
    calls = _pip_calls(checkout)
    assert calls[-1] == "-m pip install -q -e .[all]"
    assert any(c.startswith("-m pip install -q torch==") for c in calls)
    assert stamp.read_text().strip() == _stamp(checkout, "app")


def test_an_install_prints_its_progress(checkout):
    """Issue 24: a multi-minute install whose only output is pip's warnings looks hung; each
    step says what it does before it starts and how long it took."""
    out = _bootstrap(checkout, "app").splitlines()
    steps = [line for line in out if line.startswith("bootstrap: [")]
    assert [s.split("]")[0] for s in steps] == ["bootstrap: [1/3", "bootstrap: [2/3",
                                                "bootstrap: [3/3"]
    assert "installing radconcord[all]" in steps[2]
    assert sum("done in" in line for line in out) == 3
    # Every step is announced before its pip call runs.
    assert len(_pip_calls(checkout)) == 3
