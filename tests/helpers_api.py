"""A small rated study with real report texts, for API, CLI and progress tests."""

from __future__ import annotations

import datetime as dt

import numpy as np

from radconcord.backend.scoring.hashing import input_hash
from radconcord.db.models import Assignment, Case, Pair, Rating, Report, Study, User
from radconcord.db.session import Database

STUDY = "api-study"
RATERS = ("ann", "bob", "cat")
N_CASES = 10
SOURCES = ("gen-a", "gen-b")
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
FINDINGS = ["effusion", "pneumothorax", "consolidation", "cardiomegaly", "atelectasis",
            "edema", "nodule", "fracture", "opacity", "emphysema"]


def build_rated_study(url: str, *, n_cases: int = N_CASES, name: str = STUDY) -> None:
    """``2 * n_cases`` real pairs (20 by default) rated by ann and bob (everything completed),
    cat (even positions completed; pair 3 rated but unfinished, so left out) and imp
    (imported ratings of every third pair, no assignments: counted)."""
    db = Database(url)
    rng = np.random.default_rng(7)
    with db.begin() as s:
        users = [User(username=u, role="rater", password_hash="x") for u in (*RATERS, "imp")]
        s.add_all(users)
        study = Study(name=name, status="open")
        s.add(study)
        s.flush()
        pairs = []
        for c in range(n_cases):
            case = Case(external_id=f"case-{c}", study_id=study.id)
            s.add(case)
            s.flush()
            f = FINDINGS[c % len(FINDINGS)]
            ref_text = f"There is a small {f} on the right. No other acute finding."
            ref = Report(case_id=case.id, role="reference", text=ref_text)
            s.add(ref)
            for j, src in enumerate(SOURCES):
                other = FINDINGS[(c + 3 * j + 1) % len(FINDINGS)]
                cand_text = (f"Small right {f}. No acute finding." if j == 0 else
                             f"Large left {other} with {f}.")
                cand = Report(case_id=case.id, role="candidate", source=src, text=cand_text)
                s.add(cand)
                s.flush()
                pos = c * len(SOURCES) + j
                pair = Pair(study_id=study.id, case_id=case.id, reference_id=ref.id,
                            candidate_id=cand.id, source=src, opaque_id=f"op{pos}",
                            position=pos, input_hash=input_hash(ref_text, cand_text))
                s.add(pair)
                pairs.append(pair)
        s.flush()
        for r, user in enumerate(users):
            for i, pair in enumerate(pairs):
                if r == 2 and i % 2 and i != 3:
                    continue
                if r == 3 and i % 3:
                    continue
                if r < 3:
                    done = not (r == 2 and i == 3)
                    s.add(Assignment(study_id=study.id, rater_id=user.id, pair_id=pair.id,
                                     order_index=i, completed_at=T0 if done else None))
                lam = 0.4 if pair.source == "gen-a" else 1.5
                cell = rng.poisson(lam / 2, size=(6, 2))
                for cat in range(6):
                    for sig in range(2):
                        if cell[cat, sig]:
                            s.add(Rating(rater_id=user.id, pair_id=pair.id, category=cat + 1,
                                         significant=bool(sig), count=int(cell[cat, sig])))
    db.dispose()
