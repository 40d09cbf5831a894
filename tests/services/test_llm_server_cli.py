"""``model serve-llm`` (old name ``llm-serve``): the command starts a real server that answers
like the in-process model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from radconcord.backend.metrics import llm
from radconcord.backend.metrics.base import Resources
from radconcord.backend.metrics.llm_backends import OpenAIChatBackend, TransformersBackend
from tests.helpers_llm import build_tiny_llama
from tests.process_helpers import interruptible

REPO = Path(__file__).resolve().parents[2]
# The command module on a parser of its own (independent of COMMAND_MODULES).
RUN = (
    "import argparse, sys\n"
    "from radconcord.backend.cli import llm\n"
    "from radconcord.backend.cli.common import Commands, UserError\n"
    "p = argparse.ArgumentParser()\n"
    "c = Commands(p.add_subparsers(dest='c', required=True)); llm.register(c); c.finish()\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "try:\n"
    "    a.func(a)\n"
    "except UserError as e:\n"
    "    print('error:', e, file=sys.stderr); sys.exit(2)\n"
    "except KeyboardInterrupt:\n"
    "    sys.exit(130)\n"
)


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RUN, "llm-serve", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            preexec_fn=interruptible)


def test_llm_serve_serves_the_model(tmp_path) -> None:
    path = build_tiny_llama(tmp_path)
    proc = _start("--model", str(path), "--port", "0", "--device", "cpu", "--model-id", "t")
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving t at http://127.0.0.1:"), (line, proc.stderr.read())
        url = line.split(" at ")[1].split(" ")[0]
        got = OpenAIChatBackend(url).generate(["lungs are clear", "pleural effusion"],
                                              max_new_tokens=6)
        lm = llm.shared_lm(Resources(), path, device="cpu", dtype=torch.float32)
        want = TransformersBackend(lm).generate(["lungs are clear", "pleural effusion"],
                                                max_new_tokens=6)
        assert got == want
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 130


def test_llm_serve_bad_model_is_one_error_line(tmp_path) -> None:
    proc = _start("--model", str(tmp_path / "nothing-here"), "--port", "0")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.strip().startswith("error: cannot load --model") and "does not exist" in err
