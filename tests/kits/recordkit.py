"""A finished study recorded in a real embedded MLflow store in a second, with no training and no
Ray: the default study's design (temperature × batch size, 2 replicates, common seeds), each
trial's results planted by a formula, written through :class:`study.record.StudyRecord` (and
:mod:`study.mlflow_views`) as the runner writes them. For tests of what reads a store (the
notebook, the README's snippet)."""

from __future__ import annotations

import math
from pathlib import Path

from search_spaces.designs import build_design
from search_spaces.spec import load_spec
from study.mlflow_views import start_described_parent
from study.record import StudyRecord

NAME = "default-digits"
SEED_LUCK = (0.004, -0.004)  # shared by every point: the replicate is a block


def default_truth(u: float, v: float, replicate: int, i: int) -> dict[str, float]:
    """The default study's planted finals at log2(τ/0.1) = u, log2(B/64) = v: k-NN accuracy
    falls 1.5 points per doubling of temperature (plus each seed's luck and a little noise)."""
    noise = (0.003, -0.002, -0.001, 0.002, 0.002, -0.003, -0.002, 0.001)[i % 8]
    luck = SEED_LUCK[replicate % 2]
    return {
        "probe/knn_top1_h": 0.95 - 0.015 * u + luck + noise,
        "probe/linear_top1_h": 0.90 - 0.01 * v + luck - noise,
        "probe/knn_top1_z": 0.85 - 0.01 * u + luck + noise,
        "z/align": 0.2 + 0.3 * u + 0.05 * v + noise,
        "z/uniform": -3.4 + 0.4 * u + 0.1 * v - noise,
    }


def record_study(
    folder: Path,
    name: str = NAME,
    goals: tuple = (),
    spec=None,
    truth=default_truth,
    heldout_items: int | None = None,
    marks: int = 2,
    outcomes: int | None = None,
) -> str:
    """The default study (or ``spec``), finished, in ``folder/mlflow.db``, each trial's finals
    ``truth(u, v, replicate, i)`` at u = log2(τ/0.1), v = log2(B/64) (by default
    :func:`default_truth`: its model beats the mean and names an optimum; z/align and z/uniform
    are smooth in both factors). Returns the store's URI. ``goals``: the study file's goals
    (``search_spaces.spec.Goal``); ``heldout_items``: the held-out items each trial says its
    accuracies count over (``trial/heldout_items``; none by default, as older records);
    ``marks``: the evaluations of each trial, evenly spaced, the metrics rising to the finals;
    ``outcomes``: that many held-out items, each trial's per-item outcomes planted as the runner
    writes them (``evidence/outcomes.parquet``), each accuracy the share its outcomes make."""
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    spec = spec or load_spec(None)
    spec = spec.model_copy(update={"study": name, "goals": tuple(goals) or spec.goals})
    design = build_design(spec)
    record = StudyRecord(uri, name, folder / "artifacts")
    parent = start_described_parent(record, spec, design, "planted by tests/kits/recordkit.py")
    budget = int(spec.trial["budget_examples"])
    for i, plan in enumerate(design.trials):
        tau, batch = plan.config.temperature, plan.config.batch_size
        final = truth(math.log2(tau / 0.1), math.log2(batch / 64), plan.replicate, i)
        run = record.ensure_trial_run(plan, parent, spec.sha)
        record.begin_attempt(run)
        if outcomes is not None:
            final = planted_outcomes(record, run, final, outcomes, i)
            heldout_items = outcomes
        for step, share in ((budget * k // marks, k / marks) for k in range(1, marks + 1)):
            metrics = {k: value * (0.5 + share / 2) for k, value in final.items()}
            record.log_evaluation(run, {"train/examples_seen": step, **metrics}, step)
        summary = {"status": "finished", "examples_seen": budget, "wall_s": 1.0, "steps": 10}
        if heldout_items is not None:
            summary["heldout_items"] = heldout_items
        record.finish_trial(run, summary)
    record.finish_parent(parent, True)
    return uri


def planted_outcomes(record: StudyRecord, run_id: str, final: dict, n: int, i: int) -> dict:
    """Per-item outcomes of one trial over ``n`` items (10 classes), logged on its run: each
    accuracy's first round(share × n) items of a rotation right, the rest wrong; returns the
    finals with each accuracy made exactly the share its outcomes give."""
    items = list(range(n))
    labels = [k % 10 for k in items]
    predictions, exact = {}, dict(final)
    for metric, value in final.items():
        if not metric.startswith("probe/"):
            continue
        right = round(value * n)
        order = [(k + 7 * i) % n for k in items]  # a trial's own items right, not the same ones
        hits = set(order[:right])
        predictions[metric] = [lab if k in hits else (lab + 1) % 10
                               for k, lab in zip(items, labels, strict=True)]  # fmt: skip
        exact[metric] = right / n
    record.log_evidence(run_id, {"outcomes": {"item": items, "label": labels,
                                              "predictions": predictions}})  # fmt: skip
    return exact


def plant_running(
    uri: str, name: str = NAME, finished: int = 1, pid: int | None = None, host: str | None = None
) -> list[str]:
    """Turn a recorded study (:func:`record_study`) into one that is still running, or whose
    driver is gone: its first ``finished`` trials (by key) stay FINISHED, the others and the
    parent run are RUNNING again (their metrics as they were, partial values of a running
    trial), and the experiment's lease tag (``study.driver``, as :mod:`study.lease` writes it)
    names ``pid`` on ``host`` (this host by default): a live process there is a running
    driver, a dead one a driver gone; ``pid`` None leaves no lease (a driver that let it go).
    Returns the keys of the trials left RUNNING."""
    import json
    import socket
    import time

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    trials = sorted((r for r in runs if r.data.tags.get("study.role") == "trial"),
                    key=lambda r: r.data.tags["study.trial_key"])  # fmt: skip
    for run in trials[finished:]:
        client.update_run(run.info.run_id, status="RUNNING")
    for run in runs:
        if run.data.tags.get("study.role") == "parent":
            client.update_run(run.info.run_id, status="RUNNING")
    if pid is not None:
        now = time.time()
        holder = {"token": "planted", "host": host or socket.gethostname(), "pid": pid,
                  "since": now, "beat": now}  # fmt: skip
        client.set_experiment_tag(experiment.experiment_id, "study.driver", json.dumps(holder))
    return [r.data.tags["study.trial_key"] for r in trials[finished:]]
