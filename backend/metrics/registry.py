"""Lazy registry: family name -> "module:Class", output key -> family, and what the scoring
machinery must know of a family without importing it.

Nothing here imports a metric module until a family is instantiated, so ``import backend``
stays light (the pattern sacrebleu uses for its tokenizers). The registry is the one place
that knows a key's direction (:func:`higher_is_better`) and whether a family's values depend
on the scored set (:func:`corpus_dependent`); ``tests/unit/test_registry.py`` checks both
against the classes' own specs.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backend.metrics.base import Metric, Resources

#: Options -> whether the values depend on the whole scored set.
CorpusRule = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Entry:
    """One registered family.

    Attributes:
        family: Family name.
        target: ``"module:Class"``, imported only when an instance is created.
        keys: Output keys in the class's declaration order.
        kind: lexical | embedding | clinical | composite | image | learned | uncertainty.
        per_pair: False for metrics of several sampled reports of one case (no
            reference/candidate pair).
        lower_is_better: The keys whose lower values are better (every other key: higher).
        corpus_dependent: Whether a value depends on the whole scored set (CIDEr's document
            frequencies); a function of the options where an option decides (BERTScore idf,
            VLScore's C calibrated on the set).
    """

    family: str
    target: str
    keys: tuple[str, ...]
    kind: str
    per_pair: bool = True
    lower_is_better: tuple[str, ...] = ()
    corpus_dependent: bool | CorpusRule = False

    def __post_init__(self) -> None:
        stray = set(self.lower_is_better) - set(self.keys)
        if stray:
            raise ValueError(f"registry entry '{self.family}': lower_is_better names"
                             f" keys it does not have: {sorted(stray)}")


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


_ENTRIES: tuple[Entry, ...] = (
    _e("bleu", "backend.metrics.lexical:Bleu", ("bleu1", "bleu2", "bleu3", "bleu4"), "lexical"),
    _e("bleu2_radcliq", "backend.metrics.lexical:Bleu2RadCliQ", ("bleu2_radcliq",), "lexical"),
    _e("rouge", "backend.metrics.lexical:RougeL", ("rougeL",), "lexical"),
    _e("meteor", "backend.metrics.lexical:Meteor", ("meteor",), "lexical"),
    _e("cider", "backend.metrics.lexical:Cider", ("cider",), "lexical", corpus=True),
    _e(
        "bertscore",
        "backend.metrics.bertscore:BertScore",
        ("bertscore_p", "bertscore_r", "bertscore_f"),
        "embedding",
        corpus=_bertscore_idf,
    ),
    _e("smas", "backend.metrics.smas:Smas", ("smas",), "embedding"),
    _e("smas_var", "backend.metrics.smas:SmasVar", ("smas_var",), "uncertainty", per_pair=False,
       lower=("smas_var",)),
    _e("chexpert", "backend.metrics.chexpert:ChexpertLabels", ("chexpert_acc", "chexpert_f1"),
       "clinical"),
    _e("crg", "backend.metrics.crg:Crg", ("crg",), "clinical"),
    _e("radcliq", "backend.metrics.radcliq:RadCliQ", ("radcliq_v0", "radcliq_v1", "radcliq_v1_inv"),
       "composite", lower=("radcliq_v0", "radcliq_v1"), corpus=_radcliq_inputs),
    _e("temporal_f1", "backend.metrics.temporal:TemporalF1", ("temporal_f1",), "clinical"),
    _e("ratescore", "backend.metrics.ratescore:RaTEScore", ("ratescore",), "clinical"),
    _e("srrbert", "backend.metrics.srrbert:SrrBert",
       ("srrbert_weighted_f1", "srrbert_weighted_precision", "srrbert_weighted_recall"),
       "clinical"),
    _e("semb", "backend.metrics.chexbert:SEmb", ("semb",), "clinical"),
    _e("chexbert", "backend.metrics.chexbert:ChexbertLabels", ("chexbert_acc", "chexbert_f1"),
       "clinical"),
    _e(
        "radgraph",
        "backend.metrics.radgraph:RadGraph",
        ("radgraph_simple", "radgraph_partial", "radgraph_complete", "radgraph_combined"),
        "clinical",
    ),
    _e(
        "vlscore",
        "backend.metrics.vlscore:VLScore",
        ("vlscore", "vl_cosine", "vl_image_cosine", "vl_sphere"),
        "image",
        lower=("vl_sphere",),
        corpus=_vlscore_calibrated,
    ),
    _e(
        "green",
        "backend.metrics.green:Green",
        ("green", *(f"green_sig_{c}" for c in "abcdef"), "green_matched"),
        "learned",
        lower=tuple(f"green_sig_{c}" for c in "abcdef"),
    ),
    _e(
        "er2score",
        "backend.metrics.er2score:ER2Score",
        ("er2score", *(f"er2_cat{i}" for i in range(1, 7))),
        "learned",
    ),
    _e("llm_rexval", "backend.metrics.llm_rexval:LlmRexval", LLM_REXVAL_KEYS, "learned",
       lower=LLM_REXVAL_KEYS),
    _e("crimson", "backend.metrics.crimson:Crimson",
       ("crimson", "crimson_false", "crimson_missing", "crimson_attribute"), "learned",
       lower=("crimson_false", "crimson_missing", "crimson_attribute")),
)

ENTRIES: dict[str, Entry] = {e.family: e for e in _ENTRIES}
KEY_TO_FAMILY: dict[str, str] = {k: e.family for e in _ENTRIES for k in e.keys}


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
    """Import and return the class registered for ``family``."""
    entry = ENTRIES[family]
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
    return metric.availability()
