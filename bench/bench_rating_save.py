"""Autosave latency: 20 raters saving counts at once through ``rating.set_count``.

For each backend (a SQLite file in WAL mode; a PostgreSQL server started for the run with
fsync on) the script builds a study, assigns every rater pairs shared with other raters, then
measures the wall time of each ``set_count`` call in three scenarios:

1. ``1 rater``: one rater alone, calls back to back (the service time, no contention);
2. ``N paced``: N raters in threads, each pausing 0.1-0.5 s between saves (about ten times
   faster than a radiologist clicking; this is the scenario the 50 ms p95 target is for);
3. ``N burst``: N raters released together, each saving back to back with no pause (a
   saturation test: latency there is mostly queueing behind the single SQLite writer).

Every save changes the stored value, so each call is a full upsert plus audit event. It
prints p50/p95/p99/max, the p95 ratio against the 1-rater run and the paced p95 against the
target. ``SQLite, no gate`` is the same SQLite file without the in-process writer lock of
``db.session.Database`` (writers then rely on SQLite's busy handler alone), to show what the
lock buys. Usage::

    .venv/bin/python bench/bench_rating_save.py [--raters 20] [--calls 100] \
        [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from argon2 import PasswordHasher  # noqa: E402

from radconcord.backend.services.accounts import auth  # noqa: E402
from radconcord.backend.services.annotation import rating  # noqa: E402
from radconcord.backend.services.study_admin.assignment import assign_raters  # noqa: E402
from radconcord.backend.types import Actor  # noqa: E402
from radconcord.db.models import Case, Pair, Report, Study  # noqa: E402
from radconcord.db.session import Database  # noqa: E402

TARGET_P95_MS = 50.0
N_PAIRS = 40
RATERS_PER_PAIR = 5
PAUSE_S = (0.1, 0.5)  # think time between two saves of one rater in the paced scenario


class UngatedSQLiteDatabase(Database):
    """``Database`` without its in-process writer lock: SQLite's busy handler alone, which
    polls with sleeps of up to 100 ms (the behaviour before the lock was added)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._write_gate = None


def _pgserver():  # noqa: ANN202 - the tests/pgserver.py module
    # Loaded by path: a third-party wheel (radgraph) installs its own top-level "tests"
    # package, so "import tests.pgserver" is not reliable outside pytest.
    import importlib.util

    spec = importlib.util.spec_from_file_location("radconcord_pgserver",
                                                  REPO / "tests" / "pgserver.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _make_study(db: Database, name: str) -> None:
    with db.begin() as s:
        study = Study(name=name, status="open")
        s.add(study)
        s.flush()
        for i in range(N_PAIRS):
            case = Case(external_id=f"{name}-{i}")
            s.add(case)
            s.flush()
            ref = Report(case_id=case.id, role="reference", text=f"Reference {i}.")
            cand = Report(case_id=case.id, role="candidate", source="gen", text=f"Candidate {i}.")
            s.add_all([ref, cand])
            s.flush()
            s.add(Pair(study_id=study.id, case_id=case.id, reference_id=ref.id,
                       candidate_id=cand.id, source="gen", opaque_id=uuid.uuid4().hex[:12],
                       position=i, input_hash=f"{i:064d}"))


def _setup(db: Database, n_raters: int) -> tuple[list[Actor], dict[str, list[str]]]:
    # Account creation is not what is measured: cheap argon2 parameters keep set-up short.
    auth._hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    _make_study(db, "Bench")
    actors = []
    for i in range(n_raters):
        name = f"rater{i:02d}"
        auth.create_user(db, Actor.system(), username=name, password=f"{name}-pw", role="rater")
        actors.append(auth.authenticate(db, username=name, password=f"{name}-pw"))
    assign_raters(db, Actor.system(), study_name="Bench",
                  rater_usernames=[a.username for a in actors],
                  raters_per_pair=min(RATERS_PER_PAIR, n_raters), seed=0)
    queues = {a.username: [q.opaque_id for q in rating.rater_queue(db, a, study_name="Bench")]
              for a in actors}
    return actors, queues


def _calls(actor: Actor, queue: list[str], n: int, db: Database, out: list[float],
           barrier: threading.Barrier | None, pause: tuple[float, float] | None) -> None:
    rng = random.Random(actor.username)
    plan = [(rng.choice(queue), rng.randint(1, 6), rng.random() < 0.5) for _ in range(n)]
    current: dict[tuple[str, int, bool], int] = {}
    if barrier is not None:
        barrier.wait()
    for oid, category, significant in plan:
        if pause is not None:
            time.sleep(rng.uniform(*pause))
        # Always a new value, so every call is a real change (upsert + audit event).
        cell = (oid, category, significant)
        count = current.get(cell, 0) % 9 + 1
        current[cell] = count
        t0 = time.perf_counter()
        rating.set_count(db, actor, opaque_id=oid, category=category, significant=significant,
                         count=count)
        out.append((time.perf_counter() - t0) * 1000)


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1]


def _threads(db: Database, actors: list[Actor], queues: dict[str, list[str]], n_calls: int,
             pause: tuple[float, float] | None) -> tuple[list[float], float]:
    per_thread: list[list[float]] = [[] for _ in actors]
    barrier = threading.Barrier(len(actors))
    threads = [
        threading.Thread(target=_calls, args=(a, queues[a.username], n_calls, db,
                                              per_thread[i], barrier, pause))
        for i, a in enumerate(actors)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    values = [x for xs in per_thread for x in xs]
    assert len(values) == len(actors) * n_calls
    return values, wall


def _run(db: Database, n_raters: int, n_calls: int) -> dict[str, list[float]]:
    actors, queues = _setup(db, n_raters)
    first = actors[0]
    _calls(first, queues[first.username], 10, db, [], None, None)  # warm pool and caches
    alone: list[float] = []
    _calls(first, queues[first.username], n_calls, db, alone, None, None)
    paced, _ = _threads(db, actors, queues, n_calls, PAUSE_S)
    burst, wall = _threads(db, actors, queues, n_calls, None)
    print(f"  {len(burst) / wall:.0f} saves/s in the burst", file=sys.stderr)
    return {"1 rater": alone, f"{n_raters} paced": paced, f"{n_raters} burst": burst}


def _row(label: str, values: list[float]) -> str:
    return (f"{label:<36} {len(values):>6} {statistics.median(values):>8.2f} "
            f"{_pct(values, 95):>8.2f} {_pct(values, 99):>8.2f} {max(values):>8.2f}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raters", type=int, default=20)
    parser.add_argument("--calls", type=int, default=100, help="set_count calls per rater")
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args(argv)

    results = {}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        if backend == "sqlite":
            for label, db_class in (("SQLite (WAL)", Database),
                                    ("SQLite, no gate", UngatedSQLiteDatabase)):
                with tempfile.TemporaryDirectory(prefix="radconcord-bench-") as tmp:
                    db = db_class(f"sqlite:///{Path(tmp) / 'bench.db'}")
                    try:
                        results[label] = _run(db, args.raters, args.calls)
                    finally:
                        db.dispose()
        elif backend == "postgres":
            with _pgserver().PgServer(fast=False) as server:
                db = Database(server.create_database("bench"))
                try:
                    results["PostgreSQL"] = _run(db, args.raters, args.calls)
                finally:
                    db.dispose()
        else:
            parser.error(f"unknown backend {backend!r}")

    print(f"set_count latency in ms: {args.raters} raters x {args.calls} saves, {N_PAIRS} "
          f"pairs, {RATERS_PER_PAIR} raters per pair, paced pause {PAUSE_S[0]}-{PAUSE_S[1]} s")
    print(f"{'backend / scenario':<36} {'calls':>6} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8}")
    for name, scenarios in results.items():
        for scenario, values in scenarios.items():
            print(_row(f"{name} {scenario}", values))
    print()
    paced_key, burst_key = f"{args.raters} paced", f"{args.raters} burst"
    print(f"{'backend':<26} {'paced/1 p95':>11} {'burst/1 p95':>11} {'paced p95/target':>16}"
          f"  target: paced p95 < {TARGET_P95_MS:.0f} ms")
    ok = True
    for name, r in results.items():
        base = _pct(r["1 rater"], 95)
        p95 = _pct(r[paced_key], 95)
        ok &= p95 < TARGET_P95_MS
        print(f"{name:<26} {p95 / base:>11.2f} {_pct(r[burst_key], 95) / base:>11.2f} "
              f"{p95 / TARGET_P95_MS:>16.2f}  {'met' if p95 < TARGET_P95_MS else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
