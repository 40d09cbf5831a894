"""The correlation report JSON of every entry point is byte-identical to its golden file.

``tests/fixtures/golden_correlate/generate.py`` builds four studies (the demo, a ReXVal-shaped
one, a pairwise one and a RadPref-shaped one) in a fresh SQLite database and runs the
``correlate`` command, ``radconcord.correlate_study``, ``study_correlation`` (dashboard and
``report`` job) and ``radconcord.load_study`` + ``radconcord.correlate`` with fixed seeds.
Here it runs in a subprocess (so that its pinned BLAS settings apply before numpy loads) and
writes to a temporary folder; every file must equal the committed one byte for byte.

A difference means the output changed. If the change is intended, re-run the generator (its
docstring says how) and commit the new files with the change; otherwise fix the code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden_correlate"
GENERATOR = GOLDEN / "generate.py"
ROOT = GOLDEN.parents[2]
NAMES = sorted(p.name for p in GOLDEN.glob("*.json"))

pytestmark = pytest.mark.slow


def _generator() -> ModuleType:
    """The generator module (for its constants and diff helper), loaded from its path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("golden_correlate_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generate() -> ModuleType:
    return _generator()


@pytest.fixture(scope="module")
def produced(tmp_path_factory, generate) -> Path:
    """The files the generator writes now, in a temporary folder."""
    out = tmp_path_factory.mktemp("golden_correlate")
    env = {**os.environ, **generate.PINNED_ENV}
    env.pop("DATABASE_URL", None)
    proc = subprocess.run(
        [sys.executable, str(GENERATOR), "--output-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        pytest.fail(f"generate.py exited with {proc.returncode}:\n{proc.stderr[-4000:]}",
                    pytrace=False)
    return out


def test_the_golden_files_are_there():
    # Four studies, each with cli/api/service/load_study files, plus the option variants.
    assert len(NAMES) >= 16, f"golden files missing in {GOLDEN}: {NAMES}"


def test_the_same_files_are_produced(produced):
    assert sorted(p.name for p in produced.glob("*.json")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_byte_identical(produced, generate, name):
    expected = (GOLDEN / name).read_bytes()
    actual = (produced / name).read_bytes()
    if actual != expected:
        pytest.fail(f"{name} differs from its golden file (re-run {GENERATOR.name} only if the"
                    f" change is intended):\n{generate.first_difference(expected, actual)}",
                    pytrace=False)
