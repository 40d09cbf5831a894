"""RadConcord's Python API: score report pairs, correlate metrics with radiologists.

>>> import radconcord
>>> df = radconcord.score(references=["No pleural effusion."],
...                       candidates=["No effusion."], metrics=["bleu4", "rougeL"])

:func:`score`, :func:`metrics`, :func:`correlate` and :func:`load_study` live in
:mod:`radconcord.api`; reward functions for RL training in :mod:`radconcord.rewards`. Importing
this package loads no model and opens no database.
"""

from backend.config import APP_VERSION as __version__
from radconcord.api import (
    InputError,
    MetricUnavailable,
    Study,
    correlate,
    correlate_study,
    load_study,
    metrics,
    score,
)

__all__ = [
    "InputError",
    "MetricUnavailable",
    "Study",
    "__version__",
    "correlate",
    "correlate_study",
    "load_study",
    "metrics",
    "score",
]
