"""Metric families from other installed packages (entry point group ``radconcord.metrics``).

A package declares ``name = "module:Object"`` under ``[project.entry-points."radconcord.metrics"]``.
The object is a metric class (the :class:`~backend.metrics.base.Metric` contract plus a
``card``) or a function decorated with :func:`metric`. :func:`discover` reads the entry points
once, on the registry's first use (:mod:`backend.metrics.registry`), and turns each into a
registry :class:`~backend.metrics.entry.Entry`:

* Only the plug-in's module is imported there, never its weights (``load()`` does that), so
  its keys, directions, kind and corpus dependence come from the class itself.
* A name taken by a built-in family or key, or by a plug-in discovered before (packages in
  name order), is refused with both origins named, and the plug-in is not imported.
* A plug-in that cannot be imported, or whose class breaks the contract (no ``spec``, no card,
  an incomplete card), is still registered, with no keys and the error: catalogues list it as
  unavailable with that error, and scoring records it unavailable.
* The class the registry hands out is a subclass of the plug-in's (:func:`_pin`) whose
  ``signature()`` ends with ``|plugin:<distribution>==<version>``, so scores cached under one
  release of a plug-in are never reused for another, and whose ``availability()``, ``load()``,
  ``signature()`` and constructor turn an unexpected exception into "unavailable: <error>"
  rather than an exception that would stop the other families.

docs/plugins.md is the author's guide.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricInputError,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
)
from radconcord.backend.metrics.entry import Entry

log = logging.getLogger(__name__)

#: The entry point group a package registers its metric families under.
GROUP = "radconcord.metrics"

#: Sections every metric card has (markdown headings, any level), built-in or plug-in.
CARD_SECTIONS: tuple[str, ...] = (
    "Description", "Inputs", "Outputs", "Values from papers", "Limitations", "Citation",
)

#: The attribute :func:`metric` sets on the function it decorates: the generated class.
FUNCTION_ATTR = "__radconcord_metric__"

F = TypeVar("F", bound=Callable[..., Any])


class PluginError(Exception):
    """A plug-in that breaks the contract; the message says what to change."""


# -- cards ----------------------------------------------------------------------------------


def card_sections(text: str) -> dict[str, str]:
    """Markdown headings (any level) of a card -> the text under them."""
    out: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if m:
            current = m.group(1).strip()
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def card_problems(text: str, keys: Sequence[str]) -> list[str]:
    """What a card lacks: a section of :data:`CARD_SECTIONS`, a key, a direction.

    Args:
        text: The card's markdown.
        keys: The family's output keys; each must be named under "Outputs".

    Returns:
        One message per problem (empty when the card is complete).
    """
    sections = card_sections(text)
    missing = [s for s in CARD_SECTIONS if not sections.get(s, "").strip()]
    if missing:
        return [f"missing or empty section(s): {', '.join(missing)}"]
    problems = []
    outputs = sections["Outputs"]
    undocumented = [k for k in keys if k not in outputs]
    if undocumented:
        problems.append(f"Outputs does not list {', '.join(undocumented)}")
    if not re.search(r"higher|lower", outputs, re.IGNORECASE):
        problems.append("Outputs gives no direction (higher/lower is better)")
    return problems


def card_text(cls: type) -> str:
    """The card of a plug-in class: its ``card`` attribute, markdown text or a file path.

    A path (a string without a line break, or an ``os.PathLike``) is relative to the folder
    of the module that defines the class (absolute paths are taken as they are).

    Raises:
        PluginError: no ``card``, or a card file that cannot be read.
    """
    card = getattr(cls, "card", None)
    if isinstance(card, str) and "\n" in card:
        return card
    if not isinstance(card, str | os.PathLike) or not os.fspath(card).strip():
        raise PluginError(
            "no card: give the class a `card` attribute (markdown text, or a file path"
            " relative to its module) with the sections " + ", ".join(CARD_SECTIONS)
        )
    path = Path(os.fspath(card))
    if not path.is_absolute():
        module = sys.modules.get(cls.__module__)
        where = getattr(module, "__file__", None)
        if where is None:
            raise PluginError(f"card '{path}': module {cls.__module__} has no file to be"
                              " relative to; give the card as text")
        path = Path(where).parent / path
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PluginError(f"card file {path} cannot be read: {exc}") from None


# -- the @metric decorator ------------------------------------------------------------------


def metric(
    name: str,
    *,
    higher_is_better: bool = True,
    version: str = "1",
    card: str | os.PathLike[str] | None = None,
    description: str = "",
    kind: str = "plugin",
    citation: str = "",
) -> Callable[[F], F]:
    """Make ``f(references, candidates) -> list[float]`` a one-key metric family.

    The function gets the reference and candidate texts of a batch (two lists of ``str``,
    aligned, never empty strings) and returns one float per pair (``None`` or ``nan`` where
    the metric is undefined). Its keyword-only parameters with defaults become the family's
    options (``--set NAME.option=value``). It stays a plain function; the metric class is
    generated and kept on it, which is what the registry finds through the entry point.

    The signature is ``NAME|version:VERSION`` then each option as ``|option:value``; the
    registry appends ``|plugin:<distribution>==<version>``.

    Args:
        name: Family name and output key (what ``--metrics`` takes).
        higher_is_better: The key's direction.
        version: Bump it whenever the function's numbers change (part of the signature, so
            cached scores of the old version are not reused).
        card: The card: markdown text, or a file path relative to the function's module.
        description: One line for tables.
        kind: The family's kind shown in catalogues.
        citation: Short citation.

    Returns:
        The decorator; it returns the function unchanged apart from the attribute.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"metric name must be an identifier (letters, digits, _), got {name!r}")

    def wrap(fn: F) -> F:
        setattr(fn, FUNCTION_ATTR, _function_metric(
            fn, name=name, higher_is_better=higher_is_better, version=str(version), card=card,
            description=description, kind=kind, citation=citation))
        return fn

    return wrap


def _function_metric(
    fn: Callable[..., Any],
    *,
    name: str,
    higher_is_better: bool,
    version: str,
    card: str | os.PathLike[str] | None,
    description: str,
    kind: str,
    citation: str,
) -> type:
    params = inspect.signature(fn).parameters.values()
    defaults = {p.name: p.default for p in params
                if p.kind is inspect.Parameter.KEYWORD_ONLY
                and p.default is not inspect.Parameter.empty}

    def _score(
        self: BaseMetric, *, references: list[str], candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        values = list(fn(list(references), list(candidates), **self.options))
        if len(values) != len(references):
            raise MetricInputError(
                f"{fn.__qualname__} returned {len(values)} values for {len(references)} pairs")
        return MetricResult(values={name: [math.nan if v is None else float(v)
                                           for v in values]})

    def signature(self: BaseMetric) -> str:
        opts = "".join(f"|{k}:{self.options[k]}" for k in sorted(self.options))
        return f"{name}|version:{version}{opts}"

    namespace = {
        "__doc__": fn.__doc__ or f"Metric family '{name}' computed by {fn.__qualname__}.",
        "__module__": fn.__module__,
        "__qualname__": f"{fn.__qualname__}.metric",
        "spec": MetricSpec(name=name, outputs=(OutputSpec(name, higher_is_better,
                                                          description),), citation=citation),
        "defaults": defaults,
        "kind": kind,
        "card": card,
        "version": version,
        "function": staticmethod(fn),
        "_score": _score,
        "signature": signature,
    }
    return type(f"{name}_metric", (BaseMetric,), namespace)


# -- discovery ------------------------------------------------------------------------------


@dataclass
class Discovery:
    """What :func:`discover` found.

    Attributes:
        entries: Registry entries of the plug-ins kept (a broken one with its ``error``).
        classes: Family -> the class the registry instantiates (signature pinned).
        ignored: One message per refused plug-in (a clash), naming both origins.
    """

    entries: list[Entry] = field(default_factory=list)
    classes: dict[str, type] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def _distribution(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "", ""
    return str(dist.metadata["Name"] or dist.name), str(dist.version)


def origin(ep: metadata.EntryPoint) -> str:
    """``package NAME VERSION (entry point NAME = module:Object)``, for messages."""
    dist, version = _distribution(ep)
    package = f"package {dist} {version}" if dist else "an unknown package"
    return f"{package} (entry point {ep.name} = {ep.value})"


def _taken(name: str, entries: Mapping[str, Entry],
           key_to_family: Mapping[str, str]) -> str | None:
    """How ``name`` is already used (a family or an output key), or None."""
    if name in entries:
        return _describe_family(name, entries[name])
    if name in key_to_family:
        family = key_to_family[name]
        return f"the output key '{name}' of {_describe_family(family, entries.get(family))}"
    return None


def _describe_family(family: str, entry: Entry | None) -> str:
    if entry is None:
        return f"the family '{family}'"
    if entry.origin is None:
        return f"the built-in family '{family}' ({entry.target})"
    return f"the plug-in family '{family}' from {entry.origin}"


def _metric_class(obj: Any) -> type:  # noqa: ANN401 - whatever the entry point names
    """The metric class an entry point names (a decorated function gives its class)."""
    cls = getattr(obj, FUNCTION_ATTR, None) if not inspect.isclass(obj) else obj
    if cls is None:
        raise PluginError(f"{obj!r} is neither a metric class nor a function decorated with"
                          " @radconcord.metric")
    return cls


def _spec_of(name: str, cls: type) -> MetricSpec:
    spec = getattr(cls, "spec", None)
    if not isinstance(spec, MetricSpec):
        raise PluginError(f"{cls.__qualname__} has no `spec` (a radconcord.plugins.MetricSpec)")
    if spec.name != name:
        raise PluginError(f"the entry point is named '{name}' but {cls.__qualname__}.spec.name"
                          f" is '{spec.name}'; they must be equal")
    keys = spec.keys
    if not keys or len(set(keys)) != len(keys) or not all(isinstance(k, str) and k
                                                           for k in keys):
        raise PluginError(f"{cls.__qualname__}.spec must declare one or more distinct output"
                          f" keys (got {list(keys)})")
    for method in ("availability", "load", "score", "signature"):
        if not callable(getattr(cls, method, None)):
            raise PluginError(f"{cls.__qualname__} has no {method}() method")
    return spec


def _corpus_rule(cls: type) -> bool | Callable[[Mapping[str, Any]], bool]:
    rule = inspect.getattr_static(cls, "corpus_dependent", False)
    if isinstance(rule, staticmethod):
        rule = rule.__func__
    if isinstance(rule, bool):
        return rule
    if callable(rule):
        return rule
    raise PluginError(f"{cls.__qualname__}.corpus_dependent must be a bool, or a staticmethod"
                      " of the options returning one")


def discover(
    entries: Mapping[str, Entry],
    key_to_family: Mapping[str, str],
    entry_points: Iterable[metadata.EntryPoint] | None = None,
) -> Discovery:
    """Read the ``radconcord.metrics`` entry points and build their registry entries.

    Args:
        entries: The families registered so far (built-ins), for the clash check.
        key_to_family: Their output keys.
        entry_points: The entry points to read (default: every installed package's).

    Returns:
        The plug-ins kept, their classes, and the refused ones' messages. Never raises for a
        plug-in's fault.
    """
    if entry_points is None:
        entry_points = metadata.entry_points(group=GROUP)
    # Name order, so which of two clashing plug-ins wins does not depend on sys.path order.
    ordered = sorted(entry_points, key=lambda ep: (_distribution(ep)[0].lower(), ep.name))
    found = Discovery()
    families = dict(entries)
    keys = dict(key_to_family)
    for ep in ordered:
        where = origin(ep)
        used = _taken(ep.name, families, keys)
        if used is not None:
            found.ignored.append(f"plug-in family '{ep.name}' from {where} clashes with"
                                 f" {used}; ignored")
            continue
        try:
            cls = _metric_class(ep.load())
            spec = _spec_of(ep.name, cls)
        except Exception as exc:
            # Any failure of foreign code (ImportError, SyntaxError, an exception at import)
            # makes this family unavailable, never the registry.
            error = exc if isinstance(exc, PluginError) else f"{type(exc).__name__}: {exc}"
            entry = Entry(ep.name, ep.value, (), "plugin", origin=where,
                          error=f"plug-in from {where} could not be loaded: {error}")
            families[ep.name] = entry
            found.entries.append(entry)
            continue
        clash = [(k, _taken(k, families, keys)) for k in spec.keys if k != ep.name]
        clash = [(k, used) for k, used in clash if used is not None]
        if clash:
            k, used = clash[0]
            found.ignored.append(f"plug-in family '{ep.name}' from {where} declares the output"
                                 f" key '{k}', which clashes with {used}; ignored")
            continue
        try:
            text = card_text(cls)
            problems = card_problems(text, spec.keys)
            if problems:
                raise PluginError("its card is incomplete: " + "; ".join(problems))
            entry = Entry(
                ep.name, ep.value, spec.keys, str(getattr(cls, "kind", "plugin") or "plugin"),
                bool(getattr(cls, "per_pair", True)),
                tuple(o.key for o in spec.outputs if not o.higher_is_better),
                _corpus_rule(cls), origin=where,
            )
        except Exception as exc:
            error = exc if isinstance(exc, PluginError) else f"{type(exc).__name__}: {exc}"
            entry = Entry(ep.name, ep.value, (), "plugin", origin=where,
                          error=f"plug-in from {where} is not usable: {error}")
        else:
            dist, version = _distribution(ep)
            tag = f"plugin:{dist}=={version}" if dist else f"plugin:{ep.value}"
            found.classes[ep.name] = _pin(cls, tag=tag, where=where)
            for k in spec.keys:
                keys[k] = ep.name
        families[ep.name] = entry
        found.entries.append(entry)
    for message in found.ignored:
        log.warning("%s", message)
    for entry in found.entries:
        if entry.error:
            log.warning("%s", entry.error)
    return found


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _pin(cls: type, *, tag: str, where: str) -> type:
    """A subclass of ``cls`` whose signature names the plug-in's release, and whose failures
    (construction, availability, load, signature) read as unavailable with the error.

    ``score()`` is left alone: the runner already turns its exceptions into a failed family.
    """

    def __init__(self: Any, **options: Any) -> None:  # noqa: ANN401 - the plug-in instance
        try:
            cls.__init__(self, **options)
        except (TypeError, ValueError, MetricUnavailable):
            raise  # bad options: the caller's request error, as for a built-in family
        except Exception as exc:
            raise MetricUnavailable(f"plug-in from {where}: {_one_line(exc)}") from exc

    def availability(self: Any) -> str | None:  # noqa: ANN401
        try:
            return cls.availability(self)
        except Exception as exc:
            return f"availability check failed: {_one_line(exc)}"

    def load(self: Any, device: str = "cpu") -> None:  # noqa: ANN401
        try:
            cls.load(self, device)
        except MetricUnavailable:
            raise
        except Exception as exc:
            raise MetricUnavailable(f"could not load: {_one_line(exc)}") from exc

    def signature(self: Any) -> str:  # noqa: ANN401
        try:
            sig = str(cls.signature(self))
        except MetricUnavailable:
            raise
        except Exception as exc:
            raise MetricUnavailable(f"signature() failed: {_one_line(exc)}") from exc
        return sig if tag in sig.split("|") else f"{sig}|{tag}"

    namespace = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "__init__": __init__,
        "availability": availability,
        "load": load,
        "signature": signature,
        "plugin_tag": tag,
        "plugin_origin": where,
    }
    return type(cls)(cls.__name__, (cls,), namespace)
