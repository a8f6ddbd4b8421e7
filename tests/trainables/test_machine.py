"""What this process may use of its machine (trainables/machine.py): the cgroup files read as
the kernel writes them (hand-written v2 ``cpu.max`` / ``memory.max`` and v1 ``cpu.cfs_*`` /
``memory.limit_in_bytes`` in a folder laid out as ``/sys/fs/cgroup``), the floor of a quota, and
the affinity mask of a real process started under ``taskset``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainables.machine import (
    cgroup_cpus,
    cgroup_memory,
    cpus_allowed,
    parse_size,
    shown_size,
)

REPO = Path(__file__).resolve().parents[2]


def hierarchy(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup mount at ``tmp_path/cgroup`` holding ``files`` (path: text) and a
    ``/proc/self/cgroup`` saying ``membership``."""
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    (tmp_path / "self-cgroup").write_text(membership)
    return root, tmp_path / "self-cgroup"


V2 = "0::/job/step\n"
V1 = "4:memory:/job/step\n3:cpu,cpuacct:/job/step\n"


@pytest.mark.parametrize(("membership", "files", "cpus"), [
    (V2, {"job/step/cpu.max": "max 100000"}, None),              # v2, no quota
    (V2, {"job/step/cpu.max": "150000 100000"}, 1.5),            # v2, one and a half CPUs
    (V2, {"job/step/cpu.max": "max 100000",                      # the folder above is tighter
          "job/cpu.max": "50000 100000"}, 0.5),
    (V1, {"cpu,cpuacct/job/step/cpu.cfs_quota_us": "-1",         # v1, no quota
          "cpu,cpuacct/job/step/cpu.cfs_period_us": "100000"}, None),
    (V1, {"cpu,cpuacct/job/step/cpu.cfs_quota_us": "250000",     # v1, two and a half
          "cpu,cpuacct/job/step/cpu.cfs_period_us": "100000"}, 2.5),
    # a container: /proc/self/cgroup names the host's path, its own cgroup is the mount's root
    ("0::/docker/abc\n", {"cpu.max": "200000 100000"}, 2.0),
    ("3:cpu:/docker/abc\n", {"cpu/cpu.cfs_quota_us": "100000",
                             "cpu/cpu.cfs_period_us": "100000"}, 1.0),
    (V2, {}, None),                                              # no files at all
])  # fmt: skip
def test_the_cgroup_cpu_quota_is_read_from_both_versions_tightest_first(
    tmp_path, membership, files, cpus
):
    root, self_cgroup = hierarchy(tmp_path, membership, files)
    assert cgroup_cpus(root, self_cgroup) == cpus


@pytest.mark.parametrize(("membership", "files", "limit"), [
    (V2, {"job/step/memory.max": "max"}, None),
    (V2, {"job/step/memory.max": "2147483648"}, 2**31),
    (V2, {"job/step/memory.max": "max", "job/memory.max": "1073741824"}, 2**30),
    (V1, {"memory/job/step/memory.limit_in_bytes": "9223372036854771712"}, None),  # v1's none
    (V1, {"memory/job/step/memory.limit_in_bytes": "4294967296"}, 2**32),
])  # fmt: skip
def test_the_cgroup_memory_limit_is_read_from_both_versions(tmp_path, membership, files, limit):
    root, self_cgroup = hierarchy(tmp_path, membership, files)
    assert cgroup_memory(root, self_cgroup) == limit


@pytest.mark.parametrize(("affinity", "quota", "cpus"), [
    (2, None, 2),    # no quota: the affinity mask
    (2, 1.5, 1),     # a quota of 1.5 CPUs plans on 1 (floored)
    (4, 0.5, 1),     # under one CPU: still one
    (4, 2.0, 2),     # the quota is the smaller
    (1, 8.0, 1),     # the mask is the smaller
])  # fmt: skip
def test_cpus_are_the_mask_capped_by_the_quota_floored_but_at_least_one(affinity, quota, cpus):
    assert cpus_allowed(affinity, quota) == cpus


@pytest.mark.skipif(shutil.which("taskset") is None or (os.cpu_count() or 1) < 2,
                    reason="needs taskset and a machine of 2 CPUs or more")  # fmt: skip
def test_a_process_started_under_taskset_counts_the_one_cpu_it_may_use():
    """DataBiosphere/toil#4260's reproduction: `taskset -c 1 python3 -c '...cpu_count()'`
    printed the machine's 64; here it is the one CPU of the mask, and the reason says so."""
    code = ("import os; from trainables.machine import usable_cpus, cpus_why; "
            "print(os.cpu_count(), usable_cpus()); print(cpus_why())")  # fmt: skip
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    counts, why = done.stdout.splitlines()
    machine, usable = map(int, counts.split())
    assert machine >= 2 and usable == 1  # os.cpu_count() still says the machine's
    assert why.startswith("this process may use 1 CPU: its CPU affinity allows 1 of the "
                          f"machine's {machine}")  # fmt: skip


@pytest.mark.parametrize(("written", "size"), [
    ("2GiB", 2 * 2**30), ("512MB", 512 * 10**6), ("1.5 GB", 1_500_000_000),
    ("64 mib", 64 * 2**20), (1024, 1024), ("4096", 4096), ("1.1KiB", 1126),
])  # fmt: skip
def test_a_size_is_read_as_people_write_it(written, size):
    assert parse_size(written) == size


@pytest.mark.parametrize("written", ["lots", "2 GiBs", "1.5", "GiB", True, 2.5, "-1GB"])
def test_a_size_that_is_no_size_is_refused_saying_what_a_size_is(written):
    with pytest.raises(ValueError, match="a size is"):
        parse_size(written)


def test_a_size_is_shown_in_the_largest_binary_unit():
    assert shown_size(2 * 2**30) == "2 GiB"
    assert shown_size(512 * 10**6) == "488 MiB"
    assert shown_size(100) == "100 B"
