"""llm_rexval: an LLM judge that counts the ReXVal errors of a candidate report.

The judge reads the reference and the candidate and answers, as JSON, the number of errors in
each of the six ReXVal categories (Yu et al., Patterns 2023), separately clinically significant
and clinically insignificant -- the scale the radiologists of ReXVal used, so the judge is
compared with them on exactly their numbers. The task and its six categories are those of
CheXprompt (Zambrano Chaves et al., Nat. Commun. 2025; microsoft/chexprompt, MIT) and of
FineRadScore (Huang et al., 2024); the wording, the JSON answer format and the worked example
are ours (no report text from a credentialed dataset is shipped).

The parser (:func:`parse_judgement`) never raises. It reads JSON inside code fences or prose,
with single quotes, trailing commas or Python literals, section and category keys in several
spellings (``clinically_significant``/``significant``, ``A``/``1``/``c1``/category names), flat
layouts (``c1_sig``), and CheXprompt's own text format (``((A, 1), (B, 0), ...)``) as a
fallback. A cell it cannot read -- missing, not a number, not an integer, negative, a boolean --
is ``nan`` and named in the pair's ``flags``; keys it does not know are ignored and noted. A
total is ``nan`` unless every cell it sums was read (nothing is invented).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from radconcord.backend.metrics.base import MetricResult, MetricSpec, OutputSpec
from radconcord.backend.metrics.llm import truncate_words
from radconcord.backend.metrics.llm_backends import (
    BACKEND_DEFAULTS,
    LLMMetric,
    Message,
    prompt_hash,
)
from radconcord.backend.metrics.llm_json import json_objects, loads_lenient

logger = logging.getLogger(__name__)

CATEGORIES: dict[int, str] = {
    1: "False prediction of a finding that is not in the reference",
    2: "Omission of a finding that is present in the reference",
    3: "Incorrect location or position of a finding",
    4: "Incorrect severity of a finding",
    5: "Mention of a comparison (a prior study, a change) that is not in the reference",
    6: "Omission of a comparison describing a change from a previous study that the"
       " reference mentions",
}
LETTERS = "ABCDEF"
LEVELS = ("sig", "insig")
KEYS: tuple[str, ...] = (
    "llm_rexval_total",
    "llm_rexval_sig",
    *(f"llm_rexval_c{i}_{lvl}" for i in range(1, 7) for lvl in LEVELS),
)
PARSER_VERSION = 1
PROMPT_VERSION = 1
MAX_WORDS = 300

SYSTEM = (
    "You are an expert chest radiologist. You judge the diagnostic accuracy of a candidate"
    " radiology report against a reference report written by a radiologist, and count the"
    " candidate's errors exactly."
)

_EXAMPLE_REF = "Moderate cardiomegaly. Small right pleural effusion, increased since the prior" \
    " study. No pneumothorax."
_EXAMPLE_CAND = "Mild cardiomegaly. Small left pleural effusion. Right upper lobe nodule."
_EXAMPLE_ANSWER = (
    '{"clinically_significant": {"A": 1, "B": 0, "C": 1, "D": 0, "E": 0, "F": 1},'
    ' "clinically_insignificant": {"A": 0, "B": 0, "C": 0, "D": 1, "E": 0, "F": 0}}'
)


def build_messages(reference: str, candidate: str) -> list[Message]:
    """The judge's chat messages for one pair (reports already cut to ``max_words``)."""
    cats = "\n".join(f"{LETTERS[i - 1]}) {name}" for i, name in CATEGORIES.items())
    user = (
        "Compare the candidate report with the reference report and count the candidate's"
        " errors of each of these six types:\n"
        f"{cats}\n\n"
        "Count every error once, in one type. A clinically significant error is one that"
        " would likely change treatment, management or outcome; any other error is clinically"
        " insignificant. Differences of wording that do not change the clinical meaning are"
        " not errors. Write 0 for a type without errors.\n\n"
        "Answer with this JSON object only, with a whole number for every letter:\n"
        '{"clinically_significant": {"A": n, "B": n, "C": n, "D": n, "E": n, "F": n},'
        ' "clinically_insignificant": {"A": n, "B": n, "C": n, "D": n, "E": n, "F": n}}\n\n'
        f"Example.\nReference report: {_EXAMPLE_REF}\nCandidate report: {_EXAMPLE_CAND}\n"
        f"Answer: {_EXAMPLE_ANSWER}\n\n"
        f"Reference report: {reference}\n"
        f"Candidate report: {candidate}\n"
        "Answer:"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


PROMPT_HASH = prompt_hash(build_messages("{reference}", "{candidate}"))


# --------------------------------------------------------------------------- parsing


@dataclass
class Judgement:
    """What could be read from one answer.

    Attributes:
        counts: ``(category 1-6, "sig"|"insig") -> count`` or ``None`` where unread.
        flags: Problems that left a cell unread (``missing: c3 insig``).
        notes: Things ignored without harm (``ignored key: explanation``).
        source: ``json`` | ``chexprompt-text`` | ``None`` (nothing readable).
    """

    counts: dict[tuple[int, str], int | None] = field(
        default_factory=lambda: {(i, lvl): None for i in range(1, 7) for lvl in LEVELS}
    )
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str | None = None

    @property
    def complete(self) -> bool:
        """Whether all 12 cells were read."""
        return all(v is not None for v in self.counts.values())

    def total(self, level: str | None = None) -> float:
        """Sum over categories (one level or both); ``nan`` unless every summed cell was read."""
        cells = [v for (_, lvl), v in self.counts.items() if level is None or lvl == level]
        if any(v is None for v in cells):
            return math.nan
        return float(sum(v for v in cells if v is not None))

    def values(self) -> dict[str, float]:
        """The metric's keys for this pair."""
        out = {"llm_rexval_total": self.total(), "llm_rexval_sig": self.total("sig")}
        for (i, lvl), v in self.counts.items():
            out[f"llm_rexval_c{i}_{lvl}"] = math.nan if v is None else float(v)
        return out


_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten"
                                     .split())}
_WORDS.update({"none": 0, "no": 0})


def _norm(key: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(key).strip().lower()).strip("_")


def _level_of(key: str) -> str | None:
    k = _norm(key)
    if re.search(r"(^|_)(insignificant|insig|non_?significant|not_significant|minor)(_|$)", k):
        return "insig"
    if re.search(r"(^|_)(significant|sig|major)(_|$)", k):
        return "sig"
    return None


def _category_of(key: Any) -> int | None:
    k = _norm(key)
    m = re.fullmatch(r"(?:c|cat|category|type|error|error_type)?_?([a-f1-6])", k)
    if m:
        c = m.group(1)
        return int(c) if c.isdigit() else "abcdef".index(c) + 1
    if "comparison" in k or "prior" in k:
        return 6 if re.search(r"omi|miss", k) else 5
    if "location" in k or "position" in k:
        return 3
    if "severity" in k:
        return 4
    if "false" in k:
        return 1
    if re.search(r"omi|miss", k):
        return 2
    return None


def _count(value: Any) -> tuple[int | None, str]:
    """A non-negative whole count, or ``(None, why)``."""
    if isinstance(value, dict):
        for k in ("count", "n", "number", "value"):
            if k in value:
                return _count(value[k])
        return None, "an object without a count"
    if isinstance(value, bool) or value is None:
        return None, f"not a count ({value!r})"
    if isinstance(value, int):
        return (value, "") if value >= 0 else (None, f"negative ({value})")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            return None, f"not a whole number ({value!r})"
        return (int(value), "") if value >= 0 else (None, f"negative ({value!r})")
    if isinstance(value, str):
        s = value.strip().lower()
        m = re.match(r"^(-?\d+(?:\.\d+)?)(?![\d.])", s)
        if m:
            return _count(float(m.group(1)) if "." in m.group(1) else int(m.group(1)))
        w = re.match(r"^([a-z]+)\b", s)
        if w and w.group(1) in _WORDS:
            return _WORDS[w.group(1)], ""
        return None, f"not a count ({value[:30]!r})"
    return None, f"not a count ({type(value).__name__})"


def _put(out: Judgement, cat: int, level: str, value: Any, where: str) -> None:
    if out.counts[(cat, level)] is not None:
        out.notes.append(f"duplicate: c{cat} {level} at {where} (first kept)")
        return
    n, why = _count(value)
    if n is None:
        out.flags.append(f"unreadable: c{cat} {level} at {where}: {why}")
        return
    out.counts[(cat, level)] = n


def _read_section(out: Judgement, section: Any, level: str, where: str) -> None:
    if isinstance(section, list):
        # [n_A, ..., n_F] or [["A", 1], ...]
        if len(section) == 6 and not any(isinstance(v, (list, tuple, dict)) for v in section):
            for i, v in enumerate(section, start=1):
                _put(out, i, level, v, f"{where}[{i - 1}]")
            return
        pairs = [p for p in section if isinstance(p, (list, tuple)) and len(p) == 2]
        section = {str(k): v for k, v in pairs} if pairs else {}
        if not pairs:
            out.flags.append(f"unreadable: section {where} is a list of {len(section)} items")
            return
    if not isinstance(section, dict):
        out.flags.append(f"unreadable: section {where} is {type(section).__name__}")
        return
    for key, value in section.items():
        cat = _category_of(key)
        if cat is None:
            out.notes.append(f"ignored key: {where}.{key}")
            continue
        _put(out, cat, level, value, f"{where}.{key}")


def _read_object(out: Judgement, obj: dict[str, Any], where: str = "") -> bool:
    """Read sections (or flat cells) of ``obj``; whether anything count-like was found."""
    found = False
    for key, value in obj.items():
        path = f"{where}{key}"
        level = _level_of(key)
        if level is not None and isinstance(value, (dict, list)):
            _read_section(out, value, level, path)
            found = True
            continue
        cat = _category_of(re.sub(r"(?i)[_ -]*(clinically_)?(in|non_?|not_)?sig(nificant)?$",
                                  "", _norm(key)))
        if level is not None and cat is not None and not isinstance(value, (dict, list)):
            _put(out, cat, level, value, path)  # flat: c1_sig, A_insignificant, ...
            found = True
            continue
        cat = _category_of(key)
        if cat is not None and isinstance(value, dict):
            # Per category: {"A": {"significant": 1, "insignificant": 0}}
            for k2, v2 in value.items():
                lvl = _level_of(k2)
                if lvl is None:
                    out.notes.append(f"ignored key: {path}.{k2}")
                else:
                    _put(out, cat, lvl, v2, f"{path}.{k2}")
                    found = True
            continue
        # A wrapper ({"errors": {...}}): look one level down.
        if isinstance(value, dict) and _read_object(out, value, f"{path}."):
            found = True
            continue
        out.notes.append(f"ignored key: {path}")
    return found


_CHEXPROMPT = re.compile(
    r"clinically\s+(significant|insignificant)\s+errors?\s+by\s+type\s*:\s*([^\n]*)",
    re.IGNORECASE,
)
_TUPLE = re.compile(r"\(\s*([A-Fa-f])\s*,\s*([^()]*?)\s*\)")


def _read_chexprompt(out: Judgement, text: str) -> bool:
    found = False
    for m in _CHEXPROMPT.finditer(text):
        level = "sig" if m.group(1).lower() == "significant" else "insig"
        for t in _TUPLE.finditer(m.group(2)):
            _put(out, "abcdef".index(t.group(1).lower()) + 1, level, t.group(2),
                 f"{m.group(1).lower()} ({t.group(1).upper()})")
            found = True
    return found


def parse_judgement(text: Any) -> Judgement:
    """Read the 12 ReXVal counts from a judge's answer; never raises."""
    out = Judgement()
    if not isinstance(text, str) or not text.strip():
        out.flags.append("empty answer")
    else:
        for blob in json_objects(text):
            obj = loads_lenient(blob)
            if isinstance(obj, dict):
                trial = Judgement()
                if _read_object(trial, obj):
                    out, out.source = trial, "json"
                    break
        if out.source is None and _read_chexprompt(out, text):
            out.source = "chexprompt-text"
        if out.source is None:
            out.flags.append("no JSON object with error counts found")
    for (i, lvl), v in out.counts.items():
        if v is None and not any(f"c{i} {lvl} " in f for f in out.flags):
            out.flags.append(f"missing: c{i} {lvl}")
    return out


# --------------------------------------------------------------------------- metric


class LlmRexval(LLMMetric):
    """ReXVal error counts from an LLM judge (transformers in-process or a chat endpoint).

    Options:
        model: Hub id, model folder or ``.gguf`` file (transformers backend); also the
            preferred id on an endpoint serving several models.
        revision: Hub revision for a hub id.
        backend: ``transformers`` | ``openai`` (any OpenAI-compatible endpoint).
        base_url, endpoint_model, api_key: Endpoint settings (else ``RADCONCORD_LLM_*``).
        concurrency, timeout, max_retries: Endpoint request settings.
        max_new_tokens: Generation budget per pair.
        batch_size: Prompts per batch (transformers).
        dtype: ``auto`` (bf16 on CUDA, fp32 on CPU) | ``fp32`` | ``bf16`` | ``fp16``.
        max_words: Reports are cut to this many words before prompting.
    """

    spec = MetricSpec(
        name="llm_rexval",
        outputs=(
            OutputSpec("llm_rexval_total", False, "all errors counted by the LLM judge"),
            OutputSpec("llm_rexval_sig", False, "clinically significant errors (LLM judge)"),
            *(
                OutputSpec(f"llm_rexval_c{i}_{lvl}", False,
                           f"{'significant' if lvl == 'sig' else 'insignificant'} errors,"
                           f" ReXVal category {i}: {CATEGORIES[i]}")
                for i in range(1, 7) for lvl in LEVELS
            ),
        ),
        needs_model=True,
        citation="ReXVal categories (Yu et al. 2023) counted by an LLM judge as in CheXprompt",
    )
    model_label: ClassVar[str] = "llm_rexval judge"
    defaults: ClassVar[dict[str, Any]] = {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "revision": None,
        **BACKEND_DEFAULTS,
        "max_new_tokens": 256,
        "batch_size": 8,
        "dtype": "auto",
        "max_words": MAX_WORDS,
    }

    def prompts(self, references: list[str], candidates: list[str]) -> list[list[Message]]:
        """The chat messages of each pair."""
        n = int(self.options["max_words"])
        return [build_messages(truncate_words(r, n), truncate_words(c, n))
                for r, c in zip(references, candidates, strict=True)]

    def _score(self, *, references: list[str], candidates: list[str], images: Any) -> MetricResult:
        answers = self.chat(self.prompts(references, candidates),
                            max_new_tokens=int(self.options["max_new_tokens"]))
        values: dict[str, list[float]] = {k: [] for k in self.spec.keys}
        details: list[dict[str, Any]] = []
        for answer in answers:
            j = parse_judgement(answer)
            for k, v in j.values().items():
                values[k].append(v)
            details.append({
                "counts": {f"c{i}_{lvl}": v for (i, lvl), v in j.counts.items()},
                "parsed": j.complete,
                "flags": j.flags,
                "notes": j.notes,
                "source": j.source,
                "generation": answer,
            })
        flagged = sum(1 for d in details if d["flags"])
        if flagged:
            logger.info("llm_rexval: %d of %d answers had unreadable cells", flagged, len(details))
        return MetricResult(values, {}, details)

    def signature(self) -> str:
        o = self.options
        return (f"llm_rexval|{self.backend_signature()}|greedy|max_new:{o['max_new_tokens']}"
                f"|words:{o['max_words']}|prompt:v{PROMPT_VERSION}-{PROMPT_HASH}"
                f"|parser:v{PARSER_VERSION}")
