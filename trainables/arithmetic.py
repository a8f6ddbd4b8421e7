"""One CPU arithmetic for a trial's matrix products on every x86-64 machine with AVX2.

MKL, torch's BLAS on x86-64 (the linear layers, the projection head, the probes' and k-NN's
matrix products), picks its kernels by CPU: AVX-512 ones on an Intel Xeon, AVX2 ones on an AMD
EPYC. Their sums round differently, which is one way the same seeds train slightly different
encoders on the two (the README's walk-through printed "doubling temperature 0.91 points" on a
Xeon where an EPYC printed 1.2: issue 58). MKL's conditional numerical reproducibility,
``MKL_CBWR=AVX2``, runs the AVX2 kernels on every CPU that has AVX2 (every x86-64 server since
2013), which is what MKL runs on an AMD CPU anyway: there it changes no bit (docs/running.md,
"The same arithmetic on another CPU"); on an Intel CPU it gives up MKL's AVX-512 kernels. MKL
reads it once, at its first call, so it is set when this package is imported (every trial
process imports it before any arithmetic: a local Ray's workers, a cluster's, the driver's
baselines). A user's own ``MKL_CBWR`` wins.

Not pinned: oneDNN's convolutions (``ONEDNN_MAX_CPU_ISA``) and ATen's own vector kernels
(``ATEN_CPU_CAPABILITY``). Pinning oneDNN to AVX2 changes this machine's numbers too, at a cost
not told from noise here (docs/running.md), and its kernels' blocking follows each CPU's cache
sizes, so no setting promises the same sums on every CPU; what they may still move is what the
quoted-output test forgives (``numbers_agree`` in scripts/requote.py, the README's "5. Reading
the result").
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

PINNED = {"MKL_CBWR": "AVX2"}  # MKL's AVX2 branch, whatever the CPU's widest instructions


def has_avx2(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU has AVX2 (Linux; elsewhere False, and nothing is pinned: MKL's branch
    for a CPU without it is not the one the others run)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        flags = next((line for line in cpuinfo.read_text().splitlines()
                      if line.startswith("flags")), "")  # fmt: skip
    except OSError:
        return False
    return "avx2" in flags.split()


def pin_cpu_arithmetic() -> None:
    """Set :data:`PINNED` in this process's environment (a user's own setting wins), on a CPU
    with AVX2; before MKL's first call, so that it holds."""
    if has_avx2():
        for name, value in PINNED.items():
            os.environ.setdefault(name, value)
