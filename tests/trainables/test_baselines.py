"""Baselines measured: each equals the trial's own probe computed directly on the same split,
they are measured once and cached by the data and the architecture, the study file names only
known kinds, and every name a baseline logs under is one MLflow accepts."""

from __future__ import annotations

import math

import pytest
import torch

from search_spaces.spec import StudyError, load_spec, parse_spec
from trainables import baselines as bl
from trainables.config import TrialConfig
from trainables.data import load_data
from trainables.device import resolve_device
from trainables.encoders import build_model
from trainables.evaluation import evaluate
from trainables.probes import knn_top1, linear_top1
from trainables.seeding import seed_everything

SMALL = {"dataset": "digits", "heldout_size": 120, "probe_train_size": 300,
         "linear_probe_iters": 30, "feature_dim": 32, "projection_hidden": 32,
         "projection_dim": 16, "budget_examples": 512, "batch_size": 64}  # fmt: skip


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


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_damaged_cache_file_is_named_set_aside_and_measured_again(cache, how):
    config = TrialConfig(**SMALL)
    first = bl.measure_baselines(config, ("raw",), (0,))["raw"]
    path = bl.cache_dir() / f"raw-{bl.baseline_key('raw', config, (0,))}.json"
    text = path.read_text()
    spoiled = text[: len(text) // 2] if how == "truncated" else "\x00garbage\n"
    path.write_text(spoiled)
    told: list[str] = []
    again = bl.measure_baselines(config, ("raw",), (0,), tell=told.append)["raw"]
    assert again.metrics == first.metrics  # measured again, the same
    aside = path.with_name(f"{path.name}.unreadable")
    assert aside.read_text() == spoiled and path.is_file()  # its bytes kept; a whole one written
    (line,) = told
    assert f"the cached raw baseline {path} cannot be read" in line
    assert f"set aside as {aside.name}, measuring raw again" in line
