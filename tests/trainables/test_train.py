"""One trial end to end: the toy reproduction, resume, compute matching, statuses, the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trialkit import FAST_EVAL, StopAfter, preset

from trainables.config import TrialConfig
from trainables.metrics import evaluation_metrics, evidence_metrics, final_metrics
from trainables.train import CHECKPOINT_FILE, LocalReporter, run_trial

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_seed002_reproduction():
    reporter = LocalReporter()
    result = run_trial(preset("toy_seed002"), reporter)
    initial = reporter.history[0][1]
    assert reporter.history[0][0] == 0 and result["status"] == "finished"
    assert result["steps"] == 600 and result["examples_seen"] == 600 * 128
    assert abs(result["train/loss"] - math.log(64)) < 0.1, result["train/loss"]
    assert result["probe/knn_top1_h"] >= 0.95
    assert initial["z/align"] / result["z/align"] >= 10, (initial["z/align"], result["z/align"])


def test_resume_after_second_checkpoint_matches_uninterrupted(tmp_path):
    cfg = TrialConfig(
        **preset("digits") | FAST_EVAL | {"budget_examples": 128 * 40, "eval_marks": 4}
    )
    uninterrupted = run_trial(cfg, LocalReporter(tmp_path / "a"))
    with pytest.raises(KeyboardInterrupt):
        run_trial(cfg, StopAfter(tmp_path / "b", n=2))
    resumed_reporter = LocalReporter(tmp_path / "b", keep=10)
    assert Path(resumed_reporter.latest_checkpoint()).name == f"checkpoint_{128 * 20:012d}"
    state = torch.load(
        Path(resumed_reporter.latest_checkpoint()) / CHECKPOINT_FILE, weights_only=True
    )
    assert {"model", "optimizer", "scheduler", "rng", "examples_seen"} <= set(state)
    resumed = run_trial(cfg, resumed_reporter)
    # the checkpoint's evaluation is reported again (for a record that missed it), then only
    # what was left runs
    assert [s for s, _ in resumed_reporter.history] == [128 * 20, 128 * 30, 128 * 40]
    for key, value in uninterrupted.items():
        if key.startswith(("train/", "z/", "h/", "sim/", "probe/", "loss/")):
            if key == "train/examples_per_s":
                continue
            assert resumed[key] == pytest.approx(value, abs=1e-6, nan_ok=True), key
    assert resumed["examples_seen"] == uninterrupted["examples_seen"] == 128 * 40


@pytest.mark.parametrize("batch", [64, 96, 128, 256])
def test_compute_matching_every_batch_size_sees_the_budget(batch):
    budget = 768 * 2
    result = run_trial(
        preset("digits")
        | FAST_EVAL
        | {"batch_size": batch, "budget_examples": budget, "eval_marks": 1}
    )
    assert result["examples_seen"] == budget
    assert result["steps"] * batch == budget
    assert result["train/examples_seen"] == budget


def test_labels_never_reach_the_loss(monkeypatch):
    """Shuffling every training label leaves the training loss trajectory unchanged."""
    import trainables.train as train_module

    cfg = preset("digits") | FAST_EVAL | {"budget_examples": 128 * 6, "eval_marks": 3}
    plain = LocalReporter()
    run_trial(cfg, plain)
    real_load = train_module.load_data

    def shuffled(config):
        data = real_load(config)
        perm = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(0))
        return type(data)(**{**data.__dict__, "train_y": data.train_y[perm]})

    monkeypatch.setattr(train_module, "load_data", shuffled)
    relabelled = LocalReporter()
    run_trial(cfg, relabelled)
    losses = lambda r: [m["train/loss"] for _, m in r.history]  # noqa: E731
    assert losses(plain) == losses(relabelled)
    assert [m["probe/knn_top1_h"] for _, m in plain.history] != [
        m["probe/knn_top1_h"] for _, m in relabelled.history
    ]


def test_non_finite_loss_ends_the_trial_as_diverged():
    cfg = preset("toy_seed002") | {
        "budget_examples": 128 * 20, "optimizer": "sgd", "base_lr": 1e30, "momentum": 0.0,
        "activation": "relu", "eval_at_start": False,
    }  # fmt: skip
    result = run_trial(cfg)
    assert result["status"] == "diverged"
    assert result["examples_seen"] < 128 * 20
    assert math.isnan(result["train/loss"])


def test_collapse_ends_the_trial_as_collapsed():
    # Alignment alone (λ·t = 0) has the constant encoder as its optimum.
    cfg = preset("toy_seed002") | {
        "objective": "align_uniform", "lam_t": 0.0, "base_lr": 0.05, "feature_dim": 8,
        "mlp_hidden": [64], "activation": "relu", "projection": "linear", "projection_dim": 8,
        "budget_examples": 128 * 300, "eval_marks": 6, "eval_at_start": False,
    }  # fmt: skip
    reporter = LocalReporter()
    result = run_trial(cfg, reporter)
    assert result["status"] == "collapsed"
    assert result["z/dim_std_mean"] < 0.01 and result["z/uniform"] > -0.01
    assert result["examples_seen"] < 128 * 300  # it stopped early


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m trainables ARGS`` run in this process (its ``main``), its exit status and
    output as a finished process's: each process of its own spent ~5 s of CPU importing torch.
    The command as a process is run by the kill test below and by tests/repository."""
    import contextlib
    import io

    from trainables.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's own refusals (2) and --help (0)
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    return subprocess.CompletedProcess(["python", "-m", "trainables", *args], code,
                                       out.getvalue(), err.getvalue())  # fmt: skip


def test_cli_json_smoke():
    done = run_cli("digits", "--smoke", "--json", "--set", "temperature=0.3")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for key in ("status", "examples_seen", "steps", "wall_s", "z/align", "probe/knn_top1_h"):
        assert key in out
    assert out["status"] == "finished" and out["examples_seen"] == 4 * 128


def test_cli_bad_config_exits_2_with_the_reason():
    done = run_cli("digits", "--set", "temperature=-1")
    assert done.returncode == 2
    assert "temperature" in done.stderr and "-1" in done.stderr
    done = run_cli("digits", "--set", "augmentation=crop+glitter")
    assert done.returncode == 2 and "'glitter'" in done.stderr


def test_cli_checkpoint_dir_resumes(tmp_path):
    args = ("toy_seed002", "--smoke", "--json", "--checkpoint-dir", str(tmp_path))
    first = json.loads(run_cli(*args).stdout)
    assert [p.name for p in tmp_path.glob("checkpoint_*")] == [f"checkpoint_{2 * 128:012d}"]
    assert first["status"] == "finished"
    # the same command again resumes from step 2 and ends where the first run ended
    again = json.loads(run_cli(*args).stdout)
    for key, value in first.items():
        if key.startswith(("z/", "h/", "probe/")) or key in ("train/loss", "examples_seen"):
            assert again[key] == pytest.approx(value, abs=1e-6), key


def test_dataloader_workers_give_the_same_trial():
    """CPU augmentation in worker processes draws the same views as in-process."""
    cfg = preset("digits") | FAST_EVAL | {"budget_examples": 128 * 6, "eval_marks": 2}
    in_process, in_workers = LocalReporter(), LocalReporter()
    run_trial(cfg, in_process)
    run_trial(cfg | {"num_workers": 2}, in_workers)
    losses = lambda r: [m["train/loss"] for _, m in r.history]  # noqa: E731
    assert losses(in_process) == pytest.approx(losses(in_workers), abs=1e-6)


@pytest.mark.long
@pytest.mark.slow
def test_sigkill_after_second_checkpoint_then_resume(tmp_path):
    """A real kill of the trial process, then the same command again."""
    import os
    import signal
    import time

    # 48 steps of 128, a checkpoint every 8: killed after the second (step 16), with 32 steps
    # and 4 evaluations, seconds, still to run
    sets = [
        "--set",
        "budget_examples=6144",
        "--set",
        "eval_marks=6",
        "--set",
        "linear_probe_iters=20",
    ]
    reference = json.loads(run_cli("digits", "--json", *sets).stdout)
    ckpt = tmp_path / "ckpt"
    cmd = [
        sys.executable,
        "-m",
        "trainables",
        "digits",
        "--json",
        *sets,
        "--checkpoint-dir",
        str(ckpt),
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(list(ckpt.glob("checkpoint_*[0-9]"))) < 2:
            assert proc.poll() is None, "trial ended before its second checkpoint"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    resumed = json.loads(run_cli("digits", "--json", *sets, "--checkpoint-dir", str(ckpt)).stdout)
    for key, value in reference.items():
        if key.startswith(("z/", "h/", "sim/", "probe/")) or key in ("train/loss", "examples_seen"):
            assert resumed[key] == pytest.approx(value, abs=1e-6), key


@pytest.mark.gpu
def test_bf16_trial_on_cuda():
    result = run_trial(
        preset("digits")
        | FAST_EVAL
        | {"device": "cuda", "precision": "bf16", "budget_examples": 128 * 8, "eval_marks": 2}
    )
    assert result["status"] == "finished" and math.isfinite(result["train/loss"])


@pytest.mark.parametrize(
    "settings",
    [
        {"objective": "info_nce", "linear_probe": True},
        {"objective": "align_uniform", "lam_t": 2.0, "linear_probe": False},
    ],
)
def test_the_metric_catalogue_is_what_a_trial_reports(settings):
    """Study files are checked against this catalogue before anything runs."""
    config = TrialConfig(
        dataset="digits", budget_examples=128, batch_size=64, eval_marks=1, heldout_size=60,
        probe_train_size=60, linear_probe_iters=3, **settings,
    )  # fmt: skip
    reporter = LocalReporter()
    result = run_trial(config, reporter)
    (_, reported), *_ = reporter.history  # the only evaluation, so the final one: evidence too
    assert sorted(reported) == sorted(evaluation_metrics(config) + evidence_metrics(config))
    numeric = {k for k, v in result.items() if isinstance(v, int | float)}
    assert sorted(numeric) == sorted(final_metrics(config))
