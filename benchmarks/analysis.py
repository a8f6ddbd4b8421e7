"""Analysis at scale: every fit, figure and the report for a 1,000-trial table, and loading
1,000 runs from the embedded MLflow store.

    .venv/bin/python benchmarks/analysis.py            # 1,000 trials (targets: ≤ 10 s, ≤ 5 s)
    .venv/bin/python benchmarks/analysis.py --smoke    # 48 trials, 2 evaluations each

The table is synthetic but shaped like a real export (temperature × batch size × augmentation,
every design-doc metric). The store is a real SQLite MLflow store written through
``study.record.StudyRecord`` exactly as a study writes it: a parent run, one child run per trial
with the whole TrialConfig as params, four evaluations of every metric, then the summary.
Only the reading is timed. ``--smoke`` records 48 trials of two evaluations: every point of the
40-point grid once and 8 of them twice, few, but every fit still as the full run has it (each
factor at all its levels for the second-order surface, replicated points for pure error), and
more trials than the trajectories figure draws one by one (40), as the full run has.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# This file is named analysis.py; keep its folder off the path so `analysis` is the package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
from search_spaces.designs import DesignTable, TrialPlan  # noqa: E402
from search_spaces.spec import parse_spec  # noqa: E402
from study.mlflow_views import start_described_parent  # noqa: E402
from study.record import StudyRecord  # noqa: E402
from trainables.config import TrialConfig  # noqa: E402

METRICS = (
    "train/loss", "z/align", "z/uniform", "h/align", "h/uniform", "z/effective_rank",
    "h/effective_rank", "z/dim_std_min", "z/dim_std_mean", "sim/pos_mean", "sim/neg_mean",
    "sim/neg_q99", "sim/false_negative_rate", "probe/knn_top1_h", "probe/knn_top1_z",
    "probe/linear_top1_h", "probe/linear_top1_z", "loss/candidates",
)  # fmt: skip


def synthetic_plans(n: int, seed: int = 0) -> list[tuple[TrialPlan, dict[str, float]]]:
    """n trials on a 5 × 4 × 2 grid with replicates, and a smooth truth plus noise."""
    rng = np.random.default_rng(seed)
    taus, batches, augs = [0.05, 0.1, 0.2, 0.4, 0.8], [64, 128, 256, 512], ["crop", "crop+noise"]
    grid = [(t, b, a) for t in taus for b in batches for a in augs]
    plans = []
    for i in range(n):
        tau, batch, aug = grid[i % len(grid)]
        point, replicate = i % len(grid), i // len(grid)
        config = TrialConfig(temperature=tau, batch_size=batch, augmentation=aug,
                             budget_examples=61440, seed=replicate)  # fmt: skip
        u, v = np.log(tau / 0.2), np.log(batch / 181)
        knn = 0.95 - 0.02 * (u - 0.3) ** 2 - 0.01 * v**2 - (0.01 if aug == "crop" else 0)
        values = {m: float(rng.normal(0.5, 0.1)) for m in METRICS}
        values |= {"probe/knn_top1_h": knn + rng.normal(0, 0.005),
                   "z/align": 0.3 + 0.1 * u + rng.normal(0, 0.01),
                   "z/uniform": -3.0 - 0.3 * u + rng.normal(0, 0.02),
                   "loss/candidates": 2.0 * batch - 2}  # fmt: skip
        factors = {"temperature": tau, "batch_size": batch, "augmentation": aug}
        plans.append((TrialPlan(f"p{point:03d}", replicate, replicate, factors, config), values))
    return plans


def build_store(folder: Path, plans, evaluations: int = 4) -> str:
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    spec = parse_spec({"study": "bench", "trial": {"budget_examples": 61440},
                       "factors": {"temperature": {"levels": [0.1]},
                                   "batch_size": {"levels": [64]},
                                   "augmentation": {"levels": ["crop"]}}})  # fmt: skip
    record = StudyRecord(uri, "bench", folder / "artifacts")
    parent = start_described_parent(record, spec, DesignTable(spec, ()), "")
    record_finished(record, parent, spec, plans, evaluations)
    return uri


def record_finished(record: StudyRecord, parent: str, spec, plans, evaluations: int = 4) -> None:
    """Each (plan, values) of ``plans`` a FINISHED child run of ``parent``, as a study records
    it: ``evaluations`` evaluations of ``values`` (four unless told), then the trial's summary."""
    existing: dict = {}
    for plan, values in plans:
        run_id = record.ensure_trial_run(plan, parent, spec.sha, existing)
        for k in range(1, evaluations + 1):
            step = plan.config.examples_seen * k // evaluations
            record.log_evaluation(run_id, values | {"train/examples_seen": step}, step)
        record.finish_trial(run_id, {"status": "finished", "wall_s": 10.0,
                                     "examples_seen": plan.config.examples_seen,
                                     "steps": plan.config.steps})  # fmt: skip


def main() -> None:
    # here, not at the top: benchmarks/commands.py loads this file for its store writer only
    from analysis.reading.load import load_history, load_study
    from analysis.report.page import write_report
    from analysis.study_analysis import analyse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="48 trials, 2 evaluations each")
    args = parser.parse_args()
    n = 48 if args.smoke else 1000
    plans = synthetic_plans(n)
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        uri = build_store(folder, plans, evaluations=2 if args.smoke else 4)
        built = time.perf_counter() - t0

        t0 = time.perf_counter()
        df = load_study("bench", uri)
        loaded = time.perf_counter() - t0
        t0 = time.perf_counter()
        history = load_history("bench", uri, ("z/align", "z/uniform", "probe/knn_top1_h"))
        history_s = time.perf_counter() - t0
        df.attrs["factors"] = ["temperature", "batch_size", "augmentation"]
        df.attrs["scales"] = {"temperature": "log", "batch_size": "log"}

        t0 = time.perf_counter()
        analysis = analyse(df)
        fitted = time.perf_counter() - t0
        t0 = time.perf_counter()
        written = write_report(analysis, folder / "report", history)
        reported = time.perf_counter() - t0
    figures = sum(1 for k in written if k.startswith("figure:"))
    print(f"{n} trials ({len(history)} evaluations); store written in {built:.1f} s (not timed)")
    print("| step | seconds | target |")
    print("|---|---:|---:|")
    print(f"| load_study ({n} runs from SQLite MLflow) | {loaded:.2f} | ≤ 5 |")
    print(f"| load_history (3 metrics) | {history_s:.2f} | |")
    print(f"| fit {len(analysis.fits)} response surfaces + frontier | {fitted:.2f} | |")
    print(f"| {figures} figures (PNG + SVG), evidence card, report.html | {reported:.2f} | |")
    print(f"| fits, plots and report together | {fitted + reported:.2f} | ≤ 10 |")


if __name__ == "__main__":
    main()
