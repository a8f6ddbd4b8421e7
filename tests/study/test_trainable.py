"""study/trainable.py's function trainable called directly, without Ray Tune (its ``tune`` is a
stand-in that records every report): a tiny toy trial reports each evaluation with its
examples seen, then one final report with its numbers, status and evidence as JSON text; it
keeps at most two complete checkpoints in the trial's folder, writes its pid there, claims
the plan's share of the machine, and a second call on the same folder resumes from them."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from trialkit import preset

import trainables.train
from study import CHECKS_KEY, EVIDENCE_KEY
from study import trainable as trainable_module
from study.trainable import PID_FILE, final_report, run_study_trial

TINY = {"budget_examples": 128 * 8, "eval_marks": 4, "heldout_size": 200,
        "linear_probe": False}  # fmt: skip


@pytest.fixture
def tune(monkeypatch):
    """The reports a trial sends, in order, and the shares it claims; no Ray session (and no
    runtime context to ask for a node id: asking would start a local Ray)."""
    seen = SimpleNamespace(reports=[], claims=[])
    monkeypatch.setattr(trainable_module, "_node_id", lambda: "node-1")
    monkeypatch.setattr(trainable_module, "tune", SimpleNamespace(report=seen.reports.append))
    monkeypatch.setattr(trainables.train, "claim_share", lambda *a: seen.claims.append(a))
    return seen


def plan(folder) -> dict:
    return {"plan": {"key": "p000-r0", "trial": preset("toy_seed002") | TINY,
                     "trial_uri": str(folder), "cpu": 2, "gpu": 0.0}}  # fmt: skip


def test_a_trial_reports_each_evaluation_then_its_final_numbers(tune, tmp_path):
    run_study_trial(plan(tmp_path / "trial"))
    *evaluations, final = tune.reports
    assert tune.claims == [(2, 0.0)]
    assert [r["examples_seen"] for r in evaluations] == [0, 256, 512, 768, 1024]
    assert all(r["node_id"] == "node-1" and "final" not in r for r in tune.reports[:-1])
    assert final["final"] == 1 and final["trial_status"] == "finished"
    assert final["node_id"] == "node-1"
    assert final["examples_seen"] == 1024 and final["steps"] == 8
    assert final["torch_device"] == "cpu" and final["gpu_ids"] == ""  # where it trained
    where = ("node_id", "node_ip", "gpu_ids", "torch_device")
    assert all(isinstance(v, int | float) for k, v in final.items()
               if k not in ("trial_status", *where, EVIDENCE_KEY, CHECKS_KEY))  # fmt: skip
    assert isinstance(json.loads(final[EVIDENCE_KEY]), dict)
    assert json.loads(final[CHECKS_KEY]) == {"info_nce_worked_example": "pass"}
    assert final["probe/knn_top1_h"] == evaluations[-1]["probe/knn_top1_h"]
    trial = tmp_path / "trial"
    assert (trial / PID_FILE).read_text() == str(os.getpid())
    complete = sorted(p.name for p in trial.glob("checkpoint_*") if (p / "DONE").is_file())
    assert 1 <= len(complete) <= 2  # the trial keeps its newest two


def test_a_second_call_on_the_same_folder_resumes_from_its_checkpoints(tune, tmp_path):
    run_study_trial(plan(tmp_path / "trial"))
    first = tune.reports[-1]
    tune.reports.clear()
    run_study_trial(plan(tmp_path / "trial"))
    again = tune.reports[-1]
    assert again["trial_status"] == "finished" and again["examples_seen"] == 1024
    assert [r["examples_seen"] for r in tune.reports[:-1]] != [0, 256, 512, 768, 1024]
    assert again["probe/knn_top1_h"] == first["probe/knn_top1_h"]


def test_the_final_report_keeps_numbers_and_sends_the_evidence_and_checks_as_json_text():
    result = {"status": "diverged", "steps": 3, "train/loss": 0.5, "note": "words",
              "evidence": {"per_class": [1, 2]}}  # fmt: skip
    report = final_report(result, "node-1")
    assert report == {"steps": 3, "train/loss": 0.5, "final": 1, "trial_status": "diverged",
                      "node_id": "node-1", EVIDENCE_KEY: '{"per_class": [1, 2]}',
                      CHECKS_KEY: '{"info_nce_worked_example": "pass"}'}  # fmt: skip
    assert final_report({"status": "finished"}, "")[EVIDENCE_KEY] == "{}"


def test_the_self_checks_run_with_the_trials_code(monkeypatch):
    """Run where the trial ran: a worker whose objective gives another value says so."""
    from trainables import checks

    monkeypatch.setattr(checks, "WORKED_EXAMPLE_LOSS", 0.7)
    sent = json.loads(final_report({"status": "finished"}, "")[CHECKS_KEY])
    assert sent["info_nce_worked_example"].startswith("fail: 0.655")


def test_the_driver_imports_no_torch_on_a_machine_without_a_gpu_driver():
    """torch takes seconds of CPU to import: a driver imports it only to count GPUs where a GPU
    driver is installed (on a cached or recorded baseline, the trials import it themselves)."""
    import subprocess
    import sys
    from pathlib import Path

    from study.capacity import GPU_DRIVER_FILES

    code = ("import sys; import study.cli, study.runner, study.trainable, study.baselines, "
            "study.reporting; from study.capacity import local_capacity; "
            "print(int(local_capacity()['GPU']), 'torch' in sys.modules)")  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    gpus, imported = done.stdout.split()
    if any(map(os.path.exists, GPU_DRIVER_FILES)):
        import torch

        assert int(gpus) == torch.cuda.device_count()
    else:
        assert (gpus, imported) == ("0", "False"), done.stderr[-2000:]


def test_a_gpu_share_without_cuda_is_refused_before_training_unless_the_study_says_cpu(
    monkeypatch,
):
    import torch

    from study.trainable import NoAcceleratorError, placement
    from trainables.config import TrialConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a CPU-only node
    asked = preset("toy_seed002") | TINY
    with pytest.raises(NoAcceleratorError, match=r"holds 0\.25 GPU .* set `device: cpu`"):
        placement(TrialConfig(**asked | {"device": "auto"}), 0.25)
    assert placement(TrialConfig(**asked | {"device": "cpu"}), 0.25)["torch_device"] == "cpu"
    assert placement(TrialConfig(**asked | {"device": "auto"}), 0.0)["torch_device"] == "cpu"


def test_the_refusal_names_a_cpu_build_of_torch_and_its_fix(monkeypatch):
    import torch

    from study.trainable import no_cuda_words

    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch, "__version__", "2.14.1+cpu")
    words = no_cuda_words(0.5, "1", "10.0.0.7", "abcdef0123456789")
    assert "on node 10.0.0.7 (abcdef012345)" in words
    assert "a build without CUDA (torch 2.14.1+cpu)" in words
    assert "install a CUDA build of torch on that node" in words
