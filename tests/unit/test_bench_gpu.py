"""bench/bench_gpu.py cannot rot: its tiny sizes run on CPU, end to end, in seconds.

The same code measures the full-size models on a GPU (CheXbert-size labels, roberta-large
BERTScore, the 7B llm_rexval judge, a RadGraph-size span model); here every model is 2 layers
of hidden 64, and the JSON must still name every item with a positive throughput and both
goals with their pass/fail fields.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_gpu.py"
ITEMS = ("chexbert", "bertscore", "llm_rexval", "radgraph")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO))
    return env


def test_tiny_run_on_cpu_reports_every_item_and_the_goals(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--device", "cpu", "--time-limit", "240",
         "--out", str(out)],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    data = json.loads(proc.stdout)  # stdout is exactly one JSON document
    assert json.loads(out.read_text()) == data
    assert data["tiny"] is True and data["complete"] is True and data["device"] == "cpu"
    for key in ("device_name", "torch", "transformers", "date"):
        assert data[key]
    assert set(data["items"]) == set(ITEMS)
    for name in ITEMS:
        item = data["items"][name]
        assert "error" not in item, (name, item.get("error"))
        assert item["throughput"] > 0, name
        assert item["seconds"] > 0 and "peak_gpu_mb" in item, name
        unit = item["unit"]
        for cfg in item["configs"]:
            assert cfg[unit] > 0 and cfg["seconds"] > 0 and "peak_gpu_mb" in cfg, (name, cfg)
    judge = data["items"]["llm_rexval"]["configs"][0]
    # min_new_tokens forced: a random model must not stop early and flatter the rate.
    assert judge["generated_tokens"] == judge["max_new_tokens"] == 10
    assert 450 <= judge["mean_prompt_tokens"] <= 750
    goals = {g["item"]: g for g in data["goals"]}
    assert set(goals) == {"chexbert", "llm_rexval"}
    assert goals["chexbert"]["target"] == 2000 and goals["llm_rexval"]["target"] == 4.5
    for g in goals.values():
        assert isinstance(g["pass"], bool) and g["applies"] is False
        assert g["value"] == data["items"][g["item"]]["throughput"]


def test_imports_without_torch_and_refuses_unknown_items():
    code = ("import sys; sys.path.insert(0, 'bench'); import bench_gpu;"
            " assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(), check=True, timeout=60)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--only", "chexbert,bogus"],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "bogus" in proc.stderr
