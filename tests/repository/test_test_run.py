"""The test run itself: what its workers share is this run's, never the user's or another run's."""

from __future__ import annotations

import os
from pathlib import Path


def test_the_baseline_and_data_caches_belong_to_this_run(tmp_path_factory):
    """Measured baselines and the node's data cache go to folders of this run (shared by its
    pytest-xdist workers), not to ~/.cache and not to the folder that holds every run's (where
    a stale cache would be read)."""
    cache = Path(os.environ["CONTRASTIVE_BASELINE_CACHE"])
    assert cache.name == "baselines" and cache.is_dir()
    assert not cache.is_relative_to(Path.home() / ".cache")
    assert Path(os.environ["CONTRASTIVE_DATA_CACHE"]) == cache.parent / "data"
    # this worker's temporary folder lies in the cache's folder, at most one level down (the
    # worker's own): the cache's folder is this run's, not the one that holds every run's
    below = tmp_path_factory.getbasetemp().relative_to(cache.parent)
    assert len(below.parts) == (1 if os.environ.get("PYTEST_XDIST_WORKER") else 0), below


def test_a_shared_ray_is_connected_and_ray_tmp_stops_it(shared_ray, request):
    """``shared_ray`` leaves this process connected to its Ray (run_study then starts none);
    ``ray_tmp`` disconnects it first, so the test's own studies start their own Ray."""
    import ray

    assert ray.is_initialized()
    assert (Path(shared_ray) / "ray").is_dir()  # its session lives in the run's short folder
    request.getfixturevalue("ray_tmp")
    assert not ray.is_initialized()


def test_an_xdist_worker_computes_on_its_share_of_the_cores():
    """Two workers on two cores: one torch thread each (and OMP_NUM_THREADS for what they
    start), never every core per worker."""
    import pytest
    import torch

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        pytest.skip("one test process: torch keeps its default threads")
    share = max(1, (os.cpu_count() or 1) // workers)
    assert torch.get_num_threads() == share
    assert os.environ["OMP_NUM_THREADS"] == str(share)
