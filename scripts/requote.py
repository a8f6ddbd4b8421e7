"""Every output quoted in README.md and docs/*.md, produced again from the command it quotes.

A block that quotes what a command printed sits right under a marker line that ties it to one
entry of :data:`REGISTRY` (or to a recorded run's fixture under ``docs/quotes/``)::

    <!-- quote: walkthrough-plan -->
    <!-- quote: some-id; machine: line prefix one, line prefix two -->

``machine:`` names the lines that differ from machine to machine by how they start: such a line
is compared up to its prefix only. A block that looks like a quote but is not one (a layout
sketch, a summary written by hand) says why instead: ``<!-- not a quote: REASON -->``.

Quotes are compared after :func:`normalise`: times (``in 0.2 s``, ``elapsed 42 s``, ``ETA 96 s``,
clock times) and the lines the marker names; absolute paths are mapped by the producers (the
walk-through's scratch folder reads ``/tmp/my-study``, this environment's ``bin`` ``/…/.venv/bin``).
In the quotes of the walk-through's trained study, the numbers another CPU's arithmetic may move
are forgiven as far as the README promises (:func:`numbers_agree`: words and counts exact, an
accuracy within 1 point, a p-value within a factor of 3, other figures within 35%); such a quote
is not rewritten. Nothing else is forgiven.

    .venv/bin/python scripts/requote.py               # rewrite every marked block from fresh runs
    .venv/bin/python scripts/requote.py --check       # compare only; exit 1 on a difference
    .venv/bin/python scripts/requote.py --only ID     # one quote (repeatable)
    .venv/bin/python scripts/requote.py --list        # the registry: each id and what it runs
    .venv/bin/python scripts/requote.py --fixture ID --from FOLDER_OR_URI --study NAME
        # (re)build docs/quotes/ID/ from a recorded study, then rewrite the block marked ID

``--from`` is the folder a study was run from (its ``mlflow.db`` and ``studies/``) or a tracking
URI (with ``--storage`` for the folder of its studies, when its ``results.parquet`` is wanted
rather than an export of the record). ``tests/repository/test_quoted_outputs.py`` runs the same
producers and fails on any difference.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# the sibling module, whether this file runs as a script or is loaded by path (the tests)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from requote_text import (
    QUOTE_ID,
    ROOT,
    Block,
    all_blocks,
    blocks,
    difference,
    rows_elided,
)

BIN = Path(sys.executable).parent  # this environment's console scripts: study, mlflow
QUOTES = ROOT / "docs" / "quotes"  # one folder per recorded run a quote is regenerated from
COLUMNS = 100  # the terminal width every quoted command runs at (rich tables wrap to it)

# --- running what a quote quotes -----------------------------------------------------------------


class QuoteError(RuntimeError):
    """A quote could not be produced (a command failed unexpectedly, the README changed)."""


@dataclass
class Workshop:
    """Where quotes are produced: a scratch folder, the environment commands run with, and the
    walk-through's study, run once (:meth:`walkthrough`) for every quote that reads it."""

    root: Path
    concurrency: int = 1  # trials at once in the studies it runs (tests run one at a time)
    _walked: dict[str, str] | None = field(default=None, repr=False)
    _failed: str | None = field(default=None, repr=False)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("MLFLOW_TRACKING_URI", "COLUMNS", "LINES", "FORCE_COLOR",
                            "TTY_COMPATIBLE", "STUDY", "TRACKING_URI")}  # fmt: skip
        env |= {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "COLUMNS": str(COLUMNS),
                "NO_COLOR": "1", "TERM": "dumb"}  # fmt: skip
        # measured baselines, MLflow's store template and the data cache: the test run's own
        # under pytest (tests/conftest.py), else this workshop's, never the user's
        for name, sub in (("CONTRASTIVE_BASELINE_CACHE", "baselines"),
                          ("CONTRASTIVE_STORE_CACHE", "mlflow-store"),
                          ("CONTRASTIVE_DATA_CACHE", "data")):  # fmt: skip
            env.setdefault(name, str(self.root / "cache" / sub))
        return env | extra

    def folder(self, name: str) -> Path:
        """A fresh folder holding the README's ``my_study.yaml``."""
        where = self.root / name
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        (where / "my_study.yaml").write_text(readme_study_file(), encoding="utf-8")
        return where

    def run(self, argv: list[str], cwd: Path, *, merge: bool = True, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:  # fmt: skip
        argv = [str(BIN / argv[0]) if (BIN / argv[0]).exists() else argv[0], *argv[1:]]
        return subprocess.run(
            argv, cwd=cwd, env=env or self.env(), text=True, timeout=timeout,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
        )  # fmt: skip

    def walkthrough(self) -> dict[str, str]:
        """The README's walk-through study, run once as its section 4 runs it (the smoke run,
        then the study), in the folder ``my-study``: {"folder", "smoke", "run"} (the folder, and
        the stdout of each run)."""
        if self._failed is not None:  # said once: every quote that reads it fails with it
            raise QuoteError(f"the walk-through's study failed: {self._failed}")
        if self._walked is None:
            where = self.folder("my-study")
            outputs = {"folder": str(where)}
            try:
                for what, extra in (("smoke", ["--smoke"]), ("run", [])):
                    argv = ["study", "run", "my_study.yaml", *extra, *self.study_flags()]
                    outputs[what] = self.study_process(argv, where)
            except (QuoteError, subprocess.TimeoutExpired) as err:
                self._failed = str(err)
                raise
            self._walked = outputs
        return self._walked

    def study_flags(self) -> list[str]:
        """What the workshop adds to a quoted ``study run``: one trial at a time (as every test
        runs; the quoted lines do not depend on it) and no figures (no quoted line reads one)."""
        return ["--max-concurrent", str(self.concurrency), "--no-figures"]

    def study_process(self, argv: list[str], cwd: Path, timeout: float = 1500) -> str:
        """``study run`` with a Ray of its own (``RAY_TMPDIR`` in a short temporary folder),
        every process that mentions it killed by PID afterwards; its stdout."""
        ray_tmp = tempfile.mkdtemp(prefix="rq", dir="/tmp")
        try:
            done = self.run(argv, cwd, merge=False, timeout=timeout,
                            env=self.env(RAY_TMPDIR=ray_tmp))  # fmt: skip
        finally:
            kill_processes_mentioning(ray_tmp)
            shutil.rmtree(ray_tmp, ignore_errors=True)
        if done.returncode != 0:
            raise QuoteError(f"{shlex.join(argv)} exited {done.returncode}:\n"
                             f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")  # fmt: skip
        return done.stdout


def kill_processes_mentioning(text: str) -> None:
    """End, by PID, every process whose command line or environment mentions ``text`` (a Ray
    left behind by a study this workshop ran)."""
    try:
        import psutil
    except ImportError:  # without the dev extra: nothing to look through
        return
    killed = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if text in cmdline or any(text in v for v in proc.environ().values()):
                proc.kill()
                killed.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    psutil.wait_procs(killed, timeout=10)


# --- the walk-through's inputs, read from the README itself ----------------------------------


def readme_text() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def readme_study_file() -> str:
    """The ```yaml block after "Save this as `my_study.yaml`" in the README's walk-through."""
    found = re.search(r"Save this as `my_study\.yaml`.*?```yaml\n(.*?)```", readme_text(), re.S)
    if found is None:
        raise QuoteError("README.md: no ```yaml block after 'Save this as `my_study.yaml`'")
    return found.group(1)


def readme_snippet() -> str:
    """The ```python block after the README's ``<!-- one-analysis snippet -->`` line."""
    after = readme_text().split("<!-- one-analysis snippet -->", 1)
    found = re.search(r"```python\n(.*?)```", after[-1], re.S) if len(after) == 2 else None
    if found is None:
        raise QuoteError("README.md: no ```python block after '<!-- one-analysis snippet -->'")
    return found.group(1)


def edited(text: str, edits: tuple[tuple[str, str], ...]) -> str:
    """``text`` with each (old, new) replaced; each old must occur exactly once."""
    for old, new in edits:
        if text.count(old) != 1:
            raise QuoteError(
                f"expected {old!r} once in the README's my_study.yaml, found it "
                f"{text.count(old)} times: update the edit in scripts/requote.py"
            )
        text = text.replace(old, new)
    return text


WALKTHROUGH_FOLDER = "/tmp/my-study"  # the scratch folder the README's walk-through works in


def as_in_the_readme(text: str, folder: str | Path) -> str:
    """Output of the walk-through's folder as the README shows it: that folder read as
    :data:`WALKTHROUGH_FOLDER`, this environment's ``bin`` as ``/…/.venv/bin``."""
    for real in {str(Path(folder).resolve()), str(folder)}:
        text = text.replace(real, WALKTHROUGH_FOLDER)
    for real in {str(BIN.resolve()), str(BIN)}:
        text = text.replace(real, "/…/.venv/bin")
    return text


# --- the registry ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One quoted command: as the quote shows it (after ``$ ``), the edits to ``my_study.yaml``
    it runs on, and the exit status the README says it has."""

    shown: str
    edits: tuple[tuple[str, str], ...] = ()
    status: int = 0


@dataclass(frozen=True)
class Quote:
    """How to produce one quoted output. ``runs``: what it runs, in words (``--list``);
    ``study``: whether it reads a study run (the walk-through's, or a recorded run's fixture)."""

    id: str
    runs: str
    produce: Callable[[Workshop], str]
    study: str = ""  # "walkthrough": runs the walk-through study; "recorded": a fixture

    @property
    def long(self) -> bool:
        return self.study == "walkthrough"

    @property
    def arithmetic(self) -> bool:
        """Whether its numbers come from training on this machine's CPU, and so may move on
        another machine's as :func:`numbers_agree` allows."""
        return self.study == "walkthrough"


def console(*steps: Step) -> Callable[[Workshop], str]:
    """Each step run with ``study`` in a fresh folder holding the README's ``my_study.yaml``
    with the step's edits: ``$ COMMAND`` and what it printed (stdout and stderr, as a terminal
    shows them), one after the other."""

    def produce(shop: Workshop) -> str:
        out = []
        for n, step in enumerate(steps):
            where = shop.folder(f"console-{n}")
            spec = where / "my_study.yaml"
            spec.write_text(edited(spec.read_text(encoding="utf-8"), step.edits), encoding="utf-8")
            done = shop.run(shlex.split(step.shown, comments=True), where)
            if done.returncode != step.status:
                raise QuoteError(f"$ {step.shown}: exit status {done.returncode}, the README "
                                 f"says {step.status}:\n{done.stdout[-2000:]}")  # fmt: skip
            left = sorted(p.name for p in where.iterdir() if p.name != "my_study.yaml")
            if step.status and left:  # a refusal records nothing
                raise QuoteError(f"$ {step.shown} refused, yet left {left} behind")
            out += [f"$ {step.shown}", *as_in_the_readme(done.stdout, where).splitlines()]
        return "\n".join(out)

    return produce


TABLE_ROW = re.compile(r"^p\d{3}")  # a row of the plan's or the status's table: p000 …


def plan_excerpt(shop: Workshop) -> str:
    """``study plan my_study.yaml``: the table's first three rows and its last."""
    text = console(Step("study plan my_study.yaml"))(shop)
    return "\n".join(rows_elided(text.splitlines(), TABLE_ROW, first=3, last=1))


def walkthrough_progress(shop: Workshop) -> str:
    """``study run my_study.yaml``: the baselines line and the progress line the run printed
    as its third trial started (the last one that counts two done)."""
    lines = shop.walkthrough()["run"].splitlines()
    baselines = [x for x in lines if x.startswith("baselines (")]
    progress = [x for x in lines if re.match(r"^my-first-study: .* · 2 done · ", x)]
    if not baselines or not progress:
        raise QuoteError("study run printed no baselines line or no progress line at 2 done:\n"
                         + "\n".join(lines[:20]))  # fmt: skip
    return "\n".join([baselines[0], progress[-1]])


def walkthrough_ending(shop: Workshop) -> str:
    """``study run my_study.yaml``: what it printed last, from the headline's first line."""
    walked = shop.walkthrough()
    lines = walked["run"].splitlines()
    first = next((i for i, x in enumerate(lines) if x.startswith("my-first-study varied ")), None)
    if first is None:
        raise QuoteError("study run printed no headline ('my-first-study varied …'):\n"
                         + "\n".join(lines[-20:]))  # fmt: skip
    return as_in_the_readme("\n".join(lines[first:]), walked["folder"])


def walkthrough_status(shop: Workshop) -> str:
    """``study status my-first-study`` after the run: the table's first two rows and its last."""
    where = Path(shop.walkthrough()["folder"])
    shown = "study status my-first-study"
    done = shop.run(shlex.split(shown), where)
    if done.returncode != 0:
        raise QuoteError(f"$ {shown}: exit status {done.returncode}:\n{done.stdout[-2000:]}")
    lines = [f"$ {shown}", *as_in_the_readme(done.stdout, where).splitlines()]
    return "\n".join(rows_elided(lines, TABLE_ROW, first=2, last=1))


def walkthrough_summary(shop: Workshop) -> str:
    """The README's one-analysis snippet, on ``load_study("my-first-study")``, run in the
    walk-through's folder (the store the CLI uses there)."""
    where = Path(shop.walkthrough()["folder"])
    snippet = readme_snippet()
    if snippet.count('load_study("default-digits")') != 1:
        raise QuoteError('README\'s snippet no longer calls load_study("default-digits")')
    snippet = snippet.replace('load_study("default-digits")', 'load_study("my-first-study")')
    done = shop.run([sys.executable, "-c", snippet], where, merge=False, timeout=300)
    if done.returncode != 0:
        raise QuoteError(f"the README's snippet failed:\n{done.stderr[-3000:]}")
    return as_in_the_readme(done.stdout, where)


REGISTRY_ENTRIES = (
    Quote("walkthrough-refusal-misspelt-key",
          "study plan my_study.yaml, with 'replicates: 2' misspelt 'replicate: 2' (exit 2)",
          console(Step("study plan my_study.yaml",
                       (("replicates: 2}", "replicate: 2}"),), status=2))),
    Quote("walkthrough-refusal-zero-temperature",
          "study plan my_study.yaml with temperature levels [0, 0.5] on the log scale, then "
          "on the linear scale (each exit 2)",
          console(Step("study plan my_study.yaml",
                       (("levels: [0.1, 0.5], scale: log}", "levels: [0, 0.5], scale: log}"),),
                       status=2),
                  Step("study plan my_study.yaml        # the same level on a linear scale",
                       (("levels: [0.1, 0.5], scale: log}", "levels: [0, 0.5]}"),),
                       status=2))),
    Quote("walkthrough-refusal-batch-size",
          "study plan my_study.yaml with batch_size: {levels: [64, 100]} (exit 2)",
          console(Step("study plan my_study.yaml",
                       (("batch_size: {levels: [64, 256], scale: log}",
                         "batch_size: {levels: [64, 100]}"),), status=2))),
    Quote("walkthrough-plan",
          "study plan my_study.yaml (the README's file as written); rows 4-7 elided",
          plan_excerpt),
    Quote("walkthrough-run-progress",
          "study run my_study.yaml --smoke, then study run my_study.yaml (once per session, "
          "one trial at a time, no figures): its baselines line and its progress line at the "
          "third trial's start", walkthrough_progress, study="walkthrough"),
    Quote("walkthrough-run-ending",
          "study run my_study.yaml (the same run): its last lines, from the headline on",
          walkthrough_ending, study="walkthrough"),
    Quote("walkthrough-status",
          "study status my-first-study after the run; rows p000-r2 .. p003-r0 elided",
          walkthrough_status, study="walkthrough"),
    Quote("walkthrough-summary",
          "the README's one-analysis snippet with load_study(\"my-first-study\"), after the run",
          walkthrough_summary, study="walkthrough"),
)  # fmt: skip


# --- quotes of recorded runs: docs/quotes/<id>/ ----------------------------------------------

SOURCE = "source.json"  # where a fixture came from, and what its quote prints
HISTORY_METRICS = ("z/align", "z/uniform", "probe/knn_top1_h")  # as study.reporting reads them


def recorded_headline(folder: Path) -> str:
    """The headline ``study run`` printed at the end of a recorded run, made again from the
    run's fixture: its ``results.parquet``, its per-item outcomes (``outcomes/trials/<trial
    key>.parquet``, ``outcomes/baselines/<system>.parquet``) and its target's history
    (``history.parquet``), through the one analysis the report uses
    (:func:`analysis.study_analysis.analyse`, as :func:`study.reporting.make_report` calls it)."""
    import pandas as pd

    from analysis.reading.load import _system_order, read_results
    from analysis.reading.outcomes import Outcomes, parse_baseline_file, read_outcomes
    from analysis.study_analysis import analyse

    df = read_results(folder / "results.parquet")
    run_of = dict(zip(df["trial_key"], df["run_id"], strict=True))
    trials = {run_of[p.stem]: read_outcomes(p)
              for p in sorted((folder / "outcomes" / "trials").glob("*.parquet"))}  # fmt: skip
    systems = {parse_baseline_file(p.name): read_outcomes(p)
               for p in (folder / "outcomes" / "baselines").glob("*.parquet")}  # fmt: skip
    # as the record's reader orders them (analysis.reading.load.load_outcomes)
    baselines = dict(sorted(((k, v) for k, v in systems.items() if k is not None),
                            key=_system_order))  # fmt: skip
    history = folder / "history.parquet"
    analysis = analyse(
        df,
        outcomes=Outcomes(trials=trials, baselines=baselines),
        history=pd.read_parquet(history) if history.is_file() else None,
    )
    return "\n".join(analysis.headline.lines())


def recorded_quotes(root: Path = QUOTES) -> tuple[Quote, ...]:
    """One quote per fixture folder under ``docs/quotes/`` (its id the folder's name)."""
    found = []
    for folder in sorted(p for p in root.glob("*") if (p / SOURCE).is_file()):
        source = json.loads((folder / SOURCE).read_text(encoding="utf-8"))
        runs = (
            f"the headline of study {source.get('study', '?')} (recorded at "
            f"{source.get('from', '?')}), made again from docs/quotes/{folder.name}/"
        )
        found.append(Quote(folder.name, runs, lambda _shop, f=folder: recorded_headline(f),
                           study="recorded"))  # fmt: skip
    return tuple(found)


def registry() -> dict[str, Quote]:
    """Every quote id: the entries above and one per recorded run's fixture."""
    entries = [*REGISTRY_ENTRIES, *recorded_quotes()]
    ids = [q.id for q in entries]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise QuoteError(f"quote ids defined twice: {twice}")
    return {q.id: q for q in entries}


REGISTRY = registry()


def _resolve_source(source: str, study: str, storage: str | None) -> tuple[str, Path | None]:
    """(the tracking URI, the study's folder in its storage or None) of ``--from``."""
    if "://" in source:
        folder = Path(storage) / study if storage else None
        return source, folder
    where = Path(source).resolve()
    db = where / "mlflow.db"
    if not db.is_file():
        raise QuoteError(f"{where}: no mlflow.db there (give the folder the study ran from, or a "
                         "tracking URI)")  # fmt: skip
    return f"sqlite:///{db}", (Path(storage) if storage else where / "studies") / study


def build_fixture(
    qid: str, source: str, study: str, storage: str | None = None, quotes: Path = QUOTES
) -> Path:
    """``docs/quotes/<qid>/`` from a recorded study, read only: its results.parquet (the run's
    own file when its storage holds one, else an export of the record), every finished trial's
    per-item outcomes and the baselines', the target's history and ``source.json``. Checks the
    headline made from it against the report the run stored, when there is one."""
    import pyarrow.parquet as pq

    from analysis.reading.load import load_history, load_outcomes, read_results
    from analysis.reading.outcomes import baseline_file, write_outcomes
    from analysis.reading.record import results_table
    from analysis.reading.store import read_client
    from analysis.stats.best import target_of

    if not QUOTE_ID.match(qid):
        raise QuoteError(f"{qid!r}: a quote id is lower-case letters, digits and hyphens")
    if qid in {q.id for q in REGISTRY_ENTRIES}:
        raise QuoteError(f"{qid!r} is a quote of a command, not of a recorded run")
    uri, folder = _resolve_source(source, study, storage)
    quotes.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{qid}-", dir=quotes))
    try:
        results = folder / "results.parquet" if folder else None
        if results is not None and results.is_file():
            shutil.copyfile(results, staging / "results.parquet")
            origin = str(results)
        else:
            pq.write_table(results_table(read_client(uri), study), staging / "results.parquet")
            origin = f"exported from {uri}"
        df = read_results(staging / "results.parquet")
        key_of = dict(zip(df["run_id"], df["trial_key"], strict=True))
        outcomes = load_outcomes(study, uri)
        trials = {key_of[r]: o for r, o in outcomes.trials.items()}
        baselines = {baseline_file(*key): o for key, o in outcomes.baselines.items()}
        for sub, systems in (("trials", trials), ("baselines", baselines)):
            (staging / "outcomes" / sub).mkdir(parents=True)
            for name, o in systems.items():
                stem = name.removesuffix(".parquet")
                write_outcomes(staging / "outcomes" / sub / f"{stem}.parquet", o.items, o.labels,
                               o.predictions)  # fmt: skip
        target = target_of(df)["metric"]
        metrics = tuple(dict.fromkeys((*HISTORY_METRICS, target)))
        load_history(study, uri, metrics).to_parquet(staging / "history.parquet", index=False)
        (staging / SOURCE).write_text(json.dumps({
            "study": study, "from": uri, "results": origin, "spec_sha": df.attrs.get("spec_sha"),
            "trials": len(df), "built": datetime.date.today().isoformat(),
            "quote": "the headline study run printed (analysis.findings.headline, its lines)",
            "rebuild": f"scripts/requote.py --fixture {qid} --from {source} --study {study}",
        }, indent=2) + "\n", encoding="utf-8")  # fmt: skip
        made = recorded_headline(staging)
        stored = folder / "report" / "report.json" if folder else None
        if stored is not None and stored.is_file():
            lines = json.loads(stored.read_text(encoding="utf-8"))["headline"]["lines"]
            if "\n".join(lines) != made:
                raise QuoteError(f"the headline made from the fixture differs from {stored}'s:\n"
                                 + difference("\n".join(lines), made))  # fmt: skip
            print(f"{qid}: the fixture's headline is the one {stored} holds")
        target_folder = quotes / qid
        shutil.rmtree(target_folder, ignore_errors=True)
        staging.rename(target_folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    size = sum(p.stat().st_size for p in target_folder.rglob("*") if p.is_file())
    print(f"{qid}: wrote {target_folder} ({size / 1024:.0f} KiB)")
    return target_folder


# --- rewriting the pages ---------------------------------------------------------------------


def tied(root: Path = ROOT) -> list[Block]:
    """Every block with a quote marker."""
    return [b for b in all_blocks(root) if b.marker is not None]


def untied(root: Path = ROOT) -> list[Block]:
    """Output-quoting blocks with neither a marker nor a reason they are not quotes."""
    return [b for b in all_blocks(root)
            if b.quotes_output and b.marker is None and not b.not_a_quote]  # fmt: skip


def rewrite(page: Path, new_bodies: dict[str, str]) -> None:
    """Replace the bodies of the page's blocks marked with the ids given by the texts given
    (the page is read afresh: lines written above a block since it was produced do not matter)."""
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    for block in sorted(blocks(page), key=lambda b: -b.start):
        if block.marker is not None and block.marker.id in new_bodies:
            body = [x.rstrip() for x in new_bodies[block.marker.id].strip("\n").splitlines()]
            lines[block.start + 1 : block.end] = body
    page.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""), encoding="utf-8")


def requote(only: set[str] | None, check: bool, shop: Workshop) -> int:
    """Produce every marked block (or those of ``only``), then compare (``check``) or rewrite;
    returns the exit status (1 when a quote differs, an id is unknown or a block is untied)."""
    quotes = registry()  # read again: a fixture just built is one more quote
    status = 0
    for block in untied():
        print(f"{block.where}: a ```{block.language} block with no quote marker above it")
        status = 1
    wanted = [b for b in tied() if only is None or b.marker.id in only]
    for qid in sorted((only or set()) - {b.marker.id for b in wanted}):
        if qid in quotes and quotes[qid].study == "recorded":  # a fixture not yet tied
            print(
                f"{qid}: no block is marked with it yet: put <!-- quote: {qid} --> on the line "
                "above the quote's fence and run this again"
            )
            continue
        print(
            f"{qid}: no block is marked with it"
            + ("" if qid in quotes else " and the registry has no such id")
        )
        status = 1
    # the quotes that need no study first, then the walk-through's run, once
    wanted.sort(key=lambda b: quotes[b.marker.id].long if b.marker.id in quotes else False)
    changes: dict[Path, dict[str, str]] = {}
    for block in wanted:
        quote = quotes.get(block.marker.id)
        if quote is None:
            print(f"{block.where}: quote id {block.marker.id!r} is not in the registry")
            status = 1
            continue
        try:
            produced = quote.produce(shop)
        except (QuoteError, subprocess.TimeoutExpired) as err:
            print(f"{block.where} ({quote.id}): could not produce it: {err}")
            status = 1
            continue
        diff = difference(block.text, produced, block.marker.machine, quote.arithmetic)
        if not diff:  # as quoted, or moved only within the resolution the README promises
            print(f"{block.where} ({quote.id}): as quoted")
            continue
        print(f"{block.where} ({quote.id}): differs\n{diff}")
        if check:
            status = 1
        else:
            changes.setdefault(ROOT / block.page, {})[block.marker.id] = produced
    for page, bodies in changes.items():
        rewrite(page, bodies)
        print(f"rewrote {len(bodies)} block(s) in {page.relative_to(ROOT)}")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="compare only; exit 1 when a quote differs"
    )
    parser.add_argument("--only", action="append", metavar="ID", help="only this quote id")
    parser.add_argument("--list", action="store_true", help="print the registry and exit")
    parser.add_argument(
        "--fixture",
        metavar="ID",
        help="(re)build docs/quotes/ID/ from a recorded study, then requote ID",
    )
    parser.add_argument(
        "--from",
        dest="source",
        metavar="FOLDER_OR_URI",
        help="with --fixture: the folder the study ran from, or a tracking URI",
    )
    parser.add_argument("--study", metavar="NAME", help="with --fixture: the study's name")
    parser.add_argument(
        "--storage",
        metavar="FOLDER",
        help="with --fixture: the folder of its studies (default FOLDER/studies)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="trials at once in the walk-through's study (default 1)",
    )
    args = parser.parse_args(argv)
    if args.list:
        for quote in REGISTRY.values():
            print(f"{quote.id}{' (runs a study)' if quote.long else ''}: {quote.runs}")
        return 0
    only = set(args.only) if args.only else None
    if args.fixture:
        if not (args.source and args.study):
            parser.error("--fixture needs --from and --study")
        try:
            build_fixture(args.fixture, args.source, args.study, args.storage)
        except QuoteError as err:
            print(f"{args.fixture}: {err}")
            return 1
        only = (only or set()) | {args.fixture}
    root = Path(tempfile.mkdtemp(prefix="requote-"))
    try:
        return requote(only, args.check, Workshop(root, concurrency=args.concurrency))
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)


if __name__ == "__main__":
    sys.exit(main())
