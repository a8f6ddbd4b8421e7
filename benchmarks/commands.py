"""How long the commands that only read or validate take, each run as a user types it.

    .venv/bin/python benchmarks/commands.py            # each command 3 times (target: ≤ 1 s)
    .venv/bin/python benchmarks/commands.py --smoke    # each once, a study of 14 trials

Against a real embedded MLflow store holding one finished synthetic study of 40 trials (written
through ``study.record.StudyRecord`` as a study writes it; see ``benchmarks/analysis.py``), in a
fresh folder: ``study --help``, ``plan`` of the shipped default study, ``list``, ``status``,
``export`` and ``power`` (after the study's report, written as ``study run`` writes it at the
end, so ``power`` answers from the planning basis beside it), and ``power`` before that report
(it fits the surface itself: timed first); and ``augment`` of a finished 2 × 2 factorial written the
same way (its study file beside the store). Each time is the wall time of the whole process
(interpreter start, imports, reading, printing), the median of the repeats. Nothing is timed
inside a test.
``--smoke`` records every third of the 40 trials (14: each factor still at all its levels).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUDY = str(Path(sys.executable).with_name("study"))


def _analysis_benchmark():
    """benchmarks/analysis.py as a module (its name would shadow the analysis package)."""
    spec = importlib.util.spec_from_file_location("bench_analysis", ROOT / "benchmarks/analysis.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FACTORIAL = {
    "study": "factorial", "description": "a finished 2 x 2 (benchmarks/commands.py)",
    "trial": {"budget_examples": 640, "batch_size": 64},
    "factors": {"temperature": {"levels": [0.1, 0.5], "scale": "log"},
                "base_lr": {"levels": [0.01, 0.1], "scale": "log"}},
    "design": {"kind": "full_factorial", "replicates": 2},
}  # fmt: skip


def finished_factorial(folder: Path, uri: str) -> Path:
    """FACTORIAL's study file in ``folder``, and every trial of it FINISHED in ``uri``, recorded
    as ``benchmarks/analysis.py`` records its trials (synthetic numbers): what ``augment`` reads."""
    import yaml

    from search_spaces.designs import build_design
    from search_spaces.spec import parse_spec
    from study.mlflow_views import start_described_parent
    from study.record import StudyRecord

    path = folder / "factorial.yaml"
    path.write_text(yaml.safe_dump(FACTORIAL, sort_keys=False))
    spec = parse_spec(FACTORIAL)
    design = build_design(spec)
    record = StudyRecord(uri, spec.study, folder / "artifacts")
    parent = start_described_parent(record, spec, design, path.read_text())
    plans = [(plan, {"z/align": 0.3 + 0.01 * i}) for i, plan in enumerate(design.trials)]
    _analysis_benchmark().record_finished(record, parent, spec, plans)
    record.finish_parent(parent, ok=True)
    return path


def write_report(uri: str, study: str, folder: Path) -> None:
    """``study``'s report without figures, attached to its parent run, as ``study run`` ends."""
    from study.record import StudyRecord
    from study.reporting import make_report

    record = StudyRecord.existing(uri, study)
    make_report(record, None, folder / f"{study}-report", tracking_uri=uri, figures=False)


def commands(uri: str, folder: Path, factorial: Path) -> dict[str, list[str]]:
    store = ["--tracking-uri", uri]
    return {
        "study --help": ["--help"],
        "study plan search_spaces/default.yaml": ["plan", str(ROOT / "search_spaces/default.yaml")],
        "study list": ["list", *store],
        "study status bench": ["status", "bench", *store],
        "study export bench": ["export", "bench", "--out", str(folder / "x.parquet"), *store],
        "study power bench": ["power", "bench", "--metric", "z/align", "--effect", "0.01", *store],
        "study augment factorial.yaml": [
            "augment", str(factorial), "--out", str(folder / "ccd.yaml"), *store,
        ],
    }  # fmt: skip


def timed(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run([STUDY, *argv], cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="each command once")
    args = parser.parse_args()
    repeats = 1 if args.smoke else 3
    bench = _analysis_benchmark()
    with tempfile.TemporaryDirectory(prefix="bench-commands-") as tmp:
        folder = Path(tmp)
        plans = bench.synthetic_plans(40)
        uri = bench.build_store(folder, plans[::3] if args.smoke else plans)
        factorial = finished_factorial(folder, uri)
        argvs = commands(uri, folder, factorial)
        power = argvs["study power bench"]
        fitting = statistics.median(timed(power, folder) for _ in range(repeats))
        write_report(uri, "bench", folder)  # from here on, power reads the report's basis
        print(f"{repeats} run(s) each, median wall seconds of the whole process")
        print("| command | seconds | target |")
        print("|---|---:|---:|")
        for name, argv in argvs.items():
            seconds = statistics.median(timed(argv, folder) for _ in range(repeats))
            print(f"| {name} | {seconds:.2f} | ≤ 1 |")
        print(f"| study power bench, before its report (it fits) | {fitting:.2f} | — |")


if __name__ == "__main__":
    main()
