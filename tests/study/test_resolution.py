"""What a held-out set of n items can resolve, said by the commands that plan: ``study power``
and ``study plan`` floor every detectable size at one held-out item, and an effect smaller than
one item is refused to the replicates and sent to ``heldout_size`` (a real embedded store,
planted results: tests/kits/recordkit.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from recordkit import record_study

from search_spaces.spec import SPEC_DIR, load_spec

STUDY = str(Path(sys.executable).with_name("study"))


def precise(u, v, replicate, i):
    """Seeds and points almost alike: this error alone would detect a tenth of a point."""
    noise = (0.0002, -0.0002, 0.0001, -0.0001)[i % 4]
    return {"probe/knn_top1_h": 0.95 - 0.0004 * u + noise, "z/align": 0.2 + 0.1 * u + noise,
            "z/uniform": -3.4 + 0.1 * v - noise}  # fmt: skip


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("resolution")
    data = yaml.safe_load((SPEC_DIR / "default.yaml").read_text()) | {"study": "fine"}
    file = folder / "fine.yaml"
    file.write_text(yaml.safe_dump(data, sort_keys=False))
    uri = record_study(folder, "fine", spec=load_spec(file), truth=precise, heldout_items=360)
    return folder, file, uri


def _run(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([STUDY, *argv], cwd=folder, capture_output=True, text=True, timeout=120)


def test_power_below_one_item_asks_for_held_out_items_not_replicates(recorded):
    folder, _, uri = recorded
    done = _run(folder, "power", "fine", "--metric", "probe/knn_top1_h", "--effect", "0.1",
                "--tracking-uri", uri)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "resolution: 360 held-out items, one item = 0.28 points" in done.stdout
    said = ("0.1 points is less than one held-out item of 360: heldout_size limits it, not the "
            "replicates; for a difference that small to register as one item, score on at least "
            "1,000 held-out items")
    assert said in done.stdout
    assert "replicates per point (detects" not in done.stdout


def test_power_never_promises_a_size_below_one_item(recorded):
    folder, _, uri = recorded
    done = _run(folder, "power", "fine", "--metric", "probe/knn_top1_h", "--effect", "0.5",
                "--tracking-uri", uri)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines()[2:]:
        now = line.split("detectable now ")[1].split(";")[0]
        assert float(now.split()[0]) >= 0.28, line


def test_plan_floors_the_detectable_sizes_at_one_item(recorded):
    folder, file, uri = recorded
    done = _run(folder, "plan", str(file), "--tracking-uri", uri)
    assert done.returncode == 0, done.stderr
    assert "accuracies count 360 held-out items: one item is 0.28 points" in done.stdout
    line = next(x for x in done.stdout.splitlines() if x.strip().startswith("probe/knn_top1_h:"))
    assert "0.28 points (one held-out item)" in line
