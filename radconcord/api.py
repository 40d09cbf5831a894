"""RadConcord from Python: score pairs, list metrics, correlate with raters, load a study.

Every function takes keyword arguments only (a swapped reference/candidate is a silent bug)
and returns pandas objects. Nothing here touches a database unless asked: :func:`score`
computes in memory unless ``cache=`` names a database, :func:`correlate` works on arrays,
:func:`load_study` and :func:`correlate_study` read a study database, and
:func:`import_scores` writes a metric's values computed elsewhere into one.

The numbers are the command line's: :func:`score` runs the same runner as
``radconcord score`` (``python -m backend score``) with the same metric code and options, and
:func:`correlate` draws the same bootstrap resamples as ``radconcord correlate`` for a given
seed.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from radconcord.backend.metrics.base import MetricUnavailable

if TYPE_CHECKING:
    import pandas as pd

    from radconcord.backend.scoring.runner import MetricPool

__all__ = [
    "InputError",
    "MetricUnavailable",
    "ProgressFn",
    "Study",
    "correlate",
    "correlate_study",
    "import_scores",
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


def _location(where: str, arg: str, value: Any) -> str:  # noqa: ANN401 - anything a user passes
    """A database URL or file path given as ``str`` or ``os.PathLike``, as text."""
    try:
        text = os.fspath(value)
    except TypeError:
        raise InputError(
            f"{where}: {arg}: expected a database URL or file path, got {type(value).__name__}"
        ) from None
    if not isinstance(text, str):
        raise InputError(f"{where}: {arg}: expected a database URL or file path, got bytes")
    return text


def _database(target: str | os.PathLike[str] | None, *, where: str = _SCORE,
              arg: str = "cache") -> Any:  # noqa: ANN401 - db.session.Database
    """A :class:`db.session.Database` for a URL or a SQLite file path.

    Raises:
        InputError: ``target`` is not a URL or path, is a folder, or its folder cannot hold
            a SQLite database (missing and not creatable, or read-only).
    """
    from radconcord.db.session import Database, DataFolderError

    text = _location(where, arg, target) if target is not None else None
    if text is not None and "://" not in text:
        path = Path(text).expanduser()
        if path.is_dir():
            raise InputError(f"{path}: is a folder; give a database file or a database URL")
        text = f"sqlite:///{path.resolve()}"
    try:
        return Database(text)
    except DataFolderError as exc:
        raise InputError(f"{where}: {arg}: {exc}") from None


def _names(where: str, arg: str, value: Any) -> list[str]:  # noqa: ANN401 - anything a user passes
    """Metric keys or families: a sequence of names, or one comma-separated string."""
    if isinstance(value, str):
        return [m.strip() for m in value.split(",")]
    if isinstance(value, bytes) or not isinstance(value, Iterable):
        raise InputError(f"{where}: {arg}: expected a list of metric names or a "
                         f"comma-separated string, got {type(value).__name__}")
    names = list(value)
    if not all(isinstance(m, str) for m in names):
        raise InputError(f"{where}: {arg}: expected metric names, got {value!r}")
    return names


def _whole(where: str, arg: str, value: Any, minimum: int) -> int:  # noqa: ANN401
    """A whole number of at least ``minimum`` (``bool`` is refused: ``True`` is no count)."""
    # numbers.Integral: numpy's integers count too.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InputError(f"{where}: {arg} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def _sequence(where: str, arg: str, value: Any, what: str) -> list[Any]:  # noqa: ANN401
    """One entry per pair: any iterable but a single text or path."""
    if isinstance(value, str | bytes | os.PathLike) or not isinstance(value, Iterable):
        raise InputError(f"{where}: {arg}: expected {what}, got {type(value).__name__}")
    return list(value)


def _texts(name: str, values: Any) -> list[str]:  # noqa: ANN401 - anything a user passes
    """Check one side of the pairs: a sequence of report texts within the reader's limits."""
    from radconcord.backend.errors import InvalidInput
    from radconcord.backend.scoring.pairs_reader import check_report

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
    items = _sequence(_SCORE, "images", images, "one entry per pair")
    if len(items) != n:
        raise InputError(f"{_SCORE}: images: {len(items)} entries for {n} pairs")
    out: list[tuple[Path, ...]] = []
    for i, item in enumerate(items):
        if item is None:
            out.append(())
            continue
        if isinstance(item, str | os.PathLike):
            paths = [item]
        else:
            paths = _sequence(_SCORE, f"images[{i}]", item, "a path, a list of paths or None")
        resolved: list[Path] = []
        for p in paths:
            if not isinstance(p, str | os.PathLike):
                raise InputError(
                    f"{_SCORE}: images[{i}]: expected a path, got {type(p).__name__}")
            path = Path(p).expanduser()
            if not path.is_file():
                raise InputError(f"{_SCORE}: images[{i}]: no such file: {path}")
            resolved.append(path.resolve())
        out.append(tuple(resolved))
    return out


def _pair_ids(ids: Sequence[Any] | None, n: int) -> list[str]:
    if ids is None:
        return [str(i) for i in range(n)]
    items = [str(i) for i in _sequence(_SCORE, "ids", ids, "one id per pair")]
    if len(items) != n:
        raise InputError(f"{_SCORE}: ids: {len(items)} ids for {n} pairs")
    seen: set[str] = set()
    for i, pid in enumerate(items):
        if pid in seen:
            raise InputError(f"{_SCORE}: ids[{i}]: duplicate id '{pid}'")
        seen.add(pid)
    return items


def _options(options: Any) -> dict[str, dict[str, Any]]:  # noqa: ANN401 - as passed
    """``{family: {option: value}}`` checked for shape (the runner checks names and values)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InputError(f"{_SCORE}: options: expected a dict of family -> {{option: value}}, "
                         f"got {type(options).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for family, values in options.items():
        if not isinstance(values, Mapping):
            raise InputError(f"{_SCORE}: options[{family!r}]: expected a dict of option -> "
                             f"value, got {type(values).__name__}")
        out[str(family)] = dict(values)
    return out


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
            option, a bad device, an argument of the wrong type (``metrics=None``), or a
            ``cache`` whose folder cannot hold a database.
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

    from radconcord.backend.metrics import registry
    from radconcord.backend.scoring.runner import ScorePair, ScoringError, resolve_device
    from radconcord.backend.scoring.runner import score as run_score
    from radconcord.backend.util import file_sha256

    names = _names(_SCORE, "metrics", metrics)
    refs = _texts("references", references)
    cands = _texts("candidates", candidates)
    if len(refs) != len(cands):
        raise InputError(
            f"{_SCORE}: {len(refs)} references but {len(cands)} candidates (one of each per pair)"
        )
    pair_ids = _pair_ids(ids, len(refs))
    pair_images = _pair_images(images, len(refs))
    batch_size = _whole(_SCORE, "batch_size", batch_size, 1)
    if device is not None and not isinstance(device, str):
        raise InputError(f"{_SCORE}: device: expected 'auto', 'cpu' or 'cuda[:N]', "
                         f"got {type(device).__name__}")
    if progress is not None and not callable(progress):
        raise InputError(f"{_SCORE}: progress: expected a function, got {type(progress).__name__}")
    opts = _options(options)
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
    from radconcord.backend.scoring.runner import requested_keys

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
        needs_image, signature, plugin`` in registry order; ``reason`` says what to install
        when a family cannot run here; ``plugin`` names a plug-in's package and entry point
        (``None`` for a built-in family). A plug-in that could not be loaded has one row with
        ``key`` ``None`` and its error; the messages of plug-ins refused for a name clash are
        in ``.attrs["ignored_plugins"]``. Same content as ``radconcord metrics --json``.
    """
    import pandas as pd

    from radconcord.backend.services.scores.scoring import ignored_plugins, metric_catalog

    rows = []
    for m in metric_catalog():
        for k in m.keys or (None,):
            rows.append({
                "key": k, "family": m.family, "kind": m.kind,
                "higher_is_better": m.directions.get(k) if k is not None else None,
                "available": m.available, "reason": m.reason, "needs_model": m.needs_model,
                "needs_image": m.needs_image, "signature": m.signature, "plugin": m.origin,
            })
    frame = pd.DataFrame(rows, columns=["key", "family", "kind", "higher_is_better",
                                        "available", "reason", "needs_model", "needs_image",
                                        "signature", "plugin"])
    frame.attrs["ignored_plugins"] = ignored_plugins()
    return frame


def _as_frame(scores: Any) -> pd.DataFrame:  # noqa: ANN401 - DataFrame or mapping
    import pandas as pd

    if isinstance(scores, pd.DataFrame):
        return scores
    if isinstance(scores, Mapping):
        for k, v in scores.items():
            if isinstance(v, str | bytes) or not isinstance(v, Iterable):
                raise InputError(f"{_CORRELATE}: scores[{k!r}]: expected a list of values, got "
                                 f"{type(v).__name__}")
        scores = {k: list(v) for k, v in scores.items()}
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
        metrics: Keys to correlate (default: every column of ``scores``), or one
            comma-separated string.
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
            fewer than 2 rated pairs, an argument of the wrong type (``metrics=5``).
    """
    import numpy as np
    import pandas as pd

    from radconcord.backend.analysis.data import AnalysisInputError
    from radconcord.backend.analysis.report import correlate_metrics
    from radconcord.backend.metrics import registry

    frame = _as_frame(scores)
    if metrics is not None:
        keys = [k for k in _names(_CORRELATE, "metrics", metrics) if k]
    else:
        keys = [str(c) for c in frame.columns]
    absent = [k for k in keys if k not in frame.columns]
    if absent:
        raise InputError(f"{_CORRELATE}: scores has no column {', '.join(absent)}")
    if not keys:
        raise InputError(f"{_CORRELATE}: no metric to correlate")
    bootstrap = _whole(_CORRELATE, "bootstrap", bootstrap, 0)
    if higher_is_better is not None and not isinstance(higher_is_better, Mapping):
        raise InputError(f"{_CORRELATE}: higher_is_better: expected a dict of key -> bool, got "
                         f"{type(higher_is_better).__name__}")
    if progress is not None and not callable(progress):
        raise InputError(f"{_CORRELATE}: progress: expected a function, got "
                         f"{type(progress).__name__}")
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
    rated = int(np.isfinite(target).sum())
    if rated < 2:
        raise InputError(
            f"{_CORRELATE}: {rated} pair(s) have ratings; correlations need at least 2"
        )
    try:
        values = {k: frame[k].to_numpy(dtype=np.float64) for k in keys}
    except (TypeError, ValueError) as exc:
        raise InputError(f"{_CORRELATE}: scores: not numbers ({exc})") from None
    labels = None
    if cases is not None:
        labels = np.asarray(_sequence(_CORRELATE, "cases", cases, "one case label per pair"),
                            dtype=object)
        if labels.shape != (len(frame),):
            raise InputError(f"{_CORRELATE}: cases: {labels.size} labels for {len(frame)} pairs")
    try:
        result = correlate_metrics(values, target, higher_is_better=directions,
                                   bootstrap=bootstrap, seed=seed, cases=labels, level=level,
                                   progress=progress)
    except AnalysisInputError as exc:
        raise InputError(f"{_CORRELATE}: {exc}") from None
    out = pd.DataFrame(
        {
            "kendall_tau_b": result.kendall,
            "kendall_ci_low": result.kendall_ci[:, 0],
            "kendall_ci_high": result.kendall_ci[:, 1],
            "spearman": result.spearman,
            "spearman_ci_low": result.spearman_ci[:, 0],
            "spearman_ci_high": result.spearman_ci[:, 1],
            "n": result.n,
            "higher_is_better": list(result.higher_is_better),
        },
        index=pd.Index(keys, name="key"),
    )
    out.attrs.update({"n_pairs": result.n_pairs, "resamples": result.resamples,
                      "seed": result.seed, "cluster": result.cluster, "level": result.level})
    return out


@dataclass
class Study:
    """A study read from the database (:func:`load_study`).

    Attributes:
        name: Study name.
        pairs: One row per pair in position order, indexed by the pair's database id
            (``pair_id``): ``position, case_id, source, reference, candidate, input_hash``.
        ratings: The counted ratings (completed pairs; see ``backend/analysis/data.py``,
            read by ``backend/services/evaluation/study_data.py``),
            one row per rater x pair x category x significance: ``pair_id, rater, category,
            significant, count``.
        scores: Stored metric values, pairs x keys (one signature per key: the one covering
            most pairs), NaN where missing.
        signatures: ``key -> signature`` of the values in ``scores``.
        raters: Rater usernames.
        directions: ``key -> higher_is_better`` of every column of ``scores`` (imported keys
            included: pass it as ``correlate(..., higher_is_better=study.directions)``).
        imported: ``key -> `` where the values of a key imported from a file
            (:func:`import_scores`) came from: description, source, file name and sha256, ...
    """

    name: str
    pairs: pd.DataFrame
    ratings: pd.DataFrame
    scores: pd.DataFrame
    signatures: dict[str, str] = field(default_factory=dict)
    raters: tuple[str, ...] = ()
    directions: dict[str, bool] = field(default_factory=dict)
    imported: dict[str, dict[str, Any]] = field(default_factory=dict)
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

        from radconcord.backend.analysis.data import TARGETS

        if target not in TARGETS:
            raise InputError(f"target must be one of {TARGETS}, got {target!r}")
        c = self._counts
        if category is not None:
            if isinstance(category, bool) or not isinstance(category, numbers.Integral) or not (
                    1 <= category <= 6):
                raise InputError(f"category must be 1..6, got {category}")
            c = c[:, :, category - 1 : category, :]
        c = c[..., 1:] if target == "significant" else c
        values = np.asarray(c).sum(axis=(2, 3)).T
        return pd.DataFrame(values, index=self.pairs.index, columns=list(self.raters))


def _study_database(database_url: str | os.PathLike[str] | None,
                    where: str) -> Any:  # noqa: ANN401 - db.session.Database
    """An existing study database (never a new empty SQLite file)."""
    from radconcord.backend import config

    url = (_location(where, "database_url", database_url) if database_url is not None
           else config.database_url())
    if "://" not in url:
        url = f"sqlite:///{Path(url).expanduser().resolve()}"
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        # Opening would create an empty database; there is no study to read in it.
        raise InputError(f"no study database at {url.removeprefix('sqlite:///')}")
    return _database(url, where=where, arg="database_url")


def _study_name(where: str, name: Any) -> str:  # noqa: ANN401 - anything a user passes
    if not isinstance(name, str):
        raise InputError(f"{where}: name: expected a study name, got {type(name).__name__}")
    return name


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
        InputError: No such study, no scores, too few rated pairs, a bad setting, or an
            argument of the wrong type (``metrics=5``, ``database_url=None``...).
    """
    import inspect

    from radconcord.backend.analysis.data import AnalysisInputError
    from radconcord.backend.services.evaluation.correlation import correlate_study as run

    where = "radconcord.correlate_study"
    known = set(inspect.signature(run).parameters) - {"db", "study_name"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"{where}: unexpected keyword {', '.join(unknown)}"
                         f" (known: {', '.join(sorted(known))})")
    name = _study_name(where, name)
    if options.get("metrics") is not None:
        options["metrics"] = [k for k in _names(where, "metrics", options["metrics"]) if k]
    bootstrap = _whole(where, "bootstrap", bootstrap, 0)
    db = _study_database(database_url, where)
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
        InputError: No study of that name, a name or ``database_url`` of the wrong type.
    """
    import numpy as np
    import pandas as pd

    from radconcord.backend.analysis.data import AnalysisInputError
    from radconcord.backend.services.evaluation.study_data import load_study as load

    name = _study_name("radconcord.load_study", name)
    db = _study_database(database_url, "radconcord.load_study")
    try:
        data = load(db, name, require_scores=False, refit_inputs=False, texts=True)
    except AnalysisInputError as exc:
        raise InputError(str(exc)) from None
    finally:
        db.dispose()
    ratings, columns, texts = data.ratings, data.scores, data.texts
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
        directions={k: c.higher_is_better for k, c in columns.items()},
        imported={k: c.imported.as_json() for k, c in columns.items() if c.imported},
        _counts=counts,
    )


def import_scores(
    *,
    study: str,
    path: str | os.PathLike[str],
    metric: str | Sequence[str] | None = None,
    lower_is_better: bool | Sequence[str] = False,
    description: str = "",
    source: str = "",
    allow_missing: bool = False,
    database_url: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Import a metric's per-pair values computed elsewhere into a study.

    What ``radconcord import-scores`` does (:mod:`backend.services.scores.score_imports`): the
    values
    then show in every view of the study (:func:`load_study`, :func:`correlate_study`, the
    dashboard, the report, the export with scores) like a computed metric, marked as imported.

    Args:
        study: The study whose pairs the file names.
        path: CSV or JSONL file naming each pair by ``pair_number`` (1-based, as in the
            study's JSONL export) or ``pair_id`` (the export's opaque id), with a ``value``
            column or one column per metric key.
        metric: The key of the ``value`` column; for a file with one column per key, the
            keys to import (default: every column).
        lower_is_better: ``True`` when lower values are better (every imported key), or the
            keys for which they are.
        description: What the metric is.
        source: Where the values come from (URL or text).
        allow_missing: Accept missing values and study pairs without a row.
        database_url: Database URL or SQLite file (default: as :func:`load_study`).

    Returns:
        ``{"study", "file_sha256", "layout", "n_study_pairs", "rows_written", "imports"}``,
        ``imports`` holding per key its ``signature``, ``higher_is_better``, ``n_pairs``,
        ``n_missing``, ``missing`` (pair numbers) and the recorded metadata.

    Raises:
        InputError: A bad file (the message names the file, row and field), key or option,
            no such study; nothing is written.
    """
    from radconcord.backend.errors import ServiceError
    from radconcord.backend.services.scores.score_imports import import_scores as run
    from radconcord.backend.types import Actor

    where = "radconcord.import_scores"
    study = _study_name(where, study)
    file = _location(where, "path", path)
    for arg, value in (("description", description), ("source", source)):
        if not isinstance(value, str):
            raise InputError(f"{where}: {arg}: expected text, got {type(value).__name__}")
    if not isinstance(allow_missing, bool):
        raise InputError(f"{where}: allow_missing: expected True or False, got "
                         f"{type(allow_missing).__name__}")
    if metric is not None and not isinstance(metric, str):
        metric = _names(where, "metric", metric)
    if not isinstance(lower_is_better, bool):
        lower_is_better = _names(where, "lower_is_better", lower_is_better)
    db = _study_database(database_url, where)
    try:
        summary = run(db, Actor.system(), study_name=study, path=Path(file), metric=metric,
                      lower_is_better=lower_is_better, description=description,
                      source=source, allow_missing=allow_missing)
    except ServiceError as exc:
        raise InputError(str(exc)) from None
    finally:
        db.dispose()
    return {
        "study": summary.study_name,
        "file_sha256": summary.file_sha256,
        "layout": summary.layout,
        "n_study_pairs": summary.n_study_pairs,
        "rows_written": summary.n_rows_written,
        "imports": {imp.key: {**imp.as_json(), "higher_is_better": imp.higher_is_better,
                              "missing": list(summary.missing[imp.key])}
                    for imp in summary.imports},
    }
