"""A plug-in's keys through a whole study: the worker scores it (then reads the cache),
``radconcord correlate`` (with paired tests and system ranking), the HTML report, the export
with scores, the dashboard and the explorer.

The study is ``tests/reviewer_study.py``'s (6 cases x 2 sources, three raters, bleu4 and
rougeL scored); the worker adds the example plug-in's ``finding_words`` and
``length_agreement``. Correlations are recomputed here with scipy from the database rows.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from sqlalchemy import select
from streamlit.testing.v1 import AppTest

from radconcord.backend import jobs
from radconcord.backend.cli import main
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.evaluation import reports
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, MetricScore, Pair, Rating, Study
from radconcord.db.session import Database
from tests.plugins.conftest import TAG
from tests.reviewer_study import STUDY, build_reviewer_study

pytestmark = pytest.mark.usefixtures("plugin_site")

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"
PLUGIN_FAMILIES = ["finding_words", "length_agreement"]
PLUGIN_KEYS = ["finding_recall", "finding_missed", "length_agreement"]
SIG_LENGTH = f"length_agreement|version:1|{TAG}"
RATERS = {"rita": "rita-password-1", "ravi": "ravi-password-1", "rosa": "rosa-password-1"}
N_PAIRS = 12


class Env:
    """The study database, its URL, the admin, and the first score job's result."""

    db: Database
    url: str
    data: Path
    admin: Actor
    study_id: int
    first: jobs.JobInfo | None = None


@pytest.fixture(scope="module")
def env(plugin_site, tmp_path_factory) -> Env:
    from argon2 import PasswordHasher

    root = tmp_path_factory.mktemp("plugin-study")
    e = Env()
    e.data = root
    e.url = f"sqlite:///{root / 'radconcord.db'}"
    mp = pytest.MonkeyPatch()
    mp.setenv("RADCONCORD_DATA_DIR", str(root))
    mp.setattr(auth, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
    try:
        e.db = Database(e.url)
        info = auth.create_user(e.db, Actor.system(), username="boss",
                                password="boss-password-1", role="admin")
        e.admin = Actor(user_id=info.user_id, username="boss", role="admin")
        build_reviewer_study(e.db, e.admin, raters=RATERS)
        with e.db.read() as s:
            e.study_id = s.scalar(select(Study.id).where(Study.name == STUDY))
        job = jobs.enqueue(e.db, "score", {"metrics": PLUGIN_FAMILIES, "options": {}},
                           study_id=e.study_id)
        e.first = Worker(e.db, worker_id="w1", batch_size=5).run_once()
        assert e.first is not None and e.first.id == job
    finally:
        mp.undo()
    yield e
    e.db.dispose()


def _plugin_rows(db: Database) -> list[MetricScore]:
    with db.read() as s:
        return list(s.scalars(select(MetricScore).where(MetricScore.key.in_(PLUGIN_KEYS))))


def test_the_worker_scores_the_study_then_reads_the_cache(env):
    first = env.first
    assert first.status == "done", first.error
    families = first.result["families"]
    assert {f: (r["status"], r["computed"], r["cached"]) for f, r in families.items()} == {
        "finding_words": ("done", N_PAIRS, 0), "length_agreement": ("done", N_PAIRS, 0)}
    assert families["length_agreement"]["signature"] == SIG_LENGTH
    assert families["finding_words"]["signature"].startswith("finding_words|version:1|vocab:")
    assert families["finding_words"]["signature"].endswith(f"|{TAG}")
    rows = _plugin_rows(env.db)
    assert len(rows) == N_PAIRS * len(PLUGIN_KEYS)
    assert {r.signature for r in rows if r.key == "length_agreement"} == {SIG_LENGTH}

    # A second job: everything from the cache, nothing computed, no new row.
    jobs.enqueue(env.db, "score", {"metrics": PLUGIN_FAMILIES, "options": {}},
                 study_id=env.study_id)
    again = Worker(env.db, worker_id="w2").run_once()
    assert again.status == "done", again.error
    assert {f: (r["computed"], r["cached"]) for f, r in again.result["families"].items()} == {
        "finding_words": (0, N_PAIRS), "length_agreement": (0, N_PAIRS)}
    assert len(_plugin_rows(env.db)) == N_PAIRS * len(PLUGIN_KEYS)


def _truth(db: Database) -> tuple[dict[int, float], dict[str, dict[int, float]], dict[int, str]]:
    """Per pair: minus the raters' mean total error count, each key's value, the source."""
    with db.read() as s:
        done = s.execute(select(Assignment.rater_id, Assignment.pair_id).where(
            Assignment.completed_at.is_not(None))).all()
        totals: dict[tuple[int, int], int] = defaultdict(int)
        for r in s.scalars(select(Rating)):
            totals[(r.rater_id, r.pair_id)] += r.count
        per_pair: dict[int, list[int]] = defaultdict(list)
        for rater, pair in done:
            per_pair[pair].append(totals[(rater, pair)])
        scores: dict[str, dict[int, float]] = defaultdict(dict)
        pairs = {p.input_hash: p for p in s.scalars(select(Pair))}
        for row in s.scalars(select(MetricScore)):
            if row.input_hash in pairs:
                # nan (no finding word in the reference) is stored as NULL.
                scores[row.key][pairs[row.input_hash].id] = \
                    math.nan if row.value is None else row.value
        sources = {p.id: p.source for p in pairs.values()}
    y = {pair: -float(np.mean(v)) for pair, v in per_pair.items()}
    return y, scores, sources


def test_correlate_reports_the_plugin_keys_as_scipy_computes_them(env, tmp_path):
    out = tmp_path / "result.json"
    assert main(["correlate", "--study", STUDY, "--output", str(out), "--database-url",
                 env.url, "--bootstrap", "200", "--seed", "1", "--permutations", "200"]) == 0
    res = json.loads(out.read_text())
    y, scores, sources = _truth(env.db)
    for key in PLUGIN_KEYS:
        entry = res["metrics"][key]
        hib = key != "finding_missed"
        assert entry["higher_is_better"] is hib
        assert entry["signature"].endswith(f"|{TAG}")
        pairs = [p for p in y if not math.isnan(scores[key][p])]
        x = [scores[key][p] * (1 if hib else -1) for p in pairs]
        tau = stats.kendalltau(x, [y[p] for p in pairs]).statistic
        assert entry["n"] == len(pairs)
        assert entry["kendall_tau_b"] == pytest.approx(tau, abs=1e-12)
    assert res["metrics"]["length_agreement"]["signature"] == SIG_LENGTH
    # The near candidates keep the reference's findings: recall agrees with the raters.
    assert res["metrics"]["finding_recall"]["kendall_tau_b"] > 0

    # Paired tests: every pair of keys, the plug-ins' among them.
    names = set(res["pairwise"]["pairs"])
    assert "finding_recall|bleu4" in names or "bleu4|finding_recall" in names
    assert any("finding_missed" in n and "length_agreement" in n for n in names)
    # System ranking: each source's mean, oriented by the registry's direction.
    systems = res["systems"]
    assert systems["human_order"] == ["gen-near", "gen-far"]
    for key in PLUGIN_KEYS:
        for src in ("gen-near", "gen-far"):
            vals = [v for p, v in scores[key].items() if sources[p] == src and not math.isnan(v)]
            assert systems["sources"][src]["metrics"][key]["mean"] == pytest.approx(
                np.mean(vals))
    # Fewer missed findings is better: the near system ranks first, as with recall.
    assert systems["ranking"]["finding_missed"]["kendall_tau"] == pytest.approx(1.0)
    assert systems["ranking"]["finding_recall"]["kendall_tau"] == pytest.approx(1.0)


def test_the_html_report_and_the_export_carry_the_plugin_keys(env, tmp_path, monkeypatch,
                                                              capsys):
    def no_static_engine(figures):
        raise ImportError("No module named 'kaleido'")

    monkeypatch.setattr(reports, "_static_export", no_static_engine)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(env.data))
    out = tmp_path / "paper"
    assert main(["report", "--study", STUDY, "--output", str(out), "--bootstrap", "30",
                 "--database-url", env.url]) == 0, capsys.readouterr().err
    html = (out / "report.html").read_text(encoding="utf-8")
    for key in PLUGIN_KEYS:
        assert f"<td>{key}</td>" in html

    monkeypatch.setenv("DATABASE_URL", env.url)
    export = tmp_path / "export"
    assert main(["export", "--study", STUDY, "--format", "jsonl", "--output", str(export),
                 "--with-scores"]) == 0, capsys.readouterr().err
    (scores_file,) = export.glob("metric_scores*")
    rows = [json.loads(line) for line in scores_file.read_text(encoding="utf-8").splitlines()]
    plugin = [r for r in rows if r["key"] in PLUGIN_KEYS]
    assert len(plugin) == N_PAIRS * len(PLUGIN_KEYS)
    assert {(r["key"], r["family"], r["higher_is_better"]) for r in plugin} == {
        ("finding_recall", "finding_words", True), ("finding_missed", "finding_words", False),
        ("length_agreement", "length_agreement", True)}
    assert {r["signature"] for r in plugin if r["key"] == "length_agreement"} == {SIG_LENGTH}


def _app(env, monkeypatch, script: str, params: dict[str, str] | None = None) -> AppTest:
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(env.data))
    monkeypatch.setenv("DATABASE_URL", env.url)
    monkeypatch.setenv("RADCONCORD_SEED_DEMO", "0")
    at = AppTest.from_file(str(VIEWS / script), default_timeout=120)
    at.session_state["actor"] = env.admin
    for k, v in (params or {}).items():
        at.query_params[k] = v
    return at.run()


def test_the_dashboard_shows_the_plugin_keys_with_their_direction(env, monkeypatch):
    at = _app(env, monkeypatch, "dashboard.py")
    at.selectbox(key="dash_study").set_value(STUDY)
    at.toggle(key="dash_live").set_value(False)
    at = at.run()
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    shown = dict(zip(table["Metric"], table["Direction"], strict=True))
    assert shown["finding_recall"] == "higher is better"
    assert shown["finding_missed"] == "lower is better"
    assert shown["length_agreement"] == "higher is better"
    assert at.selectbox(key="dash_system_key").options == list(table["Metric"])


def test_the_explorer_shows_the_plugin_scores_of_a_pair(env, monkeypatch):
    with env.db.read() as s:
        pair = s.scalar(select(Pair).where(Pair.study_id == env.study_id)
                        .order_by(Pair.position))
        values = {r.key: r.value for r in s.scalars(
            select(MetricScore).where(MetricScore.input_hash == pair.input_hash))}
    at = _app(env, monkeypatch, "explorer.py", {"study": STUDY, "pair": str(pair.id)})
    assert not at.exception and not at.error
    (scores,) = [d.value for d in at.dataframe if "Metric" in d.value.columns
                 and set(PLUGIN_KEYS) <= set(d.value["Metric"])]
    assert set(PLUGIN_KEYS) | {"bleu4", "rougeL"} <= set(scores["Metric"])
    shown = scores.set_index("Metric")
    assert float(str(shown.loc["length_agreement"].iloc[0]).rstrip("%")) == pytest.approx(
        values["length_agreement"], abs=5e-4)
