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
"""

from backend.config import APP_VERSION as __version__
from radconcord.api import (
    InputError,
    MetricUnavailable,
    Study,
    correlate,
    correlate_study,
    import_scores,
    load_study,
    metrics,
    score,
)
from radconcord.plugins import metric

__all__ = [
    "InputError",
    "MetricUnavailable",
    "Study",
    "__version__",
    "correlate",
    "correlate_study",
    "import_scores",
    "load_study",
    "metric",
    "metrics",
    "score",
]
