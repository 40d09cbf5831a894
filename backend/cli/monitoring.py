"""Quality control command: ``qc`` (rater monitoring and intra-rater agreement of a study).

``python -m backend qc --study S [--out DIR] [--straight-run N] [--outlier-z Z]`` prints the
monitoring table (one line per rater, then each flag in words) and the intra-rater table (one
line per rater and scope), and for a pairwise study the judgement monitoring (side bias,
straight-lining, agreement); with ``--out`` it also writes ``monitoring.csv`` and
``intra_rater.csv`` there, and ``judgement_monitoring.csv`` for a pairwise study (full
precision, blank cells where a value is undefined, each file written whole or not at all).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from radconcord.backend.cli.common import Commands, UserError, database, service_errors

MONITORING_CSV = "monitoring.csv"
INTRA_CSV = "intra_rater.csv"
JUDGEMENT_CSV = "judgement_monitoring.csv"


def _cell(value: Any, digits: int = 2) -> str:  # noqa: ANN401 - any table cell
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else ""
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    return "\n".join(lines)


def _out_dir(raw: str | None) -> Path | None:
    if raw is None:
        return None
    path = Path(raw)
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {raw}: is a file, not a folder")
    return path


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    from radconcord.backend.util import atomic_write, records_to_csv

    with atomic_write(path, newline="") as fh:
        fh.write(records_to_csv(rows, columns))


MONITORING_COLUMNS = (
    "study", "rater", "assigned", "done", "timed_pairs", "untimed_pairs", "median_seconds",
    "q1_seconds", "q3_seconds", "iqr_seconds", "slow_limit_seconds", "slow_pairs",
    "fast_pairs", "time_seconds", "done_per_hour", "drift_n", "drift_first", "drift_last",
    "drift", "drift_note", "zero_run", "zero_run_pairs", "straight_lining", "shared_pairs",
    "spearman", "abs_diff", "agreement_note", "z_time_per_pair", "z_agreement", "z_abs_diff",
    "z_drift", "flags",
)
INTRA_COLUMNS = (
    "study", "rater", "scope", "repeats_assigned", "repeats_counted", "exact_agreement",
    "exact_all_cells", "icc2_1", "icc_note", "kappa_quadratic", "kappa_note", "mean_abs_diff",
)


JUDGEMENT_COLUMNS = (
    "study", "rater", "assigned", "done", "n_a", "n_b", "n_tie", "side_decided", "share_a",
    "side_p",
    "same_run", "same_run_comparisons", "straight_lining", "shared", "agreement",
    "agreement_note", "agreement_z", "timed", "median_seconds", "flags",
)


def _print_judgements(study: str, rows: list[dict[str, Any]]) -> None:
    print()
    print(f"Judgement monitoring of {study!r} (pairwise: which is better, 1-5 ratings)")
    print(_table(
        ["rater", "done", "A", "B", "tie", "A share", "side p", "same run", "agreement",
         "median s", "flags"],
        [[r["rater"], f"{r['done']}/{r['assigned']}", str(r["n_a"]), str(r["n_b"]),
          str(r["n_tie"]), _cell(r["share_a"]), _cell(r["side_p"], 3), str(r["same_run"]),
          _cell(r["agreement"]), _cell(r["median_seconds"], 1),
          str(len(r["flags"].split("; "))) if r["flags"] else ""]
         for r in rows]))
    for r in rows:
        for flag in filter(None, r["flags"].split("; ")):
            print(f"  {r['rater']}: {flag}")


def _qc(args: argparse.Namespace) -> int:
    from radconcord.backend.services.quality import qc
    from radconcord.backend.types import Actor

    out = _out_dir(args.out)
    with database() as db, service_errors():
        monitoring = qc.monitoring_rows(db, Actor.system(), args.study,
                                        straight_run=args.straight_run,
                                        outlier_z=args.outlier_z)
        intra = qc.intra_rater_rows(db, Actor.system(), args.study)
        judged = qc.judgement_monitoring_rows(db, Actor.system(), args.study,
                                              straight_run=args.straight_run,
                                              outlier_z=args.outlier_z)
    print(f"Rater monitoring of {args.study!r} (study pairs; times are time on task)")
    if monitoring:
        print(_table(
            ["rater", "done", "median s", "IQR s", "slow", "fast", "per hour", "drift",
             "zero run", "rho", "|diff|", "flags"],
            [[r["rater"], f"{r['done']}/{r['assigned']}", _cell(r["median_seconds"], 1),
              _cell(r["iqr_seconds"], 1), r["slow_pairs"], r["fast_pairs"],
              _cell(r["done_per_hour"], 1), _cell(r["drift"]), str(r["zero_run"]),
              _cell(r["spearman"]), _cell(r["abs_diff"]),
              str(len(r["flags"].split("; "))) if r["flags"] else ""] for r in monitoring]))
        for r in monitoring:
            for flag in filter(None, r["flags"].split("; ")):
                print(f"  {r['rater']}: {flag}")
    else:
        print("  no rater has study pairs assigned")
    print()
    print(f"Intra-rater agreement of {args.study!r} (hidden repeats done in both showings)")
    if intra:
        print(_table(
            ["rater", "scope", "repeats", "exact", "ICC(2,1)", "kappa (quadratic)", "note"],
            [[r["rater"], r["scope"], f"{r['repeats_counted']}/{r['repeats_assigned']}",
              _cell(r["exact_agreement"]), _cell(r["icc2_1"]), _cell(r["kappa_quadratic"]),
              r["icc_note"] or r["kappa_note"]] for r in intra]))
    else:
        print("  no repeats: set repeat_share (python -m backend study-settings --study "
              f"{args.study!r} --set repeat_share=0.1) before assigning raters")
    if judged:
        _print_judgements(args.study, judged)
    if out is not None:
        written = [out / MONITORING_CSV, out / INTRA_CSV]
        try:
            out.mkdir(parents=True, exist_ok=True)
            _write_csv(out / MONITORING_CSV, monitoring, MONITORING_COLUMNS)
            _write_csv(out / INTRA_CSV, intra, INTRA_COLUMNS)
            if judged:
                _write_csv(out / JUDGEMENT_CSV, judged, JUDGEMENT_COLUMNS)
                written.append(out / JUDGEMENT_CSV)
        except OSError as exc:
            raise UserError(f"--out {args.out}: cannot write: {exc.strerror or exc}") from None
        print(f"\nwrote {', '.join(map(str, written[:-1]))} and {written[-1]}")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


# The analysis' defaults (backend.analysis.monitoring.STRAIGHT_RUN and OUTLIER_Z), repeated
# here so that building the parser (``--help``) imports no numpy or scipy; a test keeps the
# two equal.
DEFAULT_STRAIGHT_RUN = 8
DEFAULT_OUTLIER_Z = 3.0


def register(commands: Commands) -> None:
    """Add ``study qc`` (old name ``qc`` kept)."""
    p = commands.group("study").add_parser(
        "qc", help="rater monitoring and intra-rater agreement of a study (quality control)")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--out", metavar="DIR",
                   help=f"also write {MONITORING_CSV} and {INTRA_CSV} into DIR")
    p.add_argument("--straight-run", type=_positive_int, default=DEFAULT_STRAIGHT_RUN,
                   metavar="N", help="flag N consecutive all-zero pairs as straight-lining "
                                     f"(default {DEFAULT_STRAIGHT_RUN})")
    p.add_argument("--outlier-z", type=_positive_float, default=DEFAULT_OUTLIER_Z,
                   metavar="Z", help=f"flag |robust z| > Z across raters "
                                     f"(default {DEFAULT_OUTLIER_Z:g})")
    p.set_defaults(func=_qc)
    commands.alias("qc", "study", "qc")
