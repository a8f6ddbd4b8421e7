"""The default study's wall time at concurrency 2 against sequential, per-trial overhead, and
MLflow logging's share of trial time.

    .venv/bin/python benchmarks/study.py            # the default study, twice (a few minutes)
    .venv/bin/python benchmarks/study.py --smoke    # its smoke variant (under a minute)

Each run uses a fresh folder (a new embedded SQLite store and storage), so nothing is resumed.
Trial time is the sum of the trials' own wall clocks (``trial/wall_s``); overhead is the study's
wall time minus what the trials themselves took, per slot; logging time is what the driver spent
writing metrics, tags and statuses to MLflow.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

# This file is named study.py; keep its folder off the path so `study` is the package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
from study.runner import run_study  # noqa: E402


def one_run(concurrency: int, smoke: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-study-") as tmp:
        if "RAY_TMPDIR" not in os.environ:
            os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rb", dir="/tmp")
        outcome = run_study(
            None, tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}", storage=Path(tmp) / "s",
            max_concurrent=concurrency, smoke=smoke, quiet=True,
        )  # fmt: skip
    trials = outcome.launched
    return {
        "concurrency": concurrency,
        "trials": trials,
        "wall_s": outcome.wall_s,
        "trial_s": outcome.trial_s,
        "logging_s": outcome.logging_s,
        "overhead_per_trial_s": (outcome.wall_s * concurrency - outcome.trial_s) / trials,
        "logging_share": outcome.logging_s / outcome.trial_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    rows = [one_run(1, args.smoke), one_run(2, args.smoke)]
    name = "default study (smoke)" if args.smoke else "default study"
    print(f"{name}, {rows[0]['trials']} trials, {os.cpu_count()} CPU cores")
    print(
        "| concurrency | wall s | Σ trial wall s | overhead per trial s | MLflow logging s "
        "| logging share of trial time |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['concurrency']} | {r['wall_s']:.1f} | {r['trial_s']:.1f} "
            f"| {r['overhead_per_trial_s']:.2f} | {r['logging_s']:.2f} "
            f"| {100 * r['logging_share']:.2f}% |"
        )
    print(f"speed-up at concurrency 2: {rows[0]['wall_s'] / rows[1]['wall_s']:.2f}×")


if __name__ == "__main__":
    main()
