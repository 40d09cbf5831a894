"""The score path on one GPU: CheXbert-size labels, roberta-large BERTScore, a 7B judge, RadGraph.

One script, one JSON on stdout, about 1-3 minutes on one H100 (guarded at ``--time-limit``,
420 s by default, well inside 8 minutes). It needs only torch and transformers: no network, no
weights to download. Every model has random weights of the real architecture and size, built
from a config written here:

* ``chexbert``: BERT-base (12 layers, hidden 768, 12 heads) + CheXbert's 14 linear heads
  (13 four-way, one two-way), saved as a ``chexbert.pth`` shaped like the public one and
  labelled through our own :class:`~backend.metrics.chexbert.ChexbertLabels` (load, tokenise,
  length-sorted batches, heads, label reordering, per-pair and corpus F1): the whole metric.
  Reports of ~60-100 tokens. Configurations: the project default (fp32, batch 32), bf16 with
  batch 32, bf16 with batch 256. Unit: pairs/s (2 reports per pair).
* ``bertscore``: a roberta-large-size encoder (24 layers, hidden 1024, 16 heads) saved in a
  folder named ``roberta-large`` and scored through our
  :class:`~backend.metrics.bertscore.BertScore`, so it runs exactly as for the real model:
  cut at layer 17 (bert_score's layer for roberta-large), greedy matching of normalised token
  embeddings, no idf, no rescaling, ``cache_mb=0`` (every text is new anyway). fp32 (default)
  and bf16. Unit: pairs/s.
* ``llm_rexval``: a Llama-2-7B-architecture model (32 layers, hidden 4096, 32 heads,
  intermediate 11008, vocab 32000), initialised directly on the GPU in bf16 (no fp32 CPU
  copy), behind our :class:`~backend.metrics.llm_rexval.LlmRexval` with the transformers
  backend (:class:`~backend.metrics.llm_backends.TransformersBackend` over
  :class:`~backend.metrics.llm.CausalLM`: chat template, length-sorted batches, left padding,
  greedy ``generate``, decoding, parsing). The model is handed to the metric through its
  :class:`~backend.metrics.base.Resources` under the key ``llm.shared_lm`` uses, so the
  metric's own ``load`` finds it instead of reading weights. Batch 32, 48 new tokens, forced
  (``min_new_tokens = max_new_tokens``: random weights may emit EOS early, which would flatter
  the rate). Prompts are the real llm_rexval prompts around synthetic reports, ~600 tokens.
  Unit: samples/s.
* ``radgraph``: the RadGraph annotator is a DyGIE++ model inside the ``radgraph`` package's
  vendored AllenNLP, which cannot be handed a random model, so the equivalent computation is
  run here: a BERT-base encoder over ~120-token reports, every span up to 8 tokens scored by
  DyGIE's entity FFNN (2 x 150, 5 labels), the top 0.5 x tokens spans kept and every pair of
  them scored by the relation FFNN (span1, span2, span1 * span2; 4 labels). Spans are over
  word pieces (DyGIE pools to words first: slightly fewer spans), no coreference or event
  heads (RadGraph has none). fp32 (the package's) and bf16. Unit: pairs/s.

Tokenisers are built offline from a generated vocabulary: a WordPiece
``BertTokenizerFast`` over the words of a bank of radiology sentences (also used for the
roberta-size encoder: BERTScore's speed depends on token counts, not on which BPE made them),
and for the judge a 32,000-entry word-level ``tokenizers`` model with a Llama-2-style chat
template. Token counts are set to realistic lengths and reported in the JSON; random report
text (sentences plus random study dates) keeps every text distinct, so no cache helps.

Each configuration is timed after a warm-up call, between ``torch.cuda.synchronize()`` calls;
its size is chosen from the warm-up rate to fill a few seconds. Peak memory is
``torch.cuda.max_memory_allocated`` (reset before each configuration). Goals:

* CheXbert-size labelling >= 2,000 pairs/s (best configuration);
* the 7B judge >= 4.5 samples/s, 10x GREEN's published 0.45 samples/s (2.2 s per sample on an
  A100, RadEval's benchmark).

Usage::

    python bench/bench_gpu.py                  # full sizes on CUDA (tiny on a CPU-only host)
    python bench/bench_gpu.py --tiny           # 2 layers, hidden 64, 10 new tokens: seconds
    python bench/bench_gpu.py --only chexbert,llm_rexval --time-limit 300 --out gpu.json

``--tiny`` shrinks every model and sample count so the same code runs on CPU in seconds
(``tests/unit/test_bench_gpu.py`` runs it); its numbers are no evidence for the goals
(``"applies": false``).

Figures: none yet. This project has not had a GPU when this was written; the script is ready
and tested on CPU with ``--tiny``. Run it once as one command when a GPU is at hand and record
the date, the card and the JSON here.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import random
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))

ITEMS = ("chexbert", "bertscore", "llm_rexval", "radgraph")
#: item -> (throughput unit, goal); the best configuration of the item is held to it.
GOALS: dict[str, tuple[str, float, str]] = {
    "chexbert": ("pairs_per_s", 2000.0, "CheXbert-size labelling >= 2000 pairs/s"),
    "llm_rexval": ("samples_per_s", 4.5,
                   "7B judge >= 4.5 samples/s (10x GREEN's published 0.45 samples/s)"),
}

SENTENCES = (
    "The heart size is normal.",
    "There is mild enlargement of the cardiac silhouette.",
    "The mediastinal and hilar contours are unremarkable.",
    "There is a small left pleural effusion with adjacent atelectasis.",
    "No pneumothorax is seen.",
    "The lungs are clear without focal consolidation.",
    "Patchy opacity in the right lower lobe may reflect pneumonia in the appropriate"
    " clinical setting.",
    "Mild pulmonary vascular congestion without overt edema.",
    "Bibasilar atelectasis is unchanged.",
    "An endotracheal tube terminates 4 cm above the carina.",
    "A right internal jugular central venous catheter ends in the mid superior vena cava.",
    "The enteric tube courses below the diaphragm with the tip out of view.",
    "Median sternotomy wires and mediastinal clips are intact.",
    "Degenerative changes are seen in the thoracic spine.",
    "There is no acute osseous abnormality.",
    "Moderate right pleural effusion has increased since the prior study.",
    "Interstitial markings are increased bilaterally, likely chronic.",
    "A 1.2 cm nodule projects over the left upper lobe.",
    "Hyperinflated lungs are consistent with emphysema.",
    "Surgical clips are noted in the right upper quadrant.",
    "No acute cardiopulmonary process.",
    "Compared with the prior radiograph, the left basilar opacity has improved.",
)

LLAMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}<<SYS>>\n{{ m['content'] }}\n<</SYS>>\n\n"
    "{% elif m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% else %} {{ m['content'] }} {{ eos_token }}{% endif %}{% endfor %}"
)
_PIECES = re.compile(r"\w+|[^\w\s]+")  # what the Whitespace pre-tokenizer splits into


# --------------------------------------------------------------------------- sizes


def sizes(tiny: bool) -> dict[str, Any]:
    """Model shapes and sample counts; ``tiny`` shrinks everything to run on CPU in seconds."""
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128)
    return {
        "bert": small if tiny else dict(hidden_size=768, num_hidden_layers=12,
                                        num_attention_heads=12, intermediate_size=3072),
        "roberta": small if tiny else dict(hidden_size=1024, num_hidden_layers=24,
                                           num_attention_heads=16, intermediate_size=4096),
        # tiny: 2 layers, so bert_score's layer 17 does not exist; its last layer is used.
        "bertscore_layer": 2 if tiny else 17,
        "llama": dict(small, num_key_value_heads=4) if tiny else dict(
            hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
            num_key_value_heads=32, intermediate_size=11008),
        "llm_batch": 4 if tiny else 32,
        "llm_new_tokens": 10 if tiny else 48,
        "llm_batches_timed": 2 if tiny else 3,
        "encoder_seconds": 0.3 if tiny else 4.0,   # timed seconds per encoder configuration
        "min_pairs": 8 if tiny else 256,
        "max_pairs": 32 if tiny else 40000,
        "warmup_pairs": 8 if tiny else 256,
    }


# --------------------------------------------------------------------------- text


def report(rng: random.Random, min_tokens: int, max_tokens: int,
           count: Callable[[str], int]) -> str:
    """A synthetic report made distinct by a date: whole sentences until a target drawn from
    ``min_tokens``..``max_tokens`` is reached (the last sentence may pass it).

    ``count`` is asked once per distinct sentence (memoised), so building tens of thousands
    of reports stays cheap; the length is the header's count plus the sentences' counts less
    the special tokens ``count("")`` adds to each (exact for these tokenizers, which split on
    whitespace first, and split every number by its digits or not at all).
    """
    memo = _COUNT_MEMO.setdefault(count, {})

    def n(piece: str) -> int:
        if piece not in memo:
            memo[piece] = count(piece)
        return memo[piece]

    target = rng.randint(min_tokens, max_tokens)
    text = (f"Comparison: {rng.randint(1, 12)}/{rng.randint(1, 28)}/{rng.randint(2005, 2024)}"
            f" study {rng.randint(1000, 99999)}.")
    special = n("")
    total = n(re.sub(r"\d", "0", text))  # a number's count depends on its digits' count only
    while total < target:
        sentence = rng.choice(SENTENCES)
        text += " " + sentence
        total += n(sentence) - special
    return text


_COUNT_MEMO: dict[Any, dict[str, int]] = {}


def reports(n: int, seed: int, min_tokens: int, max_tokens: int,
            count: Callable[[str], int]) -> list[str]:
    """``n`` distinct synthetic reports of a realistic token length."""
    rng = random.Random(seed)
    return [report(rng, min_tokens, max_tokens, count) for _ in range(n)]


def mean_tokens(texts: list[str], count: Callable[[str], int]) -> float:
    """Mean token count of (up to 1000 of) ``texts``, counted exactly."""
    sample = texts[:1000]
    return round(sum(count(t) for t in sample) / max(len(sample), 1), 1)


def word_count(text: str) -> int:
    """Pieces the judge's word-level tokenizer makes of ``text``."""
    return len(_PIECES.findall(text))


def write_wordpiece_vocab(folder: Path) -> Path:
    """A WordPiece vocabulary (lower-cased words of the sentence bank, digits, characters)."""
    words = sorted({p.lower() for s in SENTENCES for p in _PIECES.findall(s)}
                   | set("0123456789") | {"comparison", "study"} | set(".:,/"))
    chars = sorted({c for w in words for c in w})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words,
             *(f"##{c}" for c in chars if f"##{c}" not in words)]
    vocab = list(dict.fromkeys(vocab))
    path = folder / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    return path


def bert_tokenizer(folder: Path) -> Any:
    """An offline ``BertTokenizerFast`` over :func:`write_wordpiece_vocab`."""
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    words = write_wordpiece_vocab(folder).read_text().split()
    # transformers 5 takes ``vocab`` (a path or a dict); its ``vocab_file`` is silently ignored
    # (every token would be [UNK]).
    tok = BertTokenizerFast(vocab={w: i for i, w in enumerate(words)}, do_lower_case=True)
    if tok.convert_tokens_to_ids("heart") == tok.unk_token_id:
        raise RuntimeError("the offline WordPiece vocabulary was not taken")
    return tok


def llama_tokenizer(folder: Path, sample_text: str, vocab_size: int = 32000) -> Any:
    """A word-level tokenizer of ``vocab_size`` entries with a Llama-2 chat template, saved."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for piece in _PIECES.findall(sample_text + " " + " ".join(SENTENCES)):
        vocab.setdefault(piece, len(vocab))
    for i in range(100000):
        if len(vocab) >= vocab_size:
            break
        vocab.setdefault(str(i), len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    tok.chat_template = LLAMA_CHAT_TEMPLATE
    tok.save_pretrained(str(folder))
    return tok


# --------------------------------------------------------------------------- timing


class Clock:
    """Wall-clock deadline of the whole run."""

    def __init__(self, limit_s: float) -> None:
        self.start = time.perf_counter()
        self.limit = float(limit_s)

    def left(self) -> float:
        return self.limit - (time.perf_counter() - self.start)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_mb(device: str) -> float | None:
    import torch

    if device.startswith("cuda"):
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return None


def timed(device: str, fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its seconds, between two synchronisations."""
    sync(device)
    t = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t


def pick_count(rate: float, seconds: float, lo: int, hi: int) -> int:
    """How many items fill ``seconds`` at ``rate`` items/s, within ``lo``..``hi``."""
    if not math.isfinite(rate) or rate <= 0:
        return lo
    return int(min(hi, max(lo, rate * seconds)))


@contextlib.contextmanager
def default_dtype(dtype: Any) -> Iterator[None]:
    import torch

    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(prev)


# --------------------------------------------------------------------------- items


def encoder_pairs(S: dict[str, Any], clock: Clock, item_budget: float, n_configs: int,
                  warm_rate: float) -> int:
    """Pairs for one timed configuration: fill the per-configuration seconds, not the clock."""
    budget = min(S["encoder_seconds"], max(0.5, (clock.left() - 30) / max(n_configs, 1) / 2),
                 item_budget)
    return pick_count(warm_rate, budget, S["min_pairs"], S["max_pairs"])


def bench_chexbert(device: str, S: dict[str, Any], tmp: Path, clock: Clock) -> dict[str, Any]:
    """CheXbert labels through ``ChexbertLabels`` on a random-weight BERT-base + 14 heads."""
    import torch
    from transformers import BertConfig, BertModel

    from radconcord.backend.metrics.base import Resources
    from radconcord.backend.metrics.chexbert import ChexbertLabels

    enc = tmp / "chexbert-encoder"
    tok = bert_tokenizer(enc)
    tok.save_pretrained(str(enc))
    cfg = BertConfig(vocab_size=30522, **S["bert"])
    cfg.save_pretrained(str(enc))
    torch.manual_seed(0)
    bert = BertModel(cfg, add_pooling_layer=False)
    heads = [torch.nn.Linear(cfg.hidden_size, 4) for _ in range(13)]
    heads.append(torch.nn.Linear(cfg.hidden_size, 2))
    state = {f"module.bert.{k}": v for k, v in bert.state_dict().items()}
    for i, h in enumerate(heads):
        state[f"module.linear_heads.{i}.weight"] = h.weight.detach()
        state[f"module.linear_heads.{i}.bias"] = h.bias.detach()
    ckpt = tmp / "chexbert.pth"
    torch.save({"model_state_dict": state}, ckpt)
    del bert, heads, state

    def count(t: str) -> int:
        return len(tok(t)["input_ids"])

    configs = [("fp32", 32)]
    if device.startswith("cuda"):
        configs += [("bf16", 32), ("bf16", 256)]
    resources: dict[str, Resources] = {}  # one per dtype: a config's peak holds one model
    out = []
    seed = 1
    for dtype, batch in configs:
        if clock.left() < 20:
            out.append({"dtype": dtype, "batch_size": batch, "skipped": "time limit"})
            continue
        reset_peak(device)
        metric = ChexbertLabels(checkpoint=str(ckpt), encoder=str(enc), batch_size=batch,
                                dtype=dtype)
        metric.use_resources(resources.setdefault(dtype, Resources()))
        metric.load(device)
        w = S["warmup_pairs"]
        refs = reports(w, seed, 60, 100, count)
        cands = reports(w, seed + 1, 60, 100, count)
        seed += 2
        metric.score(references=refs[: min(w, batch)], candidates=cands[: min(w, batch)])
        _, secs = timed(device, lambda m=metric, r=refs, c=cands: m.score(references=r,
                                                                          candidates=c))
        n = encoder_pairs(S, clock, clock.left(), len(configs), w / secs)
        refs = reports(n, seed, 60, 100, count)
        cands = reports(n, seed + 1, 60, 100, count)
        seed += 2
        res, secs = timed(device, lambda m=metric, r=refs, c=cands: m.score(references=r,
                                                                            candidates=c))
        assert len(res.values["chexbert_acc"]) == n
        out.append({"dtype": dtype, "batch_size": batch, "pairs": n,
                    "mean_tokens": mean_tokens(refs[:500] + cands[:500], count),
                    "seconds": round(secs, 3), "pairs_per_s": round(n / secs, 2),
                    "peak_gpu_mb": peak_mb(device)})
        del metric
        if batch == max(b for d, b in configs if d == dtype):
            resources.pop(dtype).clear()
    return {"unit": "pairs_per_s", "what": "ChexbertLabels.score, BERT-base + 14 heads",
            "configs": out}


def bench_bertscore(device: str, S: dict[str, Any], tmp: Path, clock: Clock) -> dict[str, Any]:
    """BERTScore through ``BertScore`` on a random-weight roberta-large-size encoder."""
    import torch
    from transformers import RobertaConfig, RobertaModel

    from radconcord.backend.metrics.bertscore import BertScore

    folder = tmp / "roberta-large"  # the name gives bert_score's layer 17 (KNOWN_LAYERS)
    tok = bert_tokenizer(folder)
    tok.save_pretrained(str(folder))
    cfg = RobertaConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                        pad_token_id=tok.pad_token_id, **S["roberta"])
    torch.manual_seed(0)
    RobertaModel(cfg).save_pretrained(str(folder))

    def count(t: str) -> int:
        return len(tok(t)["input_ids"])

    configs = ["fp32"] + (["bf16"] if device.startswith("cuda") else [])
    out = []
    seed = 11
    for dtype in configs:
        if clock.left() < 20:
            out.append({"dtype": dtype, "skipped": "time limit"})
            continue
        reset_peak(device)
        metric = BertScore(model=str(folder), num_layers=S["bertscore_layer"], rescale=False,
                           dtype=dtype, cache_mb=0)
        metric.load(device)
        first = reports(8, 1000 + seed, 60, 100, count)
        metric.score(references=first[:4], candidates=first[4:])  # first-call set-up
        w = S["warmup_pairs"]
        refs = reports(w, seed, 60, 100, count)
        cands = reports(w, seed + 1, 60, 100, count)
        seed += 2
        _, secs = timed(device, lambda m=metric, r=refs, c=cands: m.score(references=r,
                                                                          candidates=c))
        n = encoder_pairs(S, clock, clock.left(), len(configs), w / secs)
        refs = reports(n, seed, 60, 100, count)
        cands = reports(n, seed + 1, 60, 100, count)
        seed += 2
        res, secs = timed(device, lambda m=metric, r=refs, c=cands: m.score(references=r,
                                                                            candidates=c))
        assert len(res.values["bertscore_f"]) == n
        out.append({"dtype": dtype, "batch_size": metric.options["batch_size"], "pairs": n,
                    "layer": S["bertscore_layer"],
                    "mean_tokens": mean_tokens(refs[:500] + cands[:500], count),
                    "seconds": round(secs, 3), "pairs_per_s": round(n / secs, 2),
                    "peak_gpu_mb": peak_mb(device)})
        del metric
    return {"unit": "pairs_per_s",
            "what": "BertScore.score, roberta-large-size encoder cut at layer 17, greedy matching",
            "configs": out}


def build_causal_lm(cfg: Any, device: str, dtype: Any) -> Any:
    """A random-weight causal LM made directly on ``device`` in ``dtype`` (no fp32 CPU copy)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device), default_dtype(dtype):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    first = next(model.parameters())
    if first.device.type != torch.device(device).type or first.dtype != dtype:
        model = model.to(device=device, dtype=dtype)  # a transformers that ignored the context
    return model.eval()


def bench_llm_rexval(device: str, S: dict[str, Any], tmp: Path, clock: Clock) -> dict[str, Any]:
    """The llm_rexval judge through its transformers backend on a random 7B Llama."""
    import torch
    from transformers import LlamaConfig

    from radconcord.backend.metrics import hf, llm
    from radconcord.backend.metrics.base import Resources
    from radconcord.backend.metrics.llm_rexval import LlmRexval, build_messages

    folder = tmp / "llama-7b-random"
    folder.mkdir(parents=True)
    sample = " ".join(m["content"] for m in build_messages("x", "y"))
    llama_tokenizer(folder, sample + " [INST] [/INST] <<SYS>> <</SYS>>")
    cfg = LlamaConfig(vocab_size=32000, max_position_embeddings=4096, bos_token_id=1,
                      eos_token_id=2, **S["llama"])
    cfg.save_pretrained(str(folder))  # the folder the metric resolves (config + tokenizer)

    dtype_opt = "bf16" if device.startswith("cuda") else "fp32"
    torch_dtype = hf.pick_dtype(device, dtype_opt)
    t0 = time.perf_counter()
    model = build_causal_lm(cfg, device, torch_dtype)
    sync(device)
    init_s = time.perf_counter() - t0
    new = S["llm_new_tokens"]
    # Random weights may pick EOS at any step; a judge that stops early is faster for no merit.
    model.generation_config.min_new_tokens = new

    # The CausalLM that llm.shared_lm would build from the folder, with this model instead of
    # from_pretrained (same attributes as CausalLM.__init__ sets).
    lm = llm.CausalLM.__new__(llm.CausalLM)
    lm.path, lm.device, lm.dtype = folder.resolve(), device, torch_dtype
    lm.tokenizer = hf.load_tokenizer(folder)
    if lm.tokenizer.pad_token is None:
        lm.tokenizer.pad_token = lm.tokenizer.eos_token
    lm.tokenizer.padding_side = "left"
    lm.model = model
    lm.lock = threading.Lock()
    resources = Resources()
    resources.get(("causal-lm", str(folder.resolve()), device, str(torch_dtype)), lambda: lm)

    batch = S["llm_batch"]
    metric = LlmRexval(model=str(folder), batch_size=batch, max_new_tokens=new, dtype=dtype_opt)
    metric.use_resources(resources)
    metric.load(device)
    if len(resources) != 1:  # the metric must use our model, not load another
        raise RuntimeError("llm_rexval loaded a model of its own")

    # Reports of ~90-130 pieces each put the prompt near 600 tokens (the template is ~380).
    def pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
        return (reports(n, seed, 90, 130, word_count),
                reports(n, seed + 1, 90, 130, word_count))

    prompt_tokens = []
    for msgs in metric.prompts(*pairs(batch, 90)):
        text = lm.format_messages(msgs)
        prompt_tokens.append(len(lm.tokenizer(text, add_special_tokens=False)["input_ids"]))

    reset_peak(device)
    refs, cands = pairs(batch, 100)
    _, warm_s = timed(device, lambda: metric.score(references=refs, candidates=cands))
    k = S["llm_batches_timed"]
    while k > 1 and warm_s * (k + 1) > clock.left() - 20:
        k -= 1
    n = batch * k
    refs, cands = pairs(n, 200)
    res, secs = timed(device, lambda: metric.score(references=refs, candidates=cands))
    gens = [d["generation"] for d in res.details]
    # Count the generated tokens of one batch with the model directly (same settings).
    enc = lm.tokenizer([lm.format_messages(m) for m in metric.prompts(refs[:2], cands[:2])],
                       add_special_tokens=False, padding=True, return_tensors="pt").to(device)
    with torch.inference_mode():
        ids = model.generate(**enc, do_sample=False, max_new_tokens=new,
                             pad_token_id=lm.tokenizer.pad_token_id,
                             eos_token_id=lm.tokenizer.eos_token_id)
    generated = int(ids.shape[1] - enc["input_ids"].shape[1])
    cfg_out = {"dtype": dtype_opt, "batch_size": batch, "samples": n,
               "max_new_tokens": new, "min_new_tokens": new, "generated_tokens": generated,
               "mean_prompt_tokens": round(sum(prompt_tokens) / len(prompt_tokens), 1),
               "max_prompt_tokens": max(prompt_tokens),
               "parameters": sum(p.numel() for p in model.parameters()),
               "init_seconds": round(init_s, 2), "warmup_seconds": round(warm_s, 3),
               "seconds": round(secs, 3), "samples_per_s": round(n / secs, 3),
               "mean_generation_chars": round(sum(map(len, gens)) / len(gens), 1),
               "parsed": sum(bool(d["parsed"]) for d in res.details),
               "peak_gpu_mb": peak_mb(device)}
    return {"unit": "samples_per_s",  # the 7B goes with this frame's locals
            "what": "LlmRexval.score, transformers backend, Llama-2-7B architecture",
            "configs": [cfg_out]}


def span_head(hidden: int, width: int = 8, ffnn: int = 150, n_ent: int = 5, n_rel: int = 4,
              spans_per_word: float = 0.5) -> Any:
    """DyGIE++'s entity and relation scorers over span representations (a torch module)."""
    import torch
    from torch import nn

    class SpanHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = 2 * hidden + 20
            self.width = nn.Embedding(width, 20)
            self.ner = nn.Sequential(nn.Linear(d, ffnn), nn.ReLU(), nn.Linear(ffnn, ffnn),
                                     nn.ReLU(), nn.Linear(ffnn, n_ent))
            self.rel = nn.Sequential(nn.Linear(3 * d, ffnn), nn.ReLU(), nn.Linear(ffnn, ffnn),
                                     nn.ReLU(), nn.Linear(ffnn, n_rel))

        def forward(self, h: Any, mask: Any) -> tuple[Any, Any]:
            b, t, _ = h.shape
            starts = torch.arange(t, device=h.device).repeat_interleave(width)
            ends = starts + torch.arange(width, device=h.device).repeat(t)
            keep = ends < t
            starts, ends = starts[keep], ends[keep]
            spans = torch.cat([h[:, starts], h[:, ends],
                               self.width(ends - starts).expand(b, -1, -1)], dim=-1)
            valid = mask[:, ends].bool()
            ner = self.ner(spans)
            score = ner[..., 1:].max(dim=-1).values.masked_fill(~valid, float("-inf"))
            k = max(1, min(int(spans_per_word * t), score.shape[1]))
            top = score.topk(k, dim=1).indices
            sel = torch.gather(spans, 1, top[..., None].expand(-1, -1, spans.shape[-1]))
            a = sel[:, :, None].expand(-1, -1, k, -1)
            c = sel[:, None].expand(-1, k, -1, -1)
            rel = self.rel(torch.cat([a, c, a * c], dim=-1))
            return ner.argmax(dim=-1), rel.argmax(dim=-1)

    return SpanHead()


def bench_radgraph(device: str, S: dict[str, Any], tmp: Path, clock: Clock) -> dict[str, Any]:
    """A RadGraph-size span model (BERT-base + DyGIE-style span heads), equivalent computation."""
    import torch
    from transformers import BertConfig, BertModel

    tok = bert_tokenizer(tmp / "radgraph-encoder")
    cfg = BertConfig(vocab_size=30522, **S["bert"])

    def count(t: str) -> int:
        return len(tok(t)["input_ids"])

    configs = ["fp32"] + (["bf16"] if device.startswith("cuda") else [])
    out = []
    seed = 21
    batch = 32
    for dtype_name in configs:
        if clock.left() < 20:
            out.append({"dtype": dtype_name, "skipped": "time limit"})
            continue
        reset_peak(device)
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
        torch.manual_seed(0)
        with torch.device(device), default_dtype(dtype):
            bert = BertModel(cfg, add_pooling_layer=False).eval()
            head = span_head(cfg.hidden_size).eval()

        def annotate(texts: list[str], bert: Any = bert, head: Any = head) -> int:
            from radconcord.backend.metrics import hf

            def run(b: list[str]) -> list[int]:
                enc = tok(b, padding=True, truncation=True, max_length=512,
                          return_tensors="pt").to(device)
                with torch.inference_mode():
                    h = bert(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])[0]
                    ents, rels = head(h, enc["attention_mask"])
                    n_ent = (ents > 0).sum(dim=1).cpu().tolist()
                return n_ent

            return sum(hf.map_sorted_by_length(texts, run, lengths=[len(t) for t in texts],
                                               batch_size=batch))

        w = S["warmup_pairs"]
        texts = reports(2 * w, seed, 100, 140, count)
        seed += 1
        annotate(texts[:batch])
        _, secs = timed(device, lambda x=texts: annotate(x))
        n = encoder_pairs(S, clock, clock.left(), len(configs), w / secs)
        texts = reports(2 * n, seed, 100, 140, count)
        seed += 1
        _, secs = timed(device, lambda x=texts: annotate(x))
        out.append({"dtype": dtype_name, "batch_size": batch, "pairs": n,
                    "mean_tokens": mean_tokens(texts, count),
                    "seconds": round(secs, 3), "pairs_per_s": round(n / secs, 2),
                    "peak_gpu_mb": peak_mb(device)})
        del bert, head
    return {"unit": "pairs_per_s",
            "what": "equivalent computation (radgraph's DyGIE++ takes no model object):"
                    " BERT-base + span entity FFNN + pairwise relation FFNN, ~120 tokens",
            "configs": out}


BENCHES: dict[str, Callable[..., dict[str, Any]]] = {
    "chexbert": bench_chexbert,
    "bertscore": bench_bertscore,
    "llm_rexval": bench_llm_rexval,
    "radgraph": bench_radgraph,
}
#: Seconds an item needs at least (full size); it is skipped when less is left.
NEEDS_S = {"chexbert": 30, "bertscore": 40, "llm_rexval": 90, "radgraph": 25}


# --------------------------------------------------------------------------- report


def summarise(item: dict[str, Any]) -> None:
    """Best configuration's throughput and peak memory at the item's top level."""
    unit = item.get("unit")
    done = [c for c in item.get("configs", []) if unit in c]
    if not done:
        item["throughput"] = None
        return
    best = max(done, key=lambda c: c[unit])
    item["throughput"] = best[unit]
    item["best_config"] = {k: best[k] for k in ("dtype", "batch_size") if k in best}
    peaks = [c["peak_gpu_mb"] for c in done if c.get("peak_gpu_mb") is not None]
    item["peak_gpu_mb"] = max(peaks) if peaks else None


def goals(items: dict[str, dict[str, Any]], applies: bool) -> list[dict[str, Any]]:
    """Each goal with its value and pass/fail (``applies`` is false for tiny runs)."""
    out = []
    for name, (unit, target, text) in GOALS.items():
        value = items.get(name, {}).get("throughput")
        out.append({"item": name, "goal": text, "unit": unit, "target": target,
                    "value": value, "pass": value is not None and value >= target,
                    "applies": applies})
    return out


def environment(device: str) -> dict[str, Any]:
    import torch
    import transformers

    env: dict[str, Any] = {
        "device": device,
        "device_name": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        env.update(device_name=torch.cuda.get_device_name(torch.device(device)),
                   cuda=torch.version.cuda, gpu_memory_mb=round(props.total_memory / 2**20),
                   tf32_matmul=torch.backends.cuda.matmul.allow_tf32)
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", help="auto | cuda | cuda:N | cpu")
    ap.add_argument("--tiny", action="store_true",
                    help="tiny models and counts (automatic on CPU)")
    ap.add_argument("--only", default=",".join(ITEMS),
                    help=f"comma list of items ({', '.join(ITEMS)})")
    ap.add_argument("--time-limit", type=float, default=420.0,
                    help="seconds; items that cannot finish are skipped, a hung run is cut"
                         " 30 s after it with the figures so far")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)

    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(ITEMS))
    if unknown:
        ap.error(f"unknown item(s) {', '.join(unknown)} (choose from {', '.join(ITEMS)})")

    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tiny = args.tiny or not device.startswith("cuda")
    S = sizes(tiny)
    clock = Clock(args.time_limit)
    result: dict[str, Any] = {"bench": "bench_gpu", "tiny": tiny, **environment(device),
                              "time_limit_s": args.time_limit, "items": {}}
    lock = threading.Lock()

    def emit(final: bool) -> None:
        with lock:
            result["goals"] = goals(result["items"], applies=not tiny)
            result["seconds"] = round(time.perf_counter() - clock.start, 2)
            result["complete"] = final
            text = json.dumps(result, indent=2, default=str)
            if args.out:
                Path(args.out).write_text(text + "\n")
            print(text, flush=True)

    def cut() -> None:
        result["aborted"] = f"still running {args.time_limit + 30:.0f} s after the start"
        emit(False)
        os._exit(3)

    guard = threading.Timer(args.time_limit + 30, cut)
    guard.daemon = True
    guard.start()
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp_name:
        tmp = Path(tmp_name)
        for name in only:
            need = 5 if tiny else NEEDS_S[name]
            if clock.left() < need:
                result["items"][name] = {"skipped": f"time limit ({clock.left():.0f} s left,"
                                                    f" needs ~{need} s)", "throughput": None}
                continue
            print(f"bench_gpu: {name} ({clock.left():.0f} s left)", file=sys.stderr, flush=True)
            t = time.perf_counter()
            (tmp / name).mkdir()
            try:
                item = BENCHES[name](device, S, tmp / name, clock)
            except Exception as exc:  # noqa: BLE001 - one failed item must not hide the others
                item = {"error": f"{type(exc).__name__}: {exc}"[:2000], "configs": []}
            item["seconds"] = round(time.perf_counter() - t, 2)
            summarise(item)
            with lock:
                result["items"][name] = item
            reset_peak(device)
    guard.cancel()
    emit(True)
    return 0 if all("error" not in i for i in result["items"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
