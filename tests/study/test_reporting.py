"""``study report`` (study/reporting.py) on a finished default study recorded in a real
embedded MLflow store without training (tests/kits/recordkit.py): the report folder written and
attached to the parent run, the parent's description the findings first with the design last,
the experiment's description pointing at the report, no store created for a results file read
where none is, and the description cut to MLflow's limit for a tag."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from recordkit import NAME, record_study

from analysis.findings.headline import Headline
from analysis.reading.load import read_results
from analysis.study_analysis import analyse
from search_spaces.spec import Goal
from study.export import export_parquet
from study.record import MAX_TAG, StudyRecord
from study.reporting import (
    findings_lead,
    make_report,
    parent_lead,
    parent_note,
    source_return,
)

NOTE = "mlflow.note.content"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return record_study(tmp_path_factory.mktemp("reporting"))


def headline(**fields) -> Headline:
    words = {"study": "s", "sentence": "The study in one sentence.",
             "target": "probe/knn_top1_h", "found": (), "not_detected": (), "missed": (),
             "best": None, "next_step": None}  # fmt: skip
    return Headline(**(words | fields))


@pytest.mark.slow
def test_a_report_without_figures_says_so_and_drawing_them_later_changes_no_number(
    recorded, tmp_path
):
    """``study run --no-figures`` and ``study report --no-figures``: every file but the figures,
    the page saying they were not drawn and how to draw them; drawn later, the numbers agree."""
    uri = recorded
    record = StudyRecord.existing(uri, NAME)
    bare, out = make_report(record, None, tmp_path / "bare", tracking_uri=uri, figures=False)
    assert not (out / "figures").exists()
    assert {p.name for p in out.iterdir()} >= {"report.html", "report.json", "evidence.md"}
    page = (out / "report.html").read_text()
    assert "The figures were not drawn for this report" in page and "study report" in page
    assert "data:image/svg+xml" not in page and "Figure index" not in page
    full, again = make_report(record, None, tmp_path / "full", tracking_uri=uri)
    assert len(list((again / "figures").glob("*.png"))) >= 5
    assert "Figure index" in (again / "report.html").read_text()
    assert json.dumps(bare, sort_keys=True, default=str) == json.dumps(
        full, sort_keys=True, default=str
    )


@pytest.mark.slow
def test_the_report_is_written_attached_and_described(recorded, tmp_path):
    uri = recorded
    record = StudyRecord.existing(uri, NAME)
    # without figures: what is attached and described is the same (drawing them is tested with
    # the default study, tests/study/test_default_study.py), and took most of this test's time
    summary, out = make_report(record, None, tmp_path / "report", tracking_uri=uri, figures=False)
    assert out == tmp_path / "report" and (out / "report.html").is_file()
    assert json.loads(json.dumps(summary)) == summary  # the JSON summary is plain JSON
    parent = record.parent()
    attached = [a.path for a in record.client.list_artifacts(parent.info.run_id, "report")]
    assert "report/report.html" in attached
    # the parent's description is the findings first, then the study's sentence, design last
    analysis = analyse(read_results(export_parquet(record, tmp_path / "r.parquet")))
    note = record.client.get_run(parent.info.run_id).data.tags[NOTE]
    assert note == parent_note(analysis.headline, parent, analysis.best, analysis.standings)
    assert note.startswith(parent_lead(analysis.headline, analysis.best, analysis.standings))
    assert f"\n\n{findings_lead(analysis.headline)}\n\n" in note
    assert analysis.headline.sentence in note
    assert note.rstrip().endswith("is the artifact `report/report.html`.")
    assert "**Design.**" in note.split("---")[-1]
    # the experiment's description points at the report and at the folder it was kept in
    described = record.client.get_experiment(record.experiment_id).tags[NOTE]
    assert "report/report.html" in described and str(out.resolve()) in described


@pytest.mark.slow
def test_the_study_files_goals_reach_the_report_through_the_record(tmp_path):
    goals = (Goal(metric="probe/knn_top1_h", goal="max", low=0.9, high=0.97),
             Goal(metric="z/uniform", goal="min", low=-4.5, high=-2.0, importance=2))  # fmt: skip
    (tmp_path / "store").mkdir()
    uri = record_study(tmp_path / "store", "with-goals", goals)
    record = StudyRecord.existing(uri, "with-goals")
    df = read_results(export_parquet(record, tmp_path / "r.parquet"))
    assert df.attrs["goals"] == [g.model_dump(mode="json") for g in goals]
    summary, out = make_report(record, None, tmp_path / "report", tracking_uri=uri)
    found = summary["desirability"]
    assert [g["metric"] for g in found["goals"]] == ["probe/knn_top1_h", "z/uniform"]
    assert 0 < found["overall"] <= 1
    # both goals are met best at the lowest temperature the design tried
    assert found["point"]["temperature"] == pytest.approx(0.1)
    assert "temperature" in found["edges"]
    assert "temperature" in found["point"] and found["responses"]["z/uniform"]["interval"]
    assert "Several goals at once (desirability)" in (out / "report.html").read_text()
    assert list((out / "figures").glob("desirability_temperature_batch_size.*"))


def test_a_record_without_evidence_artifacts_has_no_source_return(recorded, tmp_path):
    uri = recorded
    record = StudyRecord.existing(uri, NAME)
    df = read_results(export_parquet(record, tmp_path / "r.parquet"))
    assert source_return(record, df, tmp_path / "panels") == {}


@pytest.mark.slow
def test_a_results_file_where_no_store_is_creates_none(recorded, tmp_path):
    uri = recorded
    results = export_parquet(StudyRecord.existing(uri, NAME), tmp_path / "r.parquet")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    nowhere = f"sqlite:///{elsewhere / 'mlflow.db'}"
    # without figures (the numbers and the store are what is checked; drawing took most of it)
    summary, out = make_report(None, results, tmp_path / "out", tracking_uri=nowhere, figures=False)
    assert (out / "report.html").is_file() and list(elsewhere.iterdir()) == []
    again = make_report(None, results, tmp_path / "again", tracking_uri=nowhere, figures=False)
    assert summary == again[0]


def test_findings_lead_says_the_target_first_or_that_nothing_was_detected():
    assert findings_lead(headline()) == "**Findings.** No effect was detected."
    lead = findings_lead(headline(found=("A.", "B."), on_target="No effect on the target."))
    assert lead == "**Findings.** No effect on the target. A. B."


def test_the_parent_note_keeps_the_design_within_mlflows_limit():
    parent = SimpleNamespace(data=SimpleNamespace(
        params={"design": "full_factorial", "factors": "temperature, batch_size", "trials": "8",
                "replicates": "2", "resources": "{'cpu': 1}"},
        tags={"study.spec_sha": "abc123"}))  # fmt: skip
    short = parent_note(headline(best="p000 at 95%.", next_step="narrow the range."), parent)
    assert short.split("\n\n")[:3] == [
        "**In short.** No effect was detected. **Best:** p000 at 95%. **Next:** narrow the range.",
        "**Findings.** No effect was detected.", "The study in one sentence."]  # fmt: skip
    assert "**Best point.** P000 at 95%." in short and "**Next study.** Narrow the range." in short
    assert "full factorial design over temperature, batch_size: 8 trials, 2 replicates" in short
    assert "study file sha abc123" in short
    long = parent_note(headline(not_detected=tuple("x" * 400 for _ in range(40))), parent)
    assert len(long) <= MAX_TAG and "… (more in `report/report.html`)" in long
    assert long.endswith(short.split("---\n\n")[-1])  # the design paragraph survives the cut


def test_a_report_without_figures_loads_no_figure_package(recorded, tmp_path):
    """Without figures (as most studies of a test run, and ``study run --no-figures``), the
    report imports neither matplotlib nor the figure package: half a second of a study's tail."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from study.record import StudyRecord; "
            "from study.reporting import make_report; "
            f"make_report(StudyRecord.existing({recorded!r}, {NAME!r}), None, {str(tmp_path)!r}, "
            f"tracking_uri={recorded!r}, figures=False); "
            "print('matplotlib' in sys.modules, 'analysis.report.plots' in "
            "sys.modules)")  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.stdout.split() == ["False", "False"], done.stderr[-2000:]
    assert (tmp_path / "report.html").is_file() and not (tmp_path / "figures").exists()


def test_the_parent_lead_says_the_verdict_best_point_standing_and_next_step_without_evidence():
    """The lead (study.reporting.parent_lead) reads the analysis' objects and sentences, each
    cut at its evidence, which the sections after it give in full."""
    from analysis.findings.baselines import Standing
    from analysis.stats.best import BestPoint

    best = BestPoint("p001", {"temperature": 0.1, "batch_size": 256}, "probe/knn_top1_h", "max",
                     2, 0.975, 0.954, 0.996, finished=8, points=4)  # fmt: skip
    raw = Standing("raw", "probe/knn_top1_h", "probe/knn_top1_h", 0.975, (),
                   "cannot be told apart", 0.0)  # fmt: skip
    top = headline(on_target="No factor has a detectable effect on probe/knn_top1_h (smallest "
                   "detectable at 80% power: doubling temperature 0.79 points).",
                   next_step="run 5 replicates per point instead of 2.")  # fmt: skip
    assert parent_lead(top, best, (raw,)) == (
        "**In short.** No factor has a detectable effect on probe/knn_top1_h. **Best:** p001 "
        "(τ=0.1, B=256) at 97.5%, 95% interval 95.4% to 99.6% (2 replicates; selected among 4 "
        "points); it cannot be told apart from the raw input (97.5%), which lies within its 95% "
        "interval. **Next:** run 5 replicates per point instead of 2."
    )
    found = ("Doubling temperature lowers probe/knn_top1_h by 2.8 points (95% CI 1.2 points to "
             "4.4 points; Holm-adjusted p = 0.003).", "Doubling batch_size raises z/align by 0.01 "
             "(95% CI 0.004 to 0.02; Holm-adjusted p = 0.02).")  # fmt: skip
    lead = parent_lead(headline(found=found), None, ())
    assert lead == "**In short.** Doubling temperature lowers probe/knn_top1_h by 2.8 points."
