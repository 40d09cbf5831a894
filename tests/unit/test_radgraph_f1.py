"""RadGraph F1 code on hand-made entity graphs (no model).

Parity reference: ``radgraph.rewards.compute_reward`` of the ``radgraph`` PyPI package
(0.1.18) for radgraph_simple / partial / complete, tolerance 1e-12. radgraph_combined is checked
against values worked out by hand from CXR-Report-Metric's ``parse_entity_relation`` +
``compute_f1`` definitions (exact fractions, tolerance 1e-12).
"""

from __future__ import annotations

import itertools

import pytest
from radgraph.rewards import compute_reward

from radconcord.backend.metrics import radgraph as rg


def ent(tokens, label, *rels, start=0):
    return {"tokens": tokens, "label": label, "start_ix": start, "end_ix": start,
            "relations": [list(r) for r in rels]}


# "Small left pleural effusion. Mild cardiomegaly."
REF = {
    "1": ent("small", "OBS-DP", ("modify", "4")),
    "2": ent("left", "ANAT-DP", ("modify", "3")),
    "3": ent("pleural", "ANAT-DP"),
    "4": ent("effusion", "OBS-DP", ("located_at", "3")),
    "5": ent("Mild", "OBS-DP", ("modify", "6")),
    "6": ent("cardiomegaly", "OBS-DP"),
}
# Same findings, another side, different case for "mild", one extra uncertain finding.
CAND = {
    "1": ent("small", "OBS-DP", ("modify", "4")),
    "2": ent("right", "ANAT-DP", ("modify", "3")),
    "3": ent("pleural", "ANAT-DP"),
    "4": ent("effusion", "OBS-DP", ("located_at", "3")),
    "5": ent("mild", "OBS-DP", ("modify", "6")),
    "6": ent("cardiomegaly", "OBS-DP"),
    "7": ent("pneumonia", "OBS-U"),
}
# No relations at all.
FLAT = {
    "1": ent("effusion", "OBS-DP"),
    "2": ent("cardiomegaly", "OBS-DP"),
}
# A label mismatch and a relation to itself-like duplicate targets (tokens repeat).
ODD = {
    "1": ent("effusion", "OBS-U", ("located_at", "2"), ("located_at", "3")),
    "2": ent("pleural", "ANAT-DP"),
    "3": ent("pleural", "ANAT-DP"),
    "4": ent("Effusion", "OBS-DP", ("located_at", "2")),
}
EMPTY: dict = {}
GRAPHS = {"ref": REF, "cand": CAND, "flat": FLAT, "odd": ODD, "empty": EMPTY}


@pytest.mark.parametrize(("ref_name", "cand_name"),
                         list(itertools.product(GRAPHS, repeat=2)))
def test_simple_partial_complete_match_the_radgraph_package(ref_name, cand_name):
    """Parity with ``radgraph.rewards.compute_reward(hyp, ref, "all")``, tolerance 1e-12."""
    ref, cand = GRAPHS[ref_name], GRAPHS[cand_name]
    expected = compute_reward({"entities": cand}, {"entities": ref}, "all")
    got = rg.pair_scores(ref, cand)
    assert got.simple == pytest.approx(expected[0], abs=1e-12)
    assert got.partial == pytest.approx(expected[1], abs=1e-12)
    assert got.complete == pytest.approx(expected[2], abs=1e-12)


def test_hand_computed_values_for_ref_vs_cand():
    """Worked by hand: sets differ by 'left'/'right', 'Mild'/'mild' and the extra 'pneumonia'."""
    s = rg.pair_scores(REF, CAND)
    # simple: ref 6 items, cand 7; common: small, pleural, effusion, cardiomegaly -> 4.
    p, r = 4 / 7, 4 / 6
    assert s.simple == pytest.approx(2 * p * r / (p + r), abs=1e-12)
    # partial: same 4 common (has-relation flags agree for them).
    assert s.partial == pytest.approx(2 * p * r / (p + r), abs=1e-12)
    # complete: ref items: (small,modify,effusion) (left,modify,pleural) (pleural)
    # (effusion,located_at,pleural) (mild,modify,cardiomegaly) (cardiomegaly) = 6;
    # cand: same but right instead of left, plus pneumonia = 7; common 5 ('mild' lowercased).
    p, r = 5 / 7, 5 / 6
    assert s.complete == pytest.approx(2 * p * r / (p + r), abs=1e-12)
    # combined: entity F1 = simple F1 here; relations (with labels, case kept):
    # ref {small->effusion, left->pleural, effusion->pleural, Mild->cardiomegaly} (4)
    # cand {small->effusion, right->pleural, effusion->pleural, mild->cardiomegaly} (4)
    # common 2 -> relation F1 = 0.5.
    assert s.relation_f1 == pytest.approx(0.5, abs=1e-12)
    assert s.entity_f1 == pytest.approx(s.simple, abs=1e-12)
    assert s.combined == pytest.approx((s.simple + 0.5) / 2, abs=1e-12)
    assert s.counts == {
        "reference_entities": 6, "candidate_entities": 7,
        "reference_relations": 4, "candidate_relations": 4,
        "matched_entities": 4, "matched_relations": 2,
    }


def test_identical_graphs_score_one():
    s = rg.pair_scores(REF, REF)
    assert (s.simple, s.partial, s.complete, s.combined) == (1.0, 1.0, 1.0, 1.0)


def test_graphs_without_relations_halve_combined():
    """CXR-Report-Metric: relation F1 over two empty sets is 0, so combined = entity F1 / 2."""
    s = rg.pair_scores(FLAT, FLAT)
    assert (s.simple, s.partial, s.complete) == (1.0, 1.0, 1.0)
    assert s.relation_f1 == 0.0
    assert s.combined == 0.5


@pytest.mark.parametrize(("ref", "cand", "flag"), [
    (EMPTY, EMPTY, "both"),
    (REF, EMPTY, "candidate"),
    (EMPTY, REF, "reference"),
])
def test_no_entities_gives_zero_everywhere(ref, cand, flag):
    """Either or both reports without entity: all four keys are 0 (documented choice)."""
    s = rg.pair_scores(ref, cand)
    assert s.values() == dict.fromkeys(rg.KEYS, 0.0)


def test_relation_set_keys_ends_by_tokens_and_labels():
    rels = rg.relation_set(ODD)
    assert rels == {
        (("effusion", "OBS-U"), ("pleural", "ANAT-DP"), "located_at"),
        (("Effusion", "OBS-DP"), ("pleural", "ANAT-DP"), "located_at"),
    }


def test_complete_set_lowercases_only_related_entities():
    items = rg.complete_set({"1": ent("Mild", "OBS-DP", ("modify", "2")),
                             "2": ent("Cardiomegaly", "OBS-DP")})
    assert items == {("mild", "OBS-DP", "modify", "cardiomegaly"), ("Cardiomegaly", "OBS-DP")}


def test_set_f1_is_symmetric_and_zero_on_empty():
    a, b = {1, 2, 3}, {2, 3, 4, 5}
    expected = 2 * (2 / 3) * (2 / 4) / (2 / 3 + 2 / 4)
    assert rg.set_f1(a, b) == rg.set_f1(b, a) == pytest.approx(expected, abs=1e-12)
    assert rg.set_f1(set(), set()) == 0.0
    assert rg.set_f1({1}, set()) == 0.0


@pytest.mark.parametrize(("bad", "message"), [
    ({"1": ent("x", "OBS-DP", ("modify", "9"))}, "unknown entity '9'"),
    ({"1": {"label": "OBS-DP", "relations": []}}, "field 'tokens'"),
    ({"1": {"tokens": "x", "label": "OBS-DP", "relations": "modify"}}, "'relations' must be"),
    ({"1": {"tokens": "x", "label": "OBS-DP", "relations": [["modify"]]}}, "[type, target_id]"),
    ([], "must be a mapping"),
])
def test_malformed_annotations_raise_one_clear_error(bad, message):
    with pytest.raises(rg.AnnotationError, match="candidate") as info:
        rg.pair_scores(REF, bad)
    assert message in str(info.value)
