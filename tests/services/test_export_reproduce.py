"""The dashboard's numbers recomputed from an export alone, on both databases and both layouts.

A study with three raters (one pair still in progress, so not counted), two metric keys (one
lower-is-better, one scored under two signatures) and activity spans (two tabs overlapping)
is exported with ``with_scores`` and ``with_timing``. From the files only (plain ``csv`` and
``json`` readers, ``scipy``), the test recomputes the "Ratings" count, each metric's Kendall
tau-b against the raters' mean total errors, and each rater's time on task (total and median
per pair; each pair's claimed time as the union of its spans and its credited time as the sum
of its spans' credit; each rater's total as the union of all their spans, an instant counting
for one pair), and compares them with the values the services give the dashboard.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau
from sqlalchemy import select

from radconcord.backend.datasets import rexval
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import activity, rating
from radconcord.backend.services.evaluation import correlation, explore
from radconcord.backend.services.study_admin import progress
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.services.transfer.exports import export_study
from radconcord.backend.types import Actor
from radconcord.backend.util import csv_unescape
from radconcord.db.models import MetricScore, Pair

ADMIN = Actor.system()
STUDY = "Repro"
RATERS = ("rexval_rater_0", "rexval_rater_1", "rexval_rater_2")
N_PAIRS = 8
T0 = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def study(any_db, make_study, fast_password_hashing):
    db = any_db
    make_study(db, STUDY, N_PAIRS)
    actors = {}
    for name in RATERS:
        auth.create_user(db, ADMIN, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    assign_raters(db, ADMIN, study_name=STUDY, rater_usernames=list(RATERS), raters_per_pair=3,
                  seed=4)
    rng = random.Random(7)
    clock = 0.0
    for r, name in enumerate(RATERS):
        queue = rating.rater_queue(db, actors[name], study_name=STUDY)
        spans = []
        for i, item in enumerate(queue):
            for category in (1, 2, 4):
                rating.set_count(db, actors[name], opaque_id=item.opaque_id, category=category,
                                 significant=rng.random() < 0.5, count=rng.randint(0, 3))
            # The last rater leaves the last pair in progress: its cells are exported, but
            # the rating does not count.
            if not (r == 2 and i == len(queue) - 1):
                rating.complete_pair(db, actors[name], opaque_id=item.opaque_id,
                                     confirm_zero=True)
            length = rng.uniform(5, 60)
            spans.append(activity.SpanInput(item.opaque_id, _at(clock), _at(clock + length), 9))
            clock += length + rng.uniform(0, 40)
        activity.record_spans(db, actors[name], client_id=f"tab-{r}-first", spans=spans)
        # A second tab on the first pair, overlapping the first tab's span: counted once.
        first = spans[0]
        activity.record_spans(db, actors[name], client_id=f"tab-{r}-second", spans=[
            activity.SpanInput(first.opaque_id, first.started_at + dt.timedelta(seconds=2),
                               first.ended_at + dt.timedelta(seconds=3), 2)])
    with db.begin() as s:
        hashes = list(s.scalars(select(Pair.input_hash).order_by(Pair.position)))
        for i, h in enumerate(hashes):
            s.add(MetricScore(input_hash=h, family="bleu", key="bleu4", signature_hash="bleu-a",
                              signature="bleu4|a", value=rng.random(), created_at=_at(0)))
            if i < 3:  # an older, partial signature: the dashboard does not use it
                s.add(MetricScore(input_hash=h, family="bleu", key="bleu4",
                                  signature_hash="bleu-b", signature="bleu4|b",
                                  value=rng.random(), created_at=_at(-100)))
            s.add(MetricScore(input_hash=h, family="radcliq", key="radcliq_v1",
                              signature_hash="rq", signature="radcliq_v1|x",
                              value=None if i == 5 else rng.uniform(0, 4), created_at=_at(0)))
    return db


def _union(intervals: list[tuple[dt.datetime, dt.datetime]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += (b - a).total_seconds()
            end = b
        elif b > end:
            total += (b - end).total_seconds()
            end = b
    return total


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        return [{k: csv_unescape(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def _files(out: Path, fmt: str) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """ratings (cells), scores, assignments, spans as dicts keyed by pair_number."""
    if fmt == "jsonl":
        ratings = [{"pair": r["position"] + 1, "rater": r["rater_index"],
                    "significant": r["significant"], "count": r["count"]}
                   for r in _read_jsonl(out / "ratings.jsonl")]
        scores = _read_jsonl(out / "metric_scores.jsonl")
        assignments = _read_jsonl(out / "assignments.jsonl")
        spans = _read_jsonl(out / "activity_spans.jsonl")
        return ratings, scores, assignments, spans

    def typed(row: dict) -> dict:
        out = dict(row)
        for k in ("pair_number", "rater_index", "queue_position", "n_spans", "study_number"):
            if k in out:
                out[k] = int(out[k])
        for k in ("value", "active_seconds", "claimed_seconds", "clipped_seconds",
                  "credited_seconds"):
            if k in out:
                out[k] = float(out[k]) if out[k] else None
        for k in ("chosen", "higher_is_better"):
            if k in out:
                out[k] = out[k] == "true"
        for k in ("completed_at", "last_active_at"):
            if k in out:
                out[k] = out[k] or None
        return out

    scores = [typed(r) for r in _read_csv(out / "metric_scores.csv")]
    assignments = [typed(r) for r in _read_csv(out / "assignments.csv")]
    spans = [typed(r) for r in _read_csv(out / "activity_spans.csv")]
    # The ReXVal ratings file names a pair by (study_number, candidate_type).
    number_of = {(a["study_number"], a["candidate_type"]): a["pair_number"] for a in assignments}
    ratings = [{"pair": number_of[(int(r["study_number"]), r["candidate_type"])],
                "rater": int(r["rater_index"]),
                "significant": r["clinically_significant"] == "True",
                "count": int(r["num_errors"])}
               for r in _read_csv(out / rexval.RATINGS_FILENAME)]
    return ratings, scores, assignments, spans


@pytest.mark.parametrize("fmt", ["jsonl", "rexval"])
def test_dashboard_numbers_are_reproduced_from_the_export(study, tmp_path, fmt):
    db = study
    out = tmp_path / f"export-{fmt}"
    export_study(db, ADMIN, study_name=STUDY, fmt=fmt, out_dir=out, with_scores=True,
                 with_timing=True)
    manifest = json.loads((out / "manifest.json").read_text())
    ratings, scores, assignments, spans = _files(out, fmt)

    # "Ratings": one per rater and pair that counts (completed, or imported without an
    # assignment), not grid cells.
    done = {(a["rater_index"], a["pair_number"]) for a in assignments if a["completed_at"]}
    has_assignment = {(a["rater_index"], a["pair_number"]) for a in assignments}
    counted = done | {(r["rater"], r["pair"]) for r in ratings
                      if (r["rater"], r["pair"]) not in has_assignment}
    version = explore.data_version(db, ADMIN, study_name=STUDY)
    assert len(counted) == version.n_ratings == manifest["counts"]["ratings"] == 23

    # Kendall tau-b of each metric (the chosen signature, oriented) against the mean total
    # errors of the counted raters.
    totals: dict[tuple[int, int], int] = {}
    for r in ratings:
        if (r["rater"], r["pair"]) in counted:
            totals[(r["rater"], r["pair"])] = totals.get((r["rater"], r["pair"]), 0) + r["count"]
    for key in done:  # a completed pair without cells is zero errors
        totals.setdefault(key, 0)
    numbers = range(1, N_PAIRS + 1)
    mean = np.array([np.mean([v for (_, p), v in totals.items() if p == n]) for n in numbers])
    corr = correlation.study_correlation(db, ADMIN, study_name=STUDY, resamples=0)
    ours = {m.key: m for m in corr.metrics}
    assert set(ours) == {"bleu4", "radcliq_v1"}
    for key, m in ours.items():
        chosen = {s["pair_number"]: s for s in scores if s["key"] == key and s["chosen"]}
        assert {s["signature"] for s in chosen.values()} == {m.signature}
        values = np.array([np.nan if chosen[n]["value"] is None else chosen[n]["value"]
                           for n in numbers])
        sign = 1.0 if chosen[1]["higher_is_better"] else -1.0
        tau = kendalltau(sign * values, -mean, nan_policy="omit").statistic
        assert tau == pytest.approx(m.kendall_tau_b, abs=1e-12), key
    # Both signatures of bleu4 are in the file; only one is the dashboard's.
    assert {s["signature"] for s in scores if s["key"] == "bleu4"} == {"bleu4|a", "bleu4|b"}

    # Time on task per rater: total and median per pair, from the assignments file; each
    # pair's claimed time is the union of its spans (the second tab's overlap counts once),
    # its credited time the sum of its spans' credit: where the second tab's span runs into
    # the next pair's time, that pair had the instants first. A rater's total is the union
    # of all their spans.
    prog = {r.username: r for r in progress.study_progress(db, ADMIN, study_name=STUDY).raters}
    for index, name in enumerate(RATERS):
        mine = [a for a in assignments if a["rater_index"] == index]
        total = sum(a["active_seconds"] for a in mine)
        median = statistics.median(a["active_seconds"] for a in mine if a["active_seconds"] > 0)
        assert total == pytest.approx(prog[name].active_seconds, abs=1e-6)
        assert median == pytest.approx(prog[name].median_seconds, abs=1e-6)
        everything = [(dt.datetime.fromisoformat(s["started_at"]),
                       dt.datetime.fromisoformat(s["ended_at"]))
                      for s in spans if s["rater_index"] == index]
        assert total == pytest.approx(_union(everything), abs=1e-3)
        for a in mine:
            theirs = [s for s in spans if s["rater_index"] == index
                      and s["pair_number"] == a["pair_number"]]
            intervals = [(dt.datetime.fromisoformat(s["started_at"]),
                          dt.datetime.fromisoformat(s["ended_at"])) for s in theirs]
            assert len(intervals) == a["n_spans"]
            assert _union(intervals) == pytest.approx(a["claimed_seconds"], abs=1e-3)
            assert sum(s["credited_seconds"] for s in theirs) == pytest.approx(
                a["active_seconds"], abs=1e-3)
            assert a["clipped_seconds"] == pytest.approx(
                a["claimed_seconds"] - a["active_seconds"], abs=1e-3)
    assert manifest["timing"]["idle_cut_seconds"] == activity.idle_cut_seconds()
    assert manifest["scores"]["keys"]["bleu4"]["signature"] == "bleu4|a"
    assert set(manifest["files"]) >= {manifest["scores"]["file"], *manifest["timing"]["files"]}


def test_extra_csv_files_are_formula_safe(db, make_study, tmp_path, fast_password_hashing):
    """Sources and case ids come from imported files: in the ReXVal layout's extra CSV files
    a cell such as ``=HYPERLINK(...)`` gets a leading ``'``; empty files still have headers."""
    make_study(db, "=evil", 2, sources=("=HYPERLINK(\"x\")", "+SUM(1)"))
    with db.begin() as s:
        for h in s.scalars(select(Pair.input_hash)):
            s.add(MetricScore(input_hash=h, family="bleu", key="bleu4", signature_hash="b",
                              signature="=bleu4|x", value=-0.5))
    out = tmp_path / "x"
    export_study(db, ADMIN, study_name="=evil", fmt="rexval", out_dir=out, with_scores=True,
                 with_timing=True)
    with open(out / "metric_scores.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    assert header[:6] == ["study_number", "candidate_type", "pair_number", "pair_id",
                          "case_id", "source"]
    cells = {c for row in rows[1:] for c in row}
    assert {"'=HYPERLINK(\"x\")", "'+SUM(1)", "'=evil-case-0", "'=bleu4|x"} <= cells
    assert "-0.5" in cells  # numbers stay numbers
    for name in ("assignments.csv", "activity_spans.csv"):  # nobody assigned: header only
        with open(out / name, encoding="utf-8", newline="") as fh:
            assert len(list(csv.reader(fh))) == 1
