"""``study plan``: a study's design as it would run (its table, what one trial holds, its
target, what the design kind adds under the table), how long it would take (``--estimate``), and
the smallest effects its planned replicates detect, from the finished study of the same name.

Refusals are :class:`~search_spaces.spec.StudyError` naming the study file; the typer command
prints them and exits 2, and prints the plan from the lines built here. Deferred: the estimate
(torch: it probes a few steps), the record (:mod:`study.record`) and the analysis (statsmodels,
pandas: seconds) are imported only when they are needed: a plan with no finished study of its
name imports none of them, and reads an embedded store only when its file exists
(``tests/study/test_read_only_commands.py`` checks that a plan imports neither MLflow nor torch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from search_spaces.spec import StudyError
from study import paths
from study.services.power_answer import surface_for


@dataclass
class Plan:
    """A study's plan: its design ``table``, the JSON ``study plan --json`` prints (``data``),
    the estimate when one was asked for, and the smallest detectable effects (or why none)."""

    table: object
    data: dict
    estimate: object = None
    detectable: dict = field(default_factory=dict)
    why: str = ""

    def detectable_lines(self) -> list[str]:
        return detectable_lines(self.detectable, self.why, self.table)


def make_plan(spec: str, *, smoke: bool, estimate: bool, tracking_uri: str | None) -> Plan:
    """The plan of study file ``spec`` (its smoke variant when ``smoke``); StudyError naming the
    file when it cannot be built, or the store when ``tracking_uri`` names one that cannot be."""
    from search_spaces.designs import build_design
    from search_spaces.spec import in_file, load_spec, smoke_spec

    try:
        study = load_spec(spec)
        if smoke:
            study = smoke_spec(study)
        table = build_design(study)
    except StudyError as err:
        raise in_file(err, spec) from None
    if tracking_uri is not None:  # a store named where none can be: said, not passed over
        paths.store_file(tracking_uri, writing=False)
    data = table.to_json()
    data["resources"] = study.canonical()["resources"]  # what one trial holds (memory in bytes)
    found = None
    if estimate:
        from study.estimate import estimate as estimate_study

        found = estimate_study(study, table)
        data["estimate"] = {"wall_s": round(found.wall_s, 1), "slots": found.slots,
                            "fixed_s": found.fixed_s,
                            "probe_s": round(found.probe_s, 1)}  # fmt: skip
    detectable, why = planned_detectable(table, tracking_uri)
    if detectable:
        data["detectable"] = detectable
    return Plan(table, data, found, detectable, why)


def planned_detectable(table, tracking_uri: str | None) -> tuple[dict, str]:
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
                basis = power_basis(surface_for(df, metric), items, aliases)
                sizes = detectable_with(basis, spec.design.replicates)
            except (StudyError, ValueError):
                continue  # nothing to plan from for this metric (flat, exact, unsupported)
            out[metric] = {change: size for change, size in sizes if size is not None}
        if out and items:
            out["__items__"] = items  # the resolution the accuracies are floored at
        return out, "" if out else "its results carry no error to plan from"
    except Exception as err:  # the plan itself never fails on the record
        return {}, f"the record could not be read ({type(err).__name__}: {err})"


def detectable_lines(detectable: dict, why: str, table) -> list[str]:
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


def resources_line(spec) -> str:
    """What one trial holds, said where it asks for memory (Ray then packs trials by it)."""
    from trainables.machine import shown_size

    res = spec.resources
    held = [f"{res.cpu:g} CPU"] + [f"{res.gpu:g} GPU"] * (res.gpu > 0)
    held.append(f"{shown_size(res.memory)} of memory ({res.memory} bytes)")
    each = "each trial" if res.workers == 1 else f"each of a trial's {res.workers} workers"
    return (f"resources: {each} holds {', '.join(held)}; Ray starts no more trials on a node "
            "than its memory holds")  # fmt: skip


def target_line(spec) -> str:
    """The target and which way it is sought, and why when the file did not say."""
    target = spec.target
    way = "maximised" if target.mode == "max" else "minimised"
    why = "" if "mode" in target.model_fields_set else " (its usual direction; no mode given)"
    return f"target {target.metric}: {way}{why}"


def structure_lines(structure: dict) -> list[str]:
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
        lines.append(f"resolution {roman(structure['resolution'])}")
        lines.append("aliases (up to two-factor interactions):")
        lines.extend(f"  {chain}" for chain in structure["aliases"])
    if structure.get("note"):
        lines.append(structure["note"])
    return lines


def roman(resolution: int | None) -> str:
    """Resolution as designs are named (III, IV, V …); a full factorial has none."""
    if resolution is None:
        return "none (full factorial: no word in the defining relation)"
    numerals = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII", 9: "IX", 10: "X"}
    return numerals.get(resolution, str(resolution))


def adaptive_line(spec) -> str:
    """What an adaptive design runs instead of a table: how many trials Optuna proposes, on
    which objectives, over which factors."""
    from search_spaces.designs import objectives_of

    sought = " and ".join(f"{m} ({d})" for _, m, d in objectives_of(spec))
    how = "" if not spec.design.objectives else (
        f", their Pareto front by {(spec.design.sampler or 'nsga2').upper()}")  # fmt: skip
    return (f"adaptive: {spec.design.samples} trials proposed by Optuna on {sought}{how} over "
            f"{', '.join(spec.factors)}")  # fmt: skip
