"""RadConcord's Python API: score report pairs, correlate metrics with radiologists.

>>> import radconcord
>>> df = radconcord.score(references=["No pleural effusion."],
...                       candidates=["No effusion."], metrics=["bleu4", "rougeL"])

:func:`score`, :func:`metrics`, :func:`correlate`, :func:`load_study` and
:func:`import_scores` live in
:mod:`radconcord.api`; reward functions for RL training in :mod:`radconcord.rewards`;
:func:`metric` (a function as a metric family) and the metric contract for plug-in packages
in :mod:`radconcord.plugins` (docs/plugins.md). Importing this package loads no model and
opens no database.

``radconcord`` is the only import name the package installs. The application itself lives in
``radconcord.backend``, ``radconcord.db``, ``radconcord.webapp`` and ``radconcord.assets``:
in the wheel those are folders inside this package; in a checkout they are the repository's
top-level ``backend/``, ``db/``, ``webapp/`` and ``assets/`` folders, which this package's
search path reaches (below), so one import path serves both.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# A checkout (or an editable install of one): the application folders sit beside this package,
# not inside it. Extending the search path makes `radconcord.backend` that folder; the wheel
# ships them inside, so nothing is added there.
if not (_HERE / "backend").is_dir() and (_HERE.parent / "backend" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))  # noqa: F821 (a package's __path__)

# Resolved on first use (PEP 562): `import radconcord.backend.x` runs this file first, and the
# API pulls in the services, which must not import each other through a half-built package.
_LAZY = {
    "InputError": "radconcord.api",
    "MetricUnavailable": "radconcord.api",
    "Study": "radconcord.api",
    "correlate": "radconcord.api",
    "correlate_study": "radconcord.api",
    "import_scores": "radconcord.api",
    "load_study": "radconcord.api",
    "metrics": "radconcord.api",
    "score": "radconcord.api",
    "metric": "radconcord.plugins",
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from radconcord.backend.config import APP_VERSION

        return APP_VERSION
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'radconcord' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
