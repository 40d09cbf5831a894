"""``crg`` with ``labels=ctrate``: the option, its default labeler, hand-worked values, and the
CheXpert default left exactly as it was.

Reference: the CRG formula (Hamamci et al.) on counts worked by hand from the rule labeler's
labels of short reports (X = 18 label slots per pair); tolerance 1e-12.
"""

from __future__ import annotations

import pytest

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.chexpert import ChexpertLabels
from radconcord.backend.metrics.crg import Crg, crg
from radconcord.backend.metrics.ctrate import CTRATE_LABELS, CtRateRuleLabeler


def test_default_and_chexpert_alias_keep_the_old_signature_and_numbers():
    old = "crg|labels:14|bin:uncertain=positive|labeler:[" + ChexpertLabels().signature() + "]"
    assert Crg().signature() == old
    assert Crg(labels="chexpert").signature() == old
    assert registry.create("crg", labels="chexpert").signature() == old
    refs, cands = ["Mild cardiomegaly. No pleural effusion."], ["Small left pleural effusion."]
    assert Crg(labels="chexpert").score(references=refs, candidates=cands).values == \
        Crg().score(references=refs, candidates=cands).values


def test_ctrate_defaults_to_the_offline_rules():
    metric = Crg(labels="ctrate")
    assert metric.options["labeler"] == "rules" and metric.availability() is None
    assert metric.signature() == (
        "crg|labels:ctrate|bin:uncertain=positive|labeler:[ctrate-rules|"
        f"{CtRateRuleLabeler.version}]"
    )


def test_hand_worked_ct_pairs():
    metric = Crg(labels="ctrate")
    refs = [
        "Cardiomegaly. Bilateral pleural effusion. No pulmonary nodule was detected.",
        "Trachea and both main bronchi are open. No pleural effusion was detected.",
        "Centrilobular emphysema. Possible small nodule in the right upper lobe.",
    ]
    cands = [
        "Heart size increased. A 4 mm nodule in the left lower lobe.",
        "Minimal pericardial effusion is observed.",
        "Emphysema in both upper lobes. Nodule was not detected.",
    ]
    res = metric.score(references=refs, candidates=cands)
    # 1: A = 2 (Cardiomegaly, Pleural effusion); TP 1, FN 1, FP 1 (Lung nodule).
    # 2: A = 0; FP 1 (Pericardial effusion): N / (N + 2 FP) = 18 / 20.
    # 3: A = 2 (Emphysema, uncertain nodule counts positive); TP 1, FN 1, FP 0.
    want = [crg(1, 1, 1, 18, 2), 18 / 20, crg(1, 1, 0, 18, 2)]
    assert res.values["crg"] == [pytest.approx(w, abs=1e-12) for w in want]
    assert res.corpus["crg_corpus"] == pytest.approx(crg(2, 2, 2, 54, 4), abs=1e-12)
    d = res.details[2]
    assert (d["tp"], d["fn"], d["fp"], d["num_positives"], d["num_labels"]) == (1, 1, 0, 2, 18)
    nodule = CTRATE_LABELS.index("Lung nodule")
    assert d["reference_labels"][nodule] == -1 and d["candidate_labels"][nodule] == 0


def test_bad_combinations_are_refused():
    with pytest.raises(ValueError, match="known: 14, 5, chexpert, ctrate"):
        Crg(labels="ct")
    with pytest.raises(ValueError, match="rules, classifier, llm"):
        Crg(labels="ctrate", labeler="chexpert")
    with pytest.raises(ValueError, match="labels=ctrate only"):
        Crg(structured=True)
    with pytest.raises(ValueError, match="unknown labeler family"):
        Crg(labeler="rules")
    with pytest.raises(ValueError, match="do not apply to labeler=rules"):
        Crg(labels="ctrate", model="x")
