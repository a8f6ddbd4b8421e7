"""Where a study's best point stands against its baselines, said in plain words.

The baselines (the raw input, a random-init encoder, a supervised one: ``trainables.baselines``)
come with the results table (``frame.attrs["baselines"]``). Every one of them and every trial is
scored on the same held-out items, so where the record keeps the per-item outcomes
(:mod:`analysis.reading.outcomes`) the best point's standing is a *paired* comparison on those items
(:func:`analysis.stats.measurement.paired_comparison`): per replicate, the exact McNemar test on the
discordant items; over replicates, the mean paired difference with its interval (seeds and items
counted). The verdict, for a target to maximise (mirrored for one to minimise), follows that
interval:

- ``beat``: the whole interval lies above zero, and the difference is at least one item;
- ``did not beat``: the whole interval lies below zero, by at least one item;
- ``cannot be told apart``: otherwise (a one-image difference is never a win).

A record without per-item outcomes (an older study, a Parquet file alone) compares the baseline's
value with the best point's interval over its replicates instead (``beat`` below it, ``did not
beat`` above it, ``cannot be told apart`` inside it), and ``untested`` when the best point has no
interval.

A study that varies the architecture (``cnn_grid``, ``encoder``, ``image_size`` …) has a
baseline of each (``frame.attrs["baselines_by_architecture"]``, :mod:`study.baselines`): a point
is read against its own architecture's (:func:`baselines_of` with its ``point_id``), and the
words say which (:func:`baseline_name`: "a random-init encoder of its own architecture (cnn_grid
3; 76.1%, mean of seeds 0, 1, 2)"). A study of one architecture is worded as it always was.

Computed first (:func:`standings`, frozen :class:`Standing`), said second
(:meth:`Standing.sentence`, :func:`standing_line`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.stats.best import BestPoint
from analysis.stats.measurement import (
    PairedComparison,
    paired_comparison,
    resolution,
    signed_items,
    signed_points,
)
from analysis.stats.units import amount, is_accuracy, level

# trainables.baselines.KINDS and NAMES, written again here: importing that module would load
# torch into every analysis (a notebook reading a results table needs none)
ORDER = ("raw", "random_init", "supervised")
NAMES = {
    "raw": "the raw input",
    "random_init": "a random-init encoder",
    "supervised": "a supervised encoder",
}
VERDICTS = ("beat", "did not beat", "cannot be told apart", "untested")
# which architecture's baseline a point is read against, in a study of several: its own, or
# (a point whose architecture the record does not hold) the first trial's
OWN, FIRST = "own", "first"


def architecture_words(of) -> str:
    """'cnn_grid 3', 'cnn_grid 3, image_size 16': the fields that tell a study's architectures
    apart (``of``: name -> value, or its items), with this one's values."""
    items = of.items() if isinstance(of, dict) else of
    return ", ".join(f"{name} {value}" for name, value in items)


def baseline_name(kind: str, of=(), whose: str = "") -> str:
    """A baseline's name, the one place it is worded: 'a random-init encoder'; in a study of
    several architectures (``of``: the fields it was measured for), which one: 'a random-init
    encoder of its own architecture' (``whose`` :data:`OWN`), '… of the first trial's
    architecture' (:data:`FIRST`), else 'a random-init encoder at cnn_grid 1'; the raw input's
    is its data ('the raw input of its own data')."""
    name = NAMES.get(kind, kind)
    if not of:
        return name
    what = "data" if kind == "raw" else "architecture"
    if whose == OWN:
        return f"{name} of its own {what}"
    if whose == FIRST:
        return f"{name} of the first trial's {what}"
    return f"{name} at {architecture_words(of)}"


def baseline_label(kind: str, of=(), whose: str = "") -> str:
    """:func:`baseline_name` with the architecture's fields, as a table labels a row: 'a
    random-init encoder of its own architecture (cnn_grid 3)'; the name alone in a study of one."""
    name = baseline_name(kind, of, whose)
    return f"{name} ({architecture_words(of)})" if of and whose in (OWN, FIRST) else name


@dataclass(frozen=True)
class Standing:
    """The best point of ``metric`` against one baseline: ``value`` (the baseline's, under
    ``baseline_metric``: the raw input answers a ``_z`` probe with its ``_h`` score),
    ``seeds`` it was averaged over (empty for the raw input), ``verdict`` (see the module) and
    ``difference`` (best mean minus baseline, in the metric's unit)."""

    kind: str
    metric: str
    baseline_metric: str
    value: float
    seeds: tuple[int, ...]
    verdict: str
    difference: float
    paired: PairedComparison | None = None
    replicates: int = 1  # the best point's: why an untested standing has no interval
    # in a study of several architectures: the fields this baseline was measured for, and
    # whose architecture that is (OWN, FIRST); empty in a study of one
    of: tuple[tuple[str, Any], ...] = ()
    whose: str = ""

    @property
    def name(self) -> str:
        return baseline_name(self.kind, self.of, self.whose)

    @property
    def label(self) -> str:
        return baseline_label(self.kind, self.of, self.whose)

    def reference(self, extra: str = "") -> str:
        """The baseline and its value: 'the raw input (98.0%)', 'a random-init encoder (94.7%,
        mean of seeds 0, 1)'; ``extra`` joins the parenthesis. In a study of several
        architectures, which one's first: 'a random-init encoder of its own architecture
        (cnn_grid 3; 76.1%, mean of seeds 0, 1, 2)'."""
        notes = [level(self.metric, self.value)]
        if len(self.seeds) == 1:
            notes.append(f"seed {self.seeds[0]}")
        elif self.seeds:
            notes.append(f"mean of seeds {', '.join(str(s) for s in self.seeds)}")
        if self.baseline_metric != self.metric:
            notes.append(f"its {self.baseline_metric}")
        text = ", ".join(notes) + (f"; {extra}" if extra else "")
        if self.of and self.whose in (OWN, FIRST):
            text = f"{architecture_words(self.of)}; {text}"
        return f"{self.name} ({text})"

    def sentence(self) -> str:
        """The verdict in words, without a subject: 'beat the raw input (91.2%) by 6.3 points'."""
        if self.paired is not None:
            return self._paired_sentence()
        by = amount(self.metric, self.difference)
        if self.verdict == "beat":
            return f"beat {self.reference()} by {by}"
        if self.verdict == "did not beat":
            return f"did not beat {self.reference()}: {by} short, outside its 95% interval"
        if self.verdict == "cannot be told apart":
            return (f"cannot be told apart from {self.reference()}, which lies within its 95% "
                    "interval")  # fmt: skip
        side = "above" if self.difference > 0 else "below"
        why = ("one replicate" if self.replicates < 2 else "replicates that agree exactly and no "
               "per-item outcomes")  # fmt: skip
        return f"scored {by} {side} {self.reference(f'{why}, so not tested')}"

    def _paired_sentence(self) -> str:
        """'cannot be told apart from the raw input (97.5%): +1.0 item of 360 per replicate on
        average (0.28 points; paired 95% interval −0.5 to +1.1 points); items only it got right
        3, only the raw input 2 (over 2 replicates; exact McNemar p = 1, 1)'."""
        p, d = self.paired, self.paired.difference
        diff = (f"{signed_items(d.mean, d.items)} per replicate on average "
                f"({signed_points(d.mean)}; paired 95% interval {signed_points(d.low)} to "
                f"{signed_points(d.high)})")  # fmt: skip
        ps = ", ".join(f"{t.p:.2g}" for t in p.tests)
        reps = len(p.tests)
        counts = (f"items only it got right: {p.only_trained}, only {self.name}: "
                  f"{p.only_baseline} (over {reps} replicate{'s' * (reps > 1)}; exact McNemar "
                  f"p = {ps})")  # fmt: skip
        words = {"beat": "beat", "did not beat": "did not beat",
                 "cannot be told apart": "cannot be told apart from"}[self.verdict]  # fmt: skip
        return f"{words} {self.reference()}: {diff}; {counts}"

    def to_json(self) -> dict[str, Any]:
        data = {"kind": self.kind, "name": self.name, "metric": self.metric,
                "baseline_metric": self.baseline_metric, "value": self.value,
                "seeds": list(self.seeds), "verdict": self.verdict,
                "difference": self.difference, "sentence": self.sentence(),
                "paired": None if self.paired is None else self.paired.to_json()}  # fmt: skip
        if self.of:  # a study of several architectures: which one's baseline this is
            data["architecture"] = dict(self.of)
            data["whose"] = self.whose
        return data


def baselines_of(df: pd.DataFrame, point_id: str | None = None) -> dict[str, dict[str, Any]]:
    """The study's baselines, in :data:`ORDER` (kind -> the record's entry); empty when none.
    With ``point_id``, in a study of several architectures, that point's own architecture's,
    each measured per architecture marked ``whose`` :data:`OWN` (:data:`FIRST`, and the first
    architecture's, when the record does not hold the point's)."""
    found = df.attrs.get("baselines") or {}
    whose = FIRST
    if point_id is not None and df.attrs.get("baselines_by_architecture"):
        own = architecture_of(df, point_id)
        if own is not None:
            found, whose = own.get("baselines") or {}, OWN
        found = {k: {**e, "whose": whose} if e.get("of") else e for k, e in found.items()}
    rank = {kind: i for i, kind in enumerate(ORDER)}
    return {k: found[k] for k in sorted(found, key=lambda k: (rank.get(k, len(ORDER)), k))}


def architecture_of(df: pd.DataFrame, point_id: str) -> dict[str, Any] | None:
    """The entry of ``df.attrs["baselines_by_architecture"]`` (``{"arch", "fields",
    "baselines"}``) whose fields the point's trials have; None when none matches (or the
    study has one architecture)."""
    if "point_id" not in df:
        return None
    rows = df[df["point_id"] == point_id]
    if rows.empty:
        return None
    row = rows.iloc[0]
    for entry in df.attrs.get("baselines_by_architecture") or []:
        fields = entry.get("fields") or {}
        if all(name in row.index and _same(row[name], value) for name, value in fields.items()):
            return entry
    return None


def _same(ours: Any, recorded: Any) -> bool:
    """A results cell against a value the record keeps as JSON (numbers as numbers, tuples as
    lists)."""
    ours = ours.item() if hasattr(ours, "item") else ours
    if isinstance(ours, tuple | list) or isinstance(recorded, tuple | list):
        return isinstance(ours, tuple | list) and list(ours) == list(recorded or ())
    numbers = (int, float)
    if isinstance(ours, numbers) and isinstance(recorded, numbers):
        return not isinstance(ours, bool) and float(ours) == float(recorded)
    return ours == recorded or (ours is not None and str(ours) == str(recorded))


def point_architectures(df: pd.DataFrame) -> dict[str, int | None]:
    """point_id -> its architecture's number, in a study of several (None for a point whose
    architecture the record does not hold); empty in a study of one."""
    if not df.attrs.get("baselines_by_architecture") or "point_id" not in df:
        return {}
    out = {}
    for point in sorted(df["point_id"].dropna().unique()):
        entry = architecture_of(df, point)
        out[str(point)] = None if entry is None else entry.get("arch")
    return out


def baseline_values(df: pd.DataFrame, metric: str, point_id: str | None = None) -> dict[str, float]:
    """Each baseline's value of ``metric`` (its counterpart: the raw input's ``_h`` probe for a
    ``_z`` one), by the baseline's name, in :data:`ORDER`; empty when none measured it. With
    ``point_id``, in a study of several architectures, the point's own architecture's, each
    named with its fields ('a random-init encoder at cnn_grid 2')."""
    out = {}
    for kind, entry in baselines_of(df, point_id).items():
        metrics = entry.get("metrics") or {}
        name = counterpart(kind, metric, metrics)
        if name is not None:
            out[baseline_name(kind, entry.get("of") or ())] = float(metrics[name])
    return out


def counterpart(kind: str, metric: str, metrics: dict[str, float]) -> str | None:
    """The baseline's name for the trial's ``metric`` (the raw input has only ``_h`` probes)."""
    if metric in metrics:
        return metric
    if kind == "raw" and metric.startswith("probe/") and metric.endswith("_z"):
        twin = metric[: -len("_z")] + "_h"
        return twin if twin in metrics else None
    return None


def verdict(best: BestPoint, value: float) -> str:
    """Where ``value`` lies against the best point's interval (see the module); never ``beat``
    by less than one held-out item, when the record knows the items."""
    if not best.has_interval:
        return "untested"
    low, high = best.ci_low, best.ci_high
    if low <= value <= high:
        return "cannot be told apart"
    if best.items and abs(best.mean - value) < resolution(best.items) * (1 - 1e-9):
        return "cannot be told apart"
    below = value < low
    return "beat" if below == (best.mode == "max") else "did not beat"


def paired_standing(
    best: BestPoint, kind: str, name: str, outcomes, arch: int | None = None
) -> PairedComparison | None:
    """The paired comparison of the best point's replicates with one baseline on the shared
    held-out items (its systems measured for the architecture numbered ``arch``, in a study of
    several); None unless the record keeps both sides' outcomes."""
    if not outcomes or not best.run_ids or not is_accuracy(best.metric):
        return None
    trained = []
    for run_id, seed in zip(best.run_ids, best.seeds or (None,) * len(best.run_ids),
                            strict=True):  # fmt: skip
        system = outcomes.trials.get(run_id)
        if system is None or best.metric not in system.predictions:
            return None
        trained.append((seed, system))
    theirs = outcomes.baseline_systems(kind, name, arch)
    if not theirs:
        return None
    items = trained[0][1].items
    try:
        mine = [(s, o.aligned(items).correct(best.metric)) for s, o in trained]
        other = {s: o.aligned(items).correct(name) for s, o in theirs.items()}
    except ValueError:  # scored on other items: no pairing
        return None
    return paired_comparison(mine, other, best.mode, best.level)


def standings(
    best: BestPoint, baselines: dict[str, dict[str, Any]], outcomes=None
) -> tuple[Standing, ...]:
    """The best point against every baseline that measured its metric, in :data:`ORDER`:
    paired on the shared items where ``outcomes`` (:class:`analysis.reading.outcomes.Outcomes`) hold
    both sides, else against the best point's interval. ``baselines``: :func:`baselines_of`
    the study, with the point's id in a study of several architectures (its own's)."""
    out = []
    for kind, entry in baselines.items():
        metrics = entry.get("metrics") or {}
        name = counterpart(kind, best.metric, metrics)
        if name is None:
            continue
        value = float(metrics[name])
        seeds = tuple(int(s) for s in entry.get("seeds") or ())
        paired = paired_standing(best, kind, name, outcomes, entry.get("arch"))
        found = verdict(best, value) if paired is None else paired.verdict
        difference = best.mean - value if paired is None else paired.difference.mean
        of = tuple((entry.get("of") or {}).items())
        out.append(Standing(kind, best.metric, name, value, seeds, found, difference, paired,
                            best.n, of, entry.get("whose", "") if of else ""))  # fmt: skip
    return tuple(out)


def standing_line(found: tuple[Standing, ...]) -> str | None:
    """One sentence for every baseline: 'Against the baselines, it beat …; it did not beat …'."""
    if not found:
        return None
    return "Against the baselines, it " + "; it ".join(s.sentence() for s in found) + "."


def baselines_json(
    df: pd.DataFrame, best: BestPoint | None, found_standings: tuple[Standing, ...] | None = None
) -> dict[str, Any]:
    """``study report --json``'s ``baselines``: each kind's metrics, seeds and what was measured,
    and where the best point stands against it (``standing``; null when it has no such metric).
    ``found_standings``: the analysis' own
    (:attr:`analysis.study_analysis.StudyAnalysis.standings`). In a study of several
    architectures, the best point's own architecture's, and for each kind measured per
    architecture its ``architecture`` (the fields, with their values), ``whose`` and
    ``by_architecture`` (every architecture's measurement of the kind)."""
    found = baselines_of(df, None if best is None else best.point_id)
    if found_standings is None:
        found_standings = standings(best, found) if best is not None else ()
    by_kind = {s.kind: s for s in found_standings}
    out = {}
    for kind, entry in found.items():
        of, whose = entry.get("of") or {}, entry.get("whose", "")
        out[kind] = {
            "name": baseline_name(kind, of, whose), "metrics": entry.get("metrics") or {},
            "per_seed": entry.get("per_seed") or {}, "seeds": entry.get("seeds") or [],
            "about": entry.get("about", ""),
            "standing": by_kind[kind].to_json() if kind in by_kind else None,
        }  # fmt: skip
        if of:
            out[kind] |= {"architecture": of, "whose": whose,
                          "by_architecture": measured_per_architecture(df, kind)}  # fmt: skip
    return out


def measured_per_architecture(df: pd.DataFrame, kind: str) -> list[dict[str, Any]]:
    """Every architecture's measurement of one kind, in a study of several (each once: the raw
    input shared by architectures of the same data is one): ``architecture`` (its fields),
    ``arch`` (its number), ``metrics``, ``seeds``, ``about``."""
    out, seen = [], set()
    for arch in df.attrs.get("baselines_by_architecture") or []:
        entry = (arch.get("baselines") or {}).get(kind)
        if not entry or not entry.get("of") or entry.get("arch") in seen:
            continue
        seen.add(entry.get("arch"))
        out.append({"architecture": entry["of"], "arch": entry.get("arch"),
                    "metrics": entry.get("metrics") or {}, "seeds": entry.get("seeds") or [],
                    "about": entry.get("about", "")})  # fmt: skip
    return out
