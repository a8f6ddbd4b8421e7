"""One direction rule: which way a metric is better is the catalogue's
(:func:`trainables.metrics.better`), and a response surface's default optimum reads it.

The 12 per-class evidence names are where the old name-based guess of ``analysis.stats.surface``
(the last segment only: ``align``, ``uniform``, ``loss``) disagreed with the catalogue. The
catalogue's answers, and why:

* ``{h,z}/{align,uniform}_worst_class``: the largest per-class alignment or uniformity, the worst
  class (trainables.diagnostics); both are lower-is-better quantities, so the worst class is
  improved by lowering it: min.
* ``{h,z}/{align,uniform}_class_spread``: largest − smallest class value; a smaller spread is a
  more even geometry across classes: min.
* ``{h,z}/{align,uniform}_classes``: how many classes had a finite value: a count, not a quality
  of the embedding, which no study should seek; the catalogue's pattern (anything after
  ``align_``/``uniform_``) gives min, pinned here so that a change to it is a decision.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from analysis.stats import surface
from trainables.metrics import better

EVIDENCE = {f"{space}/{m}_{w}": "min" for space, m, w in itertools.product(
    ("h", "z"), ("align", "uniform"), ("worst_class", "class_spread", "classes"))}  # fmt: skip
PLAIN = {
    "z/align": "min", "z/uniform": "min", "h/align": "min", "h/uniform": "min",
    "train/loss": "min", "probe/knn_top1": "max", "probe/knn_top1_z": "max",
    "probe/linear_top1_h": "max", "z/effective_rank": "max",
    "probe/knn_top1_z_worst_class": "max",
    # lower is better although the name says neither: overall − worst class, the share of
    # pairs with a zero row, of anchors whose hardest negative shares their label, and seconds
    "probe/knn_top1_z_class_gap": "min", "probe/linear_top1_h_class_gap": "min",
    "z/zero_rows": "min", "sim/false_negative_rate": "min", "time/train_s": "min",
    "time/eval_s": "min", "sim/pos_mean": "max",
}  # fmt: skip


def test_the_twelve_evidence_names_are_pinned():
    assert len(EVIDENCE) == 12
    assert {name: better(name) for name in EVIDENCE} == EVIDENCE


@pytest.mark.parametrize(("metric", "direction"), sorted(PLAIN.items()))
def test_the_plain_names_keep_their_direction(metric, direction):
    assert better(metric) == direction


def test_the_surface_has_no_rule_of_its_own():
    assert not hasattr(surface, "default_goal")


@pytest.mark.parametrize("metric", ["z/align_worst_class", "z/uniform_class_spread", "z/align"])
def test_a_surface_seeks_the_catalogues_direction_by_default(metric):
    rng = np.random.default_rng(1)
    grid = [(u, v) for u in (-1, 0, 1) for v in (-1, 0, 1)]
    frame = pd.DataFrame([{"temperature": 0.1 * 2**u, "aug_strength": 0.5 + 0.2 * v,
                           metric: 1 + u * u + v * v - 0.3 * u * v + rng.normal(0, 0.01)}
                          for u, v in grid for _ in range(2)])  # fmt: skip
    frame.attrs |= {"factors": ["temperature", "aug_strength"],
                    "scales": {"temperature": "log", "aug_strength": "linear"}}  # fmt: skip
    assert surface.fit_response_surface(frame, metric).goal == better(metric) == "min"
