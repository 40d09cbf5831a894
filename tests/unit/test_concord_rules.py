"""concord's ``rules`` variant: exact on hand-made pairs of each ReXVal category and level.

Each pair below makes exactly one error of the category and significance it is named after
(the rest of both reports agrees), so the expected 12-count vector has a single 1.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from radconcord.backend.analysis import perturb
from radconcord.backend.analysis import synthetic_errors as synth
from radconcord.backend.metrics.concord import rules
from radconcord.backend.metrics.concord.rules import COUNT_NAMES, rule_counts

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

ONE_ERROR: dict[str, tuple[str, str, str]] = {
    # id: (expected cell, reference, candidate)
    "added effusion": ("c1_sig", "The lungs are clear. No pleural effusion.",
                       "The lungs are clear. Small right pleural effusion."),
    "added granuloma": ("c1_insig", "The lungs are clear.",
                        "The lungs are clear. Calcified granuloma in the right upper lobe."),
    "dropped pneumonia": ("c2_sig", "Right lower lobe pneumonia. Heart size is normal.",
                          "Heart size is normal."),
    "dropped degenerative change": ("c2_insig",
                                    "The lungs are clear. Degenerative changes of the thoracic"
                                    " spine.", "The lungs are clear."),
    "dropped old healed fracture": ("c2_insig",
                                    "Old healed right rib fracture. The lungs are clear.",
                                    "The lungs are clear."),
    "dropped acute fracture": ("c2_sig", "Acute right rib fracture. The lungs are clear.",
                               "The lungs are clear."),
    "dropped nipple shadow": ("c2_insig", "Heart size is normal. Right nipple shadow.",
                              "Heart size is normal."),
    "effusion side": ("c3_sig", "Small left pleural effusion. No pneumothorax.",
                      "Small right pleural effusion. No pneumothorax."),
    "atelectasis zone": ("c3_sig", "Atelectasis in the left lower lobe.",
                         "Atelectasis in the left upper lobe."),
    "granuloma side": ("c3_insig", "Calcified granuloma in the right upper lobe.",
                       "Calcified granuloma in the left upper lobe."),
    "effusion size": ("c4_sig", "Small right pleural effusion.", "Large right pleural effusion."),
    # One severity level apart is insignificant, two significant (the generator's rule).
    "edema one level": ("c4_insig", "Mild pulmonary edema. No pneumothorax.",
                        "Moderate pulmonary edema. No pneumothorax."),
    "edema two levels": ("c4_sig", "Mild pulmonary edema. No pneumothorax.",
                         "Severe pulmonary edema. No pneumothorax."),
    # The generator's minor findings are insignificant here too.
    "dropped hiatal hernia": ("c2_insig", "Hiatal hernia. The lungs are clear.",
                              "The lungs are clear."),
    "added subsegmental atelectasis": ("c1_insig", "The lungs are clear.",
                                       "The lungs are clear. Subsegmental atelectasis at the"
                                       " left base."),
    "dropped low lung volumes": ("c2_insig", "Low lung volumes. No pleural effusion.",
                                 "No pleural effusion."),
    "added osteopenia": ("c1_insig", "Heart size is normal.",
                         "Heart size is normal. Diffuse osteopenia."),
    "dropped lobar atelectasis": ("c2_sig", "Left lower lobe atelectasis. No effusion.",
                                  "No effusion."),
    "degenerative severity": ("c4_insig", "Mild degenerative changes of the thoracic spine.",
                              "Severe degenerative changes of the thoracic spine."),
    "added change": ("c5_sig", "Mild pulmonary edema.",
                     "Mild pulmonary edema, increased since the prior study."),
    "added stability": ("c5_insig", "Heart size is normal. The lungs are clear.",
                        "Heart size is normal. The lungs are clear, unchanged from the prior"
                        " study."),
    "dropped change": ("c6_sig", "Mild pulmonary edema, increased since the prior study.",
                       "Mild pulmonary edema."),
    "dropped stability": ("c6_insig", "Stable cardiomegaly. The lungs are clear.",
                          "Cardiomegaly. The lungs are clear."),
}


@pytest.mark.parametrize("name", list(ONE_ERROR))
def test_one_error_of_each_category_and_level(name):
    cell, reference, candidate = ONE_ERROR[name]
    expected = [0] * 12
    expected[COUNT_NAMES.index(cell)] = 1
    assert rule_counts(reference, candidate) == expected, name


def test_every_cell_is_covered_by_a_hand_made_pair():
    assert {cell for cell, _, _ in ONE_ERROR.values()} == set(COUNT_NAMES)


ZERO: dict[str, tuple[str, str]] = {
    "identical": ("Small left pleural effusion with adjacent atelectasis. Stable cardiomegaly."
                  " No pneumothorax.",) * 2,
    "rewording": ("There is no pneumothorax. The heart is normal in size. The lungs are clear."
                  " Degenerative changes of the spine.",
                  "No evidence of pneumothorax. Heart size is normal. Both lungs are clear."
                  " Degenerative change of the spine."),
    "rewording of a finding": ("Small left pleural effusion is seen. Cardiomediastinal"
                               " silhouette is unremarkable.",
                               "Small left pleural effusion is noted. Cardiomediastinal"
                               " silhouette is within normal limits."),
    "reordered sentences": ("Mild cardiomegaly. Small right pleural effusion. No pneumothorax.",
                            "No pneumothorax. Small right pleural effusion. Mild cardiomegaly."),
    "opacity described as atelectasis": ("Bibasilar opacities likely reflect atelectasis.",
                                         "Bibasilar atelectasis."),
    "empty pair": ("", ""),
}


@pytest.mark.parametrize("name", list(ZERO))
def test_identical_and_reworded_pairs_have_no_error(name):
    reference, candidate = ZERO[name]
    assert rule_counts(reference, candidate) == [0] * 12


def test_the_perturbation_engines_rewordings_count_zero():
    """Every rewording of the fixture reports by backend/analysis/perturb.py keeps the facts."""
    reports = sorted({json.loads(line)[side]
                      for line in (FIXTURES / "report_pairs.jsonl").read_text().splitlines()
                      for side in ("reference", "candidate")})
    checked = 0
    for i, text in enumerate(reports):
        got = perturb.reword(text, random.Random(i))
        if got is None:
            continue
        reworded = got[0]
        assert rule_counts(text, reworded) == [0] * 12, (text, reworded)
        checked += 1
    assert checked >= 10


def test_several_errors_add_up_and_name_their_sentences():
    reference = "Small left pleural effusion. Stable cardiomegaly. No pneumothorax."
    candidate = "Large right pleural effusion. No pneumothorax. Right upper lobe nodule."
    ref, cand = rules.analyze_reports([reference, candidate])
    errors = rules.compare(ref, cand)
    got = {(e.category, e.significant, e.finding) for e in errors}
    assert got == {
        (1, True, "Lung Lesion"),  # the nodule
        (2, True, "Cardiomegaly"),
        (3, True, "Pleural Effusion"),
        (4, True, "Pleural Effusion"),
        (6, False, "Cardiomegaly"),  # "stable" omitted
    }
    for e in errors:
        for text, sentence in ((reference, e.reference), (candidate, e.candidate)):
            if sentence is not None:
                assert text[sentence.start:sentence.end] == sentence.text
    side = next(e for e in errors if e.category == 3)
    assert side.reference.text == "Small left pleural effusion."
    assert side.candidate.text == "Large right pleural effusion."
    assert side.as_dict()["candidate"] == {"text": "Large right pleural effusion.",
                                           "span": [0, 29]}
    assert sum(rules.count_vector(errors)) == len(errors) == 5


def test_sentences_split_like_the_perturbation_engine():
    text = "Nodule of 1.5 cm. No effusion!\nHeart normal?  Lungs clear"
    spans = rules.split_sentences(text)
    assert [text[s:e] for s, e in spans] == [
        "Nodule of 1.5 cm.", "No effusion!", "Heart normal?", "Lungs clear"]
    assert [text[s:e].strip() for s, e in perturb.split_sentences(text)] == \
        [text[s:e] for s, e in spans]


def test_clauses_give_each_finding_its_own_side():
    # The effusion is left and the atelectasis right: swapping the atelectasis side only.
    ref = "Small left pleural effusion and right basilar atelectasis."
    cand = "Small left pleural effusion and left basilar atelectasis."
    a, b = rules.analyze_reports([ref, cand])
    assert a.findings["Pleural Effusion"].sides == {"left"}
    assert a.findings["Atelectasis"].sides == {"right"}
    errors = rules.compare(a, b)
    assert [(e.category, e.finding) for e in errors] == [(3, "Atelectasis")]


def test_negated_findings_and_heart_chambers_are_no_findings():
    a, = rules.analyze_reports(["No pneumothorax. Pacemaker leads in the right atrium and"
                                " right ventricle. No granuloma."])
    assert a.present == {"Support Devices"}
    assert a.findings["Support Devices"].sides == set()
    assert not a.findings["Granuloma"].present


def test_the_sentence_cache_does_not_change_results():
    refs = [r for _, r, _ in ONE_ERROR.values()]
    cands = [c for _, _, c in ONE_ERROR.values()]
    cache: dict = {}
    shared = [rules.count_vector(rules.compare(r, c)) for r, c in zip(
        rules.analyze_reports(refs, cache), rules.analyze_reports(cands, cache), strict=True)]
    alone = [rule_counts(r, c) for r, c in zip(refs, cands, strict=True)]
    assert shared == alone
    assert cache  # sentences were cached


# The generator's minor concepts and the rules' names for them (old fractures: the rules'
# old/healed/remote modifier, not a finding of its own).
GENERATOR_TO_RULES = {
    "granuloma": "Granuloma", "degenerative": "Degenerative Change",
    "spine_curvature": "Scoliosis", "aorta_calcification": "Tortuous Aorta",
    "scarring": "Scarring", "nipple_shadow": "Nipple Shadow", "old_fracture": None,
    "surgical_change": "Postsurgical Change", "minor_atelectasis": "Minor Atelectasis",
    "hiatal_hernia": "Hiatal Hernia", "low_volumes": "Low Lung Volumes",
    "osteopenia": "Osteopenia",
}


def test_the_rules_call_minor_exactly_what_the_generator_calls_minor():
    # The counts the training pairs were made with and the counts the rules give must mean
    # the same: a minor finding added to one list only fails here.
    assert set(GENERATOR_TO_RULES) == set(synth.MINOR_FINDINGS)
    assert {v for v in GENERATOR_TO_RULES.values() if v} == set(rules.MINOR_FINDINGS)
