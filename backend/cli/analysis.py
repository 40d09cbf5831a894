"""``python -m backend correlate``: agreement of metrics with a study's radiologists.

Imports nothing heavy at import time (numpy and the database load when the command runs).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from radconcord.backend.cli.common import UserError, database, user_errors
from radconcord.backend.cli.progress import progress_bar
from radconcord.backend.util import atomic_write

if TYPE_CHECKING:
    from radconcord.db.session import Database


def register(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private subparsers type
    """Add the ``correlate`` subcommand.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    p = subparsers.add_parser(
        "correlate",
        help="Kendall tau-b / Spearman of metrics vs radiologists, with bootstrap CIs",
        description="Correlate every scored metric of a study with its radiologists' error"
        " counts and write all agreement statistics as JSON.",
    )
    p.add_argument("--study", required=True, help="study name")
    p.add_argument(
        "--metrics", nargs="+", default=None, metavar="KEY",
        help="output keys or families (space or comma separated); default: every scored key",
    )
    p.add_argument("--significant-only", action="store_true",
                   help="target clinically significant errors instead of all errors")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="B",
                   help="bootstrap resamples for the 95%% CIs (0: none; default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0)")
    p.add_argument("--cluster", choices=("pair", "case"), default="pair",
                   help="resample pairs (default) or whole cases")
    p.add_argument("--unit", choices=("pair", "case", "rater_pair"), default=None,
                   help="resampling unit of the ceiling and the metric-vs-metric tests: pairs,"
                   " cases, or pairs then raters inside each pair (default: as --cluster)")
    p.add_argument("--correction", choices=("holm", "bh"), default="holm",
                   help="correction over the metric-vs-metric matrix: Holm (default) or"
                   " Benjamini-Hochberg")
    p.add_argument("--permutations", type=int, default=1000, metavar="R",
                   help="permutations of the system randomization tests (default 1000)")
    p.add_argument("--fdr", type=float, default=0.05,
                   help="false discovery rate of the failure-mode tests (default 0.05)")
    p.add_argument("--counts", choices=("raw", "adjudicated"), default="raw",
                   help="per-pair values to correlate: the raters' mean (raw, default) or the"
                   " adjudicators' consensus where a pair was adjudicated (agreement between"
                   " raters stays on their own counts); written to the output as 'counts'")
    p.add_argument("--preference-source", choices=("mean_rating", "votes"),
                   default="mean_rating",
                   help="studies with pairwise comparisons: the raters' preference from the"
                   " mean 1-5 rating of each candidate (default, as RadPref) or their votes")
    p.add_argument("--database-url", default=None,
                   help="database URL (default: DATABASE_URL or the data folder's SQLite file)")
    p.add_argument("--output", required=True, type=Path, help="RESULT.json to write")
    p.set_defaults(func=run_correlate)


def write_json_atomic(path: Path, data: Any) -> None:  # noqa: ANN401 - any JSON-able data
    """Write ``data`` as JSON so that ``path`` is either the old file or the complete new one.

    Args:
        path: Destination file.
        data: JSON-able object (NaN already replaced by ``None``).
    """
    with atomic_write(path) as fh:
        json.dump(data, fh, indent=2, allow_nan=False)
        fh.write("\n")


def run_correlate(args: argparse.Namespace) -> int:
    """Run ``correlate`` (see :func:`register`).

    Args:
        args: Parsed arguments.
    """
    from radconcord.backend.analysis.data import AnalysisInputError
    from radconcord.backend.services.evaluation.correlation import correlate_study

    if args.bootstrap < 0:
        raise UserError(f"--bootstrap must be >= 0, got {args.bootstrap}")
    if args.permutations < 1:
        raise UserError(f"--permutations must be >= 1, got {args.permutations}")
    if not 0.0 < args.fdr < 1.0:
        raise UserError(f"--fdr must lie in (0, 1), got {args.fdr}")
    output: Path = args.output
    if not output.parent.is_dir():
        raise UserError(f"{output}: folder {output.parent} does not exist")
    if output.is_dir():
        raise UserError(f"{output}: is a folder, expected a file name")
    with (database(args.database_url) as db, user_errors(AnalysisInputError),
          progress_bar("correlate", unit="section") as progress):
        counts_ran = True
        try:
            result = correlate_study(
                db,
                study_name=args.study,
                metrics=args.metrics,
                significant_only=args.significant_only,
                bootstrap=args.bootstrap,
                seed=args.seed,
                cluster=args.cluster,
                fdr=args.fdr,
                unit=args.unit,
                correction=args.correction,
                permutations=args.permutations,
                progress=progress,
                # Raw is correlate_study's default; the option goes in only when it changes it.
                **({"counts": args.counts} if args.counts != "raw" else {}),
            )
        except AnalysisInputError as exc:
            # A pairwise study may have no count ratings: its preference block alone.
            result = preference_only(db, args, exc)
            counts_ran = False
        add_preference(db, args, result)
    result.setdefault("counts", args.counts)
    write_json_atomic(output, result)
    m = result["metrics"]
    adjudicated = (f", {result.get('n_adjudicated', 0)} adjudicated"
                   if args.counts == "adjudicated" else "")
    if not counts_ran:
        # A pairwise study judged without counts: its preference block is the result.
        head = f"{result['study']}: no count ratings"
    else:
        head = (f"{result['study']}: {result['n_pairs']} pairs{adjudicated}, {len(m)} metric "
                f"keys, target {result['target']}, counts {result['counts']}")
    pref = result.get("preference")
    if pref:
        head += (f"; pairwise: {pref['n_comparisons']} comparisons, "
                 f"{len(pref['metrics'])} metric keys ({pref['preference_source']})")
    print(f"{head} -> {output}")
    return 0


# -- pairwise studies (comparisons with judgements) --------------------------------------------


def _preference_block(db: Database, args: argparse.Namespace,  # noqa: ANN401 - a Database
                      keys: list[str] | None) -> dict[str, Any] | None:
    """The pairwise block of a study with judged comparisons, else None."""
    from radconcord.backend.errors import InvalidInput, NotFound
    from radconcord.backend.services.annotation import pairwise
    from radconcord.backend.types import Actor

    admin = Actor.system()
    try:
        if not pairwise.has_comparisons(db, admin, args.study):
            return None
        stats = pairwise.study_preference_stats(
            db, admin, args.study, metrics=keys, source=args.preference_source,
            resamples=args.bootstrap, seed=args.seed)
    except (InvalidInput, NotFound) as exc:
        raise UserError(f"pairwise statistics of {args.study!r}: {exc}") from None
    return stats.as_dict() if stats.n_comparisons else None


def add_preference(db: Database, args: argparse.Namespace,  # noqa: ANN401 - a Database
                   result: dict[str, Any]) -> None:
    """Add the pairwise statistics to a ``correlate`` result of a study with comparisons.

    ``result["preference"]`` gets the block of
    :meth:`backend.services.annotation.pairwise.PreferenceStats.as_dict`: the preference source,
    and per
    metric ``pairwise_agreement`` with ``ci_low``/``ci_high``, ``n_comparisons`` and
    ``n_ties_excluded``, and ``kendall_tau_b_rating`` with its ``n``. Each entry of
    ``result["metrics"]`` also gets ``pairwise_agreement``, ``pairwise_agreement_ci95`` and
    ``kendall_tau_b_rating`` beside its count-based statistics. A study without judged
    comparisons gets nothing.

    Args:
        db: The database.
        args: The parsed ``correlate`` arguments.
        result: The result of :func:`backend.services.evaluation.correlation.correlate_study`
        (changed).
    """
    if "preference" not in result:
        keys = sorted(result.get("metrics", {})) or None
        block = _preference_block(db, args, keys)
        if block is None:
            return
        result["preference"] = block
    metrics = result.setdefault("metrics", {})
    for key, entry in result["preference"]["metrics"].items():
        metrics.setdefault(key, {}).update({
            "pairwise_agreement": entry["pairwise_agreement"],
            "pairwise_agreement_ci95": [entry["ci_low"], entry["ci_high"]],
            "kendall_tau_b_rating": entry["kendall_tau_b_rating"],
        })


def preference_only(db: Database, args: argparse.Namespace,  # noqa: ANN401 - a Database
                    error: Exception) -> dict[str, Any]:
    """The ``correlate`` result of a pairwise study whose count analysis could not run.

    Args:
        db: The database.
        args: The parsed ``correlate`` arguments.
        error: Why the count analysis failed (recorded as ``counts_analysis``).

    Raises:
        Exception: ``error`` itself when the study has no judged comparisons either.
    """
    from radconcord.backend.analysis.data import expand_metric_names

    keys = expand_metric_names(args.metrics) if args.metrics else None
    block = _preference_block(db, args, keys)
    if block is None:
        raise error
    return {"study": args.study, "target": None, "n_pairs": 0, "seed": args.seed,
            "resamples": args.bootstrap, "counts_analysis": f"not run: {error}",
            "metrics": {}, "preference": block}
