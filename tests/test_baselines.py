"""Baselines: each equals the trial's own probe computed directly on the same split, they are
measured once and cached by the data and the architecture, and the words that place a study's
best point against them say "beat", "did not beat" or "cannot be told apart" exactly when the
baseline lies below, above or inside the point's interval."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from analysis.baselines import baselines_json, standing_line, standings, verdict
from analysis.best import BestPoint
from search_spaces.spec import StudyError, load_spec, parse_spec
from trainables import baselines as bl
from trainables.config import TrialConfig
from trainables.data import load_data
from trainables.encoders import build_model
from trainables.probes import knn_top1, linear_top1
from trainables.train import evaluate, resolve_device, seed_everything

SMALL = {"dataset": "digits", "heldout_size": 120, "probe_train_size": 300,
         "linear_probe_iters": 30, "feature_dim": 32, "projection_hidden": 32,
         "projection_dim": 16, "budget_examples": 512, "batch_size": 64}  # fmt: skip


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTRASTIVE_BASELINE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_raw_baseline_is_the_trials_probes_on_the_flattened_input(cache):
    config = TrialConfig(**SMALL)
    found = bl.measure_baselines(config, ("raw",), (0,))["raw"]
    data = load_data(config)
    train_x = data.train_x[data.probe_index].float().flatten(1)  # digits are [0, 1] already
    held_x = data.heldout_x.float().flatten(1)
    train_y, held_y = data.train_y[data.probe_index], data.heldout_y
    knn = knn_top1(train_x, train_y, held_x, held_y, k=config.knn_k,
                   temperature=config.knn_temperature, num_classes=10)  # fmt: skip
    assert found.metrics["probe/knn_top1_h"] == pytest.approx(knn, abs=1e-12)
    linear = linear_top1(train_x, train_y, held_x, held_y, max_iter=config.linear_probe_iters,
                         num_classes=10)  # fmt: skip
    assert found.metrics["probe/linear_top1_h"] == pytest.approx(linear, abs=1e-12)
    assert set(found.metrics) == {"probe/knn_top1_h", "probe/linear_top1_h"}
    assert "flattened to 64 values" in found.about and found.per_seed == {}


def test_random_init_is_the_untrained_model_of_each_seed_scored_by_the_trials_evaluation(cache):
    config = TrialConfig(**SMALL)
    found = bl.measure_baselines(config, ("random_init",), (1, 0))["random_init"]
    data = load_data(config)
    by_hand = {}
    for seed in (0, 1):
        seed_everything(seed)
        model = build_model(config, data.input_shape)
        by_hand[seed] = evaluate(config, model, data, resolve_device(config))
    assert sorted(found.per_seed) == [0, 1]
    for seed in (0, 1):
        for name, value in found.per_seed[seed].items():
            assert value == pytest.approx(by_hand[seed][name], abs=1e-6), name
    mean = (by_hand[0]["probe/knn_top1_h"] + by_hand[1]["probe/knn_top1_h"]) / 2
    assert found.metrics["probe/knn_top1_h"] == pytest.approx(mean, abs=1e-9)
    # only what does not depend on the factors a study varies for training
    assert all(name.startswith(("probe/", "h/", "z/")) for name in found.metrics)
    assert "sim/pos_mean" not in found.metrics and "loss/candidates" not in found.metrics


def test_a_baseline_is_measured_once_and_keyed_by_data_and_architecture(cache, monkeypatch):
    config = TrialConfig(**SMALL)
    first = bl.measure_baselines(config, ("raw", "random_init"), (0,))
    calls = []
    real = dict(bl.MEASURES)
    monkeypatch.setitem(bl.MEASURES, "random_init",
                        lambda c, s: calls.append(c) or real["random_init"](c, s))  # fmt: skip
    again = bl.measure_baselines(config.model_copy(update={"temperature": 0.7}),
                                 ("random_init",), (0,))  # fmt: skip
    assert calls == [] and again["random_init"].metrics == first["random_init"].metrics
    wider = TrialConfig(**{**SMALL, "feature_dim": 48})
    bl.measure_baselines(wider, ("random_init",), (0,))
    assert len(calls) == 1  # a new architecture is measured anew
    keys = {bl.baseline_key("random_init", c, (0,)) for c in (config, wider)}
    assert len(keys) == 2
    other_data = TrialConfig(**{**SMALL, "heldout_size": 100})
    assert bl.baseline_key("raw", other_data, ()) != bl.baseline_key("raw", config, ())


def test_the_supervised_baseline_trains_the_same_encoder_on_labels(cache):
    config = TrialConfig(**{**SMALL, "budget_examples": 1280})
    found = bl.measure_baselines(config, ("supervised",), (0,))["supervised"]
    untrained = bl.measure_baselines(config, ("random_init",), (0,))["random_init"]
    # 20 steps of labels lift the linear probe on h well above the untrained encoder's
    assert found.metrics["probe/linear_top1_h"] > untrained.metrics["probe/linear_top1_h"] + 0.02
    assert "1,280 examples in batches of 64" in found.about


def test_an_unknown_kind_is_refused_and_the_study_file_names_the_field():
    with pytest.raises(ValueError, match="unknown kind 'pixels'"):
        bl.measure_baselines(TrialConfig(**SMALL), ("pixels",), (0,))
    base = load_spec(None).canonical()
    for bad, words in (("pixels", "baselines"), (["raw", "raw"], "'raw' is listed twice")):
        with pytest.raises(StudyError, match=words):
            parse_spec({**base, "baselines": bad if isinstance(bad, list) else [bad]})


def test_baselines_are_not_in_the_fingerprint():
    base = load_spec(None).canonical()
    specs = [parse_spec({**base, "baselines": kinds}) for kinds in ([], ["raw"], ["supervised"])]
    assert len({s.sha for s in specs}) == 1 and specs[0].baselines == ()
    assert load_spec(None).baselines == ("raw", "random_init")


# ---- where the best point stands -------------------------------------------------------------
def best(mean: float, low: float | None, high: float | None, mode: str = "max") -> BestPoint:
    n = 1 if low is None else 3
    return BestPoint("p001", {"temperature": 0.1}, "probe/knn_top1_h", mode, n, mean, low, high)


RECORDED = {
    "raw": {"metrics": {"probe/knn_top1_h": 0.98}, "seeds": []},
    "random_init": {"metrics": {"probe/knn_top1_h": 0.947, "z/align": 0.4}, "seeds": [0, 1]},
}


@pytest.mark.parametrize(
    ("mean", "low", "high", "raw", "random_init"),
    [
        (0.975, 0.965, 0.985, "within", "beat"),
        (0.960, 0.955, 0.965, "did not beat", "beat"),
        (0.990, 0.985, 0.995, "beat", "beat"),
        (0.950, 0.940, 0.960, "did not beat", "within"),
        (0.975, None, None, "untested", "untested"),
    ],
)
def test_the_verdict_follows_where_the_baseline_lies_against_the_interval(
    mean, low, high, raw, random_init
):
    found = {s.kind: s for s in standings(best(mean, low, high), RECORDED)}
    assert found["raw"].verdict == raw and found["random_init"].verdict == random_init
    assert found["raw"].difference == pytest.approx(mean - 0.98)


def test_a_target_to_minimise_is_beaten_from_below():
    point = BestPoint("p0", {}, "z/align", "min", 3, 0.2, 0.15, 0.25)
    assert verdict(point, 0.4) == "beat" and verdict(point, 0.1) == "did not beat"
    assert verdict(point, 0.2) == "within"
    found = standings(point, RECORDED)
    assert [s.kind for s in found] == ["random_init"]  # the raw input has no geometry


def test_the_words_give_the_numbers_in_points_and_percent():
    line = standing_line(standings(best(0.960, 0.955, 0.965), RECORDED))
    assert line == (
        "Against the baselines, it did not beat the raw input (98.0%): 2 points short, outside "
        "its 95% interval; it beat a random-init encoder (94.7%, mean of seeds 0, 1) by 1.3 "
        "points."
    )
    within = standing_line(standings(best(0.975, 0.965, 0.985), RECORDED))
    told = "cannot be told apart from the raw input (98.0%), which lies within its 95% interval"
    assert told in within
    once = standing_line(standings(best(0.975, None, None), RECORDED))
    assert "scored 0.5 points below the raw input (98.0%; one replicate, so not tested)" in once
    assert standing_line(()) is None


def test_a_z_probe_is_compared_with_the_raw_inputs_h_score():
    point = BestPoint("p0", {}, "probe/knn_top1_z", "max", 3, 0.9, 0.88, 0.92)
    (raw,) = [s for s in standings(point, RECORDED) if s.kind == "raw"]
    assert raw.baseline_metric == "probe/knn_top1_h" and raw.value == 0.98
    assert "its probe/knn_top1_h" in raw.sentence()


def test_the_report_json_keeps_each_baseline_with_its_standing():
    df = pd.DataFrame({"point_id": ["p0"], "probe/knn_top1_h": [0.97]})
    df.attrs["baselines"] = RECORDED
    out = baselines_json(df, best(0.975, 0.965, 0.985))
    assert list(out) == ["raw", "random_init"]
    assert out["raw"]["standing"]["verdict"] == "within"
    assert out["random_init"]["metrics"]["z/align"] == 0.4
    assert baselines_json(pd.DataFrame(), None) == {}


def test_float64_features_give_the_same_raw_probe(cache):
    """The raw input goes through the probes as float32, as a trial's features do; the same
    rows in float64 label the same held-out rows (nothing depends on the precision)."""
    config = TrialConfig(**SMALL)
    found = bl.raw_baseline(config)
    data = load_data(config)
    train = data.train_x[data.probe_index].double().flatten(1)
    held = data.heldout_x.double().flatten(1)
    knn = knn_top1(train, data.train_y[data.probe_index], held, data.heldout_y,
                   k=config.knn_k, temperature=config.knn_temperature, num_classes=10)  # fmt: skip
    assert math.isclose(found.metrics["probe/knn_top1_h"], knn, abs_tol=1 / len(held))
    assert torch.equal(bl.flat_inputs(data, data.heldout_x[:2]), data.heldout_x[:2].flatten(1))


def test_every_baseline_name_is_one_mlflow_accepts():
    """MLflow refuses names with characters outside [A-Za-z0-9_.- /] and with '//'
    (verl-project/verl#4446, open-mmlab/mmdetection#10258); every name a baseline logs under
    passes its own validation."""
    from mlflow.utils.validation import _validate_metric_name

    from trainables.metrics import evaluation_metrics

    config = TrialConfig(**SMALL)
    names = [n for n in evaluation_metrics(config) if n.startswith(bl.PREFIXES)]
    for kind in bl.KINDS:
        for name in names:
            key = bl.metric_name(kind, name)
            _validate_metric_name(key)
            assert "//" not in key and len(key) <= 250


def test_the_parent_gets_them_once_and_a_new_measurement_never_overwrites_a_step(
    tmp_path, cache, monkeypatch
):
    """On a real SQLite store: measured and logged once; the same again logs nothing (a resumed
    study); a different measurement (the cache cleared, another machine) goes one step further,
    never a second value at step 0 (ludwig-ai/ludwig#3670: duplicate metrics per step)."""
    from studykit import duplicated_metric_rows

    from search_spaces.designs import build_design
    from study.baselines import measure_for_study
    from study.record import StudyRecord
    from study.runner import smoke_spec

    spec = smoke_spec(load_spec(None))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = StudyRecord(uri, spec.study)
    design = build_design(spec)
    parent = record.start_parent(spec, design, "")
    fake = {"raw": 0.5}
    measured = lambda c, s: bl.Baseline("raw", {"probe/knn_top1_h": fake["raw"]})  # noqa: E731
    monkeypatch.setitem(bl.MEASURES, "raw", measured)
    spec = spec.model_copy(update={"baselines": ("raw",)})
    for _ in range(2):
        measure_for_study(spec, design, record, parent, quiet=True)
    key = "baseline/raw/probe/knn_top1_h"
    history = record.client.get_metric_history(parent, key)
    assert [(m.step, m.value) for m in history] == [(0, 0.5)]
    fake["raw"] = 0.6
    for path in cache.iterdir():
        path.unlink()
    measure_for_study(spec, design, record, parent, quiet=True)
    history = record.client.get_metric_history(parent, key)
    assert sorted((m.step, m.value) for m in history) == [(0, 0.5), (1, 0.6)]
    assert duplicated_metric_rows(tmp_path / "mlflow.db") == []
    assert '"probe/knn_top1_h": 0.6' in record.client.get_run(parent).data.tags["study.baselines"]
