"""RadPref commands: ``import-radpref`` and ``export-radpref``.

RadPref (CRIMSON project, MIT licence) is a reader-preference set: ``preference_data.json``
and ``radiologist_annotations/user_N.json``. The import creates a pairwise + 1-5 study with
one rater account per annotator and their errors as per-error records; the export writes the
same files back (see ``backend.services.transfer.radpref``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from radconcord.backend.cli.common import Commands, UserError, database, service_errors


def _import(args: argparse.Namespace) -> int:
    from radconcord.backend.datasets import radpref as files
    from radconcord.backend.services.transfer import radpref
    from radconcord.backend.types import Actor

    with service_errors():
        data = files.read(Path(args.preferences), Path(args.annotations), strict=args.strict)
    with database() as db, service_errors():
        summary = radpref.import_radpref(db, Actor.system(), data=data,
                                         study_name=args.study, dry_run=args.dry_run)
    verb = "would create" if summary.dry_run else "created"
    print(f"{summary.study_name}: {verb} {summary.n_cases} cases ({summary.n_pairs} pairs, "
          f"{summary.n_cases} comparisons), {len(summary.raters)} raters, "
          f"{summary.n_judgements} judgements, {summary.n_error_records} error records, "
          f"{summary.n_ratings} rating cells")
    for username in summary.raters:
        new = " (new account, no usable password)" if username in summary.new_raters else ""
        print(f"  rater {username}{new}")
    for warning in summary.warnings:
        print(f"warning: {warning}")
    if summary.dry_run:
        print("dry run: nothing was written")
    return 0


def _export(args: argparse.Namespace) -> int:
    from radconcord.backend.services.transfer import radpref
    from radconcord.backend.types import Actor

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: exists and is not an empty folder")
    with database() as db, service_errors():
        export = radpref.export_radpref(db, Actor.system(), study_name=args.study)
    paths = export.write(out)
    print(f"{export.study_name}: {export.n_cases} cases, {export.n_annotators} annotators, "
          f"{export.n_judgements} judgements written to {out}")
    for path in paths:
        print(f"  {path.relative_to(out)}")
    for warning in export.warnings:
        print(f"warning: {warning}")
    return 0


def register(commands: Commands) -> None:
    """Add ``import-radpref`` and ``study export-radpref`` (old name ``export-radpref``
    kept)."""
    p = commands.add_parser(
        "import-radpref",
        help="create a pairwise + 1-5 study from RadPref files (preference_data.json and "
             "radiologist_annotations/user_N.json)")
    p.add_argument("--preferences", required=True, metavar="FILE",
                   help="preference_data.json")
    p.add_argument("--annotations", required=True, metavar="DIR",
                   help="folder of the annotator files user_N.json")
    p.add_argument("--study", required=True, help="name of the new study")
    p.add_argument("--dry-run", action="store_true",
                   help="check the files and the name, show what would be created, write "
                        "nothing")
    p.add_argument("--strict", action="store_true",
                   help="refuse an index past the end of its findings list (the published "
                        "files have some: by default they are kept with a warning)")
    p.set_defaults(func=_import)

    p = commands.group("study").add_parser(
        "export-radpref",
        help="write a pairwise study as RadPref files (preference_data.json and "
             "radiologist_annotations/user_N.json)")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder to write (created; must be empty if it exists)")
    p.set_defaults(func=_export)
    commands.alias("export-radpref", "study", "export-radpref")
