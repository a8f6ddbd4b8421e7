"""benchmarks/data_parallel.py: its smoke run end to end, and its byte counts by hand."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "data_parallel.py"
NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"


def load_script():
    spec = importlib.util.spec_from_file_location("benchmark_data_parallel", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gather_bytes_by_hand():
    bench = load_script()
    # W = 2, B = 512, D = 128: each rank's z is 2 · 256 · 128 · 4 = 262,144 bytes; it receives
    # the other rank's (1 × 262,144); backward all-reduces the (1024, 128) gradient, 524,288
    # bytes, of which a ring sends 2 · 1/2 = 1 times.
    got = bench.gather_bytes(2, 512, 128)
    assert got == {
        "forward": 262_144.0,
        "backward": 524_288.0,
        "total": 786_432.0,
        "reduce_scatter_total": 524_288.0,
        "ids": 1 * 2 * 256 * 8.0,
    }
    # the write-up's example: W = 8, B = 4096, D = 128 and ResNet-18's P = 11.2M
    got = bench.gather_bytes(8, 4096, 128)
    assert got["forward"] == 7 * 2 * 512 * 128 * 4 == 3_670_016
    assert got["backward"] == 2 * 7 / 8 * 8192 * 128 * 4 == 7_340_032
    assert got["total"] == 11_010_048
    assert bench.allreduce_bytes(8, 11.2e6) == pytest.approx(78_400_000)
    assert bench.allreduce_bytes(2, 1000) == 4000
    # one worker moves nothing
    assert bench.gather_bytes(1, 512, 128)["total"] == 0 and bench.allreduce_bytes(1, 10) == 0
    with pytest.raises(ValueError, match="split evenly"):
        bench.gather_bytes(3, 512, 128)


def test_smoke_prints_the_tables_and_a_finite_summary():
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for heading in (
        "## Trials: digits",
        "## The pieces at the trial's shape",
        "## all_gather_with_grad alone",
        "## Bytes per rank per step",
    ):
        assert heading in out, heading
    # the four trial rows, each finished
    rows = re.findall(r"^\| ([12]) workers? \| (\d+) \| (-|all|local) \| .*\|$", out, re.M)
    assert [(w, n) for w, n, _ in rows] == [("1", "1"), ("1", "2"), ("2", "2"), ("2", "2")]
    assert [neg for *_, neg in rows] == ["-", "-", "all", "local"]
    assert "statuses: finished;" in out
    assert "| ResNet-18 | 8 | 4096 | 128 | 11.20M | 3.67 MB | 7.34 MB | 11.01 MB" in out
    summary = out.strip().splitlines()[-1]
    match = re.fullmatch(
        rf"gather overhead: {NUMBER} ms/step \({NUMBER}% of a step\); second worker: {NUMBER}× "
        r"examples/s vs one worker with the same threads",
        summary,
    )
    assert match, summary
    values = [float(v) for v in match.groups()]
    assert all(math.isfinite(v) and v > 0 for v in values), values
