"""Per-item outcomes on disk (analysis.reading.outcomes): one compact Parquet table per system,
read back
exactly; the trial × item table of a metric; the baseline file names."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.reading.outcomes import (
    Outcomes,
    SystemOutcomes,
    baseline_file,
    parse_baseline_file,
    read_outcomes,
    write_outcomes,
)

METRICS = ("probe/knn_top1_h", "probe/knn_top1_z", "probe/linear_top1_h", "probe/linear_top1_z")


def _system(rng, items, labels, right: float) -> dict[str, np.ndarray]:
    """Predictions that match ``labels`` on about ``right`` of the items, else another class."""
    out = {}
    for metric in METRICS:
        wrong = (labels + rng.integers(1, 10, len(labels))) % 10
        out[metric] = np.where(rng.random(len(labels)) < right, labels, wrong)
    return out


def test_a_system_round_trips_exactly(tmp_path):
    rng = np.random.default_rng(0)
    items = rng.permutation(5000)[:300]
    labels = rng.integers(0, 10, 300)
    predictions = _system(rng, items, labels, 0.7)
    path = write_outcomes(tmp_path / "one.parquet", items, labels, predictions)
    back = read_outcomes(path)
    assert back.n == 300 and np.array_equal(back.items, items)
    assert np.array_equal(back.labels, labels)
    assert sorted(back.predictions) == sorted(METRICS)
    for metric in METRICS:
        assert np.array_equal(back.predictions[metric], predictions[metric])
        assert back.accuracy(metric) == float(np.mean(predictions[metric] == labels))


def test_ten_thousand_items_and_four_probes_take_under_100_kb(tmp_path):
    rng = np.random.default_rng(1)
    items, labels = np.arange(10_000), rng.integers(0, 10, 10_000)
    path = write_outcomes(tmp_path / "big.parquet", items, labels,
                          _system(rng, items, labels, 0.8))  # fmt: skip
    size = path.stat().st_size
    assert size < 100_000, size


def test_the_table_is_trial_by_item_correctness_and_its_row_mean_the_accuracy():
    rng = np.random.default_rng(2)
    items, labels = np.arange(50), rng.integers(0, 10, 50)
    first = SystemOutcomes(items, labels, _system(rng, items, labels, 0.6))
    order = rng.permutation(50)  # the second system stored its items in another order
    shuffled = _system(rng, items, labels, 0.9)
    second = SystemOutcomes(items[order], labels[order],
                            {k: v[order] for k, v in shuffled.items()})  # fmt: skip
    outcomes = Outcomes(trials={"a": first, "b": second})
    metric = "probe/knn_top1_h"
    table = outcomes.table(metric)
    assert list(table.index) == ["a", "b"] and list(table.columns) == list(items)
    assert set(np.unique(table.to_numpy())) <= {0, 1}
    assert table.loc["a"].mean() == first.accuracy(metric)
    assert table.loc["b"].mean() == second.accuracy(metric)
    assert np.array_equal(table.loc["b"].to_numpy(), (shuffled[metric] == labels).astype(int))
    assert list(outcomes.table(metric, ["b", "a"]).index) == ["b", "a"]
    assert outcomes.table("probe/unknown").empty


def test_aligned_reorders_and_refuses_other_items():
    items, labels = np.array([3, 1, 2]), np.array([0, 1, 2])
    system = SystemOutcomes(items, labels, {"m": np.array([0, 0, 2])})
    assert system.aligned(items) is system
    again = system.aligned(np.array([1, 2, 3]))
    assert list(again.items) == [1, 2, 3] and list(again.labels) == [1, 2, 0]
    assert list(again.predictions["m"]) == [0, 2, 0]
    assert again.accuracy("m") == system.accuracy("m")
    with pytest.raises(ValueError, match="different held-out items"):
        system.aligned(np.array([1, 2, 4]))


@pytest.mark.parametrize(("kind", "seed", "name"), [
    ("raw", None, "raw.parquet"), ("random_init", 0, "random_init-seed0.parquet"),
    ("supervised", 12, "supervised-seed12.parquet"),
])  # fmt: skip
def test_baseline_files_are_named_and_parsed_back(kind, seed, name):
    assert baseline_file(kind, seed) == name
    assert parse_baseline_file(name) == (kind, seed)


def test_other_file_names_are_no_baseline():
    for name in ("raw.csv", "baselines.json", "Raw.parquet", "random_init-seedx.parquet"):
        assert parse_baseline_file(name) is None


def test_class_ids_beyond_int16_are_stored_wider_never_wrapped(tmp_path):
    """A probe over 40,000 classes (a large label space): int16 would wrap 40,000 to -25,536
    silently (the kind of narrowing apache/arrow and pandas issues report for small ints)."""
    import numpy as np

    from analysis.reading.outcomes import read_outcomes, write_outcomes

    labels = np.array([0, 39_999, 40_000, 7])
    path = write_outcomes(tmp_path / "o.parquet", np.arange(4), labels,
                          {"probe/knn_top1_h": np.array([0, 39_999, 1, 7])})  # fmt: skip
    back = read_outcomes(path)
    assert back.labels.tolist() == labels.tolist()
    assert back.accuracy("probe/knn_top1_h") == 0.75
