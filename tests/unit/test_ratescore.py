"""RaTEScore: matching and affinity by hand, BIO rules, splitting, loading and availability."""

from __future__ import annotations

import json
import math

import pytest

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import MetricUnavailable
from radconcord.backend.metrics.ratescore import (
    AFFINITY_LONG,
    AFFINITY_SHORT,
    ENTITY_TYPES,
    Affinity,
    RaTEScore,
    affinity_from_mapping,
    bio_spans,
    combine,
    directional_score,
    load_affinity,
    split_sentences,
)
from tests.helpers_ratescore import (
    RATE_NER_LABELS,
    build_tiny_entity_encoder,
    build_tiny_rate_ner,
)

# --------------------------------------------------------------------------- affinity


def test_affinity_tables_are_the_reference_constants() -> None:
    long = load_affinity("long")
    short = load_affinity("short")
    assert len(long.weights) == len(short.weights) == 25
    # Spot values typed from RaTEScore 0.6.0 scorer.py, and its asymmetry.
    assert long.weights[("DISEASE", "ANATOMY")] == 0.9950209388542061
    assert long.weights[("ANATOMY", "DISEASE")] == 0.4592143222158069
    assert long.weights[("NON-ABNORMALITY", "NON-ABNORMALITY")] == 0.0009357166071730684
    assert long.neg_weight == 0.8716553966489615
    assert short.weights[("ABNORMALITY", "NON-ABNORMALITY")] == 0.9479148658006686
    assert short.neg_weight == 0.3611577852354489
    assert long.label == "long" and load_affinity("SHORT").label == "short"
    assert set(AFFINITY_LONG) == set(AFFINITY_SHORT)


def test_affinity_file_in_the_reference_layout(tmp_path) -> None:
    raw = {k: 0.5 for k in AFFINITY_LONG}
    path = tmp_path / "weights.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    aff = load_affinity(str(path))
    assert set(aff.weights.values()) == {0.5} and aff.neg_weight == 0.5
    assert aff.label.startswith("file:") and len(aff.label) == len("file:") + 16

    del raw["anatomy_disease"]
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(ValueError, match=r"weights\.json.*misses anatomy_disease"):
        load_affinity(str(path))
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="is not JSON"):
        load_affinity(str(path))
    with pytest.raises(ValueError, match="does not exist"):
        load_affinity(str(tmp_path / "nope.json"))
    with pytest.raises(ValueError, match="'disease_lung' is not"):
        affinity_from_mapping({**AFFINITY_LONG, "disease_lung": 0.1}, label="x", where="t")
    with pytest.raises(ValueError, match="'neg_weight' is not a number"):
        affinity_from_mapping({**AFFINITY_LONG, "neg_weight": "high"}, label="x", where="t")


# --------------------------------------------------------------------------- matching by hand

# directional_score's cosines are float32: normalising (d squares summed, a square root, a
# division) and a d-term dot product put each within (d + 2) * eps of the exact cosine,
# eps = 2**-23 = 1.19e-7, so 4.8e-7 for these 2-dim vectors (a mean of such cosines with
# weights in [0, 1] keeps the bound). Which rounding is hit depends on the kernel (FMA or
# not, reduction order), so less than that is a guess about one CPU.
COS_TOL = 5e-7
# Scores of the tiny models from differently batched float32 entity vectors (32 dims, a
# 64-wide feed-forward): about sqrt(64) * eps = 1e-6 per cosine, at most doubled by the
# harmonic combination; as in tests/parity/test_ratescore.py.
BATCH_TOL = 2e-6


def _t(rows):
    import torch

    return torch.tensor(rows, dtype=torch.float32)


def test_directional_score_by_hand() -> None:
    # Query entities: q1 (1,0) DISEASE, q2 (0,1) ANATOMY.
    # Targets: t1 (1,1) NON-DISEASE, t2 (0,2) ANATOMY.
    # q1: cos(t1) = 1/sqrt2, cos(t2) = 0 -> t1; weight disease_non-disease, a negation pair.
    # q2: cos(t1) = 1/sqrt2, cos(t2) = 1 -> t2; weight anatomy_anatomy, no negation.
    w_dn, w_aa, neg = 0.3789136708096537, 0.2856134859160784, 0.8716553966489615
    expected = (math.sqrt(0.5) * w_dn * neg + 1.0 * w_aa) / (w_dn + w_aa)
    got = directional_score(_t([[1, 0], [0, 1]]), ["DISEASE", "ANATOMY"],
                            _t([[1, 1], [0, 2]]), ["NON-DISEASE", "ANATOMY"], load_affinity("long"))
    assert got == pytest.approx(expected, abs=COS_TOL)

    # A single query entity: the weight cancels, the score is its best cosine (t2 -> q2).
    back = directional_score(_t([[0, 2]]), ["ANATOMY"], _t([[1, 0], [0, 1]]),
                             ["DISEASE", "ANATOMY"], load_affinity("long"))
    assert back == pytest.approx(1.0, abs=COS_TOL)


def test_negative_cosine_and_matched_type_weights() -> None:
    # The single target is opposite: cosine -1, weight abnormality_anatomy, no negation.
    got = directional_score(_t([[1, 0], [2, 0]]), ["ABNORMALITY", "ANATOMY"],
                            _t([[-1, 0]]), ["ANATOMY"], load_affinity("short"))
    w1, w2 = 0.6952639610605605, 0.7709590751917746  # abnormality_anatomy, anatomy_anatomy
    assert got == pytest.approx((-w1 - w2) / (w1 + w2), abs=COS_TOL)  # = -1


def test_zero_weights_give_zero() -> None:
    zero = Affinity({(a, b): 0.0 for a in ENTITY_TYPES for b in ENTITY_TYPES}, 1.0, "zero")
    assert directional_score(_t([[1.0, 0.0]]), ["DISEASE"], _t([[1.0, 0.0]]), ["DISEASE"],
                             zero) == 0.0


def test_combine_is_harmonic_and_zero_safe() -> None:
    assert combine(0.5, 1.0) == pytest.approx(2 * 0.5 / 1.5)
    assert combine(0.0, 0.0) == 0.0
    assert combine(1.0, 1.0) == 1.0


def test_negation_flips_lower_than_same_type() -> None:
    # "effusion" vs "no effusion" with identical vectors: only the types differ.
    same = directional_score(_t([[1, 2]]), ["DISEASE"], _t([[1, 2]]), ["DISEASE"],
                             load_affinity("long"))
    flipped = directional_score(_t([[1, 2]]), ["DISEASE"], _t([[1, 2]]), ["NON-DISEASE"],
                                load_affinity("long"))
    assert same == pytest.approx(1.0, abs=COS_TOL)
    assert flipped == pytest.approx(0.8716553966489615, abs=COS_TOL)


# --------------------------------------------------------------------------- BIO rules


def _spans(labels: list[str]) -> list[tuple[int, int, str]]:
    tokens = ["[CLS]", *[f"w{i}" for i in range(1, len(labels) - 1)], "[SEP]"]
    return bio_spans(tokens, labels)


def test_bio_rules() -> None:
    assert _spans(["O", "B-DISEASE", "I-DISEASE", "O", "O"]) == [(1, 2, "DISEASE")]
    assert _spans(["O", "B-ANATOMY", "B-DISEASE", "O", "O"]) == [
        (1, 1, "ANATOMY"), (2, 2, "DISEASE")]
    # An I- with nothing open starts nothing; before a B- it reopens at itself (then the B
    # takes over).
    assert _spans(["O", "I-DISEASE", "O", "O"]) == []
    # Entity still open when the sentence ends: kept up to the token before [SEP] ...
    assert _spans(["O", "B-DISEASE", "I-DISEASE", "I-DISEASE"]) == [(1, 2, "DISEASE")]
    # ... but dropped when an earlier entity was closed (the reference tests `end is None`).
    assert _spans(["O", "B-ANATOMY", "B-DISEASE", "I-DISEASE", "I-DISEASE"]) == [
        (1, 1, "ANATOMY")]
    # (a B followed by O resets that memory, so there the open entity is kept)
    assert _spans(["O", "B-ANATOMY", "O", "B-DISEASE", "I-DISEASE", "I-DISEASE"]) == [
        (1, 1, "ANATOMY"), (3, 4, "DISEASE")]
    # The label predicted on [SEP] decides whether the last entity closes.
    assert _spans(["O", "B-DISEASE", "I-DISEASE", "O"]) == [(1, 2, "DISEASE")]
    # The type of a B-I run is the B's.
    assert _spans(["O", "B-DISEASE", "I-ANATOMY", "O", "O"]) == [(1, 2, "DISEASE")]


# --------------------------------------------------------------------------- sentences


def test_simple_splitter() -> None:
    text = ("FINDINGS: The lungs are clear. IMPRESSION: No acute process.\n"
            "Dr. Jones saw a 2.3 cm nodule in the R. upper lobe, approx. 2 cm.  Stable!"
            " Is it new? no.\r\n1. Stable. 2. Small effusion.\nok\n\n")
    assert split_sentences(text) == [
        "FINDINGS: The lungs are clear.",
        "IMPRESSION: No acute process.",
        "Dr. Jones saw a 2.3 cm nodule in the R. upper lobe, approx. 2 cm.",
        "Stable! Is it new? no.",
        "1. Stable.",
        "2. Small effusion.",
    ]  # "ok" is under 3 characters
    assert split_sentences("") == [] and split_sentences(" .. \n") == []
    assert split_sentences('Heart is "normal." Lungs clear.') == ['Heart is "normal."',
                                                                  "Lungs clear."]


# --------------------------------------------------------------------------- the metric


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("ratescore-unit")
    return build_tiny_rate_ner(root), build_tiny_entity_encoder(root)


def test_unavailable_without_weights(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path))
    reason = registry.availability("ratescore")
    assert reason is not None and reason.startswith("ratescore NER model")
    assert "Angelakeke/RaTE-NER-Deberta" in reason
    metric = RaTEScore()
    with pytest.raises(MetricUnavailable, match="ratescore NER model"):
        metric.score(references=["a"], candidates=["b"])
    with pytest.raises(MetricUnavailable):
        metric.signature()
    missing = RaTEScore(ner_model=str(tmp_path / "none"))
    assert "does not exist" in (missing.availability() or "")


def test_unavailable_without_encoder(monkeypatch, tmp_path, tiny) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path))
    reason = RaTEScore(ner_model=str(tiny[0])).availability()
    assert reason is not None and reason.startswith("ratescore entity encoder")
    assert "FremyCompany/BioLORD-2023-C" in reason


def test_models_found_in_model_dir(monkeypatch, tmp_path, tiny) -> None:
    import shutil

    shutil.copytree(tiny[0], tmp_path / "Angelakeke--RaTE-NER-Deberta")
    shutil.copytree(tiny[1], tmp_path / "FremyCompany--BioLORD-2023-C")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path))
    metric = registry.create("ratescore")
    assert metric.availability() is None
    sig = metric.signature()
    assert "ner:Angelakeke/RaTE-NER-Deberta@sha256:" in sig
    assert "emb:FremyCompany/BioLORD-2023-C@sha256:" in sig
    assert "affinity:long" in sig and "split:simple-v1" in sig and "pool:first-token" in sig
    assert registry.create("ratescore", affinity="short").signature() != sig


def test_wrong_label_set_is_unavailable(tmp_path, tiny) -> None:
    import shutil

    bad = tmp_path / "bad-ner"
    shutil.copytree(tiny[0], bad)
    config = json.loads((bad / "config.json").read_text())
    config["id2label"] = {"0": "O", "1": "B-PER", "2": "I-PER"}
    (bad / "config.json").write_text(json.dumps(config))
    reason = RaTEScore(ner_model=str(bad), embed_model=str(tiny[1])).availability()
    assert reason is not None and "B-PER" in reason and "not 'O' or B-/I-" in reason


def test_medspacy_splitter_unavailable_here(tiny) -> None:
    import importlib.util

    assert importlib.util.find_spec("medspacy") is None  # not installable next to numpy 2
    reason = RaTEScore(ner_model=str(tiny[0]), embed_model=str(tiny[1]),
                       sentence_splitter="medspacy").availability()
    assert reason is not None and "needs medspacy" in reason


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="sentence_splitter"):
        RaTEScore(sentence_splitter="nltk")
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        RaTEScore(batch_size=0)
    with pytest.raises(ValueError, match="affinity must be 'long', 'short'"):
        RaTEScore(affinity="medium")
    with pytest.raises(ValueError, match="unknown option"):
        RaTEScore(model="x")


def test_labels_of_tiny_model_are_rate_ner(tiny) -> None:
    config = json.loads((tiny[0] / "config.json").read_text())
    assert [config["id2label"][str(i)] for i in range(11)] == list(RATE_NER_LABELS)
    assert config["model_type"] == "deberta-v2" and config["relative_attention"] is True
    assert json.loads((tiny[1] / "config.json").read_text())["model_type"] == "mpnet"


REFS = [
    "The lungs are clear. There is no pleural effusion or pneumothorax.",
    "",
    "Mild cardiomegaly with small bilateral pleural effusions.\nNo pneumothorax.",
    "Nil.",
    "Right lower lobe consolidation concerning for pneumonia.",
]
CANDS = [
    "Lungs are clear without effusion. No pneumothorax.",
    "Left basilar atelectasis.",
    "Heart size is normal. No pleural effusion.",
    "Heart.",
    "Right lower lobe consolidation concerning for pneumonia.",
]


def test_scores_details_and_empty_reports(tiny) -> None:
    metric = RaTEScore(ner_model=str(tiny[0]), embed_model=str(tiny[1]))
    result = metric.score(references=REFS, candidates=CANDS)
    values = result.values["ratescore"]
    assert len(values) == 5 and result.details is not None
    # An empty reference has no entity: 0.5, and the pairs after it stay aligned.
    assert values[1] == 0.5 and result.details[1]["no_entities"] == "reference"
    assert values[3] == 0.5 and result.details[3]["no_entities"] == "both"
    assert values[4] == pytest.approx(1.0, abs=1e-6)  # identical reports
    for i in (0, 2):
        d = result.details[i]
        assert d["reference_entities"] and d["candidate_entities"]
        assert values[i] == pytest.approx(combine(d["ref_to_cand"], d["cand_to_ref"]))
        assert {t for _, t in d["reference_entities"]} <= set(ENTITY_TYPES)
    alone = metric.score(references=REFS[2:3], candidates=CANDS[2:3]).values["ratescore"]
    assert alone[0] == pytest.approx(values[2], abs=BATCH_TOL)  # other encoder batch
    assert result.corpus["ratescore_mean"] == pytest.approx(sum(values) / 5)
    assert metric.score(references=[], candidates=[]).values == {"ratescore": []}


def test_batching_does_not_change_scores(tiny) -> None:
    one = RaTEScore(ner_model=str(tiny[0]), embed_model=str(tiny[1]), batch_size=1,
                    embed_batch_size=1).score(references=REFS, candidates=CANDS)
    many = RaTEScore(ner_model=str(tiny[0]), embed_model=str(tiny[1]), batch_size=64,
                     embed_batch_size=64).score(references=REFS, candidates=CANDS)
    assert many.values["ratescore"] == pytest.approx(one.values["ratescore"], abs=BATCH_TOL)


def test_each_entity_string_and_sentence_is_encoded_once(tiny) -> None:
    metric = RaTEScore(ner_model=str(tiny[0]), embed_model=str(tiny[1]))
    metric.load("cpu")
    seen = {"ner": 0, "enc": 0}

    def counter(name):
        def hook(module, args, kwargs):
            seen[name] += int(kwargs["input_ids"].shape[0])
        return hook

    h1 = metric._ner.register_forward_pre_hook(counter("ner"), with_kwargs=True)
    h2 = metric._enc.register_forward_pre_hook(counter("enc"), with_kwargs=True)
    try:
        refs = [REFS[0], REFS[0], REFS[2]]
        cands = [REFS[0], CANDS[0], CANDS[0]]
        result = metric.score(references=refs, candidates=cands)
    finally:
        h1.remove()
        h2.remove()
    sentences = {s for t in refs + cands for s in split_sentences(t)}
    strings = {e for d in result.details for side in ("reference_entities",
                                                      "candidate_entities")
               for e, _ in d[side]}
    assert seen["ner"] == len(sentences)
    assert seen["enc"] == len(strings)
