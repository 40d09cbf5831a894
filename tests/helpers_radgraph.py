"""A tiny random-weight RadGraph checkpoint in the archive format the ``radgraph`` package loads.

The public ``radgraph.tar.gz`` / ``radgraph-xl.tar.gz`` (``StanfordAIMI/RRG_scorers``) hold, at
the archive root:

- ``config.json``: the AllenNLP/DyGIE++ training config; the package reads
  ``dataset_reader.max_span_width``, ``dataset_reader.token_indexers.bert.{model_name,
  max_length}``, ``model.embedder.token_embedders.bert.{model_name, max_length}`` and passes the
  rest of ``model`` (minus ``type``, ``embedder``, ``initializer``, ``module_initializer``) to
  ``DyGIE(...)``;
- ``weights.th``: ``torch.save`` of the full ``DyGIE`` ``state_dict`` (BERT encoder included),
  loaded with ``strict=True``;
- ``vocabulary/``: AllenNLP vocabulary files (``non_padded_namespaces.txt`` and one
  ``<namespace>.txt`` per label namespace, ``<dataset>__ner_labels`` with the null label ``""``
  first, ``<dataset>__relation_labels``).

The BERT encoder's config and tokenizer come from ``model_name`` (a hub id in the public
archives). Here ``model_name`` is the absolute path of a tiny BERT folder written next to the
archive, so both the package's own loader and ours work offline. The network is built with the
package's own classes, exactly as ``radgraph.RadGraph.__init__`` builds it, then seeded.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from tests.helpers_models import build_tiny_bert

#: RadGraph's entity and relation schema (Jain et al., 2021).
NER_LABELS: tuple[str, ...] = ("ANAT-DP", "OBS-DP", "OBS-U", "OBS-DA")
RELATION_LABELS: tuple[str, ...] = ("modify", "located_at", "suggestive_of")


def tiny_config(model_name: str, *, max_span_width: int = 4, feature_size: int = 8) -> dict:
    """An AllenNLP/DyGIE++ config shaped like the public RadGraph one, with tiny sizes."""
    bert = {"type": "pretrained_transformer_mismatched", "model_name": model_name,
            "max_length": 512}
    return {
        "dataset_reader": {
            "type": "dygie",
            "max_span_width": max_span_width,
            "token_indexers": {"bert": dict(bert)},
        },
        "model": {
            "type": "dygie",
            "embedder": {"token_embedders": {"bert": dict(bert)}},
            "feature_size": feature_size,
            "feedforward_params": {"dropout": 0.4, "hidden_dims": 16, "num_layers": 2},
            "initializer": {"regexes": [["_span_width_embedding.weight",
                                         {"type": "xavier_normal"}]]},
            "loss_weights": {"coref": 0.0, "events": 0.0, "ner": 0.2, "relation": 1.0},
            "max_span_width": max_span_width,
            "module_initializer": {"regexes": [[".*weight", {"type": "xavier_normal"}],
                                               [".*weight_matrix", {"type": "xavier_normal"}]]},
            "modules": {
                "coref": {"coref_prop": 0, "max_antecedents": 100, "spans_per_word": 0.3},
                "events": {"argument_spans_per_word": 0.8,
                           "loss_weights": {"arguments": 0.5, "trigger": 1.0},
                           "trigger_spans_per_word": 0.3},
                "ner": {},
                "relation": {"spans_per_word": 0.5},
            },
            "target_task": "relation",
        },
    }


def build_dygie(config: dict, vocab: Any) -> Any:
    """Build ``DyGIE`` from a config dict the way ``radgraph.RadGraph.__init__`` does."""
    import copy

    from radgraph.allennlp.modules import text_field_embedders, token_embedders
    from radgraph.dygie.models import dygie

    bert = config["model"]["embedder"]["token_embedders"]["bert"]
    embedder = text_field_embedders.BasicTextFieldEmbedder(
        {"bert": token_embedders.PretrainedTransformerMismatchedEmbedder(
            model_name=bert["model_name"], max_length=bert["max_length"])}
    )
    model_dict = copy.deepcopy(config["model"])
    for name in ("type", "embedder", "initializer", "module_initializer"):
        model_dict.pop(name, None)
    return dygie.DyGIE(vocab=vocab, embedder=embedder, **model_dict)


def build_tiny_radgraph(
    tmp_path: Path,
    *,
    dataset: str = "radgraph",
    seed: int = 0,
    name: str = "tiny-radgraph",
    ner_bias: float = 2.0,
) -> Path:
    """Write ``<tmp_path>/<name>.tar.gz``, a random-weight RadGraph archive.

    Args:
        tmp_path: Parent folder (a pytest ``tmp_path``).
        dataset: Dataset name of the label namespaces; the package names it after the model
            type (``radgraph``, ``radgraph-xl``), and the NER/relation modules pick their
            namespace from it at inference.
        seed: Torch seed for the weights.
        name: Archive stem; the tiny BERT lives in ``<tmp_path>/<name>-bert``.
        ner_bias: Added to the NER scorers' output bias so that random weights still predict
            entities (a random scorer mostly prefers the null label, whose score is fixed at 0).

    Returns:
        The path of the ``.tar.gz`` archive.
    """
    import torch
    from radgraph.allennlp.data import Vocabulary

    from radconcord.backend.metrics.radgraph import register_tokenizer

    tmp_path = Path(tmp_path)
    bert_dir = build_tiny_bert(tmp_path, name=f"{name}-bert", own_vocab=True, seed=seed)
    # radgraph 0.1.18's AllenNLP needs ``encode_plus`` (gone in transformers 5).
    register_tokenizer(bert_dir.resolve())
    config = tiny_config(str(bert_dir.resolve()))

    vocab = Vocabulary()
    vocab.add_tokens_to_namespace(["", *NER_LABELS], f"{dataset}__ner_labels")
    vocab.add_tokens_to_namespace(list(RELATION_LABELS), f"{dataset}__relation_labels")

    torch.manual_seed(seed)
    model = build_dygie(config, vocab)
    with torch.no_grad():
        for key, param in model.named_parameters():
            if key.startswith("_ner._ner_scorers") and key.endswith("1._module.bias"):
                param.add_(ner_bias)
    stage = tmp_path / f"{name}-stage"
    stage.mkdir(parents=True, exist_ok=True)
    (stage / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    torch.save(model.state_dict(), stage / "weights.th")
    vocab.save_to_files(str(stage / "vocabulary"))

    archive = tmp_path / f"{name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for item in sorted(stage.rglob("*")):
            if item.is_file() and not item.name.startswith("."):
                tar.add(item, arcname=item.relative_to(stage).as_posix())
    return archive


def extract_for_package(archive: Path, cache_dir: Path, model_type: str = "radgraph") -> Path:
    """Extract ``archive`` where ``radgraph.RadGraph(model_cache_dir=cache_dir)`` looks first.

    The package skips its download when ``<model_cache_dir>/<model_type>/`` exists and is not
    empty, so this lets its own loader run on the tiny archive without any network.
    """
    target = Path(cache_dir) / model_type
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(target, filter="data")
    return target
