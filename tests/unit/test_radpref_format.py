"""RadPref files: every malformed part is refused naming file, case and field; the mapping
to ReXVal counts follows the documented table; files are written back in their own style."""

from __future__ import annotations

import copy
import json

import pytest

from radconcord.backend.datasets import radpref
from radconcord.backend.errors import InvalidInput
from tests.helpers_radpref import CASES, USER_1, USER_2, preferences_bytes, user_bytes

PREFS = ("preference_data.json", preferences_bytes())


def _parse(user1=USER_1, user2=USER_2, cases=None, strict=False) -> radpref.RadPrefData:
    prefs = PREFS if cases is None else ("preference_data.json", preferences_bytes(cases))
    return radpref.parse(prefs, [("user_1.json", user_bytes(user1)),
                                 ("user_2.json", user_bytes(user2))], strict=strict)


def _refused(**kwargs) -> str:
    with pytest.raises(InvalidInput) as err:
        _parse(**kwargs)
    return str(err.value)


def test_the_sample_set_parses_in_file_order_with_nothing_to_warn():
    data = _parse()
    assert [c["id"] for c in data.cases] == ["case-001", "case-002", "case-003"]
    assert [a.user_id for a in data.annotators] == ["1", "2"]
    assert list(data.annotators[0].annotations) == ["case-001", "case-003", "case-002"]
    assert data.warnings == ()
    assert set(data.sha256) == {"preference_data.json", "user_1.json", "user_2.json"}


def test_annotator_files_are_ordered_as_a_person_counts():
    user10 = {**USER_2, "user_id": "10"}
    data = radpref.parse(PREFS, [("user_10.json", user_bytes(user10)),
                                 ("user_2.json", user_bytes(USER_2))])
    assert [a.file for a in data.annotators] == ["user_2.json", "user_10.json"]


def _user1_with(path: list[str], value=None, delete=False) -> dict:
    user = copy.deepcopy(USER_1)
    target = user
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return user


@pytest.mark.parametrize(("path", "value", "delete", "case", "field", "what"), [
    (["annotations", "case-001", "C1", "rating"], None, True, "case-001", "C1.rating",
     "missing"),
    (["annotations", "case-001", "C1", "rating"], 6, False, "case-001", "C1.rating",
     "from 1 to 5, got 6"),
    (["annotations", "case-001", "C2", "rating"], 3.5, False, "case-001", "C2.rating",
     "from 1 to 5, got 3.5"),
    (["annotations", "case-001", "C2", "rating"], True, False, "case-001", "C2.rating",
     "from 1 to 5, got True"),
    (["annotations", "case-003", "C2", "missing_findings"], None, True, "case-003",
     "C2.missing_findings", "missing"),
    (["annotations", "case-001", "C1", "finding_errors", "1", "error_type"], "wrong", False,
     "case-001", "C1.finding_errors.1.error_type", "unknown error type 'wrong'"),
    (["annotations", "case-001", "C1", "finding_errors", "1", "clinical_significance"],
     "maybe", False, "case-001", "C1.finding_errors.1.clinical_significance",
     "unknown value 'maybe'"),
    (["annotations", "case-001", "C1", "finding_errors", "1", "clinical_significance"],
     None, True, "case-001", "C1.finding_errors.1.clinical_significance", "missing"),
    (["annotations", "case-001", "C2", "finding_errors", "0", "attributes"], {}, False,
     "case-001", "C2.finding_errors.0.attributes", "non-empty"),
    (["annotations", "case-001", "C2", "finding_errors", "0", "attributes"],
     {"colour": "significant"}, False, "case-001", "C2.finding_errors.0.attributes.colour",
     "unknown attribute"),
    (["annotations", "case-001", "C2", "finding_errors", "0", "attributes"],
     {"location": "huge"}, False, "case-001", "C2.finding_errors.0.attributes.location",
     "'significant' or 'negligible', got 'huge'"),
    (["annotations", "case-001", "C1", "finding_errors", "x1"], {"error_type": "false"},
     False, "case-001", "C1.finding_errors.x1", "not an index into C1_findings"),
    (["annotations", "case-001", "C1", "missing_findings", "1"], "urgent", False,
     "case-001", "C1.missing_findings.1", "must be a JSON object"),
    (["annotations", "case-999"], USER_1["annotations"]["case-002"], False, "case-999",
     None, "a case that the preferences file does not have"),
    (["annotations", "case-001", "new_finding_indices", "C3"], [0], False, "case-001",
     "new_finding_indices.C3", "unknown key"),
    (["annotations", "case-001", "C1", "rating_explanation"], 7, False, "case-001",
     "C1.rating_explanation", "must be text"),
    (["user_id"], None, True, None, "user_id", "missing"),
    (["user_id"], "a b", False, None, "user_id", "letters, digits"),
])
def test_each_malformed_annotation_is_named_by_file_case_and_field(path, value, delete, case,
                                                                   field, what):
    message = _refused(user1=_user1_with(path, value, delete))
    assert message.startswith("user_1.json: ")
    if case is not None:
        assert f"case {case!r}" in message
    if field is not None:
        assert f"field {field!r}" in message
    assert what in message


def test_an_index_past_the_findings_list_warns_by_default_and_is_refused_when_strict():
    # The published files have such entries (findings the annotators added).
    user = _user1_with(["annotations", "case-001", "C1", "finding_errors", "2"],
                       {"error_type": "false", "clinical_significance": "urgent"})
    data = _parse(user1=user)
    assert data.warnings == (
        "user_1.json: case 'case-001', field 'C1.finding_errors.2': index 2 is out of range: "
        "C1_findings has 2 items (kept; the finding's text is unknown)",)
    message = _refused(user1=user, strict=True)
    assert message == ("user_1.json: case 'case-001', field 'C1.finding_errors.2': index 2 "
                       "is out of range: C1_findings has 2 items")


def test_a_missing_finding_of_a_case_with_no_ground_truth_findings_is_out_of_range():
    user = _user1_with(["annotations", "case-002", "C1", "missing_findings"],
                       {"0": {"clinical_significance": "urgent"}})
    assert "ground_truth_findings has 0 items" in _refused(user1=user, strict=True)


def test_two_files_with_one_user_id_are_refused():
    message = _refused(user2={**USER_2, "user_id": "1"})
    assert message == ("user_2.json: field 'user_id': '1' is also the user_id of user_1.json")


@pytest.mark.parametrize(("edit", "case", "field", "what"), [
    (lambda c: c[1].pop("C2_report"), "case-002", "C2_report", "missing"),
    (lambda c: c[1].update(C1_source=3), "case-002", "C1_source", "must be text, got int"),
    (lambda c: c[2].update(ground_truth_report="  "), "case-003", "ground_truth_report",
     "is empty"),
    (lambda c: c[0].update(C2_findings="a, b"), "case-001", "C2_findings",
     "must be a list of texts"),
    (lambda c: c[2].update(id="case-001"), "case-001", "id", "appears in two cases"),
    (lambda c: c[0].pop("id"), "#1", "id", "missing"),
])
def test_each_malformed_case_is_named_by_file_case_and_field(edit, case, field, what):
    cases = copy.deepcopy(CASES)
    edit(cases)
    message = _refused(cases=cases)
    assert message.startswith("preference_data.json: ")
    assert f"case {case!r}" in message and f"field {field!r}" in message and what in message


def test_broken_json_and_duplicate_keys_are_named():
    with pytest.raises(InvalidInput, match=r"^user_1.json: not valid JSON \(line 1"):
        radpref.parse(PREFS, [("user_1.json", b"{oops")])
    dup = b'{"user_id": "1", "user_id": "2", "annotations": {}}'
    with pytest.raises(InvalidInput,
                       match=r"^user_1.json: field 'user_id': appears twice in one JSON"):
        radpref.parse(PREFS, [("user_1.json", dup)])
    with pytest.raises(InvalidInput, match="^preference_data.json: must hold a JSON list"):
        radpref.parse(("preference_data.json", b"{}"), [("user_1.json", user_bytes(USER_1))])
    with pytest.raises(InvalidInput, match="no annotator file"):
        radpref.parse(PREFS, [])


def test_mapping_follows_the_documented_table():
    c2 = USER_1["annotations"]["case-003"]["C2"]
    mapped = radpref.map_candidate(c2)
    assert [(m.kind, m.category, m.significant, m.section, m.index, m.attribute)
            for m in mapped] == [
        ("span", 1, False, "finding_errors", "1", None),          # false, benign_expected
        ("span", 4, False, "finding_errors", "0", "descriptor"),
        ("span", 4, False, "finding_errors", "0", "certainty"),
        ("span", 4, True, "finding_errors", "0", "unspecific"),
        ("omission", 2, True, "missing_findings", "1", None),     # urgent
        ("omission", 2, True, "missing_findings", "0", None),     # actionable_not_urgent
    ]
    c1 = USER_1["annotations"]["case-003"]["C1"]
    assert [(m.category, m.significant) for m in radpref.map_candidate(c1)] == [
        (5, True), (1, False)]  # temporal -> 5, overinterpretation -> 1
    cells = radpref.counts((m.category, m.significant) for m in mapped)
    assert len(cells) == 12 and sum(cells.values()) == 6
    assert cells["4:0"] == 2 and cells["4:1"] == 1 and cells["2:1"] == 2 and cells["1:0"] == 1


def test_span_of_finds_a_finding_verbatim_only():
    report = CASES[0]["C1_report"]
    assert radpref.span_of("Abdominal aortic aneurysm", report) == (
        report.index("Abdominal"), report.index("Abdominal") + 25)
    assert radpref.span_of("abdominal aortic aneurysm", report) is None


def test_files_are_written_back_in_their_own_style():
    for data in (preferences_bytes(), user_bytes(USER_1)):
        style = radpref.file_style(data)
        assert radpref.dumps(json.loads(data), style) == data
    assert radpref.file_style(user_bytes(USER_1)) == {"indent": 2, "ascii": True,
                                                      "newline": False}
    assert radpref.file_style(preferences_bytes())["newline"] is True
