"""Metric plug-ins in the tests: the example package really installed, and fake distributions.

``example_plugin`` (session) pip-installs ``examples/radconcord-example-metric`` from a copy
of its folder into a temporary ``--target`` folder, with no network and no dependencies
(``--no-deps --no-index --no-build-isolation``: setuptools comes from the test venv). The
venv and the checkout are left as they were: nothing lands in site-packages, and the build
files go to the copy. ``plugin_site`` (per test module) puts that folder on ``sys.path`` and on
``PYTHONPATH`` (for subprocesses), makes the registry read the entry points again, and undoes
both afterwards, so the tests of other folders never see the plug-in.

``fake_plugins`` writes ``*.dist-info`` folders (METADATA + entry_points.txt) and modules into
a temporary folder on ``sys.path``: installed distributions as far as importlib.metadata can
tell, for the broken and clashing plug-ins.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from radconcord.backend.metrics import registry

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "radconcord-example-metric"
EXAMPLE_MODULE = "radconcord_example_metric"
EXAMPLE_DIST = "radconcord-example-metric"
EXAMPLE_VERSION = "0.1.0"
TAG = f"plugin:{EXAMPLE_DIST}=={EXAMPLE_VERSION}"


@dataclass(frozen=True)
class PluginSite:
    """Where the example plug-in is installed, and an environment for subprocesses."""

    path: Path
    env: dict[str, str]


def _forget_modules(prefixes: tuple[str, ...]) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in prefixes]:
        del sys.modules[name]


@pytest.fixture(scope="session")
def example_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the example package was pip-installed into (``--target``)."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "source"
    # A copy: building writes build/ and *.egg-info beside the sources.
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    site = root / "site"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--target", str(site), str(source)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    if done.returncode != 0:
        pytest.fail(f"pip could not install the example plug-in:\n{done.stderr}", pytrace=False)
    assert (site / EXAMPLE_MODULE / "cards" / "finding_words.md").is_file()
    return site


def _activate(path: Path) -> None:
    sys.path.insert(0, str(path))
    importlib.invalidate_caches()
    registry.refresh_plugins()


def _deactivate(path: Path, modules: tuple[str, ...]) -> None:
    if str(path) in sys.path:
        sys.path.remove(str(path))
    _forget_modules(modules)
    importlib.invalidate_caches()
    registry.refresh_plugins()
    if "streamlit" in sys.modules:
        # The Metrics page caches the catalogue for a minute: later page tests must not see
        # these plug-ins in it.
        sys.modules["streamlit"].cache_data.clear()


@pytest.fixture(scope="module")
def plugin_site(example_plugin: Path) -> Iterator[PluginSite]:
    """The example plug-in importable and registered for this test module."""
    old = os.environ.get("PYTHONPATH")
    pythonpath = os.pathsep.join([str(example_plugin), *([old] if old else [])])
    os.environ["PYTHONPATH"] = pythonpath  # for the subprocesses this module starts
    _activate(example_plugin)
    try:
        yield PluginSite(example_plugin, {**os.environ, "PYTHONPATH": pythonpath})
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
        _deactivate(example_plugin, (EXAMPLE_MODULE,))


def write_distribution(root: Path, name: str, version: str, entry_points: dict[str, str],
                       modules: dict[str, str] | None = None) -> None:
    """An installed distribution as importlib.metadata finds it on ``sys.path``."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    lines = ["[radconcord.metrics]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for module, code in (modules or {}).items():
        (root / f"{module}.py").write_text(code, encoding="utf-8")


@pytest.fixture
def fake_plugins(tmp_path: Path) -> Iterator[Callable[..., None]]:
    """``add(name, version, entry_points, modules)`` installs a fake distribution; the
    registry reads the entry points again after each call, and once more after the test."""
    root = tmp_path / "fake-site"
    root.mkdir()
    modules: list[str] = []
    sys.path.insert(0, str(root))

    def add(name: str, version: str, entry_points: dict[str, str],
            module_code: dict[str, str] | None = None) -> None:
        write_distribution(root, name, version, entry_points, module_code)
        modules.extend(module_code or {})
        importlib.invalidate_caches()
        registry.refresh_plugins()

    try:
        yield add
    finally:
        _deactivate(root, tuple(modules))
