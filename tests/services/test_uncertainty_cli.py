"""``python -m backend uncertainty``: SMAS variance per case from a PAIRS file."""

from __future__ import annotations

import json

import pytest

from radconcord.backend.cli import main
from radconcord.backend.metrics.smas import SmasVar


def _write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_groups_by_case_and_matches_the_python_api(tmp_path):
    samples = [
        "Small left pleural effusion. No pneumothorax.",
        "Small left effusion. No pneumothorax.",
        "Large right pleural effusion.",
    ]
    rows = [{"id": f"a{i}", "case_id": "A", "reference": "ref", "candidate": s}
            for i, s in enumerate(samples)]
    rows.append({"id": "b0", "case_id": "B", "reference": "ref", "candidate": "Clear lungs."})
    src = tmp_path / "samples.jsonl"
    _write(src, rows)
    out = tmp_path / "u.json"
    assert main(["uncertainty", "--input", str(src), "--output", str(out)]) == 0
    got = json.loads(out.read_text())
    expected = SmasVar().score_samples(samples=samples)
    assert got["cases"]["A"]["smas_var"] == pytest.approx(expected["smas_var"], abs=1e-12)
    assert got["cases"]["A"]["medoid_index"] == expected["medoid_index"]
    assert "at least 2 samples" in got["cases"]["B"]["error"]
    assert got["signature"].startswith("smas_var|")


def test_missing_case_id_is_one_clear_error(tmp_path, capsys):
    src = tmp_path / "p.jsonl"
    _write(src, [{"id": "x", "reference": "r", "candidate": "c"}])
    out = tmp_path / "u.json"
    assert main(["uncertainty", "--input", str(src), "--output", str(out)]) == 2
    # One line, numbered as the PAIRS reader numbers records everywhere else.
    assert capsys.readouterr().err == f"error: {src}: line 1, field 'case_id': required here\n"
    assert not out.exists()


def test_pair_scoring_refuses_smas_var_with_a_pointer(tmp_path, capsys):
    src = tmp_path / "p.jsonl"
    _write(src, [{"id": "x", "reference": "r", "candidate": "c"}])
    code = main(["score", "--input", str(src), "--metrics", "smas_var",
                 "--output", str(tmp_path / "s.csv")])
    assert code == 2
    assert "uncertainty" in capsys.readouterr().err
