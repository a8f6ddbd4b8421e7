"""Forward + backward time and peak memory of ``info_nce`` against a dense reference and lightly.

Inputs: N rows of dimension D, B = N / 2 sources of two views each (rows i and i + B), τ = 0.1;
every implementation gets the same leaf tensor and its loss and gradient are checked against the
dense reference. ``dense`` is ``info_nce_dense`` (the full (N, N) matrix and plain autograd);
``lightly`` is lightly's ``NTXentLoss(z[:B], z[B:])``, the same loss, when lightly can be
imported; ``chunked`` (with ``--impls``) is ``info_nce`` forced into 8 blocks of anchors;
``nt_xent`` (with ``--impls``) is ``nt_xent(z[:B], z[B:], checks=False)``, a trial's call.

Time: for each N one process runs every implementation on the same inputs, in alternating order,
and reports the median of at least ``--repeats`` forward+backward passes after a warm-up (more
rounds while they take less than ``--min-seconds`` in all: small N needs many on a loaded CPU).
Peak memory: on the CPU each (implementation, N) runs once more in a fresh subprocess, so that
allocator reuse cannot hide a peak: the rise of the process's resident-set high-water mark
(VmHWM, reset through /proc/self/clear_refs, Linux only) over its resident size once the inputs
exist (``--smoke``: every implementation of an N in one subprocess, one after another, so
reuse may lower the later ones). On CUDA: ``torch.cuda.max_memory_allocated`` over one pass,
less what was allocated before it.

lightly is not a dependency. Install it into a folder of its own and name that folder:

    pip install --no-deps --target /tmp/lightly_pkg lightly
    .venv/bin/python benchmarks/objectives.py --lightly-path /tmp/lightly_pkg   # or LIGHTLY_PATH

Without it (or if the import fails) the lightly column is left out and the reason printed.

    .venv/bin/python benchmarks/objectives.py            # N = 1024, 4096, 8192 (B = 512 ... 4096)
    .venv/bin/python benchmarks/objectives.py --device cuda --sizes 8192 32768
    .venv/bin/python benchmarks/objectives.py --smoke    # N = 512, one repeat (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # this checkout's trainables, as benchmarks/gpu.py does
    sys.path.insert(0, str(ROOT))
TEMPERATURE = 0.1
IMPLEMENTATIONS = ("info_nce", "nt_xent", "dense", "lightly", "chunked")
DEFAULT_IMPLEMENTATIONS = ("info_nce", "dense", "lightly")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def load_lightly(path: str | None):
    """lightly's NTXentLoss class from ``path`` (added to sys.path), or the reason it failed."""
    if not path:
        return None, "no --lightly-path or LIGHTLY_PATH given"
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        from lightly.loss.ntx_ent_loss import NTXentLoss
    except Exception as err:  # any failure means: no column, with the reason
        return None, f"cannot import lightly from {path}: {type(err).__name__}: {err}"
    return NTXentLoss, ""


def make_losses(impls: list[str], n: int, lightly_path: str | None) -> dict:
    """name -> fn(z, sources) returning the loss; unavailable implementations are left out."""
    from trainables import objectives
    from trainables.objectives import memory

    def info_nce(z, sources):
        return objectives.info_nce(z, sources, TEMPERATURE)

    def chunked(z, sources):
        saved = memory._CHUNK_ELEMENTS
        memory._CHUNK_ELEMENTS = -(-n * n // 8)  # 8 blocks of anchors
        try:
            return objectives.info_nce(z, sources, TEMPERATURE)
        finally:
            memory._CHUNK_ELEMENTS = saved

    def dense(z, sources):
        return objectives.info_nce_dense(z, sources, TEMPERATURE)

    def nt_xent(z, sources):  # a trial's call without groups: nothing waits for the device
        return objectives.nt_xent(z[: n // 2], z[n // 2 :], TEMPERATURE, checks=False)

    fns = {"info_nce": info_nce, "nt_xent": nt_xent, "dense": dense, "chunked": chunked}
    if "lightly" in impls:
        cls, _ = load_lightly(lightly_path)
        if cls is not None:
            criterion = cls(temperature=TEMPERATURE)
            fns["lightly"] = lambda z, sources: criterion(z[: n // 2], z[n // 2 :])
    return {name: fns[name] for name in impls if name in fns}


def inputs(n: int, dim: int, device: str):
    import torch

    g = torch.Generator().manual_seed(0)
    z = torch.randn(n, dim, generator=g).to(device).requires_grad_()
    sources = torch.arange(n // 2, device=device).repeat(2)
    return z, sources


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def time_all(args: argparse.Namespace, n: int) -> list[dict]:
    """In this process: every implementation on the same inputs, alternating, median of repeats."""
    import torch

    torch.set_num_threads(args.threads)
    losses = make_losses(args.impls, n, args.lightly_path)
    z, sources = inputs(n, args.dim, args.device)
    cuda = args.device.startswith("cuda")

    def step(fn) -> tuple[float, torch.Tensor]:
        loss = fn(z, sources)
        loss.backward()
        grad, z.grad = z.grad, None
        return float(loss.detach()), grad

    reference = step(losses["dense"]) if "dense" in losses else None
    rows, round_seconds = {}, 0.0
    for name, fn in losses.items():
        _sync(args.device)
        t0 = time.perf_counter()
        step(fn)  # warm-up
        _sync(args.device)
        round_seconds += time.perf_counter() - t0
        if cuda:
            torch.cuda.synchronize(args.device)
            torch.cuda.reset_peak_memory_stats(args.device)
            base = torch.cuda.memory_allocated(args.device)
        value, grad = step(fn)
        row = {"impl": name, "n": n, "times": []}
        if cuda:
            peak = torch.cuda.max_memory_allocated(args.device) - base
            row["peak_mib"] = peak / 2**20
        if reference is not None:
            row["loss_diff"] = abs(value - reference[0])
            row["grad_diff"] = float((grad - reference[1]).abs().max())
        rows[name] = row
        del grad
    names = list(losses)
    # at least --repeats rounds, more (up to 100) while a round is short of --min-seconds
    rounds = max(args.repeats, min(100, int(args.min_seconds / max(round_seconds, 1e-9))))
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            _sync(args.device)
            t0 = time.perf_counter()
            step(losses[name])
            _sync(args.device)
            rows[name]["times"].append(time.perf_counter() - t0)
    for row in rows.values():
        row["repeats"] = len(row["times"])
        row["seconds"] = statistics.median(row.pop("times"))
    return list(rows.values())


def peak_cpu(args: argparse.Namespace, impl: str, n: int) -> dict:
    """In a fresh process: the rise of VmHWM over one forward+backward pass."""
    import torch

    torch.set_num_threads(args.threads)
    fn = make_losses([impl], n, args.lightly_path)[impl]
    z, sources = inputs(n, args.dim, "cpu")

    def step(z, sources) -> None:
        fn(z, sources).backward()
        z.grad = None

    # Load kernels and thread pools on a tiny batch first, so they do not count as the peak.
    small = make_losses([impl], 64, args.lightly_path)[impl]
    small(torch.randn(64, args.dim).requires_grad_(), torch.arange(32).repeat(2)).backward()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _status_kib("VmRSS")
    step(z, sources)
    return {"impl": impl, "n": n, "peak_mib": (_status_kib("VmHWM") - base) / 1024}


def child(args: argparse.Namespace, *extra: str) -> list[dict]:
    command = [sys.executable, __file__, *extra, "--dim", str(args.dim)]
    command += ["--repeats", str(args.repeats), "--threads", str(args.threads)]
    command += ["--min-seconds", str(args.min_seconds)]
    command += ["--device", args.device, "--impls", *args.impls]
    if args.lightly_path:
        command += ["--lightly-path", args.lightly_path]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(extra)} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def add_peaks(args: argparse.Namespace, timed: list[dict], n: int, together: bool) -> None:
    """Each row of ``timed`` (one N) given its CPU peak: each implementation in a fresh process,
    or with ``together`` (smoke) all of them in one, one after another."""
    impls = [row["impl"] for row in timed]
    peaks = {}
    for batch in [impls] if together else [[impl] for impl in impls]:
        peaks |= {p["impl"]: p for p in child(args, "--child-peak", *batch, str(n))}
    for row in timed:
        row.update(peaks[row["impl"]])


def run(args: argparse.Namespace) -> list[dict]:
    rows = []
    for n in args.sizes:
        timed = child(args, "--child-time", str(n))
        if not args.device.startswith("cuda"):
            add_peaks(args, timed, n, together=args.smoke)
        rows += timed
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| N | impl | B | fwd+bwd s | peak MiB | peak / (N×N fp32) | × lightly | × dense |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    by = {(r["n"], r["impl"]): r for r in rows}
    for r in rows:
        nn_mib = r["n"] ** 2 * 4 / 2**20
        ratios = []
        for other in ("lightly", "dense"):
            base = by.get((r["n"], other))
            ratios.append(f"{r['seconds'] / base['seconds']:.2f}" if base else "–")
        lines.append(
            f"| {r['n']} | {r['impl']} | {r['n'] // 2} | {r['seconds']:.4f} | "
            f"{r['peak_mib']:.1f} | {r['peak_mib'] / nn_mib:.2f} | {ratios[0]} | {ratios[1]} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192], help="N")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds, at least")
    parser.add_argument(
        "--min-seconds", type=float, default=5.0, help="add rounds until they take about this"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    parser.add_argument(
        "--impls", nargs="+", choices=IMPLEMENTATIONS, default=list(DEFAULT_IMPLEMENTATIONS)
    )
    parser.add_argument("--lightly-path", default=os.environ.get("LIGHTLY_PATH"))
    parser.add_argument("--smoke", action="store_true", help="N = 512, one repeat")
    parser.add_argument("--child-time", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-peak", nargs="+", help=argparse.SUPPRESS)  # IMPL... N
    args = parser.parse_args()
    if args.child_time:
        print(json.dumps(time_all(args, args.child_time)))
        return
    if args.child_peak:
        *impls, n = args.child_peak
        print(json.dumps([peak_cpu(args, impl, int(n)) for impl in impls]))
        return
    if args.smoke:
        args.sizes, args.repeats, args.min_seconds = [512], 1, 0.0
    if any(n % 2 or n < 4 for n in args.sizes):
        parser.error("every N must be even and at least 4 (B = N / 2 sources, two views each)")
    if "lightly" in args.impls:
        _, why = load_lightly(args.lightly_path)
        if why:
            print(f"lightly left out: {why}")
    rows = run(args)
    print(
        f"info_nce forward+backward on {args.device}, D = {args.dim}, τ = {TEMPERATURE}, "
        f"{args.threads} threads, median of {args.repeats} or more rounds (about "
        f"{args.min_seconds:g} s per N), alternating order"
    )
    print(table(rows))
    worst = max(max(r.get("loss_diff", 0.0), r.get("grad_diff", 0.0)) for r in rows)
    print(f"largest |loss - dense| or |grad - dense|: {worst:.2e}")

    import torch

    from trainables.objectives import block_bytes_per_pair, memory_budget

    largest = max(r["n"] for r in rows)
    at = {r["impl"]: r for r in rows if r["n"] == largest}
    budget = memory_budget(args.device) / 2**20
    one_block = largest**2 * block_bytes_per_pair(torch.float32) / 2**20 <= budget
    slack = 8 * largest * args.dim * 4 / 2**20 + 16  # inputs, gradients, norms; allocator noise
    peak = at["info_nce"]["peak_mib"]
    verdict = "within" if peak <= budget + slack else "EXCEEDS"
    dense = f", {peak / at['dense']['peak_mib']:.3f} × dense's" if "dense" in at else ""
    print(
        f"info_nce peak at N = {largest}: {peak:.1f} MiB{dense}; {verdict} the block budget of "
        f"{budget:.0f} MiB (+ {slack:.0f} MiB for O(N·D)); "
        f"{'one block' if one_block else 'chunked'}"
    )


if __name__ == "__main__":
    main()
