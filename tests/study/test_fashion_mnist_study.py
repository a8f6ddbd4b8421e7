"""The shipped real-image study (search_spaces/fashion_mnist_tau_batch.yaml) end to end in its
smoke mode, on Debian's Fashion-MNIST files (scripts/setup_data.sh installs them), with real Ray
Tune and a real MLflow store: compute-matched trials, the baselines on the parent, and a report
that places the best point against them."""

from __future__ import annotations

import json

import pytest
from studykit import child_runs, parent_runs

from study.runner import run_study
from trainables import idx
from trainables.config import FASHION_MNIST_ROOT


@pytest.mark.slow
def test_the_shipped_fashion_mnist_study_runs_in_smoke_mode(workdir, shared_ray):
    from pathlib import Path

    root = Path(FASHION_MNIST_ROOT)
    absent = [n for n in idx.NAMES if idx.find(root, n) is None]
    assert not absent, f"{root} lacks {absent}: run bash scripts/setup_data.sh"
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    outcome = run_study("fashion_mnist_tau_batch", smoke=True, tracking_uri=uri,
                        storage=workdir / "studies", quiet=True, figures=False,
                        max_concurrent=1)  # fmt: skip
    name = "fashion-mnist-tau-batch-recipe-smoke"
    assert outcome.ok and outcome.counts == {"FINISHED": 4}
    children = child_runs(uri, name)
    assert {r.data.params["dataset"] for r in children} == {"fashion_mnist"}
    assert {r.data.params["image_size"] for r in children} == {"14"}
    # the recipe the recipe study chose (search_spaces/fashion_mnist_recipe.yaml)
    assert {r.data.params["cnn_grid"] for r in children} == {"3"}
    assert {r.data.params["crop_area_min"] for r in children} == {"0.6"}
    seen = {r.data.metrics["trial/examples_seen"] for r in children}
    assert len(seen) == 1  # compute-matched
    (parent,) = parent_runs(uri, name)
    raw = parent.data.metrics["baseline/raw/probe/knn_top1_h"]
    random_init = parent.data.metrics["baseline/random_init/probe/knn_top1_h"]
    # the raw 14 × 14 pixels are a strong reference on Fashion-MNIST; an untrained CNN is weaker
    assert 0.3 < random_init < raw < 0.95
    report = workdir / "studies" / name / "report" / "report.json"
    summary = json.loads(report.read_text())
    assert summary["baselines"]["raw"]["about"].startswith("the (1, 14, 14) input flattened to 196")
    assert "the raw input (" in summary["headline"]["against_baselines"]
