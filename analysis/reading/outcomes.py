"""Per-item outcomes: what every probe predicted for each held-out item, per trial and per
baseline, so that an accuracy is read as what it is, a count over n shared items.

One system (a trial, or one seed of a baseline) keeps one compact Parquet table:

- ``item``: the held-out item's id (int64: its row in the dataset's held-out pool, the same for
  every system of a study, so outcomes pair item by item);
- ``label``: the item's true class (int16, or the narrowest wider integer its classes need);
- one column per probe metric, named as the metric (``probe/knn_top1_h`` …), holding the label
  that probe predicted for the item (typed as the labels).

The recorded accuracy of a metric is the share of items whose prediction equals the label
(:meth:`SystemOutcomes.accuracy`). Stored zstd-compressed: 10,000 items and four probes take
tens of kilobytes. Where they live in the record: :data:`TRIAL_ARTIFACT` on each trial's run,
:data:`BASELINE_FOLDER`/``<kind>.parquet`` (the raw input) and ``<kind>-seed<s>.parquet`` (a seeded
baseline) on the parent run; in a study of several architectures, a kind measured for each
(a random-init encoder when ``cnn_grid`` varies) adds the architecture's number,
``random_init-seed0-arch2.parquet`` (:func:`baseline_file`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

TRIAL_ARTIFACT = "evidence/outcomes.parquet"
BASELINE_FOLDER = "baselines/outcomes"
ITEM, LABEL = "item", "label"
_BASELINE_FILE = re.compile(
    r"^(?P<kind>[a-z_]+?)(?:-seed(?P<seed>-?\d+))?(?:-arch(?P<arch>\d+))?\.parquet$"
)


@dataclass(frozen=True)
class SystemOutcomes:
    """One system's predictions on the held-out items: ``items`` (n,) ids, ``labels`` (n,) true
    classes and ``predictions`` (metric -> (n,) predicted labels)."""

    items: np.ndarray
    labels: np.ndarray
    predictions: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.items)

    def correct(self, metric: str) -> np.ndarray:
        """(n,) 1 where the probe behind ``metric`` got the item right, else 0 (int8)."""
        return (self.predictions[metric] == self.labels).astype(np.int8)

    def accuracy(self, metric: str) -> float:
        """The share of items ``metric``'s probe got right: the recorded accuracy."""
        return float(self.correct(metric).mean())

    def aligned(self, items: np.ndarray) -> SystemOutcomes:
        """The same outcomes in the order of ``items`` (every id must be held here)."""
        if np.array_equal(items, self.items):
            return self
        order = pd.Index(self.items).get_indexer(items)
        if (order < 0).any():
            raise ValueError("the systems were scored on different held-out items")
        return SystemOutcomes(items, self.labels[order],
                              {k: v[order] for k, v in self.predictions.items()})  # fmt: skip


def outcome_frame(items, labels, predictions: dict[str, object]) -> pd.DataFrame:
    """The stored table of one system (see the module): item, label, one column per metric."""
    columns = {LABEL: np.asarray(labels), **{m: np.asarray(predictions[m])
                                             for m in sorted(predictions)}}  # fmt: skip
    dtype = class_dtype(list(columns.values()))
    frame = pd.DataFrame({ITEM: np.asarray(items, dtype=np.int64)})
    for name, values in columns.items():
        frame[name] = values.astype(dtype)
    return frame


def class_dtype(arrays: list[np.ndarray]) -> type:
    """int16 when every class id fits it (a few bytes an item), else the narrowest integer
    that holds them all: a class id never wraps around silently."""
    values = [a for a in arrays if a.size]
    if not values:
        return np.int16
    low = min(int(a.min()) for a in values)
    high = max(int(a.max()) for a in values)
    for dtype in (np.int16, np.int32, np.int64):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    raise ValueError(f"class ids from {low} to {high} do not fit a 64-bit integer")


def write_outcomes(path: str | Path, items, labels, predictions: dict[str, object]) -> Path:
    """Write one system's outcomes to ``path`` (Parquet, zstd); returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(outcome_frame(items, labels, predictions), preserve_index=False)
    pq.write_table(table, str(path), compression="zstd")
    return Path(path)


def read_outcomes(path: str | Path) -> SystemOutcomes:
    """One system's outcomes from a file written by :func:`write_outcomes`."""
    import pyarrow.parquet as pq

    table = pq.read_table(str(path))
    columns = {name: table[name].to_numpy() for name in table.column_names}
    items, labels = columns.pop(ITEM), columns.pop(LABEL)
    return SystemOutcomes(items.astype(np.int64), labels.astype(np.int64),
                          {k: v.astype(np.int64) for k, v in columns.items()})  # fmt: skip


def baseline_file(kind: str, seed: int | None, arch: int | None = None) -> str:
    """The file name of one baseline system: ``raw.parquet``, ``random_init-seed0.parquet``;
    with ``arch``, the architecture it was measured for in a study of several
    (``random_init-seed0-arch2.parquet``)."""
    name = kind if seed is None else f"{kind}-seed{int(seed)}"
    return f"{name}.parquet" if arch is None else f"{name}-arch{int(arch)}.parquet"


def parse_baseline_file(name: str) -> tuple | None:
    """(kind, seed) of a file named by :func:`baseline_file`, (kind, seed, arch) of one with
    an architecture's number; None for any other name."""
    found = _BASELINE_FILE.match(name)
    if found is None:
        return None
    seed, arch = found.group("seed"), found.group("arch")
    system = (found.group("kind"), None if seed is None else int(seed))
    return system if arch is None else (*system, int(arch))


def system_arch(key: tuple) -> int | None:
    """The architecture's number of a baseline system's key (:attr:`Outcomes.baselines`):
    None for a kind measured once in the study."""
    return key[2] if len(key) > 2 else None


@dataclass(frozen=True)
class Unread:
    """One system's outcomes file that could not be used: ``system`` (a trial's key, or a
    baseline's file name), ``run_id`` (the run that should hold it), ``file`` (where it is or
    should be), ``problem`` (``missing``, or why it does not read: a truncated or garbage file)."""

    system: str
    run_id: str
    file: str
    problem: str

    def sentence(self) -> str:
        what = "are missing" if self.problem == MISSING else f"cannot be read ({self.problem})"
        return (f"the per-item outcomes of {self.system} ({self.file}) {what}: its accuracies "
                "count its seeds only; every other system's outcomes are used")

    def to_json(self) -> dict[str, str]:
        return {"system": self.system, "run_id": self.run_id, "file": self.file,
                "problem": self.problem,
                "done_instead": "its accuracies count its seeds only; every other system's "
                                "outcomes are used"}  # fmt: skip


MISSING = "missing"


@dataclass(frozen=True)
class Outcomes:
    """A study's per-item outcomes: ``trials`` (run id -> its outcomes) and ``baselines``
    ((kind, seed or None) -> outcomes; (kind, seed or None, architecture's number) for a kind
    measured per architecture, :func:`parse_baseline_file`). Every system shares one set of
    held-out items. ``unread``: the files that should be here and are missing or spoiled
    (:class:`Unread`); their systems are simply absent from ``trials`` and ``baselines``."""

    trials: dict[str, SystemOutcomes] = field(default_factory=dict)
    baselines: dict[tuple, SystemOutcomes] = field(default_factory=dict)
    unread: tuple[Unread, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.trials)

    def unread_of(self, run_ids) -> tuple[Unread, ...]:
        """The unread files of these runs (a point's replicates, say)."""
        wanted = set(run_ids)
        return tuple(u for u in self.unread if u.run_id in wanted)

    def table(self, metric: str, run_ids: list[str] | None = None) -> pd.DataFrame:
        """Trial × item: 1 where the trial's probe behind ``metric`` got the item right.
        Rows are run ids (``run_ids`` in that order, default every trial that has the metric;
        a run whose outcomes are not held is left out: the caller counts the rows), columns the
        item ids."""
        ids = [r for r in (run_ids or list(self.trials))
               if r in self.trials and metric in self.trials[r].predictions]  # fmt: skip
        if not ids:
            return pd.DataFrame()
        items = self.trials[ids[0]].items
        rows = [self.trials[r].aligned(items).correct(metric) for r in ids]
        return pd.DataFrame(np.vstack(rows), index=pd.Index(ids, name="run_id"),
                            columns=pd.Index(items, name=ITEM))  # fmt: skip

    def baseline_systems(
        self, kind: str, metric: str, arch: int | None = None
    ) -> dict[int | None, SystemOutcomes]:
        """The systems of one baseline kind that hold ``metric`` (seed -> outcomes); those
        measured for the architecture numbered ``arch``, in a study of several."""
        return {key[1]: o for key, o in self.baselines.items()
                if key[0] == kind and system_arch(key) == arch
                and metric in o.predictions}  # fmt: skip


# the held-out items a trial was scored on: its metric trial/heldout_items, a results column
HELDOUT_ITEMS = "heldout_items"


def heldout_items(df: pd.DataFrame | None = None, outcomes: Outcomes | None = None) -> int | None:
    """The number n of held-out items every accuracy of a study counts over: the outcomes' own
    n, else the trials' recorded :data:`HELDOUT_ITEMS` when they all agree; None when the
    record does not say (a study recorded before either)."""
    if outcomes:
        sizes = {o.n for o in outcomes.trials.values()}
        if len(sizes) == 1:
            return sizes.pop()
    if df is not None and HELDOUT_ITEMS in df:
        values = pd.to_numeric(df[HELDOUT_ITEMS], errors="coerce").dropna().unique()
        if len(values) == 1 and values[0] >= 1:
            return int(values[0])
    return None


__all__ = [
    "BASELINE_FOLDER",
    "HELDOUT_ITEMS",
    "MISSING",
    "TRIAL_ARTIFACT",
    "Outcomes",
    "SystemOutcomes",
    "Unread",
    "baseline_file",
    "heldout_items",
    "outcome_frame",
    "parse_baseline_file",
    "read_outcomes",
    "system_arch",
    "write_outcomes",
]  # fmt: skip


def write_outcome_json(path: Path, outcomes: dict[str, Any]) -> Path:
    """One system's outcomes as a trial or a baseline keeps them in memory
    (``trainables.outcomes.outcome_json``: ``item``, ``label``, ``predictions``) -> its Parquet
    table at ``path``."""
    return write_outcomes(path, outcomes["item"], outcomes["label"], outcomes["predictions"])
