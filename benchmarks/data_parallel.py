"""Data parallelism on the CPU: W = 2 gloo workers against one worker with the same global batch.

    .venv/bin/python benchmarks/data_parallel.py                  # B = 512, 60 steps, 1-2 min
    .venv/bin/python benchmarks/data_parallel.py --batch 1024 --steps 40 --dim 256 --repeat 5
    .venv/bin/python benchmarks/data_parallel.py --smoke          # seconds

What runs
---------
One spawn of W = 2 processes (a gloo process group on 127.0.0.1, each process
``torch.set_num_threads(--threads-per-worker)``) runs everything, so start-up is paid once and
every trial runs in the same kind of process. A digits trial (an MLP encoder and a linear head,
no BatchNorm, so W = 1 and W = 2 train the same model; see ``trial_config``) runs as

1. one worker with the global batch B and ``threads-per-worker`` threads,
2. one worker with B and W × ``threads-per-worker`` threads: the same CPU threads as W = 2 (on
   2 cores this is the fair baseline; row 1 is what a second core buys a single process),
3. W = 2, ``negatives: all``: every rank's normalised z gathered with their gradients,
4. W = 2, ``negatives: local``: no gather, each rank contrasts its own B / W sources.

The one-worker trials run on rank 0 while rank 1 waits in a barrier (the CPU time rank 1 spends
there is printed: it should be ~0). Each repeat runs the four in this order, after one untimed
warm-up of each; the table gives medians over ``--repeat``. Timers are the trial's own, rank 0's:
``time/train_s`` (forward, loss with its collectives, backward with DDP's all-reduce, optimiser;
rank 0 waits there for rank 1 at every collective), ``time/data_s`` (index stream and two-view
augmentation; every rank builds the whole global batch's views and keeps its share, so this does
not shrink with W) and ``wall_s`` (setup, the final evaluation and evidence on rank 0 included).
Examples/s are examples seen / ``train_s``; the spread is (max - min) / median of ``train_s``
over the repeats. CPU/wall is each rank's CPU seconds over the trial's wall seconds (setup and
evaluation included): about the thread count when the run had its cores. On a machine shared
with other work (``nice``, a busy core) a thread that loses its core stalls every parallel region
and every collective of its step, so a 2-thread or 2-worker run can be slower than 1 thread; the
1-minute load average before and after is printed with the results.

3 vs 4 is what ``negatives: all`` costs in a step, but not only the gather: the loss's
similarity block is (2B/W) × 2B per rank instead of (2B/W) × (2B/W), the local loss takes
``nt_xent``'s paired fast path (positives known from the layout) where the gathered one builds
its pairs from the gathered source ids, and the gathered path runs six all-gathers (three size
checks, the source ids, z, the loss for its global mean) and two all-reduces in backward, where
``local`` runs one all-reduce of the logged loss. So a second
table isolates the pieces at the trial's shape on the same two ranks: ``all_gather_with_grad``
alone (forward and forward + backward of a (2B/W, D) float32 tensor: a gradient is fed straight
in, nothing else is computed), the gathered ``nt_xent`` and the local one, forward + backward, as
the trial calls them, and the gathered path's small collectives alone (ids, the loss's mean); what
is left of gathered - local is compute. A third table times the gather alone over a grid of B and
D, with the bytes each rank moves (below). Every micro-benchmark time is the median over
iterations, each started after a barrier, of the slower rank.

The summary line gives the gather (forward + backward, at the trial's B and D) in ms per step
and as a share of the W = 2 ``all`` step, and the W = 2 ``all`` examples/s over the one-worker
examples/s with the same threads (row 2).

Bytes of the gather (computed by ``gather_bytes``; checked against trainables/objectives/gathers.py)
--------------------------------------------------------------------------------------------
Where it sits: ``_Trial.train_step`` runs the model on the rank's 2 · B/W views (both views in
one pass), the projection head gives z (2B/W, D); ``nt_xent`` normalises the rows and then
``_info_nce_unit`` calls ``gather(u)`` on the unit rows u (2B/W, D) -> (2B, D) candidates, before
the loss. Each rank's anchors are its own rows; its candidates are every rank's rows.
``_AllGatherWithGrad.backward`` all-reduces (sums) the whole (2B, D) gradient of the candidates
over the ranks and keeps this rank's slice, so each rank's rows receive the pushes of every
rank's anchors (W times the one-process gradient; DDP's mean over ranks brings it back).

Per rank and step, with s = 4 bytes (float32) and ring algorithms (NCCL's; on 2 ranks every
algorithm sends each rank's share to the other once, which is the same count):

- forward all-gather: each rank sends its 2(B/W)·D values and receives (W - 1) times that:
  (W - 1)/W · 2B·D·s bytes each way.
- backward all-reduce of the (2B, D) gradient: 2(W - 1)/W · 2B·D·s bytes each way, twice the
  forward. A reduce-scatter would give each rank its slice summed for half that, (W - 1)/W ·
  2B·D·s; the all-reduce hands every rank the other ranks' slices too, only to drop them.
- together 3(W - 1)/W · 2B·D·s bytes each way (2(W - 1)/W · 2B·D·s with a reduce-scatter).
- besides, a few kB: the int64 source ids ((W - 1)/W · 2B · 8 bytes), three row counts and the
  loss scalar. DDP all-reduces the gradients of the P parameters: 2(W - 1)/W · P·s bytes each
  way, in both ``all`` and ``local``.

Scaling to GPUs (not measured here)
-----------------------------------
ResNet-18 (P ≈ 11.2M) with D = 128, B = 4096 on W = 8 GPUs (512 sources, 1024 views a GPU):
each rank's z is 2 · 512 · 128 · 4 = 0.52 MB; the forward gather receives 7 × 0.52 = 3.67 MB,
the backward all-reduce of the 8192 × 128 gradient (4.19 MB) sends 2 · 7/8 · 4.19 = 7.34 MB, so
11.0 MB per rank per step (7.3 MB with a reduce-scatter). DDP's all-reduce sends 2 · 7/8 ·
11.2M · 4 = 78.4 MB. The gather is 14 % of DDP's bytes: at ~300 GB/s (NVLink, one direction)
0.037 ms against 0.26 ms; at 25 Gb/s Ethernet (3.125 GB/s) 3.5 ms against 25 ms a step.
Bandwidth therefore favours the gather, but three things make it costlier than its bytes:

- it sits on the critical path: the loss cannot start before the forward gather and the
  projection head's backward cannot start before the backward all-reduce, while DDP's bucketed
  all-reduce overlaps with the rest of backward;
- it is eight collectives a step (six all-gathers, two all-reduces), each with NCCL's latency
  (tens of µs on NVLink, more across nodes), which outweigh the 0.037 ms of bandwidth on NVLink;
- ``_gather_plain`` checks the row counts on the host (``int(s)``), and ``_ids_across_ranks``
  reads ``aminmax`` of the ids: on CUDA four host-device synchronisations a step, where a W = 1
  trial step never waits for the device.

The gather grows with B·D and shrinks relative to DDP as P grows: it reaches DDP's bytes at
2B·D ≈ 2P/3 (B ≈ 29,000 at D = 128 for ResNet-18). The script prints these numbers, computed,
for a few (W, B, D, P).
"""

from __future__ import annotations

import argparse
import faulthandler
import math
import os
import pickle
import socket
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORKERS = 2
FLOAT32 = 4
INT64 = 8
NVLINK_BYTES_PER_S = 300e9  # NVLink (A100-class), one direction, per GPU
ETHERNET_BYTES_PER_S = 25e9 / 8  # 25 Gb/s Ethernet
RESNET18_PARAMS = 11.2e6
RESNET50_PARAMS = 23.5e6
# (label, W, B, D, P) of the bytes table; the trial's own row is added first
SCALING = (
    ("ResNet-18", 2, 4096, 128, RESNET18_PARAMS),
    ("ResNet-18", 8, 4096, 128, RESNET18_PARAMS),
    ("ResNet-18", 64, 4096, 128, RESNET18_PARAMS),
    ("ResNet-18", 8, 32768, 128, RESNET18_PARAMS),
    ("ResNet-18", 8, 4096, 512, RESNET18_PARAMS),
    ("ResNet-50", 8, 4096, 128, RESNET50_PARAMS),
)


# ---------------------------------------------------------------------------------------------
# bytes moved per rank and step
# ---------------------------------------------------------------------------------------------
def gather_bytes(workers: int, batch: int, dim: int, itemsize: int = FLOAT32) -> dict[str, float]:
    """Bytes each rank sends (and receives) per step for ``negatives: all`` with ``workers`` W,
    global batch B (2B views) and projection dimension D, ring algorithms:

    - ``forward``: the all-gather of z, (W - 1) · 2(B/W) · D · itemsize;
    - ``backward``: the all-reduce of the (2B, D) gradient, 2(W - 1)/W · 2B · D · itemsize;
    - ``total``: both; ``reduce_scatter_total``: with a reduce-scatter in backward instead;
    - ``ids``: the all-gather of the int64 source ids, (W - 1) · 2(B/W) · 8.
    """
    if workers < 1 or batch % workers:
        raise ValueError(f"batch={batch} must split evenly over workers={workers}")
    local = 2 * (batch // workers) * dim * itemsize  # this rank's z: two views
    forward = (workers - 1) * local
    backward = 2 * (workers - 1) / workers * (2 * batch * dim * itemsize)
    return {
        "forward": float(forward),
        "backward": float(backward),
        "total": float(forward + backward),
        "reduce_scatter_total": float(2 * forward),
        "ids": float((workers - 1) * 2 * (batch // workers) * INT64),
    }


def allreduce_bytes(workers: int, params: float, itemsize: int = FLOAT32) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of ``params`` values."""
    return 2 * (workers - 1) / workers * params * itemsize


# ---------------------------------------------------------------------------------------------
# the trial and the runs
# ---------------------------------------------------------------------------------------------
def trial_config(args: argparse.Namespace) -> dict:
    """The benchmarked digits trial: an MLP encoder and a linear head (no BatchNorm, whose
    per-worker statistics would make W = 2 a different model; SyncBatchNorm is CUDA-only), one
    evaluation at the end, a small held-out and probe set."""
    return {
        "dataset": "digits", "encoder": "mlp", "mlp_hidden": list(args.hidden),
        "feature_dim": 128, "projection": "linear", "projection_dim": args.dim,
        "objective": "info_nce", "temperature": 0.2, "batch_size": args.batch,
        "budget_examples": args.batch * args.steps, "optimizer": "adam", "base_lr": 2e-3,
        "warmup_fraction": 0.05, "schedule": "cosine", "augmentation": "crop+noise+erase",
        "aug_strength": 0.6, "eval_marks": 1, "heldout_size": args.heldout,
        "probe_train_size": args.heldout, "linear_probe_iters": 20, "knn_k": 10,
        "device": "cpu", "compile": "off",
    }  # fmt: skip


def runs(tpw: int) -> list[dict]:
    """The four trials: a label, W, total threads, negatives."""
    return [
        {"label": "1 worker", "workers": 1, "threads": tpw, "negatives": "all"},
        {"label": "1 worker", "workers": 1, "threads": WORKERS * tpw, "negatives": "all"},
        {"label": f"{WORKERS} workers", "workers": WORKERS, "threads": WORKERS * tpw,
         "negatives": "all"},
        {"label": f"{WORKERS} workers", "workers": WORKERS, "threads": WORKERS * tpw,
         "negatives": "local"},
    ]  # fmt: skip


def _trial(base: dict, run: dict, tpw: int, steps: int | None = None) -> dict | None:
    """Run ``run`` on this rank; rank 1 waits in a barrier through a one-worker trial. Rank 0
    gets the result, every rank's CPU seconds over wall seconds of the trial (``cpu_share``; a
    rank starved of its core shows less than its threads) and rank 1's CPU seconds spent
    waiting through a one-worker trial (``idle_cpu_s``); rank 1 gets None."""
    from trainables.train import run_trial

    rank = dist.get_rank()
    config = base | {"workers": run["workers"], "negatives": run["negatives"]}
    if steps is not None:
        config["budget_examples"] = config["batch_size"] * steps
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = None
    if run["workers"] == 1:
        if rank == 0:
            torch.set_num_threads(run["threads"])
            result = run_trial(config)
            torch.set_num_threads(tpw)
        dist.barrier()
    else:
        result = run_trial(config)
    used = (time.process_time() - cpu0, time.perf_counter() - wall0)
    found: list = [None] * WORKERS
    dist.all_gather_object(found, used)
    if rank != 0:
        return None
    keep = ("wall_s", "examples_seen", "steps", "status", "loss/candidates", "train/loss")
    shares = [cpu / wall for cpu, wall in found]
    return (
        {k: result[k] for k in keep}
        | {k: v for k, v in result.items() if k.startswith("time/")}
        | {
            "cpu_share": shares if run["workers"] > 1 else shares[:1],
            "idle_cpu_s": found[1][0] if run["workers"] == 1 else 0.0,
        }
    )


def _median_slowest(samples: list[float]) -> float:
    """The slower rank's median (seconds) of per-iteration ``samples`` gathered over ranks."""
    found: list = [None] * dist.get_world_size()
    dist.all_gather_object(found, statistics.median(samples))
    return max(found)


def time_gather(rows: int, dim: int, iters: int, warmup: int) -> dict[str, float]:
    """``all_gather_with_grad`` of a (rows, D) float32 tensor: forward and forward + backward
    seconds per step (median over iterations of the slower rank)."""
    from trainables.objectives import all_gather_with_grad

    torch.manual_seed(dist.get_rank())
    x = torch.randn(rows, dim, requires_grad=True)
    grad = torch.randn(rows * dist.get_world_size(), dim)
    fwd, full = [], []
    for i in range(warmup + iters):
        dist.barrier()
        t0 = time.perf_counter()
        gathered = all_gather_with_grad(x)
        t1 = time.perf_counter()
        gathered.backward(grad)
        t2 = time.perf_counter()
        x.grad = None
        if i >= warmup:
            fwd.append(t1 - t0)
            full.append(t2 - t0)
    return {"forward": _median_slowest(fwd), "full": _median_slowest(full)}


def time_losses(sources: int, dim: int, iters: int, warmup: int) -> dict[str, float]:
    """Forward + backward seconds per step of ``nt_xent`` on a rank's ``sources`` (B/W) pairs:
    gathered (``negatives: all``) and local plus the all-reduce of the logged loss
    (``negatives: local``), as ``_Trial.train_step`` calls them; and (``small``) the gathered
    path's collectives other than z's, alone: the gather of the int64 source ids and the
    gradient-keeping gather of the loss for its mean over ranks (forward + backward)."""
    from trainables.objectives import _gather_plain, all_gather_with_grad, nt_xent

    torch.manual_seed(dist.get_rank())
    z1 = torch.randn(sources, dim, requires_grad=True)
    z2 = torch.randn(sources, dim, requires_grad=True)

    def gathered() -> None:
        nt_xent(z1, z2, 0.2, gather=all_gather_with_grad, checks=False).backward()

    def local() -> None:
        loss = nt_xent(z1, z2, 0.2, checks=False)
        mean = loss.detach().double().reshape(1)
        dist.all_reduce(mean)
        loss.backward()

    ids = torch.arange(sources).repeat(2)
    scalar = torch.zeros(1, requires_grad=True)

    def small() -> None:
        _gather_plain(ids)
        all_gather_with_grad(scalar).mean().backward()

    samples: dict[str, list[float]] = {"all": [], "local": [], "small": []}
    for i in range(warmup + iters):
        for name, step in (("all", gathered), ("local", local), ("small", small)):
            dist.barrier()
            t0 = time.perf_counter()
            step()
            elapsed = time.perf_counter() - t0
            z1.grad = z2.grad = scalar.grad = None
            if i >= warmup:
                samples[name].append(elapsed)
    return {name: _median_slowest(s) for name, s in samples.items()}


def _progress(t0: float, message: str) -> None:
    """A progress line on stderr from rank 0 (stdout holds the tables)."""
    if dist.get_rank() == 0:
        print(f"[{time.perf_counter() - t0:6.1f} s] {message}", file=sys.stderr, flush=True)


def _worker(rank: int, port: int, out_dir: str, plan: dict) -> None:
    faulthandler.enable()  # a crash in a collective names its Python frame
    t0 = time.perf_counter()
    tpw = plan["threads_per_worker"]
    torch.set_num_threads(tpw)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORKERS,
        timeout=timedelta(seconds=plan["timeout_s"]),
    )  # fmt: skip
    try:
        base, found = plan["config"], {"trials": [], "gather": [], "loss": None}
        for run in plan["runs"]:  # warm-up: first allocations, data load, thread pools
            _trial(base, run, tpw, steps=plan["warmup_steps"])
        for repeat in range(plan["repeat"]):
            _progress(t0, f"trials, repeat {repeat + 1} of {plan['repeat']}")
            for index, run in enumerate(plan["runs"]):
                result = _trial(base, run, tpw)
                if rank == 0:
                    found["trials"].append({"run": index, "repeat": repeat} | result)
        iters, warmup = plan["iters"], plan["micro_warmup"]
        _progress(t0, f"the gather alone at {len(plan['grid'])} (B, D), then the losses")
        for batch, dim in plan["grid"]:
            rows = 2 * batch // WORKERS
            found["gather"].append(
                {"batch": batch, "dim": dim} | time_gather(rows, dim, iters, warmup)
            )
        found["loss"] = time_losses(base["batch_size"] // WORKERS, base["projection_dim"],
                                    iters, warmup)  # fmt: skip
        _progress(t0, "done")
        if rank == 0:
            with open(Path(out_dir) / "results.pkl", "wb") as f:
                pickle.dump(found, f)
        dist.barrier()  # no rank tears the group down while the other is still in a collective
    finally:
        dist.destroy_process_group()
    leave_without_finalizing()


def leave_without_finalizing() -> None:
    """End a rank that finished its work and destroyed its group with ``os._exit``. Its results
    are written; what is left is the interpreter's finalization, where a gloo thread still
    joinable at a destructor aborts the process ("terminate called without an active
    exception", seen once in CI after the smoke run printed "done"; pytorch #179291 describes
    the teardown race), and mp.spawn reports the run failed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(plan: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="dp-bench-") as tmp:
        mp.spawn(_worker, args=(free_port(), tmp, plan), nprocs=WORKERS, join=True)
        with open(Path(tmp) / "results.pkl", "rb") as f:
            return pickle.load(f)


# ---------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------
def fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def summarise_trials(plan: dict, found: dict) -> list[dict]:
    """Per run: medians over repeats of train_s, data_s, wall_s and the derived rates."""
    steps = plan["config"]["budget_examples"] // plan["config"]["batch_size"]
    rows = []
    for index, run in enumerate(plan["runs"]):
        mine = [t for t in found["trials"] if t["run"] == index]
        train = [t["time/train_s"] for t in mine]
        median = statistics.median(train)
        rows.append(
            run
            | {
                "train_s": median,
                "spread": (max(train) - min(train)) / median if median > 0 else math.nan,
                "ms_per_step": 1e3 * median / steps,
                "examples_per_s": mine[0]["examples_seen"] / median,
                "data_s": statistics.median(t["time/data_s"] for t in mine),
                "wall_s": statistics.median(t["wall_s"] for t in mine),
                "candidates": mine[0]["loss/candidates"],
                "status": {t["status"] for t in mine},
                "loss": statistics.median(t["train/loss"] for t in mine),
                "idle_cpu_s": max(t["idle_cpu_s"] for t in mine),
                "cpu_share": [
                    statistics.median(v) for v in zip(*(t["cpu_share"] for t in mine), strict=True)
                ],
            }
        )
    return rows


def print_trials(plan: dict, rows: list[dict]) -> None:
    c = plan["config"]
    steps = c["budget_examples"] // c["batch_size"]
    print(
        f"## Trials: digits, MLP {c['mlp_hidden']} -> {c['feature_dim']}, linear head to "
        f"D = {c['projection_dim']}, global batch B = {c['batch_size']}, {steps} steps; "
        f"{plan['threads_per_worker']} thread(s) per worker; median of {plan['repeat']}"
    )
    print()
    print(
        "| run | threads | negatives | candidates per anchor | train ms/step | examples/s "
        "(training steps) | spread of train_s | data s | wall s | CPU/wall by rank | "
        "last loss |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['label']} | {r['threads']} | {r['negatives'] if r['workers'] > 1 else '-'} | "
            f"{r['candidates']:.0f} | {r['ms_per_step']:.1f} | {r['examples_per_s']:.0f} | "
            f"{100 * r['spread']:.0f}% | {r['data_s']:.2f} | {r['wall_s']:.2f} | "
            f"{', '.join(f'{c:.2f}' for c in r['cpu_share'])} | {r['loss']:.3f} |"
        )
    print()
    statuses = set().union(*(r["status"] for r in rows))
    idle = max(r["idle_cpu_s"] for r in rows[:2])
    print(
        f"statuses: {', '.join(sorted(statuses))}; rank 1's CPU while rank 0 ran a one-worker "
        f"trial: at most {idle:.2f} s"
    )
    print()


def print_micro(plan: dict, found: dict) -> dict:
    c = plan["config"]
    b, d = c["batch_size"], c["projection_dim"]
    loss = found["loss"]
    at_trial = next(g for g in found["gather"] if (g["batch"], g["dim"]) == (b, d))
    print(f"## The pieces at the trial's shape: B = {b}, D = {d}, W = {WORKERS} gloo ranks")
    print()
    print("| per step, each rank | ms (median, slower rank) |")
    print("|---|---:|")
    print(f"| all_gather_with_grad forward, ({2 * b // WORKERS}, {d}) float32 | "
          f"{fmt_ms(at_trial['forward'])} |")  # fmt: skip
    print(f"| all_gather_with_grad forward + backward | {fmt_ms(at_trial['full'])} |")
    print(f"| nt_xent gathered (negatives: all), forward + backward | {fmt_ms(loss['all'])} |")
    print(
        f"| nt_xent local + all-reduce of the loss (negatives: local), forward + backward | "
        f"{fmt_ms(loss['local'])} |"
    )
    print(
        f"| the gathered path's other collectives: source ids ({2 * b // WORKERS} int64) and "
        f"the loss's mean over ranks, forward + backward | {fmt_ms(loss['small'])} |"
    )
    rest = loss["all"] - loss["local"] - at_trial["full"] - loss["small"]
    print(
        f"| the rest of gathered - local: the larger similarity block, pairs from ids | "
        f"{fmt_ms(rest) if rest >= 0 else f'{1e3 * rest:.2f}'} |"
    )
    print()
    print(f"## all_gather_with_grad alone, {WORKERS} gloo ranks, "
          f"{plan['threads_per_worker']} thread(s) each")  # fmt: skip
    print()
    print(
        "| B | D | rows per rank | forward ms | forward + backward ms | sent per rank forward | "
        "backward | together | MB/s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for g in found["gather"]:
        n = gather_bytes(WORKERS, g["batch"], g["dim"])
        rate = n["total"] / g["full"] / 1e6 if g["full"] > 0 else math.nan
        print(
            f"| {g['batch']} | {g['dim']} | {2 * g['batch'] // WORKERS} | {fmt_ms(g['forward'])} "
            f"| {fmt_ms(g['full'])} | {fmt_bytes(n['forward'])} | {fmt_bytes(n['backward'])} | "
            f"{fmt_bytes(n['total'])} | {rate:.0f} |"
        )
    print()
    return at_trial


def print_scaling(plan: dict) -> None:
    c = plan["config"]
    print("## Bytes per rank per step: the gather (negatives: all) against DDP's all-reduce")
    print()
    print(
        "Ring algorithms, float32, each way. Gather: forward all-gather of z + backward "
        "all-reduce of its (2B, D) gradient (with a reduce-scatter in brackets). DDP: "
        "all-reduce of P gradients."
    )
    print()
    print(
        "| model | W | B | D | P | gather forward | gather backward | gather together | "
        "DDP all-reduce | gather / DDP | at 300 GB/s: gather, DDP ms | at 25 Gb/s: gather, "
        "DDP ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = [("this trial", WORKERS, c["batch_size"], c["projection_dim"], plan["params"]),
            *SCALING]  # fmt: skip
    for label, w, b, d, p in rows:
        g = gather_bytes(w, b, d)
        ddp = allreduce_bytes(w, p)
        times = [
            f"{1e3 * g['total'] / bw:.3f}, {1e3 * ddp / bw:.3f}"
            for bw in (NVLINK_BYTES_PER_S, ETHERNET_BYTES_PER_S)
        ]
        print(
            f"| {label} | {w} | {b} | {d} | {p / 1e6:.2f}M | {fmt_bytes(g['forward'])} | "
            f"{fmt_bytes(g['backward'])} | {fmt_bytes(g['total'])} "
            f"({fmt_bytes(g['reduce_scatter_total'])}) | {fmt_bytes(ddp)} | "
            f"{100 * g['total'] / ddp:.1f}% | {times[0]} | {times[1]} |"
        )
    print()


def model_params(config: dict) -> int:
    from trainables.config import TrialConfig
    from trainables.data import load_data
    from trainables.encoders import build_model

    trial = TrialConfig(**config)
    model = build_model(trial, load_data(trial).input_shape)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512, help="global batch B")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--dim", type=int, default=128, help="projection dimension D")
    parser.add_argument("--hidden", type=int, nargs="+", default=[512, 512])
    parser.add_argument("--heldout", type=int, default=300)
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5, help="trials per run; the median")
    parser.add_argument("--iters", type=int, default=30, help="micro-benchmark iterations")
    parser.add_argument("--smoke", action="store_true", help="tiny model, few steps (seconds)")
    args = parser.parse_args()
    grid_batches, grid_dims, warmup_steps, micro_warmup = (256, 1024, 4096), (64, 128, 512), 4, 3
    if args.smoke:
        args.batch, args.steps, args.dim, args.hidden, args.heldout = 64, 6, 32, [64], 100
        args.repeat, args.iters = 1, 5
        grid_batches, grid_dims, warmup_steps, micro_warmup = (64, 256), (32, 128), 1, 1
    config = trial_config(args)
    grid = sorted({(b, d) for b in grid_batches for d in grid_dims} | {(args.batch, args.dim)})
    plan = {
        "config": config,
        "runs": runs(args.threads_per_worker),
        "threads_per_worker": args.threads_per_worker,
        "repeat": args.repeat,
        "warmup_steps": warmup_steps,
        "iters": args.iters,
        "micro_warmup": micro_warmup,
        "grid": grid,
        "timeout_s": 1800,
        "params": model_params(config),
    }
    from trainables.machine import usable_cpus

    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    found = measure(plan)
    load1 = os.getloadavg()[0]
    rows = summarise_trials(plan, found)
    print_trials(plan, rows)
    at_trial = print_micro(plan, found)
    print_scaling(plan)
    one_same, one_fewer, gathered, local = rows[1], rows[0], rows[2], rows[3]
    print(
        f"negatives all - local in the trial: "
        f"{gathered['ms_per_step'] - local['ms_per_step']:.2f} ms/step (the gather alone "
        f"{1e3 * at_trial['full']:.2f}, the gathered loss - the local one "
        f"{1e3 * (found['loss']['all'] - found['loss']['local']):.2f}); "
        f"{WORKERS} workers (all) vs one worker with {one_fewer['threads']} thread(s): "
        f"{gathered['examples_per_s'] / one_fewer['examples_per_s']:.2f}× examples/s; "
        f"local vs one worker with the same threads: "
        f"{local['examples_per_s'] / one_same['examples_per_s']:.2f}×; "
        f"benchmark took {time.perf_counter() - t0:.0f} s on {usable_cpus()} CPUs, "
        f"1-min load average {load0:.2f} before and {load1:.2f} after"
    )
    print(
        f"gather overhead: {1e3 * at_trial['full']:.2f} ms/step "
        f"({100 * 1e3 * at_trial['full'] / gathered['ms_per_step']:.1f}% of a step); "
        f"second worker: {gathered['examples_per_s'] / one_same['examples_per_s']:.2f}× "
        f"examples/s vs one worker with the same threads"
    )


if __name__ == "__main__":
    main()
