"""Reading JSON out of a language model's answer: the objects it contains, parsed leniently.

Judges and labelers (llm_rexval, the CT-RATE LLM labeler) answer in prose around one or more
JSON objects, often in a fenced block, sometimes cut off by the token limit, sometimes with
Python literals or trailing commas. These two functions are the one place that reads them.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|python)?[ \t]*\n?(.*?)```", re.DOTALL)


def json_objects(text: str) -> list[str]:
    """Every top-level ``{...}`` span of ``text`` (quotes respected), fenced blocks first.

    A cut answer (a block ending inside braces, as at the token limit) is closed and
    returned after that block's complete objects, so it can still be tried.
    """
    blocks = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    spans: list[str] = []
    for block in blocks:
        depth, start, quote, escape = 0, -1, "", False
        for i, ch in enumerate(block):
            if quote:
                if escape:
                    escape = False
                elif ch == "\\":
                    escape = True
                elif ch == quote:
                    quote = ""
                continue
            if ch in "\"'" and depth > 0:
                if ch == "'" and i > 0 and block[i - 1].isalnum():
                    continue  # an apostrophe in a word, not a quote
                quote = ch
            elif ch == "{":
                if depth == 0:
                    start = i
                depth += 1
            elif ch == "}" and depth > 0:
                depth -= 1
                if depth == 0:
                    spans.append(block[start:i + 1])
        if depth > 0 and start >= 0:
            spans.append(block[start:] + "}" * depth)
    return spans


def loads_lenient(blob: str) -> Any:
    """JSON, else JSON without trailing commas, else a Python literal; ``None`` if none."""
    try:
        return json.loads(blob)
    except json.JSONDecodeError:
        pass
    cleaned = re.sub(r",\s*([}\]])", r"\1", blob)
    try:
        return json.loads(cleaned)
    except json.JSONDecodeError:
        pass
    py = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False",
                                            re.sub(r"\bnull\b", "None", cleaned)))
    try:
        return ast.literal_eval(py)
    except Exception:  # noqa: BLE001 - literal_eval raises many types on odd input
        return None
