"""Package layout only (everything else is in pyproject.toml).

The wheel installs one import name, ``radconcord``. The repository keeps the application in
the top-level folders ``backend/``, ``db/``, ``webapp/`` and ``assets/``; they are packaged as
``radconcord.backend``, ``radconcord.db``, ``radconcord.webapp`` and ``radconcord.assets``.
pyproject.toml's package discovery cannot add a prefix to what it finds, so the list is built
here.
"""

from setuptools import find_namespace_packages, setup

MAPPED = ("backend", "db", "webapp", "assets")

# Namespace discovery: db/migrations, the metric cards, webapp/views and the demo assets are
# folders without __init__.py that the installed package needs at run time.
found = find_namespace_packages(
    include=[pattern for name in MAPPED for pattern in (name, f"{name}.*")],
    exclude=["*__pycache__*"],
)

setup(
    packages=["radconcord", *(f"radconcord.{name}" for name in found)],
    package_dir={"radconcord": "radconcord", **{f"radconcord.{n}": n for n in MAPPED}},
)
