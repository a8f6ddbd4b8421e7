"""Two (or more) gloo processes on CPU for the data-parallel tests."""

from __future__ import annotations

import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(worker, out: Path, world: int) -> list:
    """Run ``worker(rank, port, out_dir)`` in ``world`` processes; each saves its results to
    ``out/rank{rank}.pt``, returned in rank order."""
    mp.spawn(worker, args=(free_port(), str(out)), nprocs=world, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]
