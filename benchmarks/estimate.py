"""``study plan --estimate`` against the measured wall time of the same study, on this machine:

    .venv/bin/python benchmarks/estimate.py                      # the default study
    .venv/bin/python benchmarks/estimate.py search_spaces/fashion_mnist_tau_batch.yaml
    .venv/bin/python benchmarks/estimate.py --smoke              # the default study's smoke

In a scratch folder: the estimate (its own seconds too), then ``study run`` of the same file,
timed as a whole process, and the ratio measured / estimated (the aim: within 25%, with the
estimate under 30 s). Run it on a machine doing nothing else: the probe measures the machine as
it is when it runs, and the study meets the machine as it is later.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STUDY = str(Path(sys.executable).with_name("study"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study_file", nargs="?", default="default")
    parser.add_argument("--smoke", action="store_true", help="the study's smoke variant")
    args = parser.parse_args()
    spec = (
        str(Path(args.study_file).resolve()) if Path(args.study_file).exists() else args.study_file
    )
    smoke = ["--smoke"] if args.smoke else []
    with tempfile.TemporaryDirectory(prefix="bench-estimate-") as scratch:
        t0 = time.perf_counter()
        planned = subprocess.run(
            [STUDY, "plan", spec, *smoke, "--estimate", "--json"],
            cwd=scratch, capture_output=True, text=True, check=True,
        )  # fmt: skip
        plan_s = time.perf_counter() - t0
        estimate = json.loads(planned.stdout)["estimate"]["wall_s"]
        t0 = time.perf_counter()
        subprocess.run([STUDY, "run", spec, *smoke], cwd=scratch, capture_output=True, check=True)
        measured = time.perf_counter() - t0
    print(
        f"{args.study_file}{' (smoke)' if args.smoke else ''}: estimated {estimate:.0f} s "
        f"(in {plan_s:.1f} s), measured {measured:.0f} s, measured / estimated "
        f"{measured / estimate:.2f}"
    )


if __name__ == "__main__":
    main()
