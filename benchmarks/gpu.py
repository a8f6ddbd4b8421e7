"""A trial on one GPU: the model's ceiling against the trial loop, evaluation's cost, four trials
sharing the GPU, info_nce against the dense reference, and a trial on real images
(Fashion-MNIST) when they are installed. One table, at most 7 minutes.

    python benchmarks/gpu.py                        # CIFAR-10-format data written to a temp dir
    python benchmarks/gpu.py --data-root DIR        # DIR/cifar-10-batches-py, torchvision's layout
    python benchmarks/gpu.py --fashion-root DIR     # Fashion-MNIST's IDX files for (e)
    python benchmarks/gpu.py --smoke --device cpu   # every part, tiny, on the CPU (~20 s)

``--smoke`` runs every part at its smallest: 20 held-out and 40 probe rows, two trials at once in
(c), one size (B = 512) in (d) with its three peaks measured in one process, each part's
processes as few as its code path allows.

Needs torch, torchvision, numpy, scikit-learn, pyyaml and pydantic (the trial path,
``trainables/``); no Ray, MLflow or Optuna. The rows:

(a) ceiling: ResNet-18 (CIFAR stem) forward+backward on random inputs already on the device, no
    data and no loss, channels_last, bf16 autocast, compiled; against the trial loop's
    ``train/examples_per_s`` (training steps and views, compile time apart) of ``run_trial`` on
    the same model and batch. Examples are source images; a step sees two views of each.
(b) seconds per evaluation (held-out views, diagnostics, kNN and linear probes on both spaces,
    CIFAR-10's full 10k held-out and 50k probe rows) and its share of a default-length trial
    (``trainables/presets/cifar10_resnet18.yaml``: 10,000 steps and 4 evaluations), that trial's
    training time taken at (a)'s measured trial-loop speed.
(c) one trial alone against four at once on the GPU (batch 256 each), every one held to the
    share a study with ``resources: {gpu: 0.25, cpu: cores/4}`` gives it (threads and memory
    cap, ``claim_share``): through Ray tasks when Ray can be imported, else four processes.
    Aggregate examples/s counting wall time (launch to last result, start-up and compile
    included) and counting the training loops alone (the sum of their ``train/examples_per_s``).
(d) ``info_nce`` (what a grouped trial calls) and ``nt_xent`` with ``checks=False`` (what a
    trial without groups calls) forward+backward time and peak memory against
    ``info_nce_dense`` at B = 4096, 16384 and 32768 (N = 2B rows, D = 128), through
    ``benchmarks/objectives.py``.
(e) Fashion-MNIST (60,000 real 28 × 28 images; Debian's dataset-fashion-mnist in
    /usr/share/datasets/fashion-mnist, ``bash scripts/setup_data.sh``, or ``--fashion-root``):
    one trial of the small_cnn recipe (``trainables/presets/digits.yaml``) through ``run_trial``,
    its loop's ``train/examples_per_s`` and one evaluation's seconds (its full 10,000 held-out
    and 60,000 probe rows). Skipped, saying so, where the files are not there.

Before the table it checks, on this device: that a training step issues no host
synchronisation (``torch.cuda.set_sync_debug_mode``), and that evaluation on the device equals
the CPU's scoring of the same features within 1e-5.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trainables import idx  # noqa: E402
from trainables.config import FASHION_MNIST_ROOT, TrialConfig  # noqa: E402
from trainables.data import load_data, write_cifar10  # noqa: E402
from trainables.device import claim_share, resident_data  # noqa: E402
from trainables.encoders import build_model  # noqa: E402
from trainables.evaluation import heldout_features, score  # noqa: E402
from trainables.machine import usable_cpus  # noqa: E402
from trainables.optimisers import make_optimizer  # noqa: E402
from trainables.train import run_trial  # noqa: E402

PRESET = ROOT / "trainables" / "presets" / "cifar10_resnet18.yaml"
SMALL_CNN = ROOT / "trainables" / "presets" / "digits.yaml"  # (e)'s recipe
SHARING = 4  # trials at once in (c)
SMOKE_SHARING = 2  # --smoke: the same path, half the processes


def trials_at_once(args: argparse.Namespace) -> int:
    return SMOKE_SHARING if args.smoke else SHARING


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
def base_config(args: argparse.Namespace, **changes) -> TrialConfig:
    """The preset's trial on this benchmark's data and device, with ``changes``."""
    from trainables.__main__ import load_config_file

    fields = load_config_file(str(PRESET)) | {
        "data_root": str(args.data_root),
        "data_checksums": not args.wrote_data,  # our random files are not CIFAR's own
        "device": args.device,
    }
    if args.smoke:  # tiny and fast: every part runs, no number means anything
        fields |= {
            "encoder": "small_cnn", "projection_hidden": 64, "batch_size": 16,
            "budget_examples": 16 * 4, "heldout_size": 20, "probe_train_size": 40,
            "linear_probe_iters": 5, "knn_k": 5, "compile": "off",
        }  # fmt: skip
    return TrialConfig(**fields | changes)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------
def check_no_sync(args: argparse.Namespace) -> str:
    """Run training steps under CUDA's sync debug mode and count the synchronisations."""
    from trainables import train

    device = torch.device(args.device)
    if device.type != "cuda":
        return "host syncs per step: not measured (no CUDA)"
    config = base_config(args, compile="off", budget_examples=args.batch * 4)
    trial = train._Trial(config, None)
    batches = trial.batches()
    _, _, v1, v2, groups, pool = next(batches)
    trial.train_step(v1, v2, groups)  # first step: allocations, cuBLAS handles
    sync(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(2):
                trial.step += 1
                _, _, v1, v2, groups, pool = next(batches)
                trial.train_step(v1, v2, groups)
                trial.count_candidates(pool)  # what a trial's step does besides
                trial.watch.poll()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    return f"host syncs in 2 training steps (views, step, divergence poll): {len(syncs)}"


def check_evaluation(args: argparse.Namespace) -> str:
    """Largest |device score - CPU score| over every evaluation metric, same features."""
    device = torch.device(args.device)
    config = base_config(args, heldout_size=2000, probe_train_size=5000)
    if args.smoke:
        config = base_config(args)
    data = load_data(config)
    model = build_model(config, data.input_shape).to(device)
    features = heldout_features(config, model, data, device, resident_data(data, device))
    on_cpu = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in features.items()}
    got, want = score(config, features), score(config, on_cpu)
    worst = max(abs(got[k] - want[k]) for k in want)
    verdict = "within" if worst <= 1e-5 else "OUTSIDE"
    return (
        f"evaluation on {device.type} against the CPU, same features: largest difference "
        f"{worst:.1e} ({verdict} 1e-5)"
    )


# ---------------------------------------------------------------------------------------------
# (a) ceiling and trial loop, (b) evaluation
# ---------------------------------------------------------------------------------------------
def ceiling(args: argparse.Namespace) -> float:
    """Examples/s of forward+backward alone: random inputs on the device, no data, no loss."""
    config = base_config(args, compile="on" if not args.smoke else "off")
    device = torch.device(args.device)
    model = build_model(config, (3, 32, 32)).to(device)
    cuda = device.type == "cuda"
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    forward = torch.compile(model) if config.compile == "on" else model
    optimizer = make_optimizer(config, model)
    b = config.batch_size
    x = torch.randn(2 * b, 3, 32, 32, device=device)
    if cuda:
        x = x.contiguous(memory_format=torch.channels_last)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext():
            _, z = forward(x)
        optimizer.zero_grad(set_to_none=True)
        z.float().square().mean().backward()

    for _ in range(3 if args.smoke else 10):  # compile and warm up
        step()
    sync(device)
    steps = 3 if args.smoke else 50
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return steps * b / (time.perf_counter() - t0)


def trial_loop(args: argparse.Namespace, build=base_config) -> dict:
    """One trial of ``build``'s model and batch (the preset's, by default): its loop speed and
    one evaluation's time."""
    steps = 4 if args.smoke else 300
    config = build(args)
    config = build(args, budget_examples=config.batch_size * steps, eval_marks=1)
    result = run_trial(config)
    return {
        "examples_per_s": result["train/examples_per_s"],
        "eval_s": result["time/eval_s"],
        "compile_s": result["time/compile_s"],
        "status": result["status"],
    }


# ---------------------------------------------------------------------------------------------
# (e) a trial on Fashion-MNIST
# ---------------------------------------------------------------------------------------------
def fashion_present(root: Path) -> bool:
    """Whether ``root`` holds the four IDX files (gzipped or plain)."""
    return all(idx.find(root, name) for name in idx.NAMES)


def fashion_config(args: argparse.Namespace, **changes) -> TrialConfig:
    """The small_cnn recipe (the digits preset) on Fashion-MNIST in ``--fashion-root``."""
    from trainables.__main__ import load_config_file

    fields = load_config_file(str(SMALL_CNN)) | {
        "dataset": "fashion_mnist", "data_root": str(args.fashion_root), "device": args.device,
    }  # fmt: skip
    if args.smoke:
        fields |= {
            "batch_size": 16, "projection_hidden": 64, "heldout_size": 20,
            "probe_train_size": 40, "linear_probe_iters": 5, "knn_k": 5, "compile": "off",
        }  # fmt: skip
    return TrialConfig(**fields | changes)


# ---------------------------------------------------------------------------------------------
# (c) one trial against four sharing the GPU
# ---------------------------------------------------------------------------------------------
def sharing_config(args: argparse.Namespace) -> dict:
    steps = 4 if args.smoke else 1500
    batch = 16 if args.smoke else 256
    return base_config(
        args, batch_size=batch, budget_examples=batch * steps, eval_marks=1,
        heldout_size=20 if args.smoke else 1000, probe_train_size=40 if args.smoke else 2000,
        linear_probe_iters=5 if args.smoke else 20,
    ).model_dump(mode="json")  # fmt: skip


def share_of_machine(count: int = SHARING) -> tuple[float, float]:
    """Each of ``count`` trials' (cpu, gpu) share of this machine, as a study would give it."""
    cpu = max(1, usable_cpus() // count)
    return float(cpu), 1.0 / count


def one_shared_trial(config: dict, cpu: float, gpu: float) -> dict:
    """A trial as a study's trainable runs it: held to its share, then ``run_trial``."""
    start = time.time()
    claim_share(cpu, gpu)
    result = run_trial(config)
    return {
        "start": start,
        "end": time.time(),
        "examples": result["examples_seen"],
        "examples_per_s": result["train/examples_per_s"],
        "status": result["status"],
    }


def run_shared(
    config: dict, count: int, share: tuple[float, float], use_ray: bool
) -> tuple[list[dict], float, str]:
    """``count`` trials at once, each held to ``share`` (cpu, gpu); (results, wall, how)."""
    cpu, gpu = share
    ray = None
    if use_ray:
        try:
            import ray
        except ImportError:
            ray = None
    t0 = time.time()
    if ray is not None:
        if not ray.is_initialized():
            ray.init(num_cpus=usable_cpus(), include_dashboard=False, log_to_driver=False)
        task = ray.remote(num_cpus=cpu, num_gpus=gpu if torch.cuda.is_available() else 0)(
            one_shared_trial
        )
        results = ray.get([task.remote(config, cpu, gpu) for _ in range(count)])
        how = "Ray tasks"
    else:
        command = [sys.executable, __file__, "--shared-worker", json.dumps([config, cpu, gpu])]
        workers = [
            subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT)
            for _ in range(count)
        ]
        results = []
        for worker in workers:
            out, _ = worker.communicate()
            if worker.returncode != 0:
                raise RuntimeError(f"a shared trial failed (exit {worker.returncode})")
            results.append(json.loads(out.strip().splitlines()[-1]))
        how = "processes (no Ray here)"
    return results, time.time() - t0, how


def sharing(args: argparse.Namespace) -> dict:
    config = sharing_config(args)
    # alone first: its compile fills torch.compile's cache, which the others then share, as the
    # trials of a study do
    count = trials_at_once(args)
    share = share_of_machine(count)
    alone, alone_wall, how = run_shared(config, 1, share, not args.processes)
    together, together_wall, _ = run_shared(config, count, share, not args.processes)
    wall_1 = alone[0]["examples"] / alone_wall
    wall_n = sum(r["examples"] for r in together) / together_wall
    loop_1 = alone[0]["examples_per_s"]
    loop_n = sum(r["examples_per_s"] for r in together)
    return {
        "how": how, "wall_1": wall_1, "wall_n": wall_n, "loop_1": loop_1, "loop_n": loop_n,
        "batch": config["batch_size"], "count": count,
    }  # fmt: skip


# ---------------------------------------------------------------------------------------------
# (d) info_nce against dense
# ---------------------------------------------------------------------------------------------
def losses(args: argparse.Namespace) -> list[dict]:
    path = ROOT / "benchmarks" / "objectives.py"
    spec = importlib.util.spec_from_file_location("bench_objectives", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sizes = [1024] if args.smoke else [8192, 32768, 65536]
    options = argparse.Namespace(
        dim=128, repeats=1 if args.smoke else 5, min_seconds=0.0 if args.smoke else 1.0,
        threads=int(share_of_machine()[0]), device=args.device, lightly_path=None,
        impls=["info_nce", "nt_xent", "dense"], sizes=sizes, smoke=args.smoke,
    )  # fmt: skip
    return bench.run(options)  # smoke: the three peaks of an N in one process


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, help="holds cifar-10-batches-py")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument(
        "--fashion-root", type=Path, default=Path(FASHION_MNIST_ROOT),
        help=f"holds Fashion-MNIST's IDX files, for (e) (default {FASHION_MNIST_ROOT})",
    )  # fmt: skip
    parser.add_argument("--parts", default="abcde", help="which rows, e.g. 'ad'")
    parser.add_argument("--smoke", action="store_true", help="tiny, any device, seconds")
    parser.add_argument("--processes", action="store_true", help="(c) as processes, even with Ray")
    parser.add_argument("--shared-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.shared_worker:
        config, cpu, gpu = json.loads(args.shared_worker)
        print(json.dumps(one_shared_trial(config, cpu, gpu)))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (use --device cpu --smoke to try it)")
    t_start = time.perf_counter()
    args.wrote_data = args.data_root is None
    if args.wrote_data:
        per_batch, test = (80, 100) if args.smoke else (10000, 10000)  # 5 training batches
        root = Path(tempfile.mkdtemp(prefix="cifar-bench-"))
        args.data_root = write_cifar10(root, per_batch, test)
    try:
        measure(args, t_start)
    finally:  # the data it wrote (50,000 CIFAR-size images at full size) does not stay behind
        if args.wrote_data:
            shutil.rmtree(root, ignore_errors=True)


def measure(args: argparse.Namespace, t_start: float) -> None:
    """Every part asked for, printed as one table (see the module docstring)."""
    args.batch = base_config(args).batch_size
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"benchmarks/gpu.py on {name}, torch {torch.__version__}, {usable_cpus()} CPU cores"
          f"{' (smoke: tiny sizes, numbers mean nothing)' if args.smoke else ''}")  # fmt: skip
    print(check_no_sync(args))
    print(check_evaluation(args))
    lines = ["| part | measure | value |", "|---|---|---:|"]

    def row(part: str, measure: str, value: str) -> None:
        lines.append(f"| ({part}) | {measure} | {value} |")

    if "a" in args.parts or "b" in args.parts:
        top, loop = ceiling(args), trial_loop(args)
        speed = loop["examples_per_s"]
        row(
            "a", "model ceiling, examples/s (fwd+bwd, channels_last, compiled, bf16)", f"{top:,.0f}"
        )
        row("a", f"trial loop, examples/s (batch {args.batch})", f"{speed:,.0f}")
        row("a", "trial loop / ceiling", f"{speed / top:.2f}")
        row("a", "the trial's compile time, s", f"{loop['compile_s']:.1f}")
        preset = base_config(args)
        evals_s = preset.eval_marks * loop["eval_s"]
        share = evals_s / (preset.budget_examples / speed + evals_s)
        row("b", "seconds per evaluation", f"{loop['eval_s']:.2f}")
        row(
            "b",
            f"evaluation's share of a default-length trial ({preset.steps} steps, "
            f"{preset.eval_marks} evaluations)",
            f"{100 * share:.1f}%",
        )
    if "c" in args.parts:
        shared = sharing(args)
        wall_1, loop_1 = shared["wall_1"], shared["loop_1"]
        wall_n, loop_n = shared["wall_n"], shared["loop_n"]
        alone = f"1 trial alone (batch {shared['batch']}, {shared['how']})"
        row("c", f"{alone}, examples/s, wall / loop", f"{wall_1:,.0f} / {loop_1:,.0f}")
        count = shared["count"]
        together = f"{count} trials at once, aggregate examples/s, wall / loop"
        row("c", together, f"{wall_n:,.0f} / {loop_n:,.0f}")
        row("c", f"{count} against 1, counting wall time", f"{wall_n / wall_1:.2f}×")
        row("c", f"{count} against 1, counting the training loops", f"{loop_n / loop_1:.2f}×")
    if "d" in args.parts:
        rows = losses(args)
        dense = {r["n"]: r for r in rows if r["impl"] == "dense"}
        for r in rows:
            d = dense[r["n"]]
            if r is d:
                continue
            what = (
                f"{r['impl']} at B = {r['n'] // 2}, time and peak × dense "
                f"({r['seconds'] * 1e3:.1f} ms, {r['peak_mib']:.0f} MiB)"
            )
            peak = r["peak_mib"] / max(d["peak_mib"], 1e-9)
            row("d", what, f"{r['seconds'] / d['seconds']:.2f} / {peak:.3f}")
    if "e" in args.parts:
        fashion_rows(args, row)
    print("\n".join(lines))
    print(f"total {time.perf_counter() - t_start:.0f} s")


def fashion_rows(args: argparse.Namespace, row) -> None:
    """(e): a Fashion-MNIST trial's loop speed and evaluation time, or why there is none."""
    if not fashion_present(args.fashion_root):
        row("e", f"Fashion-MNIST: not measured, no IDX files in {args.fashion_root}", "—")
        return
    loop = trial_loop(args, fashion_config)
    batch = fashion_config(args).batch_size
    what = f"Fashion-MNIST trial (small_cnn, batch {batch}), examples/s / seconds per evaluation"
    row("e", what, f"{loop['examples_per_s']:,.0f} / {loop['eval_s']:.2f}")


if __name__ == "__main__":
    main()
