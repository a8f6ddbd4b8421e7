"""The ``study`` command line: plan, run, status, list, export, report, power, augment, env.

Its manners: every name a user types (a study, a study file, a metric, a design word) that is
not known is refused (exit 2, nothing written) with the closest known names
(:mod:`trainables.names`); help reads as sentences, with readable placeholders (``STUDY_FILE``,
``URI``) and no type tags; tables fit the terminal, their headers wrapping rather than cut.
"""

from __future__ import annotations

import contextlib
import gc
import json
import platform
import re
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from typer.core import TyperArgument, TyperCommand, TyperGroup

from search_spaces.spec import StudyError
from study import paths
from study.terminal import ShownConsole, echo
from trainables.names import did_you_mean, groups, listing
from trainables.shown import shown


class _NamedArgument(TyperArgument):
    """An argument shown by its placeholder alone: ``STUDY_FILE``, not ``{spec}`` or ``<str>``."""

    def display_type_rich(self, ctx) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        return name if self.required else f"[{name}]"

    def get_usage_pieces(self, ctx) -> list[str]:
        return [self._usage_display_name()]


def _readable(params: list) -> list:
    """Help without type tags: a flag shows no placeholder (not ``<bool>``), an option its
    metavar, an argument its name in capitals."""
    for param in params:
        if isinstance(param, TyperArgument):
            if param.metavar is None:
                param.metavar = (param.name or "value").upper()
            param.__class__ = _NamedArgument
        elif getattr(param, "is_flag", False):
            param.metavar = ""
        elif getattr(param, "metavar", None) is None:
            param.metavar = (param.name or "value").upper()
    return params


class _Command(TyperCommand):
    def get_params(self, ctx) -> list:
        return _readable(super().get_params(ctx))


class _Group(TyperGroup):
    def get_params(self, ctx) -> list:
        return _readable(super().get_params(ctx))


app = typer.Typer(
    cls=_Group,
    help="Compute-matched studies of contrastive self-supervised learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def command(name: str | None = None):
    """``app.command`` with readable help: the docstring's first paragraph is the command's line
    in ``study --help`` and the rest its own page, each paragraph one flowing sentence or more
    (a line break inside a paragraph is not kept, so the terminal wraps it)."""

    def register(function):
        paragraphs = [" ".join(p.split()) for p in (function.__doc__ or "").split("\n\n")]
        text = "\n\n".join(p for p in paragraphs if p)
        return app.command(name, cls=_Command, help=text, short_help=paragraphs[0])(function)

    return register


TrackingUri = Annotated[
    str | None,
    typer.Option(
        metavar="URI",
        help="The MLflow tracking URI. By default, MLFLOW_TRACKING_URI when it is set, else the "
        "nearest mlflow.db at or above this folder, else a new one here.",
    ),
]
StudyName = Annotated[
    str, typer.Argument(metavar="STUDY", help="The study's name (its MLflow experiment).")
]


def _fail(err: Exception) -> None:
    from trainables.remote import redacted  # a refusal may quote a URI with its password

    echo(f"error: {redacted(str(err))}", err=True)
    raise typer.Exit(2)


def _checked(check, *args, **kwargs) -> None:
    """A path check of :mod:`study.paths`, before anything is made: its refusal exits 2."""
    try:
        check(*args, **kwargs)
    except StudyError as err:
        _fail(err)


def _console() -> Console:
    """The terminal's width, or COLUMNS, or 80 when the output goes to a file or a pipe."""
    return ShownConsole(highlight=False)


def _table(
    headers: list[str], rows: list[list[str]], width: int, title: str | None = None
) -> Table:
    """A table that fits ``width`` columns: a header wraps between the pieces of its name
    (:func:`wrapped_name`) instead of being cut with an ellipsis, and values keep their width
    as long as the terminal allows (headers give way first). Its texts are measured as they
    are shown (:func:`~trainables.shown.shown`)."""
    headers = [shown(h) for h in headers]
    rows = [[shown(value) for value in row] for row in rows]
    headers, rows = _without_empty_columns(headers, rows, width)
    natural = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    gap = 2 if sum(natural) + 2 * (len(headers) - 1) < width else 1  # air when there is room
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
        padding=(0, gap - 1, 0, 0),
    )  # fmt: skip
    for header, fitted in zip(headers, column_widths(headers, rows, width, gap), strict=True):
        table.add_column(wrapped_name(header, fitted), overflow="fold", width=fitted)
    for row in rows:
        table.add_row(*row)
    return table


def _without_empty_columns(
    headers: list[str], rows: list[list[str]], width: int
) -> tuple[list[str], list[list[str]]]:
    """The columns, less those with no value in any row when keeping them would fold a header
    inside a word (``snapped`` when nothing was snapped): an empty column says nothing."""
    if sum(_floors(headers, rows)) + len(headers) - 1 < width:
        return headers, rows
    keep = [i for i in range(len(headers)) if any(row[i].strip() for row in rows)]
    return [headers[i] for i in keep], [[row[i] for i in keep] for row in rows]


def wrapped_name(name: str, width: int) -> str:
    """``name`` in lines of at most ``width`` characters, broken after a ``/``, ``_`` or space
    where it can be (probe/ | knn_top1_h, examples | seen), folded only inside a longer piece."""
    lines: list[str] = [""]
    for piece in _name_pieces(name):
        if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(line.rstrip() for line in lines)


def _name_pieces(name: str) -> list[str]:
    """``name`` cut after each ``/``, ``_`` or space: where a header may break."""
    return [piece for piece in re.split(r"(?<=[/_ ])", name) if piece] or [name]


def _floors(headers: list[str], rows: list[list[str]]) -> list[int]:
    """The narrowest each column gets while values can give way: its longest value and its
    header's longest piece (a word is folded only when nothing else fits)."""
    return [max([1, *(len(piece.rstrip()) for piece in _name_pieces(h)),
                 *(len(row[i]) for row in rows)])
            for i, h in enumerate(headers)]  # fmt: skip


def column_widths(headers: list[str], rows: list[list[str]], width: int, gap: int = 1) -> list[int]:
    """Each column's width: its header's or its longest value's, narrowed one character at a
    time (the widest first) until the table fits ``width`` with a space between columns: down
    to :func:`_floors`, then further."""
    values = [max((len(row[i]) for row in rows), default=0) for i in range(len(headers))]
    widths = [max(len(h), v, 1) for h, v in zip(headers, values, strict=True)]
    floors = _floors(headers, rows)
    room = width - gap * (len(headers) - 1) - 1
    for limit in (floors, [1] * len(widths)):
        while sum(widths) > room:
            wide = [j for j in range(len(widths)) if widths[j] > limit[j]]
            if not wide:
                break
            widths[max(wide, key=lambda j: widths[j])] -= 1
    return widths


@command()
def plan(
    spec: Annotated[
        str,
        typer.Argument(
            metavar="STUDY_FILE",
            help="A study file (YAML), or the name of a shipped one such as digits_tau_batch.",
        ),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the plan as one JSON object.")
    ] = False,
    smoke: Annotated[
        bool, typer.Option(help="Show the smoke variant (a tiny budget, one replicate).")
    ] = False,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Say how long the study would take on this machine: a probe of a few steps "
            "and one evaluation of its costliest trials (seconds), nothing recorded.",
        ),
    ] = False,
    tracking_uri: TrackingUri = None,
) -> None:
    """Show a study's design without running it: every trial, its factors and its compute plan.

    When a study of the same name has finished trials in the store, the plan also gives the
    smallest effects its planned replicates detect at 80% power, from that study's error."""
    from search_spaces.designs import build_design
    from search_spaces.spec import in_file, load_spec, smoke_spec

    try:
        study = load_spec(spec)
        if smoke:
            study = smoke_spec(study)
        table = build_design(study)
    except StudyError as err:
        _fail(in_file(err, spec))
    if tracking_uri is not None:  # a store named where none can be: said, not passed over
        _checked(paths.store_file, tracking_uri, writing=False)
    data = table.to_json()
    data["resources"] = study.canonical()["resources"]  # what one trial holds (memory in bytes)
    if estimate:
        from study.estimate import estimate as estimate_study

        found = estimate_study(study, table)
        data["estimate"] = {"wall_s": round(found.wall_s, 1), "slots": found.slots,
                            "fixed_s": found.fixed_s,
                            "probe_s": round(found.probe_s, 1)}  # fmt: skip
    detectable, why = _planned_detectable(table, tracking_uri)
    if detectable:
        data["detectable"] = detectable
    if as_json:
        echo(json.dumps(data, default=str))
        return
    _print_plan(data, table)
    for line in _detectable_lines(detectable, why, table):
        echo(line)
    if estimate:
        for line in found.lines():
            echo(line)


def _planned_detectable(table, tracking_uri: str | None) -> tuple[dict, str]:
    """{metric: {change: smallest effect detected at 80% power}} with the planned replicates,
    from the finished study of the same name; ({}, why not) when there is none. Reads an
    embedded store only when its file exists, and a server only when named."""
    from analysis.reading.store import default_store, store_exists, store_problem

    spec = table.spec
    if table.adaptive:
        return {}, ""
    uri = tracking_uri or default_store()
    if tracking_uri is None and not (uri.startswith("sqlite:///") and store_exists(uri)):
        return {}, ""  # no record to read: nothing more is imported (MLflow, the analysis)
    from study.record import StudyRecord

    if problem := store_problem(uri):
        return {}, f"the record could not be read ({problem})"
    try:
        try:
            record = StudyRecord.existing(uri, spec.study, read_only=True)  # plan only reads
        except LookupError:
            return {}, ""
        if record.parent() is None:
            return {}, ""
        # the analysis (statsmodels, pandas: seconds) only for a study there is to plan from
        from analysis.reading.load import results_frame
        from analysis.reading.outcomes import heldout_items
        from analysis.stats.fits import DEFAULT_RESPONSES
        from analysis.stats.power import detectable_with, power_basis
        from study.export import results_table

        df = results_frame(results_table(record))
        if "status" in df:
            df = df[df["status"] == "finished"]
        out = {}
        items = heldout_items(df)
        from analysis.stats.aliases import alias_map

        aliases = alias_map(df)
        for metric in (m for m in DEFAULT_RESPONSES if m in df):
            try:
                basis = power_basis(_surface_for(df, metric), items, aliases)
                sizes = detectable_with(basis, spec.design.replicates)
            except (StudyError, ValueError):
                continue  # nothing to plan from for this metric (flat, exact, unsupported)
            out[metric] = {change: size for change, size in sizes if size is not None}
        if out and items:
            out["__items__"] = items  # the resolution the accuracies are floored at
        return out, "" if out else "its results carry no error to plan from"
    except Exception as err:  # the plan itself never fails on the record
        return {}, f"the record could not be read ({type(err).__name__}: {err})"


def _detectable_lines(detectable: dict, why: str, table) -> list[str]:
    from analysis.stats.units import amount, is_accuracy

    spec = table.spec
    if not detectable:
        return [f"study {spec.study!r} has finished trials, but {why}"] if why else []
    detectable = dict(detectable)
    items = detectable.pop("__items__", None)
    lines = [
        f"smallest effects detected at 80% power with {spec.design.replicates} replicates per "
        f"point, from the finished study {spec.study!r}'s error:"
    ]
    limited = False
    for metric, sizes in detectable.items():
        shown = []
        for change, size in sizes.items():
            floor = items and is_accuracy(metric) and size <= 1 / items * (1 + 1e-9)
            limited = limited or bool(floor)
            note = " (one held-out item)" if floor else ""
            shown.append(f"{change} {amount(metric, size)}{note}")
        lines.append(f"  {metric}: " + "; ".join(shown))
    if items:
        lines.append(
            f"  accuracies count {items:,} held-out items: one item is "
            f"{100 / items:.2g} points, the finest any accuracy resolves"
            + ("; heldout_size, not the replicates, limits what is marked" * limited)
        )
    return lines


DESCRIPTION_SHOWN = 160  # characters of a description a plan prints: one line, whatever its size


def one_line(text: str, width: int = DESCRIPTION_SHOWN) -> str:
    """``text``'s first line, cut to ``width`` characters with an ellipsis: a description of
    megabytes is printed in constant time (rich wraps a long text in time that grows faster than
    its length: Textualize/rich#2716), and the plan stays a plan."""
    first = text[: width + 1].split("\n", 1)[0]
    if len(first) <= width and len(first) == len(text.strip()):
        return first
    return first[: width - 2].rstrip() + " …"


def _print_plan(data: dict, table) -> None:
    from rich.markup import escape

    console = _console()
    spec = table.spec
    room = max(20, min(DESCRIPTION_SHOWN, console.width - len(spec.study) - 3))
    description = escape(one_line(spec.description, room))  # the only markup is the bold
    console.print(f"[bold]{spec.study}[/bold] — {description}", markup=True)
    console.print(
        f"design {spec.design.kind}, {data['totals']['trials']} trials "
        f"({data['totals']['points']} points × {spec.design.replicates} replicates), "
        f"spec_sha {spec.sha}"
    )
    console.print(_target_line(spec), highlight=False)
    if spec.resources.memory:
        console.print(_resources_line(spec), highlight=False)
    if table.adaptive:
        from search_spaces.designs import objectives_of

        sought = " and ".join(f"{m} ({d})" for _, m, d in objectives_of(spec))
        how = "" if not spec.design.objectives else (
            f", their Pareto front by {(spec.design.sampler or 'nsga2').upper()}")  # fmt: skip
        console.print(
            f"adaptive: {spec.design.samples} trials proposed by Optuna on {sought}{how} over "
            f"{', '.join(spec.factors)}"
        )
        return
    columns = list(data["trials"][0]) if data["trials"] else []
    rows = [
        [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()]
        for row in data["trials"]
    ]
    console.print(_table(columns, rows, console.width))
    for line in _structure_lines(data.get("structure") or {}):
        console.print(line, highlight=False)
    console.print(
        f"every trial sees {data['totals']['examples_per_trial']} examples; "
        f"{data['totals']['examples']} in all"
    )


def _resources_line(spec) -> str:
    """What one trial holds, said where it asks for memory (Ray then packs trials by it)."""
    from trainables.machine import shown_size

    res = spec.resources
    held = [f"{res.cpu:g} CPU"] + [f"{res.gpu:g} GPU"] * (res.gpu > 0)
    held.append(f"{shown_size(res.memory)} of memory ({res.memory} bytes)")
    each = "each trial" if res.workers == 1 else f"each of a trial's {res.workers} workers"
    return (f"resources: {each} holds {', '.join(held)}; Ray starts no more trials on a node "
            "than its memory holds")  # fmt: skip


def _target_line(spec) -> str:
    """The target and which way it is sought, and why when the file did not say."""
    target = spec.target
    way = "maximised" if target.mode == "max" else "minimised"
    why = "" if "mode" in target.model_fields_set else " (its usual direction; no mode given)"
    return f"target {target.metric}: {way}{why}"


def _structure_lines(structure: dict) -> list[str]:
    """What the design kind adds under the table: alpha and centre runs of a response surface,
    the letters, defining relation, resolution and alias chains of a fractional factorial."""
    lines = []
    if "alpha" in structure:
        rule = structure["alpha_rule"]
        how = f" ({rule})" if isinstance(rule, str) else ""
        lines.append(f"face {structure['face']}, alpha {structure['alpha']:.4g}{how}")
    if "center_runs" in structure:
        lines.append(
            f"centre runs: {structure['center_runs']}, each with its own seed (pure error)"
        )
    if structure.get("letters"):
        letters = ", ".join(f"{k}={v}" for k, v in structure["letters"].items())
        lines.append(f"factors {letters}")
    if structure.get("defining_relation"):
        lines.append(f"defining relation {' = '.join(structure['defining_relation'])}")
        lines.append(f"resolution {_roman(structure['resolution'])}")
        lines.append("aliases (up to two-factor interactions):")
        lines.extend(f"  {chain}" for chain in structure["aliases"])
    if structure.get("note"):
        lines.append(structure["note"])
    return lines


def _roman(resolution: int | None) -> str:
    """Resolution as designs are named (III, IV, V …); a full factorial has none."""
    if resolution is None:
        return "none (full factorial: no word in the defining relation)"
    numerals = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII", 9: "IX", 10: "X"}
    return numerals.get(resolution, str(resolution))


@command()
def run(
    spec: Annotated[
        str | None,
        typer.Argument(
            metavar="STUDY_FILE",
            help="A study file (YAML) or a shipped study's name; without one, the default "
            "study runs.",
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            metavar="ADDRESS",
            help="The Ray cluster to run on ('auto' on a node of a cluster); without it, Ray "
            "starts on this machine.",
        ),
    ] = None,
    tracking_uri: TrackingUri = None,
    storage: Annotated[
        str | None,
        typer.Option(
            metavar="FOLDER_OR_URI",
            help="Where the trials, checkpoints, results and report go: a folder (studies by "
            "default) or a URI every node reaches, such as s3://bucket/prefix.",
        ),
    ] = None,
    max_concurrent: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="How many trials run at once (1 or more); by default, as many as the "
            "resources allow.",
        ),
    ] = None,
    smoke: Annotated[
        bool,
        typer.Option(
            help="Run the smoke variant, a tiny budget and one replicate, as <study>-smoke."
        ),
    ] = False,
    figures: Annotated[
        bool,
        typer.Option(
            help="Draw the report's figures. --no-figures writes the report without them "
            "(seconds sooner; every number the same); `study report` draws them later."
        ),
    ] = True,
) -> None:
    """Run a study on Ray Tune; running an existing study again resumes it."""
    from study.finished import finished_run_lines
    from study.opened_study import open_study

    try:  # read once: the shortcut and the driver are handed it
        opened = open_study(spec, smoke)
    except StudyError as err:
        _fail(err)
    done = finished_run_lines(opened, tracking_uri=tracking_uri, storage=storage)
    if done is not None:  # nothing to run: the stored findings, without starting a driver
        for line in done:
            echo(line)
        return
    # `study status` names it from now on, before the driver's seconds of imports
    from analysis.reading.store import default_store
    from study.starting import announce

    announce(opened.spec.study, tracking_uri or default_store())
    from study.ending import StudyFailedError
    from study.runner import run_study
    from study.stop_signals import StudyInterruptedError, catch_stop_signals, stopped_by
    from study.store_locks import StoreHeldError

    catch_stop_signals()  # SIGTERM and SIGHUP stop a study as Ctrl-C does
    try:
        outcome = run_study(
            spec, opened=opened, address=address, tracking_uri=tracking_uri, storage=storage,
            max_concurrent=max_concurrent, smoke=smoke, figures=figures,
        )  # fmt: skip
    except StudyInterruptedError as err:  # 128 + the signal, as a shell reports it: 130, 143
        echo(f"interrupted: {err}", err=True)
        raise typer.Exit(128 + err.signum) from None
    except KeyboardInterrupt:  # before the study was opened: nothing to end
        echo("interrupted before anything was recorded", err=True)
        raise typer.Exit(128 + stopped_by()) from None
    except StudyError as err:
        _fail(err)
    except (StudyFailedError, StoreHeldError) as err:  # held: outside the trials
        echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    if not outcome.ok:
        raise typer.Exit(1)


@command()
def status(name: StudyName, tracking_uri: TrackingUri = None) -> None:
    """Show a study's trials: their status, the examples each has seen and the target metric."""
    from study.run_notes import TARGET_MARK
    from study.tracking_store import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    starting = _starting(name, uri)
    if starting is not None and not _recorded(name, uri):
        echo(starting)
        return
    record = _existing(name, uri)
    runs = record.trial_runs()
    parent = record.parent()
    metric = parent.data.params.get("target_metric") if parent else None
    metric = metric or "probe/knn_top1_h"
    driver = _driver_state(record)
    states = {key: trial_state(run, driver) for key, run in runs.items()}
    console = _console()
    console.print(f"study {name}: {len(runs)} trials: {count_words(list(states.values()))}")
    if driver is not None and driver.unfinished:  # which driver runs them, or that none does
        console.print(driver.note() if driver.gone else f"study {name}: {driver.words()}",
                      soft_wrap=True)  # fmt: skip
    from analysis.stats.units import level  # accuracies in percent, as the headline reads them

    rows = []
    for key, run in sorted(runs.items()):
        value = run.data.metrics.get(metric)
        seen = run.data.metrics.get("train/examples_seen")
        rows.append([
            key, states[key], "—" if seen is None else f"{int(seen):,}",
            "—" if value is None else level(metric, value),
            (run.info.run_name or "").split(TARGET_MARK, 1)[0],  # its value is in its column
        ])  # fmt: skip
    headers = ["trial", "status", "examples seen", metric, "run"]
    console.print(_table(headers, rows, console.width))


def _recorded(name: str, uri: str) -> bool:
    """Whether the store holds the study's parent run yet (reads only)."""
    from study.record import StudyRecord

    try:
        return StudyRecord.existing(uri, name, read_only=True).parent() is not None
    except (LookupError, StudyError):
        return False
    except Exception:  # a store that cannot be read: _existing says why
        return True


def _starting(name: str, uri: str) -> str | None:
    """'study NAME: starting …' while a live driver holds the study's lease in the default
    storage (studies/NAME/driver.lock) or in the record (wherever its storage is), or has
    announced itself before taking it
    (:mod:`study.starting`), but has recorded nothing yet; None otherwise."""
    import socket
    import time

    from study.lease import LEASE_FILE, Holder, timeout_s
    from study.private import read_regular
    from study.starting import announced

    text = read_regular(Path("studies") / name / LEASE_FILE)  # never a FIFO, a link
    holder = Holder.from_text(text.decode(errors="replace")) if text else None
    if holder is None:  # a study run with --storage elsewhere: its lease in the record
        holder = Holder.from_text(_lease_in_record(name, uri))
    if holder is None:
        early = announced(name, uri)
        if early is None:
            return None
        holder = Holder("", early["host"], int(early["pid"]), early["since"], time.time())
    here = holder.host == socket.gethostname()
    live = holder.lives_here() if here else time.time() - holder.beat < timeout_s()
    if not live:
        return None
    return (
        f"study {name}: starting, its driver running ({holder.describe(time.time())}); "
        "nothing is recorded yet: its trials are listed here once it has opened its record"
    )


def _lease_in_record(name: str, uri: str) -> str | None:
    """The lease the study's experiment holds (its tag ``study.driver``, written before any
    run: :mod:`study.lease`), wherever the study's storage is; None when there is none."""
    from analysis.reading.record import find_experiment
    from analysis.reading.state import LEASE_TAG
    from analysis.reading.store import read_client, store_exists

    try:
        if not store_exists(uri):
            return None
        experiment = find_experiment(read_client(uri), name)
        return None if experiment is None else (experiment.tags or {}).get(LEASE_TAG)
    except Exception:  # a store that cannot be read: status says why next
        return None


def trial_state(run, driver=None) -> str:
    """One word for a trial: how it ended (finished, failed, diverged …) once its run ended
    FINISHED, else its run's status (running, scheduled, killed, failed); a run left RUNNING or
    SCHEDULED by a driver that is gone (``driver``: :class:`study.driver_gone.DriverState`) is
    "driver gone", never running."""
    state = run.info.status.lower()
    tag = run.data.tags.get("study.trial_status")
    if driver is not None and driver.gone and run.info.run_id in driver.unfinished:
        return "driver gone"
    return tag if tag and state == "finished" else state


def _driver_state(record):
    """The study's driver (:func:`study.driver_gone.driver_state`); None where the store cannot
    say (an experiment that cannot be read back)."""
    from study.driver_gone import driver_state

    try:
        return driver_state(record.client, record.experiment_id, record.study)
    except Exception:  # what the record says is still shown
        return None


def _say_driver_gone(record) -> None:
    """The note of a study whose driver is gone, on stderr (stdout keeps what scripts read)."""
    driver = _driver_state(record)
    if driver is not None and driver.gone:
        echo(driver.note(), err=True)


def count_words(states: list[str]) -> str:
    """``"20 finished, 2 failed"``: how many trials are in each state, most first."""
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{n} {state}" for state, n in ordered) or "none yet"


@command("list")
def list_studies(tracking_uri: TrackingUri = None) -> None:
    """List the studies a tracking store holds, one name a line."""
    from analysis.reading.record import recorded_studies
    from analysis.reading.store import store_exists
    from study.record import StudyRecord
    from study.tracking_store import check_tracking_uri, default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    try:
        check_tracking_uri(uri)
    except StudyError as err:
        _fail(err)
    if not store_exists(uri):
        echo(f"no study: there is no MLflow store at {uri} (nothing was created)", err=True)
        return
    for name in recorded_studies(uri):
        echo(name)
        _say_driver_gone(StudyRecord.existing(uri, name, read_only=True))


def _existing(name: str, uri: str, writable: bool = False):
    """The record of a study that exists and can be read; otherwise exit 2 saying why (and
    which studies the store holds). Nothing is written: no store, no experiment is created."""
    from study.record import StudyRecord, check_store
    from study.tracking_store import check_tracking_uri
    from trainables.remote import redacted

    try:
        check_tracking_uri(uri, writing=writable)
        check_store(uri, name)  # reads only; an embedded store that is not there stays absent
        record = StudyRecord.existing(uri, name, read_only=not writable)
        if record.parent() is None:
            raise StudyError(f"no study named {name!r} in {redacted(uri)}: its experiment has "
                             "no runs")  # fmt: skip
    except LookupError as err:
        _fail(StudyError(str(err)))
    except StudyError as err:
        _fail(err)
    return record


@command()
def export(
    name: StudyName,
    out: Annotated[
        str,
        typer.Option(metavar="FILE", help="The Parquet file to write, as a path or a URI."),
    ],
    tracking_uri: TrackingUri = None,
) -> None:
    """Write a study's results table, one row per trial, as a Parquet file."""
    from study.export import export_parquet
    from study.tracking_store import default_tracking_uri
    from trainables.remote import is_remote

    local = None if is_remote(out) else Path(out.removeprefix("file://"))
    if local is not None and not local.is_dir():  # a folder: refused below, with the fix
        _checked(paths.new_file, "--out", local, example="results.parquet")
    record = _existing(name, tracking_uri or default_tracking_uri())
    try:
        path = export_parquet(record, out)
    except (OSError, ValueError) as err:  # pyarrow's reasons: no bucket, a folder there, …
        folder = " (a folder: give a file in it, e.g. --out DIR/results.parquet)" if (
            Path(out).is_dir()) else ""  # fmt: skip
        _fail(StudyError(f"--out {out}: cannot write the results there{folder} ({err}); "
                         "nothing was written"))  # fmt: skip
    echo(f"wrote {path} ({len(record.trial_runs())} rows)")
    if note := _not_finished(record):  # said, not hidden: those rows carry no results yet
        echo(f"{note}: the unfinished trials' rows have no results yet")


def _not_finished(record) -> str:
    """``study NAME: 3 of 4 trials not finished; driver pid N on HOST`` (or ``driver gone
    (pid N on HOST)``) while the study is not finished (:mod:`analysis.reading.state`); ""
    once it is."""
    from analysis.reading.state import study_state

    words = study_state(record).words()
    return f"study {record.study}: {words}" if words else ""


@command()
def report(
    name: Annotated[
        str | None,
        typer.Argument(metavar="STUDY", help="The study's name, read from the MLflow store."),
    ] = None,
    results: Annotated[
        str | None,
        typer.Option(
            metavar="FILE",
            help="A results .parquet file (a path or a URI) to read instead of the store.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="FOLDER", help="The folder to write into; studies/<study>/report by default."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as one JSON object.")
    ] = False,
    figures: Annotated[
        bool,
        typer.Option(help="Draw the figures. --no-figures writes the report without them."),
    ] = True,
    tracking_uri: TrackingUri = None,
) -> None:
    """Write a study's report: fit its response surfaces, draw every figure, fill the evidence
    card and write report.html."""
    from study.reporting import make_report, refuse_own_folders
    from study.tracking_store import default_tracking_uri

    if (name is None) == (results is None):
        _fail(StudyError("give a study NAME or --results FILE.parquet (one of them)"))
    if out is not None:  # a folder to write into, before any fit or figure is made
        _checked(paths.writable_folder, "--out", out)
    uri = tracking_uri or default_tracking_uri()
    if as_json and name and out is None:  # a cheap question: the stored answer, when it holds
        stored = _stored_report(name, uri)
        if stored is not None:
            echo(stored)
            return
    record = _existing(name, uri, writable=True) if name else None  # it points to the report
    if record is not None:
        _say_driver_gone(record)
    try:
        if out is not None:  # never among the trials' files or the record's artifacts
            refuse_own_folders(record, out)
        summary, folder = make_report(record, results, out, tracking_uri=uri, figures=figures)
    except (StudyError, ValueError) as err:
        _fail(err)
    if as_json:
        echo(json.dumps(summary, default=str))
    else:  # the findings first, as study run ends
        for line in summary["headline"]["lines"]:
            echo(line)
        echo(f"wrote {folder / 'report.html'}")


def _finished_trials(name: str, uri: str):
    """(the record, its trials as (trial_key, run_id, status)) of study ``name`` in ``uri``
    (exit 2 saying why when none of its trials finished). Read from the runs alone: a results
    table would import pandas (pyarrow's ``pa.array`` does), a third of a second."""
    from analysis.reading.record import trial_status

    record = _existing(name, uri)
    trials = [(key, run.info.run_id, trial_status(run))
              for key, run in sorted(record.trial_runs().items())]  # fmt: skip
    if trials and all(status != "finished" for _, _, status in trials):
        _fail(StudyError(f"study {name!r} has no finished trial in {uri} to plan from"))
    return record, trials


def _stored_report(name: str, uri: str) -> str | None:
    """The study's stored report summary, when it still holds
    (:func:`study.finished.stored_report`)."""
    from study.finished import stored_report

    return stored_report(name, uri)


def _stored_basis(record, trials: list[tuple[str, str, str]], metric: str):
    """``metric``'s planning basis as the study's last report wrote it on the parent run, when
    that report was made from exactly these ``trials`` and the run's artifacts are on this
    machine; None otherwise (the caller fits afresh). Reads only."""
    from analysis.stats.power import BASIS_FILE, read_basis, trials_fingerprint
    from study.finished import fresh_report

    folder = fresh_report(record)  # none while it runs, or once its metrics were changed
    path = folder / BASIS_FILE if folder else None
    if path is None or not path.is_file():
        return None
    return read_basis(path.read_text(), trials_fingerprint(trials), metric)


def _local_folder(uri: str | None) -> Path | None:
    """The folder an artifact URI names on this machine, else None
    (:func:`analysis.reading.store.local_folder`)."""
    from analysis.reading.store import local_folder

    return local_folder(uri)


def _surface_for(df, metric: str):
    """The best-supported response surface of ``metric`` with the report's block term (the run
    blocks of an augmented study, else the replicate when seeds are common), or a StudyError
    naming the metric and why."""
    from analysis.stats.fits import block_term, fit_best_supported, independent_trials

    if metric not in df:
        numeric = sorted(c for c in df.columns if "/" in c and df[c].dtype.kind == "f")
        raise StudyError(unknown_metric(metric, numeric))
    df = independent_trials(df)  # as the report fits it: a repeated trial counts once
    fit = fit_best_supported(df, metric, blocks=block_term(df))
    if fit.surface is None:
        raise StudyError(f"--metric {metric!r}: nothing to plan from ({fit.reason})")
    return fit.surface


def unknown_metric(metric: str, numeric: list[str]) -> str:
    """``--metric`` naming no result of the study: the closest names and the groups, never all
    of them; a group itself (``--metric probe/``) lists the names in it."""
    if metric.endswith("/") and metric in groups(numeric):
        names = [n for n in numeric if n.startswith(metric)]
        return f"--metric {metric!r} is a group of {len(names)} results: {', '.join(names)}"
    return (
        f"--metric {metric!r} is not a result of this study{did_you_mean(metric, numeric)} "
        f"(it has {listing(numeric, noun='numeric results', how_to_list=LIST_A_GROUP)})"
    )


LIST_A_GROUP = "give a group, e.g. --metric probe/, to list its names"


@command()
def power(
    name: Annotated[
        str, typer.Argument(metavar="STUDY", help="A finished study (its MLflow experiment).")
    ],
    metric: Annotated[
        str,
        typer.Option(
            metavar="METRIC",
            help="The response, such as probe/knn_top1_h; a group such as probe/ lists its names.",
        ),
    ],
    effect: Annotated[
        float,
        typer.Option(
            metavar="EFFECT",
            help="The effect to detect: in percentage points for an accuracy (probe/…, where 1 "
            "is one point and 0.01 a fraction), in the metric's own units otherwise.",
        ),
    ],
    power_: Annotated[
        float, typer.Option("--power", metavar="P", help="The power wanted, between 0 and 1.")
    ] = 0.8,
    alpha: Annotated[
        float, typer.Option(metavar="ALPHA", help="The two-sided test's level, between 0 and 1.")
    ] = 0.05,
    tracking_uri: TrackingUri = None,
) -> None:
    """Say how many replicates per point would detect an effect of size EFFECT on METRIC.

    The answer comes from the finished study's own error, for the same design replicated."""
    from analysis.stats.power import MAX_REPLICATES, power_basis, replicates_for
    from analysis.stats.units import amount, from_typed, is_accuracy
    from study.tracking_store import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    record, trials = _finished_trials(name, uri)
    if note := _not_finished(record):  # the error is the finished trials' alone
        echo(f"{note}: this answer rests on the trials finished so far")
    try:
        if not 0 < power_ < 1 or not 0 < alpha < 1:
            raise StudyError(f"--power {power_} and --alpha {alpha} must lie in (0, 1)")
        basis = _stored_basis(record, trials, metric)
        if basis is None:  # no report written for these trials: fit them here
            from analysis.reading.load import results_frame
            from analysis.reading.outcomes import heldout_items
            from analysis.stats.aliases import alias_map
            from study.export import results_table

            df = results_frame(results_table(record))
            basis = power_basis(_surface_for(df, metric), heldout_items(df), alias_map(df))
        size = from_typed(metric, effect)  # points -> the recorded fraction for an accuracy
        plans = replicates_for(basis, size, alpha=alpha, power=power_)
    except (StudyError, ValueError) as err:
        _fail(err)
    echo(
        f"{name}: to detect an effect of {amount(metric, size)} on {metric} at {power_:.0%} power "
        f"(two-sided, alpha {alpha:g}), from this study's error (mean square "
        f"{basis.error_ms:.3g} on {basis.error_df} df, "
        f"{'the replicate as the block, ' if basis.blocks else ''}"
        f"{plans[0].replicates_now:g} replicate{'' if plans[0].replicates_now == 1 else 's'} "
        "per point now):"
    )
    if basis.items and is_accuracy(metric):
        echo(
            f"  resolution: {basis.items:,} held-out items, one item = {100 / basis.items:.2g} "
            "points; no detectable size is smaller"
        )
    for plan in plans:
        now = "n/a" if plan.detectable_now is None else amount(metric, plan.detectable_now)
        if plan.resolution_limited:
            echo(
                f"  {plan.change}: detectable now {now}; {amount(metric, size)} is less than one "
                f"held-out item of {plan.items:,}: heldout_size limits it, not the replicates; "
                f"for a difference that small to register as one item, score on at least "
                f"{plan.items_needed:,} held-out items"
            )
            continue
        if plan.replicates_needed is None:
            need = f"more than {MAX_REPLICATES} replicates per point"
        else:
            need = f"{plan.replicates_needed} replicates per point"
            need += f" (detects {amount(metric, plan.detectable_then)})"
        echo(f"  {plan.change}: detectable now {now}; needs {need}")


@command()
def augment(
    spec: Annotated[
        str,
        typer.Argument(
            metavar="STUDY_FILE",
            help="The finished two-level factorial's study file, or a shipped study's name.",
        ),
    ],
    to: Annotated[
        str,
        typer.Option("--to", metavar="DESIGN", help="The design to augment to: central_composite."),
    ] = "central_composite",
    face: Annotated[
        str | None,
        typer.Option(
            metavar="FACE",
            help="ccf puts the axial points on the faces (alpha 1, the default); ccc puts them "
            "outside, at ±alpha (the default when --alpha is given).",
        ),
    ] = None,
    alpha: Annotated[
        str | None,
        typer.Option(
            metavar="ALPHA",
            help="For ccc: rotatable (the default), orthogonal (orthogonal blocking) or a number.",
        ),
    ] = None,
    center: Annotated[
        int | None,
        typer.Option(metavar="N", help="How many centre runs the new block has (3 by default)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="The new study file to write; <file>-ccd.yaml beside the old one by default.",
        ),
    ] = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Turn a finished two-level factorial into a central composite, its axial and centre
    points a second block.

    It writes the new study file, keeping the old one's comments and layout; nothing runs
    until you run that file with study run."""
    from study.commands import shell_command, tool
    from study.sequential import augment_study
    from study.tracking_store import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    face = face or ("ccc" if alpha is not None else "ccf")
    try:
        if to != "central_composite":
            raise StudyError(
                f"--to {to!r}: a two-level factorial is augmented to central_composite only"
                f"{did_you_mean(to, ['central_composite'])}"
            )
        if face not in ("ccf", "ccc"):
            raise StudyError(
                f"--face {face!r}: ccf or ccc (cci would move the finished factorial points "
                f"inside the bounds){did_you_mean(face, ['ccf', 'ccc'])}"
            )
        if out is not None:  # a file to write, asked before the store is read
            paths.new_file("--out", out, example="study-ccd.yaml")
        done = augment_study(spec, tracking_uri=uri, face=face, alpha=alpha, center=center,
                             out=out)  # fmt: skip
    except StudyError as err:
        _fail(err)
    structure = done.design.structure
    echo(
        f"wrote {done.path}: {done.spec.study} as a central composite (face {done.spec.design.face}"
        f", alpha {structure['alpha']:.4g}); block 1: {structure['blocks']['1']} finished "
        f"trials, block 2: {done.new_trials} new axial and centre trials"
    )
    again = shell_command(tool("study"), "run", str(done.path), "--tracking-uri", uri,
                          *_storage_options(done.spec.study, uri))  # fmt: skip
    echo(f"run them: {again}")


@command("next")
def next_study_file(
    spec: Annotated[
        str,
        typer.Argument(
            metavar="STUDY_FILE",
            help="The finished study's file, or a shipped study's name.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="The next study file to write; <study>-next1.yaml beside the old one by "
            "default (<file>-ccd.yaml for a central composite, <study>-confirm.yaml with "
            "--confirm).",
        ),
    ] = None,
    confirm: Annotated[
        bool,
        typer.Option(
            "--confirm",
            help="Write the confirmation study instead: the selected best point and its "
            "closest rival, on fresh seeds, with the replicates telling them apart needs.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write a confirmation even where the held-out set cannot resolve the two "
            "points or it costs more than ten times the study it follows.",
        ),
    ] = False,
    tracking_uri: TrackingUri = None,
) -> None:
    """Write the study to run after a finished one, and say why: more replicates when nothing
    was detectable, points along the path of steepest ascent, a central composite, or a
    smaller region around an optimum inside (or one moved towards an optimum outside); with
    --confirm, the confirmation runs of the selected point against its closest rival. Every
    follow-up starts its seeds past the finished study's: no trial is run again.

    Nothing runs until you run the written file with study run."""
    from study.commands import shell_command, tool
    from study.sequential import next_study
    from study.tracking_store import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    try:
        if out is not None:  # a file to write, asked before the study is analysed (seconds)
            paths.new_file("--out", out, example="study-next.yaml")
        done = next_study(spec, tracking_uri=uri, out=out, confirm=confirm, force=force)
    except StudyError as err:
        _fail(err)
    totals = done.design.totals()
    echo(f"next: {done.reason}.")
    echo(
        f"wrote {done.path}: {done.spec.study}, design {done.spec.design.kind}, "
        f"{totals['trials']} trials of {totals['examples_per_trial']} examples each"
        + (f"; {done.cost}" if done.cost else "")
    )
    from search_spaces.spec import load_spec

    ran = _storage_options(load_spec(spec).study, uri)  # the finished study's storage
    again = shell_command(tool("study"), "run", str(done.path), "--tracking-uri", uri, *ran)
    echo(f"run it: {again}")


def _storage_options(name: str, uri: str) -> list[str]:
    """``["--storage", X]`` when study ``name`` ran with a storage other than ``studies`` here
    (its record says which: :func:`analysis.reading.state.recorded_storage`), so that the
    command printed for its follow-up keeps its results beside it; [] otherwise."""
    from analysis.reading.state import recorded_storage
    from study.record import StudyRecord

    try:
        where = recorded_storage(StudyRecord.existing(uri, name, read_only=True).parent())
    except Exception:  # a record that cannot be read: the default storage
        return []
    if not where or where == str(Path("studies").resolve()):
        return []
    return ["--storage", where]


@command()
def env() -> None:
    """Print the versions and devices this environment runs studies with."""
    import mlflow
    import optuna
    import pyarrow
    import ray
    import torch
    import torchvision

    cuda = torch.cuda.is_available()
    echo(f"python       {platform.python_version()}")
    echo(f"torch        {torch.__version__} (torchvision {torchvision.__version__})")
    echo(f"ray          {ray.__version__}")
    echo(f"mlflow       {mlflow.__version__}")
    echo(f"optuna       {optuna.__version__}")
    echo(f"pyarrow      {pyarrow.__version__}")
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    echo(f"device       {'cuda: ' + ', '.join(devices) if cuda else 'cpu'}")


def main() -> None:
    """The ``study`` command. Once it has answered, the process ends as Python ends one (the
    threads that are not daemons joined, the exit handlers run, the output flushed) but without
    then tearing down every module one at a time: for a driver that has Ray, MLflow, pyarrow and
    matplotlib loaded, that teardown alone took 1.2-2.8 s after the study had ended and said
    so. An exception that escapes the command still ends the usual way, with its traceback."""
    code: object = 0
    try:
        app()
    except SystemExit as done:
        code = done.code
    # out of the except block: the exit's traceback, and the frames it holds (a bucket's
    # S3FileSystem among their locals), are released before pyarrow's exit handler finalizes S3
    _exit_now(code)


def _exit_now(code: object) -> NoReturn:
    """Exit with ``code`` as ``sys.exit`` does (None is 0, a number is itself, anything else is
    printed to stderr and is 1), after what the interpreter does first when it exits."""
    from study.internals.python import exit_now, join_non_daemon_threads, run_exit_handlers

    if code is not None and not isinstance(code, int):
        print(shown(str(code)), file=sys.stderr)
        code = 1
    join_non_daemon_threads()  # joins the threads that are not daemons, stops the pools' workers
    # objects left in reference cycles go first: an S3 client alive while pyarrow finalizes S3
    # can crash the process at exit (apache/arrow#38352, #41087), which read as a SIGSEGV'd
    # driver after it had been refused with exit 2
    gc.collect()
    run_exit_handlers()  # logging's flush, Ray's and MLflow's own handlers, finalizers
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    exit_now(code or 0)


if __name__ == "__main__":
    sys.exit(main())
