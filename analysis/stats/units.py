"""One unit for accuracies everywhere a person reads or types one.

Accuracies (``probe/…`` and every ``…top1…`` metric) are recorded as fractions (0.975), as the
probes compute them, and that is what the results table, ``study report --json`` and MLflow
hold. Wherever a person reads or types one (the headline, report.html, the parent run's
description, ``study plan`` and ``study power``) an accuracy is a percentage (97.5%) and a
difference between accuracies is in percentage points (2.8 points); ``study power --effect``
takes points for an accuracy. Every other metric keeps its own unit.
"""

from __future__ import annotations


def is_accuracy(metric: str) -> bool:
    """Whether ``metric`` is an accuracy in [0, 1]: the probes, and any top-1 score."""
    return metric.startswith("probe/") or "top1" in metric


def bounds(metric: str) -> tuple[float, float] | None:
    """The values ``metric`` can take, when it is bounded: [0, 1] for an accuracy."""
    return (0.0, 1.0) if is_accuracy(metric) else None


def level(metric: str, value: float) -> str:
    """A value of ``metric`` as a person reads it: 97.5% for an accuracy, else 4 digits."""
    if is_accuracy(metric):
        return f"{value * 100:.1f}%"
    return f"{value:.4g}"


def amount(metric: str, value: float) -> str:
    """The size of a difference in ``metric`` (unsigned): 2.8 points for an accuracy."""
    if is_accuracy(metric):
        shown = f"{abs(value) * 100:.2g}"
        return f"{shown} point" + ("" if shown == "1" else "s")
    return f"{abs(value):.3g}"


def unit_words(metric: str) -> str:
    """What ``study power --effect`` and the detectable sizes are given in, for ``metric``."""
    return "percentage points" if is_accuracy(metric) else "the metric's own units"


def from_typed(metric: str, value: float) -> float:
    """An effect a person typed (points for an accuracy) in the metric's recorded unit."""
    return value / 100 if is_accuracy(metric) else value


def to_typed(metric: str, value: float) -> float:
    """An effect in the metric's recorded unit as a person types it (points for accuracy)."""
    return value * 100 if is_accuracy(metric) else value
