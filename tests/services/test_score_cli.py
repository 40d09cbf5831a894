"""``python -m backend score|worker|metrics``: outputs, errors, cache, study mode."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from radconcord.backend import cli, jobs
from radconcord.backend.metrics import registry
from radconcord.db.models import Case, MetricScore, Pair, Report, Study
from radconcord.db.session import Database

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "report_pairs.jsonl"


@pytest.fixture
def env(tmp_path, monkeypatch, d):
    """Doubles registered, DATABASE_URL in tmp_path, a small PAIRS file."""
    mod = d
    url = f"sqlite:///{tmp_path}/cli.db"
    monkeypatch.setenv("DATABASE_URL", url)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"id": "a", "reference": "no acute process", "candidate": "no acute disease"},
                {"id": "b", "reference": "small effusion", "candidate": "large effusion, edema"},
                {"id": "c", "reference": "normal heart", "candidate": "normal"},
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    return mod, tmp_path, pairs, url


def _run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_score_file_writes_request_order_and_uses_the_cache(env, capsys):
    d, tmp, pairs, url = env
    out = tmp / "scores.csv"
    argv = [
        "score",
        "--input",
        pairs,
        "--metrics",
        "dbl_jaccard,corpus_double,dbl_ratio",
        "--output",
        out,
        "--batch-size",
        "2",
    ]
    code, stdout, err = _run(argv, capsys)
    assert code == 0, err
    rows = _read(out)
    assert list(rows[0]) == ["id", "dbl_jaccard", "dbl_df", "dbl_ratio"]
    assert [r["id"] for r in rows] == ["a", "b", "c"]
    # Full precision: the file holds exactly the double's float for pair c.
    assert float(rows[2]["dbl_ratio"]) == len("normal") / len("normal heart")
    assert "count_double: 3 computed, 0 from cache" in stdout
    d.reset()
    code, stdout, _ = _run(argv, capsys)
    assert code == 0 and d.CALLS == []
    assert "count_double: 0 computed, 3 from cache" in stdout
    assert _read(out) == rows


def test_set_option_changes_values_and_unknown_option_is_one_error(env, capsys):
    d, tmp, pairs, _ = env
    out = tmp / "s.csv"
    code, _, err = _run(
        [
            "score",
            "--input",
            pairs,
            "--metrics",
            "dbl_ratio",
            "--output",
            out,
            "--set",
            "count_double.scale=3",
        ],
        capsys,
    )
    assert code == 0, err
    assert float(_read(out)[2]["dbl_ratio"]) == 3.0 * len("normal") / len("normal heart")
    out2 = tmp / "s2.csv"
    code, stdout, err = _run(
        [
            "score",
            "--input",
            pairs,
            "--metrics",
            "dbl_ratio",
            "--output",
            out2,
            "--set",
            "count_double.sclae=3",
        ],
        capsys,
    )
    assert code == 2
    assert err.strip().splitlines() == [err.strip()]  # one line
    assert err.startswith("error: ") and "sclae" in err and "Traceback" not in err
    assert not out2.exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"id": "a", "reference": "r"}\n', "pairs.jsonl: line 1, field 'candidate': missing"),
        (
            '{"id": "a", "reference": "r", "candidate": "c"}\n{"id": "a", "reference": "r", '
            '"candidate": "d"}\n',
            "pairs.jsonl: line 2, field 'id': duplicates id 'a' of line 1",
        ),
        (
            '{"id": "a", "reference": "r", "candidate": "c"}\n{oops\n',
            "pairs.jsonl: line 2: invalid JSON",
        ),
    ],
)
def test_bad_input_is_one_error_line_and_no_output(env, capsys, content, expected):
    _, tmp, pairs, _ = env
    pairs.write_text(content, encoding="utf-8")
    out = tmp / "s.csv"
    code, _, err = _run(
        ["score", "--input", pairs, "--metrics", "count_double", "--output", out], capsys
    )
    assert code == 2
    assert err.startswith("error: ") and expected in err and err.count("\n") == 1
    assert not out.exists()


def test_unknown_metric_and_missing_output_folder(env, capsys):
    _, tmp, pairs, _ = env
    code, _, err = _run(
        ["score", "--input", pairs, "--metrics", "bleu9", "--output", tmp / "s.csv"], capsys
    )
    assert code == 2 and "unknown metric 'bleu9'" in err
    code, _, err = _run(
        [
            "score",
            "--input",
            pairs,
            "--metrics",
            "count_double",
            "--output",
            tmp / "nope" / "s.csv",
        ],
        capsys,
    )
    assert code == 2 and "folder does not exist" in err


def test_unavailable_metric_errors_or_is_skipped(env, capsys):
    _, tmp, pairs, _ = env
    out = tmp / "s.csv"
    argv = ["score", "--input", pairs, "--metrics", "count_double,gone_double", "--output", out]
    code, _, err = _run(argv, capsys)
    assert code == 2 and "gone_double" in err and "weights not found" in err
    assert "pass --skip-unavailable to score the other metrics anyway" in err
    assert not out.exists()
    code, _, err = _run([*argv, "--skip-unavailable"], capsys)
    assert code == 0
    assert "skipped metric 'gone_double': weights not found" in err
    assert list(_read(out)[0]) == ["id", "dbl_ratio", "dbl_jaccard"]


def test_metric_crash_is_one_line_and_no_output(env, capsys):
    _, tmp, pairs, _ = env
    pairs.write_text('{"id": "x", "reference": "r", "candidate": "BOOM"}\n', encoding="utf-8")
    out = tmp / "s.csv"
    code, _, err = _run(
        ["score", "--input", pairs, "--metrics", "fail_double", "--output", out], capsys
    )
    # Progress lines (stderr, plain when not on a terminal) aside, the error is one line.
    errors = [line for line in err.splitlines() if not line.startswith("score: ")]
    assert code == 2 and len(errors) == 1 and "tokenizer exploded" in errors[0]
    assert errors[0].startswith("error: ") and "Traceback" not in err
    assert not out.exists()


def test_no_cache_leaves_the_database_alone(env, capsys):
    d, tmp, pairs, url = env
    out = tmp / "s.csv"
    code, _, err = _run(
        ["score", "--input", pairs, "--metrics", "count_double", "--output", out, "--no-cache"],
        capsys,
    )
    assert code == 0, err
    assert not (tmp / "cli.db").exists()


def test_empty_report_warns_with_ids_and_writes_nan(env, capsys):
    _, tmp, pairs, _ = env
    pairs.write_text(
        '{"id": "ok", "reference": "r r", "candidate": "c"}\n'
        '{"id": "blank", "reference": "r", "candidate": "  "}\n',
        encoding="utf-8",
    )
    out = tmp / "s.csv"
    code, _, err = _run(
        ["score", "--input", pairs, "--metrics", "dbl_ratio", "--output", out], capsys
    )
    assert code == 0
    assert "1 pair(s) with an empty reference or candidate were given nan: blank" in err
    rows = _read(out)
    assert rows[1]["dbl_ratio"] == "nan" and math.isnan(float(rows[1]["dbl_ratio"]))


def _study(url: str, name: str, n: int) -> None:
    db = Database(url)
    with db.begin() as s:
        study = Study(name=name)
        s.add(study)
        s.flush()
        for i in range(n):
            case = Case(external_id=f"{name}-{i}")
            s.add(case)
            s.flush()
            ref = Report(case_id=case.id, role="reference", text=f"ref {i}")
            cand = Report(case_id=case.id, role="candidate", text=f"cand {i} words")
            s.add_all([ref, cand])
            s.flush()
            from radconcord.backend.scoring.hashing import input_hash

            s.add(
                Pair(
                    study_id=study.id,
                    case_id=case.id,
                    reference_id=ref.id,
                    candidate_id=cand.id,
                    opaque_id=f"{name}-{i}",
                    position=i,
                    input_hash=input_hash(ref.text, cand.text),
                )
            )
    db.dispose()


def test_score_study_inline_and_enqueue(env, capsys):
    d, tmp, _, url = env
    _study(url, "demo", 4)
    code, stdout, err = _run(["score", "--study", "demo", "--metrics", "count_double"], capsys)
    assert code == 0, err
    assert "scored 4 pairs of study 'demo'" in stdout
    db = Database(url)
    with db.begin() as s:
        assert s.scalar(select(func.count()).select_from(MetricScore)) == 8
    code, stdout, err = _run(
        [
            "score",
            "--study",
            "demo",
            "--metrics",
            "dbl_ratio",
            "--enqueue",
            "--set",
            "count_double.scale=2",
        ],
        capsys,
    )
    assert code == 0, err
    queued = jobs.list_jobs(db)
    assert len(queued) == 1 and queued[0].status == "queued"
    assert (queued[0].kind, queued[0].study_name) == ("score", "demo")
    assert queued[0].params == {
        "metrics": ["dbl_ratio"],
        "options": {"count_double": {"scale": 2}},
    }
    assert f"queued scoring job {queued[0].id}" in stdout
    code, _, err = _run(["score", "--study", "nope", "--metrics", "count_double"], capsys)
    assert code == 2 and "no study named 'nope'" in err
    # The worker subcommand runs the queued job and exits with --once.
    code, _, err = _run(["worker", "--once", "--worker-id", "cli"], capsys)
    assert code == 0, err
    assert jobs.get(db, queued[0].id).status == "done"
    db.dispose()


def _subprocess(args, tmp_path, **extra_env):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path}/sub.db", "PYTHONPATH": str(REPO)}
    env.update(extra_env)
    return subprocess.run(
        [sys.executable, "-m", "backend", *map(str, args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_end_to_end_lexical_metrics_on_the_fixture(tmp_path):
    """Real metrics through the real command line, compared with the metric classes called
    directly on the same texts (exact equality: the CSV keeps full precision)."""
    from radconcord.backend.metrics.lexical import Bleu, RougeL

    out = tmp_path / "scores.csv"
    res = _subprocess(
        ["score", "--input", FIXTURE, "--metrics", "bleu4,rougeL", "--output", out], tmp_path
    )
    assert res.returncode == 0, res.stderr
    rows = _read(out)
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    assert [r["id"] for r in rows] == [r["id"] for r in records]
    assert list(rows[0]) == ["id", "bleu4", "rougeL"]
    scored = [r for r in records if r["reference"].strip() and r["candidate"].strip()]
    kw = {
        "references": [r["reference"] for r in scored],
        "candidates": [r["candidate"] for r in scored],
    }
    bleu = dict(zip((r["id"] for r in scored), Bleu().score(**kw).values["bleu4"], strict=True))
    rouge = dict(zip((r["id"] for r in scored), RougeL().score(**kw).values["rougeL"], strict=True))
    for row in rows:
        if row["id"] in bleu:
            assert float(row["bleu4"]) == bleu[row["id"]]
            assert float(row["rougeL"]) == rouge[row["id"]]
        else:
            assert row["bleu4"] == "nan"
    # Again: everything comes from the cache.
    res2 = _subprocess(
        ["score", "--input", FIXTURE, "--metrics", "bleu4,rougeL", "--output", out], tmp_path
    )
    assert res2.returncode == 0, res2.stderr
    distinct = len({(r["reference"], r["candidate"]) for r in scored})
    assert f"bleu: 0 computed, {distinct} from cache" in res2.stdout
    assert f"rouge: 0 computed, {distinct} from cache" in res2.stdout
    assert _read(out) == rows


def test_subprocess_user_error_has_no_traceback(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"id,reference,candidate\na,ok,fine\nb,caf\xe9,x\n")
    out = tmp_path / "s.csv"
    res = _subprocess(["score", "--input", bad, "--metrics", "bleu4", "--output", out], tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error: ") and "Traceback" not in res.stderr
    assert "bad.csv: row 2 (line 3): not valid UTF-8 (byte 0xe9 at offset 38)" in res.stderr
    assert not out.exists()


def test_metrics_command_lists_every_family_with_reasons(tmp_path):
    res = _subprocess(["metrics", "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    listed = {m["family"]: m for m in json.loads(res.stdout)}
    assert set(listed) == set(registry.ENTRIES)
    for family, m in listed.items():
        assert [k["key"] for k in m["keys"]] == list(registry.ENTRIES[family].keys)
        if m["available"]:
            assert m["reason"] is None
            assert all(k["direction"] in ("higher", "lower") for k in m["keys"])
        else:
            assert m["reason"], family
    assert listed["bleu"]["available"] and listed["bleu"]["keys"][3]["direction"] == "higher"
    text = _subprocess(["metrics"], tmp_path)
    assert (
        text.returncode == 0
        and "bleu4" in text.stdout
        and "metric families available" in (text.stdout)
    )
