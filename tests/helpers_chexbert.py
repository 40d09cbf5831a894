"""Tiny random-weight CheXbert checkpoints in the public ``chexbert.pth`` file format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, BertModel

from tests.helpers_models import build_tiny_bert


def write_chexbert_checkpoint(tmp_path: Path, seed: int = 0) -> tuple[Path, Path, Any, list]:
    """Write ``chexbert.pth`` like the public one (DataParallel ``module.`` keys, legacy
    ``position_ids`` buffer, ``{"model_state_dict": ...}``) plus a tiny BERT encoder folder.

    Returns:
        ``(encoder_dir, checkpoint_path, bert_module, heads)``; the modules let tests run an
        independent forward pass.
    """
    enc = build_tiny_bert(tmp_path, seed=seed, name="enc")
    config = BertConfig.from_pretrained(str(enc))
    torch.manual_seed(seed + 1)
    bert = BertModel(config)
    hidden = config.hidden_size
    heads = [torch.nn.Linear(hidden, 4) for _ in range(13)] + [torch.nn.Linear(hidden, 2)]
    state = {f"module.bert.{k}": v for k, v in bert.state_dict().items()}
    for i, h in enumerate(heads):
        state[f"module.linear_heads.{i}.weight"] = h.weight.detach().clone()
        state[f"module.linear_heads.{i}.bias"] = h.bias.detach().clone()
    positions = torch.arange(config.max_position_embeddings)[None]
    state["module.bert.embeddings.position_ids"] = positions
    path = Path(tmp_path) / "chexbert.pth"
    torch.save({"model_state_dict": state, "epoch": 3}, path)
    return enc, path, bert.eval(), heads
