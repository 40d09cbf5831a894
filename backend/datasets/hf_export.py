"""Hugging Face ``datasets`` folder of a study: pairs and ratings, saved with ``save_to_disk``.

Input is a JSONL export of the study (``pairs.jsonl`` and ``ratings.jsonl`` written by
``backend.services.exports.export_study(fmt="jsonl")``), so the two exports cannot disagree.
The result is a ``DatasetDict`` with splits ``pairs`` and ``ratings`` (explicit features, so an
unrated study still has typed columns); load it with ``datasets.load_from_disk(folder)``.
Pairs from a metric-oracle build get ``oracle_metrics`` (the keys that picked the candidate,
from the ``oracle:`` source label); other pairs get an empty list.

``datasets`` is imported inside the functions: it is heavy and only needed here.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from backend.services.errors import InvalidInput

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


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InvalidInput(f"{path}: missing (expected a JSONL export of a study)")
    rows = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path}: line {number}: invalid JSON ({exc.msg})") from None
    return rows


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

    jsonl_dir, out_dir = Path(jsonl_dir), Path(out_dir).resolve()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise InvalidInput(f"{out_dir}: output folder exists and is not empty")
    pair_features, rating_features = _features()
    pairs = _read_jsonl(jsonl_dir / PAIRS_FILE)
    ratings = _read_jsonl(jsonl_dir / RATINGS_FILE)
    pair_rows = []
    for number, p in enumerate(pairs, start=1):
        missing = [k for k in pair_features if k != "oracle_metrics" and k not in p]
        if missing:
            raise InvalidInput(f"{jsonl_dir / PAIRS_FILE}: line {number}: missing field "
                               f"{missing[0]!r}")
        pair_rows.append({**{k: p[k] for k in pair_features if k != "oracle_metrics"},
                          "oracle_metrics": oracle_metrics(str(p["source"]))})
    for number, r in enumerate(ratings, start=1):
        missing = [k for k in rating_features if k not in r]
        if missing:
            raise InvalidInput(f"{jsonl_dir / RATINGS_FILE}: line {number}: missing field "
                               f"{missing[0]!r}")
    rating_rows = [{k: r[k] for k in rating_features} for r in ratings]
    # Column-wise: from_list([]) would lose the columns of an unrated study.
    dataset = DatasetDict({
        "pairs": Dataset.from_dict({k: [r[k] for r in pair_rows] for k in pair_features},
                                   features=pair_features),
        "ratings": Dataset.from_dict({k: [r[k] for r in rating_rows] for k in rating_features},
                                     features=rating_features),
    })
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{secrets.token_hex(4)}"
    try:
        # One shard per split: with the default, an empty split is saved as zero shards,
        # which load_from_disk cannot read back (datasets 5.2).
        dataset.save_to_disk(str(tmp), num_shards={name: 1 for name in dataset})
        if out_dir.exists():
            out_dir.rmdir()
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
