"""RadConcord from Python: score pairs, list metrics, correlate with raters, load a study.

Every function takes keyword arguments only (a swapped reference/candidate is a silent bug)
and returns pandas objects. Nothing here touches a database unless asked: :func:`score`
computes in memory unless ``cache=`` names a database, :func:`correlate` works on arrays, and
only :func:`load_study` reads a study database.

The numbers are the command line's: :func:`score` runs the same runner as
``radconcord score`` (``python -m backend score``) with the same metric code and options, and
:func:`correlate` draws the same bootstrap resamples as ``radconcord correlate`` for a given
seed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.metrics.base import MetricUnavailable

if TYPE_CHECKING:
    import pandas as pd

    from backend.scoring.runner import MetricPool

__all__ = [
    "InputError",
    "MetricUnavailable",
    "ProgressFn",
    "Study",
    "correlate",
    "correlate_study",
    "load_study",
    "metrics",
    "score",
]

ProgressFn = Callable[[int, int, str], None]
ImageArg = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None

# Where the messages of argument errors say they come from.
_SCORE = "radconcord.score"
_CORRELATE = "radconcord.correlate"


class InputError(ValueError):
    """An argument the API cannot use; the message names the argument and the item."""


def _database(target: str | os.PathLike[str] | None) -> Any:  # noqa: ANN401 - db.session.Database
    """A :class:`db.session.Database` for a URL or a SQLite file path."""
    from db.session import Database

    text = os.fspath(target) if target is not None else None
    if text is not None and "://" not in text:
        path = Path(text).expanduser()
        if path.is_dir():
            raise InputError(f"{path}: is a folder; give a database file or a database URL")
        text = f"sqlite:///{path.resolve()}"
    return Database(text)


def _texts(name: str, values: Any) -> list[str]:  # noqa: ANN401 - anything a user passes
    """Check one side of the pairs: a sequence of report texts within the reader's limits."""
    from backend.errors import InvalidInput
    from backend.scoring.pairs_reader import check_report

    try:
        if isinstance(values, str | bytes):
            raise TypeError
        items = list(values)
    except TypeError:
        raise InputError(
            f"{_SCORE}: {name}: expected a list of texts, got {type(values).__name__}"
        ) from None
    out: list[str] = []
    for i, value in enumerate(items):
        try:
            out.append(check_report(_SCORE, f"{name}[{i}]", name, value))
        except InvalidInput as exc:
            raise InputError(str(exc)) from None
    return out


def _pair_images(images: Sequence[ImageArg] | None, n: int) -> list[tuple[Path, ...]]:
    if images is None:
        return [() for _ in range(n)]
    if isinstance(images, str | bytes | os.PathLike):
        raise InputError(f"{_SCORE}: images: expected one entry per pair, got a single path")
    items = list(images)
    if len(items) != n:
        raise InputError(f"{_SCORE}: images: {len(items)} entries for {n} pairs")
    out: list[tuple[Path, ...]] = []
    for i, item in enumerate(items):
        if item is None:
            out.append(())
            continue
        paths = [item] if isinstance(item, str | os.PathLike) else list(item)
        resolved: list[Path] = []
        for p in paths:
            path = Path(p).expanduser()
            if not path.is_file():
                raise InputError(f"{_SCORE}: images[{i}]: no such file: {path}")
            resolved.append(path.resolve())
        out.append(tuple(resolved))
    return out


def _pair_ids(ids: Sequence[Any] | None, n: int) -> list[str]:
    if ids is None:
        return [str(i) for i in range(n)]
    items = [str(i) for i in ids]
    if len(items) != n:
        raise InputError(f"{_SCORE}: ids: {len(items)} ids for {n} pairs")
    seen: set[str] = set()
    for i, pid in enumerate(items):
        if pid in seen:
            raise InputError(f"{_SCORE}: ids[{i}]: duplicate id '{pid}'")
        seen.add(pid)
    return items


def score(
    *,
    references: Sequence[str],
    candidates: Sequence[str],
    metrics: Sequence[str] | str,
    ids: Sequence[Any] | None = None,
    images: Sequence[ImageArg] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    device: str = "auto",
    batch_size: int = 32,
    cache: str | os.PathLike[str] | None = None,
    skip_unavailable: bool = False,
    progress: ProgressFn | None = None,
    pool: MetricPool | None = None,
) -> pd.DataFrame:
    """Score reference/candidate pairs with metrics; one row per pair, one column per key.

    The values are those of ``radconcord score --input PAIRS --metrics ...`` on the same
    pairs (same runner, same metric code). Pairs with an empty reference or candidate get
    NaN and are listed in ``df.attrs["empty_ids"]``.

    Args:
        references: Reference reports, one per pair.
        candidates: Candidate (generated) reports, one per pair, same order.
        metrics: Families or output keys (``["bleu4", "bertscore_f"]``, or ``"bleu4,rougeL"``);
            a family gives all its keys (``"bleu"`` -> bleu1..bleu4). See :func:`metrics`.
        ids: Pair ids for the index (default ``"0"``, ``"1"``, ...); must be unique.
        images: For image metrics (vlscore): per pair a path, a list of paths or None.
        options: Metric options, ``{"bertscore": {"idf": True}}`` (as ``--set
            bertscore.idf=true``); they are part of each signature.
        device: ``"auto"``, ``"cpu"`` or ``"cuda[:N]"`` for metrics that load models.
        batch_size: Pairs per metric call.
        cache: A database URL or SQLite file whose score cache is read and filled (created
            if absent). ``None`` (default): everything is computed, nothing is written.
        skip_unavailable: When a metric cannot run here, give its keys NaN columns and its
            reason in ``df.attrs["unavailable"]`` instead of raising.
        progress: Called as ``progress(done, total, message)`` after each batch.
        pool: A :class:`backend.scoring.runner.MetricPool` whose warm models to reuse across
            calls (default: a new one, freed when the call returns).

    Returns:
        A float DataFrame indexed by pair id (``"id"``), columns in request order.
        ``df.attrs``: ``signatures`` and ``signature_hashes`` (key -> settings string and its
        hash, as stored in the cache and shown by the CLI), ``corpus`` (corpus-level values
        such as ``bleu4_corpus``), ``unavailable`` (family -> reason), ``empty_ids``.

    Raises:
        InputError: Lengths differ, a text is not text or too long, an unknown metric or
            option, a bad device.
        MetricUnavailable: A metric cannot run here (missing weights, package or JRE) and
            ``skip_unavailable`` is false; the message says what to install.
        backend.scoring.runner.MetricFailed: A metric raised while scoring.

    Example:
        >>> import radconcord
        >>> df = radconcord.score(references=["No effusion."], candidates=["No effusion."],
        ...                       metrics=["bleu4", "rougeL"])
        >>> float(df.loc["0", "rougeL"])
        1.0
    """
    import pandas as pd

    from backend.metrics import registry
    from backend.scoring.runner import ScorePair, ScoringError, resolve_device
    from backend.scoring.runner import score as run_score
    from backend.util import file_sha256

    names = [m.strip() for m in metrics.split(",")] if isinstance(metrics, str) else list(metrics)
    if not all(isinstance(m, str) for m in names):
        raise InputError(f"{_SCORE}: metrics: expected metric names, got {metrics!r}")
    refs = _texts("references", references)
    cands = _texts("candidates", candidates)
    if len(refs) != len(cands):
        raise InputError(
            f"{_SCORE}: {len(refs)} references but {len(cands)} candidates (one of each per pair)"
        )
    pair_ids = _pair_ids(ids, len(refs))
    pair_images = _pair_images(images, len(refs))
    if batch_size < 1:
        raise InputError(f"{_SCORE}: batch_size must be at least 1 (got {batch_size})")
    try:
        # The name is checked now, even when no requested metric loads a model.
        resolve_device(device, needs_model=False)
    except ScoringError as exc:
        raise InputError(f"{_SCORE}: {exc}") from None
    pairs = []
    for pid, ref, cand, imgs in zip(pair_ids, refs, cands, pair_images, strict=True):
        shas = tuple(file_sha256(p) for p in imgs)
        # The cache key is ScorePair's own (the CLI's PAIRS files hash the same way).
        pairs.append(ScorePair(id=pid, reference=ref, candidate=cand, images=imgs,
                               image_sha256s=shas))
    opts = {str(k): dict(v) for k, v in (options or {}).items()}
    # Options may name a family by one of its keys, as --set does.
    opts = {registry.KEY_TO_FAMILY.get(k, k) if k not in registry.ENTRIES else k: v
            for k, v in opts.items()}
    db = _database(cache) if cache is not None else None
    try:
        table = run_score(pairs, names, options=opts, device=device, batch_size=batch_size,
                          db=db, progress=progress, skip_unavailable=skip_unavailable,
                          pool=pool)
    except ScoringError as exc:
        raise InputError(f"{_SCORE}: {exc}") from None
    finally:
        if db is not None:
            db.dispose()
    from backend.scoring.runner import requested_keys

    keys = requested_keys(names)
    data = {k: table.columns.get(k, [math.nan] * len(pair_ids)) for k in keys}
    frame = pd.DataFrame(data, index=pd.Index(pair_ids, name="id"), columns=keys, dtype=float)
    signatures: dict[str, str] = {}
    hashes: dict[str, str] = {}
    corpus: dict[str, float] = {}
    for run in table.families.values():
        if run.unavailable:
            continue
        for k in run.keys:
            if k in data:
                signatures[k] = run.signature
                hashes[k] = run.signature_hash
        corpus.update({k: float(v) for k, v in run.corpus.items()})
    frame.attrs["signatures"] = signatures
    frame.attrs["signature_hashes"] = hashes
    frame.attrs["corpus"] = corpus
    frame.attrs["unavailable"] = dict(table.unavailable)
    frame.attrs["empty_ids"] = list(table.empty_ids)
    return frame


def metrics() -> pd.DataFrame:
    """The metric catalogue: one row per output key, with availability here and why not.

    Returns:
        Columns ``key, family, kind, higher_is_better, available, reason, needs_model,
        needs_image, signature`` in registry order; ``reason`` says what to install when a
        family cannot run here. Same content as ``radconcord metrics --json``.
    """
    import pandas as pd

    from backend.services.scoring import metric_catalog

    rows = []
    for m in metric_catalog():
        for k in m.keys:
            rows.append({
                "key": k, "family": m.family, "kind": m.kind,
                "higher_is_better": m.directions.get(k), "available": m.available,
                "reason": m.reason, "needs_model": m.needs_model, "needs_image": m.needs_image,
                "signature": m.signature,
            })
    return pd.DataFrame(rows, columns=["key", "family", "kind", "higher_is_better", "available",
                                       "reason", "needs_model", "needs_image", "signature"])


def _as_frame(scores: Any) -> pd.DataFrame:  # noqa: ANN401 - DataFrame or mapping
    import pandas as pd

    if isinstance(scores, pd.DataFrame):
        return scores
    if isinstance(scores, Mapping):
        lengths = {k: len(v) for k, v in scores.items()}
        if len(set(lengths.values())) > 1:
            raise InputError(f"{_CORRELATE}: scores: columns of different lengths: {lengths}")
        return pd.DataFrame({str(k): list(v) for k, v in scores.items()})
    raise InputError(
        f"{_CORRELATE}: scores: expected a DataFrame or a dict of key -> values,"
        f" got {type(scores).__name__}"
    )


def _target(ratings: Any, frame: pd.DataFrame) -> Any:  # noqa: ANN401 - numpy array
    """Per-pair target errors aligned with ``frame`` (mean over raters where several)."""
    import numpy as np
    import pandas as pd

    n = len(frame)
    if isinstance(ratings, pd.Series | pd.DataFrame):
        if isinstance(frame.index, pd.RangeIndex) and isinstance(ratings.index, pd.RangeIndex):
            aligned = ratings
        else:
            missing = [i for i in frame.index if i not in ratings.index]
            if missing:
                raise InputError(
                    f"{_CORRELATE}: ratings: no row for pair(s) {', '.join(map(str, missing[:5]))}"
                    " of scores (ratings are aligned to scores by index)"
                )
            aligned = ratings.loc[frame.index]
        values = aligned.to_numpy(dtype=np.float64)
    else:
        try:
            values = np.asarray(ratings, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{_CORRELATE}: ratings: not numbers ({exc})") from None
    if values.ndim == 2:
        # Pairs x raters, NaN where a rater did not rate: the mean over those who did, as the
        # study analysis does.
        if values.shape[0] != n:
            raise InputError(
                f"{_CORRELATE}: ratings: {values.shape[0]} rows (pairs) for {n} pairs of scores"
            )
        rated = np.isfinite(values)
        count = rated.sum(axis=1)
        total = np.where(rated, values, 0.0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            values = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    elif values.ndim != 1:
        raise InputError(f"{_CORRELATE}: ratings: expected 1 or 2 dimensions, got {values.ndim}")
    if values.shape[0] != n:
        raise InputError(f"{_CORRELATE}: ratings: {values.shape[0]} values for {n} pairs")
    return values


def correlate(
    *,
    scores: pd.DataFrame | Mapping[str, Sequence[float]],
    ratings: Any,  # noqa: ANN401 - Series, DataFrame or array
    metrics: Sequence[str] | None = None,
    higher_is_better: Mapping[str, bool] | None = None,
    ratings_higher_is_better: bool = False,
    bootstrap: int = 1000,
    seed: int = 0,
    cases: Sequence[Any] | None = None,
    level: float = 0.95,
    progress: ProgressFn | None = None,
) -> pd.DataFrame:
    """Kendall tau-b and Spearman of each metric against the raters, with bootstrap CIs.

    The same computation as the ``metrics`` section of ``radconcord correlate``: metrics are
    oriented so that higher is better, error counts are negated, so a positive tau means the
    metric agrees with the radiologists; pairs whose target is NaN are left out; percentile
    intervals from ``bootstrap`` resamples drawn with ``seed`` (by pair, or by case when
    ``cases`` is given). Given a study's scores and rater errors (:func:`load_study`) it
    returns the CLI's numbers for the same seed.

    Args:
        scores: One column per metric key, one row per pair (e.g. :func:`score`'s result), or
            a dict ``key -> values``.
        ratings: The radiologists per pair, aligned with ``scores``: a 1-D array or Series of
            error counts (e.g. mean total errors), or a 2-D array / DataFrame of pairs x
            raters (NaN where a rater did not rate; the mean over raters is used). pandas
            objects are aligned by index, arrays by position.
        metrics: Keys to correlate (default: every column of ``scores``).
        higher_is_better: Direction of keys the registry does not know (or to override it).
        ratings_higher_is_better: ``True`` when ``ratings`` are quality scores, not errors.
        bootstrap: Resamples for the intervals (0: none, intervals NaN).
        seed: Seed of the resampling.
        cases: Case label per pair: resample whole cases (pairs sharing a reference are not
            independent), as ``correlate --cluster case``.
        level: Interval coverage.
        progress: Called as ``progress(done, total, key)`` after each key's resamples
            (thousands of resamples of thousands of pairs take seconds per key).

    Returns:
        One row per key: ``kendall_tau_b, kendall_ci_low, kendall_ci_high, spearman,
        spearman_ci_low, spearman_ci_high, n, higher_is_better``; ``attrs`` hold
        ``n_pairs`` (pairs with a target), ``resamples``, ``seed``, ``cluster``, ``level``.

    Raises:
        InputError: Misaligned or non-numeric input, an unknown key without a direction,
            fewer than 2 rated pairs.
    """
    import numpy as np
    import pandas as pd

    from backend.analysis.bootstrap import bootstrap_many, draw_resamples
    from backend.analysis.stats import orient
    from backend.metrics import registry

    frame = _as_frame(scores)
    keys = list(metrics) if metrics is not None else [str(c) for c in frame.columns]
    absent = [k for k in keys if k not in frame.columns]
    if absent:
        raise InputError(f"{_CORRELATE}: scores has no column {', '.join(absent)}")
    if not keys:
        raise InputError(f"{_CORRELATE}: no metric to correlate")
    if bootstrap < 0:
        raise InputError(f"{_CORRELATE}: bootstrap must be >= 0, got {bootstrap}")
    directions: dict[str, bool] = {}
    for k in keys:
        if higher_is_better is not None and k in higher_is_better:
            directions[k] = bool(higher_is_better[k])
            continue
        try:
            directions[k] = registry.higher_is_better(k)
        except registry.UnknownMetric:
            raise InputError(
                f"{_CORRELATE}: '{k}' is not a registered metric key; give its direction:"
                f" higher_is_better={{'{k}': True}}"
            ) from None
    target = _target(ratings, frame)
    if ratings_higher_is_better:
        target = -target
    rated = np.flatnonzero(np.isfinite(target))
    if rated.size < 2:
        raise InputError(
            f"{_CORRELATE}: {rated.size} pair(s) have ratings; correlations need at least 2"
        )
    try:
        x = np.stack([orient(frame[k].to_numpy(dtype=np.float64), directions[k])
                      for k in keys])[:, rated]
    except (TypeError, ValueError) as exc:
        raise InputError(f"{_CORRELATE}: scores: not numbers ({exc})") from None
    clusters = None
    if cases is not None:
        labels = np.asarray(list(cases), dtype=object)
        if labels.shape != (len(frame),):
            raise InputError(f"{_CORRELATE}: cases: {labels.size} labels for {len(frame)} pairs")
        clusters = labels[rated]
    draws = draw_resamples(rated.size, bootstrap, seed, clusters) if bootstrap > 0 else None
    # One key at a time on the same resamples: identical values to one batched call at the
    # same speed (each key's work is its own), and a progress step per key.
    parts = []
    for i, key in enumerate(keys):
        (part,) = bootstrap_many(x[i : i + 1], -target[rated][None, :], resamples=0, seed=seed,
                                 level=level, draws=draws)
        parts.append(part)
        if progress is not None:
            progress(i + 1, len(keys), key)
    kendall_ci = np.concatenate([p.kendall_ci for p in parts])
    spearman_ci = np.concatenate([p.spearman_ci for p in parts])
    out = pd.DataFrame(
        {
            "kendall_tau_b": np.concatenate([p.kendall for p in parts]),
            "kendall_ci_low": kendall_ci[:, 0],
            "kendall_ci_high": kendall_ci[:, 1],
            "spearman": np.concatenate([p.spearman for p in parts]),
            "spearman_ci_low": spearman_ci[:, 0],
            "spearman_ci_high": spearman_ci[:, 1],
            "n": np.concatenate([np.asarray(p.n, dtype=np.int64) for p in parts]),
            "higher_is_better": [directions[k] for k in keys],
        },
        index=pd.Index(keys, name="key"),
    )
    out.attrs.update({"n_pairs": int(rated.size), "resamples": draws.count if draws else 0,
                      "seed": seed, "cluster": "case" if cases is not None else "pair",
                      "level": level})
    return out


@dataclass
class Study:
    """A study read from the database (:func:`load_study`).

    Attributes:
        name: Study name.
        pairs: One row per pair in position order, indexed by the pair's database id
            (``pair_id``): ``position, case_id, source, reference, candidate, input_hash``.
        ratings: The counted ratings (completed pairs; see ``backend/analysis/data.py``),
            one row per rater x pair x category x significance: ``pair_id, rater, category,
            significant, count``.
        scores: Stored metric values, pairs x keys (one signature per key: the one covering
            most pairs), NaN where missing.
        signatures: ``key -> signature`` of the values in ``scores``.
        raters: Rater usernames.
    """

    name: str
    pairs: pd.DataFrame
    ratings: pd.DataFrame
    scores: pd.DataFrame
    signatures: dict[str, str] = field(default_factory=dict)
    raters: tuple[str, ...] = ()
    _counts: Any = field(default=None, repr=False)

    def errors(self, target: str = "total", category: int | None = None) -> pd.DataFrame:
        """Error counts per pair (rows, like ``pairs``) and rater (columns), NaN where unrated.

        Args:
            target: ``"total"`` (all errors) or ``"significant"`` (clinically significant).
            category: 1-6 for one ReXVal error category, ``None`` for their sum.

        Returns:
            What :func:`correlate` takes as ``ratings``.
        """
        import numpy as np
        import pandas as pd

        from backend.analysis.data import TARGETS

        if target not in TARGETS:
            raise InputError(f"target must be one of {TARGETS}, got {target!r}")
        c = self._counts
        if category is not None:
            if not 1 <= category <= 6:
                raise InputError(f"category must be 1..6, got {category}")
            c = c[:, :, category - 1 : category, :]
        c = c[..., 1:] if target == "significant" else c
        values = np.asarray(c).sum(axis=(2, 3)).T
        return pd.DataFrame(values, index=self.pairs.index, columns=list(self.raters))


def _study_database(database_url: str | os.PathLike[str] | None) -> Any:  # noqa: ANN401
    """An existing study database (never a new empty SQLite file)."""
    from backend import config

    url = os.fspath(database_url) if database_url is not None else config.database_url()
    if "://" not in url:
        url = f"sqlite:///{Path(url).expanduser().resolve()}"
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        # Opening would create an empty database; there is no study to read in it.
        raise InputError(f"no study database at {url.removeprefix('sqlite:///')}")
    return _database(url)


def correlate_study(
    name: str,
    *,
    database_url: str | os.PathLike[str] | None = None,
    significant_only: bool = False,
    bootstrap: int = 1000,
    seed: int = 0,
    **options: Any,
) -> dict[str, Any]:
    """Every agreement statistic of a study: exactly what ``radconcord correlate`` writes.

    Args:
        name: Study name.
        database_url: Database URL or SQLite file (default: as :func:`load_study`).
        significant_only: Target clinically significant errors instead of all errors.
        bootstrap: Resamples for the intervals (0: none).
        seed: Seed of the resampling.
        **options: The command's other settings: ``metrics``, ``cluster`` (``"pair"`` or
            ``"case"``), ``unit``, ``correction``, ``permutations``, ``fdr``, ``level``, and
            ``progress``: a ``progress(done, total, section)`` callback called as each
            section of the analysis is done.

    Returns:
        The JSON-able dict of ``correlate --output`` (``metrics``, ``per_category``,
        ``per_rater``, ``ceiling``, ``pairwise``, ``systems``, ...).

    Raises:
        InputError: No such study, no scores, too few rated pairs, or a bad setting.
    """
    import inspect

    from backend.analysis.data import AnalysisInputError
    from backend.analysis.report import correlate_study as run

    known = set(inspect.signature(run).parameters) - {"db", "study_name"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"radconcord.correlate_study: unexpected keyword {', '.join(unknown)}"
                         f" (known: {', '.join(sorted(known))})")
    db = _study_database(database_url)
    try:
        return run(db, study_name=name, significant_only=significant_only,
                   bootstrap=bootstrap, seed=seed, **options)
    except AnalysisInputError as exc:
        raise InputError(str(exc)) from None
    finally:
        db.dispose()


def load_study(name: str, *, database_url: str | os.PathLike[str] | None = None) -> Study:
    """Read a study's pairs, counted ratings and stored scores.

    Args:
        name: Study name.
        database_url: Database URL or SQLite file (default: ``DATABASE_URL`` or the data
            folder's SQLite file, as the app and the CLI use).

    Returns:
        The study; ``radconcord.correlate(scores=s.scores, ratings=s.errors())`` gives the
        ``metrics`` section of ``radconcord correlate --study NAME`` (same seed).

    Raises:
        InputError: No study of that name.
    """
    import numpy as np
    import pandas as pd
    from sqlalchemy import select

    from backend.analysis.data import AnalysisInputError, load_metric_columns, load_ratings
    from db.models import Pair, Report

    db = _study_database(database_url)
    try:
        try:
            ratings = load_ratings(db, name)
            columns = load_metric_columns(db, ratings, None)
        except AnalysisInputError as exc:
            raise InputError(str(exc)) from None
        with db.read() as s:
            ref = Report.__table__.alias("ref")
            cand = Report.__table__.alias("cand")
            texts = {
                row[0]: (row[1], row[2])
                for row in s.execute(
                    select(Pair.id, ref.c.text, cand.c.text)
                    .join(ref, ref.c.id == Pair.reference_id)
                    .join(cand, cand.c.id == Pair.candidate_id)
                    .where(Pair.study_id == ratings.study_id)
                )
            }
    finally:
        db.dispose()
    index = pd.Index(ratings.pair_ids, name="pair_id")
    pairs = pd.DataFrame(
        {
            "position": ratings.positions,
            "case_id": list(ratings.cases),
            "source": list(ratings.sources),
            "reference": [texts[int(p)][0] for p in ratings.pair_ids],
            "candidate": [texts[int(p)][1] for p in ratings.pair_ids],
            "input_hash": list(ratings.input_hashes),
        },
        index=index,
    )
    scores = pd.DataFrame({k: c.values for k, c in columns.items()}, index=index,
                          columns=list(columns), dtype=float)
    counts = ratings.counts
    # (rater, pair, category, significance) of every counted cell, in that order.
    r, i, c, sig = np.nonzero(np.isfinite(counts))
    rating_frame = pd.DataFrame({
        "pair_id": ratings.pair_ids[i],
        "rater": np.asarray(ratings.raters, dtype=object)[r] if r.size else [],
        "category": c + 1,
        "significant": sig.astype(bool),
        "count": counts[r, i, c, sig].astype(np.int64),
    })
    return Study(
        name=ratings.study,
        pairs=pairs,
        ratings=rating_frame,
        scores=scores,
        signatures={k: c.signature for k, c in columns.items()},
        raters=tuple(ratings.raters),
        _counts=counts,
    )
