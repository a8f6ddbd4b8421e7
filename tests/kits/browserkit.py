"""A real ``mlflow server`` and a real headless Chromium for the tests, and what the browser
tests work on (their fixtures are in browser_fixtures).

The server is started as its own process session and stopped by PID (it and every child it
started, checked gone). The browser is Debian's ``chromium`` driven by its ``chromium-driver``
through Selenium; ``scripts/setup_browser.sh`` installs them. Where either is missing the browser
tests fail (never skip) with a message naming that script, so CI cannot pass them silently.
Selenium is imported only where a browser is started: the server helpers need none of it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SETUP = "scripts/setup_browser.sh"
WIDTH, HEIGHT = 1400, 1000
REVIEW_WIDTHS = (1280, 1400)  # a laptop's window and a desktop's, MLflow's Assistant open
# a laptop's first screen: a 1280 x 800 window (Chromium's page in it is 657 px tall), or a page
# of 1280 x 800 (the browser full screen on such a display)
FIRST_SCREEN = (1280, 800)
# A person's browser has a mouse: CSS and plotly.js read hover from media queries, where
# headless Chromium answers "none" (no pointer device), and plotly then pins its tool bar over
# every chart's top edge. Blink's settings give it a mouse: hover 2 = hover, pointer 4 = fine.
DESKTOP_POINTER = ("--blink-settings=primaryHoverType=2,availableHoverTypes=2,"
                   "primaryPointerType=4,availablePointerTypes=4")  # fmt: skip


# -- a real mlflow server --
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mlflow_server(
    backend_store_uri: str,
    *,
    cwd: Path,
    default_artifact_root: Path | None = None,
    artifacts_destination: Path | None = None,
    log: Path | None = None,
    timeout: float = 120,
) -> tuple[subprocess.Popen, str]:
    """``mlflow server`` on a free port of 127.0.0.1 with one worker and no job runner, as its
    own process session; returns (process, url) once ``/health`` answers 200. Its output goes to
    ``log`` (quoted when it fails to start) or nowhere."""
    from studykit import wait_healthy

    port = free_port()
    command = [str(Path(sys.executable).with_name("mlflow")), "server",
               "--backend-store-uri", backend_store_uri]  # fmt: skip
    if default_artifact_root is not None:
        command += ["--default-artifact-root", str(default_artifact_root)]
    if artifacts_destination is not None:
        command += ["--artifacts-destination", str(artifacts_destination)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    out = open(log, "wb") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        server = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip
    finally:
        if log is not None:
            out.close()
    url = f"http://127.0.0.1:{port}"
    try:
        status = wait_healthy(url, server, timeout=timeout)
        assert status == 200, f"{url}/health answered {status}"
    except BaseException as err:
        stop_mlflow_server(server)
        tail = log.read_text(errors="replace")[-3000:] if log is not None else ""
        message = f"mlflow server did not start ({' '.join(command)}): {err}\n{tail}"
        raise AssertionError(message) from err
    return server, url


def stop_mlflow_server(server: subprocess.Popen, timeout: float = 20) -> None:
    """Terminate the server and every process under it by PID (SIGKILL after ``timeout`` s),
    then check that none of them is left."""
    procs = process_tree(server.pid)
    for proc in procs:
        with suppress(psutil.NoSuchProcess):
            proc.terminate()
    end_processes(procs, timeout)
    server.wait(timeout=10)  # reap it
    left = [p.pid for p in procs if _alive(p)]
    assert not left, f"mlflow server processes still running after stop: {left}"


def process_tree(pid: int) -> list[psutil.Process]:
    """The process and every process under it, as they are now."""
    try:
        top = psutil.Process(pid)
        return [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def end_processes(procs: list[psutil.Process], timeout: float = 10) -> None:
    """Wait ``timeout`` s for the processes to end, then SIGKILL those left and wait again."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        with suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=10)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- a real headless Chromium --
def require_chromium() -> None:
    """Fail (not skip) unless Chromium, its driver and Selenium are all here."""
    import importlib.util

    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if importlib.util.find_spec("selenium") is None:
        missing.append("the selenium package (the dev extra: bash scripts/setup_env.sh)")
    if missing:
        pytest.fail(
            f"the browser tests need {', '.join(missing)}: run `bash {SETUP}` (as root, or with "
            "sudo; it apt-installs chromium and chromium-driver), or deselect them with "
            "-m 'not browser'",
            pytrace=False,
        )


def headless_chromium(width: int = WIDTH, height: int = HEIGHT):
    """A headless Chromium through /usr/bin/chromedriver, with the browser console logged.
    End it with quit_chromium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-dev-shm-usage", f"--window-size={width},{height}",
                DESKTOP_POINTER):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    return driver


def quit_chromium(driver) -> None:
    """Quit the browser, then make sure chromedriver and every Chromium under it are gone."""
    service = getattr(driver.service, "process", None)
    procs = process_tree(service.pid) if service is not None else []
    driver.quit()
    end_processes(procs)


def screenshot_dir() -> Path:
    folder = Path(os.environ.get("BROWSER_SCREENSHOTS") or ROOT / "tests" / "output" / "browser")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(driver, name: str) -> Path:
    path = screenshot_dir() / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


@contextmanager
def screenshot_after(driver, name: str) -> Iterator[None]:
    """Save a screenshot of the page when the block ends, whether its checks passed or not."""
    try:
        yield
    finally:
        driver.switch_to.default_content()
        screenshot(driver, name)


def open_page(
    driver, url: str, width: int = WIDTH, height: int = HEIGHT, page: bool = False
) -> None:
    """Load ``url`` in a window of this size (with ``page``, a window whose page is this size),
    from a blank page (so nothing of the last page is left to match), with the console log
    drained."""
    driver.set_window_size(width, height)
    if page:  # the window's frame and bars take what the page does not get
        inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
        driver.set_window_size(2 * width - inner[0], 2 * height - inner[1])
    driver.get("about:blank")
    driver.get_log("browser")
    driver.get(url)


def page_text(driver) -> str:
    from selenium.common.exceptions import WebDriverException

    try:
        return driver.execute_script("return document.body ? document.body.innerText : ''") or ""
    except WebDriverException:
        return ""


def wait_until(driver, condition: Callable, what: str, timeout: float = 30):
    """WebDriverWait on ``condition(driver)``; on timeout, fail saying what was awaited, where
    the browser is and what the page shows."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    t0 = time.monotonic()
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.25).until(condition)
    except TimeoutException:
        shown = re.sub(r"\s+", " ", page_text(driver))[:1500]
        raise AssertionError(
            f"waited {time.monotonic() - t0:.0f} s for {what} at {driver.current_url}; "
            f"the page shows: {shown!r}"
        ) from None


def text_shown(driver, *texts: str) -> bool:
    """Whether the page's visible text holds every one of ``texts`` (compared as plain text)."""
    shown = plain(page_text(driver))
    return all(plain(t) in shown for t in texts)


def scroll_to_text(driver, text: str) -> bool:
    """Scroll the innermost element holding ``text`` (compared as plain text) to the middle of
    the window, so that a screenshot shows it; whether one was found."""
    return driver.execute_script(
        "const norm = s => s.replace(/[*_`]/g, '').replace(/\\s+/g, ' ').trim();"
        "let found = null;"
        "for (const e of document.body.querySelectorAll('*')) {"
        "  if (norm(e.textContent || '').includes(arguments[0])) found = e; }"
        "if (found) found.scrollIntoView({block: 'center'});"
        "return found !== null;",
        plain(text),
    )


def plain(text: str) -> str:
    """Text as a rendered page shows it, for comparing a stored string with a page: Markdown's
    emphasis and code marks and a line's heading, list or quote marker dropped, whitespace
    collapsed."""
    text = re.sub(r"(?m)^\s*(?:#{1,6}|[-*+]|>|\d+\.)\s+", "", text)
    text = re.sub(r"[*_`]", "", text)
    return re.sub(r"\s+", " ", text).strip()


OVERFLOW_JS = """
const w = window.innerWidth;
const clipped = e => {
  for (let a = e.parentElement; a && a !== document.body; a = a.parentElement)
    if (getComputedStyle(a).overflowX !== 'visible') return true;
  return false;
};
const right = e => {
  const r = e.getBoundingClientRect();
  const own = getComputedStyle(e).overflowX === 'visible' ? r.left + e.scrollWidth : r.right;
  return Math.max(r.right, own);
};
const over = [...document.querySelectorAll('body *')].filter(e => right(e) > w + 1 && !clipped(e));
const innermost = over.filter(e => !over.some(o => o !== e && e.contains(o)));
const blocks = new Map();  // the table, caption, paragraph ... each culprit is in -> right edge
for (const e of innermost) {
  const b = e.closest('table, pre, figcaption, figure, p, li, h1, h2, h3, h4, h5, h6') || e;
  blocks.set(b, Math.max(blocks.get(b) || 0, right(e)));
}
const ranked = [...blocks].sort((a, b) => b[1] - a[1]);
const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
  + (typeof e.className === 'string' && e.className.trim()
     ? '.' + e.className.trim().split(/\\s+/).join('.') : '');
return [document.documentElement.scrollWidth, w, ranked.length,
        ranked.slice(0, 6).map(([e, r]) => [Math.round(r), name(e),
          (e.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 40)])];
"""


def sideways_overflow(driver) -> tuple[int, int, int, list]:
    """(the page's scroll width, the window's inner width, how many blocks (tables, captions,
    paragraphs ...) reach past the window, the six that reach farthest: [right edge, tag.class,
    text]). What is inside a scrolling box does not count; text overflowing its own box does."""
    return tuple(driver.execute_script(OVERFLOW_JS))


HEADER_CELLS_JS = """
const grid = document.querySelector('.ag-root-wrapper');
if (!grid) return null;
const box = grid.getBoundingClientRect();
const cells = {};
for (const h of grid.querySelectorAll('.ag-header-cell[col-id]')) {
  const r = h.getBoundingClientRect();
  if (r.width > 0) cells[h.getAttribute('col-id')] = [r.left, r.right, r.top];
}
return {grid: [box.left, Math.min(box.right, window.innerWidth)], cells: cells,
        scroll: (document.querySelector('.ag-center-cols-viewport') || {}).scrollLeft || 0};
"""


def header_cells(driver) -> dict | None:
    """The runs table's header cells drawn now: ``{"grid": [left, right], "cells": {col-id:
    [left, right, top]}, "scroll": the table's sideways scroll}`` in window pixels (the grid's
    right edge no farther than the window's); None before the table is drawn."""
    return driver.execute_script(HEADER_CELLS_JS)


def columns_in_first_screen(driver, columns: list[str]) -> tuple[list[str], dict | None]:
    """Which of ``columns`` (ag-grid col-ids such as params.`temperature`) are not wholly
    inside the runs table's visible width, with the table unscrolled; and the geometry read."""
    cells = header_cells(driver)
    if cells is None:
        return list(columns), None
    left, right = cells["grid"]
    shown = cells["cells"]
    outside = [c for c in columns if c not in shown or shown[c][0] < left - 1
               or shown[c][1] > right + 1]  # fmt: skip
    return outside, cells


ASSISTANT_JS = """
const panel = [...document.querySelectorAll('div[data-assistant-ui]')].find(e => {
  const r = e.getBoundingClientRect();
  return r.width >= 200 && r.height >= 200 && (e.innerText || '').includes('Assistant'); });
if (panel) { const r = panel.getBoundingClientRect();
  return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; }
const fab = document.querySelector('button[data-assistant-ui]');
if (fab && arguments[0]) fab.click();
return null;
"""


def assistant_panel(driver, open_it: bool = True, timeout: float = 30) -> dict:
    """MLflow's Assistant panel, opened if it is not (its button, bottom right): its box in the
    window ``{left, top, right, bottom}``. A fresh browser's first page from localhost opens it by
    itself (and the browser remembers it open); this makes sure, whatever an earlier test did."""
    return wait_until(driver, lambda d: d.execute_script(ASSISTANT_JS, open_it),
                      "MLflow's Assistant panel, open", timeout=timeout)  # fmt: skip


def console_errors(driver) -> list[dict]:
    """The SEVERE entries of the browser console since it was last read."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


# -- what the browser tests work on --
@dataclass
class SmokeStudy:
    """The default study's smoke variant, run to the end in ``folder`` with an embedded SQLite
    store (``uri``); its artifacts are under ``artifacts`` and its report is ``report``."""

    folder: Path
    uri: str
    name: str
    experiment_id: str
    parent: object  # mlflow.entities.Run
    children: list  # mlflow.entities.Run, each read with get_run (so with its inputs)
    artifacts: Path
    report: Path
    stdout: str = ""  # what ``study run`` printed


@dataclass
class UI:
    driver: object  # selenium.webdriver.Chrome
    url: str  # the mlflow server
    study: SmokeStudy

    def open(self, fragment: str, **size) -> None:
        """Open a page of the UI as the study's own links do: in its model-training mode
        (``workflowType=machine_learning``; MLflow 3.17 otherwise opens its GenAI pages)."""
        from study.run_notes import UI_MODE

        if "workflowType=" not in fragment:
            fragment += ("&" if "?" in fragment else "?") + UI_MODE
        open_page(self.driver, f"{self.url}/#/{fragment}", **size)
