"""Where a trial's time goes: examples/s and the shares of training steps, evaluation, data.

    .venv/bin/python benchmarks/trial.py                 # the default digits trial on CPU
    .venv/bin/python benchmarks/trial.py --preset toy_seed002 --threads 1
    .venv/bin/python benchmarks/trial.py --smoke         # seconds
    .venv/bin/python benchmarks/trial.py --preset search_spaces/default.yaml --threads 1 \\
        --set temperature=0.1 --set batch_size=256 --repeat 3   # the default study's trial
    .venv/bin/python benchmarks/trial.py --preset search_spaces/default.yaml --threads 1 \\
        --layout both --repeat 3     # channels_last against the contiguous layout, alternated

Runs the trial in this process without Ray or MLflow, through ``run_trial``, and reads the
trial's own timers (``time/*``): training steps (forward, loss, backward, optimiser), evaluation
(held-out diagnostics and both probes on both spaces), data (index stream and two-view
augmentation), checkpointing, and the evidence measured once at the final evaluation
(``evidence_s``: conditional geometry, subgroup probes, shift tests, source return); the rest of
wall time is setup (data load, model build). ``--preset`` takes a preset name, a trial YAML or
a study YAML (its ``trial:`` block; set its factors with ``--set``). The last line gives the
evidence's seconds and share of wall time (the median over ``--repeat`` runs with more than one).
``--layout contiguous`` runs a convolutional encoder in the contiguous layout instead of the
trials' channels_last; ``--layout both`` alternates the two and prints the median seconds per
training step of each.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import trainables.evaluation
import trainables.train
from trainables.__main__ import load_config_file, parse_overrides, smoke
from trainables.config import TrialConfig
from trainables.train import run_trial

CHANNELS_LAST = trainables.train.uses_channels_last
# the modules that read it (trainables.device holds it): the loop's and the evaluation's
LAYOUT_READERS = (trainables.train, trainables.evaluation)


def trial_config(preset: str, overrides: list[str]) -> TrialConfig:
    """A preset, trial file or study file's ``trial:`` block, with ``key=value`` overrides."""
    mapping = load_config_file(preset)
    if isinstance(mapping.get("trial"), dict):  # a study file
        mapping = mapping["trial"]
    return TrialConfig(**mapping | parse_overrides(overrides) | {"device": "cpu"})


def report(config: TrialConfig, result: dict, threads: int, name: str) -> None:
    wall = result["wall_s"]
    parts = {k.removeprefix("time/"): v for k, v in result.items() if k.startswith("time/")}
    parts["setup and other"] = wall - sum(parts.values())
    print(
        f"{name}: {config.steps} steps × batch {config.batch_size} = "
        f"{result['examples_seen']} examples, {config.eval_marks + config.eval_at_start} "
        f"evaluations, {threads} CPU threads, status {result['status']}"
    )
    print(
        f"wall {wall:.2f} s, {result['examples_seen'] / wall:.0f} examples/s end to end, "
        f"{result['examples_seen'] / parts['train_s']:.0f} examples/s in training steps"
    )
    print("| part | seconds | share of wall |")
    print("|---|---:|---:|")
    for part, seconds in parts.items():
        print(f"| {part} | {seconds:.2f} | {100 * seconds / wall:.1f}% |")
    print(
        f"knn top-1 (h) {result['probe/knn_top1_h']:.3f}, linear top-1 (h) "
        f"{result.get('probe/linear_top1_h', float('nan')):.3f}"
    )


def run_in_layout(config: TrialConfig, layout: str) -> dict:
    """The trial, its convolutional encoder in the trials' own layout or the contiguous one."""
    chosen = CHANNELS_LAST if layout == "trial" else (lambda config, device: False)
    for module in LAYOUT_READERS:
        module.uses_channels_last = chosen
    try:
        return run_trial(config)
    finally:
        for module in LAYOUT_READERS:
            module.uses_channels_last = CHANNELS_LAST


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="digits")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--layout", choices=["trial", "contiguous", "both"], default="trial")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = trial_config(args.preset, args.set)
    if args.smoke:
        config = smoke(config)
    layouts = ["trial", "contiguous"] if args.layout == "both" else [args.layout]
    shares, seconds, step_s = [], [], {layout: [] for layout in layouts}
    for _ in range(args.repeat):
        for layout in layouts:
            result = run_in_layout(config, layout)
            report(config, result, args.threads, f"{args.preset} ({layout} layout)")
            seconds.append(result["time/evidence_s"])
            shares.append(result["time/evidence_s"] / result["wall_s"])
            step_s[layout].append(result["time/train_s"] / config.steps)
    if len(layouts) > 1:
        trial, contiguous = (statistics.median(step_s[layout]) for layout in layouts)
        print(
            f"seconds per training step, median of {args.repeat}: trial layout "
            f"(channels_last for a convolutional encoder) {trial:.4f}, contiguous "
            f"{contiguous:.4f}: ratio {trial / contiguous:.2f}"
        )
    print(
        f"evidence: {statistics.median(seconds):.2f} s, {100 * statistics.median(shares):.1f}% "
        f"of wall (median of {args.repeat}; runs: "
        + ", ".join(f"{100 * s:.1f}%" for s in shares)
        + ")"
    )


if __name__ == "__main__":
    main()
