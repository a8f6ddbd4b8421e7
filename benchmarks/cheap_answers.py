"""Two cheap questions against ``import torch``, paired on the same machine:

    .venv/bin/python benchmarks/cheap_answers.py            # 5 pairs each
    .venv/bin/python benchmarks/cheap_answers.py --smoke    # 2 pairs each

1. ``study run`` of a finished study ("nothing to run" and the stored findings): the wall time of
   the whole process, alternated with ``python -c "import torch"`` pair by pair, and the ratio of
   each pair (the aim: at most 2).
2. ``study status NAME`` from the moment ``study run`` of a new study starts: the seconds until
   ``status`` first names it (polling as fast as ``status`` answers), against the same
   ``import torch``; the run is then stopped with SIGINT.

Each in a fresh folder of its own, with a tiny digits study (two trials) run first for 1. The
figures are medians; nothing here is timed inside a test.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
STUDY = str(Path(sys.executable).with_name("study"))
TORCH = [sys.executable, "-c", "import torch"]


def tiny_study(folder: Path, name: str) -> Path:
    data = yaml.safe_load((ROOT / "search_spaces" / "default.yaml").read_text())
    data["study"] = name
    data["trial"] |= {"budget_examples": 1536, "eval_marks": 2, "heldout_size": 120,
                      "probe_train_size": 200, "linear_probe_iters": 10}  # fmt: skip
    data["factors"] = {"temperature": {"levels": [0.1, 0.5], "scale": "log"}}
    data["design"] = {"kind": "full_factorial", "replicates": 1}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def wall(command: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(command, cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - t0


def rerun_pairs(folder: Path, pairs: int) -> list[tuple[float, float]]:
    spec = tiny_study(folder, "bench-finished")
    subprocess.run([STUDY, "run", str(spec), "--no-figures"], cwd=folder, capture_output=True,
                   check=True)  # fmt: skip
    rerun = [STUDY, "run", str(spec), "--no-figures"]
    out = subprocess.run(rerun, cwd=folder, capture_output=True, text=True, check=True).stdout
    assert "nothing to run" in out.splitlines()[0], out[:500]
    return [(wall(rerun, folder), wall(TORCH, folder)) for _ in range(pairs)]


def status_pairs(folder: Path, pairs: int) -> list[tuple[float, float]]:
    found = []
    for i in range(pairs):
        spec = tiny_study(folder, f"bench-starting-{i}")
        t0 = time.perf_counter()
        driver = subprocess.Popen([STUDY, "run", str(spec), "--no-figures"], cwd=folder,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        named = None
        while named is None and time.perf_counter() - t0 < 120:
            said = subprocess.run([STUDY, "status", spec.stem], cwd=folder, capture_output=True)
            if said.returncode == 0:
                named = time.perf_counter() - t0
        driver.send_signal(signal.SIGINT)
        driver.wait(timeout=120)
        found.append((named if named is not None else float("nan"), wall(TORCH, folder)))
    return found


def show(what: str, pairs: list[tuple[float, float]]) -> None:
    ours = statistics.median(a for a, _ in pairs)
    torch_s = statistics.median(b for _, b in pairs)
    ratio = statistics.median(a / b for a, b in pairs)
    print(f"{what}: median {ours:.2f} s; import torch {torch_s:.2f} s; ratio per pair "
          f"{', '.join(f'{a / b:.2f}' for a, b in pairs)} (median {ratio:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2 pairs each")
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    pairs = 2 if args.smoke else args.pairs
    with tempfile.TemporaryDirectory(prefix="bench-cheap-") as scratch:
        folder = Path(scratch)
        show("study run of a finished study", rerun_pairs(folder, pairs))
        show("study status names a starting study after", status_pairs(folder, pairs))


if __name__ == "__main__":
    main()
