"""Fixtures shared by the scoring tests of this folder."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def load_scoring_doubles() -> ModuleType:
    """``scoring_doubles.py`` as one module per process (loaded by path: the radgraph wheel
    installs a top-level ``tests`` package that would shadow ``tests.services``)."""
    name = "scoring_doubles"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "scoring_doubles.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


@pytest.fixture
def d(monkeypatch) -> ModuleType:
    """The scoring test doubles, registered in the metric registry for this test only."""
    mod = load_scoring_doubles()
    mod.install(monkeypatch.setitem)
    mod.reset()
    return mod
