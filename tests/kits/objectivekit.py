"""What the tests of ``trainables.objectives`` share: seeded rows, the group policies, a
multi-view batch, and InfoNCE's block layouts forced and spied on."""

from __future__ import annotations

import pytest
import torch

from trainables.objectives import blocks, memory

POLICIES = ["negative", "mask", "positive"]
MULTI_VIEW = {
    # sources with 2, 3 and 4 views, interleaved; groups join sources 0 and 2
    "sources": [0, 1, 0, 2, 1, 2, 2, 0, 1, 2, 3, 3],
    "groups": [0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 1, 1],
}
# 40 rows: sources with 2, 3 and 4 views, interleaved; 4 groups by row, so that groups join
# several sources and the views of one source often lie in different groups
BLOCK_SOURCES = [s % 13 for s in range(26)] + [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 6, 7, 8, 9]
BLOCK_GROUPS = [i % 4 for i in range(40)]
# layout -> _CHUNK_ELEMENTS: the budget (one block), blocks of 3 rows, blocks of one row
LAYOUTS = {"one_block": None, "rows_of_3": 3 * 40, "rows_of_1": 1}


def seeded(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def run_layout(monkeypatch: pytest.MonkeyPatch, layout: str, sparse: bool | None, fn):
    """fn() under a forced layout and positive format; returns (its value, blocks per call)."""
    monkeypatch.setattr(memory, "_CHUNK_ELEMENTS", LAYOUTS[layout])
    monkeypatch.setattr(blocks, "_SPARSE_POSITIVES", sparse)
    found = []
    plan = blocks._Pairs.plan

    def spy(self, step):
        out = plan(self, step)
        found.append(out)
        return out

    monkeypatch.setattr(blocks._Pairs, "plan", spy)
    try:
        return fn(), found
    finally:
        monkeypatch.setattr(blocks._Pairs, "plan", plan)
