"""CRIMSON against its reference code: the score, the answer repairs and the prompt.

Reference: rajpurkarlab/CRIMSON@07e333152f2cb9c3429ec4d4eba12a1a7fce979e (MIT),
``CRIMSONScore._calculate_crimson``, ``utils.parse_json_response`` and
``prompt_parts.build_prompt``, run by ``tests/fixtures/generators/crimson_reference.py`` on
70 fixed evaluations (10 hand-written, one per branch; 60 seeded random), 9 raw answers and 5
report pairs with and without patient context; its output
``tests/fixtures/crimson_reference.json`` is committed.
Tolerance: upstream rounds the score to 4 decimals, so ``round(ours, 4) == theirs`` exactly
and ``|ours - theirs| <= 5e-5``; the unrounded components (S, N_G, E_penalty, correct,
errors_more_than_correct) within 1e-12; counts, parsed objects and prompt text exactly.
What is not checked here: the fine-tuned model's answers (no weights offline).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from radconcord.backend.metrics import crimson
from radconcord.backend.metrics.crimson import build_prompt, parse_answer, score_evaluation

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "crimson_reference.json"
REF = json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_fixture_names_the_reference_commit() -> None:
    assert REF["source"] == f"rajpurkarlab/CRIMSON@{crimson.REFERENCE_COMMIT}"
    assert len(REF["scores"]) == 70 and not any("error" in s for s in REF["scores"])


@pytest.mark.parametrize("case", REF["scores"], ids=lambda c: str(c.get("crimson_score")))
def test_score_equals_reference(case) -> None:
    ours = score_evaluation(case["evaluation"])
    theirs = case["metrics"]
    assert round(ours["crimson"], 4) == case["crimson_score"]
    assert abs(ours["crimson"] - case["crimson_score"]) <= 5e-5
    assert -1 < ours["crimson"] <= 1
    for mine, key in (("S", "S"), ("N_G", "N_G"), ("E_false", "E_penalty"),
                      ("correct", "correct"),
                      ("errors_more_than_correct", "errors_more_than_correct")):
        assert math.isclose(ours[mine], theirs[key], rel_tol=0, abs_tol=1e-12), (mine, key)
    for key, n in case["error_counts"].items():
        assert ours[key] == n, key


@pytest.mark.parametrize("case", REF["parse"], ids=lambda c: c["raw"][:20])
def test_answer_repairs_equal_reference(case) -> None:
    obj, flags = parse_answer(case["raw"])
    assert obj == case["parsed"]
    assert (flags == []) == (case["parsed"] is not None)


@pytest.mark.parametrize("case", REF["prompts"], ids=lambda c: f"g{int(c['guidelines'])}")
def test_prompt_equals_reference(case) -> None:
    assert build_prompt(case["reference"], case["candidate"], case["context"],
                        guidelines=case["guidelines"]) == case["prompt"]


def test_system_prompt_equals_reference() -> None:
    assert crimson.SYSTEM == REF["system_prompt"]
