"""The README's Python examples run as written.

The "Python API" block runs verbatim against a rated study named ``rexval`` in the default
database. The "Rewards for RL training" block runs verbatim except for the policy's hub id,
replaced by a tiny local Llama (no download), and ``use_cpu=True`` where there is no GPU, as
the README says; its BERTScore uses the packaged MiniLM and its
RadGraph tiny random weights in ``$RADCONCORD_MODEL_DIR``, so every reward it names is
computed by a real ``GRPOTrainer``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from radconcord.backend.cli import main
from tests.helpers_api import build_rated_study

REPO = Path(__file__).resolve().parents[2]


def readme_block(section: str) -> str:
    """The first ```python block under the README heading ``## <section>``."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end != -1 else None]
    match = re.search(r"```python\n(.*?)```", body, re.S)
    assert match, f"no python block under '## {section}'"
    return match.group(1)


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("RADCONCORD_MODEL_DIR", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return tmp_path


def test_python_api_example(offline, monkeypatch, capsys):
    url = f"sqlite:///{offline / 'studies.db'}"
    build_rated_study(url, name="rexval")
    monkeypatch.setenv("DATABASE_URL", url)
    assert main(["score", "--study", "rexval", "--metrics", "bleu4,rougeL,bertscore_f"]) == 0
    capsys.readouterr()

    ns: dict = {}
    exec(compile(readme_block("Python API"), "README.md:Python API", "exec"), ns)

    df = ns["df"]
    assert df.shape == (2, 3) and list(df.columns) == ["bleu4", "rougeL", "bertscore_f"]
    assert set(df.attrs["signatures"]) == {"bleu4", "rougeL", "bertscore_f"}
    study = ns["study"]
    assert {"bleu4", "rougeL", "bertscore_f"} <= set(study.scores.columns)
    assert study.errors("total").shape == (len(study.pairs), len(study.raters))
    # Nothing but the study database: score() wrote no database of its own.
    assert sorted(p.name for p in offline.iterdir()) == ["studies.db"]


def _tiny_policy_folder(path: Path) -> Path:
    from tests.api.test_rewards import _tiny_policy

    model, tokenizer = _tiny_policy()
    # GRPOConfig's default completion length (256) plus the prompt must fit the positions.
    model.config.max_position_embeddings = 512
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.slow
def test_rewards_example_trains_with_both_rewards(offline, monkeypatch):
    from tests.helpers_radgraph import build_tiny_radgraph

    models = offline / "models"
    models.mkdir()
    build_tiny_radgraph(offline / "rg").rename(models / "radgraph.tar.gz")
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(models))
    policy = _tiny_policy_folder(offline / "policy")

    import torch

    code = readme_block("Rewards for RL training")
    hub_id = '"Qwen/Qwen2.5-0.5B-Instruct"'
    assert code.count(hub_id) == 1 and code.count("GRPOConfig(") == 1
    code = code.replace(hub_id, repr(str(policy)))
    if not torch.cuda.is_available():
        # What the README says to add on a machine without a GPU.
        code = code.replace("GRPOConfig(", "GRPOConfig(use_cpu=True, ")
    ns: dict = {}
    exec(compile(code, "README.md:Rewards", "exec"), ns)

    trainer = ns["trainer"]
    logged = [entry for entry in trainer.state.log_history
              if "rewards/radconcord_bertscore_f/mean" in entry]
    assert logged, trainer.state.log_history
    for entry in logged:
        assert math.isfinite(entry["rewards/radconcord_bertscore_f/mean"])
        assert math.isfinite(entry["rewards/radconcord_radgraph_combined/mean"])
    assert (offline / "grpo-out").is_dir()
