"""Data-parallel trials: W = 2 gloo processes on CPU against one process with the same global batch.

One spawn of two processes runs every W = 2 trial of this file (in one process group), so the
process start-up is paid once: negatives ``all`` and ``local``, and a run stopped after its first
checkpoint and resumed. The W = 1 trials run in the test process.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from distkit import spawn_ranks
from pydantic import ValidationError

import trainables.train as train_module
from trainables.config import TrialConfig
from trainables.data import ExampleStream, load_data, view_batches
from trainables.train import CHECKPOINT_FILE, LocalReporter, run_trial

WORLD = 2
BATCH = 32  # the global batch
STEPS = 16
# No BatchNorm (a linear head): SyncBatchNorm, which would let W = 2 normalise over the same 2B
# rows as W = 1, runs on GPUs only, and a CPU trial with sync_bn is refused.
CONFIG = {
    "dataset": "toy", "toy_train_size": 1024, "heldout_size": 120, "probe_train_size": 120,
    "augmentation": "noise", "encoder": "mlp", "mlp_hidden": [32], "feature_dim": 16,
    "projection": "linear", "projection_hidden": 32, "projection_dim": 8, "temperature": 0.2,
    "batch_size": BATCH, "budget_examples": BATCH * STEPS, "optimizer": "adam", "base_lr": 5e-3,
    "eval_marks": 2, "knn_k": 5, "linear_probe_iters": 10, "device": "cpu", "compile": "off",
}  # fmt: skip
# several photos of one item: info_nce with groups (masked), gathered with global group ids
GROUPED = {"toy_photos_per_item": 4, "group_policy": "mask", "budget_examples": BATCH * 6}
COMPARED = ("train/", "z/", "h/", "sim/", "probe/", "loss/")


class Recorded:
    """Per-step losses (what the watch is given) and source indices of the trials run here."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.indices: list[torch.Tensor] = []
        self.first_views: torch.Tensor | None = None


def instrument(monkeypatch_setattr, recorded: Recorded) -> None:
    """Record every step's loss and this worker's indices (and the first step's view 1)."""
    watch_add = train_module.DivergenceWatch.add
    batches = train_module._Trial.batches

    def add(self, loss, step):
        recorded.losses.append(float(loss.detach()))
        watch_add(self, loss, step)

    def batches_recorded(self):
        for step, idx, v1, v2, groups, pool in batches(self):
            recorded.indices.append(idx.clone())
            if recorded.first_views is None:
                recorded.first_views = v1.clone()
            yield step, idx, v1, v2, groups, pool

    monkeypatch_setattr(train_module.DivergenceWatch, "add", add)
    monkeypatch_setattr(train_module._Trial, "batches", batches_recorded)


class StopAfterCheckpointsError(Exception):
    """Stands in for the trial's workers all being killed after a checkpoint."""


def _run_worker(config: dict, root: Path | None, stop_after: int | None = None):
    """One W = 2 trial on this rank: (result, rank 0's history, per-step losses, indices, views)."""
    recorded = Recorded()
    saved: list[tuple[object, str, object]] = []

    def setattr_(owner, name, value):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    instrument(setattr_, recorded)
    if stop_after is not None:
        report = train_module._Trial.evaluate_and_report
        count = [0]

        def stopping(self, checkpoint, final=False):
            report(self, checkpoint, final)
            count[0] += checkpoint
            if count[0] == stop_after:
                raise StopAfterCheckpointsError  # on every rank alike, as a killed trial

        setattr_(train_module._Trial, "evaluate_and_report", stopping)
    # Rank 0's reporter gets the metrics; the other ranks get one too, and an empty report at
    # each of rank 0's reports (Ray Train's report is a barrier every rank must reach).
    reporter = LocalReporter(root if dist.get_rank() == 0 else None, keep=10)
    try:
        result = run_trial(config, reporter)
    except StopAfterCheckpointsError:
        result = None
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
    return {
        "result": result,
        "history": reporter.history,
        "losses": recorded.losses,
        "indices": recorded.indices,
        "first_views": recorded.first_views,
    }


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
        timeout=timedelta(seconds=60),  # a rank left waiting fails the test instead of hanging
    )  # fmt: skip
    out = Path(out_dir)
    try:
        runs = {}
        two = CONFIG | {"workers": WORLD}
        runs["all"] = _run_worker(two, out / "all")
        runs["grouped"] = _run_worker(two | GROUPED, None)
        runs["local_grouped"] = _run_worker(two | GROUPED | {"negatives": "local"}, None)
        runs["local"] = _run_worker(two | {"negatives": "local"}, out / "local")
        runs["stopped"] = _run_worker(two, out / "resumed", stop_after=1)
        runs["resumed"] = _run_worker(two, out / "resumed")
        for label, wrong in (("wrong_world", {"workers": 4}), ("sync_bn_cpu", {"sync_bn": True})):
            try:
                run_trial(two | wrong)
            except ValueError as err:
                runs[label] = str(err)
        torch.save(runs, out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    out = tmp_path_factory.mktemp("data_parallel")
    return spawn_ranks(_worker, out, WORLD), out


@pytest.fixture(scope="module")
def one_worker():
    """The W = 1 trial with the same global batch, its per-step losses and indices."""
    patch = pytest.MonkeyPatch()
    recorded = Recorded()
    instrument(patch.setattr, recorded)
    reporter = LocalReporter()
    try:
        result = run_trial(CONFIG, reporter)
    finally:
        patch.undo()
    return result, reporter.history, recorded


@pytest.fixture(scope="module")
def one_worker_grouped():
    patch = pytest.MonkeyPatch()
    recorded = Recorded()
    instrument(patch.setattr, recorded)
    try:
        result = run_trial(CONFIG | GROUPED)
    finally:
        patch.undo()
    return result, recorded


def _assert_metrics_close(got: dict, want: dict, tol: float) -> None:
    for key, value in want.items():
        if key.startswith(COMPARED) and key != "train/examples_per_s":
            assert got[key] == pytest.approx(value, abs=tol, rel=tol, nan_ok=True), key


def test_each_worker_takes_its_rank_share_of_the_single_process_batch(two_workers):
    runs, _ = two_workers
    config = TrialConfig(**CONFIG)
    stream = ExampleStream(config.toy_train_size, BATCH, config.seed)
    half = BATCH // WORLD
    for rank, run in enumerate(runs):
        got = run["all"]["indices"]
        assert len(got) == STEPS
        for step, idx in enumerate(got):
            assert torch.equal(idx, stream.batch(step)[rank * half : (rank + 1) * half])
    # and the same views of those rows
    _, _, v1, _ = next(view_batches(config, load_data(config), 0, torch.device("cpu")))
    for rank, run in enumerate(runs):
        rows = v1[rank * half : (rank + 1) * half]
        torch.testing.assert_close(run["all"]["first_views"], rows, rtol=0, atol=0)


def test_all_negatives_on_two_workers_equal_one_worker(two_workers, one_worker):
    runs, _ = two_workers
    result, history, recorded = one_worker
    for run in runs:
        got = run["all"]
        # the whole per-step loss trajectory: every rank's loss is the gathered batch's
        assert got["losses"] == pytest.approx(recorded.losses, rel=1e-5, abs=1e-6)
        _assert_metrics_close(got["result"], result, 1e-4)
        assert got["result"]["status"] == "finished"
        assert got["result"]["examples_seen"] == result["examples_seen"] == BATCH * STEPS
        assert got["result"]["loss/candidates"] == 2 * BATCH - 2
    # rank 0 reports every evaluation, at the same examples seen; the other rank an empty
    # report at each of those points, none more
    assert [s for s, _ in runs[0]["all"]["history"]] == [s for s, _ in history]
    for (_, got), (_, want) in zip(runs[0]["all"]["history"], history, strict=True):
        _assert_metrics_close(got, want, 1e-4)
    assert runs[1]["all"]["history"] == [(s, {}) for s, _ in history]
    assert TrialConfig(**CONFIG, workers=WORLD).negatives_per_anchor == 2 * BATCH - 2


def test_grouped_negatives_on_two_workers_equal_one_worker(two_workers, one_worker_grouped):
    runs, _ = two_workers
    result, recorded = one_worker_grouped
    assert result["loss/candidates"] < 2 * BATCH - 2  # the mask took same-item candidates out
    for run in runs:
        got = run["grouped"]
        assert got["losses"] == pytest.approx(recorded.losses, rel=1e-5, abs=1e-6)
        _assert_metrics_close(got["result"], result, 1e-4)


def test_local_negatives_with_groups_agree_over_the_workers(two_workers):
    runs, _ = two_workers
    got = [run["local_grouped"] for run in runs]
    assert got[0]["result"]["status"] == got[1]["result"]["status"] == "finished"
    assert got[0]["losses"] == pytest.approx(got[1]["losses"], rel=1e-12)  # the mean over ranks
    assert got[0]["result"]["loss/candidates"] < 2 * (BATCH // WORLD) - 2


def test_local_negatives_differ_and_count_the_workers_share(two_workers, one_worker):
    runs, _ = two_workers
    _, _, recorded = one_worker
    local = runs[0]["local"]
    half = BATCH // WORLD
    assert local["result"]["loss/candidates"] == 2 * half - 2
    assert all(m["loss/candidates"] == 2 * half - 2 for _, m in local["history"])
    derived = TrialConfig(**CONFIG, workers=WORLD, negatives="local").derived()
    assert derived["derived/negatives_per_anchor"] == 2 * half - 2
    # fewer negatives: a lower loss than the gathered one from the very first step
    assert local["losses"][0] < recorded.losses[0] - 0.1
    # the logged loss is the mean over workers, the same on both ranks
    assert runs[1]["local"]["losses"] == pytest.approx(local["losses"], rel=1e-12)
    assert local["result"]["examples_seen"] == BATCH * STEPS


def test_checkpoint_of_two_workers_resumes_to_the_uninterrupted_end(two_workers):
    runs, out = two_workers
    stopped, resumed, full = runs[0]["stopped"], runs[0]["resumed"], runs[0]["all"]
    assert stopped["result"] is None
    first_mark = TrialConfig(**CONFIG).eval_steps[0] * BATCH
    state = torch.load(
        out / "resumed" / f"checkpoint_{first_mark:012d}" / CHECKPOINT_FILE, weights_only=True
    )
    assert state["workers"] == WORLD and len(state["rng_workers"]) == WORLD
    # the checkpoint's evaluation is reported again, then the rest runs
    assert [s for s, _ in resumed["history"]] == [s for s, _ in full["history"]]
    for rank in range(WORLD):
        got, want = runs[rank]["resumed"], runs[rank]["all"]
        _assert_metrics_close(got["result"], want["result"], 1e-6)
        assert got["losses"] == pytest.approx(want["losses"][-len(got["losses"]) :], abs=1e-9)
        assert len(runs[rank]["stopped"]["losses"]) + len(got["losses"]) == STEPS
        assert got["result"]["examples_seen"] == BATCH * STEPS


def test_a_checkpoint_resumes_with_its_own_worker_count(two_workers):
    _, out = two_workers
    reporter = LocalReporter(out / "resumed")
    with pytest.raises(ValueError, match="written by workers=2 and resumes with workers=2 only"):
        run_trial(CONFIG, reporter)


def test_batch_not_divisible_by_workers_is_refused():
    with pytest.raises(ValidationError) as err:
        TrialConfig(**CONFIG | {"batch_size": 30, "budget_examples": 30 * 24, "workers": 4})
    assert "batch_size=30 cannot be split over workers=4" in str(err.value)
    with pytest.raises(ValidationError, match="leaves each worker 1 source"):
        TrialConfig(**CONFIG | {"workers": BATCH, "negatives": "local"})


def test_several_workers_need_a_process_group_of_that_size(two_workers):
    runs, _ = two_workers
    with pytest.raises(ValueError, match=r"workers=2 needs torch\.distributed initialised"):
        run_trial(CONFIG | {"workers": 2})
    for run in runs:
        expected = "workers=4 but the torch.distributed process group has 2 ranks"
        assert expected in run["wrong_world"]


def test_sync_bn_on_the_cpu_is_refused_and_ignored_by_one_worker(two_workers):
    runs, _ = two_workers
    for run in runs:
        assert "sync_bn=True with workers=2 needs CUDA" in run["sync_bn_cpu"]
    one = TrialConfig(**CONFIG | {"projection": "mlp", "sync_bn": True})
    modules = [type(m) for m in train_module._Trial(one, None).model.modules()]
    assert torch.nn.BatchNorm1d in modules  # one worker: BatchNorm as it is
    assert torch.nn.SyncBatchNorm not in modules
