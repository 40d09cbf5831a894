"""Test doubles of the metric contract for the scoring runner, worker and CLI tests.

They are not metrics of the field: they compute simple, deterministic functions of the texts
so tests can check the machinery (cache, batching, resume) and count how often each pair is
computed. ``install()`` adds them to the registry of the current process; a worker
subprocess calls it before ``backend.cli.main(["worker", ...])`` (see
``tests/jobs_helpers.SETUP_SCORING_DOUBLES``).

When the environment variable ``SCORING_DOUBLES_LOG`` names a file, every scored candidate is
appended to it (one line ``family<TAB>candidate``), so a test can see what a subprocess
computed even after it was killed.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import BaseMetric, MetricResult, MetricSpec, OutputSpec

# (family, candidates of one score() call), in call order, for in-process tests.
CALLS: list[tuple[str, tuple[str, ...]]] = []
LOADS: list[tuple[str, str]] = []


def reset() -> None:
    """Forget recorded calls and loads."""
    CALLS.clear()
    LOADS.clear()


def _record(family: str, candidates: Sequence[str]) -> None:
    CALLS.append((family, tuple(candidates)))
    path = os.environ.get("SCORING_DOUBLES_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            for c in candidates:
                fh.write(f"{family}\t{c}\n")
            fh.flush()
            os.fsync(fh.fileno())


def _words(text: str) -> set[str]:
    return set(text.lower().split())


class CountingDouble(BaseMetric):
    """Two per-pair values: scaled length ratio and word Jaccard; ``NAN`` candidates -> nan."""

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="count_double",
        outputs=(
            OutputSpec("dbl_ratio", True, "scale * len(candidate) / len(reference)"),
            OutputSpec("dbl_jaccard", True, "word Jaccard"),
        ),
    )
    defaults: ClassVar[dict[str, Any]] = {"scale": 1.0, "label": "x"}

    def _load(self) -> None:
        LOADS.append((self.spec.name, self.device))

    def signature(self) -> str:
        return (
            f"{self.spec.name}|scale:{float(self.options['scale'])!r}|label:{self.options['label']}"
        )

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        _record(self.spec.name, candidates)
        ratio, jac, details = [], [], []
        for r, c in zip(references, candidates, strict=True):
            if c == "NAN":
                ratio.append(math.nan)
            else:
                ratio.append(float(self.options["scale"]) * len(c) / max(len(r), 1))
            a, b = _words(r), _words(c)
            jac.append(len(a & b) / len(a | b) if a | b else 0.0)
            details.append({"n_ref_words": len(a), "n_cand_words": len(b)})
        return MetricResult(values={"dbl_ratio": ratio, "dbl_jaccard": jac}, details=details)


class SlowDouble(CountingDouble):
    """``CountingDouble`` that sleeps per batch (``SLOW_DOUBLE_SECONDS``, default 0.4)."""

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="slow_double", outputs=(OutputSpec("slow_ratio"), OutputSpec("slow_jaccard"))
    )

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        time.sleep(float(os.environ.get("SLOW_DOUBLE_SECONDS", "0.4")))
        res = super()._score(references=references, candidates=candidates, images=images)
        return MetricResult(
            values={
                "slow_ratio": res.values["dbl_ratio"],
                "slow_jaccard": res.values["dbl_jaccard"],
            },
            details=res.details,
        )


class CorpusDouble(BaseMetric):
    """Corpus-dependent (declared in its registry entry): share of the set's references
    containing the candidate's 1st word."""

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="corpus_double", outputs=(OutputSpec("dbl_df"),), corpus_outputs=("n",)
    )

    def signature(self) -> str:
        return "corpus_double|df:scored-set"

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        _record(self.spec.name, candidates)
        ref_words = [_words(r) for r in references]
        out = []
        for c in candidates:
            first = c.lower().split()[0]
            out.append(sum(first in w for w in ref_words) / len(references))
        return MetricResult(values={"dbl_df": out}, corpus={"n": float(len(references))})


class ModelDouble(BaseMetric):
    """Declares ``needs_model``; records the device and whether inference mode was on."""

    spec: ClassVar[MetricSpec] = MetricSpec(
        name="model_double", outputs=(OutputSpec("dbl_model"),), needs_model=True
    )
    seen: ClassVar[list[tuple[str, bool | None]]] = []

    def signature(self) -> str:
        return "model_double|v1"

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        torch = sys.modules.get("torch")
        mode = bool(torch.is_inference_mode_enabled()) if torch is not None else None
        ModelDouble.seen.append((self.device, mode))
        return MetricResult(values={"dbl_model": [float(len(c)) for c in candidates]})


class UnavailableDouble(BaseMetric):
    """Always unavailable, with a reason."""

    spec: ClassVar[MetricSpec] = MetricSpec(name="gone_double", outputs=(OutputSpec("dbl_gone"),))

    def availability(self) -> str | None:
        return "weights not found in /nowhere (set RADCONCORD_MODEL_DIR)"

    def signature(self) -> str:
        return "gone_double"


class FailingDouble(BaseMetric):
    """Raises on any pair whose candidate contains ``BOOM``."""

    spec: ClassVar[MetricSpec] = MetricSpec(name="fail_double", outputs=(OutputSpec("dbl_fail"),))

    def signature(self) -> str:
        return "fail_double"

    def _score(
        self, *, references: list[str], candidates: list[str], images: Sequence[Any] | None
    ) -> MetricResult:
        _record(self.spec.name, candidates)
        if any("BOOM" in c for c in candidates):
            raise RuntimeError("tokenizer exploded")
        return MetricResult(values={"dbl_fail": [1.0] * len(candidates)})


_CLASSES = {
    "count_double": ("CountingDouble", CountingDouble),
    "slow_double": ("SlowDouble", SlowDouble),
    "corpus_double": ("CorpusDouble", CorpusDouble),
    "model_double": ("ModelDouble", ModelDouble),
    "gone_double": ("UnavailableDouble", UnavailableDouble),
    "fail_double": ("FailingDouble", FailingDouble),
}

ENTRIES = tuple(
    registry.Entry(family, f"{__name__}:{name}", cls.spec.keys, "test-double",
                   corpus_dependent=family == "corpus_double")
    for family, (name, cls) in _CLASSES.items()
)


def install(setitem: Any = None) -> None:
    """Register the doubles; ``setitem`` is pytest's ``monkeypatch.setitem`` (undone after)."""
    put = setitem or (lambda d, k, v: d.__setitem__(k, v))
    for entry in ENTRIES:
        put(registry.ENTRIES, entry.family, entry)
        for key in entry.keys:
            put(registry.KEY_TO_FAMILY, key, entry.family)
