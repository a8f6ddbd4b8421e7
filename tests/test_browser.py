"""A real Chromium on a finished smoke study: the MLflow UI (a real ``mlflow server`` on the
study's SQLite record) and the study's report.html.

One smoke study, one server and one browser for the whole module (browser_fixtures). Every
test saves a screenshot under tests/output/browser/ (or $BROWSER_SCREENSHOTS). Chromium and its
driver come from ``scripts/setup_browser.sh``; without them these tests fail, they never skip.
Deselect them with ``-m "not browser"``.
"""

from __future__ import annotations

import json
from contextlib import suppress
from pathlib import PurePosixPath

import mlflow
import pytest
from browserkit import (
    UI,
    console_errors,
    open_page,
    page_text,
    screenshot_after,
    scroll_to_text,
    sideways_overflow,
    text_shown,
    wait_until,
)
from mlflow.tracking import MlflowClient

pytest_plugins = ["browser_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_NAME_CELL = "[col-id*='Run Name']"  # the runs table's Run Name column (ag-grid)


def run_page_loaded(ui: UI, run_id: str) -> None:
    """Wait until the run page shows the run (its overview lists the run id)."""
    wait_until(ui.driver, lambda d: run_id in page_text(d), f"the run page of {run_id}")


def table_columns(driver) -> set[str]:
    """The names of the runs table's columns (ag-grid header ids such as params.`temperature`)
    drawn now, then the table scrolled half a view to the right (wrapping round at the end):
    the grid draws only the columns in view, so repeated calls see them all."""
    return set(driver.execute_script(
        "const ids = Array.from(document.querySelectorAll('.ag-header-cell[col-id]'))"
        "  .map(h => h.getAttribute('col-id'));"
        "const v = document.querySelector('.ag-body-horizontal-scroll-viewport');"
        "if (v) { const next = v.scrollLeft + v.clientWidth / 2;"
        "  v.scrollLeft = next >= v.scrollWidth - v.clientWidth + v.clientWidth / 2 ? 0 : next; }"
        "return ids.map(id => (id.match(/`(.*)`/) || [null, id])[1]);"
    ))  # fmt: skip


def shows_soon(driver, texts: list[str], timeout: float = 10) -> bool:
    """Whether every one of ``texts`` is on the page within ``timeout`` s (a loaded page's
    sections may render a moment after its header)."""
    if not texts:
        return False
    try:
        wait_until(driver, lambda d: text_shown(d, *texts), f"{texts}", timeout=timeout)
    except AssertionError:
        return False
    return True


def test_the_address_study_run_prints_opens_the_runs_table_with_factors_and_metrics(ui: UI):
    """MLflow 3.17's UI lands on its GenAI overview unless the URL (or the browser's stored
    choice) says ``workflowType=machine_learning``; the experiment's ``mlflow.experimentKind``
    tag alone does not route it. So the study prints, and its description links, an address
    that says so and opens the saved view of its trials: one step to the factor and metric
    columns."""
    study, driver = ui.study, ui.driver
    printed = [line for line in study.stdout.splitlines() if "#/experiments/" in line]
    assert printed, f"study run printed no address of its runs table:\n{study.stdout[-2000:]}"
    fragment = printed[-1].split("#/", 1)[1]
    kind = (
        MlflowClient(study.uri)
        .get_experiment(study.experiment_id)
        .tags.get("mlflow.experimentKind")
    )
    assert kind == "custom_model_development"
    with screenshot_after(driver, "experiment"):
        ui.open(fragment)
        wait_until(driver, lambda d: "Run Name" in page_text(d)
                   or "token usage" in page_text(d).lower(),
                   "the experiment page (its runs table or the GenAI overview)")  # fmt: skip
        text = page_text(driver)
        assert "Run Name" in text and "token usage" not in text.lower(), (
            f"{printed[-1]} opened {driver.current_url}: the GenAI overview (Traces, Latency, "
            f"Token usage), not the training runs table (MLflow {mlflow.__version__})"
        )
        columns = {"temperature", "batch_size", "probe/knn_top1_h", "z/align", "z/uniform"}
        seen: set[str] = set()

        def all_columns(d) -> bool:  # the grid draws only the columns in view: scroll across
            seen.update(table_columns(d))
            return columns <= seen

        with suppress(AssertionError):  # compared below, saying what is missing
            wait_until(driver, all_columns, "the factor and metric columns", timeout=20)
        assert columns <= seen, (
            f"the runs table at {driver.current_url} lacks the columns {sorted(columns - seen)}; "
            f"it has {sorted(seen)}"
        )


def test_expanding_the_parent_shows_every_child_by_name(ui: UI):
    study, driver = ui.study, ui.driver
    from selenium.webdriver.common.by import By

    parent_id = study.parent.info.run_id
    expected = {r.info.run_name for r in study.children}
    assert len(expected) == len(study.children) >= 2, "the smoke study's child run names"
    shown: dict[str, str] = {}

    def rows(d) -> dict[str, str]:  # row id -> the name its Run Name cell links to its run by
        return d.execute_script(
            "const out = {};"
            "document.querySelectorAll(\"div[role='row'][row-id]\").forEach(r => {"
            f"  const a = r.querySelector(\"{RUN_NAME_CELL} a[href*='/runs/']\");"
            "  if (a) out[r.getAttribute('row-id')] = a.textContent.trim(); });"
            "return out;"
        )

    def all_children_shown(d) -> bool:
        shown.clear()
        shown.update({k: v for k, v in rows(d).items() if k != parent_id})
        return set(shown.values()) >= expected

    with screenshot_after(driver, "parent-expanded"):
        ui.open(f"experiments/{study.experiment_id}/runs")
        expander = f"div[role='row'][row-id='{parent_id}'] {RUN_NAME_CELL} button"
        button = wait_until(
            driver, lambda d: d.find_elements(By.CSS_SELECTOR, expander),
            f"the expander of the parent run {study.parent.info.run_name!r} in the runs table",
        )[0]  # fmt: skip
        if not all_children_shown(driver):  # collapsed, as the UI opens it
            button.click()
        with suppress(AssertionError):  # compared below, saying what is missing
            wait_until(driver, all_children_shown, "the child runs", timeout=20)
        assert set(shown.values()) == expected, (
            f"expanding parent run {study.parent.info.run_name!r} shows child runs "
            f"{sorted(shown.values())}; the record has {sorted(expected)}"
        )


def test_parent_run_page_shows_the_findings(ui: UI):
    """The parent's description leads with the report's headline: the study in one sentence,
    then its findings (``analysis.headline``)."""
    study, driver = ui.study, ui.driver
    parent = study.parent
    note = parent.data.tags.get("mlflow.note.content", "")
    summary = json.loads((study.report.parent / "report.json").read_text())["headline"]
    assert note.startswith(summary["sentence"] + "\n\n**Findings**"), note[:300]
    first_finding = (summary["found"] or summary["not_detected"])[0]
    with screenshot_after(driver, "parent-run"):
        ui.open(f"experiments/{study.experiment_id}/runs/{parent.info.run_id}")
        run_page_loaded(ui, parent.info.run_id)
        shown = shows_soon(driver, [summary["sentence"], "Findings", first_finding])
        scroll_to_text(driver, summary["sentence"])
        assert shown, (
            f"the parent's run page does not show its findings: {summary['sentence']!r}, "
            f"{first_finding!r}"
        )


def test_child_run_page_shows_its_dataset_and_source(ui: UI):
    study, driver = ui.study, ui.driver
    child = study.children[0]
    datasets = [i.dataset.name for i in child.inputs.dataset_inputs] if child.inputs else []
    source = child.data.tags.get("mlflow.source.name", "")
    # the run page shows a local source by its last path segment (…/study/trainable.py as
    # trainable.py)
    source_shown = PurePosixPath(source).name or source
    with screenshot_after(driver, "child-run"):
        ui.open(f"experiments/{study.experiment_id}/runs/{child.info.run_id}")
        run_page_loaded(ui, child.info.run_id)
        shows_soon(driver, [*datasets, source_shown] if source else datasets)
        problems = []
        if not datasets:
            problems.append("the record gives it no dataset input (run.inputs.dataset_inputs "
                            "is empty)")  # fmt: skip
        elif not text_shown(driver, *datasets):
            problems.append(f"its dataset {datasets} is in the record but not on the page")
        if not source:
            problems.append("the record gives it no mlflow.source.name tag")
        elif not text_shown(driver, source_shown):
            problems.append(f"its source {source!r} (shown as {source_shown!r}) is in the "
                            "record but not on the page")  # fmt: skip
        assert not problems, f"child run {child.info.run_name!r}: " + "; ".join(problems)


def test_parent_report_artifact_opens_in_the_ui(ui: UI):
    study, driver = ui.study, ui.driver
    from selenium.webdriver.common.by import By

    parent_id = study.parent.info.run_id
    with screenshot_after(driver, "parent-report-artifact"):
        ui.open(f"experiments/{study.experiment_id}/runs/{parent_id}/artifacts/report/report.html")
        frame = wait_until(driver, lambda d: d.find_elements(By.TAG_NAME, "iframe"),
                           "the artifact viewer's frame of report/report.html")[0]  # fmt: skip
        driver.switch_to.frame(frame)
        wait_until(driver, lambda d: study.name in page_text(d),
                   f"report.html (naming {study.name!r}) in the artifact viewer")  # fmt: skip


@pytest.mark.parametrize("width", [1400, 400])
def test_report_html_renders(browser, smoke_study, width: int):
    driver = browser
    assert smoke_study.report.is_file(), f"no report at {smoke_study.report}"
    with screenshot_after(driver, f"report-{width}px"):
        open_page(driver, smoke_study.report.as_uri(), width=width)
        wait_until(driver, lambda d: d.execute_script(
            "return document.readyState === 'complete' && "
            "Array.from(document.images).every(i => i.complete)"
        ), "report.html and its images to load")  # fmt: skip
        problems = []
        headline = driver.execute_script(
            "const h = document.getElementById('headline'); return h ? h.innerText.trim() : null"
        )
        if headline is None:
            problems.append("no element with id 'headline'")
        elif not headline:
            problems.append("the element with id 'headline' shows no text")
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.naturalWidth, i.getAttribute('src')])"
        )
        if not images:
            problems.append("no <img> at all")
        broken = [src[:80] for natural, src in images if not natural > 0]
        if broken:
            problems.append(f"{len(broken)} of {len(images)} images did not load: {broken}")
        if width <= 400:
            scroll, inner, count, farthest = sideways_overflow(driver)
            if scroll > inner + 1:
                problems.append(
                    f"it scrolls sideways: {scroll} px of content in a {inner} px window; "
                    f"{count} blocks reach past it, farthest (right edge, element, text): "
                    f"{farthest}"
                )
        errors = [e["message"][:300] for e in console_errors(driver)]
        if errors:
            problems.append(f"the browser console has errors: {errors}")
        assert not problems, f"report.html at {width} px: " + "; ".join(problems)
