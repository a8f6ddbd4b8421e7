"""The recipe's TrialConfig fields (a Fashion-MNIST recipe's choices, each a field a study can
vary): ``cnn_width`` and ``cnn_grid`` shape the small CNN that makes h, ``crop_area_min`` the
crop's scale range. Each is validated, selects what its name says, enters the study's
fingerprint when a study file sets it, and keys the baselines it changes."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from pydantic import ValidationError
from torch import nn

from search_spaces.spec import load_spec, parse_spec
from trainables.augment import strength_parameters
from trainables.baselines import baseline_key
from trainables.config import TrialConfig
from trainables.encoders import build_model, small_cnn
from trainables.views import ViewAugment


@pytest.mark.parametrize(("field", "value"), [
    ("cnn_width", 3), ("cnn_grid", 0), ("cnn_grid", 5), ("crop_area_min", 0.0),
    ("crop_area_min", 1.5), ("crop_area_min", float("nan")),
])  # fmt: skip
def test_each_recipe_field_refuses_a_value_out_of_range_naming_itself(field, value):
    with pytest.raises(ValidationError, match=field):
        TrialConfig(**{field: value})


def _layers(net: nn.Sequential, kind: type) -> list[nn.Module]:
    return [m for m in net if isinstance(m, kind)]


def test_the_default_small_cnn_is_the_one_every_recorded_study_used():
    net = small_cnn(1, 128)
    assert [c.out_channels for c in _layers(net, nn.Conv2d)] == [32, 64, 128]
    assert _layers(net, nn.AdaptiveAvgPool2d)[0].output_size == 1
    assert _layers(net, nn.Linear)[0].in_features == 128


def test_width_and_grid_select_the_channels_and_the_pooled_grid_of_h():
    config = TrialConfig(cnn_width=8, cnn_grid=2, feature_dim=16)
    model = build_model(config, (1, 14, 14))
    convs = _layers(model.encoder, nn.Conv2d)
    assert [c.out_channels for c in convs] == [8, 16, 32]
    assert _layers(model.encoder, nn.AdaptiveAvgPool2d)[0].output_size == 2
    assert _layers(model.encoder, nn.Linear)[0].in_features == 32 * 2 * 2
    h, z = model(torch.rand(3, 1, 14, 14))
    assert h.shape == (3, 16) and z.shape[0] == 3
    # a grid keeps the layout: of a blob on the left, the pooled map's left cells hold the
    # response and its right cells do not (a global pool would average the two into one)
    features = nn.Sequential(*list(model.encoder)[:-2]).eval()  # up to the pooled grid
    left = torch.zeros(1, 1, 14, 14)
    left[..., 4:10, 1:5] = 1.0
    with torch.no_grad():
        pooled = features(left)[0]  # (channels, 2, 2)
    assert pooled.shape == (32, 2, 2)
    assert not torch.allclose(pooled[..., 0], pooled[..., 1])


def test_crop_area_min_replaces_the_strengths_scale_range():
    assert strength_parameters("crop", 1.0)["area_min"] == pytest.approx(0.08)
    assert strength_parameters("crop", 1.0, 0.35)["area_min"] == 0.35
    x = torch.rand(4, 1, 14, 14)
    # at strength 0 the crop is the identity, unless its own scale range says otherwise
    same = ViewAugment(("crop",), 0.0)(x, torch.Generator().manual_seed(0))
    assert torch.allclose(same, x, atol=1e-5)  # the warp at area 1 resamples in place
    cropped = ViewAugment(("crop",), 0.0, crop_area_min=0.2)(x, torch.Generator().manual_seed(0))
    assert not torch.allclose(cropped, x)


def test_the_trial_passes_its_crop_scale_to_its_views():
    from trainables.data import load_data, make_augment

    config = TrialConfig(dataset="digits", augmentation="crop+flip", crop_area_min=0.4)
    assert make_augment(config, load_data(config)).crop_area_min == 0.4


def test_a_study_file_that_sets_a_recipe_field_has_a_fingerprint_of_its_own():
    base = load_spec(None).canonical()
    plain = parse_spec(base)
    grid = parse_spec(base | {"trial": {**base["trial"], "cnn_grid": 2}})
    crop = parse_spec(base | {"trial": {**base["trial"], "crop_area_min": 0.3}})
    assert len({plain.sha, grid.sha, crop.sha}) == 3
    # the new fields' defaults moved no fingerprint: the default study's is the one recorded
    # before they existed (tests/search_spaces/test_designs_published.py pins every shipped one)
    assert plain.sha == "6618997132c18f06"


def test_the_random_init_baseline_follows_the_encoder_and_the_raw_one_the_image_size():
    base = TrialConfig(dataset="digits")
    wider = TrialConfig(dataset="digits", cnn_width=16, cnn_grid=2)
    assert baseline_key("random_init", base, (0,)) != baseline_key("random_init", wider, (0,))
    assert baseline_key("raw", base, ()) == baseline_key("raw", wider, ())  # pixels: no encoder
    smaller = TrialConfig(dataset="digits", image_size=8)
    bigger = TrialConfig(dataset="digits", image_size=16)
    assert baseline_key("raw", smaller, ()) != baseline_key("raw", bigger, ())


def test_the_evidence_card_says_the_trials_own_crop_scale():
    from analysis.report.evidence.augmentation import augmentations

    df = pd.DataFrame({"status": ["finished"] * 2, "augmentation": ["crop+flip"] * 2,
                       "aug_strength": [1.0, 1.0], "crop_area_min": [0.3, 0.3]})  # fmt: skip
    text = augmentations(df, {}).caption
    assert "area 0.30-1 of the image" in text and "area 0.08-1" not in text
