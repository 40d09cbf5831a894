"""GREEN (Ostmeier et al., Findings of EMNLP 2024): an LLM writes an error analysis.

A fine-tuned causal LM (default ``StanfordAIMI/GREEN-RadLlama2-7b``) reads a prompt holding the
reference and the candidate report and writes::

    [Explanation]:
    <free text>

    [Clinically Significant Errors]:
    (a) False report of a finding in the candidate: <count>. <errors>
    ...
    (f) Omitting a comparison detailing a change from a prior study: <count>. <errors>

    [Clinically Insignificant Errors]:
    (a) ...: <count>. ...

    [Matched Findings]:
    <count>. <findings>

GREEN = matched / (matched + sum of clinically significant errors (a)-(f)); 0 when matched = 0.

Parsing never raises. What parses is counted, the rest is flagged in the pair's details:

* ``green_matched`` is ``nan`` when the Matched Findings section or its count is missing or
  unreadable; then ``green`` is ``nan`` too (no value is invented).
* ``green_sig_<x>`` is ``nan`` for a category whose line is missing or whose count is
  unreadable. A section that states no errors at all (``None``, ``No errors``, ``0``) without
  category lines counts 0 for every category.
* ``green`` uses the significant categories that parsed. It is ``nan`` when the whole
  Clinically Significant Errors section is missing, except that a parsed matched count of 0
  gives ``green = 0`` (the definition needs no error counts then).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from radconcord.backend.metrics import llm
from radconcord.backend.metrics.base import MetricResult, MetricSpec, OutputSpec
from radconcord.backend.metrics.llm_backends import (
    BACKEND_DEFAULTS,
    LLMMetric,
    Message,
    prompt_hash,
)

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "StanfordAIMI/GREEN-RadLlama2-7b"
#: No commit of the GREEN checkpoint could be verified offline, so none is pinned: give
#: ``green.revision=<sha>`` or a local folder (``green.model=/path``) to use it.
DEFAULT_REVISION: str | None = None
MAX_WORDS = 300
LETTERS = "abcdef"
CATEGORY_NAMES: dict[str, str] = {
    "a": "False report of a finding in the candidate",
    "b": "Missing a finding present in the reference",
    "c": "Misidentification of a finding's anatomic location/position",
    "d": "Misassessment of the severity of a finding",
    "e": "Mentioning a comparison that isn't in the reference",
    "f": "Omitting a comparison detailing a change from a prior study",
}
SECTIONS = (
    "Explanation",
    "Clinically Significant Errors",
    "Clinically Insignificant Errors",
    "Matched Findings",
)
PARSER_VERSION = 1


def build_prompt(reference: str, candidate: str) -> str:
    """The instruction given to the model (our wording; GREEN's output format).

    Both reports are cut to :data:`MAX_WORDS` words before they get here.
    """
    cats = "\n".join(f"({x}) {name}." for x, name in CATEGORY_NAMES.items())
    fmt_items = "\n".join(f"({x}) {name}: <count>. <Error 1>; <Error 2>; ..." for x, name in
                          CATEGORY_NAMES.items())
    return (
        "Task: compare a candidate chest radiograph report with a reference report written by "
        "an expert radiologist, and count the candidate's errors.\n\n"
        "Judge clinical findings, not wording. Sort every error into one of these categories, "
        "and say whether it is clinically significant or clinically insignificant:\n"
        f"{cats}\n"
        "Also count the findings that the two reports share.\n\n"
        f"Reference report:\n{reference}\n\n"
        f"Candidate report:\n{candidate}\n\n"
        "Answer in exactly this format, writing 0 for a category without errors:\n"
        "[Explanation]:\n<Why the candidate does or does not match the reference>\n\n"
        "[Clinically Significant Errors]:\n"
        f"{fmt_items}\n\n"
        "[Clinically Insignificant Errors]:\n"
        f"{fmt_items}\n\n"
        "[Matched Findings]:\n<count>. <Finding 1>; <Finding 2>; ..."
    )


#: Hash of the prompt template (in endpoint signatures).
PROMPT_HASH = prompt_hash(build_prompt("{reference}", "{candidate}"))


# --------------------------------------------------------------------------- parsing

_NUMBER_WORDS: dict[str, int] = {
    w: i
    for i, w in enumerate(
        (
            "zero one two three four five six seven eight nine ten eleven twelve thirteen"
            " fourteen fifteen sixteen seventeen eighteen nineteen twenty"
        ).split()
    )
}
_NUMBER_WORDS.update({"no": 0, "none": 0, "nil": 0, "single": 1, "a": 1, "an": 1})
_HEADER = re.compile(
    r"\[\s*(explanation|clinically\s+significant\s+errors|clinically\s+insignificant\s+errors"
    r"|matched\s+findings)\s*\]\s*:?",
    re.IGNORECASE,
)
_ITEM = re.compile(r"^[ \t>*\-]*\(?\s*([a-fA-F])\s*\)[^:\n]*?:[ \t]*([^\n]*)$", re.MULTILINE)
_LEADING_TOKEN = re.compile(r"^\W*?([A-Za-z]+|\d+)")
_NONE_STATEMENT = re.compile(
    r"^\W*(none|no\b|nil\b|n/a\b|0\b|zero\b|there\s+are\s+no\b)", re.IGNORECASE
)


def parse_count(text: str) -> int | None:
    """Read a count at the start of ``text``: digits or an English number word (0-20).

    ``None``/``no``/``nil`` read as 0. Returns ``None`` when no count can be read.
    """
    m = _LEADING_TOKEN.match(text.strip())
    if not m:
        return None
    token = m.group(1).lower()
    if token.isdigit():
        return int(token)
    return _NUMBER_WORDS.get(token)


def _canonical(header: str) -> str:
    key = " ".join(header.lower().split())
    for name in SECTIONS:
        if name.lower() == key:
            return name
    raise AssertionError(header)  # the regex only matches the four names


@dataclass
class GreenParse:
    """What could be read from one generation.

    Attributes:
        significant: Category letter -> count, ``None`` where missing or unreadable.
        insignificant: Same for clinically insignificant errors.
        matched: Matched findings count or ``None``.
        sections: Names of the sections found.
        flags: Human-readable problems (``missing section: Matched Findings``).
    """

    significant: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(LETTERS))
    insignificant: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(LETTERS))
    matched: int | None = None
    sections: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    @property
    def significant_section_parsed(self) -> bool:
        """Whether any significant category has a count."""
        return any(v is not None for v in self.significant.values())

    def score(self) -> float:
        """GREEN from the parsed counts; ``nan`` when undefined (see module docstring)."""
        if self.matched is None:
            return math.nan
        if self.matched == 0:
            return 0.0
        if not self.significant_section_parsed:
            return math.nan
        errors = sum(v for v in self.significant.values() if v is not None)
        return self.matched / (self.matched + errors)


def _split_sections(text: str, out: GreenParse) -> dict[str, str]:
    bodies: dict[str, str] = {}
    matches = list(_HEADER.finditer(text))
    for i, m in enumerate(matches):
        name = _canonical(m.group(1))
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        if name in bodies:
            out.flags.append(f"duplicate section: {name} (first kept)")
            continue
        bodies[name] = text[m.end() : end]
        out.sections.append(name)
    for name in SECTIONS:
        if name not in bodies:
            out.flags.append(f"missing section: {name}")
    return bodies


def _parse_errors(name: str, body: str, counts: dict[str, int | None], flags: list[str]) -> None:
    items = list(_ITEM.finditer(body))
    if not items:
        if _NONE_STATEMENT.match(body.strip()):
            for x in LETTERS:
                counts[x] = 0
        else:
            flags.append(f"no category lines in section: {name}")
        return
    for m in items:
        letter = m.group(1).lower()
        rest = m.group(2)
        if counts[letter] is not None:
            flags.append(f"duplicate item: ({letter}) in {name} (first kept)")
            continue
        n = parse_count(rest)
        if n is None:
            flags.append(f"unreadable count: ({letter}) in {name}: {rest.strip()[:40]!r}")
            continue
        counts[letter] = n
    for x in LETTERS:
        if counts[x] is None and not any(f"({x}) in {name}" in f for f in flags):
            flags.append(f"missing item: ({x}) in {name}")


def parse_generation(text: str) -> GreenParse:
    """Parse a GREEN-style error analysis; never raises, flags what it cannot read."""
    out = GreenParse()
    if not isinstance(text, str) or not text.strip():
        out.flags.append("empty generation")
        for name in SECTIONS:
            out.flags.append(f"missing section: {name}")
        return out
    bodies = _split_sections(text, out)
    if "Clinically Significant Errors" in bodies:
        _parse_errors(
            "Clinically Significant Errors",
            bodies["Clinically Significant Errors"],
            out.significant,
            out.flags,
        )
    if "Clinically Insignificant Errors" in bodies:
        _parse_errors(
            "Clinically Insignificant Errors",
            bodies["Clinically Insignificant Errors"],
            out.insignificant,
            out.flags,
        )
    if "Matched Findings" in bodies:
        body = bodies["Matched Findings"].strip()
        n = parse_count(body) if body else None
        if n is None:
            out.flags.append(f"unreadable count: Matched Findings: {body[:40]!r}")
        out.matched = n
    return out


# --------------------------------------------------------------------------- metric


class Green(LLMMetric):
    """GREEN score and its parsed error counts per pair.

    Options:
        model: Hub id, model folder or ``.gguf`` file.
        revision: Hub revision (commit) for a hub id.
        max_new_tokens: Generation budget per pair.
        batch_size: Prompts per generation batch.
        dtype: ``fp32`` | ``bf16`` | ``fp16`` (half types on CUDA only).
        max_words: Reports are cut to this many words before prompting.
        backend: ``transformers`` (in the worker) | ``openai`` (any OpenAI-compatible chat
            endpoint, e.g. ``vllm serve StanfordAIMI/GREEN-RadLlama2-7b``).
        base_url, endpoint_model, api_key, concurrency, timeout, max_retries: endpoint
            settings (see :mod:`backend.metrics.llm_backends`; else ``RADCONCORD_LLM_*``).
    """

    spec = MetricSpec(
        name="green",
        outputs=(
            OutputSpec("green", True, "matched / (matched + clinically significant errors)"),
            *(
                OutputSpec(f"green_sig_{x}", False, f"significant errors ({x}): {n}")
                for x, n in CATEGORY_NAMES.items()
            ),
            OutputSpec("green_matched", True, "matched findings count"),
        ),
        needs_model=True,
        citation="Ostmeier et al., GREEN, Findings of EMNLP 2024",
    )
    model_label: ClassVar[str] = "GREEN"
    defaults: ClassVar[dict[str, Any]] = {
        "model": DEFAULT_MODEL,
        "revision": DEFAULT_REVISION,
        "max_new_tokens": 512,
        "batch_size": 8,
        "dtype": "fp32",
        "max_words": MAX_WORDS,
        **BACKEND_DEFAULTS,
    }

    def _ref(self) -> llm.LMRef:
        return self.lm_ref()

    def availability(self) -> str | None:
        if self.backend_name != "transformers":
            return super().availability()
        reason = llm.availability(self._ref())
        if reason is None:
            return None
        if not self._ref().gguf and self.options["revision"] is None:
            return (
                f"GREEN model not available: {reason}. No revision of {self.options['model']} is"
                " pinned here: give green.revision=<commit sha> or green.model=<local folder>"
            )
        return f"GREEN model not available: {reason}"

    def prompts(self, references: list[str], candidates: list[str]) -> list[list[Message]]:
        """One user message per pair (reports cut to ``max_words`` words)."""
        n = int(self.options["max_words"])
        return [
            [{"role": "user",
              "content": build_prompt(llm.truncate_words(r, n), llm.truncate_words(c, n))}]
            for r, c in zip(references, candidates, strict=True)
        ]

    def generate(self, references: list[str], candidates: list[str]) -> list[str]:
        """Raw generations for aligned pairs (reports cut to ``max_words`` words)."""
        return self.chat(self.prompts(references, candidates),
                         max_new_tokens=int(self.options["max_new_tokens"]))

    def _score(self, *, references: list[str], candidates: list[str], images: Any) -> MetricResult:
        gens = self.generate(references, candidates)
        values: dict[str, list[float]] = {k: [] for k in self.spec.keys}
        details: list[dict[str, Any]] = []
        for gen in gens:
            p = parse_generation(gen)
            values["green"].append(p.score())
            for x in LETTERS:
                v = p.significant[x]
                values[f"green_sig_{x}"].append(math.nan if v is None else float(v))
            values["green_matched"].append(math.nan if p.matched is None else float(p.matched))
            details.append(
                {
                    "significant": p.significant,
                    "insignificant": p.insignificant,
                    "matched": p.matched,
                    "flags": p.flags,
                    "generation": gen,
                }
            )
        n_flagged = sum(1 for d in details if d["flags"])
        if n_flagged:
            logger.info("green: %d of %d generations had parse flags", n_flagged, len(details))
        return MetricResult(values, {}, details)

    def signature(self) -> str:
        o = self.options
        if self.backend_name != "transformers":
            return (
                f"green|{self.backend_signature()}|greedy|max_new:{o['max_new_tokens']}"
                f"|words:{o['max_words']}|prompt:v1-{PROMPT_HASH}|parser:v{PARSER_VERSION}"
            )
        # Unchanged from before the endpoint backend existed, so cached scores stay valid.
        return (
            f"green|model:{llm.identity(self._ref())}|rev:{o['revision']}|greedy"
            f"|max_new:{o['max_new_tokens']}|words:{o['max_words']}|dtype:{o['dtype']}"
            f"|prompt:v1|parser:v{PARSER_VERSION}"
        )
