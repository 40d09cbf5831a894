"""No package imports a package above it (docs/architecture.md, "Layers").

Every module under backend/, db/ and webapp/ is parsed with ``ast``; every ``import`` and
``from ... import`` counts, at module level, inside functions and under ``TYPE_CHECKING``
alike (a function-level import is still a dependency, only a later one). A module may import
its own layer and the layers below it, never one above.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("backend", "db", "webapp", "radconcord")
# Folders of the repository that are packaged inside the one import name (setup.py):
# backend/x.py is the module radconcord.backend.x.
MAPPED = ("backend", "db", "webapp", "assets")

# Bottom to top. A module belongs to the longest package prefix listed here; a name ending in
# ":exact" matches that module alone (the ``backend`` package's own __init__ imports nothing,
# so it sits at the bottom without pulling all of backend.* down with it).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bottom", ("radconcord.backend:exact", "radconcord.backend.clock", "radconcord.backend.config",
                "radconcord.backend.errors", "radconcord.backend.types",
                "radconcord.backend.util")),
    ("db", ("radconcord.db",)),
    # imaging below metrics: a metric that reads an image uses imaging (vlscore), imaging
    # never needs a metric.
    ("imaging", ("radconcord.backend.imaging",)),
    ("metrics", ("radconcord.backend.metrics",)),
    ("scoring", ("radconcord.backend.scoring",)),
    ("datasets", ("radconcord.backend.datasets",)),
    ("analysis", ("radconcord.backend.analysis",)),
    # The figures of the typed analysis report, drawn once for the dashboard and the HTML
    # report (plotly lives here, not in the analysis core).
    ("figures", ("radconcord.backend.figures",)),
    # The job queue (table, registry of kind names, context) sits below the services, which
    # validate and enqueue; what runs a job (backend.runner: the worker and the kinds) sits
    # above them, since a kind may call a service. The registry names kinds as strings, so
    # the queue never imports a kind. Each is one package in one layer.
    ("job queue", ("radconcord.backend.jobs",)),
    ("services", ("radconcord.backend.services",)),
    ("job runners", ("radconcord.backend.runner",)),
    ("cli", ("radconcord.backend.cli", "radconcord.backend.__main__")),
    ("webapp", ("radconcord.webapp",)),
    # The public Python API (pip package) sits on top: it may start the app (radconcord app)
    # and call any service; nothing in the app imports it.
    ("api", ("radconcord:exact", "radconcord.api", "radconcord.cli", "radconcord.plugins",
             "radconcord.rewards", "radconcord.__main__")),
)

# Known violations in files this change could not edit, each with the fix it needs. The
# test fails on any violation not listed here and on any entry that no longer occurs, so the
# list can only shrink. Key: (file relative to the repository, imported module).
ALLOWED: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> tuple[int, str] | None:
    """(layer index, layer name) of a dotted module name, or None when outside the project."""
    best: tuple[int, int, str] | None = None  # (prefix length, index, name)
    for index, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            exact = prefix.removesuffix(":exact")
            if exact != prefix:
                hit = module == exact
            else:
                hit = module == prefix or module.startswith(prefix + ".")
            if hit and (best is None or len(exact) > best[0]):
                best = (len(exact), index, name)
    return None if best is None else (best[1], best[2])


def module_name(path: Path, root: Path = REPO) -> str:
    """Dotted module name of a file under ``root`` (backend/x.py is radconcord.backend.x)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts and parts[0] in MAPPED:
        parts.insert(0, "radconcord")
    return ".".join(parts)


def _is_module(dotted: str, root: Path) -> bool:
    parts = dotted.split(".")
    if len(parts) > 1 and parts[0] == "radconcord" and parts[1] in MAPPED:
        parts = parts[1:]
    base = root.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(path: Path, root: Path = REPO) -> list[tuple[int, str]]:
    """(line, module) of every project import in ``path``, relative imports resolved.

    ``from pkg import name`` yields ``pkg.name`` when ``name`` is a submodule of the project,
    so ``from radconcord.backend import cli`` counts as importing ``backend.cli``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    own = module_name(path, root)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.append((node.lineno, sub if _is_module(sub, root) else module))
    return sorted({(line, m) for line, m in found if m.split(".")[0] in ROOTS})


def project_modules(root: Path = REPO) -> list[Path]:
    """Every Python file under the layered roots."""
    return sorted(p for top in ROOTS if (root / top).is_dir() for p in (root / top).rglob("*.py"))


def violations(root: Path = REPO) -> tuple[list[str], set[tuple[str, str]]]:
    """(one message per upward import not in ALLOWED, the ALLOWED entries that occurred)."""
    messages: list[str] = []
    seen_allowed: set[tuple[str, str]] = set()
    for path in project_modules(root):
        rel = path.relative_to(root).as_posix()
        name = module_name(path, root)
        own = layer_of(name)
        if own is None:
            continue  # reported by test_every_module_is_placed_in_a_layer
        for line, module in imported_modules(path, root):
            target = layer_of(module)
            if target is None or target[0] <= own[0]:
                continue
            if (rel, module) in ALLOWED:
                seen_allowed.add((rel, module))
                continue
            messages.append(
                f"{rel}:{line}: {name} ({own[1]}) imports {module} ({target[1]}), a layer above"
            )
    return messages, seen_allowed


def test_every_module_is_placed_in_a_layer():
    unplaced = [p.relative_to(REPO).as_posix() for p in project_modules()
                if layer_of(module_name(p)) is None]
    assert unplaced == []


def test_no_module_imports_a_layer_above_its_own():
    messages, _ = violations()
    assert messages == [], "\n" + "\n".join(messages)


def test_allowed_exceptions_still_occur():
    """An exception that no longer occurs must leave ALLOWED, so the list only shrinks."""
    _, seen = violations()
    assert sorted(set(ALLOWED) - seen) == []


def test_lower_packages_hold_no_command_code():
    """Commands live in backend.cli only: no ``*commands.py``, no module-level
    ``register(subparsers)`` and no argparse anywhere else."""
    offenders = []
    for path in project_modules():
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("backend/cli/") or rel == "backend/__main__.py":
            continue
        if path.name.endswith("commands.py"):
            offenders.append(rel)
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders.extend(
            f"{rel}:{node.lineno}: def register"
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name == "register"
        )
        offenders.extend(
            f"{rel}:{line}: imports argparse"
            for line, module in _all_imports(tree)
            if module == "argparse"
        )
    assert offenders == []


def _all_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, top-level module name) of every import in ``tree``, third-party included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("radconcord.backend", "bottom"),
        ("radconcord.backend.anything_unlisted", None),
        ("radconcord.backend.util", "bottom"),
        ("radconcord.backend.metrics.registry", "metrics"),
        ("radconcord.backend.jobs", "job queue"),
        ("radconcord.backend.jobs.queue", "job queue"),
        ("radconcord.backend.jobs.context", "job queue"),
        ("radconcord.backend.runner", "job runners"),
        ("radconcord.backend.runner.worker", "job runners"),
        ("radconcord.backend.runner.kinds.score", "job runners"),
        ("radconcord.backend.cli.scoring", "cli"),
        ("radconcord.webapp.views.rate", "webapp"),
        ("numpy", None),
    ],
)
def test_layer_of_uses_the_longest_prefix(module, expected):
    found = layer_of(module)
    assert (found[1] if found else None) == expected


def test_a_planted_upward_import_is_reported_with_file_line_and_both_packages(tmp_path):
    """The checker itself, on a copy of the layout: imports inside functions, relative
    imports and ``from pkg import submodule`` are all caught; downward imports are not."""
    for package in ("backend", "backend/datasets", "backend/services"):
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "backend/services/auth.py").write_text(
        "from radconcord.backend.datasets import parser\n", encoding="utf-8"
    )
    (tmp_path / "backend/datasets/parser.py").write_text(
        "import json\n"
        "from radconcord.backend import errors\n"
        "def f():\n"
        "    from radconcord.backend.services import auth\n"
        "    return auth\n",
        encoding="utf-8",
    )
    (tmp_path / "backend/datasets/other.py").write_text(
        "from ..services.auth import login\nfrom . import parser\n", encoding="utf-8"
    )
    messages, _ = violations(tmp_path)
    assert messages == [
        "backend/datasets/other.py:1: radconcord.backend.datasets.other (datasets) imports"
        " radconcord.backend.services.auth (services), a layer above",
        "backend/datasets/parser.py:4: radconcord.backend.datasets.parser (datasets) imports"
        " radconcord.backend.services.auth (services), a layer above",
    ]


#: What the analysis core never imports: it takes arrays and frames and returns typed
#: results; reading a study is the loader's job (backend/services/study_data.py) and drawing
#: is the figures layer's.
ANALYSIS_FORBIDDEN = ("radconcord.db", "sqlalchemy", "streamlit", "plotly")


def analysis_impurities(root: Path = REPO) -> list[str]:
    """``file:line: module`` for every forbidden import under backend/analysis (any depth)."""
    found = []
    for path in sorted((root / "backend" / "analysis").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            found.extend(f"{rel}:{node.lineno}: {name}" for name in names
                         if any(name == f or name.startswith(f + ".")
                                for f in ANALYSIS_FORBIDDEN))
    return found


def test_the_analysis_core_reads_no_database_and_draws_nothing():
    assert analysis_impurities() == []


def test_a_planted_database_import_in_analysis_is_reported(tmp_path):
    (tmp_path / "backend" / "analysis").mkdir(parents=True)
    (tmp_path / "backend" / "analysis" / "x.py").write_text(
        "import numpy\n"
        "def f():\n"
        "    from radconcord.db.models import Pair\n"
        "    import plotly.graph_objects as go\n", encoding="utf-8")
    assert analysis_impurities(tmp_path) == [
        "backend/analysis/x.py:3: radconcord.db.models",
        "backend/analysis/x.py:4: plotly.graph_objects",
    ]
