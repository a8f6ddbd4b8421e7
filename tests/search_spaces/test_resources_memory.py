"""``resources.memory``: the memory one trial (each worker) holds, written as a size; a study file
without it means what it meant before (same canonical file, same fingerprint)."""

from __future__ import annotations

import pytest
import yaml

from search_spaces.spec import StudyError, load_spec, parse_spec

DEFAULT_SHA = load_spec(None).sha


def spec_file(tmp_path, resources: str):
    text = load_spec(None).canonical()
    path = tmp_path / "s.yaml"
    text.pop("resources")
    path.write_text(yaml.safe_dump(text) + f"resources: {resources}\n")
    return load_spec(path)


@pytest.mark.parametrize(("written", "size"), [
    ("2GiB", 2 * 2**30), ("512MB", 512 * 10**6), ("1073741824", 2**30), ("1.5 GB", 1.5e9),
])  # fmt: skip
def test_memory_per_trial_is_read_as_a_size_in_bytes(tmp_path, written, size):
    spec = spec_file(tmp_path, f"{{cpu: 1, memory: {written}}}")
    assert spec.resources.memory == size
    assert spec.resources.trial_memory == size
    assert spec.canonical()["resources"]["memory"] == size  # the recorded file says bytes
    assert parse_spec(spec.canonical()) == spec  # and reads back as the same study
    assert spec.sha != DEFAULT_SHA  # a trial that holds memory is another study


def test_a_study_without_memory_keeps_its_file_and_fingerprint(tmp_path):
    spec = spec_file(tmp_path, "{cpu: 1, gpu: 0}")
    assert "memory" not in spec.canonical()["resources"]
    assert spec.sha == DEFAULT_SHA


def test_data_parallel_workers_each_hold_the_memory(tmp_path):
    spec = spec_file(tmp_path, "{workers: 2, cpu: 1, memory: 1GiB}")
    assert spec.resources.trial_memory == 2 * 2**30


@pytest.mark.parametrize(("written", "said"), [
    ("lots", "resources.memory: a size is bytes, or a number with B, KB, MB, GB, TB"),
    ("0", "resources.memory: Input should be greater than 0"),
    ("2 GiBs", "(got '2 GiBs')"),
])  # fmt: skip
def test_memory_that_is_no_size_is_refused_naming_the_field_and_value(tmp_path, written, said):
    with pytest.raises(StudyError) as refused:
        spec_file(tmp_path, f"{{cpu: 1, memory: {written}}}")
    assert said in str(refused.value)
