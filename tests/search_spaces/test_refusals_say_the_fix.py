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
