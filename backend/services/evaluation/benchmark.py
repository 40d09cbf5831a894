"""``radconcord benchmark``: every metric on every gold set under one protocol (admin).

:func:`run_benchmark` reads each gold set, scores it through the score cache and ranks the
metrics with :mod:`backend.analysis.leaderboard`; :func:`write_outputs` writes
``leaderboard.json``, ``leaderboard.csv`` and ``leaderboard.html``. :func:`study_leaderboard`
builds the same document for studies of the database from their stored scores (the
dashboard's view: it scores nothing).

Gold sets (``--dataset KIND=LOCATION``), read with the importers' own readers so a folder
and the study its import would create give the same figures:

- ``rexval=DIR``: ReXVal's public layout (:mod:`backend.datasets.rexval`):
  ``50_samples_gt_and_candidates.csv`` and ``6_valid_raters_per_rater_error_categories.csv``.
  Pairs in the order ``import-rexval`` creates them, raters named as it names them.
- ``radpref=DIR``: ``preference_data.json`` and ``radiologist_annotations/user_N.json``
  (:mod:`backend.datasets.radpref`): one comparison per case (A = C1, B = C2), each
  annotator's 1-5 rating of each candidate. A preference set (its ReXVal counts are mapped
  from another scheme, so they are not used as a count gold set here).
- ``study=NAME``: a study of the database; a study in the pairwise annotation mode is a
  preference set (its completed judgements), any other a count set (its counted ratings,
  :func:`backend.services.evaluation.study_data.load_ratings`).

Scores: the runner (:func:`backend.scoring.runner.score`) with the database as the cache, one
:class:`~backend.scoring.runner.MetricPool` for the whole run. A folder's pairs are keyed by
their texts (as ``score --input`` keys them), a study's pairs by their stored input hash (as
``score --study``), so a second run with the same inputs computes nothing. A family that
cannot run (unavailable here, no images on a text-only set, failed while scoring) is an
n/a row with the reason, never an error and never a silent drop.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import aliased

from radconcord.backend import clock
from radconcord.backend.analysis import leaderboard as lb
from radconcord.backend.analysis.data import AnalysisInputError, StudyRatings
from radconcord.backend.analysis.stats import to_json_safe
from radconcord.backend.datasets import radpref, rexval
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import MetricUnavailable
from radconcord.backend.scoring import jobs as scoring_jobs
from radconcord.backend.scoring.runner import (
    MetricPool,
    ScorePair,
    ScoringError,
    requested_keys,
    score,
)
from radconcord.backend.services.evaluation.reports import input_hashes, package_versions
from radconcord.backend.services.evaluation.study_data import load_ratings
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.services.transfer.imports import REXVAL_RATER_PREFIX
from radconcord.backend.services.transfer.radpref import username_of
from radconcord.backend.types import Actor
from radconcord.backend.util import atomic_write, file_sha256, records_to_csv
from radconcord.db.models import (
    PAIR_STUDY,
    STUDY_STAGING,
    Comparison,
    Judgement,
    MetricScore,
    Pair,
    Study,
)
from radconcord.db.models import User as UserRow
from radconcord.db.session import Database

KINDS = ("rexval", "radpref", "study")
AVAILABLE = "available"
JSON_FILE = "leaderboard.json"
CSV_FILE = "leaderboard.csv"
HTML_FILE = "leaderboard.html"
#: Metric packages whose versions go into the JSON beside the report's.
METRIC_PACKAGES = ("torch", "transformers", "nltk", "pycocoevalcap", "radgraph")
ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class DatasetSpec:
    """One ``--dataset KIND=LOCATION`` argument."""

    kind: str
    location: str
    text: str


def parse_dataset(text: str) -> DatasetSpec:
    """Parse ``rexval=DIR``, ``radpref=DIR`` or ``study=NAME``.

    Raises:
        InvalidInput: not ``KIND=LOCATION`` or an unknown kind (the message says the forms).
    """
    kind, sep, location = (text or "").partition("=")
    kind = kind.strip().lower()
    if not sep or not location.strip():
        raise InvalidInput(f"--dataset {text!r}: expected KIND=LOCATION: rexval=DIR, "
                           "radpref=DIR or study=NAME")
    if kind not in KINDS:
        raise InvalidInput(f"--dataset {text!r}: unknown kind {kind!r} (known: "
                           f"{', '.join(KINDS)})")
    return DatasetSpec(kind=kind, location=location.strip(), text=text)


@dataclass
class Dataset:
    """A gold set read into arrays, with the pairs the runner scores for it.

    Attributes:
        name: Its name in the outputs.
        spec: Where it was read from.
        gold_set: ``ReXVal``, ``RadPref`` or ``study``: which published figures apply.
        counts: The count data (``None`` for a preference set).
        preference: The preference data (``None`` for a count set).
        items: Ids of the items the metric values are aligned with (pairs, candidates).
        pairs: What the runner scores (ids matched to ``items``; a study also scores the pairs
            outside its statistics, as ``score --study`` does, so signatures agree).
        has_images: Whether any pair has an image (image metrics are n/a otherwise).
        files: Input file -> sha256.
        warnings: What the reader kept but the user should know.
        ratings: The study's ratings (study sets only; the stored scores are read with them).
    """

    name: str
    spec: DatasetSpec
    gold_set: str
    counts: lb.CountData | None
    preference: lb.PreferenceData | None
    items: tuple[str, ...]
    pairs: list[ScorePair]
    has_images: bool
    files: dict[str, str]
    warnings: tuple[str, ...] = ()
    ratings: StudyRatings | None = None

    @property
    def kind(self) -> str:
        """``counts`` or ``preference``."""
        return "counts" if self.counts is not None else "preference"


# ------------------------------------------------------------------------------ reading


def load_rexval_folder(folder: str | Path, name: str = "rexval") -> Dataset:
    """Read a folder in ReXVal's public layout.

    Raises:
        InvalidInput: the folder or a file is missing, or a file is malformed (its path and
            what is wrong named in one line, by :mod:`backend.datasets.rexval`).
    """
    folder = Path(folder)
    layout = f"a ReXVal folder holds {rexval.GT_FILENAME} and {rexval.RATINGS_FILENAME}"
    if not folder.is_dir():
        raise InvalidInput(f"{folder}: no such folder ({layout})")
    gt_path, ratings_path = folder / rexval.GT_FILENAME, folder / rexval.RATINGS_FILENAME
    for path in (gt_path, ratings_path):
        if not path.is_file():
            raise InvalidInput(f"{path}: missing file ({layout})")
    gt = rexval.read_gt(gt_path)
    rows = rexval.read_ratings(ratings_path, gt).rows
    # Pairs as import_rexval creates them: row by row, candidate columns in file order.
    index: dict[tuple[int, str], int] = {}
    ids: list[str] = []
    cases: list[str] = []
    sources: list[str] = []
    pairs: list[ScorePair] = []
    for number, row in enumerate(gt.rows):
        for ctype, text in zip(gt.candidate_types, row.candidates, strict=True):
            if not text.strip():
                continue
            pid = f"{row.study_id}|{ctype}"
            index[(number, ctype)] = len(ids)
            ids.append(pid)
            cases.append(row.study_id)
            sources.append(ctype)
            pairs.append(ScorePair(id=pid, reference=row.gt_report, candidate=text))
    # Raters as the import names them, in load_ratings' (username) order.
    raters = sorted({r.rater_index for r in rows}, key=lambda i: f"{REXVAL_RATER_PREFIX}{i}")
    row_of = {r: i for i, r in enumerate(raters)}
    total = np.full((len(raters), len(ids)), np.nan)
    significant = np.full_like(total, np.nan)
    for r in rows:
        at = (row_of[r.rater_index], index[(r.study_number, r.candidate_type)])
        if np.isnan(total[at]):
            total[at] = significant[at] = 0.0
        total[at] += r.num_errors
        if r.clinically_significant:
            significant[at] += r.num_errors
    data = lb.CountData(pair_ids=tuple(ids), cases=tuple(cases), sources=tuple(sources),
                        raters=tuple(f"{REXVAL_RATER_PREFIX}{i}" for i in raters),
                        errors={"total": total, "significant": significant})
    return Dataset(name=name, spec=DatasetSpec("rexval", str(folder), f"rexval={folder}"),
                   gold_set="ReXVal", counts=data, preference=None, items=tuple(ids),
                   pairs=pairs, has_images=False,
                   files={p.name: file_sha256(p) for p in (gt_path, ratings_path)})


def load_radpref_folder(folder: str | Path, name: str = "radpref") -> Dataset:
    """Read a folder in RadPref's published layout.

    Raises:
        InvalidInput: the folder, ``preference_data.json`` or the annotations folder is
            missing, or a file is malformed (file, case and field named in one line).
    """
    folder = Path(folder)
    layout = (f"a RadPref folder holds {radpref.PREFERENCES_FILE} and "
              f"{radpref.ANNOTATIONS_DIR}/user_N.json")
    if not folder.is_dir():
        raise InvalidInput(f"{folder}: no such folder ({layout})")
    prefs, annotations = folder / radpref.PREFERENCES_FILE, folder / radpref.ANNOTATIONS_DIR
    if not prefs.is_file():
        raise InvalidInput(f"{prefs}: missing file ({layout})")
    if not annotations.is_dir():
        raise InvalidInput(f"{annotations}: missing folder ({layout})")
    data = radpref.read(prefs, annotations)
    ids: list[str] = []
    references: list[str] = []
    sources: list[str] = []
    pairs: list[ScorePair] = []
    for case in data.cases:
        for cand in radpref.CANDIDATES:
            pid = f"{case['id']}|{cand}"
            ids.append(pid)
            references.append(case["id"])
            sources.append(case[f"{cand}_source"])
            pairs.append(ScorePair(id=pid, reference=case["ground_truth_report"],
                                   candidate=case[f"{cand}_report"]))
    position = {pid: i for i, pid in enumerate(ids)}
    annotators = sorted(data.annotators, key=lambda a: username_of(a.user_id))
    ratings = np.full((len(annotators), len(ids)), np.nan)
    for r, annotator in enumerate(annotators):
        for case_id, annotation in annotator.annotations.items():
            for cand in radpref.CANDIDATES:
                ratings[r, position[f"{case_id}|{cand}"]] = float(annotation[cand]["rating"])
    # One comparison per case and every annotator rated both sides: the comparison's means
    # are its candidates' means.
    counted = np.isfinite(ratings)
    n_r = counted.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_r > 0, np.where(counted, ratings, 0.0).sum(axis=0)
                        / np.maximum(n_r, 1), np.nan)
    a = np.arange(0, len(ids), 2, dtype=np.int64)
    preference = lb.PreferenceData(
        candidate_ids=tuple(ids), references=tuple(references), sources=tuple(sources),
        raters=tuple(username_of(a.user_id) for a in annotators), ratings=ratings,
        candidate_mean=mean, comparison_a=a, comparison_b=a + 1, comparison_mean_a=mean[a],
        comparison_mean_b=mean[a + 1])
    files = {radpref.PREFERENCES_FILE: data.sha256[data.preferences_file]}
    files.update({f"{radpref.ANNOTATIONS_DIR}/{a.file}": data.sha256[a.file]
                  for a in data.annotators})
    return Dataset(name=name, spec=DatasetSpec("radpref", str(folder), f"radpref={folder}"),
                   gold_set="RadPref", counts=None, preference=preference, items=tuple(ids),
                   pairs=pairs, has_images=False, files=files, warnings=data.warnings)


def _study_preference(db: Database, study_id: int, ratings: StudyRatings, name: str
                      ) -> lb.PreferenceData:
    """A pairwise study's completed judgements as preference data (the rules of
    :func:`backend.services.annotation.pairwise.study_preference_stats`)."""
    pa = aliased(Pair)
    with db.read() as s:
        comps = s.execute(
            select(Comparison.id, Comparison.pair_a_id, Comparison.pair_b_id, pa.case_id)
            .join(pa, pa.id == Comparison.pair_a_id)
            .where(Comparison.study_id == study_id).order_by(Comparison.position)).all()
        done = s.execute(
            select(Judgement.comparison_id, UserRow.username, Judgement.rating_a,
                   Judgement.rating_b)
            .join(Comparison, Comparison.id == Judgement.comparison_id)
            .join(UserRow, UserRow.id == Judgement.rater_id)
            .where(Comparison.study_id == study_id, Judgement.completed_at.is_not(None))
        ).all()
        case_of = dict(s.execute(select(Pair.id, Pair.case_id).where(
            Pair.study_id == study_id, Pair.kind == PAIR_STUDY)).all())
    if not comps:
        raise InvalidInput(f"study={name}: the study is in the pairwise annotation mode but "
                           "has no comparisons (python -m backend make-comparisons)")
    position = {int(pid): i for i, pid in enumerate(ratings.pair_ids)}
    sides = {cid: (a, b) for cid, a, b, _ in comps}
    per_comparison: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    per_candidate: dict[int, list[float]] = defaultdict(list)
    per_rater: dict[tuple[str, int], list[float]] = defaultdict(list)
    for cid, rater, ra, rb in done:
        for side, value in ((0, ra), (1, rb)):
            if value is None:
                continue
            pair_id = sides[cid][side]
            per_comparison[cid][side].append(float(value))
            per_candidate[pair_id].append(float(value))
            per_rater[(rater, pair_id)].append(float(value))
    raters = sorted({rater for rater, _ in per_rater})
    m = len(ratings.pair_ids)
    matrix = np.full((len(raters), m), np.nan)
    for (rater, pair_id), values in per_rater.items():
        matrix[raters.index(rater), position[pair_id]] = float(np.mean(values))
    cand_mean = np.full(m, np.nan)
    for pair_id, values in per_candidate.items():
        cand_mean[position[pair_id]] = float(np.mean(values))

    def mean(values: list[float]) -> float:
        return float(np.mean(values)) if values else float("nan")

    return lb.PreferenceData(
        candidate_ids=tuple(str(p) for p in ratings.pair_ids),
        # The database's case ids, as study_preference_stats clusters by them.
        references=tuple(case_of[int(p)] for p in ratings.pair_ids),
        sources=ratings.sources, raters=tuple(raters), ratings=matrix,
        candidate_mean=cand_mean,
        comparison_a=np.array([position[a] for _, a, _, _ in comps], dtype=np.int64),
        comparison_b=np.array([position[b] for _, _, b, _ in comps], dtype=np.int64),
        comparison_mean_a=np.array([mean(per_comparison[c][0]) for c, *_ in comps]),
        comparison_mean_b=np.array([mean(per_comparison[c][1]) for c, *_ in comps]))


def load_study(db: Database, study_name: str, name: str | None = None) -> Dataset:
    """Read a study of the database as a count or preference set.

    Raises:
        InvalidInput: no such study, a count study with fewer than 2 rated pairs, a pairwise
            study without comparisons or completed judgements.
    """
    label = name or f"study:{study_name}"
    with db.read() as s:
        study = s.scalar(select(Study).where(Study.name == study_name,
                                             Study.status != STUDY_STAGING))
        if study is None:
            raise InvalidInput(f"study={study_name}: no study named {study_name!r}")
        study_id = study.id
        mode = effective(study.settings)["annotation_mode"]
        provenance = dict(study.provenance or {})
    try:
        ratings = load_ratings(db, study_name)
    except AnalysisInputError as exc:
        raise InvalidInput(f"study={study_name}: {exc}") from None
    pairs = scoring_jobs.study_pairs(db, study_id)
    gold = {"rexval": "ReXVal", "radpref": "RadPref"}.get(str(provenance.get("kind")), "study")
    files = dict(input_hashes(provenance))
    counts = preference = None
    if mode == "pairwise":
        preference = _study_preference(db, study_id, ratings, study_name)
        if not np.isfinite(preference.comparison_mean_a + preference.comparison_mean_b).any():
            raise InvalidInput(f"study={study_name}: no comparison has a completed judgement "
                               "rating both candidates yet")
    else:
        rated = int(np.isfinite(ratings.mean_errors("total")).sum())
        if rated < 2:
            raise InvalidInput(
                f"study={study_name}: {rated} rated pair(s); the benchmark needs at least 2 "
                "(a pair counts once a rater completed it)")
        counts = lb.CountData(
            pair_ids=tuple(str(p) for p in ratings.pair_ids), cases=ratings.cases,
            sources=ratings.sources, raters=ratings.raters,
            errors={"total": ratings.rater_errors("total"),
                    "significant": ratings.rater_errors("significant")})
    return Dataset(name=label, spec=DatasetSpec("study", study_name, f"study={study_name}"),
                   gold_set=gold, counts=counts, preference=preference,
                   items=tuple(str(p) for p in ratings.pair_ids), pairs=pairs,
                   has_images=any(p.images for p in pairs), files=files, ratings=ratings)


def load_dataset(db: Database, spec: DatasetSpec, name: str) -> Dataset:
    """Read one gold set (see the module docstring)."""
    if spec.kind == "rexval":
        return load_rexval_folder(Path(spec.location).expanduser(), name)
    if spec.kind == "radpref":
        return load_radpref_folder(Path(spec.location).expanduser(), name)
    return load_study(db, spec.location, name)


def _names(specs: Sequence[DatasetSpec]) -> list[str]:
    """``rexval``, ``radpref``, ``study:NAME``; a repeated one gets ``#2``, ``#3``."""
    out: list[str] = []
    for spec in specs:
        base = spec.kind if spec.kind != "study" else f"study:{spec.location}"
        name, n = base, 1
        while name in out:
            n += 1
            name = f"{base}#{n}"
        out.append(name)
    return out


# ------------------------------------------------------------------------------ metrics


@dataclass(frozen=True)
class MetricPlan:
    """What to score: families with their keys, and the families that cannot run here.

    Attributes:
        requested: The names as given (``["available"]`` for every family that can run).
        families: Family -> keys to score, in request order.
        by_family: Families named whole (one n/a row each); the others are named by key.
        unavailable: Family -> why it cannot run here (n/a on every dataset).
    """

    requested: tuple[str, ...]
    families: dict[str, list[str]]
    by_family: frozenset[str]
    unavailable: dict[str, str] = field(default_factory=dict)

    def not_available(self, family: str, reason: str) -> list[lb.NotAvailable]:
        """The n/a rows of ``family``: one for a family named whole, else one per key."""
        if family in self.by_family:
            return [lb.NotAvailable(key=family, family=family, reason=reason)]
        return [lb.NotAvailable(key=k, family=family, reason=reason)
                for k in self.families[family]]


def _availability(family: str) -> str | None:
    """Why ``family`` cannot run here without downloads (``None``: it can), by
    :func:`backend.metrics.registry.availability`, so plug-ins answer for themselves."""
    try:
        return registry.availability(family)
    except MetricUnavailable as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a plug-in's constructor may raise anything
        return f"{type(exc).__name__}: {exc}"


def plan_metrics(names: Sequence[str] | None) -> MetricPlan:
    """Resolve ``--metrics``: keys or families, or ``available`` (every family that can run
    here without a download, :func:`backend.metrics.registry.availability`'s rule).

    Families that cannot run here are kept with their reason (n/a rows), never dropped.

    Only the names are checked here (cheap); :func:`check_availability` asks each family.

    Args:
        names: The names (comma-separated items are split); ``None`` means ``available``.

    Raises:
        InvalidInput: an unknown name, or a metric that does not score pairs.
    """
    given = [n.strip() for raw in (names or [AVAILABLE]) for n in raw.split(",") if n.strip()]
    if not given:
        raise InvalidInput("--metrics: give metric keys or families, or 'available'")
    if AVAILABLE in given:
        if len(given) > 1:
            raise InvalidInput("--metrics: 'available' stands alone (it means every family "
                               "that can run here)")
        families = {f: list(e.keys) for f, e in registry.ENTRIES.items() if e.per_pair}
        by_family = frozenset(families)
    else:
        try:
            families = registry.resolve(given)
            requested_keys(given)
        except registry.UnknownMetric as exc:
            raise InvalidInput(f"--metrics: {exc}") from None
        except ScoringError as exc:
            raise InvalidInput(f"--metrics: {exc}") from None
        by_family = frozenset(n for n in given if n in registry.ENTRIES)
    return MetricPlan(requested=tuple(given), families=families, by_family=by_family)


def check_availability(plan: MetricPlan) -> MetricPlan:
    """``plan`` with the families that cannot run here and why."""
    unavailable = {}
    for family in plan.families:
        reason = _availability(family)
        if reason is not None:
            unavailable[family] = reason
    return MetricPlan(requested=plan.requested, families=plan.families,
                      by_family=plan.by_family, unavailable=unavailable)


def _is_image_family(family: str) -> bool:
    entry = registry.ENTRIES.get(family)
    return entry is not None and entry.kind == "image"


@dataclass
class Scored:
    """A dataset's metric values and what scoring did."""

    values: list[lb.MetricValues]
    not_available: list[lb.NotAvailable]
    scoring: dict[str, dict[str, Any]]
    computed: int = 0
    cached: int = 0


def score_dataset(db: Database, ds: Dataset, plan: MetricPlan, pool: MetricPool, *,
                  device: str = "auto", progress: ProgressFn | None = None) -> Scored:
    """Score a gold set through the cache (the runner, ``keep_going``) and align the values.

    Raises:
        InvalidInput: a bad device.
    """
    scoring: dict[str, dict[str, Any]] = {}
    na: list[lb.NotAvailable] = []
    to_score: list[str] = []
    for family in plan.families:
        if family in plan.unavailable:
            reason = f"unavailable here: {plan.unavailable[family]}"
        elif _is_image_family(family) and not ds.has_images:
            reason = f"needs images: {ds.name} has none (a text-only gold set)"
        else:
            to_score.append(family)
            continue
        scoring[family] = {"status": "n/a", "reason": reason}
        na.extend(plan.not_available(family, reason))
    values: list[lb.MetricValues] = []
    out = Scored(values=values, not_available=na, scoring=scoring)
    if not to_score:
        return out
    keys = [k for f in to_score for k in plan.families[f]]
    if not keys:
        return out

    def tick(done: int, total: int, message: str) -> None:
        if progress is not None:
            progress(done, total, f"{ds.name}: {message}")

    try:
        table = score(ds.pairs, keys, device=device, db=db, keep_going=True, pool=pool,
                      progress=tick)
    except ScoringError as exc:
        raise InvalidInput(str(exc)) from None
    where = {item: i for i, item in enumerate(ds.items)}
    slots = [where.get(pid) for pid in table.ids]
    for family in to_score:
        run = table.families[family]
        entry = {"status": run.status, "computed": run.computed, "cached": run.cached,
                 "seconds": round(run.seconds, 3), "signature": run.signature or None,
                 "signature_hash": run.signature_hash or None, "device": run.device}
        out.computed += run.computed
        out.cached += run.cached
        if run.status != "done":
            reason = (f"unavailable here: {run.unavailable}" if run.unavailable
                      else f"failed: {run.failed}")
            entry["reason"] = reason
            na.extend(plan.not_available(family, reason))
        scoring[family] = entry
        if run.status != "done":
            continue
        for key in plan.families[family]:
            column = np.full(len(ds.items), np.nan)
            for slot, value in zip(slots, table.columns[key], strict=True):
                if slot is not None:
                    column[slot] = value
            values.append(lb.MetricValues(
                key=key, family=family, values=column,
                higher_is_better=registry.higher_is_better(key), signature=run.signature,
                signature_hash=run.signature_hash))
    # Request order, whatever the step that found a family n/a.
    order = {f: i for i, f in enumerate(plan.families)}
    na.sort(key=lambda u: order.get(u.family, len(order)))
    out.scoring = {f: scoring[f] for f in plan.families if f in scoring}
    return out


def _study_keys(db: Database, ds: Dataset, family: str | None = None) -> list[str]:
    """Output keys with stored scores on the study's pairs (of one family, if given)."""
    assert ds.ratings is not None
    stmt = (select(MetricScore.key).join(Pair, Pair.input_hash == MetricScore.input_hash)
            .where(Pair.study_id == ds.ratings.study_id).distinct())
    if family is not None:
        stmt = stmt.where(MetricScore.family == family)
    with db.read() as s:
        return sorted(set(s.scalars(stmt)))


def _columns(db: Database, ds: Dataset, keys: Sequence[str] | None
             ) -> tuple[list[lb.MetricValues], list[lb.NotAvailable]]:
    """Stored columns as ``correlate`` reads them (one signature per key, imported scores
    with the direction given at import); a key without a known direction is n/a."""
    from radconcord.backend.services.evaluation.study_data import load_metric_columns

    assert ds.ratings is not None
    na: list[lb.NotAvailable] = []
    try:
        columns = load_metric_columns(db, ds.ratings, keys, required=False)
    except AnalysisInputError:
        # Some stored key has no direction (neither registered nor imported): load the
        # registered keys and say why the others are left out.
        wanted = list(keys) if keys is not None else _study_keys(db, ds)
        known = []
        for key in wanted:
            try:
                registry.entry_of_key(key)
                known.append(key)
            except registry.UnknownMetric:
                na.append(lb.NotAvailable(key=key, family="", reason=(
                    "not in the metric registry and not imported: its direction is unknown")))
        columns = load_metric_columns(db, ds.ratings, known, required=False) if known else {}
    values = [lb.MetricValues(key=c.key, family=c.family, values=c.values,
                              higher_is_better=c.higher_is_better, signature=c.signature,
                              signature_hash=c.signature_hash) for c in columns.values()]
    return values, na


def stored_values(db: Database, ds: Dataset) -> Scored:
    """A study's stored scores, every key as ``correlate`` reads it (the dashboard's view:
    nothing is scored)."""
    values, na = _columns(db, ds, None)
    return Scored(values=values, not_available=na, scoring={})


def add_imported(db: Database, ds: Dataset, scored: Scored) -> None:
    """Add a study's imported keys (``import-scores``: values computed elsewhere, family
    ``external``) that the run did not score itself; they are ranked like the others, their
    signature names the imported file."""
    from radconcord.backend.analysis import data

    family = getattr(data, "EXTERNAL_FAMILY", "external")
    have = {v.key for v in scored.values} | {u.key for u in scored.not_available}
    keys = [k for k in _study_keys(db, ds, family) if k not in have]
    if not keys:
        return
    values, na = _columns(db, ds, keys)
    scored.values.extend(values)
    scored.not_available.extend(na)
    scored.scoring[family] = {"status": "imported", "keys": [v.key for v in values],
                              "computed": 0, "cached": 0}


# ------------------------------------------------------------------------------ the run


def reported_figures() -> list[lb.Reported]:
    """The published ReXVal figures (``correlate``'s table, from the metric cards' "Values
    from papers" sections), each with the card that cites it."""
    from radconcord.backend.analysis.report import PUBLISHED

    cards = Path(registry.__file__).resolve().parent / "cards"
    out = []
    for paper, metric, key, value in PUBLISHED:
        where = ""
        if key is not None:
            try:
                family = registry.entry_of_key(key).family
            except registry.UnknownMetric:
                family = key
            card = cards / f"{family}.md"
            where = f"backend/metrics/cards/{card.name}" if card.is_file() else ""
        out.append(lb.Reported(key=key, metric=metric, value=value, source=paper, where=where))
    return out


def versions() -> dict[str, str | None]:
    """The report's package versions plus the metric packages'."""
    out = package_versions()
    for name in METRIC_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


@dataclass
class BenchmarkResult:
    """The leaderboard document and what the run scored.

    Attributes:
        doc: The ``leaderboard.json`` document.
        computed: Distinct pair inputs computed now, over every family and dataset (0 on a
            rerun with the same inputs).
        cached: Distinct pair inputs found in the cache.
    """

    doc: dict[str, Any]
    computed: int = 0
    cached: int = 0


def _protocol(plan_requested: Sequence[str], bootstrap: int, seed: int, level: float
              ) -> dict[str, Any]:
    return {"name": "radconcord-benchmark", "version": lb.PROTOCOL_VERSION,
            "text": list(lb.PROTOCOL), "headline": dict(lb.HEADLINE), "seed": seed,
            "bootstrap": bootstrap, "level": level,
            "resampling": "case (all candidates of one reference together)",
            "correction": "holm (over the metrics tested against the best)",
            "preference_source": "mean_rating",
            "metrics_requested": list(plan_requested)}


def _board(ds: Dataset, scored: Scored, *, bootstrap: int, seed: int, level: float
           ) -> dict[str, Any]:
    try:
        if ds.counts is not None:
            board = lb.count_board(
                ds.counts, scored.values, unavailable=scored.not_available,
                reported=reported_figures() if ds.gold_set == "ReXVal" else (),
                resamples=bootstrap, seed=seed, level=level)
        else:
            assert ds.preference is not None
            board = lb.preference_board(ds.preference, scored.values,
                                        unavailable=scored.not_available, resamples=bootstrap,
                                        seed=seed, level=level)
    except lb.LeaderboardInputError as exc:
        raise InvalidInput(f"{ds.spec.text}: {exc}") from None
    return lb.board_json(board)


def _dataset_json(ds: Dataset, scored: Scored, board: dict[str, Any]) -> dict[str, Any]:
    return {"name": ds.name, "gold_set": ds.gold_set,
            "source": {"kind": ds.spec.kind, "location": ds.spec.location},
            "files": ds.files, "warnings": list(ds.warnings), "scoring": scored.scoring,
            "board": board}


def _document(datasets: list[dict[str, Any]], signatures: dict[str, Any],
              protocol: dict[str, Any], command: Sequence[str] | None,
              unavailable: Mapping[str, str]) -> dict[str, Any]:
    from radconcord.backend import config

    return to_json_safe({
        "tool": "radconcord benchmark", "radconcord_version": config.APP_VERSION,
        "generated_at": clock.utcnow().isoformat(timespec="seconds"),
        "command": list(command) if command is not None else None,
        "protocol": protocol, "seed": protocol["seed"], "bootstrap": protocol["bootstrap"],
        "versions": versions(), "unavailable_here": dict(unavailable),
        "signatures": signatures, "datasets": datasets,
    })


def _signatures(name: str, scored: Scored, into: dict[str, Any]) -> None:
    into[name] = {v.key: {"family": v.family, "signature": v.signature,
                          "signature_hash": v.signature_hash,
                          "higher_is_better": v.higher_is_better} for v in scored.values}


def run_benchmark(
    db: Database,
    actor: Actor,
    *,
    datasets: Sequence[str | DatasetSpec],
    metrics: Sequence[str] | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
    level: float = lb.DEFAULT_LEVEL,
    device: str = "auto",
    progress: ProgressFn | None = None,
    command: Sequence[str] | None = None,
    pool: MetricPool | None = None,
) -> BenchmarkResult:
    """Read, score and rank every gold set (admin); see the module docstring.

    Every dataset is read before anything is scored, so a bad folder fails at once.

    Args:
        db: The database: the score cache, and where ``study=NAME`` sets live.
        actor: An admin (the command line's system actor).
        datasets: ``KIND=LOCATION`` texts or parsed specs.
        metrics: Keys or families; ``None`` or ``["available"]``: every family that can run
            here without a download.
        bootstrap: Resamples of every interval and test (0: none).
        seed: Seed of the resamples.
        level: Interval coverage.
        device: ``auto``, ``cpu`` or ``cuda[:N]`` for metrics with a model.
        progress: ``progress(done, total, message)`` while scoring.
        command: The command line, recorded in the JSON.
        pool: Warm metric instances to reuse (default: a new pool for this run).

    Raises:
        PermissionDenied: not an admin.
        InvalidInput: a bad dataset argument, folder or file, an unknown metric, a bad
            option; the message is one line naming the file or argument and what is wrong.
    """
    require_admin(actor)
    if not datasets:
        raise InvalidInput("--dataset: give at least one (rexval=DIR, radpref=DIR or "
                           "study=NAME)")
    if bootstrap < 0:
        raise InvalidInput(f"--bootstrap must be >= 0, got {bootstrap}")
    if not 0.0 < level < 1.0:
        raise InvalidInput(f"level must lie in (0, 1), got {level}")
    specs = [d if isinstance(d, DatasetSpec) else parse_dataset(d) for d in datasets]
    plan = plan_metrics(metrics)  # names first: a typo fails before any file is read
    loaded = [load_dataset(db, spec, name) for spec, name in zip(specs, _names(specs),
                                                                 strict=True)]
    plan = check_availability(plan)
    pool = pool or MetricPool()
    blocks: list[dict[str, Any]] = []
    signatures: dict[str, Any] = {}
    result = BenchmarkResult(doc={})
    for ds in loaded:
        scored = score_dataset(db, ds, plan, pool, device=device, progress=progress)
        if ds.ratings is not None:
            add_imported(db, ds, scored)
        result.computed += scored.computed
        result.cached += scored.cached
        blocks.append(_dataset_json(ds, scored, _board(ds, scored, bootstrap=bootstrap,
                                                       seed=seed, level=level)))
        _signatures(ds.name, scored, signatures)
    result.doc = _document(blocks, signatures, _protocol(plan.requested, bootstrap, seed, level),
                           command, plan.unavailable)
    return result


def study_leaderboard(
    db: Database,
    actor: Actor,
    *,
    study_names: Sequence[str],
    bootstrap: int = 1000,
    seed: int = 0,
    level: float = lb.DEFAULT_LEVEL,
) -> dict[str, Any]:
    """The leaderboard document of studies of the database from their stored scores (admin).

    The protocol of :func:`run_benchmark`; the metrics are every key scored on each study
    (nothing is scored here, so the dashboard never loads a model).

    Raises:
        PermissionDenied: not an admin.
        InvalidInput: no study named, a study that does not exist or cannot be benchmarked.
    """
    require_admin(actor)
    if not study_names:
        raise InvalidInput("choose at least one study")
    specs = [DatasetSpec("study", n, f"study={n}") for n in study_names]
    blocks: list[dict[str, Any]] = []
    signatures: dict[str, Any] = {}
    for spec, name in zip(specs, _names(specs), strict=True):
        ds = load_study(db, spec.location, name)
        scored = stored_values(db, ds)
        if not scored.values:
            raise InvalidInput(f"study={spec.location}: no metric scores yet (score it first)")
        blocks.append(_dataset_json(ds, scored, _board(ds, scored, bootstrap=bootstrap,
                                                       seed=seed, level=level)))
        _signatures(ds.name, scored, signatures)
    return _document(blocks, signatures, _protocol(["stored scores"], bootstrap, seed, level),
                     None, {})


# ------------------------------------------------------------------------------ outputs


def csv_text(doc: Mapping[str, Any]) -> str:
    """``leaderboard.csv`` (see :data:`backend.analysis.leaderboard.CSV_COLUMNS`); cells are
    formula-safe, a missing value is an empty cell."""
    return records_to_csv(lb.csv_rows(doc.get("datasets") or []), lb.CSV_COLUMNS)


def html_text(doc: Mapping[str, Any], *, inline_plotlyjs: bool = True) -> str:
    """``leaderboard.html``: self-contained (plotly.js inlined)."""
    from radconcord.backend.analysis.leaderboard_html import render_html
    from radconcord.backend.figures.leaderboard import forest_markup

    plotlyjs = None
    if inline_plotlyjs:
        from plotly.offline import get_plotlyjs

        plotlyjs = get_plotlyjs()
    return render_html(doc, plotlyjs=plotlyjs, forest=forest_markup)


def write_outputs(doc: Mapping[str, Any], out_dir: str | Path, *,
                  inline_plotlyjs: bool = True) -> list[Path]:
    """Write ``leaderboard.json``, ``.csv`` and ``.html`` into ``out_dir`` (created).

    Each file is replaced atomically (a reader sees the old file or the new one).

    Raises:
        InvalidInput: ``out_dir`` is a file or cannot be created.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--output {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"--output {out}: cannot create the folder ({exc.strerror})") \
            from None
    texts = {JSON_FILE: json.dumps(doc, indent=2, allow_nan=False) + "\n",
             CSV_FILE: csv_text(doc), HTML_FILE: html_text(doc, inline_plotlyjs=inline_plotlyjs)}
    paths = []
    for name, text in texts.items():
        path = out / name
        with atomic_write(path, newline="") as fh:
            fh.write(text)
        paths.append(path)
    return paths


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """A few lines per dataset for the terminal: the headline ranking."""
    lines = []
    for ds in doc.get("datasets") or []:
        board = ds["board"]
        if board["kind"] == "counts":
            tb = board["targets"]["total"]
            ceiling = (tb.get("ceiling") or {}).get("value")
            head = (f"{ds['name']}: {tb['n_pairs']} rated pairs, headline Kendall tau-b vs "
                    f"total errors (pooled); ceiling "
                    f"{'n/a' if ceiling is None else f'{ceiling:.3f}'}")
            rows = [(r["rank"], r["key"], r["kendall_tau_b"], r["status"], r["reason"])
                    for r in tb["rows"]]
        else:
            head = (f"{ds['name']}: {board['n_judged']} judged comparisons, headline pairwise "
                    "agreement")
            rows = [(r["rank"], r["key"], r["pairwise_agreement"], r["status"], r["reason"])
                    for r in board["rows"]]
        lines.append(head)
        for rank, key, est, status, reason in rows:
            if status == "ranked":
                lo, hi = est["ci95"]
                ci = "" if lo is None or hi is None else f" [{lo:.3f}, {hi:.3f}]"
                lines.append(f"  {rank:>3}  {key:<28} {est['value']:.3f}{ci}")
            else:
                lines.append(f"  n/a  {key:<28} {reason}")
    return lines


__all__ = [
    "AVAILABLE",
    "CSV_FILE",
    "HTML_FILE",
    "JSON_FILE",
    "KINDS",
    "BenchmarkResult",
    "Dataset",
    "DatasetSpec",
    "MetricPlan",
    "csv_text",
    "html_text",
    "load_dataset",
    "load_radpref_folder",
    "load_rexval_folder",
    "load_study",
    "parse_dataset",
    "plan_metrics",
    "reported_figures",
    "run_benchmark",
    "score_dataset",
    "add_imported",
    "check_availability",
    "stored_values",
    "study_leaderboard",
    "summary_lines",
    "write_outputs",
]
