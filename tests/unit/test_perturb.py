"""Perturbation probes: each type on hand-made reports, exact expected strings, skips, seeds."""

from __future__ import annotations

import random

import pytest

from radconcord.backend.analysis import perturb
from radconcord.backend.analysis.perturb import KINDS, SIGNIFICANT, Perturbation, Skipped, generate

REPORT = ("PA and lateral views of the chest. There is a small left pleural effusion. "
          "Heart size is normal. Osseous structures are unremarkable.")


def test_significance_of_each_type():
    assert SIGNIFICANT == {"remove_finding": True, "remove_nonclinical": False,
                           "swap_laterality": True, "change_severity": True, "reword": False}


def test_split_sentences_keeps_decimals_and_line_breaks():
    text = "Nodule measures 1.5 cm.\nNo effusion Heart normal? Yes."
    spans = perturb.split_sentences(text)
    assert [text[a:b] for a, b in spans] == ["Nodule measures 1.5 cm.\n",
                                             "No effusion Heart normal? ", "Yes."]


@pytest.mark.parametrize("sentence, clinical", [
    ("There is a small left pleural effusion.", True),
    ("Heart size is normal.", True),            # a negative mention is clinical
    ("No pneumothorax.", True),
    ("Osseous structures are unremarkable.", False),
    ("PA and lateral views of the chest.", False),
    ("Comparison is made to the prior study.", False),
])
def test_clinical_sentences(sentence, clinical):
    assert perturb.is_clinical(sentence) is clinical


def test_remove_finding_removes_a_clinical_sentence_only():
    seen = set()
    for seed in range(12):
        p = perturb.perturb(REPORT, "remove_finding", seed=seed)
        assert isinstance(p, Perturbation) and p.significant
        seen.add(p.perturbed)
    assert seen == {
        "PA and lateral views of the chest. Heart size is normal. Osseous structures are"
        " unremarkable.",
        "PA and lateral views of the chest. There is a small left pleural effusion. Osseous"
        " structures are unremarkable.",
    }


def test_remove_nonclinical_removes_boilerplate_only():
    seen = {perturb.perturb(REPORT, "remove_nonclinical", seed=s).perturbed for s in range(12)}
    assert seen == {
        "There is a small left pleural effusion. Heart size is normal. Osseous structures are"
        " unremarkable.",
        "PA and lateral views of the chest. There is a small left pleural effusion. Heart size"
        " is normal.",
    }


def test_removal_skips_are_reported():
    one = perturb.perturb("Small left pleural effusion.", "remove_finding")
    assert one == Skipped(0, "remove_finding", "fewer than two sentences")
    only_findings = perturb.perturb("No pneumothorax. Mild cardiomegaly.", "remove_nonclinical",
                                    index=4)
    assert only_findings == Skipped(4, "remove_nonclinical", "no non-clinical sentence")


def test_swap_laterality_keeps_case_and_skips_two_sided_sentences():
    text = "Left lower lobe opacity. RIGHT effusion, right apex clear. Left and right lungs."
    p = perturb.perturb(text, "swap_laterality")
    assert p.perturbed == ("Right lower lobe opacity. LEFT effusion, left apex clear. "
                           "Left and right lungs.")
    assert perturb.perturb("Bilateral effusions. The lefty view.", "swap_laterality") == Skipped(
        0, "swap_laterality", "no sentence names exactly one side")


def test_change_severity_both_ways():
    p = perturb.perturb("Mild cardiomegaly. Large effusion, minimally displaced. Small gap.",
                        "change_severity")
    assert p.perturbed == "Severe cardiomegaly. Small effusion, moderately displaced. Large gap."
    assert isinstance(perturb.perturb("No effusion.", "change_severity"), Skipped)


def test_reword_sites_and_one_edit():
    text = "There is no effusion. Lungs are unremarkable."
    assert perturb.reword_sites(text) == [
        (0, 11, "No evidence of"),
        (32, 44, "within normal limits"),
        (44, 45, ""),
    ]
    outcomes = {perturb.perturb(text, "reword", seed=s).perturbed for s in range(20)}
    assert outcomes == {
        "No evidence of effusion. Lungs are unremarkable.",
        "There is no effusion. Lungs are within normal limits.",
        "There is no effusion. Lungs are unremarkable",
    }
    assert perturb.perturb("Cardiomegaly", "reword") == Skipped(
        0, "reword", "no rewording rule applies")


def test_generate_is_deterministic_per_seed():
    reports = [REPORT, "Mild cardiomegaly. No pneumothorax. The lungs are clear.",
               "No acute cardiopulmonary process"]
    a = generate(reports, seed=5)
    assert a == generate(reports, seed=5)
    assert len(a.perturbations) + len(a.skipped) == len(reports) * len(KINDS)
    assert all(p.perturbed != p.original for p in a.perturbations)
    # The third report (one sentence, no side, no severity word, no rule) yields nothing.
    assert {s.kind for s in a.skipped if s.index == 2} == set(KINDS)
    # Some seed gives another choice somewhere (the choices are random, not fixed).
    others = [generate(reports, seed=s) for s in range(6, 16)]
    assert any(o.perturbations != a.perturbations for o in others)
    # The choice matches the documented random stream.
    rng = random.Random("5:0:remove_finding")
    spans = perturb.split_sentences(REPORT)
    clinical = [sp for sp in spans if perturb.is_clinical(REPORT[sp[0]:sp[1]])]
    chosen = clinical[rng.randrange(len(clinical))]
    first = next(p for p in a.perturbations if p.index == 0 and p.kind == "remove_finding")
    assert first.perturbed == perturb.remove_sentence(REPORT, chosen)


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown perturbation"):
        perturb.perturb(REPORT, "typo")
    with pytest.raises(ValueError, match="unknown perturbation"):
        generate([REPORT], kinds=["typo"])
