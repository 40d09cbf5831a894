"""A user's report corpus file (Build oracle study) refuses hostile lines with one error."""

from __future__ import annotations

import json

import pytest

from radconcord.backend.datasets.corpus import read_report_file
from radconcord.backend.errors import InvalidInput


def test_a_deeply_nested_line_is_refused_by_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": "r1", "text": "No effusion."}) + "\n"
                    + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(InvalidInput) as err:
        read_report_file(path)
    assert str(err.value) == f"{path}: line 2: nesting deeper than 32 levels"


@pytest.mark.parametrize("rid, kind", [({"a": 1}, "object"), ([1], "array"), (True, "boolean"),
                                       (1.5, "number")])
def test_a_non_text_id_is_refused(tmp_path, rid, kind):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": rid, "text": "No effusion."}) + "\n")
    with pytest.raises(InvalidInput) as err:
        read_report_file(path)
    assert str(err.value) == f"{path}: line 1, field 'id': expected text, got {kind}"


def test_integer_ids_and_unicode_line_separators_are_kept(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": 7, "text": "Heart size normal.\u2028No effusion."},
                               ensure_ascii=False) + "\n")
    corpus = read_report_file(path)
    assert [(r.report_id, r.text) for r in corpus.reports] == [
        ("7", "Heart size normal.\u2028No effusion.")]
