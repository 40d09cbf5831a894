"""Tiny random-weight stand-ins for RaTEScore's two models, built and saved by the tests.

* :func:`build_tiny_rate_ner`: a ``DebertaV2ForTokenClassification`` with DeBERTa-v3's
  relative-attention settings, the RaTE-NER label set (11 BIO labels over ABNORMALITY,
  NON-ABNORMALITY, DISEASE, NON-DISEASE, ANATOMY) and a DeBERTa-v2 (Unigram, ``▁`` metaspace)
  tokenizer whose vocabulary is written here: whole words of :data:`VOCAB_TEXT` plus every
  printable ASCII character, so unknown words fall back to characters (several tokens per
  word, as with the real tokenizer) and nothing is ``[UNK]``.
* :func:`build_tiny_entity_encoder`: an ``MPNetModel`` (BioLORD-2023-C's architecture) with a
  small lower-cased WordPiece vocabulary.

Weights are seeded, so a builder gives the same model every time with the same torch;
:func:`weights_digest` lets a fixture detect a different build. The parity generator
(``tests/fixtures/ratescore/generate_reference.py``) imports this file too.
"""

from __future__ import annotations

import hashlib
import re
import string
from pathlib import Path

#: The RaTE-NER label ids (the RaTE-NER dataset's BIO scheme, ``O`` last).
RATE_NER_LABELS: tuple[str, ...] = (
    "B-ABNORMALITY",
    "I-ABNORMALITY",
    "B-NON-ABNORMALITY",
    "I-NON-ABNORMALITY",
    "B-DISEASE",
    "I-DISEASE",
    "B-NON-DISEASE",
    "I-NON-DISEASE",
    "B-ANATOMY",
    "I-ANATOMY",
    "O",
)

# Words written for this project; they only shape the vocabulary.
VOCAB_TEXT = (
    "No acute cardiopulmonary process. The lungs are clear. There is no pleural effusion or"
    " pneumothorax. Heart size is normal. Mild cardiomegaly with small bilateral effusions."
    " Right lower lobe consolidation concerning for pneumonia. Left basilar atelectasis."
    " Moderate pulmonary edema. Stable position of the line. No focal opacity. Enlarged"
    " cardiac silhouette. Interval improvement. Unchanged. Fracture of the rib. Nodule in the"
    " upper lobe. Mediastinal contours within normal limits. Tube terminates above the carina."
)


def _words() -> list[str]:
    return sorted(set(re.findall(r"[A-Za-z]+", VOCAB_TEXT)) | {w.lower() for w in
                                                               re.findall(r"[A-Za-z]+",
                                                                          VOCAB_TEXT)})


def build_tiny_rate_ner(
    tmp_path: Path,
    *,
    seed: int = 0,
    name: str = "tiny-rate-ner",
    hidden: int = 32,
    num_layers: int = 2,
    heads: int = 4,
    classifier_scale: float = 40.0,
) -> Path:
    """Save a random-weight DeBERTa-v2 token classifier with the RaTE-NER labels.

    Args:
        tmp_path: Parent folder.
        seed: Torch seed of the weights.
        name: Sub-folder name.
        hidden: Hidden size.
        num_layers: Transformer layers.
        heads: Attention heads.
        classifier_scale: The classifier weights are multiplied by this so that the argmax
            label depends on the token (at init scale nearly every token gets the same one).

    Returns:
        The folder holding ``config.json``, weights and tokenizer files.
    """
    import torch
    from transformers import DebertaV2Config, DebertaV2ForTokenClassification, DebertaV2Tokenizer

    out = Path(tmp_path) / name
    out.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    chars = [c for c in string.printable if not c.isspace()]
    vocab = [(s, 0.0) for s in specials]
    vocab += [("\u2581" + w, -2.0) for w in _words()]
    vocab += [("\u2581" + c, -6.0) for c in chars] + [(c, -7.0) for c in chars]
    vocab.append(("\u2581", -8.0))
    tok = DebertaV2Tokenizer(vocab=vocab, unk_id=3, do_lower_case=False)
    tok.model_max_length = 512
    tok.save_pretrained(str(out))

    torch.manual_seed(seed)
    config = DebertaV2Config(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        intermediate_size=hidden * 2,
        max_position_embeddings=512,
        relative_attention=True,
        position_buckets=256,
        max_relative_positions=-1,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
        type_vocab_size=0,
        pad_token_id=0,
        id2label=dict(enumerate(RATE_NER_LABELS)),
        label2id={label: i for i, label in enumerate(RATE_NER_LABELS)},
    )
    model = DebertaV2ForTokenClassification(config)
    with torch.no_grad():
        model.classifier.weight.mul_(classifier_scale)
    model.eval()
    model.save_pretrained(str(out))
    return out


def build_tiny_entity_encoder(
    tmp_path: Path,
    *,
    seed: int = 1,
    name: str = "tiny-biolord",
    hidden: int = 32,
    num_layers: int = 2,
    heads: int = 4,
) -> Path:
    """Save a random-weight ``MPNetModel`` with a lower-cased WordPiece tokenizer.

    Args:
        tmp_path: Parent folder.
        seed: Torch seed of the weights.
        name: Sub-folder name.
        hidden: Hidden size.
        num_layers: Transformer layers.
        heads: Attention heads.

    Returns:
        The folder holding ``config.json``, weights and tokenizer files.
    """
    import torch
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizer

    out = Path(tmp_path) / name
    out.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]
    chars = [c for c in string.printable if not c.isspace() and not c.isupper()]
    words = sorted({w.lower() for w in _words()})
    pieces = specials + words + [c for c in chars if c not in words] + [f"##{c}" for c in chars]
    vocab_file = out / "vocab.txt"
    vocab_file.write_text("\n".join(pieces) + "\n", encoding="utf-8")
    tok = MPNetTokenizer(vocab=str(vocab_file), do_lower_case=True)
    tok.model_max_length = 512
    tok.save_pretrained(str(out))

    torch.manual_seed(seed)
    config = MPNetConfig(
        vocab_size=len(pieces),
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        intermediate_size=hidden * 2,
        max_position_embeddings=514,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        # At the usual 0.02 every first-token vector is nearly the same (cosines > 0.9999):
        # near-ties would decide the matches. Larger weights make the strings matter.
        initializer_range=0.5,
    )
    model = MPNetModel(config)
    model.eval()
    model.save_pretrained(str(out))
    return out


def weights_digest(folder: Path) -> str:
    """sha256 over a saved model's tensors (names, shapes, float32 bytes), first 16 hex."""
    from safetensors.torch import load_file

    tensors = load_file(str(Path(folder) / "model.safetensors"))
    h = hashlib.sha256()
    for key in sorted(tensors):
        t = tensors[key].float().contiguous()
        h.update(key.encode() + b"\x00" + str(tuple(t.shape)).encode() + b"\x00")
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]
