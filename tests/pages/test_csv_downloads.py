"""AppTest: the CSV downloads of the analysis pages neutralise spreadsheet formulas.

The served bytes are captured where Streamlit stores them (its media file storage), so the
test reads exactly what a browser would download.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

from radconcord.backend.services.transfer.imports import import_cases
from radconcord.backend.types import Actor, CandidateInput, CaseInput

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"
EVIL_CASE = '=HYPERLINK("http://evil.example","open")'
EVIL_SOURCE = "@SUM(1)"
EVIL_CANDIDATE = "-1+2"


@pytest.fixture
def served(monkeypatch) -> dict[str, bytes]:
    """File name -> bytes of every download the pages register while the test runs."""
    files: dict[str, bytes] = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def capture(self, path_or_data, mimetype, kind, filename=None):
        if isinstance(path_or_data, bytes) and filename:
            files[filename] = path_or_data
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", capture)
    return files


def test_dashboard_pair_download_prefixes_formula_cells(study_env, make_app, served):
    import_cases(study_env.db, Actor.system(), study_name="Evil", cases=[
        CaseInput(EVIL_CASE, "No effusion.", [CandidateInput(EVIL_CANDIDATE, EVIL_SOURCE),
                                              CandidateInput("Normal.", "plain")])])
    at = make_app(study_env.admin, script=VIEWS / "dashboard.py")
    at.selectbox(key="dash_study").set_value("Evil").run()
    assert not at.exception
    rows = list(csv.reader(io.StringIO(served["Evil-pairs.csv"].decode("utf-8"),
                                       newline="")))
    assert rows == [
        ["Pair", "Case", "Source", "Mean errors", "Raters"],
        # Pairs numbered 1..N, as every page shows them.
        ["1", "'" + EVIL_CASE, "'" + EVIL_SOURCE, "", "0"],
        ["2", "'" + EVIL_CASE, "plain", "", "0"],
    ]
