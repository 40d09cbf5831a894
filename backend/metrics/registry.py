"""Lazy registry: family name -> "module:Class", output key -> family.

Nothing here imports a metric module until a family is instantiated, so ``import backend``
stays light (the pattern sacrebleu uses for its tokenizers).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from backend.metrics.base import Metric


@dataclass(frozen=True)
class Entry:
    """One registered family."""

    family: str
    target: str
    keys: tuple[str, ...]
    kind: str  # lexical | embedding | clinical | composite | image | learned | uncertainty
    # False for metrics of several sampled reports of one case (no reference/candidate pair).
    per_pair: bool = True


def _e(
    family: str, target: str, keys: tuple[str, ...] | list[str], kind: str, per_pair: bool = True
) -> Entry:
    return Entry(family, target, tuple(keys), kind, per_pair)


_ENTRIES: tuple[Entry, ...] = (
    _e("bleu", "backend.metrics.lexical:Bleu", ("bleu1", "bleu2", "bleu3", "bleu4"), "lexical"),
    _e("bleu2_radcliq", "backend.metrics.lexical:Bleu2RadCliQ", ("bleu2_radcliq",), "lexical"),
    _e("rouge", "backend.metrics.lexical:RougeL", ("rougeL",), "lexical"),
    _e("meteor", "backend.metrics.lexical:Meteor", ("meteor",), "lexical"),
    _e("cider", "backend.metrics.lexical:Cider", ("cider",), "lexical"),
    _e(
        "bertscore",
        "backend.metrics.bertscore:BertScore",
        ("bertscore_p", "bertscore_r", "bertscore_f"),
        "embedding",
    ),
    _e("smas", "backend.metrics.smas:Smas", ("smas",), "embedding"),
    _e("smas_var", "backend.metrics.smas:SmasVar", ("smas_var",), "uncertainty", per_pair=False),
    _e("chexpert", "backend.metrics.chexpert:ChexpertLabels", ("chexpert_acc", "chexpert_f1"),
       "clinical"),
    _e("crg", "backend.metrics.crg:Crg", ("crg",), "clinical"),
    _e("radcliq", "backend.metrics.radcliq:RadCliQ", ("radcliq_v0", "radcliq_v1"), "composite"),
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
    ),
    _e(
        "green",
        "backend.metrics.green:Green",
        ("green", *(f"green_sig_{c}" for c in "abcdef"), "green_matched"),
        "learned",
    ),
    _e(
        "er2score",
        "backend.metrics.er2score:ER2Score",
        ("er2score", *(f"er2_cat{i}" for i in range(1, 7))),
        "learned",
    ),
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
