"""AppTest: the Quality control section of the assign page (training items, qualification
rule, repeat share, per-rater status), the rater's studies list under a qualification gate,
and the training feedback under the grid of a done training item."""

from __future__ import annotations

from radconcord.backend.services.annotation import rating
from radconcord.backend.services.quality import calibration
from radconcord.backend.services.study_admin import study_settings

CSV = ("pair_number,error_category,clinically_significant,num_errors\n"
       "1,1,true,2\n1,3,false,1\n")


def _submit(at, form: str, timeout: float = 60):
    button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
    return button.click().run(timeout=timeout)


def _assign_page(env, make_app):
    at = make_app(env.admin)
    at.switch_page("views/assign.py").run()
    assert not at.exception
    return at


def test_lead_marks_sets_the_rule_sees_status_and_unmarks(study_env, make_app, all_text):
    at = _assign_page(study_env, make_app)
    assert "No training items in this study yet." in all_text(at)
    at.text_area(key="qc_csv_text").set_value(CSV)
    _submit(at, "qc_mark")
    assert not at.exception and not at.error
    assert at.success[0].value == (f"{study_env.study}: pair(s) 1 marked as training items; "
                                   "0 new training assignment(s).")
    [item] = calibration.list_training(study_env.db, study_env.admin,
                                       study_name=study_env.study)
    assert item.pair_number == 1 and sum(item.expert_counts.values()) == 3
    assert item.expert_source == "expert CSV pasted" and item.raters == 2
    table = at.dataframe[0].value
    assert list(table["Pair"]) == [1] and list(table["Expert total"]) == [3]

    at.number_input(key="qc_items").set_value(1)
    at.number_input(key="qc_max_error").set_value(0)
    at.number_input(key="qc_repeat_share").set_value(0.25)
    _submit(at, "qc_rules")
    assert not at.exception and not at.error
    values = study_settings.study_settings(study_env.db, study_env.admin,
                                           study_env.study).values
    assert (values["qualification_items"], values["qualification_max_error"],
            values["repeat_share"]) == (1, 0, 0.25)
    status = at.dataframe[-1].value
    assert list(status["Rater"]) == ["ravi", "rita"]
    assert list(status["Status"]) == ["in training", "in training"]

    at.multiselect(key="qc_unmark_pairs").set_value([1])
    _submit(at, "qc_unmark")
    assert not at.exception and not at.error
    assert "are study pairs again (2 open training assignment(s) removed)" in at.success[0].value
    assert calibration.list_training(study_env.db, study_env.admin,
                                     study_name=study_env.study) == []

    # Assigning again gives pair 1 a rater; with the repeat share set, the rater who now
    # holds three pairs gets one hidden repeat, and the page says so.
    _submit(at, "assign")
    assert not at.exception and not at.error
    assert at.success[0].value == ("1 new assignments in Page test study (3 pairs, k=1, "
                                   "seed=0); 1 hidden repeats.")
    assert len(calibration.repeat_pairs(study_env.db, study_env.admin, study_env.study)) == 1


def test_bad_csv_and_pairs_are_refused_on_the_page(study_env, make_app):
    at = _assign_page(study_env, make_app)
    at.text_area(key="qc_csv_text").set_value(CSV.replace("1,3,false,1", "1,9,false,1"))
    _submit(at, "qc_mark")
    assert not at.exception
    assert "line 3: error_category must be 1-6" in at.error[0].value
    at.text_area(key="qc_csv_text").set_value(CSV)
    at.text_input(key="qc_pairs").set_value("1, x")
    _submit(at, "qc_mark")
    assert "Pairs: give pair numbers separated by commas" in at.error[0].value
    assert calibration.list_training(study_env.db, study_env.admin,
                                     study_name=study_env.study) == []


def test_gated_rater_sees_why_and_then_the_expert_counts(study_env, make_app, all_text):
    calibration.mark_from_csv(study_env.db, study_env.admin, study_name=study_env.study,
                              text=CSV)
    study_settings.update_study_settings(study_env.db, study_env.admin,
                                         study_name=study_env.study, qualification_items=1,
                                         qualification_max_error=0)
    at = make_app(study_env.rater)
    at.switch_page("views/my_studies.py").run()
    assert not at.exception
    assert "Finish the training items of study 'Page test study' first (0 of 1 passed)." in (
        all_text(at))
    # The progress bar counts what the gate lets the rater reach: the one training item.
    assert [p.text for p in at.get("progress")] == ["0 of 1 training items done"]

    [item] = rating.rater_queue(study_env.db, study_env.rater, study_name=study_env.study)
    rating.set_count(study_env.db, study_env.rater, opaque_id=item.opaque_id, category=1,
                     significant=True, count=2)
    rating.complete_pair(study_env.db, study_env.rater, opaque_id=item.opaque_id)
    at = make_app(study_env.rater, params={"pair": item.opaque_id})
    assert not at.exception
    text = all_text(at)
    assert "Training item: your counts / the expert's" in text
    assert "Not passed: your total (2) differs from the expert's (3) by 1; at most 0 passes." in (
        text)
    [html] = [h.proto.body for h in at.get("html") if "rc-feedback" in h.proto.body]
    assert 'data-cell="3:0"' in html and "0 / 1</td>" in html
    assert 'class="num differs" data-cell="3:0"' in html
    assert 'class="num" data-cell="1:1"' in html and "2 / 2</td>" in html
    assert "Omission of finding" in html and "leaves out a finding" in html
    assert study_env.secret_source not in text + html

    at = make_app(study_env.rater)
    at.switch_page("views/my_studies.py").run()
    assert "You did not qualify for study 'Page test study'" in all_text(at)


def test_a_repeat_share_saved_after_assigning_gives_the_repeats_now(study_env, make_app):
    from radconcord.backend.services.study_admin import assignment
    from radconcord.backend.services.transfer import imports
    from radconcord.backend.types import CandidateInput, CaseInput

    cases = [CaseInput(case_id=f"big-{i}", reference=f"Reference {i}. No effusion.",
                       candidates=[CandidateInput(text=f"Candidate {i}.", source="g")])
             for i in range(12)]
    imports.import_cases(study_env.db, study_env.admin, study_name="Big", cases=cases)
    assignment.assign_raters(study_env.db, study_env.admin, study_name="Big",
                             rater_usernames=["rita", "ravi"], raters_per_pair=2, seed=1)
    at = _assign_page(study_env, make_app)
    at.selectbox(key="qc_study").set_value("Big").run()
    at.number_input(key="qc_repeat_share").set_value(0.25)
    _submit(at, "qc_rules")
    assert not at.exception and not at.error
    # 12 study pairs each: round(0.25 * 12) = 3 hidden repeats per rater, given at once.
    assert at.success[0].value == ("Big: qualification 0 item(s) within 1, repeat share "
                                   "0.25; 6 hidden repeats added to the raters' queues.")
    assert len(calibration.repeat_pairs(study_env.db, study_env.admin, "Big")) == 6
