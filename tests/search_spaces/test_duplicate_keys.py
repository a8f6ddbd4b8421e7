"""A key given twice in one mapping of a study file (or a trial file), at any depth, is refused
naming both lines, every duplicate at once: PyYAML keeps the last silently (yaml/pyyaml#165,
rbgirshick/yacs#17), so the study that ran would not be the one in the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces.spec import StudyError, load_spec
from trainables.text import DuplicateKeyError, load_yaml

STUDY = str(Path(sys.executable).with_name("study"))
TWICE = """\
study: twice
trial:
  dataset: digits
  budget_examples: 7680
factors:
  temperature: {levels: [0.1, 0.5], scale: log}
  batch_size: {levels: [64, 256], scale: log}
  temperature: {levels: [0.2, 0.4], scale: log}
design: {kind: full_factorial, replicates: 2}
design:
  kind: full_factorial
"""


def test_every_duplicate_is_named_with_both_lines():
    with pytest.raises(DuplicateKeyError) as err:
        load_yaml(TWICE)
    message = str(err.value)
    assert "factors.temperature (lines 6 and 8)" in message
    assert "design (lines 9 and 10)" in message


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a: 1\na: 2\n", "a (lines 1 and 2)"),
        ("t:\n  f:\n    g: 1\n    g: 2\n", "t.f.g (lines 3 and 4)"),
        ("design:\n  points:\n    - {temperature: 0.1, temperature: 0.2}\n",
         "design.points[0].temperature (lines 3 and 3)"),
        ("a: {x: 1, x: 1}\n", "a.x (lines 1 and 1)"),  # the same value twice is still twice
    ],
)
def test_a_duplicate_at_any_depth_is_refused(text, where):
    with pytest.raises(DuplicateKeyError, match=where.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")):  # fmt: skip
        load_yaml(text)


def test_merge_keys_and_equal_keys_in_different_mappings_are_fine():
    text = "base: &b {x: 1}\none: {<<: *b, y: 2}\ntwo: {x: 3}\n"
    # numbers stay text until a declared type reads them (trainables.text)
    assert load_yaml(text) == {"base": {"x": "1"}, "one": {"x": "1", "y": "2"}, "two": {"x": "3"}}


def test_the_study_file_is_refused_naming_itself(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(TWICE)
    with pytest.raises(StudyError) as err:
        load_spec(path)
    assert str(err.value).startswith(f"{path}: ")


@pytest.mark.parametrize("command", ["plan", "run"])
def test_plan_and_run_exit_2_and_record_nothing(tmp_path, command):
    (tmp_path / "twice.yaml").write_text(TWICE)
    done = subprocess.run([STUDY, command, "twice.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "factors.temperature (lines 6 and 8)" in done.stderr
    assert "design (lines 9 and 10)" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["twice.yaml"]
