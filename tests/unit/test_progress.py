"""Progress of long commands (backend/cli/progress.py) and the commands that draw it.

On a terminal: a tqdm bar with counts, rate and time left. Elsewhere (CI, logs): plain lines,
at most one per ``interval`` seconds plus a closing line, each with count, rate and time left.
The commands ``score``, ``simulate-rating`` and ``train-er2score`` pass their service's progress
to it on stderr, so stdout stays what scripts parse.
"""

from __future__ import annotations

import io
import re

import pytest

from radconcord.backend.cli import main
from radconcord.backend.cli import progress as progress_module
from radconcord.backend.cli.progress import progress_bar

PLAIN = re.compile(r"^(?P<desc>[\w-]+): (?P<done>\d+)(/(?P<total>\d+))? (?P<unit>\w+)s,"
                   r" (?P<rate>[\d.]+) \w+/s(, (?P<left>\d+) s left)?( \((?P<msg>.*)\))?$")


class FakeClock:
    """``time.monotonic`` under the test's control (the interval logic reads it)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(progress_module.time, "monotonic", c)
    return c


def _lines(stream: io.StringIO) -> list[re.Match[str]]:
    out = []
    for line in stream.getvalue().splitlines():
        m = PLAIN.match(line)
        assert m, f"not a progress line: {line!r}"
        out.append(m)
    return out


def test_plain_lines_at_most_once_per_interval_then_a_closing_line(clock):
    stream = io.StringIO()
    with progress_bar("score", unit="pair", stream=stream, interval=10.0, tty=False) as p:
        clock.now += 1
        p(10, 100, "bleu: 10 computed")  # the first update is printed at once
        clock.now += 4
        p(50, 100, "bleu: 50 computed")  # 5 s after start: within the interval, quiet
        clock.now += 7
        p(60, 100, "bleu: 60 computed")  # 12 s: printed
        clock.now += 3
        p(100, 100, "bleu: 100 computed")  # quiet, but the closing line reports it
    lines = _lines(stream)
    assert [m["done"] for m in lines] == ["10", "60", "100"]
    assert all(m["desc"] == "score" and m["unit"] == "pair" and m["total"] == "100"
               for m in lines)
    assert [m["msg"] for m in lines] == ["bleu: 10 computed", "bleu: 60 computed", "done"]
    # Rate = done / elapsed; time left = remaining / rate.
    assert float(lines[0]["rate"]) == pytest.approx(10.0, abs=0.05)
    assert lines[0]["left"] == "9"  # 90 pairs at 10 pair/s
    assert float(lines[1]["rate"]) == pytest.approx(5.0, abs=0.05)
    assert lines[1]["left"] == "8"
    assert lines[2]["left"] == "0"


def test_plain_interval_zero_prints_every_update_and_no_duplicate_close(clock):
    stream = io.StringIO()
    with progress_bar("simulate-rating", unit="replay", stream=stream, interval=0.0,
                      tty=False) as p:
        for i in range(1, 5):
            clock.now += 2
            p(i, 4, f"random order, seed {i}")
    lines = _lines(stream)
    assert [int(m["done"]) for m in lines] == [1, 2, 3, 4]
    assert lines[-1]["msg"] == "random order, seed 4"  # already shown: no extra "done"


def test_plain_unknown_total_and_nothing_done(clock):
    stream = io.StringIO()
    with progress_bar("import", unit="row", stream=stream, tty=False) as p:
        clock.now += 2
        p(40, 0, "")
    (line,) = _lines(stream)
    assert line["done"] == "40" and line["total"] is None and line["left"] is None
    quiet = io.StringIO()
    with progress_bar("import", unit="row", stream=quiet, tty=False):
        pass
    assert quiet.getvalue() == ""


def test_terminal_bar_shows_counts_rate_and_time_left():
    stream = io.StringIO()
    with progress_bar("score", unit="pair", stream=stream, tty=True) as p:
        p(3, 10, "bleu: 3 computed")
        p(10, 10, "done")
    text = stream.getvalue()
    assert "\r" in text and text.endswith("\n")
    final = text.rstrip("\n").split("\r")[-1]
    assert final.startswith("score: 100%")
    assert "10/10 [" in final and "pair/s" in final and "done" in final
    assert re.search(r"3/10 \[\d\d:\d\d<\d\d:\d\d, ", text)  # elapsed<left, rate


def test_stream_decides_between_bar_and_lines():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, plain = Tty(), io.StringIO()
    for stream in (tty, plain):
        with progress_bar("x", stream=stream) as p:
            p(1, 2, "")
            p(2, 2, "")
    assert "\r" in tty.getvalue() and "%|" in tty.getvalue()
    assert "\r" not in plain.getvalue() and plain.getvalue().startswith("x: 1/2 its")



def _pty_output(rows: int, cols: int) -> str:
    """What progress_bar draws on a real pseudo-terminal of the given size."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        with os.fdopen(os.dup(slave), "w", encoding="utf-8") as tty:
            with progress_bar("score", unit="pair", stream=tty) as p:
                p(3, 10, "bleu: 3 computed")
                p(10, 10, "done")
        chunks = []
        os.set_blocking(master, False)
        while True:
            try:
                chunk = os.read(master, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize(("rows", "cols"), [(0, 0), (40, 0), (0, 120), (40, 120)])
def test_bar_is_drawn_on_a_pseudo_terminal_of_any_reported_size(rows, cols):
    """A pty whose size was never set (docker run -t, script, CI runners) reports 0x0;
    tqdm alone draws nothing there. The bar must show its count, rate and time left."""
    text = _pty_output(rows, cols)
    assert re.search(r"score:\s+30%\|.*3/10 \[\d\d:\d\d<\d\d:\d\d, ", text), text
    final = text.replace("\r\n", "\n").rstrip("\n").split("\r")[-1]
    assert final.startswith("score: 100%") and "10/10" in final and "pair/s" in final
    width = cols or 80
    assert max(len(line) for line in text.replace("\r\n", "\n").replace("\r", "\n")
               .splitlines()) <= width

# --- commands -----------------------------------------------------------------------------


def test_score_command_draws_plain_progress_on_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("id,reference,candidate\n" + "".join(
        f"p{i},No effusion {i}.,No pleural effusion {i}.\n" for i in range(5)), encoding="utf-8")
    assert main(["score", "--input", str(pairs), "--metrics", "bleu4,rougeL", "--output",
                 str(tmp_path / "s.csv"), "--no-cache"]) == 0
    captured = capsys.readouterr()
    lines = [PLAIN.match(line) for line in captured.err.splitlines() if line.startswith("score:")]
    assert lines and all(lines)
    assert lines[-1]["done"] == lines[-1]["total"] == "10"  # 5 pairs x 2 families
    assert lines[-1]["unit"] == "score"  # not "10 pairs" for 5 pairs
    assert not [line for line in captured.out.splitlines() if line.startswith("score:")]


def test_simulate_rating_draws_plain_progress(tmp_path, monkeypatch, capsys):
    from tests.helpers_api import STUDY, build_rated_study

    url = f"sqlite:///{tmp_path / 's.db'}"
    build_rated_study(url)
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    assert main(["score", "--study", STUDY, "--metrics", "bleu4,rougeL"]) == 0
    capsys.readouterr()
    assert main(["simulate-rating", "--study", STUDY, "--seeds", "2", "--resamples", "20",
                 "--output", str(tmp_path / "c.csv"), "--progress"]) == 0
    err = capsys.readouterr().err.splitlines()
    lines = [PLAIN.match(line) for line in err if line.startswith("simulate-rating:")]
    assert [int(m["done"]) for m in lines] == [1, 2, 3, 4]  # 2 seeds x 2 strategies
    assert {m["total"] for m in lines} == {"4"} and lines[0]["unit"] == "replay"
    assert "order, seed" in lines[0]["msg"]


def test_train_er2score_draws_plain_progress(db, tmp_path, monkeypatch, capsys):
    from tests.helpers_llm import build_tiny_llama
    from tests.services.test_er2train import _insert_study

    monkeypatch.setenv("DATABASE_URL", db.url)
    _insert_study(db, "prog", 6)
    base = build_tiny_llama(tmp_path)
    assert main(["train-er2score", "--study", "prog", "--base", str(base), "--output",
                 str(tmp_path / "ad"), "--epochs", "1", "--lr", "1e-3", "--heldout", "0.34",
                 "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    lines = [PLAIN.match(line) for line in captured.err.splitlines()
             if line.startswith("train-er2score:")]
    assert lines and all(lines)
    last = lines[-1]
    assert last["done"] == last["total"] and last["unit"] == "step"
    assert re.fullmatch(r"loss [\d.]+|done", last["msg"])
    # The stages without steps are named (the first line comes before any step).
    assert "reading the ratings of study 'prog'" in lines[0]["msg"]
    assert "held-out Kendall tau" in captured.out


def test_plain_progress_of_a_failed_block_ends_stopped_not_done():
    """A run that raises must not print a closing line that reads like success."""
    import io

    import pytest

    from radconcord.backend.cli.progress import progress_bar

    out = io.StringIO()
    with pytest.raises(RuntimeError), progress_bar("score", stream=out, interval=60,
                                                   tty=False) as progress:
        progress(1, 5, "")
        progress(2, 5, "")
        raise RuntimeError("boom")
    last = out.getvalue().strip().splitlines()[-1]
    assert "(stopped)" in last and "2/5" in last
    assert "(done)" not in out.getvalue()


def test_correlate_reports_each_section(tmp_path, monkeypatch, capsys):
    """correlate_study calls progress once per section, ending at total/total; the CLI
    prints them as plain lines off a terminal."""
    from radconcord.backend.services.evaluation.correlation import correlate_study
    from radconcord.db.session import Database
    from tests.helpers_api import STUDY, build_rated_study

    url = f"sqlite:///{tmp_path / 's.db'}"
    build_rated_study(url)
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path / "data"))
    assert main(["score", "--study", STUDY, "--metrics", "bleu4,rougeL"]) == 0
    seen = []
    db = Database(url)
    try:
        correlate_study(db, study_name=STUDY, bootstrap=20, permutations=20,
                        progress=lambda d, t, m: seen.append((d, t, m)))
    finally:
        db.dispose()
    assert [d for d, _, _ in seen] == list(range(1, len(seen) + 1))
    assert seen[-1][0] == seen[-1][1] == 9
    capsys.readouterr()
    assert main(["correlate", "--study", STUDY, "--bootstrap", "20", "--permutations", "20",
                 "--output", str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr().err
    assert "correlate: 9/9 sections" in err


def test_logs_get_no_carriage_return_bars_from_model_loading(tmp_path):
    """Off a terminal, stderr holds plain lines only: the command line turns off the bars
    transformers draws while loading weights (the packaged MiniLM here)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pairs = tmp_path / "pairs.csv"
    pairs.write_text("id,reference,candidate\na,No effusion.,No pleural effusion.\n",
                     encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    env.update(HF_HUB_OFFLINE="1", RADCONCORD_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.run(
        [sys.executable, "-m", "backend", "score", "--input", str(pairs), "--metrics",
         "bertscore_f", "--output", str(tmp_path / "s.csv"), "--no-cache", "--device", "cpu"],
        cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, timeout=300)
    err = proc.stderr.decode("utf-8")  # bytes: text mode would turn the \r into \n
    assert proc.returncode == 0, err
    assert "\r" not in err and "Loading weights" not in err, err
    assert "score: 1/1 scores" in err
