"""Forward + backward time and peak memory of ``info_nce`` against a plain dense reference, on CPU.

Each (implementation, N) runs in a fresh subprocess so that allocator reuse cannot hide a peak:
the peak is the rise of the process's resident-set high-water mark (VmHWM, reset through
/proc/self/clear_refs) over its resident size once the inputs exist. Linux only.

    .venv/bin/python benchmarks/objectives.py            # N = 512 ... 8192, D = 128
    .venv/bin/python benchmarks/objectives.py --smoke    # N = 256, 512 (seconds)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

IMPLEMENTATIONS = ("info_nce", "dense")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(impl: str, n: int, dim: int, repeats: int, threads: int) -> dict:
    """Runs inside the subprocess: one warm-up, then ``repeats`` timed forward+backward passes."""
    import torch

    from trainables.objectives import info_nce, info_nce_dense

    torch.set_num_threads(threads)
    fn = {"info_nce": info_nce, "dense": info_nce_dense}[impl]
    g = torch.Generator().manual_seed(0)
    z = torch.randn(n, dim, generator=g).requires_grad_()
    sources = torch.arange(n // 2).repeat(2)

    def step(z: torch.Tensor, sources: torch.Tensor) -> None:
        loss = fn(z, sources, 0.1)
        loss.backward()
        z.grad = None

    # Load kernels and thread pools on a tiny batch first, so they do not count as the peak.
    step(torch.randn(64, dim).requires_grad_(), torch.arange(32).repeat(2))
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _status_kib("VmRSS")
    step(z, sources)  # the peak measurement, and the warm-up for timing
    peak = _status_kib("VmHWM") - base
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step(z, sources)
        times.append(time.perf_counter() - t0)
    return {"impl": impl, "n": n, "seconds": statistics.median(times), "peak_mib": peak / 1024}


def run(sizes: list[int], dim: int, repeats: int, threads: int) -> list[dict]:
    rows = []
    for n in sizes:
        for impl in IMPLEMENTATIONS:
            args = [sys.executable, __file__, "--child", impl, str(n), str(dim), str(repeats)]
            out = subprocess.run(
                [*args, str(threads)], capture_output=True, text=True, check=True
            ).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| N | impl | fwd+bwd s | peak MiB | peak / (N×N fp32) |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        nn_mib = r["n"] ** 2 * 4 / 2**20
        lines.append(
            f"| {r['n']} | {r['impl']} | {r['seconds']:.3f} | {r['peak_mib']:.1f} "
            f"| {r['peak_mib'] / nn_mib:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="N = 256, 512, one repeat")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        impl, n, dim, repeats, threads = args.child
        print(json.dumps(measure(impl, int(n), int(dim), int(repeats), int(threads))))
        return
    sizes, repeats = ([256, 512], 1) if args.smoke else (args.sizes, args.repeats)
    rows = run(sizes, args.dim, repeats, args.threads)
    print(
        f"info_nce forward+backward on CPU, D = {args.dim}, {args.threads} threads, "
        f"median of {repeats}"
    )
    print(table(rows))
    largest = max(r["n"] for r in rows)
    peak = next(r for r in rows if r["n"] == largest and r["impl"] == "info_nce")["peak_mib"]
    limit = 4 * largest**2 * 4 / 2**20
    verdict = "within" if peak <= limit else "EXCEEDS"
    print(
        f"info_nce peak at N = {largest}: {peak:.1f} MiB, {verdict} 4 × N×N fp32 = {limit:.0f} MiB"
    )


if __name__ == "__main__":
    main()
