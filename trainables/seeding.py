"""Seeding a trial, and every random generator's state for its checkpoints (torch, CUDA, NumPy,
Python), restored bit for bit on resume."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    py_state = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy_keys": torch.from_numpy(np_state[1].astype(np.int64)),
        "numpy_pos": int(np_state[2]),
        "numpy_gauss": [int(np_state[3]), float(np_state[4])],
        "python": torch.tensor(py_state[1], dtype=torch.int64),
        "python_gauss": py_state[2],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    has_gauss, cached = state["numpy_gauss"]
    np.random.set_state(("MT19937", keys, state["numpy_pos"], has_gauss, cached))
    random.setstate((3, tuple(int(v) for v in state["python"]), state["python_gauss"]))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
