"""CRIMSON (Baharoon et al., 2026): clinically grounded, severity-weighted LLM evaluation.

An LLM (default the fine-tuned ``rajpurkarlab/medgemma-4b-it-crimson``, or any chat model)
reads CRIMSON's prompt (:mod:`backend.metrics.crimson_prompt`, verbatim from
rajpurkarlab/CRIMSON, MIT) holding the patient context when known, the reference and the
candidate findings, and answers a JSON object: the abnormal findings of each report with a
clinical significance, the matches between them, the false and missing findings, and
attribute errors of matched findings (location, severity, descriptor, measurement, certainty,
unspecific, overinterpretation, temporal) with a severity.

Scoring (written here after ``CRIMSONScore._calculate_crimson``; parity-tested on fixed
answers): finding weights urgent 1.0, actionable_not_urgent 0.5, not_actionable_not_urgent
0.25, benign_expected 0.0 (unknown 0.25); attribute error weights significant 0.5, negligible
0.0 (unknown 0.25). ``N_G`` = weighted count of reference findings (``len(matched) + E_miss``
when the answer lists none); ``E_false`` / ``E_miss`` = weights of the false (predicted) and
missing (reference) finding ids; each matched reference finding (once) earns its weight ``w``,
scaled by ``w / (w + sum of its attribute error weights)`` when it has attribute errors.
``S = (correct - E_false) / N_G`` (``N_G = 0``: 1 when nothing is false or missing, else
``-(E_false + E_miss + 1)``); CRIMSON = S when S >= 0, else ``-x / (1 + x)`` with
``x = E_false - correct`` when x > 0, else 0. Range (-1, 1]; upstream rounds to 4 decimals for
display, the full float is kept here.

The answer is read with upstream's repair steps (smart quotes, ``["":[`` hybrids, a missing
opening quote on a key, orphan keys, invalid backslash escapes, unescaped inner quotes) plus
code fences and prose around the object. An answer that cannot be read, or that lacks an id
the scoring needs, gives NaN and a flag; nothing is invented.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from radconcord.backend.metrics import crimson_prompt as P
from radconcord.backend.metrics.base import MetricInputError, MetricResult, MetricSpec, OutputSpec
from radconcord.backend.metrics.llm_backends import (
    BACKEND_DEFAULTS,
    LLMMetric,
    Message,
    prompt_hash,
)

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "rajpurkarlab/medgemma-4b-it-crimson"
#: No commit of the CRIMSON checkpoint could be verified offline; an unpinned hub id is
#: resolved to the hub's current commit when the hub is reachable (recorded in the signature).
DEFAULT_REVISION: str | None = None
DEFAULT_MAX_NEW_TOKENS = 8192  # upstream's generation cap
SYSTEM = ("You are an expert radiology evaluator that assesses the accuracy of radiology"
          " reports.")
REFERENCE_COMMIT = "07e333152f2cb9c3429ec4d4eba12a1a7fce979e"
PARSER_VERSION = 1

SIGNIFICANCE_WEIGHTS: dict[str, float] = {
    "urgent": 1.0,
    "actionable_not_urgent": 0.5,
    "not_actionable_not_urgent": 0.25,
    "benign_expected": 0.0,
}
ATTRIBUTE_WEIGHTS: dict[str, float] = {"significant": 0.5, "negligible": 0.0}
UNKNOWN_WEIGHT = 0.25
ATTRIBUTE_TYPES = ("location", "severity", "descriptor", "measurement", "certainty",
                   "unspecific", "overinterpretation", "temporal")


def build_prompt(
    reference: str | Sequence[str],
    candidate: str | Sequence[str],
    context: Mapping[str, Any] | None = None,
    *,
    guidelines: bool = True,
) -> str:
    """CRIMSON's user prompt, assembled as upstream's ``build_prompt`` assembles it.

    Args:
        reference: Reference findings (a list is joined with spaces).
        candidate: Candidate findings.
        context: Patient context in order, e.g. ``{"Age": "82", "Indication": "..."}``.
        guidelines: Include the significance examples, attribute severity guidelines and (with
            a context) the context guidelines. Upstream leaves them out for its fine-tuned
            model, which was trained without them.
    """
    if not isinstance(reference, str):
        reference = " ".join(reference)
    if not isinstance(candidate, str):
        candidate = " ".join(candidate)
    ctx = ""
    if context:
        ctx = "Patient Context:\n" + "".join(f"    {k}: {v}\n" for k, v in context.items())
    parts = [
        P.OBJECTIVE,
        ctx,
        f"Reference Findings (Ground Truth):\n{reference}",
        f"Predicted Findings (Candidate):\n{candidate}",
        P.TASK_STEPS,
        P.CLINICAL_SIGNIFICANCE_LEVELS,
        P.SIGNIFICANCE_EXAMPLES if guidelines else "",
        P.SIGNIFICANCE_APPLICATION,
        P.ATTRIBUTE_SEVERITY_LEVELS,
        P.ERROR_CATEGORIES,
        P.MATCHING_CRITERIA,
        P.ATTRIBUTE_ERROR_INSTRUCTIONS,
        P.ATTRIBUTE_SEVERITY_GUIDELINES if guidelines else "",
        P.CONTEXT_GUIDELINES if guidelines and context else "",
        P.OUTPUT_FORMAT,
        P.IMPORTANT_NOTES,
    ]
    return "\n\n".join(p for p in parts if p)


def build_messages(reference: str, candidate: str, context: Mapping[str, Any] | None = None,
                   *, guidelines: bool = True) -> list[Message]:
    """System + user messages, as upstream sends them to every backend."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": build_prompt(reference, candidate, context,
                                                 guidelines=guidelines)},
    ]


# --------------------------------------------------------------------------- answer parsing

_INVALID_ESCAPE = re.compile(r'\\(?!["\\/bfnrtu])')
_ORPHAN_AFTER_COMMA = re.compile(r',\s*"[^"]*"\s*(?=\s*[,}])(?!\s*:)')
_ORPHAN_AT_START = re.compile(r'(?<=\{)\s*"[^"]*"\s*,\s*(?=")')
_ARRAY_OBJECT_HYBRID = re.compile(r'\[""\s*:\s*\[')
_MISSING_OPEN_QUOTE = re.compile(r'([\]}"0-9]\s*,\s*|{\s*)([a-zA-Z_][a-zA-Z0-9_]*")')
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def _loads(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_first_wins)


def _structural_quote(text: str, i: int) -> bool:
    """Whether the ``"`` at ``i`` delimits JSON rather than sitting inside prose."""
    before = text[i - 1] if i > 0 else ""
    after = text[i + 1] if i + 1 < len(text) else ""
    if before in ":[{" or after in ":]}":
        return True
    if before == ",":
        prev = text[i - 2] if i >= 2 else ""
        return prev in '"]}' or prev.isdigit()
    if after == ",":
        nxt = text[i + 2] if i + 2 < len(text) else ""
        return nxt in '"[{' or nxt.isdigit()
    return False


def _escape_inner_quotes(text: str, attempts: int = 50) -> Any:
    for _ in range(attempts):
        try:
            return _loads(text)
        except json.JSONDecodeError as exc:
            fixed = False
            for i in range(exc.pos, max(0, exc.pos - 5) - 1, -1):
                if i < len(text) and text[i] == '"' and (i == 0 or text[i - 1] != "\\"):
                    if _structural_quote(text, i):
                        continue
                    text = text[:i] + '\\"' + text[i + 1 :]
                    fixed = True
                    break
            if not fixed:
                raise
    raise json.JSONDecodeError("too many unescaped quotes", text, 0)


def _repairs(response: str) -> Any:
    """Upstream's repair pipeline on one string; raises ``ValueError`` when all fail."""
    r = response.replace("\u201c", '\\"').replace("\u201d", '\\"')
    r = r.replace("\u2018", "\\'").replace("\u2019", "\\'")
    r = _ARRAY_OBJECT_HYBRID.sub("[", r)
    r = _MISSING_OPEN_QUOTE.sub(r'\1"\2', r)
    for attempt in (r, _ORPHAN_AT_START.sub("", _ORPHAN_AFTER_COMMA.sub("", r))):
        try:
            return _loads(attempt)
        except json.JSONDecodeError:
            pass
    escaped = _INVALID_ESCAPE.sub(r"\\\\", r)
    try:
        return _loads(escaped)
    except json.JSONDecodeError:
        pass
    for attempt in (r, escaped):
        try:
            return _escape_inner_quotes(attempt)
        except (json.JSONDecodeError, ValueError):
            pass
    raise ValueError("not JSON")


def parse_answer(text: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """The evaluation object of an answer and flags; never raises.

    Upstream's repairs are tried on the whole answer first (so a bare object reads exactly as
    upstream reads it), then on a fenced block and on the span from the first ``{`` to the
    last ``}`` (prose around the object).
    """
    if not isinstance(text, str) or not text.strip():
        return None, ["empty answer"]
    tries = [text]
    tries += [m.group(1) for m in _FENCE.finditer(text)]
    a, b = text.find("{"), text.rfind("}")
    if 0 <= a < b:
        tries.append(text[a : b + 1])
    for t in tries:
        try:
            obj = _repairs(t)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj, []
        return None, [f"answer is JSON but not an object ({type(obj).__name__})"]
    return None, ["answer is not readable JSON"]


# --------------------------------------------------------------------------- scoring


class MalformedEvaluation(ValueError):
    """An evaluation object without a field the score needs."""


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    v = obj.get(key, [])
    if v is None:
        return []
    if not isinstance(v, list):
        raise MalformedEvaluation(f"'{key}' is {type(v).__name__}, not a list")
    return v


def _field(item: Any, key: str, where: str) -> Any:
    if not isinstance(item, Mapping) or key not in item:
        raise MalformedEvaluation(f"{where} has no '{key}'")
    return item[key]


def score_evaluation(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """CRIMSON of one parsed evaluation, with its components (see the module docstring).

    Returns:
        ``crimson`` (full float), ``S``, ``N_G``, ``E_false``, ``E_miss``, ``correct``,
        ``errors_more_than_correct`` and the error counts.

    Raises:
        MalformedEvaluation: when a listed finding, match or attribute error lacks the id the
            score needs (upstream fails the sample there too).
    """
    if not isinstance(evaluation, Mapping):
        raise MalformedEvaluation("the evaluation is not an object")
    errors = evaluation.get("errors", {})
    if errors is None:
        errors = {}
    if not isinstance(errors, Mapping):
        raise MalformedEvaluation("'errors' is not an object")
    matched = _list(evaluation, "matched_findings")
    refs = _list(evaluation, "reference_findings")
    preds = _list(evaluation, "predicted_findings")
    false_ids = _list(errors, "false_findings")
    miss_ids = _list(errors, "missing_findings")
    attrs = _list(errors, "attribute_errors")

    def weight(item: Any, table: Mapping[str, float], key: str) -> float:
        v = item.get(key, "") if isinstance(item, Mapping) else ""
        return table.get(v, UNKNOWN_WEIGHT) if isinstance(v, str) else UNKNOWN_WEIGHT

    ref_w = {_field(r, "id", f"reference_findings[{i}]"):
             weight(r, SIGNIFICANCE_WEIGHTS, "clinical_significance") for i, r in enumerate(refs)}
    pred_w = {_field(p, "id", f"predicted_findings[{i}]"):
              weight(p, SIGNIFICANCE_WEIGHTS, "clinical_significance")
              for i, p in enumerate(preds)}
    try:
        e_false = sum(pred_w.get(f, 0.0) for f in false_ids)
        e_miss = sum(ref_w.get(m, 0.0) for m in miss_ids)
    except TypeError as exc:  # an unhashable id (a dict where an id string belongs)
        raise MalformedEvaluation(f"a false/missing finding id is not a string: {exc}") from exc

    by_ref: dict[Any, list[Mapping[str, Any]]] = {}
    for i, err in enumerate(attrs):
        by_ref.setdefault(_field(err, "ref_id", f"errors.attribute_errors[{i}]"), []).append(err)

    n_g = sum(weight(r, SIGNIFICANCE_WEIGHTS, "clinical_significance") for r in refs)
    if n_g == 0 and not refs:
        n_g = len(matched) + e_miss

    seen: set[Any] = set()
    correct = 0.0
    for i, m in enumerate(matched):
        ref_id = _field(m, "ref_id", f"matched_findings[{i}]")
        if ref_id in seen:
            continue
        seen.add(ref_id)
        base = ref_w.get(ref_id, 0.0)
        errs = by_ref.get(ref_id, [])
        if not errs:
            correct += base
            continue
        penalty = sum(weight(e, ATTRIBUTE_WEIGHTS, "severity") for e in errs)
        factor = base / (base + penalty) if base + penalty > 0 else 0.0
        correct += base * factor

    excess = e_false - correct
    if n_g == 0:
        s = 1.0 if e_false == 0 and e_miss == 0 else -(e_false + e_miss + 1)
    else:
        s = (correct - e_false) / n_g
    if s >= 0:
        value = float(s)
    elif excess > 0:
        value = -excess / (1 + excess)
    else:
        value = 0.0

    def types_of(e: Any) -> list[Any]:
        t = e.get("error_types", []) if isinstance(e, Mapping) else []
        return t if isinstance(t, list) else []

    counts = {f"{t}_errors": sum(1 for e in attrs if t in types_of(e)) for t in ATTRIBUTE_TYPES}
    return {
        "crimson": value,
        "S": s,
        "N_G": n_g,
        "E_false": e_false,
        "E_miss": e_miss,
        "correct": correct,
        "errors_more_than_correct": excess,
        "false_findings": len(false_ids),
        "missing_findings": len(miss_ids),
        "attribute_errors": len(attrs),
        **counts,
    }


# --------------------------------------------------------------------------- metric

Context = Mapping[str, Any] | None


class Crimson(LLMMetric):
    """CRIMSON per pair, from either backend, with optional patient context.

    Options:
        model: Hub id, folder or ``.gguf`` (default the CRIMSON fine-tune of MedGemma 4B).
        revision: Hub revision for a hub id.
        guidelines: ``auto`` (off for the CRIMSON fine-tune, as upstream; on for any other
            model) | ``true`` | ``false``.
        backend, base_url, endpoint_model, api_key, concurrency, timeout, max_retries:
            see :mod:`backend.metrics.llm_backends`.
        max_new_tokens: Generation budget (upstream: 8192).
        batch_size: Prompts per batch (transformers).
        dtype: ``auto`` (bf16 on CUDA as upstream, fp32 on CPU) | ``fp32`` | ``bf16``.
    """

    spec = MetricSpec(
        name="crimson",
        outputs=(
            OutputSpec("crimson", True, "CRIMSON score in (-1, 1]"),
            OutputSpec("crimson_false", False, "false findings (count)"),
            OutputSpec("crimson_missing", False, "missing findings (count)"),
            OutputSpec("crimson_attribute", False, "attribute errors of matched findings"),
        ),
        needs_model=True,
        citation="Baharoon et al., CRIMSON, arXiv:2603.06183 (2026)",
    )
    model_label: ClassVar[str] = "CRIMSON"
    defaults: ClassVar[dict[str, Any]] = {
        "model": DEFAULT_MODEL,
        "revision": DEFAULT_REVISION,
        "guidelines": "auto",
        **BACKEND_DEFAULTS,
        "max_new_tokens": DEFAULT_MAX_NEW_TOKENS,
        "batch_size": 4,
        "dtype": "auto",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        g = self.options["guidelines"]
        if isinstance(g, str):
            g = g.strip().lower()
            if g not in {"auto", "true", "false", "1", "0", "yes", "no", "on", "off"}:
                raise ValueError(f"crimson.guidelines must be auto, true or false (got {g!r})")
            g = "auto" if g == "auto" else g in {"true", "1", "yes", "on"}
        self._guidelines_opt: bool | str = g if g == "auto" else bool(g)

    def guidelines(self) -> bool:
        """Whether the prompt carries the guideline parts for this model."""
        if self._guidelines_opt != "auto":
            return bool(self._guidelines_opt)
        name = (self._endpoint.model if self._endpoint is not None
                else str(self.options["model"]))
        return not name.rstrip("/").endswith(DEFAULT_MODEL.split("/")[1])

    def prompts(self, references: Sequence[str], candidates: Sequence[str],
                contexts: Sequence[Context] | None = None) -> list[list[Message]]:
        """The chat messages of each pair (``contexts`` aligned with the pairs)."""
        g = self.guidelines()
        ctxs = list(contexts) if contexts is not None else [None] * len(references)
        return [build_messages(r, c, x, guidelines=g)
                for r, c, x in zip(references, candidates, ctxs, strict=True)]

    def score(
        self,
        *,
        references: Sequence[str],
        candidates: Sequence[str],
        images: Sequence[Any] | None = None,
        contexts: Sequence[Context] | None = None,
    ) -> MetricResult:
        """Score pairs; ``contexts`` gives each pair's patient context (``Age``,
        ``Indication``, ... in prompt order) or ``None``.

        RadConcord's pairs carry no patient context, so the scoring runner never passes it;
        call this directly (or through the Python API) to use it.

        Raises:
            MetricInputError: when ``contexts`` is not aligned with the pairs or holds
                something other than mappings and ``None``.
        """
        if contexts is not None:
            if len(contexts) != len(references):
                raise MetricInputError(
                    f"contexts ({len(contexts)}) and pairs ({len(references)}) differ in length")
            for i, c in enumerate(contexts):
                if c is not None and not isinstance(c, Mapping):
                    raise MetricInputError(f"contexts[{i}] is {type(c).__name__}, expected a"
                                           " mapping such as {'Age': '82', 'Indication': ...}")
        self._contexts = None if contexts is None else list(contexts)
        try:
            return super().score(references=references, candidates=candidates, images=images)
        finally:
            self._contexts = None

    def _score(self, *, references: list[str], candidates: list[str], images: Any) -> MetricResult:
        contexts = getattr(self, "_contexts", None)
        answers = self.chat(self.prompts(references, candidates, contexts),
                            max_new_tokens=int(self.options["max_new_tokens"]))
        values: dict[str, list[float]] = {k: [] for k in self.spec.keys}
        details: list[dict[str, Any]] = []
        for i, answer in enumerate(answers):
            evaluation, flags = parse_answer(answer)
            result: dict[str, Any] | None = None
            if evaluation is not None:
                try:
                    result = score_evaluation(evaluation)
                except MalformedEvaluation as exc:
                    flags.append(f"malformed evaluation: {exc}")
                except TypeError as exc:  # e.g. a list where an id belongs (unhashable)
                    flags.append(f"malformed evaluation: {exc}")
            nan = math.nan
            values["crimson"].append(result["crimson"] if result else nan)
            values["crimson_false"].append(float(result["false_findings"]) if result else nan)
            values["crimson_missing"].append(float(result["missing_findings"]) if result else nan)
            values["crimson_attribute"].append(float(result["attribute_errors"]) if result
                                               else nan)
            details.append({
                "result": result,
                "evaluation": evaluation,
                "flags": flags,
                "context": dict(contexts[i]) if contexts and contexts[i] else None,
                "generation": answer,
            })
        flagged = sum(1 for d in details if d["flags"])
        if flagged:
            logger.info("crimson: %d of %d answers could not be scored", flagged, len(details))
        return MetricResult(values, {}, details)

    def signature(self) -> str:
        o = self.options
        g = self.guidelines()
        template = build_messages("{reference}", "{candidate}", {"{key}": "{value}"},
                                  guidelines=g)
        return (f"crimson|{self.backend_signature()}|greedy|max_new:{o['max_new_tokens']}"
                f"|guidelines:{int(g)}|prompt:crimson@{REFERENCE_COMMIT[:12]}-"
                f"{prompt_hash(template)}|parser:v{PARSER_VERSION}")
