"""``study list``: the studies a tracking store holds, one name a line, each with the note of a
driver that is gone.

Refusals (a tracking URI that cannot be a store) are :class:`~search_spaces.spec.StudyError`;
the typer command prints them and exits 2. No store at all is not a refusal: it is said, and
nothing is created. Deferred: the analysis's store readers and the record are imported when
the command runs; an embedded store is read without MLflow
(``tests/study/test_read_only_commands.py``).
"""

from __future__ import annotations

from collections.abc import Iterator


def no_store_line(uri: str) -> str | None:
    """Why there is nothing to list (no store at ``uri``: nothing was created), or None;
    StudyError when ``uri`` cannot name a store at all."""
    from analysis.reading.store import store_exists
    from study.tracking_store import check_tracking_uri

    check_tracking_uri(uri)
    if not store_exists(uri):
        return f"no study: there is no MLflow store at {uri} (nothing was created)"
    return None


def studies(uri: str) -> Iterator[tuple[str, str | None]]:
    """Each study in the store at ``uri``, with the note of its driver when it is gone (else
    None), read one study at a time."""
    from analysis.reading.record import recorded_studies
    from study.record import StudyRecord
    from study.services.recorded import driver_gone_note

    for name in recorded_studies(uri):
        yield name, driver_gone_note(StudyRecord.existing(uri, name, read_only=True))
