"""One MKL branch for every trial (trainables.arithmetic): set as trainables is imported, before
any arithmetic, on a CPU with AVX2; a user's own setting wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainables.arithmetic import PINNED, has_avx2

ROOT = Path(__file__).resolve().parents[2]
SHOW = "import os, trainables; print(os.environ.get('MKL_CBWR', '-'))"


def _imported(**env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"} | env
    done = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True,
                          env=environment, cwd=ROOT, timeout=120, check=True)  # fmt: skip
    return done.stdout.strip()


@pytest.mark.skipif(not has_avx2(), reason="a CPU without AVX2 pins nothing")
def test_importing_trainables_pins_mkl_to_its_avx2_branch_and_a_users_own_setting_wins():
    assert PINNED == {"MKL_CBWR": "AVX2"}
    assert _imported() == "AVX2"
    assert _imported(MKL_CBWR="COMPATIBLE") == "COMPATIBLE"


@pytest.mark.parametrize(("flags", "has"), [
    ("flags\t\t: fpu sse4_2 avx avx2 fma avx512f", True),
    ("flags\t\t: fpu sse4_2 avx", False),
    ("processor\t: 0", False),
])  # fmt: skip
def test_avx2_is_read_from_the_cpus_flags(tmp_path, flags, has, monkeypatch):
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\n{flags}\n")
    assert has_avx2(tmp_path / "cpuinfo") is has
    assert has_avx2(tmp_path / "missing") is False
