"""The default study on a fresh folder, run once through the real CLI at an eighth of its
budget (the same factors, design, trials and code path; how long the full study takes is
``benchmarks/study.py``'s figure, never a test's); then everything that reads its output: status,
export, the report, and the notebook executed with nbclient."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pyarrow.parquet as pq
import pytest
import yaml
from mlflow.tracking import MlflowClient
from nbclient import NotebookClient
from processkit import kill_processes_mentioning
from reportkit import navigation_problems
from studykit import child_runs, parent_runs

from search_spaces.spec import SPEC_DIR

ROOT = Path(__file__).resolve().parents[2]
STUDY = str(Path(sys.executable).with_name("study"))
NAME = "default-digits"
BUDGET = 3840  # an eighth of the shipped 30,720: 60 steps at B = 64, 15 at B = 256


@pytest.fixture(scope="module")
def default_study(tmp_path_factory):
    """`study run` of the shipped default study at an eighth of its budget, in an empty folder;
    (folder, stdout, the study file)."""
    folder = tmp_path_factory.mktemp("fresh")
    data = yaml.safe_load((SPEC_DIR / "default.yaml").read_text())
    data["trial"]["budget_examples"] = BUDGET
    spec = folder / "default-digits.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    ray_tmp = tempfile.mkdtemp(prefix="rd", dir="/tmp")
    env = os.environ | {"RAY_TMPDIR": ray_tmp}
    done = subprocess.run([STUDY, "run", spec.name], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    kill_processes_mentioning(ray_tmp)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, done.stdout, spec


def uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


def study_in_process(*argv: str):
    """``study ARGV`` through typer's runner in this process (run from the study's folder, as a
    user's shell would be): each command as a process is timed by benchmarks/commands.py and run
    by tests/repository; here a process of its own cost seconds of imports per call."""
    from typer.testing import CliRunner

    from study.cli import app

    return CliRunner().invoke(app, list(argv))


@pytest.mark.long
@pytest.mark.slow
def test_the_default_study_records_every_trial_compute_matched(default_study):
    folder, stdout, _ = default_study
    assert "mlflow ui --backend-store-uri sqlite:///" in stdout
    assert len(parent_runs(uri(folder), NAME)) == 1
    children = child_runs(uri(folder), NAME)
    assert len(children) == 8 and {r.info.status for r in children} == {"FINISHED"}
    frame = pq.read_table(folder / "studies" / NAME / "results.parquet").to_pandas()
    assert len(frame) == 8 and set(frame["examples_seen"]) == {BUDGET}


@pytest.mark.slow
def test_status_and_export(default_study, tmp_path):
    folder, _, _ = default_study
    out = tmp_path / "again.parquet"
    done = subprocess.run([STUDY, "export", NAME, "--out", str(out)], cwd=folder,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and pq.read_table(out).num_rows == 8
    status = subprocess.run([STUDY, "status", NAME], cwd=folder, capture_output=True, text=True)
    assert "8 trials: 8 finished" in status.stdout and "{" not in status.stdout
    from analysis import load_study, read_results

    from_mlflow, from_file = load_study(NAME, uri(folder)), read_results(out)
    assert list(from_mlflow.columns) == list(from_file.columns)
    assert from_mlflow.attrs["factors"] == from_file.attrs["factors"] == ["temperature",
                                                                          "batch_size"]  # fmt: skip
    assert from_mlflow["probe/knn_top1_h"].tolist() == from_file["probe/knn_top1_h"].tolist()


@pytest.mark.slow
def test_study_run_wrote_the_report_and_attached_it(default_study):
    folder, stdout, _ = default_study
    report = folder / "studies" / NAME / "report"
    assert "report: " in stdout and (report / "report.html").is_file()
    html = (report / "report.html").read_text()
    assert "data:image/png;base64," in html and "Release gate" in html
    stems = {p.stem for p in (report / "figures").glob("*.png")}
    assert navigation_problems(report / "report.html", stems) == []  # and under 1 MB
    for name in ("plane_z", "plane_h", "trajectories_z", "main_effects", "interactions"):
        assert (report / "figures" / f"{name}.png").stat().st_size > 0
        assert (report / "figures" / f"{name}.svg").stat().st_size > 0
    parent = parent_runs(uri(folder), NAME)[0]
    attached = {a.path for a in MlflowClient(uri(folder)).list_artifacts(parent.info.run_id,
                                                                          "report")}  # fmt: skip
    assert {"report/report.html", "report/evidence.md", "report/evidence.json"} <= attached


@pytest.mark.slow
def test_study_run_ends_with_the_findings_then_the_paths_and_the_parent_leads_with_them(
    default_study,
):
    """The last lines of ``study run``: the report's headline (at most six lines), then where
    the report, the results and the record are; the parent run's description is the same
    headline, followed by the design."""
    folder, stdout, _ = default_study
    summary = json.loads((folder / "studies" / NAME / "report" / "report.json").read_text())
    lines = summary["headline"]["lines"]
    assert 2 <= len(lines) <= 6 and lines[0] == summary["headline"]["sentence"]
    assert lines[0].startswith(f"{NAME} varied temperature (0.1 to 0.5) and batch_size (64 to "
                               "256) in a full factorial design: 8 trials, 8 finished, each "
                               f"trained on {BUDGET:,} examples.")  # fmt: skip
    tail = stdout.strip().splitlines()
    start = tail.index(lines[0])
    assert tail[start : start + len(lines)] == lines
    paths = tail[start + len(lines) :]
    assert [p.split(":")[0] for p in paths[:3]] == ["report", "results", "MLflow UI"]
    assert len(paths) == 4 and "workflowType=machine_learning" in paths[3]
    note = parent_runs(uri(folder), NAME)[0].data.tags["mlflow.note.content"]
    assert note.startswith("**In short.** ") and f"\n\n{lines[0]}\n" in note
    assert (
        "\n---\n\n**Design.** full factorial design over temperature, batch_size: 8 trials" in note
    )


@pytest.mark.slow
def test_report_json_from_mlflow_and_from_parquet_agree(default_study, tmp_path, monkeypatch):
    folder, _, _ = default_study
    monkeypatch.chdir(folder)
    # the numbers only: the figures (drawn by `study run`, tested above) would take most of it
    by_name = study_in_process("report", NAME, "--out", str(tmp_path / "a"), "--json",
                               "--no-figures")  # fmt: skip
    results = folder / "studies" / NAME / "results.parquet"
    by_file = study_in_process("report", "--results", str(results), "--out", str(tmp_path / "b"),
                               "--json", "--no-figures")  # fmt: skip
    assert by_name.exit_code == 0, by_name.output[-2000:]
    assert by_file.exit_code == 0, by_file.output[-2000:]
    a, b = json.loads(by_name.stdout), json.loads(by_file.stdout)
    assert a["study"] == NAME and a["n_trials"] == 8
    assert a["responses"].keys() == b["responses"].keys()
    knn = a["responses"]["probe/knn_top1_h"]
    assert set(knn) >= {"r2", "adj_r2", "lack_of_fit_p", "stationary_kind", "optimum",
                        "predicted", "interval"}  # fmt: skip
    assert knn["r2"] == pytest.approx(b["responses"]["probe/knn_top1_h"]["r2"])
    if knn["status"] == "fitted" and knn["beats_mean"]:
        assert set(knn["optimum"]) == {"temperature", "batch_size"}
    elif knn["status"] == "fitted":  # the model does not beat the mean: no optimum is named
        assert knn["optimum"] is None and "No factor has a detectable effect" in knn["findings"][0]
    else:  # a saturated probe: nothing is modelled and no optimum is claimed
        assert knn["optimum"] is None and "nothing was modelled" in knn["notes"][0]
    assert a["frontier"] == b["frontier"] and a["frontier"]
    # the report states at least one effect with its evidence
    found = [s for r in a["responses"].values() for s in r.get("findings", [])
             if "95% CI" in s and "Holm-adjusted p" in s and "no detectable" not in s]  # fmt: skip
    assert found, a["responses"]


@pytest.mark.slow
def test_notebook_executes_on_the_default_study(default_study, monkeypatch):
    folder, _, _ = default_study
    monkeypatch.setenv("STUDY", NAME)
    monkeypatch.setenv("TRACKING_URI", uri(folder))
    notebook = nbformat.read(ROOT / "analysis" / "notebooks" / "explore_study.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()  # fmt: skip
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4
    text = "".join(o.get("text", "") for o in outputs)
    assert f"Read study {NAME} from {uri(folder)}\n8 trials" in text


@pytest.mark.slow
def test_power_and_plan_plan_replicates_from_the_finished_study(default_study, monkeypatch):
    """`study power` asks for the replicates that detect an effect from the study's own error;
    `study plan` of the same study shows what its planned replicates detect."""
    folder, _, _ = default_study
    monkeypatch.chdir(folder)
    done = study_in_process("power", NAME, "--metric", "z/align", "--effect", "0.01")
    assert done.exit_code == 0, done.output[-2000:]
    assert "at 80% power" in done.stdout and "doubling temperature" in done.stdout
    assert "replicates per point" in done.stdout
    # answered from the basis the report left; with none usable, the fit gives the same words
    from analysis.stats import power as planning

    assert (folder / "studies" / NAME / "report" / planning.BASIS_FILE).is_file()
    with monkeypatch.context() as patched:
        patched.setattr(planning, "BASIS_VERSION", planning.BASIS_VERSION + 1)
        refit = study_in_process("power", NAME, "--metric", "z/align", "--effect", "0.01")
    assert refit.exit_code == 0 and refit.stdout == done.stdout
    bad = study_in_process("power", NAME, "--metric", "z/alignment", "--effect", "0.01")
    assert bad.exit_code == 2 and "--metric 'z/alignment'" in bad.stderr
    negative = study_in_process("power", NAME, "--metric", "z/align", "--effect", "-1")
    assert negative.exit_code == 2 and "effect must be a positive number" in negative.stderr
    planned = study_in_process("plan", "default", "--json")
    assert planned.exit_code == 0, planned.output[-2000:]
    sizes = json.loads(planned.stdout)["detectable"]["z/align"]
    assert set(sizes) == {"doubling temperature", "doubling batch_size"}
    assert all(v > 0 for v in sizes.values())
    text = study_in_process("plan", "default")
    assert "smallest effects detected at 80% power with 2 replicates" in text.stdout


@pytest.mark.slow
def test_the_default_study_measures_beyond_global_averages(default_study):
    """The evidence on a real study: every trial's evidence is in its run, the results carry the
    per-class, subgroup and shift metrics, the report shows the best and the worst point's source
    return, and the gate judges items 8 and 12 (pass or fail, never "not measured")."""
    folder, _, _ = default_study
    client = MlflowClient(uri(folder))
    for run in child_runs(uri(folder), NAME):
        listed = {a.path for a in client.list_artifacts(run.info.run_id, "evidence")}
        assert {"evidence/per_class.csv", "evidence/shift.csv", "evidence/source_return.csv",
                "evidence/source_return.png"} <= listed, run.info.run_name  # fmt: skip
    frame = pq.read_table(folder / "studies" / NAME / "results.parquet").to_pandas()
    for column in ("z/align_worst_class", "h/uniform_class_spread",
                   "probe/knn_top1_h_worst_class", "shift/mean_knn_top1_h",
                   "shift/gaussian_noise/s5/knn_top1_h"):  # fmt: skip
        assert frame[column].notna().all(), column
    report = folder / "studies" / NAME / "report"
    page = (report / "report.html").read_text()
    section = page[page.index("Source return") :]
    assert section.count("<img") >= 2 and "best point" in section and "worst point" in section
    gate = {g["number"]: g["status"] for g in json.loads((report / "evidence.json").read_text())
            ["gate"]}  # fmt: skip
    assert gate[8] in ("pass", "fail") and gate[12] in ("pass", "fail"), gate


@pytest.mark.slow
def test_the_default_study_says_where_its_best_point_stands_against_its_baselines(default_study):
    """The raw input and a random-init encoder, scored by the trials' own probes on the same
    split, stand beside the best point in the terminal, the parent's description, report.html
    and report.json, with numbers and a verdict that follows from the interval."""
    from search_spaces.spec import load_spec
    from trainables.config import TrialConfig
    from trainables.data import load_data
    from trainables.probes import knn_top1

    folder, stdout, _ = default_study
    report = folder / "studies" / NAME / "report"
    summary = json.loads((report / "report.json").read_text())
    baselines = summary["baselines"]
    assert list(baselines) == ["raw", "random_init"]
    config = TrialConfig(**load_spec(None).trial)
    data = load_data(config)
    train_x = data.train_x[data.probe_index].flatten(1)
    knn = knn_top1(train_x, data.train_y[data.probe_index], data.heldout_x.flatten(1),
                   data.heldout_y, k=config.knn_k, temperature=config.knn_temperature,
                   num_classes=10)  # fmt: skip
    raw = baselines["raw"]["metrics"]["probe/knn_top1_h"]
    assert raw == pytest.approx(knn, abs=1e-12)
    assert baselines["random_init"]["seeds"] == [0, 1]
    against = summary["headline"]["against_baselines"]
    assert against.startswith("Against the baselines, it ")
    assert f"the raw input ({raw * 100:.1f}%" in against
    random_init = baselines["random_init"]["metrics"]["probe/knn_top1_h"]
    assert f"a random-init encoder ({random_init * 100:.1f}%, mean of seeds 0, 1" in against
    best = summary["headline"]["best"]
    assert any(line.startswith(best) and line.endswith(against) for line in stdout.splitlines())
    for entry in baselines.values():
        standing = entry["standing"]
        assert standing["sentence"] in against
        assert standing["verdict"] in ("beat", "did not beat", "cannot be told apart")
    parent = parent_runs(uri(folder), NAME)[0]
    assert f"**Against the baselines.** {against}" in parent.data.tags["mlflow.note.content"]
    assert parent.data.metrics["baseline/raw/probe/knn_top1_h"] == pytest.approx(raw, abs=1e-12)
    html = (report / "report.html").read_text()
    assert '<h2 id="baselines">Baselines</h2>' in html and 'href="#baselines"' in html


@pytest.mark.slow
def test_the_default_studys_claims_are_no_finer_than_its_held_out_items(default_study):
    """The best point's interval counts seeds and held-out items and has width; its standing
    against the raw input is the paired comparison on the shared items, recomputed here from the
    stored outcomes; a difference of less than one item is never a win; and no detectable size
    printed is smaller than one held-out item."""
    import re

    import numpy as np

    from analysis.reading.load import load_outcomes, load_study
    from analysis.stats.measurement import mcnemar_exact, two_source_interval

    folder, stdout, _ = default_study
    summary = json.loads((folder / "studies" / NAME / "report" / "report.json").read_text())
    best = summary["best_point"]
    assert best["sources"] == "seeds and held-out items" and best["items"] == 360
    assert best["ci_high"] - best["ci_low"] > 0
    assert best["selected_among"] == 4 and "selected among 4 points" in summary["headline"]["best"]
    df = load_study(NAME, uri(folder))
    outcomes = load_outcomes(NAME, uri(folder))
    runs = df[(df["point_id"] == best["point_id"]) & (df["status"] == "finished")]
    matrix = outcomes.table("probe/knn_top1_h", list(runs["run_id"])).to_numpy()
    assert np.allclose(matrix.mean(axis=1), runs["probe/knn_top1_h"].to_numpy(), rtol=0, atol=0)
    interval = two_source_interval(matrix)
    assert (best["ci_low"], best["ci_high"]) == (interval.low, interval.high)
    raw = outcomes.baselines[("raw", None)].aligned(outcomes.trials[runs["run_id"].iloc[0]].items)
    paired = summary["baselines"]["raw"]["standing"]["paired"]
    for row, test in zip(matrix, paired["per_seed"], strict=True):
        b = int(((row == 1) & (raw.correct("probe/knn_top1_h") == 0)).sum())
        c = int(((row == 0) & (raw.correct("probe/knn_top1_h") == 1)).sum())
        assert (test["only_trained"], test["only_baseline"]) == (b, c)
        assert test["mcnemar_p"] == mcnemar_exact(b, c)
    difference = paired["difference"]["mean"]
    if abs(difference) * 360 < 1:  # less than one item apart: never a win
        assert summary["baselines"]["raw"]["standing"]["verdict"] == "cannot be told apart"
    one_item = 100 / 360
    for line in stdout.splitlines():
        for size in re.findall(r"detectable[^:]*: ([^)]*)\)", line):
            for points in re.findall(r"([0-9.]+) points?", size):
                assert float(points) >= round(one_item, 2) - 1e-9, line


def test_the_default_studys_confirmation_states_its_cost_or_why_it_is_not_written(
    default_study, monkeypatch
):
    """On the default study (360 held-out items) the best point and its rival may lie within one
    item of each other (the shipped study's did: 0.14 points): a confirmation that would have to
    separate them is refused unless forced, saying so in items; either way, its cost against the
    study it follows is said."""
    folder, _, spec = default_study
    monkeypatch.chdir(folder)
    out = folder / "confirm.yaml"
    done = study_in_process("next", str(spec), "--confirm", "--out", str(out))
    if done.exit_code == 2:
        assert "the confirmation was not written" in done.stderr, done.stderr
        assert "of 360 (one item, 0.28 points" in done.stderr or "would cost" in done.stderr
        assert not out.exists()
        done = study_in_process("next", str(spec), "--confirm", "--force", "--out", str(out))
    assert done.exit_code == 0, done.output[-2000:]
    assert "on this machine" in done.stdout and "the compute of default-digits" in done.stdout
    out.unlink()
