"""Hugging Face ``datasets`` folder of a study: pairs and ratings, saved with ``save_to_disk``.

Input is a JSONL export of the study (``pairs.jsonl`` and ``ratings.jsonl`` written by
``backend.services.transfer.exports.export_study(fmt="jsonl")``), so the two exports cannot
disagree.
The result is a ``DatasetDict`` with splits ``pairs`` and ``ratings`` (explicit features, so an
unrated study still has typed columns); load it with ``datasets.load_from_disk(folder)``.
Pairs from a metric-oracle build get ``oracle_metrics`` (the keys that picked the candidate,
from the ``oracle:`` source label); other pairs get an empty list.

``datasets`` is imported inside the functions: it is heavy and only needed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from radconcord.backend.errors import InvalidInput
from radconcord.backend.scoring.pairs_reader import read_records
from radconcord.backend.util import free_output_dir, json_type, publish_dir

PAIRS_FILE = "pairs.jsonl"
RATINGS_FILE = "ratings.jsonl"
ORACLE_PREFIX = "oracle:"


def _features() -> tuple[Any, Any]:
    from datasets import Features, Sequence, Value

    image = {"path": Value("string"), "sha256": Value("string"), "view": Value("string"),
             "format": Value("string")}
    pairs = Features({
        "position": Value("int64"),
        "pair_id": Value("string"),
        "case_id": Value("string"),
        "reference": Value("string"),
        "candidate": Value("string"),
        "source": Value("string"),
        "oracle_metrics": Sequence(Value("string")),
        "images": [image],
        "input_hash": Value("string"),
    })
    ratings = Features({
        "position": Value("int64"),
        "pair_id": Value("string"),
        "case_id": Value("string"),
        "source": Value("string"),
        "rater_index": Value("int64"),
        "category": Value("int64"),
        "significant": Value("bool"),
        "count": Value("int64"),
    })
    return pairs, ratings


def oracle_metrics(source: str) -> list[str]:
    """Keys named by an ``oracle:bleu4+rougeL@2`` label (rank suffixes dropped)."""
    if not source.startswith(ORACLE_PREFIX):
        return []
    return [part.split("@", 1)[0] for part in source[len(ORACLE_PREFIX):].split("+") if part]


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL file.

    Read by the one PAIRS reader (``pairs.jsonl`` is re-importable PAIRS), so lines, nesting
    depth, JSON and UTF-8 errors are refused as ``import-pairs`` and ``score`` refuse them.
    """
    if not path.is_file():
        raise InvalidInput(f"{path}: missing (expected a JSONL export of a study)")
    return [(r.line, r.fields) for r in read_records(path, fmt="jsonl", max_bytes=None).records]


def _expected(feature: Any) -> str:
    """``"text"``, ``"int64"``, ``"bool"`` or ``"array"`` for the features used here."""
    dtype = getattr(feature, "dtype", None)
    if dtype in ("string", "int64", "bool"):
        return "text" if dtype == "string" else dtype
    return "array"  # the image list


def _type_ok(expected: str, value: Any) -> bool:
    if expected == "text":
        return value is None or isinstance(value, str)
    if expected == "int64":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "bool":
        return isinstance(value, bool)
    return isinstance(value, list) and all(
        isinstance(item, dict) and all(v is None or isinstance(v, str) for v in item.values())
        for item in value)


def _check_row(path: Path, number: int, row: dict[str, Any], features: Any) -> None:
    """Refuse a missing field or a value of the wrong JSON type, naming file, line, field."""
    for key, feature in features.items():
        if key == "oracle_metrics":
            continue  # derived from ``source``, never read
        if key not in row:
            raise InvalidInput(f"{path}: line {number}: missing field {key!r}")
        expected = _expected(feature)
        if not _type_ok(expected, row[key]):
            what = "an array of objects with text values" if expected == "array" else expected
            raise InvalidInput(f"{path}: line {number}, field {key!r}: expected {what}, got "
                               f"{json_type(row[key])}")


def write_hf_dataset(jsonl_dir: Path, out_dir: Path) -> list[str]:
    """Save the pairs and ratings of a JSONL export as a Hugging Face dataset folder.

    Args:
        jsonl_dir: Folder holding ``pairs.jsonl`` and ``ratings.jsonl``.
        out_dir: Target folder; must not exist or be empty. Written via a temporary folder.

    Returns:
        The files written, relative to ``out_dir``.

    Raises:
        InvalidInput: Missing/invalid input files, a non-empty target, or a row missing a
            field (file and line named).
    """
    from datasets import Dataset, DatasetDict

    jsonl_dir, out_dir = Path(jsonl_dir), free_output_dir(out_dir)
    pair_features, rating_features = _features()
    pairs = _read_jsonl(jsonl_dir / PAIRS_FILE)
    ratings = _read_jsonl(jsonl_dir / RATINGS_FILE)
    pair_rows = []
    for number, p in pairs:
        _check_row(jsonl_dir / PAIRS_FILE, number, p, pair_features)
        pair_rows.append({**{k: p[k] for k in pair_features if k != "oracle_metrics"},
                          "oracle_metrics": oracle_metrics(str(p["source"] or ""))})
    for number, r in ratings:
        _check_row(jsonl_dir / RATINGS_FILE, number, r, rating_features)
    rating_rows = [{k: r[k] for k in rating_features} for _, r in ratings]
    # Column-wise: from_list([]) would lose the columns of an unrated study.
    dataset = DatasetDict({
        "pairs": Dataset.from_dict({k: [r[k] for r in pair_rows] for k in pair_features},
                                   features=pair_features),
        "ratings": Dataset.from_dict({k: [r[k] for r in rating_rows] for k in rating_features},
                                     features=rating_features),
    })

    def write(tmp: Path) -> None:
        # One shard per split: with the default, an empty split is saved as zero shards,
        # which load_from_disk cannot read back (datasets 5.2).
        dataset.save_to_disk(str(tmp), num_shards={name: 1 for name in dataset})

    return publish_dir(out_dir, write)
