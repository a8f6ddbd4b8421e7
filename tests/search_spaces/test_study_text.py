"""search_spaces/study_text.py: a study file's text read by its byte-order mark (else UTF-8),
anything else refused naming the file and the offset; a YAML error said as FILE:LINE:COLUMN."""

from __future__ import annotations

import pytest
import yaml

from search_spaces.spec_base import StudyError
from search_spaces.study_text import read_study_text, yaml_refusal

TEXT = "study: tau\nfactors: {temperature: {levels: [0.1, 0.5]}}  # τ\n"


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32", "utf-8"])
def test_text_with_a_byte_order_mark_or_in_utf8_reads_alike(tmp_path, encoding):
    path = tmp_path / "s.yaml"
    path.write_bytes(TEXT.encode(encoding))
    assert read_study_text(path) == TEXT


def test_latin1_is_refused_with_the_file_the_offset_and_the_fix(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes("study: café\n".encode("latin-1"))
    with pytest.raises(StudyError) as refusal:
        read_study_text(path)
    assert str(refusal.value) == (
        f"{path}: not UTF-8 text: byte offset 10 (0xe9) invalid continuation byte; "
        "save it as UTF-8"
    )


def test_utf16_without_its_mark_is_refused_as_not_text(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes("study: x\n".encode("utf-16-le"))
    with pytest.raises(StudyError, match=r"not a text file: a NUL character at offset 1"):
        read_study_text(path)


def test_a_yaml_error_names_the_line_and_column_and_points_at_it(tmp_path):
    text = "study: x\ntrial:\n  dataset: digits\n   budget: 3\n"
    with pytest.raises(yaml.YAMLError) as err:
        yaml.safe_load(text)
    said = yaml_refusal(tmp_path / "s.yaml", err.value, text)
    first, line, pointer = said.splitlines()
    assert first.startswith(f"{tmp_path / 's.yaml'}:4:")
    assert "not valid YAML: mapping values are not allowed here" in first
    assert "check the indentation" in first
    assert line == "     budget: 3"
    assert pointer.strip() == "^"


def test_a_yaml_error_without_a_mark_is_said_whole(tmp_path):
    said = yaml_refusal(tmp_path / "s.yaml", yaml.YAMLError("odd"))
    assert said == f"{tmp_path / 's.yaml'}: not valid YAML: odd"
