"""The report boxes beside the viewer: whole text (no fixed small height), escaped, and the
optional per-study marks on the words that differ (off by default)."""

from __future__ import annotations

import html
import re

import pytest
from streamlit.testing.v1 import AppTest

from radconcord.backend.analysis.disagreement import word_diff
from radconcord.webapp.components.diff import marked_html

REFERENCE = "No pleural effusion.\n\nHeart size <b>normal</b>."
CANDIDATE = "Small left pleural effusion.\n\nHeart size <b>normal</b>."


def _unmarked(fragment: str) -> str:
    return html.unescape(re.sub(r"</?mark[^>]*>", "", fragment))


def test_marks_only_the_words_that_differ_and_keep_the_text():
    ops = word_diff(REFERENCE, CANDIDATE)
    ref, cand = marked_html(ops, "reference"), marked_html(ops, "candidate")
    assert re.findall(r"<mark[^>]*>([^<]*)</mark>", ref) == ["No"]
    assert re.findall(r"<mark[^>]*>([^<]*)</mark>", cand) == ["Small", "left"]
    # One neutral colour on both sides (no red "wrong" / green "right").
    assert set(re.findall(r"background:([^;]+);", ref + cand)) == {"#fff0a8"}
    # Report text is data: markup in it is escaped, and nothing is lost or added.
    assert "&lt;b&gt;normal&lt;/b&gt;" in ref and "<b>" not in ref
    assert _unmarked(ref) == REFERENCE and _unmarked(cand) == CANDIDATE
    with pytest.raises(ValueError, match="side"):
        marked_html(ops, "left")


def _boxes_script(highlight: bool | None) -> None:
    from radconcord.webapp.components.reports import report_pair

    ref = "No pleural effusion.\n\nHeart size <b>normal</b>."
    cand = "Small left pleural effusion.\n\nHeart size <b>normal</b>."
    if highlight is None:
        report_pair(ref, cand)  # the old call: no marks
    else:
        report_pair(ref, cand, highlight=highlight)


def _boxes(at) -> list[str]:
    return [m.value for m in at.markdown if 'class="rc-report"' in m.value]


@pytest.mark.parametrize("highlight", [None, False, True])
def test_report_boxes_with_and_without_marks(highlight):
    at = AppTest.from_function(_boxes_script, args=(highlight,), default_timeout=30).run()
    assert not at.exception
    boxes = _boxes(at)
    assert len(boxes) == 2
    for box in boxes:
        # The whole report: no small fixed height (only a very long one scrolls).
        assert "max-height: 75vh" in box and "30vh" not in box
        # A blank line stays inside the HTML box (markdown would end the block there).
        assert "\n" not in box.split(">", 1)[1] and "&#10;&#10;Heart" in box
        assert "&lt;b&gt;" in box and "<b>" not in box
    marked = [re.findall(r"<mark[^>]*>([^<]*)</mark>", b) for b in boxes]
    notes = [c.value for c in at.caption]
    if highlight:
        assert marked == [["No"], ["Small", "left"]]
        assert notes == ["Marked: words that differ between the two reports."]
    else:
        assert marked == [[], []] and notes == []
