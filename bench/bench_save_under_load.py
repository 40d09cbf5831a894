"""Rating saves while a large import and a scoring job write to the same database.

The incident this guards against: a 60k-row import held the SQLite write lock in one
transaction for 133 s, and 8 of 59 rater saves in that time failed with "database is locked".

Scenario ``load`` (one database, three writers at once):

- an import of ``--rows`` CSV rows (default 60,000 pairs, two candidates per case) runs in a
  separate process through ``imports.import_cases`` (the CLI's and the import page's path);
- the scoring worker (``python -m backend worker --once``) scores a study of
  ``--scored-pairs`` pairs with the lexical metrics BLEU and ROUGE-L in another process;
- 20 raters save counts in threads of this process through ``rating.set_count``, each pausing
  0.1-0.5 s between saves, from just before the import starts until it has finished.

It prints the save latency (p50/p95/max), the failed saves with their errors, the import's
duration and rows/s, and the scoring job's outcome. Goal: 0 failed saves, p95 < 250 ms.

Scenario ``import``: an import of ``--import-rows`` rows (default 100,000) alone in a fresh
process: rows/s and the process's peak resident memory (ru_maxrss), parsing included.

The script only uses APIs that existed before the batched import, so the same file run from a
checkout of an older commit measures the old behaviour (``git worktree add /tmp/before
<commit>``, copy this file into ``/tmp/before/bench/`` and run it there). Usage::

    .venv/bin/python bench/bench_save_under_load.py [--scenario load|import|all] \
        [--rows 60000] [--import-rows 100000] [--raters 20] [--backend sqlite|postgres]

Measured on the 2-core development machine (shared, so +-20 %), SQLite, defaults:

=============================  ==========================  ===========================
                               before (1cdeba4, one        after (batched, invisible
                               transaction per import)     staging study)
=============================  ==========================  ===========================
failed saves during the load   16 ("database is locked")   0
save latency p50 / p95 / max   8 ms / 1076 ms / 268 s      7 ms / 50 ms / 154 ms
60k-row import under load      272 s (220 rows/s)          14 s (4175 rows/s)
BLEU+ROUGE-L job, 20k pairs    worker exited, job left     done in 21 s
                               "running" at 544 pairs
100k-row import alone          257 s (389 rows/s)          22 s (4461 rows/s)
peak RSS of the 100k import    629 MB                      451 MB (of which ~370 MB is
                                                           ``parse_cases``' parsed rows)
=============================  ==========================  ===========================

PostgreSQL after: 0 failed, p50 7 ms / p95 15 ms / max 101 ms, the 60k import in 21 s.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET_P95_MS = 250.0
PAUSE_S = (0.1, 0.5)
N_RATED_PAIRS = 40
RATERS_PER_PAIR = 5
WORDS = ("no focal consolidation pleural effusion pneumothorax cardiomediastinal silhouette "
         "within normal limits mild bibasilar atelectasis small left right upper lower lobe "
         "opacity stable compared prior study degenerative changes thoracic spine").split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def write_cases_csv(path: Path, n_rows: int, prefix: str) -> None:
    """``n_rows`` pair rows, two candidates (sources gen-A, gen-B) per case."""
    rng = random.Random(n_rows)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["case_id", "reference", "candidate", "source"])
        reference = ""
        for i in range(n_rows):
            if i % 2 == 0:
                reference = _text(rng, 30)
            w.writerow([f"{prefix}{i // 2}", reference, _text(rng, 25),
                        "gen-A" if i % 2 == 0 else "gen-B"])


# -- child processes ----------------------------------------------------------------------------


def child_import(url: str, csv_path: str, study: str) -> None:
    """Import ``csv_path`` as ``study``; print a JSON line with timings and peak memory."""
    from radconcord.backend.datasets.pairs import parse_cases
    from radconcord.backend.services.transfer.imports import import_cases
    from radconcord.backend.types import Actor
    from radconcord.db.session import Database

    db = Database(url, migrate=False)
    t0 = time.perf_counter()
    cases = parse_cases(csv_path)
    t_parse = time.perf_counter() - t0
    summary = import_cases(db, Actor.system(), study_name=study, cases=cases)
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"pairs": summary.n_pairs, "cases": summary.n_cases, "seconds": seconds,
                      "parse_seconds": t_parse, "peak_rss_mb": peak_kb / 1024}))


# -- set-up ---------------------------------------------------------------------------------------


def _make_study(db, name: str, n_pairs: int) -> int:  # noqa: ANN001
    """A study of ``n_pairs`` text pairs inserted in bulk (old and new schema alike)."""
    from sqlalchemy import insert

    from radconcord.db.models import Case, Pair, Report, Study

    scoped = hasattr(Case, "study_id")
    rng = random.Random(name)
    with db.begin() as s:
        study = Study(name=name, status="open")
        s.add(study)
        s.flush()
        study_id = study.id
    for start in range(0, n_pairs, 2000):
        idx = range(start, min(n_pairs, start + 2000))
        with db.begin() as s:
            case_rows = [{"external_id": f"{name}-{i}"} | ({"study_id": study_id} if scoped else {})
                         for i in idx]
            case_ids = s.scalars(insert(Case).returning(Case.id, sort_by_parameter_order=True),
                                 case_rows).all()
            reports = []
            for cid in case_ids:
                reports.append({"case_id": cid, "role": "reference", "text": _text(rng, 30)})
                reports.append({"case_id": cid, "role": "candidate", "source": "gen",
                                "text": _text(rng, 25)})
            rids = s.scalars(insert(Report).returning(Report.id, sort_by_parameter_order=True),
                             reports).all()
            s.execute(insert(Pair), [
                {"study_id": study_id, "case_id": cid, "reference_id": rids[2 * k],
                 "candidate_id": rids[2 * k + 1], "source": "gen",
                 "opaque_id": uuid.uuid4().hex[:16], "position": i,
                 "input_hash": uuid.uuid4().hex + uuid.uuid4().hex}
                for k, (i, cid) in enumerate(zip(idx, case_ids, strict=True))
            ])
    return study_id


def _raters(db, n: int):  # noqa: ANN001, ANN202
    from argon2 import PasswordHasher

    from radconcord.backend.services.accounts import auth
    from radconcord.backend.services.annotation import rating
    from radconcord.backend.services.study_admin.assignment import assign_raters
    from radconcord.backend.types import Actor

    auth._hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    _make_study(db, "Rated", N_RATED_PAIRS)
    actors = []
    for i in range(n):
        name = f"rater{i:02d}"
        auth.create_user(db, Actor.system(), username=name, password=f"{name}-pw-long",
                         role="rater")
        with db.begin() as s:
            from radconcord.db.models import User

            user = s.query(User).filter_by(username=name).one()
            actors.append(Actor(user.id, name, "rater"))
    assign_raters(db, Actor.system(), study_name="Rated",
                  rater_usernames=[a.username for a in actors],
                  raters_per_pair=min(RATERS_PER_PAIR, n), seed=0)
    queues = {a.username: [q.opaque_id for q in rating.rater_queue(db, a, study_name="Rated")]
              for a in actors}
    return actors, queues


def _pct(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


# -- scenarios ----------------------------------------------------------------------------------


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    fh = open(log, "w")  # noqa: SIM115 - closed by the caller through proc.wait()
    return subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=fh, text=True)


def scenario_load(url: str, tmp: Path, n_rows: int, n_raters: int, scored_pairs: int) -> dict:
    """Raters saving while an import and a scoring job run; returns the figures."""
    from radconcord.backend import jobs
    from radconcord.backend.services.annotation import rating
    from radconcord.db.session import Database

    db = Database(url)
    actors, queues = _raters(db, n_raters)
    scored_id = _make_study(db, "Scored", scored_pairs)
    jobs.enqueue(db, "score", {"metrics": ["bleu", "rouge"], "options": {}}, study_id=scored_id)
    csv_path = tmp / "import.csv"
    write_cases_csv(csv_path, n_rows, "imp")
    env = dict(os.environ, DATABASE_URL=url, RADCONCORD_DATA_DIR=str(tmp))

    latencies: list[float] = []
    failures: list[str] = []
    during = [0]
    stop = threading.Event()
    import_running = threading.Event()

    def rater(actor, queue: list[str]) -> None:  # noqa: ANN001
        rng = random.Random(actor.username)
        current: dict[tuple, int] = {}
        while not stop.is_set():
            time.sleep(rng.uniform(*PAUSE_S))
            oid, cat, sig = rng.choice(queue), rng.randint(1, 6), rng.random() < 0.5
            count = current.get((oid, cat, sig), 0) % 9 + 1
            t0 = time.perf_counter()
            try:
                rating.set_count(db, actor, opaque_id=oid, category=cat, significant=sig,
                                 count=count)
            except Exception as exc:  # a failed save is what this bench counts
                first = str(exc).splitlines()[0][:120]
                failures.append(f"{type(exc).__name__}: {first} "
                                f"(after {time.perf_counter() - t0:.1f} s)")
                continue
            current[(oid, cat, sig)] = count
            latencies.append((time.perf_counter() - t0) * 1000)
            if import_running.is_set():
                during[0] += 1

    threads = [threading.Thread(target=rater, args=(a, queues[a.username]), daemon=True)
               for a in actors]
    for t in threads:
        t.start()
    time.sleep(1.0)
    worker = _spawn(["-m", "backend", "worker", "--once", "--device", "cpu"], env,
                    tmp / "worker.log")
    t_start = time.perf_counter()
    importer = _spawn([str(Path(__file__).resolve()), "--child-import", url, str(csv_path),
                       "Imported"], env, tmp / "import.log")
    import_running.set()
    out, _ = importer.communicate(timeout=900)
    import_running.clear()
    import_wall = time.perf_counter() - t_start
    worker.wait(timeout=900)
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    job = jobs.list_jobs(db, study_id=scored_id)[0]
    result = {
        "saves": len(latencies), "saves_during_import": during[0], "failed": len(failures),
        "failures": failures[:5],
        "p50_ms": statistics.median(latencies) if latencies else float("nan"),
        "p95_ms": _pct(latencies, 95), "max_ms": max(latencies, default=float("nan")),
        "import_wall_s": import_wall, "import_rc": importer.returncode,
        "job": f"{job.status} ({job.message or job.error})"[:160],
        "job_seconds": ((job.finished_at - job.started_at).total_seconds()
                        if job.finished_at and job.started_at else float("nan")),
    }
    try:
        result["import"] = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        result["import"] = {"error": (tmp / "import.log").read_text()[-300:]}
    db.dispose()
    return result


def scenario_import(url: str, tmp: Path, n_rows: int) -> dict:
    """One import of ``n_rows`` rows alone in a fresh process: rows/s and peak RSS."""
    from radconcord.db.session import Database

    Database(url).dispose()  # migrate once, outside the measured process
    csv_path = tmp / "big.csv"
    write_cases_csv(csv_path, n_rows, "big")
    env = dict(os.environ, DATABASE_URL=url, RADCONCORD_DATA_DIR=str(tmp))
    proc = _spawn([str(Path(__file__).resolve()), "--child-import", url, str(csv_path), "Big"],
                  env, tmp / "big.log")
    out, _ = proc.communicate(timeout=900)
    if proc.returncode != 0:
        return {"error": (tmp / "big.log").read_text()[-500:]}
    figures = json.loads(out.strip().splitlines()[-1])
    figures["rows_per_s"] = n_rows / figures["seconds"]
    return figures


def _database(backend: str, tmp: Path, name: str):  # noqa: ANN202
    if backend == "sqlite":
        return f"sqlite:///{tmp / f'{name}.db'}", None
    import importlib.util

    spec = importlib.util.spec_from_file_location("radconcord_pgserver",
                                                  REPO / "tests" / "pgserver.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.PgServer(fast=False).start()
    return server.create_database(name), server


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios and print the figures."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child-import":
        child_import(*argv[1:4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("load", "import", "all"), default="all")
    parser.add_argument("--rows", type=int, default=60_000, help="rows imported under load")
    parser.add_argument("--import-rows", type=int, default=100_000)
    parser.add_argument("--raters", type=int, default=20)
    parser.add_argument("--scored-pairs", type=int, default=20_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h %s"],
                            capture_output=True, text=True).stdout.strip()
    print(f"code: {commit[:90]}  backend: {args.backend}  cores: {os.cpu_count()}")
    ok = True
    if args.scenario in ("load", "all"):
        with tempfile.TemporaryDirectory(prefix="radconcord-load-") as tmp:
            url, server = _database(args.backend, Path(tmp), "load")
            try:
                r = scenario_load(url, Path(tmp), args.rows, args.raters, args.scored_pairs)
            finally:
                if server is not None:
                    server.stop()
        imp = r["import"]
        print(f"\nload: {args.raters} raters (pause {PAUSE_S[0]}-{PAUSE_S[1]} s) while a "
              f"{args.rows}-row import and a BLEU+ROUGE-L job on {args.scored_pairs} pairs run")
        print(f"  saves {r['saves']} ({r['saves_during_import']} during the import), "
              f"failed {r['failed']}")
        print(f"  save latency ms: p50 {r['p50_ms']:.1f}  p95 {r['p95_ms']:.1f}  "
              f"max {r['max_ms']:.1f}   (goal: 0 failed, p95 < {TARGET_P95_MS:.0f})")
        for f in r["failures"]:
            print(f"    failure: {f}")
        if "seconds" in imp:
            print(f"  import: {imp['pairs']} pairs in {imp['seconds']:.1f} s "
                  f"({args.rows / imp['seconds']:.0f} rows/s), peak RSS "
                  f"{imp['peak_rss_mb']:.0f} MB")
        else:
            print(f"  import failed (rc {r['import_rc']}): {imp.get('error')}")
        print(f"  scoring job: {r['job']}  ({r['job_seconds']:.1f} s)")
        ok &= r["failed"] == 0 and r["p95_ms"] < TARGET_P95_MS
    if args.scenario in ("import", "all"):
        with tempfile.TemporaryDirectory(prefix="radconcord-import-") as tmp:
            url, server = _database(args.backend, Path(tmp), "imp")
            try:
                r = scenario_import(url, Path(tmp), args.import_rows)
            finally:
                if server is not None:
                    server.stop()
        if "error" in r:
            print(f"\nimport of {args.import_rows} rows failed: {r['error']}")
            ok = False
        else:
            print(f"\nimport alone: {args.import_rows} rows ({r['pairs']} pairs, {r['cases']} "
                  f"cases) in {r['seconds']:.1f} s = {r['rows_per_s']:.0f} rows/s "
                  f"(parsing {r['parse_seconds']:.1f} s); peak RSS {r['peak_rss_mb']:.0f} MB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
