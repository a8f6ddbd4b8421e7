"""Aliases travel with effects: in a resolution III fraction (C = AB) every finding and table row
that names a factor's effect names what it is aliased with (skpr#48, pyDOE#10: an aliased
estimate reported as one factor's)."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from analysis.stats.aliases import alias_map
from analysis.study_analysis import analyse

RESPONSE = "z/align"


def study(points, value) -> pd.DataFrame:
    rows = []
    for p, (t, b, a) in enumerate(points):
        for r in range(2):
            noise = (0.002 if r else -0.002) + 0.0005 * p
            rows.append({"point_id": f"p{p:03d}", "replicate": r, "seed": r, "status": "finished",
                         "temperature": t, "batch_size": b, "aug_strength": a,
                         RESPONSE: value(t, b, a) + noise})  # fmt: skip
    df = pd.DataFrame(rows)
    df.attrs.update({"study": "frac", "factors": ["temperature", "batch_size", "aug_strength"],
                     "design": "fractional_factorial",
                     "scales": {"temperature": "log", "batch_size": "log",
                                "aug_strength": "linear"}})  # fmt: skip
    return df


# C = AB: aug_strength high exactly where temperature and batch_size are both high or both low
FRACTION = [(0.1, 64, 1.0), (0.5, 64, 0.2), (0.1, 256, 0.2), (0.5, 256, 1.0)]


def test_a_resolution_iii_fraction_has_every_main_effect_aliased_with_a_two_factor_interaction():
    df = study(FRACTION, lambda t, b, a: 0.2)
    assert alias_map(df) == {"temperature": ("batch_size × aug_strength",),
                             "batch_size": ("temperature × aug_strength",),
                             "aug_strength": ("temperature × batch_size",)}  # fmt: skip
    full = [(t, b, a) for t, b, a in itertools.product((0.1, 0.5), (64, 256), (0.2, 1.0))]
    assert alias_map(study(full, lambda t, b, a: 0.2)) == {}


def test_a_finding_on_an_aliased_factor_says_so_everywhere():
    df = study(FRACTION, lambda t, b, a: 0.2 + 0.2 * (a - 0.2))
    analysis = analyse(df, (RESPONSE,))
    found = " ".join(analysis.headline.found)
    assert "Aug_strength from 0.2 to 1 (aliased with temperature × batch_size: the estimate is " \
           "their sum) raises z/align" in found  # fmt: skip
    effects = analysis.to_json()["responses"][RESPONSE]["effects"]  # the report's table rows
    assert len(effects) == 3 and all("aliased with" in e["change"] for e in effects)
    for sentence in analysis.headline.found + analysis.headline.not_detected:
        for factor in ("temperature", "batch_size", "aug_strength"):
            if sentence.lower().startswith(factor) or f"doubling {factor}" in sentence.lower():
                assert "aliased with" in sentence, sentence


@pytest.mark.parametrize("value", [lambda t, b, a: 0.2 + 0.1 * (t > 0.2)])
def test_a_full_factorial_names_no_alias(value):
    full = [(t, b, a) for t, b, a in itertools.product((0.1, 0.5), (64, 256), (0.2, 1.0))]
    top = analyse(study(full, value), (RESPONSE,)).headline
    assert "aliased" not in " ".join(top.lines())


def test_the_main_effects_figure_labels_each_aliased_panel():
    import matplotlib

    matplotlib.use("Agg")
    from analysis.report.plots import main_effects

    fig = main_effects(study(FRACTION, lambda t, b, a: 0.2 + 0.2 * (a - 0.2)), RESPONSE)
    labels = [ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()]
    assert any("temperature × batch_size (aliased)" in label for label in labels), labels


def test_the_planning_rows_of_study_power_name_the_aliases_too():
    from analysis.stats.power import power_basis, replicates_for

    df = study(FRACTION, lambda t, b, a: 0.2 + 0.02 * (a - 0.2) + 0.01 * (t > 0.2))
    df.loc[df["replicate"] == 1, RESPONSE] += [0.003, -0.001, 0.002, -0.004]
    surface = analyse(df, (RESPONSE,)).fits[RESPONSE].surface
    basis = power_basis(surface, None, alias_map(df))
    changes = [e.change for e in basis.effects]
    assert changes and all("aliased with" in c for c in changes), changes
    plans = replicates_for(basis, 0.01)
    assert all("aliased with" in p.change for p in plans)
