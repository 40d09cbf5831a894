"""Annotation modes by meaning (one place: ``study_settings.ANNOTATION_MODES``) and progress
that is right in every mode: a preference (pairwise) study counts its raters' judgements,
where the Studies table used to show "Raters 0, Ratings done 0/0" (issue 24)."""

from __future__ import annotations

import pytest

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import pairwise, rating
from radconcord.backend.services.study_admin import assignment, progress, studies, study_settings
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput

SYSTEM = Actor.system()


def test_every_mode_has_a_name_and_one_line_and_the_stored_values_are_unchanged():
    assert study_settings.SETTINGS["annotation_mode"].choices == (
        "counts", "error_records", "pairwise")
    assert {v: m.label for v, m in study_settings.ANNOTATION_MODES.items()} == {
        "counts": "Error counts (ReXVal)",
        "error_records": "Error records (spans)",
        "pairwise": "Preference (A vs B, 1-5)",
    }
    for value, mode in study_settings.ANNOTATION_MODES.items():
        assert mode.value == value
        assert study_settings.mode_label(value) == mode.label
        summary = study_settings.mode_summary(value)
        assert summary.startswith("Raters ") and "\n" not in summary and summary.endswith(".")
    assert study_settings.display_value("annotation_mode", "pairwise") == (
        "Preference (A vs B, 1-5)")
    assert study_settings.display_value("repeat_share", 0.2) == 0.2


def _rater(db, name: str) -> Actor:
    info = auth.create_user(db, SYSTEM, username=name, password=f"{name}-password-1",
                            role="rater")
    return Actor(user_id=info.user_id, username=name, role="rater")


@pytest.fixture
def preference_study(any_db):
    """Three references with three candidates each: 9 comparisons, all given to one rater,
    who has done 3 of them."""
    db = any_db
    imports.import_cases(db, SYSTEM, study_name="Pref", cases=[
        CaseInput(case_id=f"c{i}", reference=f"Reference {i}.", candidates=[
            CandidateInput(text=f"Candidate {i}{s}.", source=f"sys-{s}") for s in "xyz"])
        for i in range(3)])
    study_settings.update_study_settings(db, SYSTEM, study_name="Pref",
                                         annotation_mode="pairwise")
    pairwise.make_comparisons(db, SYSTEM, "Pref", seed=0)
    pia = _rater(db, "pia")
    _rater(db, "idle")
    pairwise.assign_judgements(db, SYSTEM, "Pref", ["pia"], 1, 0)
    for item in pairwise.rater_comparisons(db, pia, "Pref")[:3]:
        pairwise.save_judgement(db, pia, item.opaque_id, preference="A", rating_a=4,
                                rating_b=2)
        pairwise.complete(db, pia, item.opaque_id)
    return db, pia


def test_the_studies_summary_counts_the_judgements_of_a_preference_study(preference_study):
    db, _ = preference_study
    (summary,) = studies.list_studies(db, SYSTEM)
    assert summary.annotation_mode == "pairwise" and summary.unit == "comparison"
    assert (summary.n_raters, summary.n_completed, summary.n_assignments) == (1, 3, 9)
    assert studies.get_study_summary(db, SYSTEM, study_name="Pref").n_completed == 3


def test_the_progress_of_a_preference_study_is_per_rater_and_per_comparison(preference_study):
    db, _ = preference_study
    prog = progress.study_progress(db, SYSTEM, study_name="Pref")
    assert prog.annotation_mode == "pairwise" and prog.unit == "comparison"
    assert [(r.username, r.completed, r.total) for r in prog.raters] == [("pia", 3, 9)]
    assert (prog.n_completed, prog.n_assignments) == (3, 9)
    assert len(prog.comparisons) == 9 and prog.n_comparisons_fully_judged == 3
    assert [c.number for c in prog.comparisons] == list(range(1, 10))
    assert all(" vs " in c.sources for c in prog.comparisons)
    # The study pairs are still listed (9 candidates), with no pair assignments.
    assert prog.n_pairs == 9 and prog.n_pairs_fully_rated == 0


def test_a_count_study_still_counts_pair_assignments(db):
    imports.import_cases(db, SYSTEM, study_name="Counts", cases=[
        CaseInput(case_id="c1", reference="Ref.", candidates=[CandidateInput("Cand.", "g")])])
    rita = _rater(db, "rita")
    assignment.assign_raters(db, SYSTEM, study_name="Counts", rater_usernames=["rita"],
                             raters_per_pair=1, seed=0)
    (summary,) = studies.list_studies(db, SYSTEM)
    assert (summary.annotation_mode, summary.unit) == ("counts", "pair")
    assert (summary.n_raters, summary.n_completed, summary.n_assignments) == (1, 0, 1)
    prog = progress.study_progress(db, SYSTEM, study_name="Counts")
    assert prog.unit == "pair" and prog.comparisons == ()
    (mine,) = rating.rater_studies(db, rita)
    assert mine.annotation_mode == "counts"
    study_settings.update_study_settings(db, SYSTEM, study_name="Counts",
                                         annotation_mode="error_records")
    (mine,) = rating.rater_studies(db, rita)
    assert mine.annotation_mode == "error_records"
