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
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperCommand, TyperGroup

from search_spaces.spec import StudyError
from study import paths
from study.services import plan as plans
from study.services import status as statuses
from study.services.list_studies import no_store_line, studies
from study.services.power_answer import answer as power_answer
from study.services.recorded import (
    driver_gone_note,
    existing,
    finished_trials,
    follow_up_run,
    not_finished,
)
from study.tables import fitted_table
from study.terminal import ShownConsole, echo
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


def _fail(err: Exception) -> NoReturn:
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
    try:
        planned = plans.make_plan(spec, smoke=smoke, estimate=estimate, tracking_uri=tracking_uri)
    except StudyError as err:
        _fail(err)
    if as_json:
        echo(json.dumps(planned.data, default=str))
        return
    _print_plan(planned.data, planned.table)
    for line in planned.detectable_lines():
        echo(line)
    if estimate:
        for line in planned.estimate.lines():
            echo(line)


def _print_plan(data: dict, table) -> None:
    from rich.markup import escape

    console = _console()
    spec = table.spec
    room = max(20, min(plans.DESCRIPTION_SHOWN, console.width - len(spec.study) - 3))
    description = escape(plans.one_line(spec.description, room))  # the only markup is the bold
    console.print(f"[bold]{spec.study}[/bold] — {description}", markup=True)
    console.print(
        f"design {spec.design.kind}, {data['totals']['trials']} trials "
        f"({data['totals']['points']} points × {spec.design.replicates} replicates), "
        f"spec_sha {spec.sha}"
    )
    console.print(plans.target_line(spec), highlight=False)
    if spec.resources.memory:
        console.print(plans.resources_line(spec), highlight=False)
    if table.adaptive:
        console.print(plans.adaptive_line(spec))
        return
    columns = list(data["trials"][0]) if data["trials"] else []
    rows = [
        [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()]
        for row in data["trials"]
    ]
    console.print(fitted_table(columns, rows, console.width))
    for line in plans.structure_lines(data.get("structure") or {}):
        console.print(line, highlight=False)
    console.print(
        f"every trial sees {data['totals']['examples_per_trial']} examples; "
        f"{data['totals']['examples']} in all"
    )


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
    from trainables.remote import listings_kept

    with listings_kept():  # the data's bucket listed once in this run
        _run(spec, address, tracking_uri, storage, max_concurrent, smoke, figures)


def _run(
    spec: str | None, address: str | None, tracking_uri: str | None, storage: str | None,
    max_concurrent: int | None, smoke: bool, figures: bool,
) -> None:  # fmt: skip
    """``study run``'s work (see :func:`run`)."""
    from study.finished import finished_run_lines
    from study.opened_study import open_study

    try:  # read once: the shortcut and the driver are handed it
        opened = open_study(spec, smoke)
    except StudyError as err:
        _fail(err)
    found: list = []  # the study's experiment, should the shortcut look it up and find it
    done = finished_run_lines(opened, tracking_uri=tracking_uri, storage=storage, found=found)
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
            experiment=found[0] if found else None,
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
    from study.tracking_store import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    starting = statuses.starting(name, uri)
    if starting is not None and not statuses.recorded(name, uri):
        echo(starting)
        return
    shown_trials = statuses.trials(_existing(name, uri))
    driver = shown_trials.driver
    console = _console()
    states = list(shown_trials.states.values())
    console.print(f"study {name}: {len(states)} trials: {statuses.count_words(states)}")
    if driver is not None and driver.unfinished:  # which driver runs them, or that none does
        console.print(driver.note() if driver.gone else f"study {name}: {driver.words()}",
                      soft_wrap=True)  # fmt: skip
    console.print(fitted_table(shown_trials.headers, shown_trials.rows, console.width))


def _say_driver_gone(record) -> None:
    """The note of a study whose driver is gone, on stderr (stdout keeps what scripts read)."""
    if note := driver_gone_note(record):
        echo(note, err=True)


@command("list")
def list_studies(tracking_uri: TrackingUri = None) -> None:
    """List the studies a tracking store holds, one name a line."""
    from study.tracking_store import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    try:
        absent = no_store_line(uri)
    except StudyError as err:
        _fail(err)
    if absent is not None:
        echo(absent, err=True)
        return
    for name, note in studies(uri):
        echo(name)
        if note:
            echo(note, err=True)


def _existing(name: str, uri: str, writable: bool = False):
    """The record of a study that exists and can be read; otherwise exit 2 saying why
    (:func:`study.services.recorded.existing`)."""
    try:
        return existing(name, uri, writable)
    except StudyError as err:
        _fail(err)


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
    from study.services.export_results import check_out, export_study
    from study.tracking_store import default_tracking_uri

    try:
        check_out(out)
        done = export_study(name, out, tracking_uri or default_tracking_uri())
    except StudyError as err:
        _fail(err)
    echo(f"wrote {done.path} ({done.rows} rows)")
    if done.note:  # said, not hidden: those rows carry no results yet
        echo(f"{done.note}: the unfinished trials' rows have no results yet")


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
        from study.finished import stored_report

        stored = stored_report(name, uri)
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
    from study.tracking_store import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    try:
        record, trials = finished_trials(name, uri)
    except StudyError as err:
        _fail(err)
    if note := not_finished(record):  # the error is the finished trials' alone
        echo(f"{note}: this answer rests on the trials finished so far")
    try:
        lines = power_answer(name, record, trials, metric, effect, power_, alpha)
    except (StudyError, ValueError) as err:
        _fail(err)
    for line in lines:
        echo(line)


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
    from study.sequential import augment_study, check_augment_options
    from study.tracking_store import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    face = face or ("ccc" if alpha is not None else "ccf")
    try:
        check_augment_options(to, face)
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
    echo(f"run them: {follow_up_run(done.path, uri, done.spec.study)}")


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
    from search_spaces.spec import load_spec
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
    # the finished study's storage
    echo(f"run it: {follow_up_run(done.path, uri, load_spec(spec).study)}")


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
