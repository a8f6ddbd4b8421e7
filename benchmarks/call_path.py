"""The path from a study file to the launch: which project files ``study run FILE --smoke``
passes through, in order, until Ray Tune's ``Tuner`` is called.

    .venv/bin/python benchmarks/call_path.py                      # the toy phase diagram
    .venv/bin/python benchmarks/call_path.py STUDY_FILE --verbose  # another study, every stay

The command runs as a user types it (``study.cli.main``), in a fresh folder (a new SQLite store
and storage), with ``sys.setprofile`` (``threading.setprofile`` for the driver's record-opening
thread) watching every call and return. Only frames in the project's packages (study/,
trainables/, search_spaces/, analysis/) count, and nothing a module runs while it is imported.
A *stay* is a contiguous run of events whose innermost project frame is in one file; the path is
the sequence of stays. Ray is not started (``ray.init`` and ``ray.shutdown`` do nothing,
``ray.cluster_resources`` is this machine's CPUs, the runtime context names one node) and the
``Tuner`` refuses to be built, which ends the measurement: Tune's own launch is not the
project's path.

Printed per thread: the stays (with ``--verbose``), the number of stays, the distinct files and
the returns (a stay in a file the path had already left before). Then, over every thread until
the launch, how often the study is read and its record and data looked up (:data:`COUNTED`):
the study file opened and parsed (``read_study_text``), the design built (``build_design``),
the experiment looked up (``find_experiment``: every call, finding one or not) and the data
listed (``snapshot``: a bucket's listing taken, not one kept and given again; data on this
machine, and the toy and digits data, are never listed).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
PACKAGES = tuple(str(ROOT / name) + os.sep for name in ("study", "trainables", "search_spaces",
                                                         "analysis"))  # fmt: skip
DEFAULT_STUDY = ROOT / "search_spaces" / "toy_phase_diagram.yaml"


# what is counted until the launch: (file under ROOT, function) -> the words printed
COUNTED = {
    ("search_spaces/study_text.py", "read_study_text"): "the study file opened and parsed",
    ("search_spaces/designs/build.py", "build_design"): "the design built",
    ("analysis/reading/record.py", "find_experiment"): "the experiment looked up",
    ("trainables/remote.py", "snapshot"): "the data listed",
}


class Launched(BaseException):
    """Raised where Ray Tune's Tuner would be built: the end of the measured path."""


def _project(filename: str) -> bool:
    return filename.startswith(PACKAGES)


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import (a module's own code, or what it calls)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _innermost(frame) -> str | None:
    while frame is not None:
        if _project(frame.f_code.co_filename):
            return frame.f_code.co_filename
        frame = frame.f_back
    return None


class Tracer:
    """The stays of every thread traced, in order: per thread, a list of [file, events]."""

    def __init__(self) -> None:
        self.stays: dict[str, list[list]] = {}
        self.on = True
        self.counts = dict.fromkeys(COUNTED.values(), 0)
        self._counted = {(str(ROOT / file), name): words for (file, name), words in COUNTED.items()}

    def __call__(self, frame, event, arg) -> None:
        if not self.on or event not in ("call", "return"):
            return
        name = frame.f_code.co_filename
        if not _project(name):
            return
        if event == "call":
            if frame.f_code.co_name == "<module>" or _importing(frame):
                return
            counted = self._counted.get((name, frame.f_code.co_name))
            if counted is not None:
                self.counts[counted] += 1
            here = name
        else:
            if _importing(frame):
                return
            here = _innermost(frame.f_back)
            if here is None:
                return
        stays = self.stays.setdefault(threading.current_thread().name, [])
        if stays and stays[-1][0] == here:
            stays[-1][1] += 1
        else:
            stays.append([here, 1])


def summary(stays: list[list]) -> tuple[int, int, int]:
    """(stays, distinct files, returns to a file already left)."""
    seen: set[str] = set()
    returns = 0
    for file, _ in stays:
        returns += file in seen
        seen.add(file)
    return len(stays), len(seen), returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", nargs="?", default=str(DEFAULT_STUDY))
    parser.add_argument("--verbose", action="store_true", help="print every stay")
    args = parser.parse_args()

    import ray
    from ray import tune

    tracer = Tracer()

    def refuse(*_, **__):
        tracer.on = False
        sys.setprofile(None)
        threading.setprofile(None)
        raise Launched

    ray.init = lambda *_, **__: None
    ray.is_initialized = lambda: False
    ray.shutdown = lambda *_, **__: None
    from trainables.machine import usable_cpus

    ray.cluster_resources = lambda: {"CPU": float(usable_cpus()), "GPU": 0.0}
    # the driver notes which node its local Ray started on: one node, named here
    ray.get_runtime_context = lambda: SimpleNamespace(get_node_id=lambda: "call-path-node")
    tune.Tuner = refuse

    from study.cli import main as study_main

    with tempfile.TemporaryDirectory(prefix="call-path-") as folder:
        os.chdir(folder)
        argv = ["study", "run", args.study, "--smoke", "--storage", str(Path(folder) / "st"),
                "--tracking-uri", f"sqlite:///{folder}/mlflow.db"]  # fmt: skip
        sys.argv = argv
        threading.setprofile(tracer)
        sys.setprofile(tracer)
        try:
            study_main()
        except (SystemExit, Launched):
            pass
        finally:
            sys.setprofile(None)
            threading.setprofile(None)

    for thread, stays in tracer.stays.items():
        n, files, returns = summary(stays)
        print(f"[{thread}] {n} stays, {files} files, {returns} returns to a file already left")
        order = list(dict.fromkeys(Path(file).relative_to(ROOT).as_posix() for file, _ in stays))
        print("    files, first visit first: " + ", ".join(order))
        if args.verbose:
            for file, events in stays:
                print(f"    {Path(file).relative_to(ROOT)}  ({events} events)")
    print("until the launch, in every thread: " + "; ".join(
        f"{words} {count}" for words, count in tracer.counts.items()))  # fmt: skip


if __name__ == "__main__":
    main()
