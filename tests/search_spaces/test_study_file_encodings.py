"""Any text a user saves: a study file with a byte-order mark (UTF-8, UTF-16, UTF-32, little or
big endian, as Windows Notepad saves "Unicode") is read as its mark says; anything else that is
not UTF-8 (Latin-1, UTF-16 without its mark, a binary file) is refused naming the file, the byte
offset and the fix, exit 2, never a UnicodeDecodeError; a description of megabytes costs the
plan linear time and is printed cut to one line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from search_spaces.spec import DEFAULT_SPEC, StudyError, load_spec, read_study_text

STUDY = str(Path(sys.executable).with_name("study"))
TEXT = DEFAULT_SPEC.read_text().replace("on digits", "on digits, café")


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be",
                                      "utf-32", "utf-32-le", "utf-32-be"])  # fmt: skip
def test_a_study_file_with_a_byte_order_mark_reads_as_its_mark_says(tmp_path, encoding):
    data = TEXT.encode(encoding)
    if encoding.endswith(("-le", "-be")):  # these codecs write no mark: add the one they mean
        import codecs

        mark = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE,
                "utf-32-le": codecs.BOM_UTF32_LE, "utf-32-be": codecs.BOM_UTF32_BE}[encoding]
        data = mark + data  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_bytes(data)
    assert read_study_text(path) == TEXT
    assert "café" in load_spec(path).description


@pytest.mark.parametrize(("data", "offset"), [
    (TEXT.encode("latin-1", errors="replace"), TEXT.index("×")),  # ASCII before its first ×
    (TEXT.encode("utf-16-le"), None),       # UTF-16 without its mark
    (bytes(range(256)) * 4, 128),           # a binary file
    (TEXT.encode() + b"\x00\x01", None),    # UTF-8 with a NUL in it
])  # fmt: skip
def test_a_file_that_is_not_utf8_is_refused_naming_file_offset_and_fix(tmp_path, data, offset):
    path = tmp_path / "s.yaml"
    path.write_bytes(data)
    with pytest.raises(StudyError) as err:
        load_spec(path)
    said = str(err.value)
    assert said.startswith(f"{path}: not ") and said.endswith("; save it as UTF-8")
    assert "offset" in said
    if offset is not None:
        assert f"byte offset {offset} " in said


def test_the_command_line_refuses_it_with_exit_2_and_no_traceback(tmp_path):
    (tmp_path / "s.yaml").write_bytes(TEXT.encode("latin-1", errors="replace"))
    done = subprocess.run([STUDY, "plan", "s.yaml"], cwd=tmp_path, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "s.yaml: not UTF-8 text: byte offset" in done.stderr
    assert "save it as UTF-8" in done.stderr


@pytest.mark.slow
def test_a_description_of_megabytes_is_read_in_linear_time_and_printed_on_one_line(tmp_path):
    """The CPU time of `study plan` on an 8 MB description (wall time on a shared machine says
    little): PyYAML's own parser took a minute, rich's wrapping more (Textualize/rich#2716)."""
    import resource

    long = TEXT.replace("description: temperature × batch size on digits, café",
                        "description: " + "word " * 1_600_000)  # fmt: skip
    (tmp_path / "long.yaml").write_text(long)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([STUDY, "plan", "long.yaml"], cwd=tmp_path, capture_output=True,
                          text=True)  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()[:2]
    assert first.startswith("default-digits — word word") and first.endswith(" …")
    assert second.startswith("design full_factorial")
    assert cpu < 4, f"{cpu:.1f} s of CPU ({wall:.1f} s wall)"
