"""The ``concord`` metric family: predicted ReXVal error counts of a reference/candidate pair.

Variants (option ``variant``):

* ``rules`` (default): :mod:`.rules`, no model, always available; the details name the
  sentences behind every predicted error.
* ``gbm``: gradient-boosted trees (:mod:`.gbm`) over :mod:`.features`, from a trained folder
  (option ``model``; default the packaged ``weights/gbm-v2`` when it exists).
* ``ce``: a cross-encoder (:mod:`.ce`) from a trained folder (option ``model``, required).

A trained folder is a path or ``hub:owner/name@revision`` (:mod:`.folder`); its sha256 is in
the signature.

Rounding (option ``round``, default on): a learned variant's 12 predicted counts are rounded
to whole errors, as a rater counts them, before the totals are added. This was chosen on the
held-out synthetic split only (never on human ratings): for gbm-v1, Kendall tau-b of the
total against the constructed total was 0.78 unrounded and 0.84 rounded (gbm-v2: 0.80 and
0.88), because a continuous
prediction breaks the ties that integer counts have and tau-b charges every broken tie. The
signature says whether it is on. The card is ``backend/metrics/cards/concord.md``.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from radconcord.backend.metrics.base import (
    BaseMetric,
    MetricResult,
    MetricSpec,
    MetricUnavailable,
    OutputSpec,
)
from radconcord.backend.metrics.concord.rules import COUNT_NAMES, RULES_VERSION
from radconcord.backend.types import CATEGORIES

__all__ = ["CONCORD_KEYS", "DEFAULT_GBM_DIR", "SIGNATURE_VERSION", "VARIANTS", "Concord"]

#: The family's output keys: the two totals, then each category significant/insignificant.
CONCORD_KEYS: tuple[str, ...] = (
    "concord_total",
    "concord_sig",
    *(f"concord_{n}" for n in COUNT_NAMES),
)
VARIANTS: tuple[str, ...] = ("rules", "gbm", "ce")
#: The packaged gbm folder, the default ``model`` of variant ``gbm`` when it exists.
DEFAULT_GBM_DIR = Path(__file__).resolve().parent / "weights" / "gbm-v2"
#: Bump when the family's output for the same settings changes.
SIGNATURE_VERSION = "1"
_SENTENCE_CACHE_MAX = 200_000
_SIG = np.array([k % 2 == 0 for k in range(12)])


def _train_hint(variant: str) -> str:
    return (f"train one with `radconcord train-concord --variant {variant} --output DIR`,"
            " then score with `--set concord.model=DIR`")


def _outputs() -> tuple[OutputSpec, ...]:
    out = [
        OutputSpec("concord_total", False, "Predicted total ReXVal errors (12 cells)"),
        OutputSpec("concord_sig", False, "Predicted clinically significant ReXVal errors"),
    ]
    for name in COUNT_NAMES:
        k, level = int(name[1]), name.split("_")[1]
        what = "significant" if level == "sig" else "insignificant"
        out.append(OutputSpec(f"concord_{name}", False,
                              f"Predicted {what} errors: {CATEGORIES[k]}"))
    return tuple(out)


class Concord(BaseMetric):
    """ReXVal error counts predicted by rules, gradient boosting or a cross-encoder.

    Options:
        variant: ``rules`` | ``gbm`` | ``ce``.
        model: A trained folder (path or ``hub:owner/name@revision``); ``None`` for the
            packaged gbm folder (``gbm``) or none (``ce``); ignored by ``rules``.
        batch_size: Pairs per forward pass of ``ce``.
        round: Round a learned variant's predicted counts to whole errors (default on).
    """

    spec = MetricSpec(
        name="concord",
        outputs=_outputs(),
        needs_model=False,
        citation="RadConcord concord (ReXVal categories: Yu et al., ReXVal, 2023)",
    )
    defaults: dict[str, Any] = {"variant": "rules", "model": None, "batch_size": 32,
                                "round": True}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        variant = self.options["variant"]
        if variant not in VARIANTS:
            raise ValueError(f"concord variant must be one of {', '.join(VARIANTS)},"
                             f" got {variant!r}")
        model = self.options["model"]
        if model is not None and not isinstance(model, str | Path):
            raise ValueError(f"concord model must be a folder path or hub:owner/name@revision,"
                             f" got {model!r}")
        if model is not None:
            self.options["model"] = str(model)
        bs = self.options["batch_size"]
        if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
            raise ValueError(f"concord batch_size must be an integer >= 1, got {bs!r}")
        if not isinstance(self.options["round"], bool):
            raise ValueError(f"concord round must be true or false, got {self.options['round']!r}")
        self._sentences: dict[str, Any] = {}
        self._predictor: Any = None

    # -- settings ---------------------------------------------------------------------------

    @property
    def variant(self) -> str:
        """The selected variant."""
        return str(self.options["variant"])

    def model_ref(self) -> str | None:
        """The trained folder this instance uses (``None`` for ``rules`` or when none is set)."""
        if self.variant == "rules":
            return None
        model = self.options["model"]
        if model is None and self.variant == "gbm" and DEFAULT_GBM_DIR.is_dir():
            return str(DEFAULT_GBM_DIR)
        return model

    def availability(self) -> str | None:
        if self.variant == "rules":
            return None
        from radconcord.backend.metrics.concord.folder import locate_model, read_meta

        ref = self.model_ref()
        if ref is None:
            if self.variant == "gbm":
                return (f"concord variant gbm has no trained folder: none is packaged at"
                        f" {DEFAULT_GBM_DIR}; {_train_hint('gbm')}")
            return f"concord variant ce is not trained yet; {_train_hint('ce')}"
        if self.variant == "ce":
            for module in ("torch", "transformers"):
                if importlib.util.find_spec(module) is None:
                    return f"concord variant ce needs {module}: pip install {module}"
            if importlib.util.find_spec(f"{__package__}.ce") is None:
                return "concord variant ce is not part of this installation"
        folder, reason = locate_model(ref)
        if reason is not None:
            return f"{reason}; {_train_hint(self.variant)}"
        if folder is not None:
            try:
                meta = read_meta(folder)
            except (OSError, ValueError) as exc:
                return str(exc)
            if meta["variant"] != self.variant:
                return (f"{folder} holds a concord {meta['variant']} model, not {self.variant}"
                        f" (set concord.variant={meta['variant']})")
        return None

    # -- loading ----------------------------------------------------------------------------

    def _load(self) -> None:
        if self.variant == "rules":
            return
        from radconcord.backend.metrics.concord.folder import (
            folder_sha256,
            read_meta,
            resolve_model,
        )

        ref = self.model_ref()
        assert ref is not None  # availability() said so
        try:
            folder = resolve_model(ref)
            meta = read_meta(folder)
        except (OSError, ValueError) as exc:
            raise MetricUnavailable(str(exc)) from exc
        if self.variant == "gbm":
            self._predictor = self.resources.get(
                ("concord_gbm", str(folder), folder_sha256(folder)),
                lambda: _load_gbm(folder, meta),
            )
        else:
            ce = importlib.import_module(f"{__package__}.ce")
            self._predictor = ce.load_ce(folder, self.device, self.resources)

    # -- scoring ----------------------------------------------------------------------------

    def _cache(self) -> dict[str, Any]:
        if len(self._sentences) > _SENTENCE_CACHE_MAX:
            self._sentences = {}
        return self._sentences

    def _score(
        self,
        *,
        references: list[str],
        candidates: list[str],
        images: Sequence[Any] | None,
    ) -> MetricResult:
        from radconcord.backend.metrics.concord import features, rules

        details: list[dict[str, Any]]
        if self.variant == "rules":
            analyses = rules.analyze_reports([*references, *candidates], self._cache())
            n = len(references)
            errors = [rules.compare(analyses[i], analyses[n + i]) for i in range(n)]
            counts = np.array([rules.count_vector(e) for e in errors], dtype=np.float64)
            details = [
                {"variant": "rules", "counts": [int(c) for c in row],
                 "errors": [e.as_dict() for e in errs]}
                for row, errs in zip(counts, errors, strict=True)
            ]
        elif self.variant == "gbm":
            errors = []
            x = features.feature_matrix(references, candidates, cache=self._cache(),
                                        errors_out=errors)
            counts = np.asarray(self._predictor.predict(x), dtype=np.float64)
            details = [
                {"variant": "gbm", "counts": [round(float(c), 4) for c in row],
                 "rule_counts": rules.count_vector(errs),
                 "errors": [e.as_dict() for e in errs]}
                for row, errs in zip(counts, errors, strict=True)
            ]
        else:
            pred = self._predictor.predict(references, candidates,
                                           batch_size=int(self.options["batch_size"]))
            counts = np.asarray(pred, dtype=np.float64).reshape(len(references), 12)
            details = [{"variant": "ce", "counts": [round(float(c), 4) for c in row]}
                       for row in counts]
        if self.variant != "rules" and self.options["round"]:
            counts = np.rint(counts)
            for row, detail in zip(counts, details, strict=True):
                detail["predicted"] = detail["counts"]  # before rounding, for a reader
                detail["counts"] = [int(c) for c in row]
        values: dict[str, list[float]] = {
            "concord_total": counts.sum(axis=1).tolist(),
            "concord_sig": counts[:, _SIG].sum(axis=1).tolist(),
        }
        for k, name in enumerate(COUNT_NAMES):
            values[f"concord_{name}"] = counts[:, k].tolist()
        return MetricResult(values=values, details=details)

    # -- identity ---------------------------------------------------------------------------

    def signature(self) -> str:
        from radconcord.backend.metrics.chexpert import RuleLabeler
        from radconcord.backend.metrics.concord.features import FEATURES_VERSION

        rules_part = f"rules:v{RULES_VERSION}|labeler:{RuleLabeler.version}"
        head = f"concord:v{SIGNATURE_VERSION}|variant:{self.variant}"
        if self.variant == "rules":
            return f"{head}|{rules_part}"
        model = self._model_identity()
        rounding = f"round:{int(self.options['round'])}"
        if self.variant == "gbm":
            return (f"{head}|model:{model}|features:v{FEATURES_VERSION}|{rounding}"
                    f"|{rules_part}")
        return f"{head}|model:{model}|{rounding}"

    def _model_identity(self) -> str:
        from radconcord.backend.metrics.concord.folder import folder_sha256, locate_model

        ref = self.model_ref()
        if ref is None:
            return "missing"
        folder, _ = locate_model(ref)
        if folder is None:
            # A hub folder not downloaded yet: its pinned revision names it; else missing.
            return ref if ref.startswith("hub:") and "@" in ref else f"missing:{ref}"
        return f"sha256:{folder_sha256(folder)[:16]}"


def _load_gbm(folder: Path, meta: dict[str, Any]) -> Any:
    from radconcord.backend.metrics.concord.features import FEATURE_NAMES, FEATURES_VERSION
    from radconcord.backend.metrics.concord.gbm import GbmModel

    recorded = meta.get("features_version")
    if recorded is not None and str(recorded) != FEATURES_VERSION:
        # Same names, other definitions (the rules behind them changed): the trees would read
        # features they were not trained on and answer without a word of warning.
        raise MetricUnavailable(
            f"concord gbm folder {folder}: trained on features v{recorded}, this version"
            f" computes v{FEATURES_VERSION}; retrain it with"
            " `radconcord train-concord --variant gbm --output DIR`"
        )
    try:
        model = GbmModel.load(folder)
    except (OSError, ValueError) as exc:
        raise MetricUnavailable(f"concord gbm folder {folder}: {exc}") from exc
    names = tuple(meta.get("feature_names", meta.get("features", ())))
    for where, got in (("concord.json", names), ("gbm.json", model.feature_names)):
        if got and got != FEATURE_NAMES:
            raise MetricUnavailable(
                f"concord gbm folder {folder}: its {where} lists features other than this"
                f" version's {len(FEATURE_NAMES)} ({len(got)} listed); retrain it with"
                " `radconcord train-concord --variant gbm --output DIR`"
            )
    if model.n_outputs != 12:
        raise MetricUnavailable(f"concord gbm folder {folder}: {model.n_outputs} outputs, not 12")
    return model
