"""One study, read once on its way to Ray: the study file opened and parsed, its smoke variant
taken, its design built and its text kept, in one value (:class:`OpenedStudy`) that ``study
run`` makes (:func:`open_study`) and hands to the finished-study shortcut
(:func:`study.finished.finished_run_lines`) and to the driver (:func:`study.runner.run_study`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from search_spaces.designs import AdaptiveDesign, FixedDesign, build_design
from search_spaces.spec import StudyError, StudySpec, in_file, read_spec, smoke_spec


@dataclass(frozen=True)
class OpenedStudy:
    """A study file as ``study run`` reads it, once."""

    path: str | Path | None  # as given: a file, a shipped study's name, None for the default
    smoke: bool
    spec: StudySpec  # the smoke variant with ``smoke``
    design: FixedDesign | AdaptiveDesign
    source_text: str  # what the parent run keeps as the study file


def open_study(spec_path: str | Path | None, smoke: bool = False) -> OpenedStudy:
    """The study at ``spec_path`` (its smoke variant with ``smoke``), read and built once.

    Raises:
        StudyError: the file is missing, is not a study file, or its design cannot be built
            (said naming the file).
    """
    spec, text = read_spec(spec_path)
    source = Path(spec_path) if spec_path else None
    # a shipped study's name or the default: its canonical form, as the record has always kept
    source_text = text if source and source.is_file() else yaml.safe_dump(spec.canonical())
    try:
        if smoke:
            spec = smoke_spec(spec)
        design = build_design(spec)
    except StudyError as err:
        raise in_file(err, spec_path) from None
    return OpenedStudy(spec_path, smoke, spec, design, source_text)
