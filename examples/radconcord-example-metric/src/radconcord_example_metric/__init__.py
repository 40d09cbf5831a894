"""Example RadConcord metric plug-ins: ``finding_words`` (a class) and ``length_agreement``
(a decorated function). The entry points in pyproject.toml name them."""

__version__ = "0.1.0"
