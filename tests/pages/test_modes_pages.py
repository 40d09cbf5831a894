"""AppTest (issue 24): annotation modes shown by meaning on the Studies, Assign and My studies
pages; a preference study's comparisons created and assigned from the Assign page; its
progress (a rater with 3 of 9 judgements done shows 3/9); Score now on the import result;
Start for a study with nothing done yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from radconcord.backend import jobs
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import pairwise, rating
from radconcord.backend.services.scores import score_now as score_service
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"
PREF = "Preference page study"
LABELS = {"counts": "Error counts (ReXVal)", "error_records": "Error records (spans)",
          "pairwise": "Preference (A vs B, 1-5)"}


def _submit(at, form: str):
    button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
    return button.click().run()


def _pref_study(env, *, comparisons: bool = True) -> None:
    """Three references with three candidates each (9 comparisons once made)."""
    imports.import_cases(env.db, env.admin, study_name=PREF, cases=[
        CaseInput(case_id=f"p{i}", reference=f"Reference {i}: no effusion.", candidates=[
            CandidateInput(text=f"Candidate {i}{s}.", source=f"sys-{s}") for s in "xyz"])
        for i in range(3)])
    study_settings.update_study_settings(env.db, env.admin, study_name=PREF,
                                         annotation_mode="pairwise")
    if comparisons:
        pairwise.make_comparisons(env.db, env.admin, PREF, seed=0)


def _pia(env) -> Actor:
    info = auth.create_user(env.db, Actor.system(), username="pia", password="pia-password-1",
                            role="rater")
    return Actor(user_id=info.user_id, username="pia", role="rater")


@pytest.fixture
def pref_three_of_nine(study_env):
    """pia holds the 9 comparisons of the preference study and has done 3."""
    _pref_study(study_env)
    pia = _pia(study_env)
    pairwise.assign_judgements(study_env.db, study_env.admin, PREF, ["pia"], 1, 0)
    for item in pairwise.rater_comparisons(study_env.db, pia, PREF)[:3]:
        pairwise.save_judgement(study_env.db, pia, item.opaque_id, preference="B",
                                rating_a=2, rating_b=4)
        pairwise.complete(study_env.db, pia, item.opaque_id)
    return study_env, pia


def test_the_studies_table_shows_the_mode_and_the_judgements_of_a_preference_study(
        pref_three_of_nine, make_app, all_text):
    env, _ = pref_three_of_nine
    at = make_app(env.admin).switch_page("views/studies.py").run()
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "Mode" in d.value.columns)
    rows = {r["Study"]: r for _, r in table.iterrows()}
    assert rows[PREF]["Mode"] == LABELS["pairwise"]
    assert rows[env.study]["Mode"] == LABELS["counts"]
    assert rows[PREF]["Raters"] == 1
    assert rows[PREF]["Ratings done"] == "3 / 9 judgements"
    assert rows[env.study]["Ratings done"] == "0 / 6"
    text = all_text(at)
    for value in ("counts", "pairwise"):
        assert (f"**{LABELS[value]}**: {study_settings.mode_summary(value)}") in text

    # The progress of the preference study: pia 3 of 9, per comparison.
    at.selectbox(key="progress_study").set_value(PREF).run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Judgements done"] == "3 / 9"
    assert metrics["Comparisons fully judged"] == "3 / 9"
    raters = next(d.value for d in at.dataframe if "Rater" in d.value.columns)
    assert [(r["Rater"], r["Done"], r["Assigned"]) for _, r in raters.iterrows()] == [
        ("pia", 3, 9)]
    comparisons = next(d.value for d in at.dataframe if "Comparison" in d.value.columns)
    assert len(comparisons) == 9 and int(comparisons["Done"].sum()) == 3
    assert f"Mode: **{LABELS['pairwise']}**." in all_text(at)


def test_the_settings_name_each_mode_and_store_its_value(study_env, make_app, all_text):
    at = make_app(study_env.admin).switch_page("views/studies.py").run()
    box = at.selectbox(key=f"setting_{study_env.study}_annotation_mode")
    assert list(box.options) == [LABELS[v] for v in ("counts", "error_records", "pairwise")]
    text = all_text(at)
    for value, label in LABELS.items():
        assert f"**{label}**: {study_settings.mode_summary(value)}" in text
    assert "Default Error counts (ReXVal)." in text
    box.set_value("pairwise").run()
    assert not at.exception and not at.error
    now = study_settings.study_settings(study_env.db, study_env.admin, study_env.study)
    assert now.annotation_mode == "pairwise"  # the stored value is unchanged
    assert (f"(from '{LABELS['counts']}' to '{LABELS['pairwise']}')") in all_text(at)


def test_the_assign_page_creates_and_assigns_the_comparisons_of_a_preference_study(
        study_env, make_app, all_text):
    _pref_study(study_env, comparisons=False)
    pia = _pia(study_env)
    at = make_app(study_env.admin, script=VIEWS / "assign.py")
    assert not at.exception
    # A count study: the pairs form, its mode named.
    assert f"Mode: **{LABELS['counts']}**." in all_text(at)
    assert any(b.key.startswith("FormSubmitter:assign-") for b in at.button)

    at.selectbox(key="assign_study").set_value(PREF).run()
    assert not at.exception and not at.error
    assert f"Mode: **{LABELS['pairwise']}**." in all_text(at)
    assert not any(b.key.startswith("FormSubmitter:assign-") for b in at.button)
    assert "**0 comparisons**" in all_text(at)
    _submit(at, "pairwise_make")
    assert not at.exception and not at.error
    assert at.success[0].value == (f"{PREF}: 9 new comparisons (9 in all, 3 references with "
                                   "2+ candidates, seed=0).")
    assert "**9 comparisons**" in all_text(at)

    at.multiselect(key="pairwise_raters").set_value(["pia", "rita"])
    at.number_input(key="pairwise_k").set_value(1)
    _submit(at, "pairwise_assign")
    assert not at.exception and not at.error
    assert at.success[0].value.startswith(f"9 new judgements in {PREF} (9 comparisons, k=1")
    mine = pairwise.rater_comparisons(study_env.db, pia, PREF)
    theirs = pairwise.rater_comparisons(study_env.db, study_env.rater, PREF)
    assert len(mine) + len(theirs) == 9 and len(mine) in (4, 5)
    # Creating again adds nothing (the service's own rule, the CLI's too).
    _submit(at, "pairwise_make")
    assert at.success[0].value.startswith(f"{PREF}: 0 new comparisons (9 in all")


def test_my_studies_names_the_mode_and_says_start_until_something_is_done(
        study_env, make_app, all_text):
    env = study_env
    at = make_app(env.rater, script=VIEWS / "my_studies.py")
    assert not at.exception and not at.error
    assert (f"{LABELS['counts']}: {study_settings.mode_summary('counts')}") in all_text(at)
    assert at.button(key=f"open-{env.study}").label == "Start"

    first = rating.rater_queue(env.db, env.rater, study_name=env.study)[0]
    rating.set_count(env.db, env.rater, opaque_id=first.opaque_id, category=1,
                     significant=True, count=1)
    rating.complete_pair(env.db, env.rater, opaque_id=first.opaque_id)
    at.run()
    assert at.button(key=f"open-{env.study}").label == "Resume"


def test_my_studies_names_a_preference_study_and_says_start_then_resume(
        study_env, make_app, all_text):
    _pref_study(study_env)
    pia = _pia(study_env)
    pairwise.assign_judgements(study_env.db, study_env.admin, PREF, ["pia"], 1, 0)
    at = make_app(pia, script=VIEWS / "my_studies.py")
    assert not at.exception and not at.error
    assert (f"{LABELS['pairwise']}: {study_settings.mode_summary('pairwise')}") in all_text(at)
    assert at.button(key=f"compare-{PREF}").label == "Start"
    first = pairwise.rater_comparisons(study_env.db, pia, PREF)[0].opaque_id
    pairwise.save_judgement(study_env.db, pia, first, preference="tie", rating_a=3,
                            rating_b=3)
    pairwise.complete(study_env.db, pia, first)
    at.run()
    assert at.button(key=f"compare-{PREF}").label == "Resume"


def test_the_import_result_offers_score_now(study_env, make_app, all_text, monkeypatch):
    monkeypatch.setattr(score_service, "offline_families",
                        lambda catalog=None: ["bleu", "rouge"])
    csv = (b"case_id,reference,candidate,source\n"
           b"n1,No acute disease.,Normal chest.,gen-a\n"
           b"n1,No acute disease.,Small effusion.,gen-b\n")
    at = make_app(study_env.admin, script=VIEWS / "import_data.py")
    at.text_input(key="import_study").input("Fresh study")
    at.file_uploader(key="import_cases_file").upload("cases.csv", csv, "text/csv")
    _submit(at, "import_cases")
    assert not at.exception and not at.error
    assert "Next: **Score now** (below)" in at.success[0].value
    text = all_text(at)
    assert "**Fresh study** has no metric scores yet." in text
    assert "Score now queues: bleu, rouge." in text
    assert jobs.list_jobs(study_env.db) == []

    at.button(key="import_score_now_button").click().run()
    assert not at.exception and not at.error
    (job,) = jobs.list_jobs(study_env.db, kind="score")
    assert job.study_name == "Fresh study" and job.metrics == ("bleu", "rouge")
    assert f"**Job #{job.id}** · `score` on Fresh study · queued" in all_text(at)
