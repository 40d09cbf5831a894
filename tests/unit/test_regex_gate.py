"""The prefix gate that lets the rule labelers skip patterns a sentence cannot match."""

from __future__ import annotations

import re

import pytest

from radconcord.backend.metrics.chexpert import RuleLabeler
from radconcord.backend.metrics.concord import rules
from radconcord.backend.metrics.regex_gate import GateTable, prefix_gate

SENTENCES = [
    "The heart is normal in size.",
    "heart size is normal",
    "there is no focal consolidation, pleural effusion or pneumothorax.",
    "mild cardiomegaly with small bilateral pleural effusions.",
    "right lower lobe opacity may represent atelectasis versus pneumonia.",
    "the mediastinal contours are widened.",
    "no acute cardiopulmonary process.",
    "interval removal of the right internal jugular catheter.",
    "degenerative changes of the thoracic spine. calcified granuloma in the left upper lobe.",
    "the lungs are hyperinflated. tortuous aorta. hiatal hernia.",
    "enlarged cardiac silhouette; pulmonary vascular congestion.",
    "nodular opacity in the right apex, cannot exclude a mass.",
    "status post sternotomy. the endotracheal tube tip is 4 cm above the carina.",
    "? pneumothorax",
    "small left apical pneumothorax has resolved.",
    "bibasilar airspace disease, edema vs infection.",
    "fracture of the left sixth rib is again seen.",
    "lungs clear. no effusion. no pneumothorax. heart normal. nipple shadows.",
    "",
    "a",
]


def test_prefixes_of_literals_branches_and_optional_parts():
    assert prefix_gate(r"\b(?:abc|xyz)\b", 2) == {"ab", "xy"}
    assert prefix_gate(r"(?:cardio)?mediastin", 3) == {"car", "med"}
    assert prefix_gate(r"[ab]cd", 2) == {"ac", "bc"}
    assert prefix_gate(r"(?<!nodular )opaci(?:ty|ties)", 3) == {"opa"}  # zero-width skipped
    assert prefix_gate(r"a{2,}b", 3) == {"aaa", "aab"}


@pytest.mark.parametrize("pattern", [r"\w+ effusion", r".xyz", r"a|bcd", r"(?i)abc", r"x?"])
def test_anything_not_read_exactly_means_always_scan(pattern):
    # A class, a wildcard, a match that may be shorter than k, inline flags: no gate.
    assert prefix_gate(pattern, 3) is None


def test_a_pattern_that_matches_is_always_a_candidate():
    labeler = RuleLabeler()
    patterns = [p for _o, m, f, _v in labeler._mentions
                for p in (m.pattern, None if f is None else f.pattern)]
    patterns += [rx.pattern for rx in rules._EXTRA_RE.values()]
    table = GateTable(patterns)
    texts = SENTENCES + [labeler.normalize(s) for s in SENTENCES]
    pruned = 0
    for text in texts:
        may = table.candidates(text)
        for i, pattern in enumerate(patterns):
            if pattern is None:
                assert not may >> i & 1
                continue
            if re.search(pattern, text):
                assert may >> i & 1, (pattern[:60], text)
            elif not may >> i & 1:
                pruned += 1
    # And it prunes: most patterns are skipped for most sentences.
    assert pruned > len(texts) * len(patterns) / 2


class _NoGate:
    def candidates(self, text: str) -> int:
        return -1  # every bit set: scan everything


def test_labels_with_the_gate_equal_labels_without_it():
    gated, plain = RuleLabeler(), RuleLabeler()
    plain._gates = _NoGate()
    for text in SENTENCES + [" ".join(SENTENCES)]:
        assert gated.label(text) == plain.label(text), text
