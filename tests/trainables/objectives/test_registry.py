"""The objectives' registry (``trainables/objectives/registry.py``), one conformance test run over
every row, as Optuna's ``test_samplers.py`` runs one over every sampler: a valid row, a loss that
computes (finite, differentiable, the same as the loss it wraps), refusals of the settings it
cannot use, and determinism. A new objective's row is checked here without a new test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from objectivekit import seeded

from trainables.config import TrialConfig
from trainables.metrics import evaluation_metrics
from trainables.objectives import align_uniform_loss, info_nce, nt_xent
from trainables.objectives.registry import (
    DEFAULT_OBJECTIVE,
    GROUPLESS_OBJECTIVES,
    OBJECTIVE_NAMES,
    OBJECTIVES,
    ROWS,
    TEMPERATURE_OBJECTIVES,
)

# the settings each objective needs to make a valid config (the rest are the defaults)
SETTINGS = {"info_nce": {}, "align_uniform": {"lam_t": 2.0}}
NAMES = [row.name for row in ROWS]
ROOT = Path(__file__).resolve().parents[3]


def config_for(name: str, **more) -> TrialConfig:
    return TrialConfig(objective=name, **SETTINGS[name], **more)


def test_every_objective_has_its_settings_here():
    assert sorted(SETTINGS) == sorted(OBJECTIVE_NAMES)


def test_the_config_takes_the_registrys_names_and_its_default():
    field = TrialConfig.model_fields["objective"]
    assert field.annotation.__args__ == OBJECTIVE_NAMES
    assert field.default == DEFAULT_OBJECTIVE == ROWS[0].name
    with pytest.raises(ValueError, match="did you mean 'info_nce'"):
        TrialConfig(objective="infonce")


@pytest.mark.parametrize("name", NAMES)
def test_a_row_is_valid(name):
    row = OBJECTIVES[name]
    assert row.name == name and callable(row.trial_loss()) and callable(row.check)
    assert set(row.settings) <= set(TrialConfig.model_fields)
    assert set(row.metrics) <= set(evaluation_metrics(config_for(name)))
    for other in NAMES:  # a metric of one objective only is absent from another's catalogue
        if other != name:
            assert not set(row.metrics) & set(evaluation_metrics(config_for(other)))
    assert (name in TEMPERATURE_OBJECTIVES) == row.temperature
    assert (name in GROUPLESS_OBJECTIVES) == (not row.groups)
    assert row.similarity and (row.candidates_note is None or row.candidates_note.endswith("."))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("grouped", [False, True])
def test_a_trial_loss_computes_finite_differentiable_and_deterministic(name, grouped):
    config = config_for(name)
    z1 = seeded(8, 5, seed=1).float().requires_grad_()
    z2 = seeded(8, 5, seed=2).float().requires_grad_()
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]) if grouped else None
    loss = OBJECTIVES[name].trial_loss()(config, z1, z2, groups, None)
    assert loss.shape == () and torch.isfinite(loss)
    grad1, grad2 = torch.autograd.grad(loss, (z1, z2))
    assert torch.isfinite(grad1).all() and torch.isfinite(grad2).all() and grad1.abs().sum() > 0
    again = OBJECTIVES[name].trial_loss()(config, z1, z2, groups, None)
    assert torch.equal(loss, again)


def test_the_trial_losses_are_the_losses_they_wrap():
    z1, z2 = seeded(6, 4, seed=3), seeded(6, 4, seed=4)
    config = config_for("info_nce", temperature=0.3, group_policy="mask")
    loss = OBJECTIVES["info_nce"].trial_loss()
    assert torch.equal(loss(config, z1, z2, None), nt_xent(z1, z2, 0.3))
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    sources = torch.arange(6).repeat(2)
    expected = info_nce(torch.cat([z1, z2]), sources, 0.3, groups=groups.repeat(2),
                        group_policy="mask")  # fmt: skip
    assert torch.equal(loss(config, z1, z2, groups), expected)
    config = config_for("align_uniform", uniform_t=3.0, align_alpha=1.5)
    expected = align_uniform_loss(z1, z2, config.lam, 3.0, 1.5)
    assert torch.equal(OBJECTIVES["align_uniform"].trial_loss()(config, z1, z2, None), expected)


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("info_nce", {"lam_t": 1.0}, "lam_t=1.0 applies to objective='align_uniform' only"),
        ("align_uniform", {"lam_t": None}, "lam_t is required with objective='align_uniform'"),
    ],
)
def test_a_row_refuses_the_settings_it_cannot_use(name, settings, message):
    with pytest.raises(ValueError, match=message):
        TrialConfig(objective=name, **settings)


def test_reading_the_registry_imports_no_torch():
    code = ("import sys, trainables.config, trainables.metrics, trainables.objectives.registry; "
            "print('torch' in sys.modules)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert done.stdout.strip() == "False"
