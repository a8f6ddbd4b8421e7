"""What every part of the study file's schema shares: the refusal a study file gets
(:class:`StudyError`), the longest study name, and the strict base of its models. Its own module so
that :mod:`search_spaces.spec`'s neighbours (:mod:`search_spaces.study_text`,
:mod:`search_spaces.aims`) can use them without importing ``spec`` (``spec`` re-exports them).
"""

from __future__ import annotations

from pydantic import ConfigDict

from trainables.names import KnownNames
from trainables.text import ReadsText


class StudyError(ValueError):
    """A study that cannot run: the message names the field and the value."""


# The study name names a folder, the Ray experiment (name + a 16-character time stamp, + 6 for
# ``-smoke``) and the MLflow experiment; file names stop at 255 bytes.
MAX_NAME = 100


class _Strict(ReadsText, KnownNames):
    model_config = ConfigDict(extra="forbid", frozen=True)
