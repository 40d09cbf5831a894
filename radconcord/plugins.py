"""What a metric plug-in package imports: the metric contract and the ``@metric`` decorator.

A plug-in is a class (or a decorated function) in any installed package, registered under the
entry point group ``radconcord.metrics``; ``radconcord metrics`` lists it beside the built-in
families. docs/plugins.md is the guide; ``examples/radconcord-example-metric`` is a complete
package with one of each.

>>> from radconcord.plugins import metric
>>> @metric(name="my_len_ratio", higher_is_better=True, version="1", card="my_len_ratio.md")
... def my_len_ratio(references, candidates):
...     return [min(len(c), len(r)) / max(len(c), len(r), 1)
...             for r, c in zip(references, candidates)]
"""

from radconcord.backend.metrics.base import (
    BaseMetric,
    Metric,
    MetricInputError,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
    Resources,
    validate_pairs,
)
from radconcord.backend.metrics.plugins import CARD_SECTIONS, GROUP, card_problems, metric

__all__ = [
    "CARD_SECTIONS",
    "GROUP",
    "BaseMetric",
    "Metric",
    "MetricInputError",
    "MetricResult",
    "MetricSpec",
    "MetricUnavailable",
    "OutputSpec",
    "Resources",
    "card_problems",
    "metric",
    "validate_pairs",
]
