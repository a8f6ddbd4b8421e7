"""A real Chromium on a finished smoke study: the MLflow UI (a real ``mlflow server`` on the
study's SQLite record) and the study's report.html.

One smoke study, one server and one browser for the whole test run (browser_fixtures). Every
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
    FIRST_SCREEN,
    REVIEW_WIDTHS,
    UI,
    assistant_panel,
    columns_in_first_screen,
    console_errors,
    open_page,
    page_text,
    screenshot,
    screenshot_after,
    sideways_overflow,
    text_shown,
    wait_until,
)
from mlflow.tracking import MlflowClient

from study.mlflow_views import KEY_METRICS, POINTS_VIEW, TRIALS_VIEW, view_link

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


@pytest.mark.long
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


def study_columns(study) -> tuple[list[str], str]:
    """The smoke study's factors and target, as its parent run's params record them."""
    params = study.parent.data.params
    return params["factors"].split(", "), params["target_metric"]


def view_fragment(study, view: str, charts: bool = False) -> str:
    return view_link(study.experiment_id, view, charts=charts).removeprefix("#/")


@pytest.mark.parametrize("width", REVIEW_WIDTHS)
@pytest.mark.parametrize("view", [TRIALS_VIEW, POINTS_VIEW])
def test_saved_views_show_the_factors_target_and_probes_in_the_first_screen(
    ui: UI, view: str, width: int
):
    """With MLflow's sidebar and its Assistant panel open (a fresh browser's default), the
    saved views' factor, target and key-probe columns lie wholly inside the runs table's
    visible width, unscrolled: no sideways scroll to reach them."""
    study, driver = ui.study, ui.driver
    factors, target = study_columns(study)
    wanted = [*(f"params.`{f}`" for f in factors),
              *(f"metrics.`{m}`" for m in dict.fromkeys([target, *KEY_METRICS]))]  # fmt: skip
    found: dict = {}

    def all_inside(d) -> bool:
        outside, cells = columns_in_first_screen(d, wanted)
        found.update(outside=outside, cells=cells)
        return not outside

    with screenshot_after(driver, f"view-{view}-{width}px"):
        ui.open(view_fragment(study, view), width=width)
        with suppress(AssertionError):  # compared below, saying where each column is
            wait_until(driver, all_inside, f"the columns {wanted} in the first screen")
        assert not found.get("outside"), (
            f"saved view {view} at {width} px: {found.get('outside')} are not wholly inside "
            f"the table's visible width; the table and its header cells (left, right, top): "
            f"{found.get('cells')}"
        )


def chart_plots(driver) -> list[dict]:
    """Every chart drawn now: its axis titles, whether it is a scatter, a line or a
    parallel-coordinates chart (MLflow draws the chart view's with its own parcoords, outside
    plotly: then its card's text, which names its axes), and its top edge in the window."""
    return driver.execute_script(
        "return [...document.querySelectorAll('.js-plotly-plot')].map(p => ({"
        "  x: [...p.querySelectorAll('.g-xtitle text')].map(t => t.textContent),"
        "  y: [...p.querySelectorAll('.g-ytitle text')].map(t => t.textContent),"
        "  parallel: !!p.querySelector('.parcoords'),"
        "  scatter: !!p.querySelector('.scatterlayer .trace .points path'),"
        "  line: !!p.querySelector('.scatterlayer .trace .lines path'),"
        "  top: p.getBoundingClientRect().top})).concat("
        "  [...document.querySelectorAll('.parcoords')].filter(e => !e.closest('.js-plotly-plot'))"
        "  .map(e => ({x: [], y: [], parallel: true, scatter: false, line: false,"
        "    top: e.getBoundingClientRect().top, text: (e.closest("
        "      \"[data-testid='experiment-view-compare-runs-card']\") || e).innerText})));"
    )  # fmt: skip


def scroll_charts_to(driver, title: str) -> bool:
    """Scroll the chart view to the section whose title starts with ``title``."""
    return driver.execute_script(
        "for (const e of document.querySelectorAll('*')) {"
        "  if (e.children.length === 0 && (e.textContent || '').startsWith(arguments[0])) {"
        "    e.scrollIntoView({block: 'start'}); return true; } }"
        "return false;",
        title,
    )


@pytest.mark.parametrize("width", REVIEW_WIDTHS)
def test_chart_view_opens_on_the_target_against_each_factor_and_draws_curves_by_examples(
    ui: UI, width: int
):
    """The saved view's chart view: first the target against each factor (a scatter each, the
    factor on x, the target on y) and a parallel-coordinates chart, in the first screen; then
    the key curves, each against train/examples_seen."""
    study, driver = ui.study, ui.driver
    factors, target = study_columns(study)
    plots: list[dict] = []

    def first_section(d) -> bool:  # drawn, not only laid out: the parallel chart's axes too
        plots[:] = chart_plots(d)
        scatters = [p for p in plots if p["scatter"] and p["x"] and p["x"][0] in factors]
        axes = [p for p in plots if p["parallel"] and all(f in p.get("text", "") for f in factors)]
        return len(scatters) >= len(factors) and bool(axes)

    ui.open(view_fragment(study, TRIALS_VIEW, charts=True), width=width)
    with suppress(AssertionError):
        wait_until(driver, first_section, "the scatters and the parallel-coordinates chart")
    screenshot(driver, f"charts-{width}px")
    height = driver.execute_script("return window.innerHeight")
    scatters = {p["x"][0]: p for p in plots if p["scatter"] and p["x"]}
    problems = [f"no scatter of {target} against {f}" for f in factors
                if f not in scatters or scatters[f]["y"][:1] != [target]]  # fmt: skip
    problems += [f"the scatter of {f} starts below the first screen ({scatters[f]['top']:.0f} "
                 f"px of {height})" for f in factors if f in scatters
                 and scatters[f]["top"] > height]  # fmt: skip
    parallel = [p for p in plots if p["parallel"]]
    if not parallel:
        problems.append("no parallel-coordinates chart")
    elif parallel[0]["top"] > height:
        problems.append("the parallel-coordinates chart starts below the first screen")
    elif not all(f in parallel[0].get("text", "") for f in factors):
        problems.append(f"the parallel-coordinates chart's axes are not the factors {factors}")
    assert not problems, f"chart view at {width} px: {'; '.join(problems)}; charts: {plots}"
    with screenshot_after(driver, f"charts-curves-{width}px"):
        assert scroll_charts_to(driver, "curves against examples seen"), "no curves section"
        curves: list[dict] = []

        def three_curves(d) -> bool:  # drawn with their axes' titles, which come last
            curves[:] = [p for p in chart_plots(d) if p["line"] or "train/" in "".join(p["x"])]
            return len(curves) >= 3 and all(p["x"][:1] for p in curves[:3])

        with suppress(AssertionError):
            wait_until(driver, three_curves, "the target's and the key probes' curves")
        titles = [p["x"][:1] for p in curves]
        assert len(curves) >= 3 and all(t == ["train/examples_seen"] for t in titles[:3]), (
            f"the curves' x axes at {width} px are titled {titles}, not train/examples_seen"
        )


CHART_AREA = "[data-testid='experiment-view-compare-runs-chart-area']"  # the charts' scroll box
FACTOR_CARDS_JS = """
const [factors, target, mode] = arguments;
const area = document.querySelector("[data-testid='experiment-view-compare-runs-chart-area']");
const a = area ? area.getBoundingClientRect() : null;
const box = r => [Math.round(r.left), Math.round(r.top), Math.round(r.right), Math.round(r.bottom)];
const out = {window: [innerWidth, innerHeight], area: a && box(a), cards: {}};
for (const p of document.querySelectorAll('.js-plotly-plot')) {
  const x = [...p.querySelectorAll('.g-xtitle text')].map(t => t.textContent);
  const y = [...p.querySelectorAll('.g-ytitle text')].map(t => t.textContent);
  if (!x.length || !factors.includes(x[0])) continue;
  const card = p.closest("[data-testid='experiment-view-compare-runs-card']") || p;
  const heading = card.querySelector('h4') || card;
  const titles = [...p.querySelectorAll('.g-xtitle text, .g-ytitle text')]
    .map(t => box(t.getBoundingClientRect()));
  const points = [...p.querySelectorAll('.scatterlayer .trace .points path')]
    .map(e => { const r = e.getBoundingClientRect();
      return [r.left + r.width / 2, r.top + r.height / 2]; });
  const ys = points.map(q => q[1]);
  const edge = mode === 'min' ? Math.max(...ys) : Math.min(...ys);
  const best = points.filter(q => Math.abs(q[1] - edge) < 1);
  const shown = e => {  // drawn, not transparent (plotly's tool bar waits for the mouse)
    for (let a = e; a && a !== p; a = a.parentElement) { const cs = getComputedStyle(a);
      if (parseFloat(cs.opacity) < 0.1 || cs.visibility === 'hidden') return false; }
    return true; };
  const covered = best.map(([cx, cy]) => { const e = document.elementFromPoint(cx, cy);
    const over = !e || !p.contains(e) || (!!e.closest('.modebar') && shown(e));
    return over ? [cx, cy, e ? (e.className.baseVal ?? e.className) + ' ' + e.tagName
      : 'nothing'] : null; }).filter(Boolean);
  out.cards[x[0]] = {x: x, y: y, card: box(card.getBoundingClientRect()), titles: titles,
    heading: heading.textContent, tooltip: heading.getAttribute('title'),
    headingCut: heading.scrollWidth > heading.clientWidth + 1 ? [heading.clientWidth,
      heading.scrollWidth] : null, points: points.length, best: best.length, covered: covered};
}
return out;
"""


def test_chart_view_shows_each_target_by_factor_chart_whole_beside_the_assistant(ui: UI):
    """The saved view's chart view on a 1280 x 800 page, the Assistant open: each scatter of the
    target against a factor (two a row, study.mlflow_views.FACTOR_COLUMNS) lies wholly inside the
    window, inside the chart area's visible part and left of the Assistant panel, unscrolled:
    its heading (MLflow's "<factor> vs. <target>"; where the card is too narrow for it, cut
    with an ellipsis, its tooltip holds it whole), both axis titles and its points; nothing
    drawn covers its best points (with a mouse, plotly's tool bar shows only on hover). In a
    1280 x 800 window (a 657 px page) MLflow's header, shared-view notice and filters leave the
    chart area 228 px: no chart with its axes fits there (docs/mlflow.md); its screenshot is
    saved beside this one."""
    study, driver = ui.study, ui.driver
    factors, target = study_columns(study)
    mode = study.parent.data.params.get("target_mode", "max")
    found: dict = {}

    def drawn(d) -> bool:  # every factor's scatter, its axis titles and its points drawn
        found.clear()
        found.update(d.execute_script(FACTOR_CARDS_JS, factors, target, mode) or {})
        cards = found.get("cards", {})
        return set(cards) == set(factors) and all(c["points"] and len(c["titles"]) == 2
                                                  for c in cards.values())  # fmt: skip

    fragment = view_fragment(study, TRIALS_VIEW, charts=True)
    with screenshot_after(driver, "charts-1280x800-window"):  # what a 1280 x 800 window shows
        ui.open(fragment, width=FIRST_SCREEN[0], height=FIRST_SCREEN[1])
        assistant_panel(driver)
        with suppress(AssertionError):
            wait_until(driver, lambda d: d.find_elements("css selector", CHART_AREA),
                       "the chart area")  # fmt: skip
        window = driver.execute_script(FACTOR_CARDS_JS, factors, target, mode) or {}
        print(f"a 1280 x 800 window: page {window.get('window')}, chart area {window.get('area')}")
    with screenshot_after(driver, "charts-1280x800"):
        ui.open(fragment, width=FIRST_SCREEN[0], height=FIRST_SCREEN[1], page=True)
        panel = assistant_panel(driver)
        with suppress(AssertionError):
            wait_until(driver, drawn, f"the scatters of {target} against {factors}, drawn")
        cards = found.get("cards", {})
        assert set(cards) == set(factors), f"the scatters drawn: {sorted(cards)}; {found}"
        width, height = found["window"]
        area = found["area"] or [0, 0, width, height]
        problems = []
        for factor, c in cards.items():
            left, top, right, bottom = c["card"]
            if left < 0 or top < 0 or right > width or bottom > height:
                problems.append(f"{factor}: its card {c['card']} is not inside the window")
            if top < area[1] - 1 or bottom > area[3] + 1:
                problems.append(f"{factor}: its card {c['card']} is cut by the chart area {area}")
            if right > panel["left"] + 1:
                problems.append(f"{factor}: the Assistant panel {panel} covers its card")
            if c["x"][:1] != [factor] or c["y"][:1] != [target]:
                problems.append(f"{factor}: its axes are titled {c['x']} and {c['y']}")
            outside = [t for t in c["titles"] if t[0] < left or t[1] < top or t[2] > right
                       or t[3] > bottom]  # fmt: skip
            if outside:
                problems.append(f"{factor}: axis titles {outside} reach outside its card")
            if c["headingCut"] and c["tooltip"] != c["heading"]:
                problems.append(f"{factor}: its heading {c['heading']!r} is cut short")
            elif c["headingCut"]:  # MLflow's "<factor> vs. <target>" beside its buttons
                shown, whole = c["headingCut"]
                print(f"{factor}: the heading {c['heading']!r} shows {shown} of {whole} px, "
                      "the rest in its tooltip; its axis titles are whole")  # fmt: skip
            if not c["best"] or c["covered"]:
                problems.append(f"{factor}: its best points are covered: {c['covered']}")
        assert not problems, (
            f"chart view on a 1280 x 800 page, Assistant open: {'; '.join(problems)}; "
            f"chart area {area}, cards {cards}"
        )


@pytest.mark.parametrize("width", REVIEW_WIDTHS)
def test_compare_page_shows_a_parallel_coordinates_plot_and_the_factors(ui: UI, width: int):
    """MLflow's Compare page (runs selected, then Compare) picks its parallel-coordinates axes
    itself (the first three differing params by name, the first metric), which no tag or view
    configures: the study's own parallel-coordinates chart is in the chart view (the test
    above). Here: the page opens on such a plot, and its run table holds the factors."""
    study, driver = ui.study, ui.driver
    factors, _ = study_columns(study)
    ids = json.dumps([r.info.run_id for r in study.children])
    with screenshot_after(driver, f"compare-{width}px"):
        ui.open(f"compare-runs?runs={ids}&experiments={json.dumps([study.experiment_id])}",
                width=width)  # fmt: skip
        wait_until(driver, lambda d: d.find_elements("css selector", ".parcoords"),
                   "the Compare page's parallel-coordinates plot")  # fmt: skip
        shown = shows_soon(driver, ["Parallel Coordinates Plot", *factors])
        assert shown, f"the Compare page at {width} px does not name the factors {factors}"


LEAD_JS = """
const markers = arguments[0];
const boxes = [...document.querySelectorAll('div')].filter(d =>
  getComputedStyle(d).maxHeight !== 'none' && (d.innerText || '').startsWith('In short.'));
if (!boxes.length) return null;
const box = boxes[boxes.length - 1];
box.scrollIntoView({block: 'center'});
const b = box.getBoundingClientRect();
const lead = [...box.querySelectorAll('p')].find(p => p.innerText.startsWith('In short.'));
if (!lead) return null;
const nodes = [];
let text = '';
const walker = document.createTreeWalker(lead, NodeFilter.SHOW_TEXT);
while (walker.nextNode()) { nodes.push([walker.currentNode, text.length]);
  text += walker.currentNode.textContent; }
const lh = parseFloat(getComputedStyle(lead).lineHeight);
const lineOf = i => {  // the rendered line (1 = the box's first) of character i
  for (let k = nodes.length - 1; k >= 0; k--) if (nodes[k][1] <= i) {
    const r = document.createRange();
    r.setStart(nodes[k][0], i - nodes[k][1]); r.setEnd(nodes[k][0], i - nodes[k][1] + 1);
    const rects = r.getClientRects(); const c = rects[rects.length - 1];
    return c ? Math.floor((c.top + c.height / 2 - b.top) / lh) + 1 : null; }
  return null; };
const perLine = {};
for (let i = 0; i < text.length; i++) { const l = lineOf(i); if (l) perLine[l] = i + 1; }
const chars = Object.keys(perLine).map(Number).sort((x, y) => x - y)
  .map((l, k, ls) => perLine[l] - (k ? perLine[ls[k - 1]] : 0));
const found = markers.map(m => { const i = text.indexOf(m);
  return i < 0 ? [m, null, null] : [m, lineOf(i), lineOf(i + m.length - 1)]; });
return {box: [b.left, b.top, b.right, b.bottom], maxHeight: getComputedStyle(box).maxHeight,
        lineHeight: lh, leadTop: lead.getBoundingClientRect().top - b.top, chars: chars,
        found: found, text: text.slice(0, 700), window: [innerWidth, innerHeight]};
"""
SHOWN_LINES = 4  # of a description, what MLflow's run page shows clearly before "Show more"


def lead_markers(study) -> list[str]:
    """What the parent's lead must carry, in the analysis' own words (its report.json): the
    target's verdict (its first words), the best point with its interval, its standing against
    the raw input, and the next step (its first words)."""
    from analysis.stats.units import level

    report = json.loads((study.report.parent / "report.json").read_text())
    top, best = report["headline"], report["best_point"]
    target = [s for s in top["found"] if f" {top['target']} by " in s]
    verdict = top["on_target"] or (target or top["found"] or ["No effect was detected."])[0]
    markers = [verdict[:40], f"Best: {best['point_id']} ("]
    if best["ci_low"] is not None:
        metric = best["metric"]
        markers.append(f"interval {level(metric, best['ci_low'])} to "
                       f"{level(metric, best['ci_high'])}")  # fmt: skip
    raw = (report.get("baselines") or {}).get("raw") or {}
    if raw.get("standing"):
        markers.append(raw["standing"]["sentence"].split(": ", 1)[0])
    if top["next_step"]:
        markers.append(f"Next: {top['next_step'][:30]}")
    return markers


@pytest.mark.parametrize("width", REVIEW_WIDTHS)
def test_parent_description_opens_with_the_verdict_best_point_standing_and_next_step(
    ui: UI, width: int
):
    """A 1280 (or 1400) x 800 window, the Assistant open: MLflow's run page stacks the run's
    details above its description at this width (no setting changes that: docs/mlflow.md), and
    shows the description's first 100 px, the lower lines fading under "Show more". Its first
    four lines carry the lead (study.reporting.parent_lead): the target's verdict, the best point
    with its interval, its standing against the raw input and the next step."""
    study, driver = ui.study, ui.driver
    parent = study.parent
    note = parent.data.tags.get("mlflow.note.content", "")
    assert note.startswith("**In short.** "), note[:300]
    markers = lead_markers(study)
    geometry: dict = {}
    with screenshot_after(driver, f"parent-run-lead-{width}x800"):
        ui.open(f"experiments/{study.experiment_id}/runs/{parent.info.run_id}", width=width,
                height=FIRST_SCREEN[1])  # fmt: skip
        run_page_loaded(ui, parent.info.run_id)
        panel = assistant_panel(driver)

        def lead_drawn(d) -> bool:
            geometry.clear()
            geometry.update(d.execute_script(LEAD_JS, markers) or {})
            return bool(geometry.get("chars"))

        with suppress(AssertionError):
            wait_until(driver, lead_drawn, "the parent's description, its lead first")
        print(f"at {width} px the description box {geometry.get('box')} holds "
              f"{geometry.get('chars')} characters a line")  # fmt: skip
        assert geometry.get("chars"), f"no lead drawn: {geometry}"
        problems = []
        if abs(geometry["leadTop"]) > 2:
            problems.append(f"the lead starts {geometry['leadTop']:.0f} px into the box")
        if geometry["box"][2] > panel["left"] + 1:
            problems.append(f"the Assistant panel {panel} covers the box {geometry['box']}")
        for marker, first, last in geometry["found"]:
            if first is None:
                problems.append(f"{marker!r} is not in the lead")
            elif last > SHOWN_LINES:
                problems.append(f"{marker!r} ends on line {last}, past the first {SHOWN_LINES}")
        assert not problems, (
            f"parent run at {width} x 800, Assistant open: {'; '.join(problems)}; characters a "
            f"line {geometry['chars']}; the lead reads {geometry['text']!r}"
        )


def test_child_run_first_screen_shows_its_factors_and_target_value(ui: UI):
    """A child run's page at 1280 x 800, the Assistant open, unscrolled: its name (the page's
    heading, study.run_notes.finished_name) gives its factor values and its target's value. Its
    description, which says so too in its first line, lies below the fold at this width."""
    from analysis.stats.units import level
    from search_spaces.designs import ABBREVIATIONS

    study, driver = ui.study, ui.driver
    factors, target = study_columns(study)
    child = study.children[0]
    value = level(target, child.data.metrics[target])
    wanted = [*(f"{ABBREVIATIONS.get(f, f)}={child.data.params[f]}" for f in factors),
              f"{target} {value}"]  # fmt: skip
    note = child.data.tags.get("mlflow.note.content", "").splitlines()
    assert note and all(w in note[0] for w in wanted), (wanted, note[:1])
    found: dict = {}
    with screenshot_after(driver, "child-run-first-screen-1280x800"):
        ui.open(f"experiments/{study.experiment_id}/runs/{child.info.run_id}",
                width=FIRST_SCREEN[0], height=FIRST_SCREEN[1])  # fmt: skip
        run_page_loaded(ui, child.info.run_id)
        panel = assistant_panel(driver)

        def heading(d) -> bool:
            found.clear()
            found.update(d.execute_script(
                "const h = [...document.querySelectorAll('h1, h2')].find(e =>"
                "  arguments[0].every(w => e.textContent.includes(w)));"
                "if (!h) return null; const r = h.getBoundingClientRect();"
                "return {text: h.textContent, box: [r.left, r.top, r.right, r.bottom],"
                "  cut: h.scrollWidth > h.clientWidth + 1, window: [innerWidth, innerHeight],"
                "  scrolled: window.scrollY};", wanted) or {})  # fmt: skip
            return bool(found)

        with suppress(AssertionError):
            wait_until(driver, heading, f"a heading naming {wanted}")
        assert found, f"no heading of child run {child.info.run_name!r} shows {wanted}"
        left, top, right, bottom = found["box"]
        width, height = found["window"]
        problems = []
        if found["scrolled"] or top < 0 or bottom > height or left < 0 or right > width:
            problems.append(f"it lies outside the unscrolled window {found['window']}")
        if right > panel["left"] + 1:
            problems.append(f"the Assistant panel {panel} covers it")
        if found["cut"]:
            problems.append("it is cut short")
        assert not problems, f"the heading {found['text']!r} {found['box']}: {'; '.join(problems)}"


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


PANEL_JS = """
// the viewer shows the file from a blob: URL, so the panel is the page's largest image
const img = [...document.querySelectorAll('img')].filter(i => i.complete && i.naturalWidth > 200)
  .sort((a, b) => b.naturalWidth * b.naturalHeight - a.naturalWidth * a.naturalHeight)[0];
if (!img) return null;
const c = document.createElement('canvas');
c.width = img.naturalWidth; c.height = img.naturalHeight;
const g = c.getContext('2d');
g.drawImage(img, 0, 0);
const head = g.getImageData(0, 0, c.width, 14).data;  // the strip of column labels
let dark = 0;
for (let k = 0; k < head.length; k += 4) if (head[k] < 100 && head[k + 1] < 100) dark++;
return {width: img.naturalWidth, height: img.naturalHeight, dark: dark};
"""


def test_child_source_return_panel_labels_its_columns(ui: UI):
    """A child's ``evidence/source_return.png`` in MLflow's artifact viewer: its top strip holds
    the column labels (anchor, positive, negative 1 …) in dark text."""
    study, driver = ui.study, ui.driver
    child = study.children[0]
    found: dict = {}
    with screenshot_after(driver, "child-source-return"):
        ui.open(f"experiments/{study.experiment_id}/runs/{child.info.run_id}/artifacts/"
                "evidence/source_return.png")  # fmt: skip

        def drawn(d) -> bool:
            found.update(d.execute_script(PANEL_JS) or {})
            return bool(found)

        wait_until(driver, drawn, "evidence/source_return.png in the artifact viewer")
        assert found["dark"] > 50, f"the panel's top strip holds no label text: {found}"


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
