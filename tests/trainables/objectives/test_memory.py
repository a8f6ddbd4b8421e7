"""The block budget (``trainables/objectives/memory.py``): rows per block, the CPU's and CUDA's
budgets, and peak memory within a small budget."""

from __future__ import annotations

import pytest
import torch
from objectivekit import (
    POLICIES,
    run_layout,
    seeded,
)

from trainables.objectives import (
    info_nce,
    memory,
    rows_per_chunk,
)


def test_rows_per_chunk_follows_the_budget():
    per_pair = memory.block_bytes_per_pair(torch.float32)
    assert per_pair == 12 and memory.block_bytes_per_pair(torch.float64) == 20
    # one block exactly when the whole (N, M) block fits
    assert rows_per_chunk(1000, 1000, budget=1000 * 1000 * 12, bytes_per_element=12) == 1000
    assert rows_per_chunk(1000, 1000, budget=1000 * 1000 * 12 - 1, bytes_per_element=12) == 500
    assert rows_per_chunk(1000, 1000, budget=400 * 1000 * 12, bytes_per_element=12) == 334
    # N = 16384 on CUDA's cap: several blocks, each within the budget
    rows = rows_per_chunk(16384, 16384, budget=2**29, bytes_per_element=per_pair)
    blocks = -(-16384 // rows)
    assert blocks == 7 and rows == 2341  # 2730 rows fit: 7 blocks, made equal
    assert rows * 16384 * per_pair <= 2**29
    assert rows_per_chunk(10, 10, budget=1, bytes_per_element=12) == 1  # at least one row
    assert rows_per_chunk(2**20) == 4  # without a budget: blocks of 2**22 elements, as before
    assert rows_per_chunk(12, 12, budget=2**30) == 12


def test_memory_budget(monkeypatch):
    budget = memory.memory_budget("cpu")
    assert 0 < budget <= memory._CPU_BUDGET_BYTES
    assert memory.memory_budget() == budget
    monkeypatch.setattr(memory, "_CPU_BUDGET_BYTES", 12345)
    assert memory.memory_budget(torch.device("cpu")) == 12345


def test_cuda_budget_follows_free_memory(monkeypatch):
    free, reserved, allocated, fraction = 6 * 2**30, 2**30, 2**29, 1.0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated)
    monkeypatch.setattr(
        torch.cuda, "get_per_process_memory_fraction", lambda device=None: fraction, raising=False
    )
    assert memory.memory_budget("cuda") == memory._CUDA_BUDGET_BYTES == 2**30
    free = 2**30  # short of memory: a quarter of free + cached unused
    assert memory.memory_budget(torch.device("cuda", 0)) == (2**30 + 2**29) // 4
    # a trial capped at a quarter of an 80 GiB device (20 GiB), 19.75 GiB reserved of which
    # 19.5 allocated: the driver's 60 GiB free are not this process's to take, only what its
    # cap leaves (0.25 GiB) and its unused cache (0.25 GiB)
    free, reserved, allocated = 60 * 2**30, 79 * 2**28, 78 * 2**28
    assert memory.memory_budget("cuda") == memory._CUDA_BUDGET_BYTES
    fraction = 0.25
    assert memory.memory_budget("cuda") == (2**28 + 2**28) // 4


def _largest_tensor_bytes(fn) -> int:
    """The largest tensor any aten op makes while fn() runs (forward and backward)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        most = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    Largest.most = max(Largest.most, t.numel() * t.element_size())
            return out

    with Largest():
        fn()
    return Largest.most


@pytest.mark.parametrize("policy", POLICIES)
def test_memory_stays_within_a_small_budget(policy, monkeypatch):
    n, d = 256, 8
    z = seeded(n, d, seed=34).requires_grad_()
    sources, groups = torch.arange(n // 2).repeat(2), torch.arange(n) % 16

    def step():
        info_nce(z, sources, 0.2, groups=groups, group_policy=policy).backward()

    whole = _largest_tensor_bytes(step)
    assert whole >= n * n * 8  # the default budget takes all (N, N) float64 logits at once
    budget = 16 * n * memory.block_bytes_per_pair(torch.float64)  # 16 rows of 256
    monkeypatch.setattr(memory, "_CPU_BUDGET_BYTES", budget)
    assert rows_per_chunk(n, n, budget=memory.memory_budget("cpu"), bytes_per_element=20) == 16
    chunked = _largest_tensor_bytes(step)
    assert chunked <= 16 * n * 8  # no tensor beyond one (16, N) float64 block
    assert chunked <= budget
    z.grad = None
    monkeypatch.setattr(memory, "_CPU_BUDGET_BYTES", budget)
    _, plans = run_layout(monkeypatch, "one_block", None, step)
    assert len(plans[0]) == n // 16
