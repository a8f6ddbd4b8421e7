"""The memory budget of an InfoNCE block and the rows per block (see "Memory" in the package's
docstring)."""

from __future__ import annotations

import os
from functools import lru_cache

import torch

# Blocks of anchors × candidates (see "Memory" above). rows_per_chunk without a budget: 2**22
# elements, 16 MiB of float32 per intermediate (what measurement code such as diagnostics uses).
_DEFAULT_BLOCK_ELEMENTS = 2**22
# When set, every block has at most this many elements whatever the budget (tests force chunks).
_CHUNK_ELEMENTS: int | None = None
_CPU_BUDGET_BYTES = 2**30  # cap on the CPU (and any device but CUDA) ...
_CPU_RAM_SHARE = 16  # ... or physical RAM / 16 if less
_CUDA_BUDGET_BYTES = 2**30  # cap on CUDA (one block up to B = 4096 in float32) ...
_CUDA_FREE_SHARE = 4  # ... or (free + cached unused) / 4 if less


@lru_cache(maxsize=1)
def _physical_memory() -> int | None:
    """Bytes of physical RAM, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def memory_budget(device: torch.device | str | None = None) -> int:
    """Bytes one block of :func:`info_nce` may take on ``device`` (see "Memory" above).

    CUDA: 1 GiB, or a quarter of the free memory (the driver's free memory plus what PyTorch's
    caching allocator holds unused) if that is less; a process capped at a fraction of the
    device (``torch.cuda.set_per_process_memory_fraction``, as trials that share a GPU are)
    counts as free only what its cap leaves. Anything else: 1 GiB, or 1/16 of the physical RAM
    if that is less.
    """
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info(device)
        reserved = torch.cuda.memory_reserved(device)
        unused = reserved - torch.cuda.memory_allocated(device)
        fraction = _memory_fraction(device)
        if fraction < 1:
            free = min(free, max(0, int(fraction * total) - reserved))
        return max(1, min(_CUDA_BUDGET_BYTES, (free + unused) // _CUDA_FREE_SHARE))
    ram = _physical_memory()
    return _CPU_BUDGET_BYTES if not ram else max(1, min(_CPU_BUDGET_BYTES, ram // _CPU_RAM_SHARE))


def _memory_fraction(device: torch.device) -> float:
    """This process's cap on ``device`` as a fraction of its memory (1.0 when uncapped, or when
    this torch cannot say)."""
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    return 1.0 if getter is None else float(getter(device))


def block_bytes_per_pair(dtype: torch.dtype) -> int:
    """Bytes an info_nce block is charged per (anchor, candidate) pair: 2 × itemsize + 4."""
    return 2 * torch.empty((), dtype=dtype).element_size() + 4


def rows_per_chunk(
    n_candidates: int,
    n_anchors: int | None = None,
    *,
    budget: int | None = None,
    bytes_per_element: int = 4,
) -> int:
    """Anchor rows per block of ``n_candidates`` columns.

    With ``budget`` (bytes): as many rows as keep rows × n_candidates × bytes_per_element within
    it. Without: blocks of 2**22 elements (16 MiB per float32 intermediate). ``_CHUNK_ELEMENTS``,
    when set, fixes the elements per block instead. At least 1. With ``n_anchors``: the fewest
    blocks that fit, made (nearly) equal, so ``rows_per_chunk(m, n, ...) == n`` means one block.
    """
    if _CHUNK_ELEMENTS is not None:
        elements = _CHUNK_ELEMENTS
    elif budget is None:
        elements = _DEFAULT_BLOCK_ELEMENTS
    else:
        elements = budget // max(1, bytes_per_element)
    rows = max(1, elements // max(1, n_candidates))
    if n_anchors is None:
        return rows
    n_anchors = max(1, n_anchors)
    blocks = -(-n_anchors // rows)
    return -(-n_anchors // blocks)  # as many blocks, of (nearly) equal size
