"""Where a trial's time goes: examples/s and the shares of training steps, evaluation, data.

    .venv/bin/python benchmarks/trial.py                 # the default digits trial on CPU
    .venv/bin/python benchmarks/trial.py --preset toy_seed002 --threads 1
    .venv/bin/python benchmarks/trial.py --smoke         # seconds

Runs the trial in this process without Ray or MLflow, through ``run_trial``, and reads the
trial's own timers (``time/*``): training steps (forward, loss, backward, optimiser), evaluation
(held-out diagnostics and both probes on both spaces), data (index stream and two-view
augmentation), checkpointing; the rest of wall time is setup (data load, model build).
"""

from __future__ import annotations

import argparse

import torch

from trainables.__main__ import load_config_file, smoke
from trainables.config import TrialConfig
from trainables.train import run_trial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="digits")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = TrialConfig(**load_config_file(args.preset) | {"device": "cpu"})
    if args.smoke:
        config = smoke(config)
    result = run_trial(config)
    wall = result["wall_s"]
    parts = {k.removeprefix("time/"): v for k, v in result.items() if k.startswith("time/")}
    parts["setup and other"] = wall - sum(parts.values())
    print(
        f"preset {args.preset}: {config.steps} steps × batch {config.batch_size} = "
        f"{result['examples_seen']} examples, {config.eval_marks + config.eval_at_start} "
        f"evaluations, {args.threads} CPU threads, status {result['status']}"
    )
    print(
        f"wall {wall:.2f} s, {result['examples_seen'] / wall:.0f} examples/s end to end, "
        f"{result['examples_seen'] / parts['train_s']:.0f} examples/s in training steps"
    )
    print("| part | seconds | share of wall |")
    print("|---|---:|---:|")
    for name, seconds in parts.items():
        print(f"| {name} | {seconds:.2f} | {100 * seconds / wall:.1f}% |")
    print(
        f"knn top-1 (h) {result['probe/knn_top1_h']:.3f}, linear top-1 (h) "
        f"{result.get('probe/linear_top1_h', float('nan')):.3f}"
    )


if __name__ == "__main__":
    main()
