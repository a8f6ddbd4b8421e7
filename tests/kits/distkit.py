"""Two (or more) gloo processes on CPU for the data-parallel tests."""

from __future__ import annotations

import os
import socket
import sys
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
    mp.spawn(_rank, args=(worker, free_port(), str(out)), nprocs=world, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]


def _rank(rank: int, worker, port: int, out: str) -> None:
    """One rank: ``worker`` (which destroys its process group), then out without the
    interpreter's finalization, where a gloo thread still joinable at a destructor can abort a
    rank whose results are saved (pytorch #179291; as benchmarks/data_parallel.py)."""
    worker(rank, port, out)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
