"""Fixtures of the tests of ``trainables.objectives``."""

from __future__ import annotations

import pytest

from trainables.objectives import memory


@pytest.fixture
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Force the chunked path to split every batch into many anchor chunks."""
    monkeypatch.setattr(memory, "_CHUNK_ELEMENTS", 7)
