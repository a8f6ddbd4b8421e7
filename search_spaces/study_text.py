"""A study file's text, read before it is parsed: its encoding (by byte-order mark, else UTF-8)
and a YAML error said as ``FILE:LINE:COLUMN``. :mod:`search_spaces.spec` reads study files with
them (and re-exports them).
"""

from __future__ import annotations

import codecs
from pathlib import Path

import yaml

from search_spaces.spec_base import StudyError

# byte-order marks, longest first (UTF-32 LE begins with UTF-16 LE's mark)
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)  # fmt: skip


def read_study_text(file: str | Path) -> str:
    """A study file's text: read as its byte-order mark says (UTF-8, UTF-16 or UTF-32, as
    Windows editors save "Unicode"), else as UTF-8. Anything else is refused naming the file,
    the byte offset and the fix, never a UnicodeDecodeError's traceback: Latin-1 or another
    legacy encoding, a file of UTF-16 without its mark, a binary file.

    Raises:
        StudyError: the file is not text in one of those encodings.
    """
    data = Path(file).read_bytes()
    encoding, start = "utf-8", 0
    for mark, name in BOMS:
        if data.startswith(mark):
            encoding, start = name, len(mark)
            break
    try:
        text = data[start:].decode(encoding)
    except UnicodeDecodeError as err:
        offset = start + err.start
        raise StudyError(
            f"{file}: not {encoding.upper().replace('-LE', '').replace('-BE', '')} text: byte "
            f"offset {offset} (0x{data[offset]:02x}) {err.reason}; save it as UTF-8"
        ) from None
    if "\x00" in text:
        raise StudyError(
            f"{file}: not a text file: a NUL character at offset {text.index(chr(0))} (a binary "
            "file, or UTF-16 without its byte-order mark); save it as UTF-8"
        )
    return text


def yaml_refusal(file: Path, err: yaml.YAMLError, text: str | None = None) -> str:
    """A YAML error said as ``FILE:LINE:COLUMN: problem (context)``, not PyYAML's
    '"<unicode string>", line 6, column 4' (the text was read before it was parsed)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None)
    if mark is None or problem is None:
        return f"{file}: not valid YAML: {err}"
    context = getattr(err, "context", None)
    where = f"{file}:{mark.line + 1}:{mark.column + 1}"
    lines = (mark.buffer or text or "").splitlines()  # libyaml's marks carry no buffer
    line = lines[mark.line] if mark.line < len(lines) else ""
    hint = ""
    if "mapping values are not allowed" in problem:
        hint = " (check the indentation of this line against the keys above it)"
    pointer = f"\n  {line}\n  {' ' * mark.column}^" if line.strip() else ""
    said = f"{problem}{f' ({context})' if context else ''}{hint}"
    return f"{where}: not valid YAML: {said}{pointer}"
