"""``study power``: how many replicates per point would detect an effect of a given size on one
metric, from a finished study's own error; and the response surface that error comes from,
which ``study plan`` reads too (:mod:`study.services.plan`).

Refusals are :class:`~search_spaces.spec.StudyError` (an unknown metric names the closest
ones); the typer command prints them and exits 2. Deferred: the fit (statsmodels, pandas:
seconds) and the results table (pyarrow, MLflow's client for a server) are imported only when
no stored planning basis answers (``tests/study/test_power_basis.py`` checks that an answer
from the basis imports none of them); :mod:`analysis.stats.power` itself is light.
"""

from __future__ import annotations

from pathlib import Path

from search_spaces.spec import StudyError
from trainables.names import did_you_mean, groups, listing

LIST_A_GROUP = "give a group, e.g. --metric probe/, to list its names"


def answer(
    name: str, record, trials: list[tuple[str, str, str]], metric: str, effect: float,
    power: float, alpha: float,
) -> list[str]:  # fmt: skip
    """The lines ``study power`` prints for study ``name`` (its ``record``, its ``trials`` as
    :func:`study.services.recorded.finished_trials` gives them); StudyError (or ValueError, from
    the statistics) saying why there is no answer."""
    from analysis.stats.power import replicates_for
    from analysis.stats.units import amount, from_typed

    if not 0 < power < 1 or not 0 < alpha < 1:
        raise StudyError(f"--power {power} and --alpha {alpha} must lie in (0, 1)")
    basis = stored_basis(record, trials, metric)
    if basis is None:  # no report written for these trials: fit them here
        basis = _fitted_basis(record, metric)
    size = from_typed(metric, effect)  # points -> the recorded fraction for an accuracy
    plans = replicates_for(basis, size, alpha=alpha, power=power)
    now = plans[0].replicates_now
    lines = [
        f"{name}: to detect an effect of {amount(metric, size)} on {metric} at "
        f"{power:.0%} power (two-sided, alpha {alpha:g}), from this study's error (mean square "
        f"{basis.error_ms:.3g} on {basis.error_df} df, "
        f"{'the replicate as the block, ' if basis.blocks else ''}"
        f"{now:g} replicate{'' if now == 1 else 's'} per point now):"
    ]
    return lines + _plan_lines(basis, plans, metric, size)


def _fitted_basis(record, metric: str):
    """``metric``'s planning basis fitted afresh from the study's results table."""
    from analysis.reading.load import results_frame
    from analysis.reading.outcomes import heldout_items
    from analysis.stats.aliases import alias_map
    from analysis.stats.power import power_basis
    from study.export import results_table

    df = results_frame(results_table(record))
    return power_basis(surface_for(df, metric), heldout_items(df), alias_map(df))


def _plan_lines(basis, plans, metric: str, size: float) -> list[str]:
    """The resolution line of an accuracy, then one line per change: what is detectable now
    and how many replicates the effect needs."""
    from analysis.stats.power import MAX_REPLICATES
    from analysis.stats.units import amount, is_accuracy

    lines = []
    if basis.items and is_accuracy(metric):
        lines.append(
            f"  resolution: {basis.items:,} held-out items, one item = {100 / basis.items:.2g} "
            "points; no detectable size is smaller"
        )
    for plan in plans:
        now = "n/a" if plan.detectable_now is None else amount(metric, plan.detectable_now)
        if plan.resolution_limited:
            lines.append(
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
        lines.append(f"  {plan.change}: detectable now {now}; needs {need}")
    return lines


def stored_basis(record, trials: list[tuple[str, str, str]], metric: str):
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


def local_folder(uri: str | None) -> Path | None:
    """The folder an artifact URI names on this machine, else None
    (:func:`analysis.reading.store.local_folder`)."""
    from analysis.reading.store import local_folder as folder

    return folder(uri)


def surface_for(df, metric: str):
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
