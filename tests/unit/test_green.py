"""GREEN: the output parser on hand-written generations, and the full generation path."""

from __future__ import annotations

import math

import pytest

from radconcord.backend.metrics import green, llm
from radconcord.backend.metrics.green import Green, parse_count, parse_generation
from tests.helpers_llm import SMOLLM2_CONVERTED_ROOT, build_tiny_llama, smollm2_gguf

WELL_FORMED = """[Explanation]:
The candidate misses the effusion and invents a nodule.

[Clinically Significant Errors]:
(a) False report of a finding in the candidate: 1. Right upper lobe nodule.
(b) Missing a finding present in the reference: 1. Left pleural effusion.
(c) Misidentification of a finding's anatomic location/position: 0.
(d) Misassessment of the severity of a finding: 0.
(e) Mentioning a comparison that isn't in the reference: 0.
(f) Omitting a comparison detailing a change from a prior study: 0.

[Clinically Insignificant Errors]:
(a) False report of a finding in the candidate: 0.
(b) Missing a finding present in the reference: 1. Mild degenerative spine changes.
(c) Misidentification of a finding's anatomic location/position: 0.
(d) Misassessment of the severity of a finding: 0.
(e) Mentioning a comparison that isn't in the reference: 0.
(f) Omitting a comparison detailing a change from a prior study: 0.

[Matched Findings]:
2. Normal heart size; no pneumothorax.
"""


def test_well_formed() -> None:
    p = parse_generation(WELL_FORMED)
    assert p.flags == []
    assert p.significant == {"a": 1, "b": 1, "c": 0, "d": 0, "e": 0, "f": 0}
    assert p.insignificant["b"] == 1 and sum(p.insignificant.values()) == 1
    assert p.matched == 2
    assert p.score() == pytest.approx(2 / (2 + 2))  # insignificant errors do not count


def test_no_errors_statements_count_zero() -> None:
    text = (
        "[Explanation]: Identical.\n[Clinically Significant Errors]:\nNo errors.\n"
        "[Clinically Insignificant Errors]: None\n[Matched Findings]:\n3. a; b; c"
    )
    p = parse_generation(text)
    assert p.flags == []
    assert set(p.significant.values()) == {0} and set(p.insignificant.values()) == {0}
    assert p.score() == 1.0


def test_numbers_as_words_and_case() -> None:
    text = WELL_FORMED.replace("(a) False report of a finding in the candidate: 1.",
                               "(A) false report of a finding in the candidate: Two.")
    text = text.replace("[Matched Findings]:\n2.", "[matched findings]:\nthree findings:")
    p = parse_generation(text)
    assert p.significant["a"] == 2 and p.matched == 3
    assert p.score() == pytest.approx(3 / (3 + 3))
    assert parse_count("none") == 0 and parse_count("twelve.") == 12 and parse_count("x") is None


def test_missing_matched_section_is_nan_and_flagged() -> None:
    text = WELL_FORMED.split("[Matched Findings]")[0]
    p = parse_generation(text)
    assert "missing section: Matched Findings" in p.flags
    assert p.matched is None and math.isnan(p.score())


def test_matched_zero_gives_zero_even_without_error_section() -> None:
    p = parse_generation("[Matched Findings]:\n0. Nothing in common.")
    assert p.score() == 0.0
    assert "missing section: Clinically Significant Errors" in p.flags


def test_missing_significant_section_is_nan() -> None:
    text = "[Explanation]: x\n[Matched Findings]:\n2. a; b"
    p = parse_generation(text)
    assert p.matched == 2 and math.isnan(p.score())
    assert "missing section: Clinically Significant Errors" in p.flags
    assert all(v is None for v in p.significant.values())


def test_truncated_generation_counts_what_parsed() -> None:
    cut = WELL_FORMED[: WELL_FORMED.index("(d) Misassessment")]
    p = parse_generation(cut)
    assert p.significant == {"a": 1, "b": 1, "c": 0, "d": None, "e": None, "f": None}
    assert "missing item: (d) in Clinically Significant Errors" in p.flags
    assert "missing section: Matched Findings" in p.flags
    assert math.isnan(p.score())


def test_extra_text_and_bullets_and_duplicates() -> None:
    text = (
        "Sure! Here is my analysis.\n" + WELL_FORMED.replace("(c) Mis", "- (c) Mis")
        + "\n[Matched Findings]:\n9. duplicate\nThanks for asking."
    )
    p = parse_generation(text)
    assert p.significant["c"] == 0 and p.matched == 2
    assert "duplicate section: Matched Findings (first kept)" in p.flags


def test_unreadable_count_is_flagged_not_invented() -> None:
    text = WELL_FORMED.replace("(b) Missing a finding present in the reference: 1. Left",
                               "(b) Missing a finding present in the reference: several. Left")
    p = parse_generation(text)
    assert p.significant["b"] is None
    assert any(f.startswith("unreadable count: (b) in Clinically Significant Errors")
               for f in p.flags)
    # The parsed categories still give a score (1 error in (a)).
    assert p.score() == pytest.approx(2 / 3)


def test_garbage_and_empty() -> None:
    for text in ("", "   ", "lorem ipsum 3 4 5", "[Explanation]", None):
        p = parse_generation(text)  # type: ignore[arg-type]
        assert math.isnan(p.score())
        assert p.flags


def test_prompt_keeps_output_format() -> None:
    prompt = green.build_prompt("REF TEXT", "CAND TEXT")
    for header in green.SECTIONS:
        assert f"[{header}]:" in prompt
    for x, name in green.CATEGORY_NAMES.items():
        assert f"({x}) {name}: <count>." in prompt
    assert prompt.index("REF TEXT") < prompt.index("CAND TEXT")


def test_availability_without_model(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path))
    reason = Green().availability()
    assert reason is not None and "revision" in reason and "green.model" in reason
    assert "does not exist" in Green(model=str(tmp_path / "x.gguf")).availability()


def test_tiny_model_full_path_flags_garbage(tmp_path) -> None:
    """A random tiny Llama writes garbage: every value is NaN and flagged, nothing invented."""
    path = build_tiny_llama(tmp_path)
    metric = Green(model=str(path), max_new_tokens=12, batch_size=2)
    assert metric.availability() is None
    refs = ["No acute process.", "Mild cardiomegaly.", "Lungs are clear."]
    cands = ["Lungs are clear.", "Small left effusion.", "Lungs are clear."]
    res = metric.score(references=refs, candidates=cands)
    assert len(res) == 3 and res.details is not None
    for i, d in enumerate(res.details):
        assert isinstance(d["generation"], str) and d["flags"]
        # Values equal what the parser makes of the raw generation.
        p = parse_generation(d["generation"])
        v = res.values["green"][i]
        assert (math.isnan(v) and math.isnan(p.score())) or v == p.score()
        assert d["matched"] == p.matched
    # Greedy decoding: a second run gives the same generations.
    again = metric.generate(refs, cands)
    assert again == [d["generation"] for d in res.details]
    sig = metric.signature()
    assert "greedy" in sig and "max_new:12" in sig and "fp:" in sig


def test_reports_are_truncated_to_max_words(tmp_path) -> None:
    long_ref = " ".join(["effusion"] * 400)
    assert len(llm.truncate_words(long_ref, green.MAX_WORDS).split()) == 300


@pytest.mark.slow
def test_smollm2_generation_is_parsed(tmp_path, monkeypatch) -> None:
    """SmolLM2-135M-Instruct (GGUF, converted once to .cache/models/gguf-converted)."""
    gguf = smollm2_gguf()
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(SMOLLM2_CONVERTED_ROOT))
    metric = Green(model=str(gguf), max_new_tokens=32, batch_size=2)
    assert metric.availability() is None
    res = metric.score(
        references=["No acute cardiopulmonary process.", "Small left pleural effusion."],
        candidates=["Lungs are clear.", "Large right pleural effusion."],
    )
    assert res.details is not None
    for i, d in enumerate(res.details):
        assert d["generation"].strip()
        p = parse_generation(d["generation"])
        assert p.flags == d["flags"]
        v = res.values["green"][i]
        assert (math.isnan(v) and math.isnan(p.score())) or v == p.score()
    converted = llm.converted_path(gguf, SMOLLM2_CONVERTED_ROOT / "gguf-converted")
    assert (converted / "model.safetensors").is_file()
    assert "gguf:sha256:" in metric.signature()
