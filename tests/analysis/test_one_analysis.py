"""One analysis, one answer: the README's snippet, the notebook and the report
call ``analyse`` and print ``ResponseFit.summary()``: the same model, the same block term (and why),
the same R² and the same optimum, or the same sentence saying why none is named."""

from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from recordkit import NAME, record_study

from analysis import analyse, fit_response_surface, load_study, write_report
from analysis.stats.fits import model_order

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MARKER = "<!-- one-analysis snippet -->"
SETTINGS = ("MLFLOW_TRACKING_URI", "TRACKING_URI", "STUDY", "STUDY_RESULTS")


def readme_snippet(text: str) -> str:
    """The python block that follows the marker line in the README."""
    assert MARKER in text, f"README.md has no line {MARKER!r}: the one-analysis snippet follows it"
    block = re.search(r"```python\n(.*?)```", text.split(MARKER, 1)[1], re.S)
    assert block, f"README.md has no ```python block after {MARKER!r}"
    return block.group(1)


def page_text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "\n", page))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """The folder whose mlflow.db holds a finished study (as ``study run`` there leaves it)."""
    root = tmp_path_factory.mktemp("store")
    record_study(root)
    return root


@pytest.mark.slow
def test_the_readme_snippet_prints_what_the_report_says(store, tmp_path):
    snippet = readme_snippet((ROOT / "README.md").read_text())
    (response,) = re.findall(r"""fits\[["']([^"']+)["']\]""", snippet)
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    below = store / "notes"  # a folder under the store's: it is found as the CLI finds it
    below.mkdir(exist_ok=True)
    ran = subprocess.run([sys.executable, "-c", snippet], cwd=below, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    printed = ran.stdout.strip()
    report = subprocess.run(
        [str(BIN / "study"), "report", NAME, "--out", str(tmp_path / "report"), "--json"],
        cwd=store, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    assert printed == json.loads(report.stdout)["responses"][response]["summary"]
    shown = page_text((tmp_path / "report" / "report.html").read_text())
    for line in printed.splitlines():
        assert line in shown, line
    assert not (below / "mlflow.db").exists()


def test_the_report_page_and_json_carry_every_summary(store, tmp_path):
    result = analyse(load_study(NAME, f"sqlite:///{store / 'mlflow.db'}"))
    written = write_report(result, tmp_path)
    shown = page_text(written["report.html"].read_text())
    data = json.loads(written["report.json"].read_text())
    for name, fit in result.fits.items():
        summary = fit.summary()
        assert data["responses"][name]["summary"] == summary
        for line in summary.splitlines():
            assert line in shown, (name, line)


def test_the_summary_says_the_model_the_block_term_and_why_the_optimum_is_named(store):
    df = load_study(NAME, f"sqlite:///{store / 'mlflow.db'}")
    fit = analyse(df).fits["probe/knn_top1_h"]
    lines = fit.summary().splitlines()
    # two levels per factor: no curvature term, so the model is named first order
    assert lines[0] == ("Model of probe/knn_top1_h (maximised, n = 8): first order with "
                        "two-factor interactions: temperature, batch_size, "
                        "temperature × batch_size.")  # fmt: skip
    assert lines[1].startswith("Block term: replicate is modelled as a block (the seeds are "
                               "common across points")  # fmt: skip
    # the bare fit (no block term) is what the old README printed: the summary names its R² too
    bare = fit_response_surface(df, "probe/knn_top1_h")
    assert lines[2].startswith(f"R² = {fit.surface.r2:.3f} ({bare.r2:.3f} without the block term)")
    assert lines[3].startswith("The model of probe/knn_top1_h beats the mean")
    assert lines[4].startswith("Predicted optimum in the design region: temperature = 0.1")
    assert "95% CI" in lines[4]


def test_no_optimum_is_named_in_the_same_words_everywhere(store):
    """Only seed luck: the model does not beat the mean, and every reader says why no optimum
    is named in one sentence."""
    df = load_study(NAME, f"sqlite:///{store / 'mlflow.db'}")
    df["probe/knn_top1_h"] = 0.9 + df["replicate"].map({0: 0.004, 1: -0.004}) + [
        0.003, -0.002, -0.001, 0.002, 0.002, -0.003, -0.002, 0.001][: len(df)]  # fmt: skip
    fit = analyse(df, ("probe/knn_top1_h",)).fits["probe/knn_top1_h"]
    last = fit.summary().splitlines()[-1]
    assert last.startswith("No optimum is named: the model does not beat the mean (model F test")
    assert fit.to_json()["optimum"] is None
    assert last in fit.findings.sentences()


def test_without_replicates_the_summary_says_why_there_is_no_block(store):
    df = load_study(NAME, f"sqlite:///{store / 'mlflow.db'}")
    once = df[df["replicate"] == 0].copy()
    once.attrs = df.attrs
    fit = analyse(once, ("z/align",)).fits["z/align"]
    assert fit.block_sentence() == ("Block term: none: the trials ran in one block and each point "
                                    "ran once: there is nothing to block on.")  # fmt: skip
    assert "without the block term" not in fit.fit_sentence()
    assert math.isfinite(fit.surface.r2)


@pytest.mark.parametrize(
    ("terms", "name"),
    [
        (["t", "b", "t:b"], "first order with two-factor interactions"),
        (["temperature", "batch_size"], "first order (main effects only)"),
        (["temperature", "I(temperature ** 2)"], "second order, no interactions"),
        (["t", "b", "I(t ** 2)", "t:b"], "second order with two-factor interactions"),
    ],
)
def test_a_model_is_named_by_the_terms_it_holds(terms, name):
    assert model_order(terms) == name
