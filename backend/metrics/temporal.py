"""Temporal entity F1: agreement of a report pair on words of change over time.

The measure of Libra (X. Zhang et al., 2025; ``libra/eval/temporal_f1.py``) as RadEval 2.2
ships it (``radeval/metrics/f1temporal/f1temporal.py``): each report's set of temporal
keywords (BioViL-T's 44-word temporal vocabulary, Bannur et al., CVPR 2023), found as whole
words in the lower-cased report after its text cleaning, optionally united with the entities
stanza's radiology NER tags ``OBSERVATION``/``OBSERVATION_MODIFIER`` that are themselves
keywords. The pair's score is an F1 of the two sets, smoothed by ``epsilon`` exactly as the
reference computes it: 1.0 when both sets are empty, ``epsilon`` when only the reference's is.

The regular-expression path needs nothing but the standard library; stanza is used only when
it and its radiology models are installed (``stanza="auto"``) or when asked (``"on"``), and
the signature says which path produced the numbers.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from radconcord.backend.metrics.base import BaseMetric, MetricResult, MetricSpec, OutputSpec

#: BioViL-T's temporal vocabulary as Libra and RadEval list it (44 words).
KEYWORDS: frozenset[str] = frozenset({
    "bigger", "change", "cleared", "constant", "decrease", "decreased", "decreasing",
    "elevated", "elevation", "enlarged", "enlargement", "enlarging", "expanded", "greater",
    "growing", "improved", "improvement", "improving", "increase", "increased", "increasing",
    "larger", "new", "persistence", "persistent", "persisting", "progression", "progressive",
    "reduced", "removal", "resolution", "resolved", "resolving", "smaller", "stability",
    "stable", "stably", "unchanged", "unfolded", "worse", "worsen", "worsened", "worsening",
    "unaltered",
})

#: NER types whose entities may join the keyword set (the reference's choice).
NER_TYPES = frozenset({"OBSERVATION", "OBSERVATION_MODIFIER"})

DEFAULT_EPSILON = 1e-10

# Every keyword is a run of word characters, so with a boundary on each side at most one
# alternative can match at a position: the alternation order does not change what is found.
_KEYWORD_RE = re.compile(
    r"\b(" + "|".join(re.escape(w) for w in sorted(KEYWORDS)) + r")\b"
)
_STANZA_MODES = ("auto", "on", "off")


def clean_text(text: str) -> str:
    """The reference's text cleaning before keyword matching.

    Newlines and runs of ``_``/``-`` become spaces, every character that is not a word
    character, whitespace or one of ``.,:;()`` is dropped (so ``worse/better`` becomes one
    word), runs of two or more whitespace characters become one space, and the ends are
    stripped. The reference's patterns for de-identification blanks (``(___, __, __)``) run
    after underscores and dashes are already spaces, so they never match and are omitted.

    Args:
        text: A report.
    """
    text = re.sub(r"\n+", " ", text)
    text = re.sub(r"[_-]+", " ", text)
    text = re.sub(r"[^\w\s.,:;()-]", "", text)
    return re.sub(r"\s{2,}", " ", text).strip()


def keyword_entities(text: str) -> set[str]:
    """Temporal keywords found as whole words in the cleaned, lower-cased ``text``."""
    return {m.group().lower() for m in _KEYWORD_RE.finditer(clean_text(text).lower())}


def entities(text: str, ner_entities: Sequence[tuple[str, str]] = ()) -> set[str]:
    """A report's temporal entity set.

    Args:
        text: A report.
        ner_entities: ``(text, type)`` of the NER entities of the raw report; those of a type
            in :data:`NER_TYPES` whose lower-cased text is a keyword join the set.
    """
    from_ner = {t.lower() for t, kind in ner_entities if kind in NER_TYPES}
    return (from_ner & KEYWORDS) | keyword_entities(text)


def tem_score(
    reference: set[str] | frozenset[str],
    candidate: set[str] | frozenset[str],
    epsilon: float = DEFAULT_EPSILON,
) -> float:
    """The smoothed F1 of two entity sets, as the reference computes it.

    ``precision = (tp + eps) / (|candidate| + eps)``, ``recall = (tp + eps) / (|reference|
    + eps)``, ``F1 = 2 p r / (p + r + eps)``; 1.0 when both sets are empty and ``eps`` when
    only the reference's is.

    Args:
        reference: The reference report's entities.
        candidate: The candidate report's entities.
        epsilon: Smoothing constant.
    """
    if not reference:
        return 1.0 if not candidate else epsilon
    tp = len(reference & candidate)
    precision = (tp + epsilon) / (len(candidate) + epsilon)
    recall = (tp + epsilon) / (len(reference) + epsilon)
    return (2 * precision * recall) / (precision + recall + epsilon)


def stanza_resources_dir() -> Path:
    """Where stanza keeps its models (``$STANZA_RESOURCES_DIR``, else ``~/stanza_resources``)."""
    return Path(os.environ.get("STANZA_RESOURCES_DIR") or "~/stanza_resources").expanduser()


def stanza_missing() -> str | None:
    """Why stanza's radiology NER cannot run here (no download is attempted), or ``None``."""
    if importlib.util.find_spec("stanza") is None:
        return "stanza is not installed (pip install stanza)"
    model = stanza_resources_dir() / "en" / "ner" / "radiology.pt"
    if not model.is_file():
        return (
            f"stanza's radiology NER model is not at {model} (python -c \"import stanza;"
            " stanza.download('en', package='radiology', processors={'ner': 'radiology'})\")"
        )
    return None


def stanza_tagger(device: str = "cpu") -> Callable[[list[str]], list[list[tuple[str, str]]]]:
    """Load stanza's English pipeline with the radiology NER model, from local files only.

    Returns:
        A function mapping reports to their ``(entity text, type)`` lists.
    """
    import stanza

    nlp = stanza.Pipeline(
        lang="en",
        package="radiology",
        processors={"tokenize": "default", "ner": "radiology"},
        dir=str(stanza_resources_dir()),
        download_method=None,
        use_gpu=device.startswith("cuda"),
        logging_level="ERROR",
        verbose=False,
    )

    def tag(texts: list[str]) -> list[list[tuple[str, str]]]:
        return [[(e.text, e.type) for e in nlp(t).entities] for t in texts]

    return tag


class TemporalF1(BaseMetric):
    """Temporal entity F1 per pair (Libra's TEM score as RadEval 2.2 computes it).

    Options:
        stanza: ``auto`` (stanza's radiology NER joins the keyword matches when stanza and
            its model are installed), ``on`` (required: unavailable without it) or ``off``
            (regular expressions only).
        epsilon: Smoothing constant of the F1 (the reference's 1e-10).
    """

    spec = MetricSpec(
        name="temporal_f1",
        outputs=(
            OutputSpec("temporal_f1", True,
                       "F1 of the temporal keywords (new, worsened, resolved, ...) of the pair"),
        ),
        citation="Zhang et al., Libra: temporal entity F1 (via RadEval 2.2); vocabulary of "
        "Bannur et al., BioViL-T, CVPR 2023",
        corpus_outputs=("temporal_f1_mean",),
    )
    defaults: dict[str, Any] = {"stanza": "auto", "epsilon": DEFAULT_EPSILON}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        mode = str(self.options["stanza"]).strip().lower()
        if mode not in _STANZA_MODES:
            raise ValueError(
                f"temporal_f1: stanza must be one of {', '.join(_STANZA_MODES)} (got {mode!r})"
            )
        self.options["stanza"] = mode
        eps = self.options["epsilon"]
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
            raise ValueError(f"temporal_f1: epsilon must be a number in (0, 1) (got {eps!r})")
        self.options["epsilon"] = float(eps)
        self._tagger: Callable[[list[str]], list[list[tuple[str, str]]]] | None = None

    @property
    def uses_stanza(self) -> bool:
        """Whether this instance unites stanza's NER entities with the keyword matches."""
        mode = self.options["stanza"]
        return mode == "on" or (mode == "auto" and stanza_missing() is None)

    def availability(self) -> str | None:
        if self.options["stanza"] == "on":
            reason = stanza_missing()
            if reason is not None:
                return f"temporal_f1 with stanza=on: {reason}"
        return None

    def _load(self) -> None:
        if self.uses_stanza:
            self._tagger = self.resources.get(
                ("stanza-radiology", str(stanza_resources_dir()), self.device),
                lambda: stanza_tagger(self.device),
            )

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        eps = self.options["epsilon"]
        if self._tagger is not None:
            ner = self._tagger([*references, *candidates])
            ref_ner, cand_ner = ner[: len(references)], ner[len(references):]
        else:
            ref_ner = cand_ner = [[] for _ in references]
        values: list[float] = []
        details: list[dict[str, Any]] = []
        for ref, cand, rn, cn in zip(references, candidates, ref_ner, cand_ner, strict=True):
            r, c = entities(ref, rn), entities(cand, cn)
            values.append(tem_score(r, c, eps))
            details.append({"reference_entities": sorted(r), "candidate_entities": sorted(c)})
        return MetricResult(
            values={"temporal_f1": values},
            corpus={"temporal_f1_mean": sum(values) / len(values)},  # as RadEval averages
            details=details,
        )

    def signature(self) -> str:
        ner = "stanza-radiology" if self.uses_stanza else "none"
        if ner != "none":
            from importlib.metadata import version

            ner += f"@{version('stanza')}"
        return (
            f"temporal_f1|keywords:biovil-t-44|clean:libra|ner:{ner}"
            f"|eps:{self.options['epsilon']!r}"
        )
