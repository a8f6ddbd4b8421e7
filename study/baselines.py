"""A study's baselines (``baselines:`` of the study file): measured once, before its trials, and
kept on its parent run.

A study that varies what shapes the encoder or its input (``cnn_grid``, ``encoder``,
``image_size`` …: :data:`trainables.baselines.SHAPING_FIELDS`) has one architecture per distinct
combination of those fields (:func:`study_architectures`), numbered in the order of the design's
first trial of each; every kind is measured for each architecture it depends on
(:func:`trainables.baselines.depends_on`: a random-init or supervised encoder per architecture,
the raw input per data, usually once), so that each point is read against its own.

The parent run gets one metric per baseline value, ``baseline/<kind>/<metric>`` (the mean over
seeds for a seeded kind; the first architecture's in a study of several), the tag
``study.baselines`` (the JSON the results table and the report read: each kind's metrics, its
per-seed probe scores and what was measured; the first architecture's in a study of several, as
older readers read it) and the artifact ``baselines.json`` (everything, per seed), and each
system's per-item outcomes (every probe's label for each held-out item) under
``baselines/outcomes/`` as one Parquet table per system
(:func:`analysis.reading.outcomes.baseline_file`: ``raw.parquet``, ``random_init-seed0.parquet``
…); the tag and ``baselines.json`` leave the outcomes out. A study of several architectures adds
one tag per architecture, ``study.baselines.architecture.<n>`` (``{"arch": n, "fields": {the
varied fields' values}, "baselines": {kind: entry}}``; an entry measured per architecture names
its ``of`` (the fields it depends on, with their values) and ``arch`` (the number its outcome
files carry: ``random_init-seed0-arch2.parquet``)), and the artifact
``baselines-by-architecture.json``. A resumed study finds them there and measures nothing (it
logs the outcome files only if they are missing); a new study on the same data and architecture
reads them from the cache (:func:`trainables.baselines.measure_baselines`).
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, RunTag

from analysis.findings.baselines import architecture_words
from analysis.reading.record import ARCHITECTURE_BASELINES_TAG, BASELINES_TAG
from analysis.stats.units import level
from search_spaces.spec import StudySpec
from study.record import MAX_TAG
from study.terminal import say
from trainables.baselines import (
    SHAPING_FIELDS,
    Baseline,
    baseline_key,
    depends_on,
    measure_baselines,
    metric_name,
)

BASELINES_ARTIFACT = "baselines.json"
ARCHITECTURES_ARTIFACT = "baselines-by-architecture.json"


@dataclass(frozen=True)
class Architecture:
    """One architecture of a study: its ``number`` (1, 2 … in the order of the design's first
    trial of each), ``fields`` (the varied shaping fields' values; empty in a study of one) and
    the ``config`` its baselines are measured with (the first trial's, with these fields)."""

    number: int
    fields: dict[str, Any]
    config: Any


@dataclass
class Measured:
    """The study's baselines: ``by_arch`` (architecture number -> kind -> Baseline) and, for
    each architecture and kind measured per architecture, ``of`` (the fields it depends on,
    with their values) and ``arch`` (the number of the first architecture that shares that
    measurement: its outcome files carry it)."""

    architectures: tuple[Architecture, ...]
    by_arch: dict[int, dict[str, Baseline]] = field(default_factory=dict)
    of: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    arch: dict[tuple[int, str], int] = field(default_factory=dict)

    @property
    def several(self) -> bool:
        return len(self.architectures) > 1

    @property
    def first(self) -> dict[str, Baseline]:
        return self.by_arch[self.architectures[0].number]


def study_architectures(design) -> tuple[tuple[Architecture, ...], tuple[int, ...]]:
    """(the study's architectures, the seeds it uses): the design's trials grouped by the
    shaping fields they vary (:data:`trainables.baselines.SHAPING_FIELDS`); one architecture,
    the first trial's, when they vary none. Every other field is the first trial's."""
    plans = design.representatives()
    first = plans[0].config
    seeds = tuple(sorted({p.seed for p in plans}))
    varied = [name for name in SHAPING_FIELDS
              if len({repr(getattr(p.config, name)) for p in plans}) > 1]  # fmt: skip
    groups: dict[tuple, dict[str, Any]] = {}
    for plan in plans:
        values = {name: getattr(plan.config, name) for name in varied}
        groups.setdefault(tuple(repr(v) for v in values.values()), values)
    architectures = tuple(
        Architecture(i, values, type(first).model_validate(first.model_dump() | values))
        for i, values in enumerate(groups.values(), start=1)
    )  # fmt: skip
    return architectures, seeds


def measure_all(
    architectures: tuple[Architecture, ...], kinds: tuple[str, ...], seeds: tuple[int, ...]
) -> Measured:
    """Every kind for every architecture, each distinct measurement once (the raw input of a
    study that varies only the architecture is one), through the cache."""
    found = Measured(architectures)
    seeds = tuple(sorted(set(seeds))) or (architectures[0].config.seed,)
    done: dict[tuple[str, str], tuple[int, Baseline]] = {}
    for arch in architectures:
        found.by_arch[arch.number] = {}
        for kind in kinds:
            key = (kind, baseline_key(kind, arch.config, seeds))
            if key not in done:
                measured = measure_baselines(arch.config, (kind,), seeds, tell=_said)
                done[key] = arch.number, measured[kind]
            first, baseline = done[key]
            found.by_arch[arch.number][kind] = baseline
            of = {n: v for n, v in arch.fields.items() if n in depends_on(kind)}
            if of:
                found.of[arch.number, kind], found.arch[arch.number, kind] = of, first
    return found


def _said(line: str) -> None:
    """A line of the baselines' own (a damaged cache file, measured again), on stderr."""
    say(line, err=True, flush=True)


def _entry(found: Measured, number: int, kind: str, per_seed: bool = True) -> dict[str, Any]:
    """One kind's JSON for the tags: its metrics, per seed only the probes, and in a study of
    several architectures which one it was measured for (``of``, ``arch``)."""
    entry = found.by_arch[number][kind].to_json(outcomes=False)
    entry["per_seed"] = {
        s: {k: v for k, v in m.items() if k.startswith("probe/")}
        for s, m in entry["per_seed"].items()
    } if per_seed else {}  # fmt: skip
    if (number, kind) in found.of:
        entry["of"], entry["arch"] = found.of[number, kind], found.arch[number, kind]
    return entry


def _within_tag(make) -> str:
    """``make(per_seed)``'s JSON, within MLflow's limit for a tag: with many seeds the
    per-seed scores stay in the artifact only."""
    text = json.dumps(make(True), sort_keys=True, default=str)
    if len(text) > MAX_TAG:
        text = json.dumps(make(False), sort_keys=True, default=str)
    return text


def tag_json(found: dict[str, Baseline] | Measured, note: str = "") -> str:
    """The ``study.baselines`` tag: every kind's metrics, and per seed only the probes (the
    whole per-seed record is the artifact), within MLflow's limit for a tag. In a study of
    several architectures, the first architecture's, each kind measured per architecture
    saying so in its ``about`` (older readers read this tag alone)."""
    if not isinstance(found, Measured):
        found = Measured((Architecture(1, {}, None),), {1: found})
    first = found.architectures[0]
    varied = ", ".join(first.fields)

    def make(per_seed: bool) -> dict[str, Any]:
        data = {}
        for kind in found.first:
            entry = _entry(found, first.number, kind, per_seed)
            if note:
                entry["about"] = f"{entry['about']} ({note})"
            if "of" in entry:
                shown = architecture_words(entry["of"])
                entry["about"] = (f"{entry['about']} (the first architecture's, {shown}; the "
                                  f"study varies {varied}: one per architecture)")  # fmt: skip
            data[kind] = entry
        return data

    return _within_tag(make)


def unseen_note(spec: StudySpec, design, found: Measured) -> str:
    """A note when the study varies a shaping field its design does not lay out before it runs
    (an Optuna design proposes its trials as it goes: its baselines are its first sampled
    trial's architecture's); "" otherwise."""
    varied = [name for name in spec.factors if name in SHAPING_FIELDS]
    laid_out = len(design.representatives()) >= int(design.totals().get("trials") or 0)
    if not varied or found.several or laid_out:
        return ""
    config = found.architectures[0].config
    shown = ", ".join(f"{name} = {getattr(config, name)!r}" for name in varied)
    return f"the study varies {', '.join(varied)}; measured for the first trial's ({shown})"


def architecture_tags(found: Measured) -> dict[str, str]:
    """``study.baselines.architecture.<n>`` -> ``{"arch", "fields", "baselines"}`` of each
    architecture, in a study of several; none in a study of one."""
    if not found.several:
        return {}
    tags = {}
    for arch in found.architectures:

        def make(per_seed: bool, arch=arch) -> dict[str, Any]:
            return {"arch": arch.number, "fields": arch.fields,
                    "baselines": {kind: _entry(found, arch.number, kind, per_seed)
                                  for kind in found.by_arch[arch.number]}}  # fmt: skip

        tags[f"{ARCHITECTURE_BASELINES_TAG}{arch.number}"] = _within_tag(make)
    return tags


def measure_for_study(spec: StudySpec, design, record, parent_id: str, quiet: bool) -> None:
    """Measure the study's baselines (none when ``baselines: []``), one per architecture, and
    log them on its parent run, unless the parent holds these already. A failure is said and
    recorded as a tag (``study.baselines_error``); it never stops the study."""
    if not spec.baselines:
        return
    architectures, seeds = study_architectures(design)
    t0 = time.perf_counter()
    try:
        found = measure_all(architectures, tuple(spec.baselines), seeds)
    except Exception as err:  # the study still runs; its report says no baseline was measured
        message = f"{type(err).__name__}: {err}"
        record.client.set_tag(parent_id, "study.baselines_error", message[:MAX_TAG])
        say(f"baselines not measured: {message}")
        return
    note = unseen_note(spec, design, found)
    tags = {BASELINES_TAG: tag_json(found, note), **architecture_tags(found)}
    parent = record.client.get_run(parent_id)
    if all(parent.data.tags.get(k) == v for k, v in tags.items()):  # resumed: logged already
        log_outcomes(record.client, parent_id, found, only_missing=True)
        return
    now = int(time.time() * 1000)
    metrics = [
        Metric(key, value, now, _free_step(record.client, parent, key))
        for kind, baseline in found.first.items()
        for name, value in sorted(baseline.metrics.items())
        for key in [metric_name(kind, name)]
    ]
    record.client.log_batch(parent_id, metrics=metrics,
                            tags=[RunTag(k, v) for k, v in tags.items()])  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / BASELINES_ARTIFACT
        whole = {
            kind: b.to_json(outcomes=False) | {"note": note} for kind, b in found.first.items()
        }
        path.write_text(json.dumps(whole, indent=1, sort_keys=True))
        record.client.log_artifact(parent_id, str(path))
        if found.several:
            path = Path(tmp) / ARCHITECTURES_ARTIFACT
            every = [{"arch": a.number, "fields": a.fields,
                      "baselines": {kind: b.to_json(outcomes=False)
                                    | {k: v for k, v in _entry(found, a.number, kind).items()
                                       if k in ("of", "arch")}
                                    for kind, b in found.by_arch[a.number].items()}}
                     for a in found.architectures]  # fmt: skip
            path.write_text(json.dumps(every, indent=1, sort_keys=True, default=str))
            record.client.log_artifact(parent_id, str(path))
    log_outcomes(record.client, parent_id, found)
    if not quiet:
        took = time.perf_counter() - t0
        say(f"baselines ({', '.join(found.first)}) measured in {took:.1f} s: {summary(found)}")


def log_outcomes(
    client, parent_id: str, found: dict[str, Baseline] | Measured, only_missing: bool = False
) -> list[str]:
    """Each baseline system's outcomes (``Baseline.outcomes``) as a Parquet table under
    ``baselines/outcomes/`` on the parent run (every one, replacing what is there; with
    ``only_missing``, those not there yet), a kind measured per architecture with the
    architecture's number in its name. Returns the file names logged."""
    from analysis.reading.outcomes import BASELINE_FOLDER, baseline_file, write_outcome_json

    if not isinstance(found, Measured):
        found = Measured((Architecture(1, {}, None),), {1: found})
    systems = {baseline_file(kind, seed, found.arch.get((number, kind))): outcomes
               for number, kinds in found.by_arch.items()
               for kind, baseline in kinds.items()
               for seed, outcomes in baseline.systems().items()}  # fmt: skip
    if only_missing and systems:
        there = {Path(a.path).name for a in client.list_artifacts(parent_id, BASELINE_FOLDER)}
        systems = {name: o for name, o in systems.items() if name not in there}
    if not systems:
        return []
    with tempfile.TemporaryDirectory(prefix="outcomes-") as tmp:
        for name, outcomes in systems.items():
            write_outcome_json(Path(tmp) / name, outcomes)
        client.log_artifacts(parent_id, tmp, BASELINE_FOLDER)
    return sorted(systems)


def _free_step(client, parent, key: str) -> int:
    """Step 0, or one past the last step of ``key`` when the parent has it already (baselines
    measured again, differently: a new row, never a second value at the same step)."""
    if key not in parent.data.metrics:
        return 0
    return max(int(m.step) for m in client.get_metric_history(parent.info.run_id, key)) + 1


def summary(found: dict[str, Baseline] | Measured, metric: str = "probe/knn_top1_h") -> str:
    """One line: each kind's score on ``metric`` (or what it has); in a study of several
    architectures, each architecture's after its fields."""
    if isinstance(found, Measured):
        if not found.several:
            return summary(found.first, metric)
        return " | ".join(
            f"{architecture_words(a.fields)}: {summary(found.by_arch[a.number], metric)}"
            for a in found.architectures
        )
    parts = []
    for kind, baseline in found.items():
        value = baseline.metrics.get(metric)
        if value is not None:
            parts.append(f"{kind} {metric} {level(metric, value)}")
    return "; ".join(parts) or "no probe scores"
