"""Data-parallel gathers and ids across ranks (see "Data parallelism" in the package's docstring).

``gather=all_gather_with_grad`` (or ``all_gather_detached``) makes every candidate set global;
``_ids_across_ranks`` makes a rank's local ids unique across ranks. Outside ``torch.distributed``
every gather is the identity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.distributed as dist
from torch import Tensor

IdScope = Literal["local", "global"]
ID_SCOPES: tuple[str, ...] = ("local", "global")
Gather = Callable[[Tensor], Tensor]


def _world() -> tuple[int, int]:
    """(rank, world_size); (0, 1) outside torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _gather_plain(x: Tensor) -> Tensor:
    """(N, ...) -> (world*N, ...) with no autograd; every rank must hold the same N."""
    _, world = _world()
    if world == 1:
        return x
    sizes = [torch.zeros(1, dtype=torch.long, device=x.device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([x.shape[0]], device=x.device))
    if len({int(s) for s in sizes}) != 1:
        raise ValueError(f"gather needs equal rows on every rank, got {[int(s) for s in sizes]}")
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.detach().contiguous())
    return torch.cat(parts, dim=0)


class _AllGatherWithGrad(torch.autograd.Function):
    """All-gather whose backward sums every rank's gradient and returns this rank's slice."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.rows = x.shape[0]
        return _gather_plain(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        rank, world = _world()
        if world == 1:
            return grad
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[rank * ctx.rows : (rank + 1) * ctx.rows]


def all_gather_with_grad(x: Tensor) -> Tensor:
    """Gather (N, D) rows from every rank into (world*N, D), keeping gradients for all of them.

    Backward sum-reduces the incoming gradient over ranks and keeps this rank's slice, so every
    rank's loss pushes on every rank's rows. Identity outside ``torch.distributed``.
    """
    return _AllGatherWithGrad.apply(x)


def all_gather_detached(x: Tensor) -> Tensor:
    """Gather (N, D) rows into (world*N, D); only this rank's own slice carries gradient."""
    rank, world = _world()
    if world == 1:
        return x
    gathered = _gather_plain(x)
    n = x.shape[0]
    return torch.cat([gathered[: rank * n], x, gathered[(rank + 1) * n :]], dim=0)


def _global_mean(local_value: Tensor, gather: Gather | None) -> Tensor:
    """Mean over ranks of a per-rank scalar (equal rows per rank), through ``gather``."""
    if gather is None:
        return local_value
    return gather(local_value.reshape(1)).mean()


def _ids_across_ranks(
    name: str, ids: Tensor, scope: str, scope_arg: str, gather: Gather | None
) -> tuple[Tensor, Tensor]:
    """(N,) anchor ids and (M,) candidate ids, made unique across ranks when ``scope`` is local.

    A local id i of rank r becomes ``i * world + r``: distinct ranks never share an id, and ids of
    one rank keep their equalities. The ids are gathered first, so a refusal happens on every rank.
    """
    if gather is None:
        return ids, ids
    rank, world = _world()
    gathered = _gather_plain(ids)  # (M,)
    if scope == "global" or world == 1:
        return ids, gathered
    gathered = gathered.long()
    lo, hi = (int(v) for v in torch.aminmax(gathered))
    limit = (2**63 - 1) // world - 1
    if lo < -limit or hi > limit:
        raise ValueError(
            f"{name}: ids from {lo} to {hi} on {world} ranks cannot be made unique as "
            f"id * {world} + rank in int64; with {scope_arg}='local' they must lie in "
            f"[-{limit}, {limit}]"
        )
    owner = torch.arange(world, device=ids.device).repeat_interleave(ids.shape[0])
    return ids.long() * world + rank, gathered * world + owner
