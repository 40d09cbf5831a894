"""Build a study for the adaptive-order and simulation tests (pairs, raters, scores, ratings).

Every pair has a hidden quality; raters count errors around it (Poisson) and three registry
metrics (bleu4 and rougeL higher-is-better, radcliq_v1 lower-is-better) follow it with
different noise, so the metric taus differ and a tau difference exists.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
from sqlalchemy import select

from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Case, MetricScore, Pair, Rating, Report, Study, User

SYSTEM = Actor.system()
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
KEYS = ("bleu4", "radcliq_v1", "rougeL")


def build_study(db: Any, name: str = "adapt", *, n_pairs: int = 30,
                raters: tuple[str, ...] = ("ra", "rb", "rc"), k: int = 3, seed: int = 5,
                data_seed: int = 0, scores: bool = True) -> dict[str, Any]:
    """Create the study, its raters and assignments (k per pair) and the metric scores.

    Returns:
        ``{"counts": (R, n) total errors each rater will give, "metrics": {key: (n,)},
        "raters": raters}`` (rows of ``counts`` in ``raters`` order, columns by position).
    """
    rng = np.random.default_rng(data_seed)
    quality = rng.normal(size=n_pairs)
    with db.begin() as s:
        for u in raters:
            if s.scalar(select(User).where(User.username == u)) is None:
                s.add(User(username=u, role="rater", password_hash="x"))
        study = Study(name=name, description="adaptive test", status="open")
        s.add(study)
        s.flush()
        for i in range(n_pairs):
            case = Case(external_id=f"{name}-case-{i}", study_id=study.id)
            s.add(case)
            s.flush()
            ref = Report(case_id=case.id, role="reference", text=f"ref {i}")
            cand = Report(case_id=case.id, role="candidate", source=f"gen-{i % 2}",
                          text=f"cand {i}")
            s.add_all([ref, cand])
            s.flush()
            s.add(Pair(study_id=study.id, case_id=case.id, reference_id=ref.id,
                       candidate_id=cand.id, source=f"gen-{i % 2}", opaque_id=f"{name}-op{i}",
                       position=i, input_hash=f"{name}-h{i:04d}"))
    assign_raters(db, SYSTEM, study_name=name, rater_usernames=list(raters),
                  raters_per_pair=k, seed=seed)
    metrics = {
        "bleu4": -quality + rng.normal(scale=0.3, size=n_pairs),
        "radcliq_v1": quality + rng.normal(scale=1.5, size=n_pairs),
        "rougeL": -quality + rng.normal(scale=0.8, size=n_pairs),
    }
    if scores:
        with db.begin() as s:
            for key, vals in metrics.items():
                for i, v in enumerate(vals):
                    s.add(MetricScore(input_hash=f"{name}-h{i:04d}", family=key, key=key,
                                      signature_hash=f"sig-{key}", signature=f"{key}|v1",
                                      value=float(v), created_at=T0))
    lam = np.exp(0.8 * quality) * 1.5
    counts = rng.poisson(np.broadcast_to(lam, (len(raters), n_pairs))).astype(float)
    return {"counts": counts, "metrics": metrics, "raters": raters}


def rate_everything(db: Any, name: str, counts: np.ndarray, raters: tuple[str, ...]) -> int:
    """Store each open assigned (rater, pair)'s count (category 1, significant), completed."""
    n = 0
    with db.begin() as s:
        rows = s.execute(
            select(Assignment, User.username, Pair.position)
            .join(User, User.id == Assignment.rater_id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .join(Study, Study.id == Assignment.study_id)
            .where(Study.name == name)
        ).all()
        for a, user, pos in rows:
            if a.completed_at is not None:
                continue
            c = int(counts[raters.index(user), pos])
            for cat in range(1, 7):
                for sig in (True, False):
                    s.add(Rating(rater_id=a.rater_id, pair_id=a.pair_id, category=cat,
                                 significant=sig, count=c if (cat, sig) == (1, True) else 0))
            a.completed_at = T0
            n += 1
    return n


def queue_positions(db: Any, name: str, rater: str) -> list[tuple[int, bool]]:
    """(pair position, completed) of a rater's queue in order."""
    with db.begin() as s:
        return [
            (int(pos), done is not None)
            for pos, done in s.execute(
                select(Pair.position, Assignment.completed_at)
                .join(Assignment, Assignment.pair_id == Pair.id)
                .join(User, User.id == Assignment.rater_id)
                .join(Study, Study.id == Assignment.study_id)
                .where(Study.name == name, User.username == rater)
                .order_by(Assignment.order_index, Assignment.id)
            )
        ]


def rater_actor(db: Any, username: str) -> Actor:
    """The rater's Actor (as the web app builds it after login)."""
    with db.begin() as s:
        uid = s.scalar(select(User.id).where(User.username == username))
    return Actor(user_id=int(uid), username=username, role="rater")
