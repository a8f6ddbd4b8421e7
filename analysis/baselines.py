"""Where a study's best point stands against its baselines, said in plain words.

The baselines (the raw input, a random-init encoder, a supervised one: ``trainables.baselines``)
come with the results table (``frame.attrs["baselines"]``). The best point of the target
(:func:`analysis.best.best_point`) has a t interval over its replicates; a baseline is a fixed
reference (the mean over the study's seeds for a seeded one). The verdict, for a target to
maximise (mirrored for one to minimise):

- ``beat``: the baseline lies below the best point's interval;
- ``did not beat``: it lies above the interval;
- ``within``: it lies inside the interval, so this study cannot tell the two apart;
- ``untested``: the best point has one replicate and no interval; the means are compared, and
  said to be untested.

Computed first (:func:`standings`, frozen :class:`Standing`), said second
(:meth:`Standing.sentence`, :func:`standing_line`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.best import BestPoint
from analysis.units import amount, level

# trainables.baselines.KINDS and NAMES, written again here: importing that module would load
# torch into every analysis (a notebook reading a results table needs none)
ORDER = ("raw", "random_init", "supervised")
NAMES = {
    "raw": "the raw input",
    "random_init": "a random-init encoder",
    "supervised": "a supervised encoder",
}
VERDICTS = ("beat", "did not beat", "within", "untested")


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

    @property
    def name(self) -> str:
        return NAMES.get(self.kind, self.kind)

    def reference(self, extra: str = "") -> str:
        """The baseline and its value: 'the raw input (98.0%)', 'a random-init encoder (94.7%,
        mean of seeds 0, 1)'; ``extra`` joins the parenthesis."""
        notes = [level(self.metric, self.value)]
        if len(self.seeds) == 1:
            notes.append(f"seed {self.seeds[0]}")
        elif self.seeds:
            notes.append(f"mean of seeds {', '.join(str(s) for s in self.seeds)}")
        if self.baseline_metric != self.metric:
            notes.append(f"its {self.baseline_metric}")
        text = ", ".join(notes) + (f"; {extra}" if extra else "")
        return f"{self.name} ({text})"

    def sentence(self) -> str:
        """The verdict in words, without a subject: 'beat the raw input (91.2%) by 6.3 points'."""
        by = amount(self.metric, self.difference)
        if self.verdict == "beat":
            return f"beat {self.reference()} by {by}"
        if self.verdict == "did not beat":
            return f"did not beat {self.reference()}: {by} short, outside its 95% interval"
        if self.verdict == "within":
            return (f"cannot be told apart from {self.reference()}, which lies within its 95% "
                    "interval")  # fmt: skip
        side = "above" if self.difference > 0 else "below"
        return f"scored {by} {side} {self.reference('one replicate, so not tested')}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "metric": self.metric,
                "baseline_metric": self.baseline_metric, "value": self.value,
                "seeds": list(self.seeds), "verdict": self.verdict,
                "difference": self.difference, "sentence": self.sentence()}  # fmt: skip


def baselines_of(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The study's baselines, in :data:`ORDER` (kind -> the record's entry); empty when none."""
    found = df.attrs.get("baselines") or {}
    rank = {kind: i for i, kind in enumerate(ORDER)}
    return {k: found[k] for k in sorted(found, key=lambda k: (rank.get(k, len(ORDER)), k))}


def counterpart(kind: str, metric: str, metrics: dict[str, float]) -> str | None:
    """The baseline's name for the trial's ``metric`` (the raw input has only ``_h`` probes)."""
    if metric in metrics:
        return metric
    if kind == "raw" and metric.startswith("probe/") and metric.endswith("_z"):
        twin = metric[: -len("_z")] + "_h"
        return twin if twin in metrics else None
    return None


def verdict(best: BestPoint, value: float) -> str:
    """Where ``value`` lies against the best point's interval (see the module)."""
    if not best.has_interval:
        return "untested"
    low, high = best.ci_low, best.ci_high
    if low <= value <= high:
        return "within"
    below = value < low
    return "beat" if below == (best.mode == "max") else "did not beat"


def standings(best: BestPoint, baselines: dict[str, dict[str, Any]]) -> tuple[Standing, ...]:
    """The best point against every baseline that measured its metric, in :data:`ORDER`."""
    out = []
    for kind, entry in baselines.items():
        metrics = entry.get("metrics") or {}
        name = counterpart(kind, best.metric, metrics)
        if name is None:
            continue
        value = float(metrics[name])
        seeds = tuple(int(s) for s in entry.get("seeds") or ())
        found = verdict(best, value)
        out.append(Standing(kind, best.metric, name, value, seeds, found, best.mean - value))
    return tuple(out)


def standing_line(found: tuple[Standing, ...]) -> str | None:
    """One sentence for every baseline: 'Against the baselines, it beat …; it did not beat …'."""
    if not found:
        return None
    return "Against the baselines, it " + "; it ".join(s.sentence() for s in found) + "."


def baselines_json(df: pd.DataFrame, best: BestPoint | None) -> dict[str, Any]:
    """``study report --json``'s ``baselines``: each kind's metrics, seeds and what was measured,
    and where the best point stands against it (``standing``; null when it has no such metric)."""
    found = baselines_of(df)
    by_kind = {s.kind: s for s in (standings(best, found) if best is not None else ())}
    return {
        kind: {
            "name": NAMES.get(kind, kind), "metrics": entry.get("metrics") or {},
            "per_seed": entry.get("per_seed") or {}, "seeds": entry.get("seeds") or [],
            "about": entry.get("about", ""),
            "standing": by_kind[kind].to_json() if kind in by_kind else None,
        }
        for kind, entry in found.items()
    }  # fmt: skip
