"""Every entry point runs end to end in its smoke mode."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_objectives_benchmark_smoke():
    out = run(sys.executable, "benchmarks/objectives.py", "--smoke")
    assert "| 512 | info_nce |" in out and "| 512 | dense |" in out
    assert "info_nce peak at N = 512" in out


def test_study_cli_env():
    study = Path(sys.executable).with_name("study")
    assert "env" in run(str(study), "--help")
    out = run(str(study), "env")
    assert "torch" in out and "device" in out


def test_trial_benchmark_smoke():
    out = run(sys.executable, "benchmarks/trial.py", "--smoke", "--layout", "both")
    assert "| train_s |" in out and "| eval_s |" in out and "status finished" in out
    assert "(trial layout)" in out and "(contiguous layout)" in out
    ratio = re.search(r"seconds per training step, median of 1: .*: ratio (\d+\.\d+)", out)
    assert ratio and float(ratio.group(1)) > 0, out


def test_trainables_module_smoke():
    out = run(sys.executable, "-m", "trainables", "toy_seed002", "--smoke")
    assert "status" in out and "finished" in out


@pytest.mark.long
@pytest.mark.slow
def test_study_benchmark_smoke(ray_tmp):
    """Both tables, on toy studies: the line through 2 and 4 trials, and concurrency 1 and 2."""
    out = run(sys.executable, "benchmarks/study.py", "--smoke")
    assert "| toy-2 | 2 | 1 |" in out and "| toy-4 | 4 | 1 |" in out and "| toy-2 | 2 | 2 |" in out
    assert "| outside per trial s | trial efficiency |" in out and "| tail s |" in out
    for line in (x for x in out.splitlines() if x.startswith("| toy-")):
        cells = [c.strip() for c in line.strip("|").split("|")]
        wall, tail = float(cells[3]), float(cells[-1])
        assert 0 < tail < wall, line  # the export and the report take time, within the study's
    assert "per-trial overhead (slope of outside time on trials): " in out
    assert "fixed cost per study (intercept): " in out
    assert "trial efficiency at concurrency 1: " in out and "speed-up at concurrency 2" in out


@pytest.mark.slow
def test_analysis_benchmark_smoke():
    out = run(sys.executable, "benchmarks/analysis.py", "--smoke")
    assert "| load_study (48 runs from SQLite MLflow) |" in out
    assert "| fits, plots and report together |" in out


def test_commands_benchmark_smoke():
    out = run(sys.executable, "benchmarks/commands.py", "--smoke")
    for command in ("--help", "plan", "list", "status", "export", "power", "augment"):
        assert f"| study {command}" in out, out
    assert "| study power bench, before its report (it fits) |" in out, out


@pytest.mark.slow
def test_cheap_answers_benchmark_smoke():
    out = run(sys.executable, "benchmarks/cheap_answers.py", "--smoke")
    assert re.search(r"study run of a finished study: median [\d.]+ s; import torch [\d.]+ s", out)
    assert re.search(r"study status names a starting study after: median [\d.]+ s", out), out


@pytest.mark.slow
def test_estimate_benchmark_smoke():
    out = run(sys.executable, "benchmarks/estimate.py", "--smoke")
    assert re.search(r"default \(smoke\): estimated \d+ s \(in [\d.]+ s\), measured \d+ s", out)


def test_call_path_reads_the_study_once_and_looks_its_experiment_up_once():
    """``benchmarks/call_path.py`` runs ``study run`` to the launch: the study file is opened and
    parsed once, the design built once, the experiment looked up once (the toy study it runs
    lists no data); a 0 where 1 is expected means the counter no longer finds the function it
    counts (it moved)."""
    out = run(sys.executable, "benchmarks/call_path.py")
    counts = re.search(r"until the launch, in every thread: (.*)", out)
    assert counts, out
    said = dict(re.findall(r"(the [a-z ]+?) (\d+)(?:;|$)", counts.group(1)))
    assert said == {"the study file opened and parsed": "1", "the design built": "1",
                    "the experiment looked up": "1", "the data listed": "0"}, said  # fmt: skip
