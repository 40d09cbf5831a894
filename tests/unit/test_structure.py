"""Two structural rules beside the layer rule (tests/unit/test_layers.py), over the same files.

- The underscore rule: no module uses another project module's private name. ``_name`` is
  private to the module that defines it (``from x import _y`` and ``x._y`` are refused
  outside ``x``); a private *module* (``kinds/_common.py``) is private to its package, so the
  package's own modules may import it. Dunder names (``__version__``) are public.
- The no-cycle rule: the project's import graph has no cycle. Every import counts, as in the
  layer test: at module level, inside functions and under ``TYPE_CHECKING`` alike (a
  function-level import hides a cycle from Python, not from the reader).

A helper that two modules need is given a public name in a module both may import.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

from tests.unit.test_layers import REPO, _is_module, imported_modules, module_name, project_modules


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _may_use(user: str, owner: str, name: str, root: Path) -> bool:
    """Whether module ``user`` may use ``owner``'s private ``name``: its own, or a private
    submodule of a package that ``user`` belongs to."""
    if user == owner:
        return True
    return _is_module(f"{owner}.{name}", root) and (user + ".").startswith(owner + ".")


def _private_modules(user: str, module: str, root: Path) -> list[str]:
    """Private components of the dotted ``module`` that ``user`` may not reach."""
    parts = module.split(".")
    return [
        ".".join(parts[: i + 1])
        for i, part in enumerate(parts)
        if i and _private(part) and not _may_use(user, ".".join(parts[:i]), part, root)
    ]


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ['a', 'b', 'c'], or None for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def private_uses(root: Path = REPO) -> list[str]:
    """One message per use of another project module's private name, sorted.

    Caught: ``from x import _y``, ``import x._y``, ``from x._y import z`` (outside ``x``) and
    ``mod._y`` (or ``pkg.mod._y``) where ``mod`` is a name bound by an import of a project
    module anywhere in the file.
    """
    messages: list[str] = []
    for path in project_modules(root):
        rel = path.relative_to(root).as_posix()
        user = module_name(path, root)
        package = user if path.name == "__init__.py" else user.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        bound: dict[str, str] = {}  # local name -> project module it names
        found: set[tuple[int, str]] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if not _is_module(alias.name, root):
                        continue
                    found.update((node.lineno, f"{m}") for m in
                                 _private_modules(user, alias.name, root))
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        bound[top] = top
            elif isinstance(node, ast.ImportFrom):
                module = _resolve(node, package)
                if not module or not _is_module(module, root):
                    continue
                found.update((node.lineno, m) for m in _private_modules(user, module, root))
                for alias in node.names:
                    if _private(alias.name) and not _may_use(user, module, alias.name, root):
                        found.add((node.lineno, f"{module}.{alias.name}"))
                    if _is_module(f"{module}.{alias.name}", root):
                        bound[alias.asname or alias.name] = f"{module}.{alias.name}"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            parts = _dotted(node.value)
            if not parts or parts[0] not in bound:
                continue
            owner = ".".join([bound[parts[0]], *parts[1:]])
            if _is_module(owner, root) and not _may_use(user, owner, node.attr, root):
                found.add((node.lineno, f"{owner}.{node.attr}"))
        messages.extend(f"{rel}:{line}: {user} uses {name}" for line, name in sorted(found))
    return sorted(messages)


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    """Module -> the project modules it imports (every import, as the layer test counts)."""
    graph: dict[str, set[str]] = {}
    for path in project_modules(root):
        name = module_name(path, root)
        graph.setdefault(name, set()).update(
            m for _, m in imported_modules(path, root) if m != name and _is_module(m, root))
    return graph


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.append(top)
                    if top == node:
                        break
                if len(members) > 1:
                    out.append(sorted(members))
    return sorted(out)


def _shortest_cycle(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """The shortest path start -> ... -> start inside one component (breadth first)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, ())):
            if child not in within:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    return []  # pragma: no cover - every member of a component lies on a cycle


def import_cycles(root: Path = REPO) -> list[str]:
    """Each import cycle as 'a -> b -> a': the shortest cycle through every module of every
    strongly connected component, each cycle once."""
    graph = import_graph(root)
    seen: set[tuple[str, ...]] = set()
    cycles: list[str] = []
    for members in _components(graph):
        within = set(members)
        for module in members:
            cycle = _shortest_cycle(graph, module, within)
            ring = cycle[:-1]
            pivot = ring.index(min(ring))
            key = tuple(ring[pivot:] + ring[:pivot])
            if key not in seen:
                seen.add(key)
                cycles.append(" -> ".join([*key, key[0]]))
    return cycles


def test_no_module_uses_another_modules_private_names():
    messages = private_uses()
    assert messages == [], "\n" + "\n".join(messages)


def test_the_import_graph_has_no_cycles():
    cycles = import_cycles()
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_planted_private_uses_and_cycles_are_reported(tmp_path):
    """The checkers themselves, on a copy of the layout: private names reached through
    ``from`` imports, module attributes and relative imports are caught, a module's own and a
    package's private submodule used inside the package are not; a cycle closed by a
    function-level import is reported with its path, an acyclic import is not."""
    for package in ("backend", "backend/services", "backend/jobs", "backend/jobs/kinds"):
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    files = {
        "backend/services/rating.py": (
            "def _target():\n    return 1\n"
            "def target():\n    return _target()\n"
            "__all__ = ['target']\n"
        ),
        "backend/services/calibration.py": (
            "from radconcord.backend.services import rating\n"
            "from radconcord.backend.services.rating import _target, target\n"
            "def f():\n"
            "    return rating._target() + rating.target() + rating.__name__\n"
        ),
        "backend/services/flags.py": (
            "import radconcord.backend.services.rating as r\n"
            "from .rating import _target as t\n"
            "def g():\n"
            "    return r._target, t\n"
        ),
        "backend/services/auth.py": (
            "from radconcord.backend.services import sessions\n"
        ),
        "backend/services/sessions.py": (
            "def login():\n"
            "    from radconcord.backend.services.auth import sessions\n"
            "    return sessions\n"
        ),
        "backend/jobs/kinds/_common.py": "def _helper():\n    return 1\n",
        "backend/jobs/kinds/score.py": (
            "from . import _common\n"
            "from radconcord.backend.jobs.kinds._common import _helper\n"
            "def run():\n    return _common._helper() + _helper()\n"
        ),
        "backend/jobs/worker.py": (
            "from radconcord.backend.jobs.kinds import _common, score\n"
            "from radconcord.backend.services import rating\n"
        ),
    }
    for rel, text in files.items():
        (tmp_path / rel).write_text(text, encoding="utf-8")

    assert private_uses(tmp_path) == [
        "backend/jobs/kinds/score.py:2: radconcord.backend.jobs.kinds.score uses"
        " radconcord.backend.jobs.kinds._common._helper",
        "backend/jobs/kinds/score.py:4: radconcord.backend.jobs.kinds.score uses"
        " radconcord.backend.jobs.kinds._common._helper",
        "backend/jobs/worker.py:1: radconcord.backend.jobs.worker uses"
        " radconcord.backend.jobs.kinds._common",
        "backend/services/calibration.py:2: radconcord.backend.services.calibration uses"
        " radconcord.backend.services.rating._target",
        "backend/services/calibration.py:4: radconcord.backend.services.calibration uses"
        " radconcord.backend.services.rating._target",
        "backend/services/flags.py:2: radconcord.backend.services.flags uses"
        " radconcord.backend.services.rating._target",
        "backend/services/flags.py:4: radconcord.backend.services.flags uses"
        " radconcord.backend.services.rating._target",
    ]
    assert import_cycles(tmp_path) == [
        "radconcord.backend.services.auth -> radconcord.backend.services.sessions"
        " -> radconcord.backend.services.auth",
    ]

    (tmp_path / "backend/services/sessions.py").write_text("def login():\n    return 1\n",
                                                           encoding="utf-8")
    assert import_cycles(tmp_path) == []
