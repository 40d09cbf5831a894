"""The Hugging Face export refuses hostile or mistyped JSONL lines with one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radconcord.backend.datasets.hf_export import PAIRS_FILE, RATINGS_FILE, write_hf_dataset
from radconcord.backend.errors import InvalidInput

PAIR = {"position": 0, "pair_id": "p0", "case_id": "c0", "reference": "R.", "candidate": "C.",
        "source": "gen", "images": [], "input_hash": "h"}
RATING = {"position": 0, "pair_id": "p0", "case_id": "c0", "source": "gen", "rater_index": 0,
          "category": 1, "significant": True, "count": 2}


def _export(folder: Path, pairs: list[str], ratings: list[str]) -> Path:
    folder.mkdir()
    (folder / PAIRS_FILE).write_text("".join(line + "\n" for line in pairs), encoding="utf-8")
    (folder / RATINGS_FILE).write_text("".join(line + "\n" for line in ratings),
                                       encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("pairs", "ratings", "where", "expected"),
    [
        ([json.dumps(PAIR), json.dumps(PAIR)[:-1] + ', "x": ' + "[" * 50_000 + "]" * 50_000
          + "}"], [], PAIRS_FILE, "line 2: nesting deeper than 32 levels"),
        ([json.dumps(PAIR)], ["[1, 2]"], RATINGS_FILE, "line 1: expected a JSON object, got array"),
        ([json.dumps({**PAIR, "case_id": {"id": 1}})], [], PAIRS_FILE,
         "line 1, field 'case_id': expected text, got object"),
        ([json.dumps({**PAIR, "images": "a.png"})], [], PAIRS_FILE,
         "line 1, field 'images': expected an array of objects with text values, got "
         "string"),
        ([json.dumps(PAIR)], [json.dumps({**RATING, "count": "2"})], RATINGS_FILE,
         "line 1, field 'count': expected int64, got string"),
        ([json.dumps(PAIR)], [json.dumps({**RATING, "rater_index": True})], RATINGS_FILE,
         "line 1, field 'rater_index': expected int64, got boolean"),
        ([json.dumps({k: v for k, v in PAIR.items() if k != "reference"})], [], PAIRS_FILE,
         "line 1: missing field 'reference'"),
    ],
)
def test_bad_lines_are_refused_and_nothing_is_written(tmp_path, pairs, ratings, where,
                                                      expected):
    src = _export(tmp_path / "jsonl", pairs, ratings)
    with pytest.raises(InvalidInput) as info:
        write_hf_dataset(src, tmp_path / "hf")
    assert str(info.value) == f"{src / where}: {expected}"
    assert not (tmp_path / "hf").exists()


def test_a_good_export_is_written(tmp_path):
    src = _export(tmp_path / "jsonl", [json.dumps(PAIR)], [json.dumps(RATING)])
    files = write_hf_dataset(src, tmp_path / "hf")
    assert "dataset_dict.json" in files
