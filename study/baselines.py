"""A study's baselines (``baselines:`` of the study file): measured once, before its trials, and
kept on its parent run.

The parent run gets one metric per baseline value, ``baseline/<kind>/<metric>`` (the mean over
seeds for a seeded kind), the tag ``study.baselines`` (the JSON the results table and the report
read: each kind's metrics, its per-seed probe scores and what was measured) and the artifact
``baselines.json`` (everything, per seed), and each system's per-item outcomes (every probe's
label for each held-out item) under ``baselines/outcomes/`` as one Parquet table per system
(:func:`analysis.reading.outcomes.baseline_file`: ``raw.parquet``, ``random_init-seed0.parquet`` …);
the tag and ``baselines.json`` leave the outcomes out. A resumed study finds them there and measures
nothing (it logs the outcome files only if they are missing); a new study on the same data and
architecture reads them from the cache (:func:`trainables.baselines.measure_baselines`).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, RunTag

from analysis.reading.record import BASELINES_TAG
from analysis.stats.units import level
from search_spaces.spec import StudySpec
from study.record import MAX_TAG
from trainables.baselines import (
    ARCHITECTURE_FIELDS,
    Baseline,
    measure_baselines,
    metric_name,
)
from trainables.sources import DATA_FIELDS

BASELINES_ARTIFACT = "baselines.json"


def study_configs(design) -> tuple[Any, tuple[int, ...], str]:
    """(the trial config baselines are measured for, the seeds the study uses, a note when the
    study varies the data or the architecture: then they are measured for the first trial's)."""
    plans = design.representatives()
    config = plans[0].config
    seeds = tuple(sorted({p.seed for p in plans}))
    varied = [
        name for name in (*DATA_FIELDS, *ARCHITECTURE_FIELDS)
        if len({repr(getattr(p.config, name)) for p in plans}) > 1
    ]  # fmt: skip
    note = ""
    if varied:
        shown = ", ".join(f"{n} = {getattr(config, n)!r}" for n in varied)
        note = f"the study varies {', '.join(varied)}; measured for the first trial's ({shown})"
    return config, seeds, note


def tag_json(found: dict[str, Baseline], note: str = "") -> str:
    """The ``study.baselines`` tag: every kind's metrics, and per seed only the probes (the
    whole per-seed record is the artifact), within MLflow's limit for a tag."""
    data: dict[str, Any] = {}
    for kind, baseline in found.items():
        entry = baseline.to_json(outcomes=False)
        entry["per_seed"] = {
            s: {k: v for k, v in m.items() if k.startswith("probe/")}
            for s, m in entry["per_seed"].items()
        }
        if note:
            entry["about"] = f"{entry['about']} ({note})"
        data[kind] = entry
    text = json.dumps(data, sort_keys=True)
    if len(text) > MAX_TAG:  # many seeds: the per-seed scores stay in the artifact only
        for entry in data.values():
            entry["per_seed"] = {}
        text = json.dumps(data, sort_keys=True)
    return text


def measure_for_study(spec: StudySpec, design, record, parent_id: str, quiet: bool) -> None:
    """Measure the study's baselines (none when ``baselines: []``) and log them on its parent
    run, unless the parent holds these already. A failure is said and recorded as a tag
    (``study.baselines_error``); it never stops the study."""
    if not spec.baselines:
        return
    config, seeds, note = study_configs(design)
    t0 = time.perf_counter()
    try:
        found = measure_baselines(config, spec.baselines, seeds)
    except Exception as err:  # the study still runs; its report says no baseline was measured
        message = f"{type(err).__name__}: {err}"
        record.client.set_tag(parent_id, "study.baselines_error", message[:MAX_TAG])
        print(f"baselines not measured: {message}")
        return
    text = tag_json(found, note)
    parent = record.client.get_run(parent_id)
    if parent.data.tags.get(BASELINES_TAG) == text:  # a resumed study: logged already
        log_outcomes(record.client, parent_id, found, only_missing=True)
        return
    now = int(time.time() * 1000)
    metrics = [
        Metric(key, value, now, _free_step(record.client, parent, key))
        for kind, baseline in found.items()
        for name, value in sorted(baseline.metrics.items())
        for key in [metric_name(kind, name)]
    ]
    record.client.log_batch(parent_id, metrics=metrics, tags=[RunTag(BASELINES_TAG, text)])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / BASELINES_ARTIFACT
        whole = {kind: b.to_json(outcomes=False) | {"note": note} for kind, b in found.items()}
        path.write_text(json.dumps(whole, indent=1, sort_keys=True))
        record.client.log_artifact(parent_id, str(path))
    log_outcomes(record.client, parent_id, found)
    if not quiet:
        took = time.perf_counter() - t0
        print(f"baselines ({', '.join(found)}) measured in {took:.1f} s: {summary(found)}")


def log_outcomes(
    client, parent_id: str, found: dict[str, Baseline], only_missing: bool = False
) -> list[str]:
    """Each baseline system's outcomes (``Baseline.outcomes``) as a Parquet table under
    ``baselines/outcomes/`` on the parent run (every one, replacing what is there; with
    ``only_missing``, those not there yet). Returns the file names logged."""
    from analysis.reading.outcomes import BASELINE_FOLDER, baseline_file, write_outcome_json

    systems = {baseline_file(kind, seed): outcomes
               for kind, baseline in found.items()
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


def summary(found: dict[str, Baseline], metric: str = "probe/knn_top1_h") -> str:
    """One line: each kind's score on ``metric`` (or what it has)."""
    parts = []
    for kind, baseline in found.items():
        value = baseline.metrics.get(metric)
        if value is not None:
            parts.append(f"{kind} {metric} {level(metric, value)}")
    return "; ".join(parts) or "no probe scores"
