"""Refusals that say the fix: a YAML error names the file, line and column (not PyYAML's
"<unicode string>"); a known key at the wrong level says where it belongs; an invalid study name
gets a valid one; a budget no batch size divides gets the nearest budgets that fit every level."""

from __future__ import annotations

from pathlib import Path

import pytest

from search_spaces.designs import build_design
from search_spaces.spec import StudyError, load_spec, valid_name


def refused(tmp_path: Path, text: str, build: bool = False) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(StudyError) as err:
        spec = load_spec(path)
        if build:
            build_design(spec)
    return str(err.value)


def test_a_yaml_error_names_the_file_line_and_column(tmp_path):
    message = refused(tmp_path, "study: s\ntrial:\n  dataset: digits\n   budget_examples: 7000\n")
    assert message.startswith(f"{tmp_path / 's.yaml'}:4:19: not valid YAML: mapping values are "
                              "not allowed here (check the indentation")  # fmt: skip
    assert "<unicode string>" not in message and "budget_examples: 7000" in message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("study: s\nfactors:\n  temperature: {levels: [0.1, 0.5]}\nbatch_size: {levels: [64]}\n",
         "'batch_size' is a known key at another level: it belongs under factors: (to vary it) "
         "or trial: (to fix it)"),
        ("study: s\nfactors:\n  temperature: {levels: [0.1, 0.5]}\nreplicates: 2\n",
         "'replicates' is a known key at another level: it belongs under design:"),
        ("study: s\nfactors:\n  temperature: {levels: [0.1, 0.5]}\ndesign: {cpu: 2}\n",
         "'cpu' is a known key at another level: it belongs under resources:"),
    ],
)
def test_a_known_key_at_the_wrong_level_says_where_it_belongs(tmp_path, text, said):
    assert said in refused(tmp_path, text)


@pytest.mark.parametrize(("name", "fixed"), [("my study", "my-study"), ("-odd name!", "odd-name"),
                                             ("été 2026", "t-2026"), ("!!!", "my-study")])
def test_an_invalid_name_gets_a_valid_one(tmp_path, name, fixed):
    assert valid_name(name) == fixed
    message = refused(tmp_path, f"study: '{name}'\nfactors:\n  temperature: {{levels: [0.1]}}\n")
    assert "is not a valid study name" in message and f"try {fixed!r}" in message
    text = f"study: {fixed}\nfactors:\n  temperature: {{levels: [0.1]}}\n"
    (tmp_path / "ok.yaml").write_text(text)
    assert load_spec(tmp_path / "ok.yaml").study == fixed


def test_a_budget_no_batch_size_divides_gets_the_nearest_that_fit_every_level(tmp_path):
    message = refused(tmp_path, "study: s\ntrial: {dataset: digits, budget_examples: 7000}\n"
                      "factors:\n  batch_size: {levels: [64, 96, 256]}\n", build=True)  # fmt: skip
    assert ("choose a trial.budget_examples that every batch size divides (64, 96, 256: "
            "their least common multiple is 768); the nearest budgets that fit all of them are "
            "6912 or 7680") in message  # fmt: skip


@pytest.mark.parametrize(("levels", "unmatched"), [
    ([64, 200], "batch_size=200 (a partial batch of 80 examples)"),
    ([64, 200, 300], "batch_size=200 (a partial batch of 80 examples) and batch_size=300 "
                     "(a partial batch of 180 examples)"),
])  # fmt: skip
def test_a_budget_a_batch_size_leaves_partial_is_said_once(tmp_path, levels, unmatched):
    """Two checks catch the same fact (the trial's own and the design's budgets that fit): the
    refusal says it in one sentence, each batch size once, whatever the number of points."""
    message = refused(tmp_path, "study: s\ntrial: {dataset: digits, budget_examples: 7680}\n"
                      "factors:\n  temperature: {levels: [0.1, 0.2, 0.5]}\n"
                      f"  batch_size: {{levels: {levels}}}\n", build=True)  # fmt: skip
    assert f"budget_examples=7680 is unmatchable with {unmatched}, and every" in message
    assert message.count("7680") == 1 and message.count("unmatchable") == 1
    assert message.count("full batches") == 1 and "at point" not in message


HEAD = "study: s\ntrial: {dataset: digits, budget_examples: 7680}\nfactors:\n"
OFF_CENTRE = ("  temperature: {levels: [0.1, 0.15, 0.5]}\n"
              "  base_lr: {levels: [0.001, 0.002, 0.01]}\n"
              "  weight_decay: {levels: [0.0001, 0.0002, 0.01]}\n")  # fmt: skip
THREE_LEVELS = ("  temperature: {levels: [0.1, 0.2, 0.5]}\n"
                "  base_lr: {levels: [0.001, 0.002, 0.01]}\n"
                "  weight_decay: {levels: [0.0001, 0.001, 0.01]}\n")  # fmt: skip
RANGES = ("  temperature: {range: [0.1, 0.5]}\n  base_lr: {range: [0.001, 0.01]}\n"
          "  weight_decay: {range: [0.0001, 0.01]}\n")  # fmt: skip
NO_WHOLE_NUMBER = ("  temperature: {range: [0.1, 0.5]}\n  projection_hidden: {range: [1.2, 1.8]}\n"
                   "  projection_dim: {range: [2.2, 2.7]}\n"
                   "  feature_dim: {range: [3.1, 3.4]}\n")  # fmt: skip
WHOLE = ["projection_hidden", "projection_dim", "feature_dim"]


@pytest.mark.parametrize(("factors", "design", "offending"), [
    (OFF_CENTRE, "{kind: box_behnken}", ["temperature", "base_lr", "weight_decay"]),
    (OFF_CENTRE, "{kind: central_composite}", ["temperature", "base_lr", "weight_decay"]),
    (THREE_LEVELS, "{kind: fractional_factorial}", ["temperature", "base_lr", "weight_decay"]),
    (RANGES, "{kind: full_factorial}", ["temperature", "base_lr", "weight_decay"]),
    (NO_WHOLE_NUMBER, "{kind: latin_hypercube, samples: 4}", WHOLE),
    (NO_WHOLE_NUMBER, "{kind: optuna, samples: 4, metric: probe/knn_top1_h}", WHOLE),
    (NO_WHOLE_NUMBER, "{kind: box_behnken}", WHOLE),
])  # fmt: skip
def test_every_design_kind_names_every_offending_factor_in_one_refusal(
    tmp_path, factors, design, offending
):
    """A study file with several offending factors is refused once, naming each of them (a
    user fixes them in one edit, not one run per factor)."""
    message = refused(tmp_path, f"{HEAD}{factors}design: {design}\n", build=True)
    for name in offending:
        assert f"factors.{name}:" in message, (name, message)
    assert message.count(f"factors.{offending[0]}:") == 1


def test_a_points_design_names_every_offending_point_and_factor(tmp_path):
    message = refused(tmp_path, HEAD + "  temperature: {range: [0.1, 0.5]}\n"
                      "  augmentation: {levels: [crop, crop+noise]}\n"
                      "design:\n  kind: points\n  points:\n"
                      "    - {temperature: 0.9, augmentation: blur}\n"
                      "    - {temperature: 0.2, augmentation: crop}\n"
                      "    - {temperature: x}\n", build=True)  # fmt: skip
    for said in ("design.points.0.temperature: 0.9 lies outside",
                 "design.points.0.augmentation: 'blur' is not one of the levels",
                 "design.points.2: every point gives a value of each factor",
                 "design.points.2.temperature: 'x' is not a number"):  # fmt: skip
        assert said in message, (said, message)
    assert "design.points.1" not in message


def test_augmenting_names_every_factor_without_two_levels(tmp_path):
    from search_spaces.designs import check_augmentable

    path = tmp_path / "s.yaml"
    path.write_text(HEAD + THREE_LEVELS + "design: {kind: full_factorial}\n")
    with pytest.raises(StudyError) as err:
        check_augmentable(load_spec(path))
    for name in ("temperature", "base_lr", "weight_decay"):
        assert f"factors.{name}: levels" in str(err.value)
