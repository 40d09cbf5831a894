"""Review of issue 14's export: a pairwise study's judgements keep their raters.

In a pairwise study the Judgement is the rater's assignment: raters hold no Assignment rows,
so the export must still give each judgement its ``rater_index`` (and keep open answers,
as ``pairwise.export_rows`` does).
"""

from __future__ import annotations

import json

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import pairwise
from radconcord.backend.services.transfer.exports import export_study
from radconcord.backend.types import Actor
from tests.services.test_pairwise import build

SYSTEM = Actor.system()


def test_judgements_jsonl_names_every_judge_by_index(any_db, tmp_path, fast_password_hashing):
    db = any_db
    build(db, training=False)
    actors = {}
    for name in ("judge_one", "judge_two"):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    pairwise.make_comparisons(db, SYSTEM, "PW", seed=1)
    pairwise.assign_judgements(db, SYSTEM, "PW", list(actors), 2, 0)
    for n, actor in enumerate(actors.values()):
        items = pairwise.rater_comparisons(db, actor, "PW")
        # The first comparison answered and done; the second only rated (still open).
        pairwise.save_judgement(db, actor, items[0].opaque_id, preference="AB"[n],
                                rating_a=4, rating_b=2)
        pairwise.complete(db, actor, items[0].opaque_id)
        pairwise.save_judgement(db, actor, items[1].opaque_id, rating_a=3)

    out = tmp_path / "export"
    export_study(db, SYSTEM, study_name="PW", fmt="jsonl", out_dir=out)
    text = (out / "judgements.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines()]
    expected = pairwise.export_rows(db, SYSTEM, "PW")
    assert len(rows) == len(expected) == 6 * 2
    assert all(r["rater_index"] in (0, 1) for r in rows)
    done = sorted((r["rater_index"], r["preference"]) for r in rows if r["completed_at"])
    assert done == [(0, "A"), (1, "B")]
    assert sum(1 for r in rows if r["rating_a"] == 3 and not r["completed_at"]) == 2
    assert "judge_one" not in text and "judge_two" not in text
