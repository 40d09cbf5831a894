"""The pip package: build the sdist and the wheel, install the wheel into a fresh venv, run it.

The venv reaches no network: the wheel is installed with ``--no-deps --no-index`` and the
dependencies (torch included) come from the test environment's site-packages through a
``.pth`` line, which adds that folder to ``sys.path`` without running its ``.pth`` files (so the
checkout's editable install is not active there). Every command runs outside the checkout,
so only the installed package can answer.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What the sdist is built from: the files a release would hold.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "backend", "db", "webapp", "radconcord",
           "assets")
PAIRS = [
    ("same", "No pleural effusion. Heart size is normal.",
     "No pleural effusion. Heart size is normal."),
    ("differ", "No pleural effusion. Heart size is normal.",
     "Large right pneumothorax with mediastinal shift."),
]

pytestmark = pytest.mark.slow


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """sdist and wheel built by `python -m build` (the wheel from the unpacked sdist)."""
    root = tmp_path_factory.mktemp("pkg")
    src = root / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    out = root / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
         cwd=root)
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed and the test environment's packages visible."""
    root = tmp_path_factory.mktemp("venv")
    env_dir = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], cwd=root)
    py = env_dir / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=root).stdout.strip())
    (site / "_radconcord_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(dist.glob("radconcord-*.whl"))
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps",
          "--no-index", "--quiet", str(wheel)], cwd=root)
    return env_dir


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "DATABASE_URL", "VIRTUAL_ENV")}
    env["RADCONCORD_DATA_DIR"] = str(tmp / "data")
    env["HF_HUB_OFFLINE"] = "1"
    return env


def test_sdist_and_wheel_hold_the_runtime_files(dist):
    """Migrations, metric cards, demo assets and the console script ship in both archives."""
    wheel = next(dist.glob("radconcord-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for member in ("db/migrations/env.py", "db/migrations/script.py.mako",
                   "db/migrations/versions/0001_initial_schema.py",
                   "backend/metrics/cards/bleu.md", "assets/demo/cases.json",
                   "webapp/server.py", "backend/cli/progress.py"):
        assert f"radconcord/{member}" in names, member
    for member in ("radconcord/api.py", "radconcord/rewards.py", "radconcord/py.typed"):
        assert member in names, member
    versions = sorted(p.name for p in (REPO / "db/migrations/versions").glob("*.py"))
    shipped = sorted(Path(n).name for n in names
                     if n.startswith("radconcord/db/migrations/versions/")
                     and n.endswith(".py"))
    assert shipped == versions
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    entry_points = zipfile.ZipFile(wheel).read(meta).decode()
    assert "radconcord = radconcord.cli:main" in entry_points
    metadata = zipfile.ZipFile(wheel).read(meta.replace("entry_points.txt", "METADATA")).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    # torch without a build or an exact pin: the one the user installed first satisfies it.
    torch = [r for r in requires if r.split()[1].startswith("torch")]
    assert torch == ["Requires-Dist: torch>=2.4"]
    assert any("streamlit" in r for r in requires)
    assert any("psycopg" in r and "extra == \"postgres\"" in r for r in requires)
    assert any(r.startswith("Requires-Dist: ray") and "extra == \"ray\"" in r for r in requires)

    sdist = next(dist.glob("radconcord-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    assert {"pyproject.toml", "db/migrations/script.py.mako", "assets/demo/cases.json",
            "backend/metrics/cards/bleu.md"} <= members


def test_the_wheel_adds_one_import_name(dist, venv, tmp_path):
    """Only `radconcord` (and its dist-info) lands in site-packages: the application folders
    are inside it, so a user's own `db`, `backend` or `webapp` package cannot collide."""
    wheel = next(dist.glob("radconcord-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"radconcord"}
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["radconcord"]
    site = next((venv / "lib").glob("python3*/site-packages"))
    installed = {p.name for p in site.iterdir()
                 if not p.name.endswith((".dist-info", ".pth")) and p.name != "__pycache__"}
    assert installed == {"radconcord"}
    env = _env(tmp_path)
    for name in ("backend", "db", "webapp", "assets"):
        probe = subprocess.run([str(venv / "bin" / "python"), "-c", f"import {name}"],
                               cwd=tmp_path, env=env, capture_output=True, text=True)
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, name


def test_installed_package_runs_metrics_and_score(venv, tmp_path):
    """`radconcord metrics` and `radconcord score` from the wheel, outside the checkout.

    The score run goes through the score cache, so the installed package migrates a new
    SQLite database with the migrations it ships. bleu4 values must equal the checkout's
    in-process API on the same pairs, and be ~1 for identical texts and ~0 for disjoint ones.
    """
    env = _env(tmp_path)
    py = venv / "bin" / "python"
    where = _run([str(py), "-c", "import radconcord.backend, radconcord.db.session as s;"
                  "print(radconcord.backend.__file__); print(s.MIGRATIONS_DIR)"],
                 cwd=tmp_path, env=env).stdout.split()
    assert all(Path(w).is_relative_to(venv) for w in where), where

    listing = _run([str(venv / "bin" / "radconcord"), "metrics", "--json"], cwd=tmp_path,
                   env=env)
    catalog = {m["family"]: m for m in json.loads(listing.stdout)}
    assert catalog["bleu"]["available"] is True
    assert [k["key"] for k in catalog["bleu"]["keys"]] == ["bleu1", "bleu2", "bleu3", "bleu4"]
    assert catalog["radcliq"]["keys"][0]["direction"] == "lower"
    table = _run([str(venv / "bin" / "radconcord"), "metrics"], cwd=tmp_path, env=env).stdout
    assert "metric families available here" in table

    pairs = tmp_path / "pairs.csv"
    with pairs.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "reference", "candidate"])
        w.writerows(PAIRS)
    out = tmp_path / "scores.csv"
    run = _run([str(venv / "bin" / "radconcord"), "score", "--input", str(pairs), "--metrics",
                "bleu4", "--output", str(out)], cwd=tmp_path, env=env)
    assert "bleu: 2 computed, 0 from cache" in run.stdout
    assert (tmp_path / "data" / "radconcord.db").is_file()
    with out.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["id"] for r in rows] == ["same", "differ"]
    values = {r["id"]: float(r["bleu4"]) for r in rows}

    import radconcord

    expected = radconcord.score(references=[p[1] for p in PAIRS],
                                candidates=[p[2] for p in PAIRS], ids=[p[0] for p in PAIRS],
                                metrics=["bleu4"])
    assert values == expected["bleu4"].to_dict()
    assert math.isclose(values["same"], 1.0, abs_tol=1e-6)
    assert values["differ"] < 1e-6

    again = _run([str(venv / "bin" / "radconcord"), "score", "--input", str(pairs), "--metrics",
                  "bleu4", "--output", str(out)], cwd=tmp_path, env=env)
    assert "bleu: 0 computed, 2 from cache" in again.stdout


def test_installed_script_keeps_data_out_of_site_packages(venv, tmp_path):
    """Without RADCONCORD_DATA_DIR the script's database goes to the user's data folder."""
    env = _env(tmp_path)
    del env["RADCONCORD_DATA_DIR"]
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("id,reference,candidate\na,No effusion.,No effusion.\n", encoding="utf-8")
    _run([str(venv / "bin" / "radconcord"), "score", "--input", str(pairs), "--metrics",
          "rougeL", "--output", str(tmp_path / "s.csv")], cwd=tmp_path, env=env)
    assert (tmp_path / "xdg" / "radconcord" / "radconcord.db").is_file()
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert not (site / "data").exists()


def test_installed_api_and_module_entry(venv, tmp_path):
    """`import radconcord` and `python -m radconcord` from the wheel; no database written."""
    env = _env(tmp_path)
    py = venv / "bin" / "python"
    code = ("import radconcord; df = radconcord.score(references=['No effusion.'],"
            " candidates=['No effusion.'], metrics='rougeL'); print(df.loc['0', 'rougeL'])")
    assert float(_run([str(py), "-c", code], cwd=tmp_path, env=env).stdout) == 1.0
    assert not (tmp_path / "data").exists()
    helped = _run([str(py), "-m", "radconcord", "score", "--help"], cwd=tmp_path, env=env)
    assert "--metrics" in helped.stdout
    script_help = _run([str(venv / "bin" / "radconcord"), "--help"], cwd=tmp_path, env=env)
    assert script_help.stdout.startswith("usage: radconcord [-h]")
    assert "radconcord app" in script_help.stdout and "train-er2score" in script_help.stdout
