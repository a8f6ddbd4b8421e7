"""The ``study`` command line: plan, run, status, export, report, augment, env."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Annotated

import typer

from search_spaces.spec import StudyError

app = typer.Typer(
    help="Compute-matched studies of contrastive self-supervised learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

TrackingUri = Annotated[
    str | None,
    typer.Option(help="MLflow tracking URI (default: sqlite:///./mlflow.db, the embedded store)"),
]


def _fail(err: Exception) -> None:
    typer.echo(f"error: {err}", err=True)
    raise typer.Exit(2)


@app.command()
def plan(
    spec: Annotated[str, typer.Argument(help="study file (YAML) or the name of a shipped one")],
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    smoke: Annotated[bool, typer.Option(help="show the smoke variant")] = False,
    tracking_uri: TrackingUri = None,
) -> None:
    """Show the design without running: every trial, its factors and its compute plan; when a
    study of that name has finished trials in the store, the smallest effects the planned
    replicates detect at 80% power, from its error."""
    from search_spaces.designs import build_design
    from search_spaces.spec import load_spec
    from study.runner import smoke_spec

    try:
        study = load_spec(spec)
        if smoke:
            study = smoke_spec(study)
        table = build_design(study)
    except StudyError as err:
        _fail(err)
    data = table.to_json()
    detectable, why = _planned_detectable(table, tracking_uri)
    if detectable:
        data["detectable"] = detectable
    if as_json:
        typer.echo(json.dumps(data, default=str))
        return
    _print_plan(data, table)
    for line in _detectable_lines(detectable, why, table):
        typer.echo(line)


def _planned_detectable(table, tracking_uri: str | None) -> tuple[dict, str]:
    """{metric: {change: smallest effect detected at 80% power}} with the planned replicates,
    from the finished study of the same name; ({}, why not) when there is none. Reads an
    embedded store only when its file exists, and a server only when named."""
    from analysis.load import results_frame
    from analysis.power import detectable_with
    from analysis.report import DEFAULT_RESPONSES
    from study.export import results_table
    from study.record import StudyRecord, default_tracking_uri, store_exists

    spec = table.spec
    if table.adaptive:
        return {}, ""
    uri = tracking_uri or default_tracking_uri()
    if tracking_uri is None and not (uri.startswith("sqlite:///") and store_exists(uri)):
        return {}, ""
    try:
        try:
            record = StudyRecord.existing(uri, spec.study)  # plan only reads: nothing created
        except LookupError:
            return {}, ""
        if record.parent() is None:
            return {}, ""
        df = results_frame(results_table(record))
        if "status" in df:
            df = df[df["status"] == "finished"]
        out = {}
        for metric in (m for m in DEFAULT_RESPONSES if m in df):
            try:
                sizes = detectable_with(_surface_for(df, metric), spec.design.replicates)
            except (StudyError, ValueError):
                continue  # nothing to plan from for this metric (flat, exact, unsupported)
            out[metric] = {change: size for change, size in sizes if size is not None}
        return out, "" if out else "its results carry no error to plan from"
    except Exception as err:  # the plan itself never fails on the record
        return {}, f"the record could not be read ({type(err).__name__}: {err})"


def _detectable_lines(detectable: dict, why: str, table) -> list[str]:
    from analysis.units import amount

    spec = table.spec
    if not detectable:
        return [f"study {spec.study!r} has finished trials, but {why}"] if why else []
    lines = [
        f"smallest effects detected at 80% power with {spec.design.replicates} replicates per "
        f"point, from the finished study {spec.study!r}'s error:"
    ]
    for metric, sizes in detectable.items():
        lines.append(f"  {metric}: " + "; ".join(f"{c} {amount(metric, v)}"
                                                 for c, v in sizes.items()))  # fmt: skip
    return lines


def _print_plan(data: dict, table) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    spec = table.spec
    console.print(f"[bold]{spec.study}[/bold] — {spec.description}")
    console.print(
        f"design {spec.design.kind}, {data['totals']['trials']} trials "
        f"({data['totals']['points']} points × {spec.design.replicates} replicates), "
        f"spec_sha {spec.sha}"
    )
    if table.adaptive:
        console.print(
            f"adaptive: {spec.design.samples} trials proposed by Optuna on "
            f"{spec.design.metric} ({spec.design.mode}) over {', '.join(spec.factors)}"
        )
        return
    grid = Table()
    columns = list(data["trials"][0]) if data["trials"] else []
    for column in columns:
        grid.add_column(column)
    for row in data["trials"]:
        grid.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()])
    console.print(grid)
    for line in _structure_lines(data.get("structure") or {}):
        console.print(line, highlight=False)
    console.print(
        f"every trial sees {data['totals']['examples_per_trial']} examples; "
        f"{data['totals']['examples']} in all"
    )


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


@app.command()
def run(
    spec: Annotated[
        str | None, typer.Argument(help="study file; none runs the default study")
    ] = None,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address ('auto' on a cluster)")
    ] = None,
    tracking_uri: TrackingUri = None,
    storage: Annotated[
        str | None,
        typer.Option(
            help="where trials, checkpoints, results and the report go: a folder (default "
            "studies) or a URI every node reaches (s3://bucket/prefix, gs://…)"
        ),
    ] = None,
    max_concurrent: Annotated[
        int | None,
        typer.Option(min=1, help="trials at once, 1 or more (default: as resources allow)"),
    ] = None,
    smoke: Annotated[
        bool, typer.Option(help="tiny budget, one replicate, as <study>-smoke")
    ] = False,
) -> None:
    """Run a study on Ray Tune; re-running an existing study resumes it."""
    from study.runner import StudyFailedError, StudyInterruptedError, run_study

    try:
        outcome = run_study(
            spec, address=address, tracking_uri=tracking_uri, storage=storage,
            max_concurrent=max_concurrent, smoke=smoke,
        )  # fmt: skip
    except StudyInterruptedError as err:  # Ctrl-C: 128 + SIGINT, as a shell reports it
        typer.echo(f"interrupted: {err}", err=True)
        raise typer.Exit(130) from None
    except KeyboardInterrupt:  # before the study was opened: nothing to end
        typer.echo("interrupted before anything was recorded", err=True)
        raise typer.Exit(130) from None
    except StudyError as err:
        _fail(err)
    except StudyFailedError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    if not outcome.ok:
        raise typer.Exit(1)


@app.command()
def status(
    name: Annotated[str, typer.Argument(help="study name (the MLflow experiment)")],
    tracking_uri: TrackingUri = None,
) -> None:
    """Show a study's trials: status, examples seen and the target metric."""
    from study.record import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    record = _existing(name, uri)
    runs = record.trial_runs()
    typer.echo(f"study {name}: {len(runs)} trials {record.status_counts()}")
    for key, run in sorted(runs.items()):
        m = run.data.metrics
        typer.echo(
            f"  {key:12s} {run.info.status:9s} {run.data.tags.get('study.trial_status', '-'):9s} "
            f"examples {int(m.get('train/examples_seen', 0)):>8d}  "
            f"knn_h {m.get('probe/knn_top1_h', float('nan')):.4f}  {run.info.run_name}"
        )


def _existing(name: str, uri: str):
    """The record of a study that exists and can be read; otherwise exit 2 saying why (and
    which studies the store holds). Nothing is written: no store, no experiment is created."""
    from study.record import StudyRecord, check_store, check_tracking_uri

    try:
        check_tracking_uri(uri)
        check_store(uri, name)  # reads only; an embedded store that is not there stays absent
        record = StudyRecord.existing(uri, name)
        if record.parent() is None:
            raise StudyError(f"no study named {name!r} in {uri}: its experiment has no runs")
    except LookupError as err:
        _fail(StudyError(str(err)))
    except StudyError as err:
        _fail(err)
    return record


@app.command()
def export(
    name: Annotated[str, typer.Argument(help="study name (the MLflow experiment)")],
    out: Annotated[str, typer.Option(help="Parquet file to write (a path or a URI)")],
    tracking_uri: TrackingUri = None,
) -> None:
    """Write the study's results table (one row per trial) as Parquet."""
    from study.export import export_parquet
    from study.record import default_tracking_uri

    record = _existing(name, tracking_uri or default_tracking_uri())
    try:
        path = export_parquet(record, out)
    except (OSError, ValueError) as err:  # pyarrow's reasons: no bucket, a folder there, …
        folder = " (a folder: give a file in it, e.g. --out DIR/results.parquet)" if (
            Path(out).is_dir()) else ""  # fmt: skip
        _fail(StudyError(f"--out {out}: cannot write the results there{folder} ({err}); "
                         "nothing was written"))  # fmt: skip
    typer.echo(f"wrote {path} ({len(record.trial_runs())} rows)")


@app.command()
def report(
    name: Annotated[str | None, typer.Argument(help="study name (read from MLflow)")] = None,
    results: Annotated[
        str | None, typer.Option(help="a results .parquet (a path or a URI) instead of MLflow")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="output folder (default studies/<study>/report)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the summary as one JSON object")
    ] = False,
    tracking_uri: TrackingUri = None,
) -> None:
    """Fit response surfaces, draw every figure, fill the evidence card, write report.html."""
    from study.record import default_tracking_uri
    from study.reporting import make_report

    if (name is None) == (results is None):
        _fail(StudyError("give a study NAME or --results FILE.parquet (one of them)"))
    uri = tracking_uri or default_tracking_uri()
    record = _existing(name, uri) if name else None
    try:
        summary, folder = make_report(record, results, out, tracking_uri=uri)
    except (StudyError, ValueError) as err:
        _fail(err)
    if as_json:
        typer.echo(json.dumps(summary, default=str))
    else:  # the findings first, as study run ends
        for line in summary["headline"]["lines"]:
            typer.echo(line)
        typer.echo(f"wrote {folder / 'report.html'}")


def _finished_results(name: str, uri: str):
    """The results frame of study ``name`` in ``uri`` (exit 2 saying why when there is none)."""
    from analysis.load import results_frame
    from study.export import results_table

    record = _existing(name, uri)
    df = results_frame(results_table(record))
    if "status" in df and not (df["status"] == "finished").any():
        _fail(StudyError(f"study {name!r} has no finished trial in {uri} to plan from"))
    return df


def _surface_for(df, metric: str):
    """The best-supported response surface of ``metric`` (the replicate as the block when seeds
    are common), or a StudyError naming the metric and why."""
    from analysis.report import common_seed_blocks, fit_best_supported

    if metric not in df:
        numeric = sorted(c for c in df.columns if "/" in c and df[c].dtype.kind == "f")
        raise StudyError(f"--metric {metric!r} is not a result of this study; it has {numeric}")
    fit = fit_best_supported(df, metric, blocks=common_seed_blocks(df))
    if fit.surface is None:
        raise StudyError(f"--metric {metric!r}: nothing to plan from ({fit.reason})")
    return fit.surface


@app.command()
def power(
    name: Annotated[str, typer.Argument(help="a finished study (the MLflow experiment)")],
    metric: Annotated[str, typer.Option(help="the response, e.g. probe/knn_top1_h")],
    effect: Annotated[
        float,
        typer.Option(
            help="the effect to detect: in percentage points for an accuracy (probe/…; 1 is one "
            "point, 0.01 as a fraction), in the metric's own units otherwise"
        ),
    ],
    power_: Annotated[float, typer.Option("--power", help="power wanted")] = 0.8,
    alpha: Annotated[float, typer.Option(help="two-sided test level")] = 0.05,
    tracking_uri: TrackingUri = None,
) -> None:
    """Replicates per point needed to detect an effect of size EFFECT on METRIC, from the
    finished study's own error (the same design, replicated)."""
    from analysis.power import MAX_REPLICATES, replicates_for
    from analysis.units import amount, from_typed
    from study.record import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    df = _finished_results(name, uri)
    try:
        if not 0 < power_ < 1 or not 0 < alpha < 1:
            raise StudyError(f"--power {power_} and --alpha {alpha} must lie in (0, 1)")
        surface = _surface_for(df, metric)
        size = from_typed(metric, effect)  # points -> the recorded fraction for an accuracy
        plans = replicates_for(surface, size, alpha=alpha, power=power_)
    except (StudyError, ValueError) as err:
        _fail(err)
    typer.echo(
        f"{name}: to detect an effect of {amount(metric, size)} on {metric} at {power_:.0%} power "
        f"(two-sided, alpha {alpha:g}), from this study's error (mean square "
        f"{surface.error_ms:.3g} on {surface.error_df} df, "
        f"{'the replicate as the block, ' if surface.blocks else ''}"
        f"{plans[0].replicates_now:g} replicates per point now):"
    )
    for plan in plans:
        now = "n/a" if plan.detectable_now is None else amount(metric, plan.detectable_now)
        if plan.replicates_needed is None:
            need = f"more than {MAX_REPLICATES} replicates per point"
        else:
            need = f"{plan.replicates_needed} replicates per point"
            need += f" (detects {amount(metric, plan.detectable_then)})"
        typer.echo(f"  {plan.change}: detectable now {now}; needs {need}")


@app.command()
def augment(
    spec: Annotated[
        str, typer.Argument(help="the finished two-level factorial's study file (or shipped name)")
    ],
    to: Annotated[
        str, typer.Option("--to", help="the design to augment to: central_composite")
    ] = "central_composite",
    face: Annotated[
        str | None,
        typer.Option(
            help="ccf (axial points on the faces, alpha 1; the default) or ccc "
            "(outside them at ±alpha; the default when --alpha is given)"
        ),
    ] = None,
    alpha: Annotated[
        str | None,
        typer.Option(help="ccc: rotatable (default), orthogonal (orthogonal blocking) or a number"),
    ] = None,
    center: Annotated[int | None, typer.Option(help="centre runs in the new block (3)")] = None,
    out: Annotated[
        Path | None, typer.Option(help="the new study file (default: <file>-ccd.yaml beside it)")
    ] = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Turn a finished two-level factorial into a central composite: axial and centre points as
    a second block; writes the new study file (nothing runs; `study run` it next)."""
    from study.augment import augment_study
    from study.record import default_tracking_uri, shell_command, tool

    uri = tracking_uri or default_tracking_uri()
    face = face or ("ccc" if alpha is not None else "ccf")
    try:
        if to != "central_composite":
            raise StudyError(
                f"--to {to!r}: a two-level factorial is augmented to central_composite only"
            )
        if face not in ("ccf", "ccc"):
            raise StudyError(
                f"--face {face!r}: ccf or ccc (cci would move the finished factorial points "
                "inside the bounds)"
            )
        done = augment_study(spec, tracking_uri=uri, face=face, alpha=alpha, center=center,
                             out=out)  # fmt: skip
    except StudyError as err:
        _fail(err)
    structure = done.design.structure
    typer.echo(
        f"wrote {done.path}: {done.spec.study} as a central composite (face {done.spec.design.face}"
        f", alpha {structure['alpha']:.4g}); block 1: {structure['blocks']['1']} finished "
        f"trials, block 2: {done.new_trials} new axial and centre trials"
    )
    typer.echo(
        f"run them: {shell_command(tool('study'), 'run', str(done.path), '--tracking-uri', uri)}"
    )


@app.command()
def env() -> None:
    """Print the versions and devices this environment will run studies with."""
    import mlflow
    import optuna
    import pyarrow
    import ray
    import torch
    import torchvision

    cuda = torch.cuda.is_available()
    typer.echo(f"python       {platform.python_version()}")
    typer.echo(f"torch        {torch.__version__} (torchvision {torchvision.__version__})")
    typer.echo(f"ray          {ray.__version__}")
    typer.echo(f"mlflow       {mlflow.__version__}")
    typer.echo(f"optuna       {optuna.__version__}")
    typer.echo(f"pyarrow      {pyarrow.__version__}")
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    typer.echo(f"device       {'cuda: ' + ', '.join(devices) if cuda else 'cpu'}")


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
