"""The paper report on a small rated and scored study: service, ``report`` command, job kind.

The study is test_correlate.py's (24 pairs, four raters, scores of seven keys); one source
is renamed to a ``<script>`` tag to check the escaping end to end, and its provenance gets
input hashes. Expected numbers are taken from the other services the report quotes.
"""

from __future__ import annotations

import hashlib
import json
from html.parser import HTMLParser

import pytest
from sqlalchemy import select, update

from radconcord.backend.analysis import html_report
from radconcord.backend.cli import main
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.annotation import assignment_writes
from radconcord.backend.services.evaluation import reports
from radconcord.backend.services.evaluation.correlation import study_agreement, study_correlation
from radconcord.backend.types import Actor
from radconcord.db.models import Pair, Study
from tests.services.test_correlate import _build

EVIL = "<script>alert(1)</script>"
ADMIN = Actor.system()
GT_SHA = "12" * 32


@pytest.fixture
def study(tmp_path, monkeypatch):
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    db, url, _ = _build(tmp_path)
    with db.begin() as s:
        s.execute(update(Pair).where(Pair.source == "gen-a").values(source=EVIL))
        s.execute(update(Study).where(Study.name == "s1").values(provenance={
            "kind": "rexval", "files": {"gt.csv": GT_SHA, "ratings.csv": "34" * 32},
            "assignment": {"strategy": "random", "seed": 3}}))
    yield db, url
    db.dispose()


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [v for k, v in attrs if k in ("src", "href", "xlink:href") and v]


def _no_static_engine(figures):
    raise ImportError("No module named 'kaleido'")


def _check_html(html: str) -> None:
    for sid, _ in html_report.SECTIONS:
        assert f'<section id="{sid}">' in html
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    parser = _Refs()
    parser.feed(html)
    assert not [r for r in parser.refs if r.lower().startswith(("http:", "https:", "//"))]


def test_render_report_quotes_the_services(study, monkeypatch):
    db, _ = study
    monkeypatch.setattr(reports, "_static_export", _no_static_engine)
    bundle = reports.render_report(db, ADMIN, study_name="s1", resamples=50, seed=2)
    html = bundle.html
    _check_html(html)
    corr = study_correlation(db, ADMIN, study_name="s1", resamples=50, seed=2)
    for m in corr.metrics:
        assert f"<td>{m.key}</td>" in html
        assert f"{m.kendall_tau_b:.3f}" in html
        assert f"[{m.kendall_lo:.3f}, {m.kendall_hi:.3f}]" in html
    agreement = study_agreement(db, ADMIN, study_name="s1")
    total = next(r for r in agreement.rows if r.scope == "total")
    assert f"{total.alpha_interval:.3f}" in html
    for rater in agreement.raters:
        assert f"<td>{rater}</td>" in html
    # Design and provenance: 24 pairs, 12 cases, the recorded strategy, both input hashes.
    assert "<th>Cases (reference reports)</th><td>12</td>" in html
    assert "<th>Assignment strategy</th><td>random" in html
    assert f"<td>files.gt.csv</td><td><code>{GT_SHA}</code></td>" in html
    assert "34" * 32 in html
    # Versions: the app's own and plotly's.
    assert "<th>radconcord</th><td>0.1.0</td>" in html and "<th>plotly</th>" in html
    # Without the static engine: interactive figures, said in the footer, plotly.js inline.
    assert bundle.figure_format == "html" and "kaleido" in bundle.note
    assert "forest.html" in bundle.figures and "Plotly.newPlot" in html
    assert "figures are interactive plotly HTML" in html.split("<footer>")[1]


def test_static_figures_are_inlined_and_written(study, monkeypatch, tmp_path):
    db, _ = study
    drawn: dict[str, str] = {}

    def export(figures):
        # Stands in for kaleido: one SVG per figure, naming it, so the test sees the routing.
        for name in figures:
            drawn[name] = f'<svg xmlns="http://www.w3.org/2000/svg"><text>{name}</text></svg>'
        return dict(drawn)

    monkeypatch.setattr(reports, "_static_export", export)
    bundle = reports.render_report(db, ADMIN, study_name="s1", resamples=0)
    assert bundle.figure_format == "svg" and bundle.note == ""
    assert "forest" in drawn
    assert set(bundle.figures) == {f"{n}.svg" for n in drawn}
    assert "<figure><svg" in bundle.html and "<text>forest</text>" in bundle.html
    assert "Plotly.newPlot" not in bundle.html  # no 4 MB library when figures are static
    files = reports.write_report(bundle, tmp_path / "out")
    assert "figures/forest.svg" in files and files[-1] == "manifest.json"
    assert (tmp_path / "out" / "figures" / "forest.svg").read_text() == drawn["forest"]


def test_render_report_refuses_raters_unknown_studies_and_bad_options(study):
    db, _ = study
    with pytest.raises(PermissionDenied):
        reports.render_report(db, Actor(user_id=1, username="r1", role="rater"),
                              study_name="s1")
    with pytest.raises(NotFound, match="nope"):
        reports.render_report(db, ADMIN, study_name="nope")
    with pytest.raises(InvalidInput, match="resamples"):
        reports.render_report(db, ADMIN, study_name="s1", resamples=-1)


def test_report_command_writes_the_folder_with_a_manifest(study, tmp_path, monkeypatch, capsys):
    db, url = study
    monkeypatch.setattr(reports, "_static_export", _no_static_engine)
    out = tmp_path / "paper"
    rc = main(["report", "--study", "s1", "--output", str(out), "--bootstrap", "30",
               "--seed", "1", "--significant-only", "--database-url", url])
    assert rc == 0, capsys.readouterr().err
    html = (out / "report.html").read_text(encoding="utf-8")
    _check_html(html)
    assert "Target: significant errors" in html
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["study"] == "s1" and manifest["significant_only"] is True
    assert manifest["resamples"] == 30 and manifest["figure_format"] == "html"
    assert manifest["files"]["report.html"]["sha256"] == hashlib.sha256(
        (out / "report.html").read_bytes()).hexdigest()
    assert "figures/forest.html" in manifest["files"]
    assert "report.html" in capsys.readouterr().out

    # A taken folder is refused before any work and left as it was.
    rc = main(["report", "--study", "s1", "--output", str(out), "--database-url", url])
    assert rc == 2 and "not empty" in capsys.readouterr().err
    assert (out / "report.html").read_text(encoding="utf-8") == html
    rc = main(["report", "--study", "nope", "--output", str(tmp_path / "x"),
               "--database-url", url])
    assert rc == 2 and "nope" in capsys.readouterr().err and not (tmp_path / "x").exists()
    rc = main(["report", "--study", "s1", "--output", str(tmp_path / "y"), "--bootstrap",
               "-1", "--database-url", url])
    assert rc == 2 and "--bootstrap" in capsys.readouterr().err


def test_report_job_publishes_into_the_data_folder(study, tmp_path, monkeypatch):
    db, _ = study
    monkeypatch.setattr(reports, "_static_export", _no_static_engine)
    job = reports.enqueue_report(db, ADMIN, study_name="s1", resamples=20, seed=5)
    assert job.kind == "report" and job.study_name == "s1"
    done = Worker(db).run_once()
    assert done.status == "done", done.error
    rel = done.result["path"]
    assert rel == f"reports/s1-{job.id}"
    folder = tmp_path / "data" / rel
    assert sorted(done.result["files"]) == sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    _check_html((folder / "report.html").read_text(encoding="utf-8"))
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["job_id"] == job.id and manifest["seed"] == 5
    with pytest.raises(NotFound):
        reports.enqueue_report(db, ADMIN, study_name="nope")
    with pytest.raises(PermissionDenied):
        reports.enqueue_report(db, Actor(user_id=1, username="r1", role="rater"),
                               study_name="s1")


def test_the_static_engine_draws_svg_figures_with_the_system_chromium():
    """kaleido (a runtime requirement) drives the Debian chromium the test set-up installs;
    no browser is downloaded. The figures come back as SVG documents of the requested size."""
    import plotly.graph_objects as go

    from radconcord.backend.services.evaluation.reports import _static_export

    fig = go.Figure(go.Bar(x=["gen-a", "gen-b"], y=[1.5, 0.5]))
    fig.update_layout(width=640, height=320, title="errors per source")
    svg = _static_export({"errors": fig})["errors"]
    assert svg.lstrip().startswith("<svg") and 'width="640"' in svg and 'height="320"' in svg
    assert "gen-a" in svg and "errors per source" in svg


def test_the_report_uses_the_chosen_resampling_unit_and_correction(study, monkeypatch):
    """The dashboard's unit and correction reach the report's ceiling and paired tests."""
    db, _ = study
    monkeypatch.setattr(reports, "_static_export", _no_static_engine)
    html = reports.render_report(db, ADMIN, study_name="s1", resamples=20, seed=1,
                                 unit="case", correction="bh").html
    assert "resamples by case), two-sided p, bh correction" in html
    default = reports.render_report(db, ADMIN, study_name="s1", resamples=20, seed=1).html
    assert "holm correction" in default


def test_the_report_says_which_counts_and_uses_the_consensus(study, monkeypatch):
    """Raw by default; with counts="adjudicated" the consensus of an adjudicated pair enters
    the correlations (the same numbers as the dashboard's service) and the report says so."""
    from radconcord.backend.services.accounts import auth
    from radconcord.backend.services.quality import adjudication
    from radconcord.db.models import Pair as PairModel

    db, _ = study
    monkeypatch.setattr(reports, "_static_export", _no_static_engine)
    raw = reports.render_report(db, ADMIN, study_name="s1", resamples=0)
    assert "<th>Counts per pair</th><td>raw: the mean of the raters&#x27; counts" in raw.html
    auth.create_user(db, ADMIN, username="chief", password="chief-password-1", role="admin")
    chief = auth.authenticate(db, username="chief", password="chief-password-1")
    with db.read() as s:
        first = s.scalars(select(PairModel.opaque_id).where(PairModel.kind == "study")
                          .order_by(PairModel.position)).first()
    adjudication.record(db, chief, study_name="s1", opaque_id=first,
                        counts=dict.fromkeys(assignment_writes.CELLS, 9),
                        note="consensus: all wrong")
    bundle = reports.render_report(db, ADMIN, study_name="s1", resamples=0,
                                   counts="adjudicated")
    assert "adjudicated: the consensus on 1 pair(s)" in bundle.html
    corr = study_correlation(db, ADMIN, study_name="s1", resamples=0, counts="adjudicated")
    before = study_correlation(db, ADMIN, study_name="s1", resamples=0)
    assert corr.n_adjudicated == 1
    assert [m.kendall_tau_b for m in corr.metrics] != [m.kendall_tau_b for m in before.metrics]
    for m in corr.metrics:
        assert f"{m.kendall_tau_b:.3f}" in bundle.html
