"""RadGraph F1 (radgraph_simple / partial / complete) and RadCliQ's radgraph_combined.

RadGraph (Jain et al., 2021) annotates a report with entities (anatomy ``ANAT-DP``,
observations ``OBS-DP`` / ``OBS-U`` / ``OBS-DA``) and relations between them (``modify``,
``located_at``, ``suggestive_of``). The annotator is the DyGIE++ span model released as
``radgraph.tar.gz`` / ``radgraph-xl.tar.gz`` in ``StanfordAIMI/RRG_scorers``; inference uses the
classes of the ``radgraph`` PyPI package (its vendored AllenNLP and DyGIE++), fed its own
preprocessing and post-processed with its own ``get_entity``, so annotations are the package's.

Per-report annotations have the package's format ``{entity_id: {"tokens", "label",
"start_ix", "end_ix", "relations": [[type, target_id], ...]}}``. From two annotations:

* ``radgraph_simple``: F1 over ``{(tokens, label)}``;
* ``radgraph_partial``: F1 over ``{(tokens, label)}`` for entities without relations and
  ``{(tokens, label, True)}`` for entities with at least one;
* ``radgraph_complete``: F1 over ``{(tokens, label)}`` for entities without relations and, for
  each relation of an entity, ``(tokens.lower(), label, type, target_tokens.lower())``;
  (the three are the package's ``rewards.compute_reward`` semantics, checked in
  ``tests/unit/test_radgraph_f1.py``: precision or recall of an empty set is 0, F1 is 0 when
  precision + recall is 0, and all three are 0 when either report has no entity);
* ``radgraph_combined``: (entity F1 + relation F1) / 2 with entities ``{(tokens, label)}`` and
  relations ``{((src_tokens, src_label), (dst_tokens, dst_label), type)}``: the RadCliQ input,
  CXR-Report-Metric's ``parse_entity_relation`` + ``compute_f1`` (which also keys relation ends
  by their labels). An F1 over two empty sets is 0 there, so a pair where either report has no
  entity scores 0, and a pair where both have entities but neither has a relation scores
  entity F1 / 2.

Both reports empty (no entity in either, e.g. two empty strings) is 0 for all four keys, as in
both references (``F1RadGraph`` gives 0 for an empty report; CXR-Report-Metric's ``compute_f1``
gives 0 on empty sets); the pair's details say ``"no_entities": "both"``.

Compatibility: radgraph 0.1.18's vendored AllenNLP calls ``tokenizer.encode_plus`` and
``tokenizer.build_inputs_with_special_tokens``, which transformers 5 removed, so the package's
own ``RadGraph`` fails at construction with transformers 5. Loading registers, in the package's
own tokenizer cache (``cached_transformers._tokenizer_cache``, keyed by the encoder folder), a
thin wrapper of the encoder's tokenizer providing both with their transformers 4 meaning
(:class:`_CompatTokenizer`).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radconcord.backend.config import data_dir, model_dir
from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    OutputSpec,
    Resources,
)
from radconcord.backend.util import cached_file_sha256, staging_dir

logger = logging.getLogger(__name__)

CHECKPOINT_REPO = "StanfordAIMI/RRG_scorers"
CHECKPOINT_REVISION = "d97745aa136e5beb927da7e768e99de6ae807902"
#: model_type -> archive file in :data:`CHECKPOINT_REPO` (the package's ``MODEL_MAPPING``).
ARCHIVES: dict[str, str] = {
    "radgraph": "radgraph.tar.gz",
    "radgraph-xl": "radgraph-xl.tar.gz",
}
F1_VERSION = "v1"
KEYS: tuple[str, ...] = (
    "radgraph_simple",
    "radgraph_partial",
    "radgraph_complete",
    "radgraph_combined",
)
_ARCHIVE_FILES = ("config.json", "weights.th")
_TOKENIZER_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
)

Entities = Mapping[str, Mapping[str, Any]]


class AnnotationError(ValueError):
    """An annotation does not have the radgraph package's entity format."""


# --------------------------------------------------------------------------- F1 (pure)


def validate_entities(entities: Entities, where: str = "annotation") -> None:
    """Check the package's entity format; raise one clear error naming the bad field.

    Args:
        entities: ``{entity_id: {"tokens": str, "label": str, "relations": [[type, id]]}}``.
        where: Name of the annotation in error messages.

    Raises:
        AnnotationError: on a missing/ill-typed field or a relation to an unknown entity.
    """
    if not isinstance(entities, Mapping):
        raise AnnotationError(f"{where}: entities must be a mapping, got {type(entities).__name__}")
    for eid, ent in entities.items():
        if not isinstance(ent, Mapping):
            raise AnnotationError(f"{where}: entity {eid!r} is {type(ent).__name__}, not a dict")
        for field in ("tokens", "label"):
            if not isinstance(ent.get(field), str):
                raise AnnotationError(f"{where}: entity {eid!r} field {field!r} must be a str")
        rels = ent.get("relations", [])
        if not isinstance(rels, list | tuple):
            raise AnnotationError(f"{where}: entity {eid!r} field 'relations' must be a list")
        for rel in rels:
            if not isinstance(rel, list | tuple) or len(rel) != 2:
                raise AnnotationError(
                    f"{where}: entity {eid!r} relation {rel!r} must be [type, target_id]"
                )
            if rel[1] not in entities:
                raise AnnotationError(
                    f"{where}: entity {eid!r} relation {rel!r} targets unknown entity {rel[1]!r}"
                )


def _rels(ent: Mapping[str, Any]) -> Sequence[Sequence[str]]:
    return ent.get("relations") or ()


def simple_set(entities: Entities) -> set[tuple[str, str]]:
    """``{(tokens, label)}`` (the package's ``exact_entity_token_match_reward`` items)."""
    return {(e["tokens"], e["label"]) for e in entities.values()}


def partial_set(entities: Entities) -> set[tuple[Any, ...]]:
    """``(tokens, label)`` without relations, ``(tokens, label, True)`` with at least one."""
    return {
        (e["tokens"], e["label"], True) if _rels(e) else (e["tokens"], e["label"])
        for e in entities.values()
    }


def complete_set(entities: Entities) -> set[tuple[str, ...]]:
    """``(tokens, label)`` without relations, else one lowercased item per relation.

    Each relation gives ``(tokens.lower(), label, type, target_tokens.lower())``; entities
    without relations keep their original case (the package's
    ``exact_entity_token_if_all_match_reward``).
    """
    out: set[tuple[str, ...]] = set()
    for e in entities.values():
        rels = _rels(e)
        if not rels:
            out.add((e["tokens"], e["label"]))
            continue
        for rel_type, target in rels:
            out.add((e["tokens"].lower(), e["label"], rel_type,
                     entities[target]["tokens"].lower()))
    return out


def entity_set(entities: Entities) -> set[tuple[str, str]]:
    """CXR-Report-Metric's entities: ``{(tokens, label)}``."""
    return simple_set(entities)


def relation_set(entities: Entities) -> set[tuple[tuple[str, str], tuple[str, str], str]]:
    """CXR-Report-Metric's relations: ``{((src_tokens, src_label), (dst_tokens, dst_label),
    type)}``."""
    out = set()
    for e in entities.values():
        for rel_type, target in _rels(e):
            dst = entities[target]
            out.add(((e["tokens"], e["label"]), (dst["tokens"], dst["label"]), rel_type))
    return out


def set_f1(hypothesis: set[Any], reference: set[Any]) -> float:
    """F1 of two sets: precision (recall) is 0 for an empty hypothesis (reference) set, F1 is
    0 when precision + recall is 0 (both references' convention; symmetric in its arguments)."""
    tp = len(hypothesis & reference)
    precision = tp / len(hypothesis) if hypothesis else 0.0
    recall = tp / len(reference) if reference else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


@dataclass(frozen=True)
class PairScores:
    """The four scores of one pair plus the counts behind them."""

    simple: float
    partial: float
    complete: float
    combined: float
    entity_f1: float
    relation_f1: float
    counts: dict[str, int]

    def values(self) -> dict[str, float]:
        """``key -> value`` for :data:`KEYS`."""
        return dict(zip(KEYS, (self.simple, self.partial, self.complete, self.combined),
                        strict=True))


def pair_scores(reference: Entities, candidate: Entities) -> PairScores:
    """All four RadGraph scores of one (reference, candidate) pair of annotations.

    Args:
        reference: Entities of the reference report.
        candidate: Entities of the candidate report.

    Raises:
        AnnotationError: when an annotation is malformed.
    """
    validate_entities(reference, "reference")
    validate_entities(candidate, "candidate")
    ref_e, cand_e = entity_set(reference), entity_set(candidate)
    ref_r, cand_r = relation_set(reference), relation_set(candidate)
    entity_f1 = set_f1(cand_e, ref_e)
    relation_f1 = set_f1(cand_r, ref_r)
    if not reference or not candidate:
        simple = partial = complete = 0.0
    else:
        simple = set_f1(simple_set(candidate), simple_set(reference))
        partial = set_f1(partial_set(candidate), partial_set(reference))
        complete = set_f1(complete_set(candidate), complete_set(reference))
    counts = {
        "reference_entities": len(reference),
        "candidate_entities": len(candidate),
        "reference_relations": sum(len(_rels(e)) for e in reference.values()),
        "candidate_relations": sum(len(_rels(e)) for e in candidate.values()),
        "matched_entities": len(ref_e & cand_e),
        "matched_relations": len(ref_r & cand_r),
    }
    return PairScores(simple, partial, complete, (entity_f1 + relation_f1) / 2,
                      entity_f1, relation_f1, counts)


# --------------------------------------------------------------------------- files


_file_sha256 = cached_file_sha256


def _folder_sha256(folder: Path, names: Iterable[str]) -> str:
    """sha256 over (relative name, file sha256) of the given files and ``vocabulary/*``."""
    h = hashlib.sha256()
    files = [folder / n for n in names if (folder / n).is_file()]
    vocab = folder / "vocabulary"
    if vocab.is_dir():
        files += sorted(p for p in vocab.iterdir() if p.is_file() and not p.name.startswith("."))
    for f in files:
        h.update(f.relative_to(folder).as_posix().encode() + b"\x00")
        h.update(_file_sha256(f).encode() + b"\x00")
    return h.hexdigest()


def is_checkpoint_folder(path: Path) -> bool:
    """An extracted archive: ``config.json``, ``weights.th`` and ``vocabulary/``."""
    return (
        path.is_dir()
        and all((path / n).is_file() for n in _ARCHIVE_FILES)
        and (path / "vocabulary").is_dir()
    )


@dataclass(frozen=True)
class Checkpoint:
    """A located RadGraph checkpoint.

    Attributes:
        path: The archive (``.tar.gz``) or extracted folder; ``None`` when it must be
            downloaded at load time.
        source: ``path`` | ``model_dir`` | ``hf_cache`` | ``hub``.
    """

    path: Path | None
    source: str


def locate_checkpoint(model_type: str, checkpoint: str | None) -> tuple[Checkpoint | None, str]:
    """Find the archive without downloading anything.

    Order: an explicit ``checkpoint`` (archive or extracted folder);
    ``$RADCONCORD_MODEL_DIR/<archive>``, ``$RADCONCORD_MODEL_DIR/StanfordAIMI--RRG_scorers/
    <archive>`` or an extracted ``$RADCONCORD_MODEL_DIR/<model_type>/``; the Hugging Face cache
    at the pinned revision; else the hub at load time when it is reachable and not offline.

    Returns:
        ``(Checkpoint, "")`` or ``(None, reason)``.
    """
    filename = ARCHIVES[model_type]
    if checkpoint:
        p = Path(checkpoint).expanduser().resolve()
        if p.is_file() or is_checkpoint_folder(p):
            return Checkpoint(p, "path"), ""
        if p.is_dir():
            return None, (
                f"RadGraph checkpoint folder {p} lacks config.json, weights.th or vocabulary/"
            )
        return None, f"RadGraph checkpoint {p} does not exist"
    found = hf.model_dir_file(CHECKPOINT_REPO, filename)
    if found is not None:
        return Checkpoint(found, "model_dir"), ""
    base = model_dir()
    if base is not None and is_checkpoint_folder(base / model_type):
        return Checkpoint((base / model_type).resolve(), "model_dir"), ""
    found = hf.hf_cache_file(CHECKPOINT_REPO, filename, CHECKPOINT_REVISION)
    if found is not None:
        return Checkpoint(found, "hf_cache"), ""
    reason = hf.hub_unavailable_reason(
        f"RadGraph weights ({CHECKPOINT_REPO}/{filename})",
        f"put {filename} in $RADCONCORD_MODEL_DIR or pass"
        f" --set radgraph.checkpoint=/path/{filename}",
    )
    if reason:
        return None, reason
    return Checkpoint(None, "hub"), ""


_CONFIG_CACHE: dict[tuple[str, int, int], dict] = {}


def read_archive_config(path: Path) -> dict:
    """``config.json`` of an archive or folder (cached per file size and mtime).

    Raises:
        ValueError: when there is no ``config.json`` or it is not JSON.
    """
    if path.is_dir():
        try:
            return json.loads((path / "config.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}/config.json: {exc}") from exc
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _CONFIG_CACHE:
        return _CONFIG_CACHE[key]
    try:
        with tarfile.open(path, "r:*") as tar:
            # Iterate instead of getmember(): stops at config.json without reading the weights
            # when config.json comes first (as in the public archives).
            for member in tar:
                if member.isfile() and member.name.lstrip("./") == "config.json":
                    fh = tar.extractfile(member)
                    assert fh is not None
                    config = json.loads(fh.read().decode("utf-8"))
                    break
            else:
                raise ValueError(f"{path} has no config.json at its root")
    except (tarfile.TarError, OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a RadGraph archive: {exc}") from exc
    _CONFIG_CACHE[key] = config
    return config


def encoder_name(config: Mapping[str, Any]) -> str:
    """The BERT encoder named in an archive config (``...token_indexers.bert.model_name``).

    Raises:
        ValueError: when the config does not name one.
    """
    try:
        return str(config["dataset_reader"]["token_indexers"]["bert"]["model_name"])
    except (KeyError, TypeError):
        raise ValueError(
            "RadGraph config.json has no dataset_reader.token_indexers.bert.model_name"
        ) from None


def locate_encoder(name: str, override: str | None) -> tuple[Path | None, str | None]:
    """Folder with the encoder's ``config.json`` and tokenizer files, without downloading.

    Only config and tokenizer are read from it: the encoder's weights are in ``weights.th``.
    Order: the ``encoder`` option; ``name`` if it is an existing folder; a folder under
    ``$RADCONCORD_MODEL_DIR`` named like the hub id (``/`` -> ``--``), as-is or its last
    component; the Hugging Face cache; else download at load time when the hub is reachable.

    Returns:
        ``(folder, None)``, ``(None, None)`` when downloadable, or ``(None, reason)``.
    """
    if override:
        p = Path(override).expanduser().resolve()
        if hf.is_model_folder(p):
            return p, None
        return None, f"RadGraph encoder folder {p} does not exist or has no config.json"
    p = Path(name).expanduser()
    if hf.is_model_folder(p):
        return p.resolve(), None
    ref = hf.ModelRef(name)
    for cand in hf.model_dir_candidates(ref):  # the shared naming rule
        if hf.is_model_folder(cand):
            return cand.resolve(), None
    try:
        from huggingface_hub import snapshot_download

        got = Path(snapshot_download(name, local_files_only=True))
        if hf.is_model_folder(got):
            return got, None
    except Exception:  # noqa: BLE001 - any miss means "not local"
        pass
    hint = (
        f"put its config.json and tokenizer files in $RADCONCORD_MODEL_DIR/"
        f"{name.replace('/', '--')}/ or pass --set radgraph.encoder=/path/to/folder"
    )
    if hf.hub_offline():
        return None, f"RadGraph encoder '{name}' not local and HF_HUB_OFFLINE is set; {hint}"
    if not hf.hub_reachable():
        return None, f"RadGraph encoder '{name}' not local and the hub is unreachable; {hint}"
    return None, None


def _download_encoder(name: str) -> Path:
    from huggingface_hub import snapshot_download

    logger.info("downloading config and tokenizer of %s", name)
    return Path(snapshot_download(name, allow_patterns=list(_TOKENIZER_FILES)))


def _download_checkpoint(model_type: str) -> Path:
    from huggingface_hub import hf_hub_download

    logger.info("downloading %s", ARCHIVES[model_type])
    return Path(hf_hub_download(CHECKPOINT_REPO, ARCHIVES[model_type],
                                revision=CHECKPOINT_REVISION))


def extracted_folder(archive: Path) -> Path:
    """Extract an archive once into ``<data dir>/cache/radgraph/<sha256[:16]>`` and return it.

    Extraction goes to a sibling temporary folder that is renamed into place, so a crash or a
    concurrent process never leaves a half-written folder behind. Members are filtered with
    tarfile's ``data`` filter (no absolute paths, links out of the folder or devices).
    """
    digest = _file_sha256(archive)[:16]
    root = data_dir() / "cache" / "radgraph"
    target = root / digest
    if is_checkpoint_folder(target):
        return target
    with staging_dir(root, f".{digest}-") as tmp:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(tmp, filter="data")
        if not is_checkpoint_folder(tmp):
            raise ValueError(
                f"{archive} is not a RadGraph archive (needs config.json, weights.th and"
                " vocabulary/ at its root)"
            )
        try:
            os.replace(tmp, target)
        except OSError:
            if not is_checkpoint_folder(target):  # another process won the race otherwise
                raise
    return target


# --------------------------------------------------------------------------- model


class _CompatTokenizer:
    """A transformers 5 tokenizer with the two transformers 4 methods radgraph 0.1.18 calls.

    ``encode_plus`` is the tokenizer's ``__call__`` (what it did in transformers 4).
    ``build_inputs_with_special_tokens`` wraps ids in the special tokens the tokenizer itself
    adds around one sequence (``[CLS] x [SEP]`` for BERT) or a pair (``[CLS] a [SEP] b
    [SEP]``), read off encoding a probe token with and without special tokens.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        a = tokenizer("a", add_special_tokens=False)["input_ids"]
        b = tokenizer("b", add_special_tokens=False)["input_ids"]
        single = tokenizer("a", add_special_tokens=True)["input_ids"]
        pair = tokenizer("a", "b", add_special_tokens=True)["input_ids"]
        i = _find(single, a)
        self._single = (single[:i], single[i + len(a):])
        j = _find(pair, a)
        k = _find(pair, b, j + len(a))
        self._pair = (pair[:j], pair[j + len(a):k], pair[k + len(b):])

    def encode_plus(self, *args: Any, **kwargs: Any) -> Any:
        return self._tok(*args, **kwargs)

    def build_inputs_with_special_tokens(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        if token_ids_1 is None:
            start, end = self._single
            return [*start, *token_ids_0, *end]
        start, mid, end = self._pair
        return [*start, *token_ids_0, *mid, *token_ids_1, *end]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tok(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)

    def __len__(self) -> int:
        return len(self._tok)


def _find(seq: list[int], sub: list[int], start: int = 0) -> int:
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return i
    raise ValueError("cannot locate the probe token among the special tokens")


def register_tokenizer(encoder_dir: str | Path) -> Any:
    """Put the encoder's tokenizer, with ``encode_plus``, into the package's tokenizer cache.

    The vendored AllenNLP fetches tokenizers through
    ``radgraph.allennlp.common.cached_transformers.get_tokenizer(model_name, **kwargs)``; the
    entries added here are keyed by this folder's path, so they only serve models whose
    ``model_name`` is this folder. Idempotent.

    Returns:
        The wrapped tokenizer.
    """
    from radgraph.allennlp.common import cached_transformers

    name = str(encoder_dir)
    tok = hf.load_tokenizer(name, use_fast=True)
    needs_shim = not all(
        hasattr(tok, m) for m in ("encode_plus", "build_inputs_with_special_tokens")
    )
    wrapped = _CompatTokenizer(tok) if needs_shim else tok
    # The indexer passes ``cache_dir`` (None in the package's RadGraph) next to use_fast.
    for kwargs in ({"use_fast": True}, {"use_fast": True, "cache_dir": None}):
        key = (name, frozenset(kwargs.items()))
        cached_transformers._tokenizer_cache.setdefault(key, wrapped)  # noqa: SLF001
    return cached_transformers._tokenizer_cache[(name, frozenset({"use_fast": True}.items()))]  # noqa: SLF001


class RadGraphModel:
    """The package's DyGIE++ model loaded from a local checkpoint folder (no network).

    Built exactly like ``radgraph.RadGraph.__init__`` (same reader, embedder, ``DyGIE``
    arguments and ``strict`` weight loading), except that the encoder's ``model_name`` is
    replaced by a resolved local folder and the vocabulary is read from a private copy (the
    package's ``Vocabulary.from_files`` writes a lock file next to it).
    """

    def __init__(self, *, folder: Path, encoder_dir: Path, model_type: str, device: str) -> None:
        import torch
        from radgraph.allennlp.data import Vocabulary, token_indexers
        from radgraph.allennlp.modules import text_field_embedders, token_embedders
        from radgraph.dygie.data.dataset_readers.dygie import DyGIEReader
        from radgraph.dygie.models import dygie

        self.model_type = model_type
        self.device = device
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        enc = str(encoder_dir)
        register_tokenizer(enc)

        with tempfile.TemporaryDirectory(prefix="radgraph-vocab-") as tmp:
            vocab_dir = Path(tmp) / "vocabulary"
            shutil.copytree(folder / "vocabulary", vocab_dir,
                            ignore=shutil.ignore_patterns(".*"))
            vocab_params = config.get("vocabulary") or {}
            vocab = Vocabulary.from_files(
                str(vocab_dir), vocab_params.get("padding_token"), vocab_params.get("oov_token")
            )
        reader_cfg = config["dataset_reader"]
        bert_idx = reader_cfg["token_indexers"]["bert"]
        self.reader = DyGIEReader(
            max_span_width=reader_cfg["max_span_width"],
            token_indexers={"bert": token_indexers.PretrainedTransformerMismatchedIndexer(
                model_name=enc, max_length=bert_idx.get("max_length"))},
        )
        bert_emb = config["model"]["embedder"]["token_embedders"]["bert"]
        embedder = text_field_embedders.BasicTextFieldEmbedder({
            "bert": token_embedders.PretrainedTransformerMismatchedEmbedder(
                model_name=enc, max_length=bert_emb.get("max_length"))
        })
        model_dict = copy.deepcopy(config["model"])
        for name in ("type", "embedder", "initializer", "module_initializer"):
            model_dict.pop(name, None)
        model = dygie.DyGIE(vocab=vocab, embedder=embedder, **model_dict)
        state = torch.load(str(folder / "weights.th"), map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
        self.model = model.eval().to(device)
        self.spans_per_word = float(config["model"]["modules"]["relation"]["spans_per_word"])
        self._lock = threading.Lock()

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """The package's preprocessing (``radgraph.utils.preprocess_reports``) per text."""
        from radgraph.utils import preprocess_reports

        return [d["sentences"][0] for d in preprocess_reports(list(texts), self.model_type)]

    def annotate(self, texts: Sequence[str], batch_size: int = 8) -> list[dict[str, dict]]:
        """Entities of each text, in the package's format (``{id: {tokens, label, ...}}``).

        A text with no word after preprocessing gets no entity without running the model.
        Up to ``batch_size`` reports run in one forward pass as the sentences of one DyGIE
        document. NER and relations are per sentence, but the relation decoder masks padded
        pruned-span slots only along one axis, so a sentence that keeps fewer spans than the
        longest one of its batch would get spurious relations to padding; batches therefore
        only group reports that keep the same number of spans (``ceil(words *
        spans_per_word)``), which makes each result the package's per-report result
        (``tests/unit/test_radgraph_model.py`` checks it against the package).
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        words = self.tokenize(texts)
        out: list[dict[str, dict]] = [{} for _ in texts]
        groups: dict[int, list[int]] = {}
        for i, w in enumerate(words):
            if w:
                groups.setdefault(self._spans_to_keep(len(w)), []).append(i)
        for _, members in sorted(groups.items()):
            for start in range(0, len(members), batch_size):
                batch = members[start:start + batch_size]
                for i, ents in zip(batch, self._run([words[i] for i in batch]), strict=True):
                    out[i] = ents
        return out

    def _spans_to_keep(self, n_words: int) -> int:
        import numpy as np

        # float32 like the model's ``torch.ceil(lengths.float() * spans_per_word)``.
        return int(np.ceil(np.float32(n_words) * np.float32(self.spans_per_word)))

    def _run(self, sentences: list[list[str]]) -> list[dict[str, dict]]:
        import torch
        from radgraph.allennlp.data.dataloader import PyTorchDataLoader
        from radgraph.allennlp.data.dataset_readers import AllennlpDataset
        from radgraph.utils import batch_to_device, get_entity

        doc = {"doc_key": "0", "sentences": sentences, "dataset": self.model_type}
        with self._lock:
            data = AllennlpDataset([self.reader.text_to_instance(doc)])
            data.index_with(self.model.vocab)
            (batch,) = list(PyTorchDataLoader(batch_size=1, dataset=data))
            with torch.inference_mode():
                output = self.model(**batch_to_device(batch, torch.device(self.device)))
                document = self.model.make_output_human_readable(output)
        results = []
        for sent, words in zip(document.sentences, sentences, strict=True):
            ner = [[*p.span.span_sent, p.label] for p in (sent.predicted_ner or [])]
            rel = [[*r.pair[0].span_sent, *r.pair[1].span_sent, r.label]
                   for r in (sent.predicted_relations or [])]
            results.append(get_entity(ner, rel, words))
        return results


def shared_model(
    resources: Resources, *, folder: Path, encoder_dir: Path, model_type: str, device: str
) -> RadGraphModel:
    """The model of ``resources`` for these settings (loaded on first use).

    ``radgraph`` and RadCliQ's radgraph input share it when they share a scoring pool.
    """
    key = ("radgraph", str(folder), str(encoder_dir), model_type, device)
    return resources.get(
        key,
        lambda: RadGraphModel(
            folder=folder, encoder_dir=encoder_dir, model_type=model_type, device=device
        ),
    )


# --------------------------------------------------------------------------- metric


def _package_version() -> str:
    try:
        return importlib.metadata.version("radgraph")
    except importlib.metadata.PackageNotFoundError:
        return "missing"


class RadGraph(BaseMetric):
    """RadGraph F1 (simple/partial/complete, the radgraph package's rewards) and RadCliQ's
    radgraph_combined, from the package's DyGIE++ annotations of both reports.

    Options:
        model_type: ``radgraph`` (RadGraph v1, the RadCliQ model) or ``radgraph-xl``.
        checkpoint: Local archive (``.tar.gz``) or extracted folder; default: found in
            ``$RADCONCORD_MODEL_DIR`` or the Hugging Face cache (see :func:`locate_checkpoint`).
        encoder: Folder with the BERT encoder's config and tokenizer, when the archive names a
            hub id that is not available locally.
        batch_size: Reports per forward pass.
        device: ``None`` (the device given to ``load``), ``auto``, ``cpu``, ``cuda[:N]``.
    """

    spec = MetricSpec(
        name="radgraph",
        outputs=(
            OutputSpec("radgraph_simple", True, "RadGraph entity F1 (tokens, label)"),
            OutputSpec("radgraph_partial", True, "RadGraph F1 (tokens, label, has relation)"),
            OutputSpec("radgraph_complete", True, "RadGraph F1 over entities and relations"),
            OutputSpec("radgraph_combined", True,
                       "(entity F1 + relation F1) / 2, the RadCliQ input"),
        ),
        needs_model=True,
        citation="Jain et al., RadGraph, NeurIPS Datasets and Benchmarks 2021",
        corpus_outputs=tuple(f"{k}_mean" for k in KEYS),
    )
    defaults: dict[str, Any] = {
        "model_type": "radgraph",
        "checkpoint": None,
        "encoder": None,
        "batch_size": 8,
        "device": None,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        mt = self.options["model_type"]
        if mt not in ARCHIVES:
            raise ValueError(
                f"radgraph: unknown model_type {mt!r} (known: {', '.join(sorted(ARCHIVES))})"
            )
        bs = self.options["batch_size"]
        if not isinstance(bs, int) or isinstance(bs, bool) or bs < 1:
            raise ValueError(f"radgraph: batch_size must be a positive integer, got {bs!r}")
        self._model: RadGraphModel | None = None

    # ----------------------------------------------------------------- availability

    def _locate(self) -> tuple[Checkpoint | None, Path | None, str | None]:
        ckpt, reason = locate_checkpoint(self.options["model_type"], self.options["checkpoint"])
        if ckpt is None:
            return None, None, reason
        if ckpt.path is None:
            # The archive (and so the encoder name) is only known after the download.
            return ckpt, None, None
        try:
            name = encoder_name(read_archive_config(ckpt.path))
        except ValueError as exc:
            return None, None, str(exc)
        enc, reason = locate_encoder(name, self.options["encoder"])
        return ckpt, enc, reason

    def availability(self) -> str | None:
        # find_spec, not import: importing radgraph sets a global warnings filter and logging
        # levels, which only loading (that needs the package anyway) should cause.
        if importlib.util.find_spec("radgraph") is None:
            return "the radgraph package is not installed; pip install radgraph==0.1.18"
        _, _, reason = self._locate()
        return reason

    # ----------------------------------------------------------------- load

    def _load(self) -> None:
        mt = self.options["model_type"]
        ckpt, enc, _ = self._locate()
        path = ckpt.path if ckpt is not None and ckpt.path is not None else None
        if path is None:
            path = _download_checkpoint(mt)
        folder = path if path.is_dir() else extracted_folder(path)
        if enc is None:
            name = encoder_name(read_archive_config(folder))
            enc, reason = locate_encoder(name, self.options["encoder"])
            if reason:
                raise RuntimeError(reason)
            enc = enc or _download_encoder(name)
        device = self.options["device"]
        device = hf.pick_device(device) if device else self.device
        self.device = device
        self._model = shared_model(
            self.resources, folder=folder, encoder_dir=enc, model_type=mt, device=device
        )

    # ----------------------------------------------------------------- scoring

    def annotate(self, reports: Sequence[str]) -> list[dict[str, dict]]:
        """Entities of each report (each distinct text runs once)."""
        if not self._loaded:
            self.load(self.device)
        assert self._model is not None
        uniq = list(dict.fromkeys(reports))
        ents = self._model.annotate(uniq, self.options["batch_size"])
        by_text = dict(zip(uniq, ents, strict=True))
        return [by_text[t] for t in reports]

    def _score(self, *, references: list[str], candidates: list[str], images: Any) -> MetricResult:
        # References repeat across the candidates of a study: annotate each text once.
        uniq = list(dict.fromkeys([*references, *candidates]))
        annotations = dict(zip(uniq, self.annotate(uniq), strict=True))
        values: dict[str, list[float]] = {k: [] for k in KEYS}
        details = []
        for ref, cand in zip(references, candidates, strict=True):
            s = pair_scores(annotations[ref], annotations[cand])
            for k, v in s.values().items():
                values[k].append(v)
            empty = [side for side, text in (("reference", ref), ("candidate", cand))
                     if not annotations[text]]
            detail: dict[str, Any] = {
                **s.counts,
                "entity_f1": s.entity_f1,
                "relation_f1": s.relation_f1,
            }
            if empty:
                detail["no_entities"] = "both" if len(empty) == 2 else empty[0]
            details.append(detail)
        corpus = {f"{k}_mean": math.fsum(v) / len(v) for k, v in values.items()}
        return MetricResult(values=values, corpus=corpus, details=details)

    # ----------------------------------------------------------------- identity

    def signature(self) -> str:
        mt = self.options["model_type"]
        ckpt, enc, _ = self._locate()
        if ckpt is None or ckpt.path is None or ckpt.source == "hf_cache":
            # The pinned hub file is identified by repo, revision and name (LFS content).
            ident = f"hf:{CHECKPOINT_REPO}@{CHECKPOINT_REVISION[:12]}/{ARCHIVES[mt]}"
        elif ckpt.path.is_dir():
            ident = f"sha256:{_folder_sha256(ckpt.path, _ARCHIVE_FILES)[:16]}"
        else:
            ident = f"sha256:{_file_sha256(ckpt.path)[:16]}"
        if enc is not None:
            tok = f"tok:{_folder_sha256(enc, _TOKENIZER_FILES)[:12]}"
        else:
            tok = "tok:hub-default"
        return (
            f"radgraph|model:{mt}|ckpt:{ident}|f1:{F1_VERSION}|{tok}"
            f"|prep:radgraph-{_package_version()}|combined:cxr-report-metric"
        )
