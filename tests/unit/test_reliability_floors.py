"""Issue 24: minimum n and undefined values (reliability.py), the ICC interval, the
system-level tau's interval, fully-rated-only pairs, and the QC floors (monitoring.py)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from radconcord.backend.analysis import monitoring as mon
from radconcord.backend.analysis import reliability
from radconcord.backend.analysis.agreement import icc_interval
from radconcord.backend.analysis.data import StudyRatings
from radconcord.backend.analysis.systems import system_tau_replicates, systems_json


def test_judge_says_n_too_small_no_variance_or_the_number():
    assert reliability.judge(0.667, 3).text() == "n too small"
    assert reliability.judge(None, 3).text() == "n too small"
    assert reliability.judge(None, 24).text() == "n/a (no variance)"
    assert reliability.judge(float("nan"), 24).text() == "n/a (no variance)"
    assert reliability.judge(0.5123, 10).text() == "0.512"
    assert reliability.judge(None, 0).text() == "n/a (no data)"
    assert reliability.judge(1.0, 3, reliability.MIN_SYSTEMS).state == reliability.TOO_SMALL
    assert reliability.MIN_PAIRS == 10 and reliability.MIN_SYSTEMS == 5


def test_icc_interval_brackets_the_point_and_reports_its_n():
    rng = np.random.default_rng(1)
    truth = rng.integers(0, 6, size=20).astype(float)
    data = np.stack([truth + rng.normal(0, 0.5, 20) for _ in range(3)])
    out = icc_interval(data, resamples=300, seed=0)
    assert out["n_pairs"] == 20 and out["k"] == 3
    lo, hi = out["icc2_1_ci95"]
    assert lo <= out["icc2_1"] <= hi
    # No variance (every rater 0 everywhere): undefined, not 0 and not missing silently.
    flat = icc_interval(np.zeros((3, 20)), resamples=50, seed=0)
    assert flat["icc2_1"] is None and flat["icc2_1_ci95"] == [None, None]
    assert flat["n_pairs"] == 20


def test_system_tau_replicates_match_kendall_tau_b():
    from scipy.stats import kendalltau

    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(7, 4)), rng.normal(size=(7, 4))
    x[0, 1] = x[0, 2]  # a tie
    got = system_tau_replicates(x, y)
    want = [kendalltau(a, b).statistic for a, b in zip(x, y, strict=True)]
    assert got == pytest.approx(want)


def test_system_level_tau_carries_an_interval_and_its_number_of_systems():
    rng = np.random.default_rng(3)
    sources = [s for s in ("a", "b", "c") for _ in range(8)]
    cases = [f"c{i}" for _ in range(3) for i in range(8)]
    human = np.array([{"a": 1.0, "b": 2.0, "c": 3.0}[s] for s in sources]) + rng.normal(0, .3, 24)
    values = (-human + rng.normal(0, .3, 24))[:, None]
    out = systems_json(values, ["m"], [True], human, sources, cases, resamples=200,
                       permutations=50, seed=0)
    entry = out["ranking"]["m"]
    assert entry["n_systems"] == 3 and entry["kendall_tau"] == pytest.approx(1.0)
    lo, hi = entry["kendall_ci95"]
    assert -1.0 <= lo <= hi <= 1.0


def _ratings(planned):
    counts = np.full((3, 4, 6, 2), np.nan)
    counts[:, 0] = 1.0  # 3 raters
    counts[:2, 1] = 0.0  # 2 raters
    counts[:1, 2] = 2.0  # 1 rater
    return StudyRatings(
        study="s", study_id=1, pair_ids=np.arange(4), positions=np.arange(4),
        opaque_ids=tuple("abcd"), sources=("x",) * 4, cases=tuple("abcd"),
        input_hashes=tuple("abcd"), raters=("r1", "r2", "r3"), counts=counts,
        planned=planned)


def test_under_rated_pairs_are_counted_and_can_be_left_out():
    ratings = _ratings(np.array([3, 3, 3, 3]))
    assert ratings.under_rated().tolist() == [False, True, True, False]  # pair 4: unrated
    only = ratings.only_fully_rated()
    assert only.raters_per_pair().tolist() == [3, 0, 0, 0]
    assert _ratings(None).under_rated().tolist() == [False] * 4


T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _bot(n: int, seconds: float, film: bool = False, send_time: bool = True):
    return [mon.DoneItem(pair=i + 1, completed_at=T0 + dt.timedelta(seconds=3.7 * i),
                         seconds=seconds if send_time else 0.0, total=float(i % 3),
                         has_film=film) for i in range(n)]


def test_a_lone_bot_is_flagged_by_the_floors_within_ten_pairs():
    floors = mon.Floors()
    for send_time in (True, False):
        items = _bot(10, 3.7, send_time=send_time)
        (r,) = mon.monitor([mon.RaterInput("bot", items, 10, 37.0 if send_time else 0.0)],
                           floors=floors)
        assert any(f.startswith("implausible pace") for f in r.flags), r.flags
        if send_time:
            assert any(f.startswith("implausibly fast: 10 of 10") for f in r.flags)
    # Without floors (the old behaviour) a lone bot with 3.7 s pairs had no flag at all.
    (old,) = mon.monitor([mon.RaterInput("bot", _bot(10, 3.7), 10, 37.0)])
    assert old.flags == ()


def test_the_film_floor_is_higher_and_an_honest_pace_passes():
    floors = mon.Floors(min_seconds=10, min_seconds_film=20, max_per_hour=180)
    honest = [mon.DoneItem(pair=i + 1, completed_at=T0 + dt.timedelta(seconds=45 * i),
                           seconds=15.0, total=1.0, has_film=False) for i in range(10)]
    (r,) = mon.monitor([mon.RaterInput("ok", honest, 10, 150.0)], floors=floors)
    assert r.flags == () and r.below_floor_pairs == ()
    film = [mon.DoneItem(pair=i + 1, completed_at=T0 + dt.timedelta(seconds=45 * i),
                         seconds=15.0, total=1.0, has_film=True) for i in range(10)]
    (f,) = mon.monitor([mon.RaterInput("film", film, 10, 150.0)], floors=floors)
    assert len(f.below_floor_pairs) == 10
    assert any("implausibly fast" in x for x in f.flags)


def test_too_few_raters_for_between_rater_flags_is_said():
    raters = mon.monitor([mon.RaterInput("a", _bot(3, 30.0), 3, 90.0),
                          mon.RaterInput("b", _bot(3, 30.0), 3, 90.0)])
    assert mon.between_rater_note(raters).startswith(
        "too few raters for between-rater flags (n < 3)")


def test_agreement_with_the_expert_flags_a_rater_who_misses_most_training_items():
    training = [mon.ExpertItem(rater_total=5, expert_total=0),
                mon.ExpertItem(rater_total=0, expert_total=4),
                mon.ExpertItem(rater_total=1, expert_total=1)]
    (r,) = mon.monitor([mon.RaterInput("x", _bot(3, 30.0), 3, 90.0, training=training)],
                       floors=mon.Floors(), expert_max_error=1)
    assert (r.expert_items, r.expert_within) == (3, 1)
    assert any(f.startswith("disagrees with the expert: 1 of 3") for f in r.flags)
