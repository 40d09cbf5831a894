"""The export carries the quality-control records apart from the study files (issue 14):
training answers, flags and consensus as JSONL with raters as ``rater_index``, listed in the
manifest; training items appear in no study file."""

from __future__ import annotations

import json

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import assignment_writes, flags, rating
from radconcord.backend.services.quality import adjudication, calibration
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.services.transfer.exports import export_study
from radconcord.backend.types import Actor

SYSTEM = Actor.system()


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_quality_files_are_exported_apart_with_rater_indices(any_db, make_study, tmp_path,
                                                             fast_password_hashing):
    db = any_db
    make_study(db, "Q", 4)
    calibration.mark_training(db, SYSTEM, study_name="Q", expert={4: {"1:1": 1}},
                              source="expert panel")
    actors = {}
    for name in ("reader_one", "reader_two"):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    auth.create_user(db, SYSTEM, username="lead", password="lead-password", role="admin")
    lead = auth.authenticate(db, username="lead", password="lead-password")
    assign_raters(db, SYSTEM, study_name="Q", rater_usernames=list(actors), raters_per_pair=2,
                  seed=3)
    for n, actor in enumerate(actors.values()):
        for item in rating.rater_queue(db, actor, study_name="Q"):
            view = rating.get_pair(db, actor, opaque_id=item.opaque_id)
            saved = rating.set_count(db, actor, opaque_id=item.opaque_id, category=1,
                                     significant=True, count=2 * n + 1,
                                     expected_version=view.version)
            rating.complete_pair(db, actor, opaque_id=item.opaque_id, confirm_zero=False,
                                 expected_version=saved.version)
    first = next(i for i in rating.rater_queue(db, actors["reader_two"], study_name="Q")
                 if not rating.get_pair(db, actors["reader_two"],
                                        opaque_id=i.opaque_id).training)
    flags.flag_pair(db, actors["reader_two"], opaque_id=first.opaque_id, note="unsure of side")
    queue = adjudication.queue(db, lead, study_name="Q")
    assert queue  # significant totals 1 vs 3: range 2 meets the default rule
    adjudication.record(db, lead, study_name="Q", opaque_id=queue[0].opaque_id,
                        counts={cell: int(cell == (1, True)) for cell in assignment_writes.CELLS},
                        note="one false finding")

    out = tmp_path / "export"
    summary = export_study(db, SYSTEM, study_name="Q", fmt="jsonl", out_dir=out)
    manifest = json.loads((out / "manifest.json").read_text())
    quality = manifest["quality_control"]
    assert set(quality) == {"training_ratings", "flags", "adjudications"}
    for entry in quality.values():
        assert entry["file"] in summary.files
        assert len(_lines(out / entry["file"])) == entry["rows"]
    # Training item: never a study pair, its answers apart with the expert count.
    assert len(_lines(out / "pairs.jsonl")) == 3
    assert {r["pair_number"] for r in _lines(out / "ratings.jsonl")} == {1, 2, 3}
    training = _lines(out / "training_ratings.jsonl")
    assert {r["pair_number"] for r in training} == {4}
    assert len(training) == 24  # 2 raters x 12 cells
    cell = [r for r in training if r["category"] == 1 and r["significant"]]
    assert sorted((r["rater_index"], r["count"], r["expert_count"]) for r in cell) == [
        (0, 1, 1), (1, 3, 1)]
    (flag,) = _lines(out / "flags.jsonl")
    assert flag["note"] == "unsure of side" and flag["rater_index"] == 1
    consensus = _lines(out / "adjudications.jsonl")
    assert len(consensus) == 12 and consensus[0]["note"] == "one false finding"
    assert {r["adjudicator_index"] for r in consensus} == {0}
    assert "lead" not in (out / "adjudications.jsonl").read_text()
    # Raters are indices, never names, in every quality file.
    text = "".join((out / e["file"]).read_text() for e in quality.values())
    assert "reader_one" not in text and "reader_two" not in text


def test_repeats_are_exported_with_both_showings_so_agreement_can_be_recomputed(
        any_db, make_study, tmp_path, fast_password_hashing):
    """repeats.jsonl holds, per rater, repeated pair and cell, the counts of both showings;
    the exact agreement of the export's intra-rater file follows from it alone."""
    from radconcord.backend.services.study_admin import study_settings

    db = any_db
    make_study(db, "R", 12)
    study_settings.update_study_settings(db, SYSTEM, study_name="R", repeat_share=0.25)
    auth.create_user(db, SYSTEM, username="reader_one", password="reader-password-1",
                     role="rater")
    reader = auth.authenticate(db, username="reader_one", password="reader-password-1")
    assign_raters(db, SYSTEM, study_name="R", rater_usernames=["reader_one"],
                  raters_per_pair=1, seed=5)
    for n, item in enumerate(rating.rater_queue(db, reader, study_name="R")):
        # A count that differs between showings for some repeats, not for others.
        saved = rating.set_count(db, reader, opaque_id=item.opaque_id, category=4,
                                 significant=False, count=n % 3, expected_version=0)
        rating.complete_pair(db, reader, opaque_id=item.opaque_id,
                             expected_version=saved.version, confirm_zero=True)
    out = tmp_path / "export"
    export_study(db, SYSTEM, study_name="R", fmt="jsonl", out_dir=out)
    rows = _lines(out / "repeats.jsonl")
    assert rows and all(r["both_done"] and r["rater_index"] == 0 for r in rows)
    assert "reader_one" not in (out / "repeats.jsonl").read_text()
    by_pair: dict[int, list[tuple[int, int]]] = {}
    for r in rows:
        by_pair.setdefault(r["pair_number"], []).append((r["first"], r["repeat"]))
    assert all(len(cells) == 12 for cells in by_pair.values())
    # Exact agreement on all twelve cells, recomputed from the export, equals the study's.
    exact = sum(all(a == b for a, b in cells) for cells in by_pair.values()) / len(by_pair)
    (pooled,) = [r for r in _lines(out / "intra_rater_agreement.jsonl")
                 if r["rater_index"] == 0 and r["scope"] == "total"]
    assert pooled["repeats_counted"] == len(by_pair)
    assert abs(pooled["exact_all_cells"] - exact) < 1e-12
    # The first showing's counts are the study pair's own ratings.
    ratings = {(r["pair_number"], r["category"], r["significant"]): r["count"]
               for r in _lines(out / "ratings.jsonl")}
    for r in rows:
        assert ratings[(r["pair_number"], r["category"], r["significant"])] == r["first"]
