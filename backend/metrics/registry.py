"""Lazy registry: family name -> "module:Class", output key -> family, and what the scoring
machinery must know of a family without importing it.

Nothing here imports a built-in metric module until a family is instantiated, so ``import
backend`` stays light (the pattern sacrebleu uses for its tokenizers). The registry is the one
place that knows a key's direction (:func:`higher_is_better`) and whether a family's values
depend on the scored set (:func:`corpus_dependent`); ``tests/unit/test_registry.py`` checks
both against the classes' own specs.

Plug-ins: families of other installed packages (entry point group ``radconcord.metrics``,
:mod:`backend.metrics.plugins`, docs/plugins.md) join :data:`ENTRIES` and
:data:`KEY_TO_FAMILY` once per process, the first time the registry lists its families or is
asked about a name no built-in family or key has (:func:`refresh_plugins` reads the entry
points again). Their classes are imported then, since a plug-in's keys and directions are
known only from its class; their weights load in ``load()`` like anyone's.
``RADCONCORD_PLUGINS=0`` skips them.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Hashable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from radconcord.backend.metrics.base import Metric, MetricUnavailable, Resources
from radconcord.backend.metrics.entry import CorpusRule, Entry

K = TypeVar("K")
V = TypeVar("V")

#: Where the built-in families' cards are (``<family>.md``).
CARDS_DIR = Path(__file__).resolve().parent / "cards"



def _e(
    family: str,
    target: str,
    keys: tuple[str, ...] | list[str],
    kind: str,
    per_pair: bool = True,
    *,
    lower: tuple[str, ...] | list[str] = (),
    corpus: bool | CorpusRule = False,
) -> Entry:
    # Built-in targets are written relative to this package (".lexical:Bleu"), like an import.
    if target.startswith("."):
        target = f"{__package__}{target}"
    return Entry(family, target, tuple(keys), kind, per_pair, tuple(lower), corpus)


def _bertscore_idf(options: Mapping[str, Any]) -> bool:
    # idf weights fitted on the references of each call (BertScore.fit_idf is not an option).
    return bool(options.get("idf", False))


def _vlscore_calibrated(options: Mapping[str, Any]) -> bool:
    # Without an explicit C, C is calibrated on the scored set.
    return options.get("c") is None


def _radcliq_inputs(options: Mapping[str, Any]) -> bool:
    # RadCliQ's BERTScore input with idf (never the published setting) makes it so too.
    nested = (options.get("input_options") or {}).get("bertscore") or {}
    return _bertscore_idf({**nested, **({"idf": options["bertscore.idf"]}
                                        if "bertscore.idf" in options else {})})


#: llm_rexval's keys: the two totals, then each ReXVal category significant/insignificant.
LLM_REXVAL_KEYS: tuple[str, ...] = (
    "llm_rexval_total",
    "llm_rexval_sig",
    *(f"llm_rexval_c{i}_{lvl}" for i in range(1, 7) for lvl in ("sig", "insig")),
)

#: concord's keys: the two totals, then each ReXVal category significant/insignificant.
CONCORD_KEYS: tuple[str, ...] = (
    "concord_total",
    "concord_sig",
    *(f"concord_c{i}_{lvl}" for i in range(1, 7) for lvl in ("sig", "insig")),
)


_ENTRIES: tuple[Entry, ...] = (
    _e("bleu", ".lexical:Bleu", ("bleu1", "bleu2", "bleu3", "bleu4"), "lexical"),
    _e("bleu2_radcliq", ".lexical:Bleu2RadCliQ", ("bleu2_radcliq",), "lexical"),
    _e("rouge", ".lexical:RougeL", ("rouge1", "rouge2", "rougeL"), "lexical"),
    _e("meteor", ".lexical:Meteor", ("meteor",), "lexical"),
    _e("cider", ".lexical:Cider", ("cider",), "lexical", corpus=True),
    _e(
        "bertscore",
        ".bertscore:BertScore",
        ("bertscore_p", "bertscore_r", "bertscore_f"),
        "embedding",
        corpus=_bertscore_idf,
    ),
    _e("smas", ".smas:Smas", ("smas",), "embedding"),
    _e("smas_var", ".smas:SmasVar", ("smas_var",), "uncertainty", per_pair=False,
       lower=("smas_var",)),
    _e("chexpert", ".chexpert:ChexpertLabels", ("chexpert_acc", "chexpert_f1"),
       "clinical"),
    _e("crg", ".crg:Crg", ("crg",), "clinical"),
    _e("radcliq", ".radcliq:RadCliQ", ("radcliq_v0", "radcliq_v1", "radcliq_v1_inv"),
       "composite", lower=("radcliq_v0", "radcliq_v1"), corpus=_radcliq_inputs),
    _e("temporal_f1", ".temporal:TemporalF1", ("temporal_f1",), "clinical"),
    _e("ratescore", ".ratescore:RaTEScore", ("ratescore",), "clinical"),
    _e("srrbert", ".srrbert:SrrBert",
       ("srrbert_weighted_f1", "srrbert_weighted_precision", "srrbert_weighted_recall"),
       "clinical"),
    _e("semb", ".chexbert:SEmb", ("semb",), "clinical"),
    _e("chexbert", ".chexbert:ChexbertLabels", ("chexbert_acc", "chexbert_f1"),
       "clinical"),
    _e(
        "radgraph",
        ".radgraph:RadGraph",
        ("radgraph_simple", "radgraph_partial", "radgraph_complete", "radgraph_combined"),
        "clinical",
    ),
    _e(
        "vlscore",
        ".vlscore:VLScore",
        ("vlscore", "vl_cosine", "vl_image_cosine", "vl_sphere"),
        "image",
        lower=("vl_sphere",),
        corpus=_vlscore_calibrated,
    ),
    _e(
        "green",
        ".green:Green",
        ("green", *(f"green_sig_{c}" for c in "abcdef"), "green_matched"),
        "learned",
        lower=tuple(f"green_sig_{c}" for c in "abcdef"),
    ),
    _e(
        "er2score",
        ".er2score:ER2Score",
        ("er2score", *(f"er2_cat{i}" for i in range(1, 7))),
        "learned",
    ),
    _e("llm_rexval", ".llm_rexval:LlmRexval", LLM_REXVAL_KEYS, "learned",
       lower=LLM_REXVAL_KEYS),
    _e("crimson", ".crimson:Crimson",
       ("crimson", "crimson_false", "crimson_missing", "crimson_attribute"), "learned",
       lower=("crimson_false", "crimson_missing", "crimson_attribute")),
    _e("concord", ".concord.family:Concord", CONCORD_KEYS, "learned", lower=CONCORD_KEYS),
    # Any RadEval metric through RadEval's own API (extra radconcord[radeval]).
    _e("radeval", ".radeval_bridge:RadEvalBridge", ("radeval",), "composite"),
)

class _Registry:
    """The built-in families from import on; the plug-ins from the first use on.

    The lock makes concurrent first uses (the web app's threads) wait for one discovery; a
    plug-in module that reads the registry while it is being imported (same thread) sees the
    built-ins instead of starting the discovery again.
    """

    def __init__(self, entries: Sequence[Entry]) -> None:
        self.entries: dict[str, Entry] = {e.family: e for e in entries}
        self.key_to_family: dict[str, str] = {k: e.family for e in entries for k in e.keys}
        self.classes: dict[str, type] = {}  # usable plug-in family -> its (pinned) class
        self.plugins: list[str] = []  # plug-in families registered, usable or not
        self.ignored: list[str] = []
        self.state = "new"  # new | discovering | done
        self.lock = threading.RLock()

    def ensure(self) -> None:
        if self.state == "done":
            return
        with self.lock:
            if self.state != "new":
                return
            self.state = "discovering"
            try:
                self._discover()
            finally:
                self.state = "done"

    def _discover(self) -> None:
        if os.environ.get("RADCONCORD_PLUGINS", "1").strip().lower() in ("0", "false", "no",
                                                                         "off"):
            return
        from radconcord.backend.metrics import plugins

        found = plugins.discover(self.entries, self.key_to_family)
        for entry in found.entries:
            self.entries[entry.family] = entry
            self.key_to_family.update((k, entry.family) for k in entry.keys)
            self.plugins.append(entry.family)
        self.classes.update(found.classes)
        self.ignored.extend(found.ignored)

    def forget_plugins(self) -> None:
        with self.lock:
            for family in self.plugins:
                entry = self.entries.pop(family, None)
                for key in entry.keys if entry is not None else ():
                    if self.key_to_family.get(key) == family:
                        del self.key_to_family[key]
            self.plugins.clear()
            self.classes.clear()
            self.ignored.clear()
            self.state = "new"


class _LazyView(MutableMapping[K, V]):
    """A dict of the registry that discovers the plug-ins when it must: on iteration, size,
    writes, and lookups of a name no family or key has yet.

    A lookup of a name already taken (a family or an output key) is answered without reading
    the entry points (about 70 ms in a full environment), so a command naming only built-in
    families and keys never pays for them: a plug-in may not take such a name, so it could
    not change the answer. Writes are allowed (tests register doubles with
    ``monkeypatch.setitem``).
    """

    def __init__(self, registry: _Registry, data: dict[K, V], other: dict[Any, Any]) -> None:
        self._registry = registry
        self._data = data
        self._other = other  # the names of the other view: taken, so never a plug-in's

    def __getitem__(self, key: K) -> V:
        try:
            return self._data[key]
        except KeyError:
            if self._registry.state == "done" or key in self._other:
                raise
        self._registry.ensure()
        return self._data[key]

    def __setitem__(self, key: K, value: V) -> None:
        self._registry.ensure()
        self._data[key] = value

    def __delitem__(self, key: K) -> None:
        self._registry.ensure()
        del self._data[key]

    def __contains__(self, key: object) -> bool:
        if key in self._data:
            return True
        if key in self._other:
            return False
        self._registry.ensure()
        return key in self._data

    def __iter__(self) -> Iterator[K]:
        self._registry.ensure()
        return iter(self._data)

    def __len__(self) -> int:
        self._registry.ensure()
        return len(self._data)

    def __repr__(self) -> str:
        self._registry.ensure()
        return repr(self._data)


_REGISTRY = _Registry(_ENTRIES)

#: Family -> entry: the built-ins in declaration order, then the plug-ins (by package name).
ENTRIES: MutableMapping[str, Entry] = _LazyView(_REGISTRY, _REGISTRY.entries,
                                                 _REGISTRY.key_to_family)
#: Output key -> family.
KEY_TO_FAMILY: MutableMapping[str, str] = _LazyView(_REGISTRY, _REGISTRY.key_to_family,
                                                    _REGISTRY.entries)


def refresh_plugins() -> None:
    """Read the ``radconcord.metrics`` entry points again (after installing a plug-in into a
    running process, or in tests); the built-ins and any other entries are kept."""
    _REGISTRY.forget_plugins()
    _REGISTRY.ensure()


def ignored_plugins() -> tuple[str, ...]:
    """The messages of the plug-ins refused for a name clash (each names both origins)."""
    _REGISTRY.ensure()
    return tuple(_REGISTRY.ignored)


def plugin_families() -> tuple[str, ...]:
    """The plug-in families registered, usable or not (those with an ``error``)."""
    _REGISTRY.ensure()
    return tuple(_REGISTRY.plugins)


def card_text(family: str) -> str | None:
    """The markdown card of ``family`` (a built-in's file, a plug-in's ``card``), or None.

    Raises:
        UnknownMetric: for an unknown family.
    """
    if family not in ENTRIES:
        raise UnknownMetric(family)
    cls = _REGISTRY.classes.get(family)
    if cls is not None:
        from radconcord.backend.metrics import plugins

        try:
            return plugins.card_text(cls)
        except plugins.PluginError:
            return None
    if ENTRIES[family].origin is not None:
        return None  # a plug-in that could not be loaded
    path = CARDS_DIR / f"{family}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None


class UnknownMetric(KeyError):
    """A name that is neither a family nor an output key."""

    def __str__(self) -> str:
        return f"unknown metric '{self.args[0]}' (see `python -m backend metrics`)"


def resolve(names: list[str] | tuple[str, ...]) -> dict[str, list[str]]:
    """Map requested names (families or output keys) to ``family -> keys`` in request order.

    Raises:
        UnknownMetric: for a name that is neither.
    """
    out: dict[str, list[str]] = {}
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in ENTRIES:
            fam, keys = name, list(ENTRIES[name].keys)
        elif name in KEY_TO_FAMILY:
            fam, keys = KEY_TO_FAMILY[name], [name]
        else:
            raise UnknownMetric(name)
        bucket = out.setdefault(fam, [])
        bucket.extend(k for k in keys if k not in bucket)
    return out


def entry_of_key(key: str) -> Entry:
    """The entry of the family that owns output ``key``.

    Raises:
        UnknownMetric: for a key no family has.
    """
    family = KEY_TO_FAMILY.get(key)
    if family is None or family not in ENTRIES:
        raise UnknownMetric(key)
    return ENTRIES[family]


def higher_is_better(key: str) -> bool:
    """The direction of output ``key``, from the registry alone (no metric code is imported).

    Raises:
        UnknownMetric: for a key no family has.
    """
    return key not in entry_of_key(key).lower_is_better


def directions(keys: Sequence[str]) -> dict[str, bool]:
    """``key -> higher_is_better`` for each of ``keys``.

    Raises:
        UnknownMetric: for the first key no family has.
    """
    return {k: higher_is_better(k) for k in keys}


def corpus_dependent(family: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``family`` with ``options`` gives values that depend on the whole scored set.

    Such a family is scored in one call over the whole set and its cache key names the set.

    Raises:
        UnknownMetric: for an unknown family.
    """
    if family not in ENTRIES:
        raise UnknownMetric(family)
    rule = ENTRIES[family].corpus_dependent
    return bool(rule(dict(options or {}))) if callable(rule) else bool(rule)


def instance_key(family: str, options: Mapping[str, Any]) -> tuple[Hashable, ...]:
    """The :class:`~backend.metrics.base.Resources` key of an instance of ``family``."""
    return ("metric", family, json.dumps(dict(options), sort_keys=True, default=repr))


def shared_instance(resources: Resources, family: str, options: Mapping[str, Any]) -> Metric:
    """The instance of ``family`` with ``options`` held by ``resources`` (created on first use).

    It is given ``resources`` for its own models, and the key is the one the scoring pool
    uses, so a composite (RadCliQ, CRG) and the pool share one instance per settings.

    Raises:
        UnknownMetric: for an unknown family.
        ValueError, TypeError: for options the family rejects.
    """

    def build() -> Metric:
        metric = create(family, **dict(options))
        use = getattr(metric, "use_resources", None)
        if use is not None:
            use(resources)
        return metric

    return resources.get(instance_key(family, options), build)


def load_class(family: str) -> type:
    """Import and return the class registered for ``family``.

    Raises:
        MetricUnavailable: a plug-in that could not be loaded (its entry's ``error``).
    """
    entry = ENTRIES[family]
    if entry.error is not None:
        raise MetricUnavailable(entry.error)
    cls = _REGISTRY.classes.get(family)
    if cls is not None and entry.origin is not None:
        return cls
    module_name, _, cls_name = entry.target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, cls_name)


def create(family: str, **options: Any) -> Metric:
    """Instantiate a family with keyword options (cheap: no weights are loaded)."""
    if family not in ENTRIES:
        raise UnknownMetric(family)
    return load_class(family)(**options)


def availability(family: str, **options: Any) -> str | None:
    """``None`` when ``family`` can run here, else the reason it cannot."""
    try:
        metric = create(family, **options)
    except ModuleNotFoundError as exc:
        return f"not installed: {exc}"
    except MetricUnavailable as exc:
        return str(exc)
    return metric.availability()
