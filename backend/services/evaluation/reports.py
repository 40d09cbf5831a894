"""The report for the paper: one self-contained HTML file and its figures (admin only).

:func:`render_report` gathers the facts of one study through the other services (design and
provenance from :mod:`backend.services.study_admin.studies`, agreement from
:func:`backend.services.evaluation.correlation.study_agreement`, everything else from the
``correlate``
JSON of :func:`backend.services.evaluation.correlation.study_correlation`) and hands them to the
pure
renderer :mod:`backend.analysis.html_report`, with the figures of
:mod:`backend.figures.correlation` (the dashboard's drawings). :func:`write_report` publishes
the bundle as a folder (``report.html``, ``figures/``, ``manifest.json``) atomically; the
``report`` command and the ``report`` job kind both use it.

Figures are exported as SVG through plotly's static engine (kaleido, which drives the
system's Chromium) when it is installed and works; otherwise each figure is written as a
standalone plotly HTML file and the report inlines plotly.js once. The report's footer says
which.
"""

from __future__ import annotations

import importlib.metadata
import logging
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radconcord.backend import clock, config
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.services.evaluation import correlation
from radconcord.backend.services.study_admin import demo_ratings, studies
from radconcord.backend.types import Actor
from radconcord.backend.util import publish_dir
from radconcord.db.session import Database

logger = logging.getLogger(__name__)

REPORT_FILE = "report.html"
FIGURES_DIR = "figures"
#: Packages whose versions the report lists (missing ones are reported as absent).
VERSIONED_PACKAGES = ("numpy", "scipy", "plotly", "kaleido", "sqlalchemy", "streamlit")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ReportBundle:
    """A rendered report.

    Attributes:
        html: The whole report, one self-contained HTML document.
        figures: ``file name -> bytes`` of each figure (``forest.svg`` or ``forest.html``...).
        figure_format: ``"svg"`` (static export worked) or ``"html"`` (interactive fallback).
        note: Why the figures are HTML, or empty.
    """

    html: str
    figures: dict[str, bytes] = field(default_factory=dict)
    figure_format: str = "svg"
    note: str = ""


def package_versions() -> dict[str, str | None]:
    """The app, Python and the versions of :data:`VERSIONED_PACKAGES` (``None``: absent)."""
    out: dict[str, str | None] = {"radconcord": config.APP_VERSION,
                                  "python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def input_hashes(provenance: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every sha256 recorded in a study's provenance, as ``(where, hex digest)``.

    ``where`` is the dotted path of the value inside the provenance (``files.gt.csv``,
    ``corpus.sha256``...), so the reader can tell which input each digest belongs to.
    """
    found: list[tuple[str, str]] = []

    def walk(value: Any, path: str) -> None:  # noqa: ANN401 - any JSON value
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{path}[{i}]")
        elif isinstance(value, str) and _SHA256.fullmatch(value):
            found.append((path, value))

    walk(provenance, "")
    return found


def _static_export(figures: Mapping[str, Any]) -> dict[str, str]:
    """``name -> SVG text`` through plotly's static engine; raises when it is unavailable."""
    import tempfile

    import kaleido  # noqa: F401 - plotly needs it; an ImportError selects the HTML fallback
    import plotly.io as pio

    names = list(figures)
    if not names:
        return {}
    with tempfile.TemporaryDirectory(prefix="radconcord-figures-") as tmp:
        paths = [Path(tmp) / f"{i}.svg" for i in range(len(names))]
        # One browser for all figures (write_images accepts only paths): write_image per
        # figure would start Chromium each time.
        figs = [figures[n] for n in names]
        # The engine's default 700 x 500 would override the heights the figures ask for.
        pio.write_images(figs, paths, format="svg", width=[f.layout.width or 900 for f in figs],
                         height=[f.layout.height or 500 for f in figs])
        return {n: p.read_text(encoding="utf-8") for n, p in zip(names, paths, strict=True)}


def _export_figures(figures: Mapping[str, Any]) -> tuple[str, dict[str, str], str]:
    """``(format, name -> inline markup, note)``: SVG when the static engine works, else HTML."""
    try:
        return "svg", _static_export(figures), ""
    except ImportError:
        note = ("plotly's static image engine (kaleido) is not installed: figures are"
                " interactive plotly HTML")
    except Exception as exc:  # noqa: BLE001 - any failure of the browser falls back to HTML
        logger.warning("static figure export failed: %s: %s", type(exc).__name__, exc)
        note = (f"plotly's static image export failed ({type(exc).__name__}): figures are"
                " interactive plotly HTML")
    markup = {
        name: fig.to_html(full_html=False, include_plotlyjs=False,
                          config={"displaylogo": False})
        for name, fig in figures.items()
    }
    return "html", markup, note


def render_report(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    significant_only: bool = False,
    resamples: int = 1000,
    seed: int = 0,
    unit: str | None = None,
    correction: str = "holm",
    counts: str = "raw",
) -> ReportBundle:
    """Render the paper report of one study (admin only).

    Args:
        db: The database.
        actor: Who asks; must be an admin.
        study_name: Study name.
        significant_only: Target clinically significant errors instead of all errors.
        resamples: Bootstrap resamples of every interval (0: none).
        seed: Bootstrap seed.
        unit: Resampling unit of the ceiling and paired tests (``pair``, ``case`` or
            ``rater_pair``; default: the metrics' own unit).
        correction: Multiple-testing correction over the paired matrix (``holm``, ``bh``).
        counts: ``raw`` (the raters' mean per pair) or ``adjudicated`` (the consensus on
            adjudicated pairs); the report says which.

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: nothing to report (no scores, fewer than 2 rated pairs), bad options.
    """
    from radconcord.backend.analysis import html_report
    from radconcord.backend.figures.correlation import report_figures

    require_admin(actor)
    if resamples < 0:
        raise InvalidInput(f"resamples must be >= 0, got {resamples}")
    summary = studies.get_study_summary(db, actor, study_name=study_name)
    corr = correlation.study_correlation(
        db, actor, study_name=study_name, significant_only=significant_only,
        resamples=resamples, seed=seed, unit=unit, correction=correction, counts=counts,
    )
    agreement = correlation.study_agreement(
        db, actor, study_name=study_name, significant_only=significant_only
    )
    provenance = summary.provenance
    facts: dict[str, Any] = {
        "study": {
            "name": summary.name,
            "description": summary.description,
            "status": summary.status,
            "scheme": summary.scheme,
            "raters_per_pair": summary.raters_per_pair,
            "seed": summary.seed,
            "n_pairs": summary.n_pairs,
            "n_cases": summary.n_cases,
            "n_raters": summary.n_raters,
            "n_assignments": summary.n_assignments,
            "n_completed": summary.n_completed,
            "created_at": summary.created_at.isoformat() if summary.created_at else None,
            "sources": dict(summary.sources),
            "kind": provenance.get("kind"),
            # "demo ratings (constructed)" (the seeded demo study), shown on top of the design.
            "ratings_note": demo_ratings.note_of(provenance),
            "assignment": provenance.get("assignment"),
        },
        "agreement": {
            "raters": list(agreement.raters),
            "rows": [
                {"scope": r.scope, "alpha_interval": r.alpha_interval,
                 "alpha_ratio": r.alpha_ratio, "icc2_1": r.icc2_1, "icc2_k": r.icc2_k,
                 "icc_k": r.icc_k, "icc_n_pairs": r.icc_n_pairs,
                 "n_pairs_pairable": r.n_pairs_pairable}
                for r in agreement.rows
            ],
        },
        "versions": package_versions(),
        "inputs": [{"where": w, "sha256": h} for w, h in input_hashes(provenance)],
        "generated_at": clock.utcnow().isoformat(timespec="seconds"),
    }
    report = corr.report
    figures = report_figures(corr.result)
    fmt, markup, note = _export_figures(figures)
    plotlyjs = None
    if fmt == "html" and markup:
        from plotly.offline import get_plotlyjs

        plotlyjs = get_plotlyjs()
    html = html_report.render_html(report, facts, figures=markup, figure_format=fmt,
                                   figure_note=note, plotlyjs=plotlyjs)
    if fmt == "svg":
        files = {f"{name}.svg": text.encode("utf-8") for name, text in markup.items()}
    else:
        files = {
            f"{name}.html": fig.to_html(full_html=True, include_plotlyjs=True,
                                        config={"displaylogo": False}).encode("utf-8")
            for name, fig in figures.items()
        }
    return ReportBundle(html=html, figures=files, figure_format=fmt, note=note)


def write_report(bundle: ReportBundle, out_dir: str | Path, *,
                 about: Mapping[str, Any] | None = None) -> list[str]:
    """Publish ``bundle`` as ``out_dir/report.html`` + ``figures/`` + ``manifest.json``.

    The folder appears whole or not at all (:func:`backend.util.publish_dir`).

    Args:
        bundle: What :func:`render_report` returned.
        out_dir: Target folder; must be missing or empty.
        about: Extra manifest entries (study, options).

    Returns:
        The files written, relative to ``out_dir``, the manifest last.

    Raises:
        InvalidInput: ``out_dir`` is a file or a non-empty folder.
    """

    def write(tmp: Path) -> dict[str, Any]:
        (tmp / REPORT_FILE).write_text(bundle.html, encoding="utf-8")
        names = [REPORT_FILE]
        if bundle.figures:
            (tmp / FIGURES_DIR).mkdir()
            for name, data in sorted(bundle.figures.items()):
                (tmp / FIGURES_DIR / name).write_bytes(data)
                names.append(f"{FIGURES_DIR}/{name}")
        return {"app_version": config.APP_VERSION, **dict(about or {}),
                "figure_format": bundle.figure_format, "figure_note": bundle.note,
                "files": names}

    return publish_dir(out_dir, write)


def enqueue_report(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    significant_only: bool = False,
    resamples: int = 1000,
    seed: int = 0,
) -> Any:  # noqa: ANN401 - backend.services.jobs.JobView
    """Queue a ``report`` job (admin only); its result names the folder in the data folder.

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: ``resamples`` < 0.
    """
    from radconcord.backend.services import jobs

    require_admin(actor)
    if resamples < 0:
        raise InvalidInput(f"resamples must be >= 0, got {resamples}")
    return jobs.enqueue_job(
        db, actor, kind="report", study_name=study_name,
        params={"study": study_name, "significant_only": significant_only,
                "resamples": resamples, "seed": seed},
    )
