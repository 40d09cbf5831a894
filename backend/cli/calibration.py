"""Calibration commands: ``training-items`` (mark, unmark and list a study's training items)
and ``qualification`` (each rater's standing with the qualification gate)."""

from __future__ import annotations

import argparse
from pathlib import Path

from radconcord.backend.cli.common import Commands, UserError, database, service_errors


def _pair_numbers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise UserError(f"--pairs: comma-separated pair numbers, got {text!r}") from None


def _training_items(args: argparse.Namespace) -> int:
    from radconcord.backend.services.quality import calibration
    from radconcord.backend.types import Actor

    actor = Actor.system()
    pairs = _pair_numbers(args.pairs)
    chosen = [bool(args.csv), bool(args.from_rater), args.from_adjudication, args.unmark,
              args.list]
    if sum(chosen) != 1:
        raise UserError("training-items: give exactly one of --csv, --from-rater, "
                        "--from-adjudication, --unmark, --list")
    with database() as db, service_errors():
        if args.list:
            items = calibration.list_training(db, actor, study_name=args.study)
            if not items:
                print(f"{args.study}: no training items")
            for item in items:
                total = sum(item.expert_counts.values())
                print(f"pair {item.pair_number} ({item.opaque_id}): expert total {total} "
                      f"from {item.expert_source}; done by {item.done} of {item.raters} "
                      "rater(s)")
            return 0
        if args.unmark:
            if pairs is None:
                raise UserError("training-items --unmark: give --pairs")
            result = calibration.unmark_training(db, actor, study_name=args.study,
                                                 pair_numbers=pairs)
            print(f"{result.study_name}: pair(s) {', '.join(map(str, result.pair_numbers))} "
                  f"are study pairs again ({result.assignments_removed} open training "
                  "assignment(s) removed; assign again to give them raters)")
            return 0
        if args.csv:
            path = Path(args.csv)
            try:
                text = path.read_text(encoding="utf-8-sig")
            except OSError as exc:
                raise UserError(f"--csv: cannot read {path}: {exc.strerror}") from None
            result = calibration.mark_from_csv(db, actor, study_name=args.study, text=text,
                                               pair_numbers=pairs,
                                               source=f"expert CSV {path.name}")
        elif args.from_rater:
            result = calibration.mark_from_rater(db, actor, study_name=args.study,
                                                 username=args.from_rater, pair_numbers=pairs)
        else:
            result = calibration.mark_from_adjudication(db, actor, study_name=args.study,
                                                        pair_numbers=pairs)
    print(f"{result.study_name}: pair(s) {', '.join(map(str, result.pair_numbers))} marked "
          f"as training items; {result.assignments_created} new training assignment(s)")
    if result.ratings_left_study:
        print(f"  {result.ratings_left_study} completed rating(s) of these pairs no longer "
              "count in the study's statistics and exports")
    return 0


def _qualification(args: argparse.Namespace) -> int:
    from radconcord.backend.services.quality import calibration
    from radconcord.backend.types import Actor

    with database() as db, service_errors():
        rows = calibration.qualification_status(db, Actor.system(), study_name=args.study)
    if not any(r.training for r in rows):
        print(f"{args.study}: no rater holds training items (mark them with training-items, "
              "then assign)")
        return 0
    for r in rows:
        print(f"{r.rater}: {r.done} of {r.training} training item(s) done, {r.passed} passed "
              f"(needs {r.required}): {r.status}")
    return 0


def register(commands: Commands) -> None:
    """Add ``study training-items|qualification`` (old flat names kept)."""
    study = commands.group("study")
    p = study.add_parser(
        "training-items",
        help="mark a study's pairs as training (calibration) items, unmark or list them",
    )
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--csv", metavar="FILE",
                   help="expert counts: pair_number,error_category,clinically_significant,"
                        "num_errors (one row per cell; missing cells are 0)")
    p.add_argument("--from-rater", metavar="USER",
                   help="use this account's completed counts as the expert's")
    p.add_argument("--from-adjudication", action="store_true",
                   help="use the adjudicated consensus counts")
    p.add_argument("--pairs", metavar="N,N,...",
                   help="pair numbers (1-based, as the dashboard shows them)")
    p.add_argument("--unmark", action="store_true", help="make --pairs study pairs again")
    p.add_argument("--list", action="store_true", help="list the training items")
    p.set_defaults(func=_training_items)

    p = study.add_parser("qualification",
                         help="each rater's training items done and passed")
    p.add_argument("--study", required=True, help="study name")
    p.set_defaults(func=_qualification)

    commands.alias("training-items", "study", "training-items")
    commands.alias("qualification", "study", "qualification")
