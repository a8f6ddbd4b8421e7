"""Where a study's time goes besides its trials: per-trial overhead, a study's fixed cost, trial
efficiency, the speed-up at concurrency 2, and MLflow logging's share of trial time.

    .venv/bin/python benchmarks/study.py            # the default study at concurrency 1 and 2
    .venv/bin/python benchmarks/study.py --toy      # toy studies of 3 and 9 short trials
    .venv/bin/python benchmarks/study.py --smoke    # both tables on toy studies (2 and 4 trials
                                                    # at concurrency 1, 2 at 2), reports without
                                                    # figures: under a minute
    .venv/bin/python benchmarks/study.py --toy --repeat 3   # each toy study 3 times

Each run uses a fresh folder (a new embedded SQLite store and storage), so nothing is resumed.
Trial time is the sum of the trials' own wall clocks (``trial/wall_s``, data load and model
build included). Outside time is the study's wall time × concurrency minus trial time; with
``--toy`` a line through (trials, outside time) of the 3- and 9-trial studies gives the per-trial
overhead (slope) and the study's fixed cost (intercept; Ray start and stop, the MLflow store, the
export and the report). Trial efficiency is trial time / (study wall × concurrency). Logging
time is what the driver spent writing metrics, tags and statuses to MLflow. The tail is the
time from the last trial's end to the study's: the export, the report and the parent's summary
(Ray stops beside them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

# This file is named study.py; keep its folder off the path so `study` is the package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
from study.runner import run_study  # noqa: E402
from trainables.machine import usable_cpus  # noqa: E402

TOY_SIZES = (3, 9)


def toy_spec(trials: int) -> dict:
    """A study of ``trials`` short trials on the toy generator: 3 temperatures × replicates (2
    temperatures where ``trials`` is not a multiple of 3)."""
    levels = [0.1, 0.3, 1.0] if trials % 3 == 0 else [0.1, 0.3]
    assert trials % len(levels) == 0, f"{trials} toy trials: a multiple of 2 or 3"
    return {
        "study": f"bench-toy-{trials}",
        "description": f"{trials} short toy trials (benchmarks/study.py --toy)",
        "trial": {
            "dataset": "toy", "toy_train_size": 512, "heldout_size": 200,
            "probe_train_size": 200, "encoder": "mlp", "mlp_hidden": [32], "feature_dim": 8,
            "projection": "none", "augmentation": "noise", "batch_size": 64,
            "budget_examples": 640, "eval_marks": 1, "linear_probe_iters": 20,
        },
        "factors": {"temperature": {"levels": levels, "scale": "log"}},
        "design": {"kind": "full_factorial", "replicates": trials // len(levels)},
        "resources": {"cpu": 1, "gpu": 0},
    }  # fmt: skip


def short_ray_tmpdir() -> None:
    """A short RAY_TMPDIR unless one is set (Ray's socket paths are limited to ~107 bytes)."""
    if "RAY_TMPDIR" not in os.environ:
        os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rb", dir="/tmp")


def one_run(concurrency: int, spec: dict | None = None, figures: bool = True) -> dict[str, float]:
    import yaml

    short_ray_tmpdir()
    with tempfile.TemporaryDirectory(prefix="bench-study-") as tmp:
        spec_path = None
        if spec is not None:
            spec_path = Path(tmp) / "study.yaml"
            spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
        outcome = run_study(
            spec_path, tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}",
            storage=Path(tmp) / "s", max_concurrent=concurrency, quiet=True, figures=figures,
        )  # fmt: skip
    trials = outcome.launched
    outside = outcome.wall_s * concurrency - outcome.trial_s
    return {
        "concurrency": concurrency,
        "trials": trials,
        "wall_s": outcome.wall_s,
        "trial_s": outcome.trial_s,
        "outside_s": outside,
        "logging_s": outcome.logging_s,
        "tail_s": outcome.tail_s,
        "overhead_per_trial_s": outside / trials,
        "efficiency": outcome.trial_s / (outcome.wall_s * concurrency),
        "logging_share": outcome.logging_s / outcome.trial_s,
    }


HEADER = (
    "| study | trials | concurrency | wall s | Σ trial wall s | outside s | outside per trial s "
    "| trial efficiency | MLflow logging s | logging share of trial time | tail s |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def row(name: str, r: dict[str, float]) -> str:
    return (
        f"| {name} | {r['trials']} | {r['concurrency']} | {r['wall_s']:.1f} | {r['trial_s']:.1f} "
        f"| {r['outside_s']:.1f} | {r['overhead_per_trial_s']:.2f} | {r['efficiency']:.2f} "
        f"| {r['logging_s']:.2f} | {100 * r['logging_share']:.2f}% | {r['tail_s']:.1f} |"
    )


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of y on x."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def toy(
    repeat: int, sizes: tuple[int, int] = TOY_SIZES, figures: bool = True
) -> dict[int, dict[str, float]]:
    """The toy studies of ``sizes`` trials at concurrency 1, ``repeat`` times each; the line
    through their outside times. Returns each size's last run."""
    print(f"toy studies of {' and '.join(map(str, sizes))} trials, concurrency 1, "
          f"{usable_cpus()} CPU cores")  # fmt: skip
    print(HEADER)
    points, last = [], {}
    for _ in range(repeat):
        for n in sizes:  # interleaved, so drifting load hits both sizes alike
            last[n] = r = one_run(1, spec=toy_spec(n), figures=figures)
            points.append((r["trials"], r["outside_s"]))
            print(row(f"toy-{n}", r), flush=True)
    slope, intercept = fit_line(points)
    print(f"per-trial overhead (slope of outside time on trials): {slope:.2f} s")
    print(f"fixed cost per study (intercept): {intercept:.1f} s")
    return last


def concurrency(name: str, rows: list[dict[str, float]]) -> None:
    """One study at concurrency 1 and 2: trial efficiency and the speed-up."""
    print(f"{name}, {usable_cpus()} CPU cores")
    print(HEADER)
    for r in rows:
        print(row(name, r))
    print(f"trial efficiency at concurrency 1: {rows[0]['efficiency']:.2f}")
    print(f"speed-up at concurrency 2: {rows[0]['wall_s'] / rows[1]['wall_s']:.2f}×")


def smoke() -> None:
    """Every table of this script, on the smallest studies that fill them, their reports
    written without figures (``study run --no-figures``): a smoke run checks that every table
    is filled, and its figures are no one's. The three studies share one Ray, started here
    (each study finds it connected, as on a cluster it joined): a Ray start is a study's fixed
    cost, which ``--toy`` measures, and the smoke run's numbers mean nothing."""
    import ray

    from study.local_ray import start_ray

    short_ray_tmpdir()
    start_ray(None)
    try:
        single = toy(1, sizes=(2, 4), figures=False)[2]
        concurrency("toy-2", [single, one_run(2, spec=toy_spec(2), figures=False)])
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="both tables on toy studies")
    parser.add_argument("--toy", action="store_true", help="toy studies of 3 and 9 short trials")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each toy study (--toy)")
    args = parser.parse_args()
    if args.smoke:
        smoke()
    elif args.toy:
        toy(args.repeat)
    else:
        concurrency("default", [one_run(1), one_run(2)])


if __name__ == "__main__":
    main()
