"""Per-pair throughput of CheXbert labels, s_emb and VLScore on CPU (and CUDA when present).

Weights are random but the architectures are full size (bert-base for CheXbert; a ViT-B/16 +
bert-base dual encoder for VLScore), so the timings are those a real checkpoint would give.
The reference point is the same network run one report at a time with a plain transformers
forward pass (how a naive script would call it), in the same process.

    python bench/bench_model_metrics.py [--pairs 64] [--small]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from radconcord.backend.metrics import chexbert, vlscore  # noqa: E402

SENTENCES = [
    "Heart size is normal.",
    "Small left pleural effusion.",
    "No pneumothorax.",
    "Mild pulmonary edema with bilateral interstitial opacities.",
    "Right lower lobe consolidation concerning for pneumonia.",
    "Endotracheal tube terminates 4 cm above the carina.",
    "Stable mild cardiomegaly compared with the prior study.",
    "Lungs are clear without focal consolidation.",
]


def reports(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(SENTENCES, size=rng.integers(2, 7))) for _ in range(n)]


def write_vocab(folder: Path) -> Path:
    words = sorted({w.strip(".,").lower() for s in SENTENCES for w in s.split()})
    chars = sorted({c for w in words for c in w})
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = [*special, *words, *chars, *(f"##{c}" for c in chars)]
    path = folder / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    return path


def build(folder: Path, small: bool):
    from transformers import (
        BertConfig,
        BertModel,
        BertTokenizer,
        VisionTextDualEncoderConfig,
        VisionTextDualEncoderModel,
        ViTConfig,
        ViTImageProcessor,
    )

    enc = folder / "enc"
    enc.mkdir()
    # transformers 5 ignores vocab_file= (every token became [UNK]); vocab= takes the file.
    tok = BertTokenizer(vocab=str(write_vocab(folder)), do_lower_case=True)
    tok.save_pretrained(str(enc))
    size = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128) \
        if small else {}
    cfg = BertConfig(vocab_size=len(tok), **size)
    cfg.save_pretrained(str(enc))
    torch.manual_seed(0)
    bert = BertModel(cfg)
    heads = [torch.nn.Linear(cfg.hidden_size, 4) for _ in range(13)]
    heads.append(torch.nn.Linear(cfg.hidden_size, 2))
    state = {f"module.bert.{k}": v for k, v in bert.state_dict().items()}
    for i, h in enumerate(heads):
        state[f"module.linear_heads.{i}.weight"] = h.weight.detach()
        state[f"module.linear_heads.{i}.bias"] = h.bias.detach()
    ckpt = folder / "chexbert.pth"
    torch.save({"model_state_dict": state}, ckpt)

    vsize = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, image_size=64, patch_size=16) if small else \
        dict(image_size=224, patch_size=16)
    vcfg = VisionTextDualEncoderConfig.from_vision_text_configs(ViTConfig(**vsize), cfg,
                                                                projection_dim=512)
    dual = folder / "dual"
    VisionTextDualEncoderModel(vcfg).save_pretrained(str(dual))
    tok.save_pretrained(str(dual))
    side = vsize["image_size"]
    ViTImageProcessor(size={"height": side, "width": side}).save_pretrained(str(dual))
    return enc, ckpt, dual, bert.eval()


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--small", action="store_true", help="tiny models (smoke run)")
    args = ap.parse_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    refs, cands = reports(args.pairs, 0), reports(args.pairs, 1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        enc, ckpt, dual, bert = build(folder, args.small)
        from PIL import Image

        images = []
        for i in range(args.pairs):
            p = folder / f"im{i % 8}.png"
            if not p.exists():
                rng = np.random.default_rng(i)
                Image.fromarray(rng.integers(0, 255, (512, 512), dtype=np.uint8)).save(p)
            images.append((p,))
        print(f"{args.pairs} pairs, {'tiny' if args.small else 'full-size'} random-weight models,"
              f" torch threads {torch.get_num_threads()}")
        print(f"{'metric':<10}{'device':<8}{'pairs/s':>10}{'naive pairs/s':>15}{'ratio':>8}")
        for device in devices:
            lab = chexbert.ChexbertLabels(checkpoint=str(ckpt), encoder=str(enc))
            lab.load(device)
            lab.score(references=refs[:4], candidates=cands[:4])  # warm-up
            _, t = timed(lambda lab=lab: lab.score(references=refs, candidates=cands))
            tokenizer = lab._model.tokenizer
            net = bert.to(device)

            def naive(net=net, tokenizer=tokenizer, device=device):
                with torch.inference_mode():
                    for text in [*refs, *cands]:
                        e = tokenizer(text, return_tensors="pt", truncation=True).to(device)
                        net(**e)

            _, tn = timed(naive)
            print(f"{'chexbert':<10}{device:<8}{args.pairs / t:>10.1f}{args.pairs / tn:>15.1f}"
                  f"{tn / t:>8.2f}")
            semb = chexbert.SEmb(checkpoint=str(ckpt), encoder=str(enc))
            semb.load(device)
            _, t = timed(lambda semb=semb: semb.score(references=refs, candidates=cands))
            print(f"{'semb':<10}{device:<8}{args.pairs / t:>10.1f}{args.pairs / tn:>15.1f}"
                  f"{tn / t:>8.2f}")
            vl = vlscore.VLScore(model=str(dual))
            vl.load(device)
            vl.score(references=refs[:2], candidates=cands[:2], images=images[:2])
            _, t = timed(lambda vl=vl: vl.score(references=refs, candidates=cands, images=images))
            print(f"{'vlscore':<10}{device:<8}{args.pairs / t:>10.1f}{'-':>15}{'-':>8}")
    print("naive = the same encoder, one report per forward pass, no dedup of repeated texts")


if __name__ == "__main__":
    main()
