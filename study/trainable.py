"""The Ray Tune trainable: one study trial, wrapping ``trainables.run_trial``.

Runs in a Ray worker. It never touches MLflow (the driver records), so a worker node needs no
route to the tracking server. Checkpoints go to Ray through ``tune.Checkpoint`` and are also
kept in the study's own trial folder, so a trial resumes from its last evaluation both when Ray
retries it after a worker dies (``tune.get_checkpoint()``) and when a new driver re-runs the
study after the old one died (the trial folder).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ray import tune

from study import EVIDENCE_KEY
from trainables.config import TrialConfig
from trainables.train import LocalReporter, claim_share, run_trial

PID_FILE = "worker.pid"


class TuneReporter:
    """Binds the trial's reporter protocol to Ray Tune and the study's trial folder."""

    def __init__(self, trial_dir: str | Path) -> None:
        self.local = LocalReporter(trial_dir, keep=2)
        self.node_id = _node_id()

    def report(
        self, metrics: dict[str, float], *, step: int, checkpoint_dir: str | None = None
    ) -> None:
        self.local.report(metrics, step=step, checkpoint_dir=checkpoint_dir)
        checkpoint = tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        tune.report(
            {**metrics, "examples_seen": step, "node_id": self.node_id}, checkpoint=checkpoint
        )

    def latest_checkpoint(self) -> str | None:
        from_ray = tune.get_checkpoint()
        if from_ray is not None:
            return from_ray.to_directory()
        return self.local.latest_checkpoint()


def _node_id() -> str:
    import ray

    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # outside Ray (a unit test)
        return ""


def run_study_trial(payload: dict[str, Any]) -> None:
    """Tune's function trainable.

    ``payload["plan"]`` is a design's trial (``TrialPlan.payload()``: ``key``, ``trial`` with
    every TrialConfig field, …) plus ``trial_dir``, ``cpu`` and ``gpu``, for fixed and adaptive
    designs alike.
    """
    plan = payload["plan"]
    trial_dir = Path(plan["trial_dir"])
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / PID_FILE).write_text(str(os.getpid()))
    # CPU threads capped to the trial's share, and GPU memory to its fraction when trials share
    # a GPU (resources.gpu below 1), so trials on one machine do not starve each other
    claim_share(plan.get("cpu", 1), plan.get("gpu", 0.0))
    config = TrialConfig(**plan["trial"])
    reporter = TuneReporter(trial_dir)
    result = run_trial(config, reporter)
    summary = {k: v for k, v in result.items() if isinstance(v, int | float)}
    # the evidence (tables, the source-return panel) travels to the driver, which alone writes
    # to MLflow, as one JSON text: Tune flattens nested results
    evidence = json.dumps(result.get("evidence") or {})
    tune.report({**summary, "final": 1, "trial_status": result["status"],
                 "node_id": reporter.node_id, EVIDENCE_KEY: evidence})  # fmt: skip
