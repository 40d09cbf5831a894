"""ER2Score training from a study's ratings: data gathering, learning, saving, scoring, CLI."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import uuid

import pytest

from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.metrics import er2score
from radconcord.backend.services.evaluation import er2train
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Case, Pair, Rating, Report, Study, User
from tests.helpers_llm import build_tiny_llama

ADMIN = Actor.system()
RATER = Actor(user_id=5, username="r", role="rater")

# Reference reports (vocabulary of the tiny tokenizer). Candidate i of a case repeats the
# reference and adds i "spurious nodule seen." sentences; the raters count one false finding
# (category 1) per such sentence, so the error count is a text feature a small model can learn.
REFERENCES = (
    "no acute cardiopulmonary process.",
    "lungs are clear. heart size is normal.",
    "mild cardiomegaly. small left pleural effusion.",
    "right lobe consolidation, pneumonia.",
    "bilateral pleural effusion and edema.",
    "left lobe atelectasis.",
    "no pneumothorax.",
    "heart size is normal. no pleural effusion.",
)


def _insert_study(db, name: str, n_cases: int, *, seed: int = 0) -> dict[str, int]:
    """A study of n_cases x 4 candidates; rater 'ann' rates all, 'bob' every other case.

    Bob's ratings of odd cases... none: he has no assignment there, so only ann counts.

    Returns ``opaque id -> expected category-1 mean``.
    """
    rng = random.Random(seed)
    expected: dict[str, float] = {}
    with db.begin() as s:
        ann = User(username=f"ann-{name}", role="rater", password_hash="x")
        bob = User(username=f"bob-{name}", role="rater", password_hash="x")
        study = Study(name=name, status="open")
        s.add_all([ann, bob, study])
        s.flush()
        position = 0
        for c in range(n_cases):
            ref_text = REFERENCES[c % len(REFERENCES)] + (" mild edema." if c >= 8 else "")
            case = Case(external_id=f"{name}-{c}")
            s.add(case)
            s.flush()
            ref = Report(case_id=case.id, role="reference", text=ref_text)
            s.add(ref)
            s.flush()
            for k in range(4):
                cand_text = ref_text + " spurious nodule seen." * k
                cand = Report(case_id=case.id, role="candidate", source=f"gen{k}", text=cand_text)
                s.add(cand)
                s.flush()
                oid = uuid.uuid4().hex[:12]
                pair = Pair(
                    study_id=study.id, case_id=case.id, reference_id=ref.id,
                    candidate_id=cand.id, source=f"gen{k}", opaque_id=oid, position=position,
                    input_hash=hashlib.sha256(f"{ref_text}\x00{cand_text}".encode()).hexdigest(),
                )
                s.add(pair)
                s.flush()
                position += 1
                # ann: exact count, completed assignment (cells left at 0 store no row).
                s.add(Assignment(study_id=study.id, rater_id=ann.id, pair_id=pair.id,
                                 order_index=position, completed_at=case.created_at))
                if k:
                    s.add(Rating(rater_id=ann.id, pair_id=pair.id, category=1,
                                 significant=True, count=k))
                mean = float(k)
                if c % 2 == 0:
                    # bob: completed assignment, one extra insignificant false finding
                    # sometimes (so means are not integers).
                    extra = rng.choice([0, 1])
                    s.add(Assignment(study_id=study.id, rater_id=bob.id, pair_id=pair.id,
                                     order_index=position, completed_at=case.created_at))
                    if k + extra:
                        s.add(Rating(rater_id=bob.id, pair_id=pair.id, category=1,
                                     significant=False, count=k + extra))
                    mean = (k + k + extra) / 2
                expected[oid] = mean
        # One pair assigned to bob but not completed and never rated by ann: left out.
        case = Case(external_id=f"{name}-wip")
        s.add(case)
        s.flush()
        ref = Report(case_id=case.id, role="reference", text="no pneumothorax.")
        cand = Report(case_id=case.id, role="candidate", source="gen0", text="no edema.")
        s.add_all([ref, cand])
        s.flush()
        wip = Pair(study_id=study.id, case_id=case.id, reference_id=ref.id,
                   candidate_id=cand.id, source="gen0", opaque_id=uuid.uuid4().hex[:12],
                   position=position, input_hash="0" * 64)
        s.add(wip)
        s.flush()
        s.add(Assignment(study_id=study.id, rater_id=bob.id, pair_id=wip.id,
                         order_index=position + 1))
    return expected


def test_training_set_means_and_exclusions(db) -> None:
    expected = _insert_study(db, "gather", 4)
    ts = er2train.gather_training_set(db, ADMIN, study="gather")
    assert ts.n_pairs == 17 and ts.n_unrated == 1 and len(ts.items) == 16
    got = {it.pair_id: it for it in ts.items}
    assert set(got) == set(expected)
    for oid, mean in expected.items():
        assert got[oid].errors[0] == pytest.approx(mean)
        assert got[oid].errors[1:] == (0.0,) * 5
    # Four references, four candidates each.
    assert len({it.group for it in ts.items}) == 4
    assert all(it.reference in it.candidate for it in ts.items)


def test_training_set_needs_admin_and_existing_study(db) -> None:
    _insert_study(db, "perm", 2)
    with pytest.raises(PermissionDenied):
        er2train.gather_training_set(db, RATER, study="perm")
    with pytest.raises(NotFound, match="nope"):
        er2train.gather_training_set(db, ADMIN, study="nope")


def test_preference_pairs_and_margins() -> None:
    a = er2score.RatedCandidate("a", "g", "r", "c0", (0.0, 1.0, 0, 0, 0, 0))
    b = er2score.RatedCandidate("b", "g", "r", "c1", (2.0, 0.0, 0, 0, 0, 0))
    c = er2score.RatedCandidate("c", "g", "r", "c2", (1.0, 0.0, 0, 0, 0, 0))  # ties with a
    d = er2score.RatedCandidate("d", "h", "r2", "c3", (5.0, 0, 0, 0, 0, 0))  # alone
    pairs = er2score.preference_pairs([a, b, c, d], margin_scale=0.5)
    assert len(pairs) == 2
    ab = next(p for p in pairs if {p.accepted.pair_id, p.rejected.pair_id} == {"a", "b"})
    assert ab.accepted.pair_id == "a" and ab.margin == pytest.approx(0.5)
    assert ab.sub_margins[:2] == pytest.approx((1.0, -0.5))


def test_loss_terms_follow_the_definition() -> None:
    import torch

    r_acc = torch.tensor([[1.0, 0.0, 0.3, 0, 0, 0]])
    r_rej = torch.tensor([[0.0, 0.5, 0.3, 0, 0, 0]])
    margin = torch.tensor([0.2])
    sub = torch.tensor([[0.4, -0.1, 0.0, 0, 0, 0]])
    got = float(er2score.reward_loss(r_acc, r_rej, margin, sub))

    def nls(x: float) -> float:
        return math.log1p(math.exp(-x))

    total = nls((1.3) - (0.8) - 0.2)
    k1 = nls(1.0 - 0.4)  # accepted wins category 1 by 1.0, margin 0.4
    k2 = nls(-1 * (0.0 - 0.5) - 0.1)  # rejected has fewer errors: its sub-reward must win
    held = 0.0  # equal sub-rewards in the tied categories: inside eps
    assert got == pytest.approx(total + k1 + k2 + held, rel=1e-5)
    # A tied category whose sub-rewards drift apart by more than eps is penalised.
    r_rej2 = r_rej.clone()
    r_rej2[0, 2] = 0.8
    got2 = float(er2score.reward_loss(r_acc, r_rej2, margin, sub))
    total2 = nls(1.3 - 1.3 - 0.2)
    assert got2 == pytest.approx(total2 + k1 + k2 + (0.5 - 0.01) ** 2, rel=1e-5)


def test_training_learns_and_adapter_scores(db, tmp_path, capsys) -> None:
    """Held-out Kendall tau (ER2Score vs -errors) of the trained model beats the untrained one.

    The untrained model is the same backbone with LoRA at its identity initialisation and the
    same seeded head, i.e. exactly the model before the first optimiser step.
    """
    _insert_study(db, "learn", 16)
    base = build_tiny_llama(tmp_path)
    out = tmp_path / "adapter"
    summary = er2train.train_from_study(
        db, ADMIN, study="learn", base=str(base), output=out, epochs=3, lr=2e-3, seed=0,
        heldout=0.3, batch_size=8,
    )
    print(f"held-out tau: untrained {summary.tau_untrained:.3f} trained {summary.tau_trained:.3f}")
    assert summary.n_heldout_items == 20 and summary.n_train_items == 44
    assert summary.tau_trained > summary.tau_untrained + 0.3
    assert summary.tau_trained > 0.5
    for name in ("adapter_config.json", "adapter_model.safetensors", er2score.HEAD_FILE,
                 er2score.META_FILE):
        assert (out / name).is_file(), name
    meta = json.loads((out / er2score.META_FILE).read_text())
    assert meta["study"] == "learn" and meta["categories"] == list(er2score.CATEGORY_KEYS)
    assert meta["base"]["model"] == str(base) and meta["base"]["fingerprint"].startswith("fp:")
    assert meta["hyperparameters"]["seed"] == 0 and meta["hyperparameters"]["lr"] == 2e-3

    # Scoring through the metric reproduces the trained held-out ranking.
    data = er2train.gather_training_set(db, ADMIN, study="learn")
    _, held = er2score.split_groups(data.items, 0.3, 0)
    metric = er2score.ER2Score(adapter=str(out))
    assert metric.availability() is None
    res = metric.score(
        references=[h.reference for h in held], candidates=[h.candidate for h in held]
    )
    tau = er2score.kendall_tau_vs_errors(res.values["er2score"], held)
    assert tau == pytest.approx(summary.tau_trained, abs=1e-6)
    sums = [sum(res.values[k][i] for k in er2score.CATEGORY_KEYS) for i in range(len(held))]
    assert res.values["er2score"] == pytest.approx(sums)
    sig = metric.signature()
    assert er2score.adapter_fingerprint(out)[:16] in sig and "dtype:fp32" in sig


def test_train_rejects_bad_requests(db, tmp_path) -> None:
    _insert_study(db, "bad", 2)
    base = build_tiny_llama(tmp_path)
    with pytest.raises(PermissionDenied):
        er2train.train_from_study(db, RATER, study="bad", base=str(base), output=tmp_path / "o")
    with pytest.raises(InvalidInput, match="does not exist"):
        er2train.train_from_study(db, ADMIN, study="bad", base=str(tmp_path / "nope"),
                                  output=tmp_path / "o")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(InvalidInput, match="not empty"):
        er2train.train_from_study(db, ADMIN, study="bad", base=str(base), output=busy)
    with pytest.raises(InvalidInput, match="heldout"):
        er2train.train_from_study(db, ADMIN, study="bad", base=str(base),
                                  output=tmp_path / "o", heldout=1.5)
    assert not (tmp_path / "o").exists()


def test_command_prints_both_taus(db, tmp_path, capsys, monkeypatch) -> None:
    from radconcord.backend.cli import metrics as metric_commands
    from radconcord.backend.cli.common import Commands

    monkeypatch.setenv("DATABASE_URL", db.url)
    _insert_study(db, "cli", 6)
    base = build_tiny_llama(tmp_path)
    parser = argparse.ArgumentParser()
    commands = Commands(parser.add_subparsers(dest="command"))
    metric_commands.register(commands)
    commands.finish()
    args = parser.parse_args([
        "model", "train-er2score", "--study", "cli", "--base", str(base), "--output",
        str(tmp_path / "ad"), "--epochs", "1", "--lr", "1e-3", "--heldout", "0.34",
        "--device", "cpu",
    ])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "untrained" in out and "trained" in out and "held-out Kendall tau" in out
    assert (tmp_path / "ad" / er2score.META_FILE).is_file()
    from radconcord.backend.cli import UserError

    args = parser.parse_args(["train-er2score", "--study", "missing", "--base", str(base),
                              "--output", str(tmp_path / "ad2"), "--device", "cpu"])
    with pytest.raises(UserError, match="missing"):
        args.func(args)
