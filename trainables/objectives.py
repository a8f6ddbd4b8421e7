"""Contrastive objectives as pure functions on torch tensors.

Everything here works on any device and any float dtype. Rows are L2-normalised inside every
function, so similarity is cosine and squared distance is ``2 - 2 cos``. Half-precision inputs
(float16, bfloat16) are computed in float32 and their gradients cast back; float64 stays float64.

Shapes use N for the number of rows on this process and M for the number of candidate rows after
an optional data-parallel gather (M = world_size * N).

Zero rows
---------
A zero row (a dead unit, a padded row) has no direction, so nothing here normalises it: every
function that normalises rows raises :class:`ZeroNormError` (a :class:`NonFiniteError`, so the
training loop ends the trial as ``diverged``) naming the argument and the row. The floor is
``sqrt(torch.finfo(dtype).tiny)`` of the input's dtype: 2**-7 = 7.8e-3 for float16, 2**-63 =
1.1e-19 for float32 and bfloat16, 2**-511 = 1.5e-154 for float64. A row's gradient is its unit
row's gradient, projected, times 1/‖x‖, so above the floor that factor is at most 1/floor (128 in
float16) and the gradient stays finite in the input's dtype while the unit row's gradient is below
``finfo(dtype).max * floor`` (512 in float16, 3.7e19 in float32). Every row at or above the floor is
normalised exactly, however small or large (each row is scaled by its largest entry first, so its
squared norm neither underflows nor overflows); ``F.normalize`` would instead shrink a row below
its eps = 1e-12 and zero a row whose squared norm overflows.

Data parallelism
----------------
``gather=all_gather_with_grad`` (or ``all_gather_detached``) makes every candidate set global:
each process computes its own anchors against the rows of every process. The returned value is the
full-batch value on every rank, equal to what one process holding the whole batch computes. With
``all_gather_with_grad`` the gradient that reaches this rank's rows is ``world_size`` times the
one-process gradient of those rows, so DDP's mean over ranks gives exactly the one-process gradient.
``all_gather_detached`` is what many public implementations do: the peers' rows carry no gradient,
so the repulsion that this rank's rows exert on the others' anchors is lost.

Ids under a gather: ``sources`` are local to the rank by default (``source_ids="local"``), as every
data loader numbers them; the pair (rank, id) is the identity, so id 3 on rank 0 and id 3 on rank 1
are different sources. ``source_ids="global"`` takes ids as given, for a source whose views are
spread over ranks. ``groups`` are semantic identities (one item photographed twice may land on two
ranks), and neither reading is safe to guess: under a gather ``group_ids`` must be stated, and an
unstated one is a ``ValueError``. Without a gather both are ignored. A rank that finds a zero row
under a gather tells the others, so every rank raises the same error instead of waiting.

Memory
------
``info_nce`` (and ``nt_xent``) work on blocks of anchors against all M candidates, sized from a
memory budget (:func:`memory_budget`): on the CPU 1 GiB, or 1/16 of the physical RAM if that is
less; on CUDA 1 GiB, or a quarter of the device's free memory (what the driver has free plus
what PyTorch's allocator holds unused) if that is less; any other device follows the CPU rule. A
block of C anchors is charged C × M × (2 × itemsize + 4) bytes (12 bytes a pair in float32): the
logits, a second (C, M) array in backward, and (C, M) boolean masks.

- When the whole (N, M) block fits, it is computed once: forward keeps its exponentials and
  their row sums, and backward applies the closed-form gradient to them; nothing is recomputed.
- When it does not, anchors go in (nearly) equal chunks of as many rows as fit: forward keeps
  only each anchor's log-partition (N,) and backward recomputes each chunk's similarities (one
  more matrix product). Peak memory is the budget plus O((N + M) × D), whatever N.

Either way the gradient is the closed form ``dloss_i/ds_ia = (softmax over K(i))_a - 1[a in P(i)]
/ |P(i)|``, times 1/τ. Self pairs are excluded by index. Positives are listed once, by index,
from the sorted ids (no (N, M) work) when at most one pair in 8 could be one and the list takes
at most 1/64 of the budget (SimCLR: one positive per anchor); otherwise each block holds them as
a (C, M) mask. Only ``group_policy="mask"`` builds a (C, M) mask of dropped candidates. Sums over
listed positives run in a fixed order (no atomics). With the budget at its cap (the usual case)
the blocks, and so every bit of the result, depend only on N, M and the dtype; on a CUDA device
short of memory they shrink with what is free.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from functools import lru_cache
from typing import Literal

import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd.function import once_differentiable

GroupPolicy = Literal["negative", "mask", "positive"]
GROUP_POLICIES: tuple[str, ...] = ("negative", "mask", "positive")
IdScope = Literal["local", "global"]
ID_SCOPES: tuple[str, ...] = ("local", "global")
Gather = Callable[[Tensor], Tensor]

# Blocks of anchors × candidates (see "Memory" above). rows_per_chunk without a budget: 2**22
# elements, 16 MiB of float32 per intermediate (what measurement code such as diagnostics uses).
_DEFAULT_BLOCK_ELEMENTS = 2**22
# When set, every block has at most this many elements whatever the budget (tests force chunks).
_CHUNK_ELEMENTS: int | None = None
_CPU_BUDGET_BYTES = 2**30  # cap on the CPU (and any device but CUDA) ...
_CPU_RAM_SHARE = 16  # ... or physical RAM / 16 if less
_CUDA_BUDGET_BYTES = 2**30  # cap on CUDA (one block up to B = 4096 in float32) ...
_CUDA_FREE_SHARE = 4  # ... or (free + cached unused) / 4 if less
# Positives listed by index (True), held as (C, M) masks (False), or chosen from the ids (None).
_SPARSE_POSITIVES: bool | None = None


class NonFiniteError(ValueError):
    """Raised when an objective's input holds NaN or inf (a diverged encoder)."""


class ZeroNormError(NonFiniteError):
    """Raised when a row to be L2-normalised has norm below :func:`min_row_norm` of its dtype.

    Such a row (a dead unit, a padded row) has no direction: its unit row would be 0/0 and its
    gradient unbounded. A subclass of :class:`NonFiniteError`, so whoever ends a trial on a
    non-finite input ends it on this too.
    """


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------
def _check_positive_finite(name: str, value: float) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}") from err
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


def _check_rows(name: str, x: Tensor, min_rows: int = 1, *, values: bool = True) -> None:
    """Shape and dtype of ``x`` (from its metadata), and with ``values`` its entries: finite.

    Reading the entries waits for the device; ``values=False`` is for callers that check the
    result instead (see ``checks`` in :func:`nt_xent`)."""
    if not isinstance(x, Tensor) or x.dim() != 2:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a 2-D tensor (N, D), got shape {shape}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows, got {x.shape[0]}")
    if values and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).any(dim=1).sum())
        raise NonFiniteError(f"{name} holds non-finite values in {bad} of {x.shape[0]} rows")


def _check_labels(name: str, labels: Tensor, n: int) -> Tensor:
    if not isinstance(labels, Tensor) or labels.dim() != 1:
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"{name} must be a 1-D integer tensor, got shape {shape}")
    if labels.shape[0] != n:
        raise ValueError(f"{name} has length {labels.shape[0]} but z has {n} rows")
    if labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"{name} must hold integers, got dtype {labels.dtype}")
    return labels


def min_row_norm(dtype: torch.dtype) -> float:
    """The least row norm that is normalised: ``sqrt(torch.finfo(dtype).tiny)``.

    2**-7 for float16, 2**-63 for float32 and bfloat16, 2**-511 for float64. The gradient that
    reaches a row is at most its unit row's gradient times 1 / norm, so above this floor it is at
    most 1 / floor times that gradient (128 in float16), finite in ``dtype`` while the unit row's
    gradient is below ``finfo(dtype).max * floor`` (512 in float16, 3.7e19 in float32).
    """
    return torch.finfo(dtype).tiny ** 0.5


def unit_rows(
    x: Tensor, name: str = "x", *, gather: Gather | None = None, refuse: bool = True
) -> Tensor:
    """(N, D) -> (N, D) unit rows, computed in float32 at least.

    Every row whose norm is at least :func:`min_row_norm` of ``x.dtype`` is normalised exactly,
    however small or large: it is divided by its largest absolute entry first, so its squared norm
    can neither underflow nor overflow. The gradient is that of ``x / ||x||``.

    Args:
        x: (N, D) rows; NaN or inf rows come back NaN (the objectives refuse them before).
        name: the argument's name in the error message.
        gather: under a data-parallel gather every rank learns of a zero row on any rank and
            raises the same error, so no rank is left waiting in a collective.
        refuse: False skips the refusal below, which reads the norms on the host (a wait for
            the device); a zero row then comes back NaN, so a loss over it is NaN.

    Raises:
        ZeroNormError: naming ``name``, the first offending row (and its rank under a gather),
            its norm and how many rows are below the floor.
    """
    floor = min_row_norm(x.dtype)
    dtype = x.dtype
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    with torch.no_grad():
        empty = x.shape[1] == 0
        scale = x.new_zeros(x.shape[0], 1) if empty else x.abs().amax(dim=1, keepdim=True)
        if refuse:
            norms = scale[:, 0] * (x / torch.where(scale > 0, scale, 1.0)).norm(dim=1)
            _refuse_short_rows(name, norms < floor, norms, dtype, floor, gather)
    y = x / scale  # entries in [-1, 1], largest |entry| is 1; scale carries no gradient
    return y / y.norm(dim=1, keepdim=True)


def has_direction(x: Tensor) -> Tensor:
    """(N, D) -> (N,) bool: rows whose norm reaches :func:`min_row_norm` (normalisable)."""
    floor = min_row_norm(x.dtype)
    with torch.no_grad():
        scale = x.abs().amax(dim=1) if x.shape[1] else x.new_zeros(x.shape[0])
        safe = torch.where(scale > 0, scale, 1.0)[:, None]
        return scale * (x / safe).norm(dim=1) >= floor


def unit_rows_or_zero(x: Tensor) -> Tensor:
    """(N, D) -> (N, D) unit rows, a row without direction (see :func:`has_direction`) as zeros.

    For measurement, not for objectives: a zero row has cosine 0 with everything, so a probe
    scores it as carrying no information. Objectives refuse such rows (:class:`ZeroNormError`).
    """
    keep = has_direction(x)
    out = torch.zeros_like(x, dtype=torch.float32 if x.dtype in (torch.float16, torch.bfloat16)
                           else x.dtype)  # fmt: skip
    if bool(keep.any()):
        out[keep] = unit_rows(x[keep])
    return out


def _refuse_short_rows(
    name: str, short: Tensor, norms: Tensor, dtype: torch.dtype, floor: float, gather: Gather | None
) -> None:
    """Raise ZeroNormError if any row is ``short``; under a gather, on every rank alike."""
    count = int(short.sum())
    first = int(short.nonzero()[0, 0]) if count else -1
    norm = float(norms[first]) if count else 0.0
    where = ""
    _, world = _world()
    if gather is not None and world > 1:
        local = torch.tensor([[count, first, norm]], dtype=torch.float64, device=norms.device)
        every = _gather_plain(local).tolist()  # (world, 3), the same on every rank
        offenders = [r for r, row in enumerate(every) if row[0] > 0]
        if offenders:
            r = offenders[0]
            count, first, norm = int(every[r][0]), int(every[r][1]), every[r][2]
            where = f" on rank {r}"
    if count == 0:
        return
    kind = str(dtype).removeprefix("torch.")
    what = (
        "zero norm (no direction)"
        if norm == 0
        else f"norm {norm:.3g}, below the floor (no usable direction)"
    )
    raise ZeroNormError(
        f"{name}: row {first}{where} has {what}; {count} of {short.shape[0]} rows have a norm "
        f"below sqrt(finfo({kind}).tiny) = {floor:.3g}, the least that is normalised "
        "(a dead unit or a padded row?)"
    )


# --------------------------------------------------------------------------------------------
# data-parallel gathers
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# InfoNCE
# --------------------------------------------------------------------------------------------
def pair_masks(
    anchor_sources: Tensor,
    candidate_sources: Tensor,
    anchor_index: Tensor,
    *,
    anchor_groups: Tensor | None = None,
    candidate_groups: Tensor | None = None,
    group_policy: GroupPolicy = "negative",
) -> tuple[Tensor, Tensor]:
    """Positive and kept masks of a block of anchors against all candidates.

    Args:
        anchor_sources: (C,) source id of each anchor.
        candidate_sources: (M,) source id of each candidate.
        anchor_index: (C,) position of each anchor among the candidates (the self entry).
        anchor_groups, candidate_groups: (C,), (M,) optional group ids above the source.
        group_policy: what a candidate of another source in the anchor's group is.

    Returns:
        positive: (C, M) bool, P(i): same source or, under ``"positive"``, same group; never self.
        kept: (C, M) bool, K(i): every candidate but self and, under ``"mask"``, the group mates.
    """
    cols = torch.arange(candidate_sources.shape[0], device=candidate_sources.device)
    is_self = cols[None, :] == anchor_index[:, None]
    same_source = candidate_sources[None, :] == anchor_sources[:, None]
    positive = same_source & ~is_self
    kept = ~is_self
    if anchor_groups is not None and candidate_groups is not None:
        group_mate = (candidate_groups[None, :] == anchor_groups[:, None]) & ~same_source
        if group_policy == "positive":
            positive = positive | group_mate
        elif group_policy == "mask":
            kept = kept & ~group_mate
    return positive, kept


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


def _on_cpu(t: Tensor) -> bool:
    """Whether ``t`` takes the CPU's layouts and kernels below (tests may say no to run the
    layouts of other devices on the CPU)."""
    return t.device.type == "cpu"


def _t_zeros(like: Tensor) -> Tensor:
    """Zeros shaped like ``like`` (M, D); on the CPU the transpose of a (D, M) array, so that
    ``addmm_(g.T, x)`` into it reads ``g`` row by row (MKL: ~15% faster, the same bits)."""
    if _on_cpu(like):
        return like.new_zeros(like.shape[1], like.shape[0]).T
    return torch.zeros_like(like, memory_format=torch.contiguous_format)


def _t_mm(g: Tensor, x: Tensor) -> Tensor:
    """``g.T @ x`` (M, D), in the layout of :func:`_t_zeros`."""
    if _on_cpu(g):
        return x.new_empty(x.shape[1], g.shape[1]).T.addmm_(g.T, x, beta=0)
    return g.T @ x


def _add_rows_(target: Tensor, index: Tensor, values: Tensor) -> Tensor:
    """target[index[k]] += values[k], in place and in a fixed order: ``index_add_`` on the CPU,
    ``index_put_(accumulate=True)`` (sorted, no atomics) elsewhere."""
    if _on_cpu(target):
        return target.index_add_(0, index, values)
    return target.index_put_((index,), values, accumulate=True)


def _match_counts(ids: Tensor, pool: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """For each of ``ids`` (N,), where its equals sit in ``pool`` (M,) once sorted.

    Returns ``order`` (M,), the stable sorting permutation of ``pool``, and ``lo``, ``counts``
    (N,): the equals of ``ids[i]`` are ``pool[order[lo[i] : lo[i] + counts[i]]]``.
    """
    ordered, order = torch.sort(pool.long(), stable=True)
    ids = ids.long()
    lo = torch.searchsorted(ordered, ids)
    return order, lo, torch.searchsorted(ordered, ids, right=True) - lo


def _equal_pairs(ids: Tensor, pool: Tensor) -> tuple[Tensor, Tensor]:
    """Every (i, j) with ``ids[i] == pool[j]`` as (rows, cols), by i and then j, in O(N + M + K)."""
    order, lo, counts = _match_counts(ids, pool)
    k = int(counts.sum())
    rows = torch.repeat_interleave(
        torch.arange(ids.shape[0], device=ids.device), counts, output_size=k
    )
    first = counts.cumsum(0) - counts  # where each row's pairs start
    within = torch.arange(k, device=ids.device) - first[rows]
    return rows, order[lo[rows] + within]


class _Pairs:
    """Positives and kept candidates of every anchor, exactly as :func:`pair_masks` has them.

    Positives are either listed once for all anchors by index (``rows``, ``cols``, sorted by
    row, found by sorting the ids: no (N, M) work) or found block by block as a (C, M) mask, when
    more than one pair in 8 could be a positive or the list would take more than 1/64 of the
    budget. ``counts`` (N,) is |P(i)| once listed.
    """

    def __init__(
        self,
        sources: Tensor,
        cand_sources: Tensor,
        self_index: Tensor,
        groups: Tensor | None,
        cand_groups: Tensor | None,
        policy: GroupPolicy,
        local_sources: Tensor,
        budget: int | None = None,
    ) -> None:
        self.sources, self.cand_sources, self.self_index = sources, cand_sources, self_index
        # Under "negative" a group mate is a negative like any other: groups change nothing.
        use_groups = groups is not None and cand_groups is not None and policy != "negative"
        self.groups = groups if use_groups else None
        self.cand_groups = cand_groups if use_groups else None
        self.policy, self.local_sources = policy, local_sources
        self.budget = memory_budget(sources.device) if budget is None else budget
        self.rows = self.cols = self.counts = None
        self._spans: dict[int, int] = {}
        self.paired = False  # two views of distinct sources, rows [views 1; views 2]

    @classmethod
    def two_views(cls, b: int, device: torch.device, budget: int) -> _Pairs:
        """SimCLR's layout without a gather: rows [z1; z2] of b distinct sources, row i's one
        positive at (i + b) mod 2b. Everything that :class:`_Pairs` would find from the ids is
        known from b, so nothing waits for the device."""
        sources = torch.arange(b, device=device).repeat(2)
        index = torch.arange(2 * b, device=device)
        pairs = cls(sources, sources, index, None, None, "negative", sources, budget)
        pairs.paired = True
        pairs.rows, pairs.cols = index, index.add(b).remainder_(2 * b)
        pairs.counts = torch.ones(2 * b, dtype=torch.long, device=device)
        return pairs

    def refuse_lonely(self, a: int, counts: Tensor) -> None:
        """ValueError naming the first anchor from ``a`` on whose count of positives is 0."""
        if not self.paired and not bool((counts > 0).all()):
            i = a + int((counts == 0).nonzero()[0, 0])
            raise ValueError(
                f"sources: source {int(self.local_sources[i])} (row {i}) has a single view; "
                "every anchor needs at least one positive"
            )

    def few_positives(self) -> bool:
        """Whether positives are listed by index: at most one pair in 8 could be one, and the
        list takes at most 1/64 of the budget (an upper bound from the ids, self included)."""
        if _SPARSE_POSITIVES is not None:
            return _SPARSE_POSITIVES
        if self.paired:  # every source twice among the candidates
            bound = 2 * self.sources.shape[0]
        else:
            bound = int(_match_counts(self.sources, self.cand_sources)[2].sum())
        if self.policy == "positive" and self.groups is not None:
            bound += int(_match_counts(self.groups, self.cand_groups)[2].sum())
        n, m = self.sources.shape[0], self.cand_sources.shape[0]
        return 8 * bound <= n * m and 64 * bound <= self.budget

    def list_positives(self) -> None:
        """rows, cols: every (anchor, positive) pair, by anchor; counts; refuses lonely anchors."""
        if self.rows is not None:
            return
        if self.policy == "positive" and self.groups is not None:
            # P(i) = (same source or same group) less self: the group's pairs, and those of
            # the source in another group
            rows, cols = _equal_pairs(self.groups, self.cand_groups)
            s_rows, s_cols = _equal_pairs(self.sources, self.cand_sources)
            other = self.cand_groups[s_cols] != self.groups[s_rows]
            rows, cols = torch.cat([rows, s_rows[other]]), torch.cat([cols, s_cols[other]])
            order = torch.argsort(rows * self.cand_sources.shape[0] + cols)
            rows, cols = rows[order], cols[order]
        else:
            rows, cols = _equal_pairs(self.sources, self.cand_sources)
        other = cols != self.self_index[rows]
        self.rows, self.cols = rows[other], cols[other]
        n = self.sources.shape[0]
        starts = torch.searchsorted(self.rows, torch.arange(n + 1, device=self.rows.device))
        self.counts = starts[1:] - starts[:-1]
        self.refuse_lonely(0, self.counts)

    def span(self, a: int) -> int:
        """Where anchor ``a``'s positives start in ``rows``/``cols``."""
        if self.paired:  # one positive per anchor
            return a
        if a not in self._spans:
            self._spans[a] = int(torch.searchsorted(self.rows, a))
        return self._spans[a]

    def plan(self, step: int) -> list[tuple[int, int, bool]]:
        """Blocks (a, b, sparse) of ``step`` anchors; sparse: positives listed by index."""
        n = self.sources.shape[0]
        edges = [*range(0, n, step), n]
        sparse = self.few_positives()
        if sparse and not self.paired:
            self.list_positives()
            at = torch.tensor(edges, device=self.rows.device)
            self._spans.update(zip(edges, torch.searchsorted(self.rows, at).tolist(), strict=True))
        return [(a, b, sparse) for a, b in itertools.pairwise(edges)]


class _Block:
    """Anchors [a, b): what a block needs of :class:`_Pairs`.

    ``self_cols`` (C,): each anchor's own column, never kept. ``positive_rows`` and
    ``positive_cols`` (K,) list P(i) by index (sparse), or ``positive`` (C, M) holds it as a mask.
    ``dropped`` (C, M): group mates out of the denominator under ``"mask"``, else None.
    ``counts`` (C,): |P(i)|.
    """

    def __init__(self, pairs: _Pairs, a: int, b: int, sparse: bool) -> None:
        self.rows = torch.arange(b - a, device=pairs.sources.device)
        self.self_cols = pairs.self_index[a:b]
        self.dropped = self.positive = self.positive_rows = self.positive_cols = None
        same = None
        if pairs.groups is not None and pairs.policy == "mask":
            # group mates of another source leave the denominator
            same = pairs.cand_sources[None, :] == pairs.sources[a:b, None]  # (C, M)
            same_group = pairs.cand_groups[None, :] == pairs.groups[a:b, None]
            self.dropped = same_group.logical_and_(same.logical_not())
        if sparse:
            pairs.list_positives()
            lo, hi = pairs.span(a), pairs.span(b)
            self.positive_rows = pairs.rows[lo:hi] - a
            self.positive_cols = pairs.cols[lo:hi]
            self.counts = pairs.counts[a:b]
            return
        if same is None:
            same = pairs.cand_sources[None, :] == pairs.sources[a:b, None]  # (C, M)
        if pairs.groups is not None and pairs.policy == "positive":
            same.logical_or_(pairs.cand_groups[None, :] == pairs.groups[a:b, None])
        same[self.rows, self.self_cols] = False
        self.positive, self.counts = same, same.sum(dim=1)
        pairs.refuse_lonely(a, self.counts)

    def positive_mean(self, logits: Tensor) -> Tensor:
        """(C,) mean logit over each anchor's positives."""
        if self.positive is not None:
            total = (logits * self.positive).sum(dim=1)
        else:
            values = logits[self.positive_rows, self.positive_cols]
            total = _add_rows_(logits.new_zeros(logits.shape[0]), self.positive_rows, values)
        return total / self.counts

    def subtract_targets_(self, g: Tensor) -> Tensor:
        """g -= 1[a in P(i)] / |P(i)|, in place."""
        inverse = self.counts.to(g.dtype).reciprocal_()
        if self.positive is not None:
            return g.addcmul_(self.positive, inverse[:, None], value=-1)
        rows, cols = self.positive_rows, self.positive_cols
        g[rows, cols] -= inverse[rows]
        return g

    def folds(self, m: int, dim: int) -> bool:
        """Whether backward of a kept block adds the targets' part by index (positives listed,
        and their K × D gathered rows at most a quarter of the (C, M) block) instead of
        subtracting the targets from a normalised copy of the block."""
        return self.positive is None and 4 * self.positive_rows.numel() * dim <= (
            self.counts.numel() * m
        )

    def subtract_target_products_(
        self, grad_anchors: Tensor, grad_candidates: Tensor, anchors: Tensor, candidates: Tensor,
        scale: Tensor,
    ) -> None:  # fmt: skip
        """In place, for a block from row 0: the targets' part of the gradients, by index:
        grad_anchors_i -= scale_i Σ_{p∈P(i)} c_p / |P(i)|, grad_candidates_p -= the same of a_i."""
        rows, cols = self.positive_rows, self.positive_cols
        weight = (scale / self.counts)[rows, None].neg_()  # (K, 1)
        _add_rows_(grad_anchors, rows, candidates[cols] * weight)
        _add_rows_(grad_candidates, cols, anchors[rows] * weight)

    def exp_logits_(self, logits: Tensor, shift: Tensor | None) -> tuple[Tensor, Tensor]:
        """In place: logits -> exp(logits - shift) on K(i), 0 elsewhere; returns it and the shift.

        Without ``shift`` each row's largest kept logit is used (forward).
        """
        logits[self.rows, self.self_cols] = -math.inf
        if self.dropped is not None:
            logits.masked_fill_(self.dropped, -math.inf)
        if shift is None:
            shift = logits.amax(dim=1)
        return logits.sub_(shift[:, None]).exp_(), shift

    def tensors(self) -> list[Tensor]:
        """What backward needs of a block whose exponentials are kept (no dropped mask)."""
        if self.positive is not None:
            return [self.counts, self.positive]
        return [self.counts, self.positive_rows, self.positive_cols]

    @classmethod
    def restore(cls, tensors: tuple[Tensor, ...]) -> _Block:
        block = cls.__new__(cls)
        block.positive = block.positive_rows = block.positive_cols = None
        if len(tensors) == 2:
            block.counts, block.positive = tensors
        else:
            block.counts, block.positive_rows, block.positive_cols = tensors
        return block


class _InfoNCERows(torch.autograd.Function):
    """Per-anchor InfoNCE in blocks of anchors × all candidates, with the closed-form gradient.

    One block (it fits the budget): forward keeps its exponentials ``exp(s/τ - max)`` and their
    row sums; backward multiplies them into the candidates and anchors, dividing by the sums
    row by row, and takes the positives' target off, by index when positives are listed and
    few (no (N, M) pass) or from a normalised copy otherwise. Nothing is recomputed. Several
    blocks: forward keeps only each anchor's log-partition (N,); backward recomputes each
    block's similarities. The gradient is
    dloss_i/ds_ia = (softmax over K(i))_a - 1[a in P(i)] / |P(i)|, scaled by 1/τ.
    """

    @staticmethod
    def forward(ctx, anchors, candidates, pairs, inv_tau, step):  # type: ignore[override]
        n = anchors.shape[0]
        blocks = pairs.plan(step)
        ctx.pairs, ctx.inv_tau, ctx.blocks = pairs, inv_tau, blocks
        if len(blocks) == 1:
            block = _Block(pairs, 0, n, blocks[0][2])
            logits = (anchors * inv_tau) @ candidates.T  # (N, M)
            positive_mean = block.positive_mean(logits)
            exps, shift = block.exp_logits_(logits, None)
            totals = exps.sum(dim=1)
            ctx.save_for_backward(anchors, candidates, exps, totals, *block.tensors())
            return shift + totals.log() - positive_mean
        losses = anchors.new_empty(n)
        log_partition = anchors.new_empty(n)
        for a, b, sparse in blocks:
            block = _Block(pairs, a, b, sparse)
            logits = (anchors[a:b] * inv_tau) @ candidates.T  # (C, M)
            positive_mean = block.positive_mean(logits)
            exps, shift = block.exp_logits_(logits, None)
            log_partition[a:b] = shift + exps.sum(dim=1).log()
            losses[a:b] = log_partition[a:b] - positive_mean
            del block, logits, exps
        ctx.save_for_backward(anchors, candidates, log_partition)
        return losses

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_losses):  # type: ignore[override]
        anchors, candidates, *kept = ctx.saved_tensors
        scale = grad_losses * ctx.inv_tau  # (N,) dloss/dlogit -> dloss/dcosine, per anchor
        if len(ctx.blocks) == 1:
            exps, totals, *block_tensors = kept
            block = _Block.restore(tuple(block_tensors))
            if block.folds(*candidates.shape):
                # softmax = exps / totals, folded into the products; the targets' part by index
                weight = (scale / totals)[:, None]
                grad_anchors = (exps @ candidates).mul_(weight)
                grad_candidates = _t_mm(exps, anchors * weight)
                block.subtract_target_products_(
                    grad_anchors, grad_candidates, anchors, candidates, scale
                )
                return grad_anchors, grad_candidates, None, None, None
            g = block.subtract_targets_(exps / totals[:, None])  # softmax over K(i) - target
            grad_anchors = (g @ candidates).mul_(scale[:, None])
            grad_candidates = _t_mm(g, anchors * scale[:, None])
            return grad_anchors, grad_candidates, None, None, None
        (log_partition,) = kept
        grad_anchors = torch.empty_like(anchors)
        grad_candidates = _t_zeros(candidates)  # (M, D)
        for a, b, sparse in ctx.blocks:
            block = _Block(ctx.pairs, a, b, sparse)
            logits = (anchors[a:b] * ctx.inv_tau) @ candidates.T  # as in forward, bit for bit
            g, _ = block.exp_logits_(logits, log_partition[a:b])  # softmax over K(i), (C, M)
            block.subtract_targets_(g)
            grad_anchors[a:b] = (g @ candidates).mul_(scale[a:b, None])
            grad_candidates.addmm_(g.T, anchors[a:b] * scale[a:b, None])
            del block, logits, g
        return grad_anchors, grad_candidates, None, None, None


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


def info_nce(
    z: Tensor,
    sources: Tensor,
    temperature: float,
    *,
    groups: Tensor | None = None,
    group_policy: GroupPolicy = "negative",
    gather: Gather | None = None,
    reduction: Literal["mean", "none"] = "mean",
    source_ids: IdScope = "local",
    group_ids: IdScope | None = None,
) -> Tensor:
    """Multi-positive InfoNCE (SimCLR's NT-Xent for two views per source).

    For anchor i with positive set P(i) and kept set K(i) (every view but i and the masked ones),
    ``loss_i = -(1/|P(i)|) Σ_{p∈P(i)} [ s_ip/τ - logsumexp_{a∈K(i)} s_ia/τ ]``, averaged over
    anchors. The anchor itself is never in the numerator or the denominator.

    Args:
        z: (N, D) projected views; rows are L2-normalised inside.
        sources: (N,) ints; views with the same source are positives of each other.
        temperature: τ > 0.
        groups: optional (N,) ints, a semantic identity above the source.
        group_policy: a view of another source in the anchor's group is a ``"negative"`` (plain
            SimCLR), is removed from the denominator (``"mask"``), or is an extra ``"positive"``.
        gather: ``all_gather_with_grad`` or ``all_gather_detached`` for data-parallel negatives.
        reduction: ``"mean"`` or ``"none"`` (this rank's per-anchor losses).
        source_ids: under a gather, ``"local"`` (the default): ``sources`` are numbered per rank,
            as a data loader numbers them, and one id on two ranks is two sources; ``"global"``:
            one id on two ranks is one source (its views spread over ranks). Ignored without a
            gather.
        group_ids: under a gather with ``groups``, required: ``"global"`` when one group id on
            two ranks is one identity (dataset-level labels, the same item seen twice), or
            ``"local"`` when groups are numbered per rank. Ignored otherwise.

    Returns:
        () scalar, the mean over all anchors (over all ranks when ``gather`` is given), or (N,)
        per-anchor losses with ``reduction="none"``.

    Raises:
        ValueError: naming the argument: a bad temperature, policy, reduction or id scope,
            ``group_ids`` unstated under a gather with groups, ids of the wrong shape or length,
            a source with a single view.
        NonFiniteError: NaN or inf in ``z``.
        ZeroNormError: a row of ``z`` with norm below :func:`min_row_norm`.
    """
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    inv_tau = 1.0 / _check_positive_finite("temperature", temperature)
    if group_policy not in GROUP_POLICIES:
        raise ValueError(f"group_policy must be one of {GROUP_POLICIES}, got {group_policy!r}")
    if source_ids not in ID_SCOPES:
        raise ValueError(f"source_ids must be one of {ID_SCOPES}, got {source_ids!r}")
    if group_ids is not None and group_ids not in ID_SCOPES:
        raise ValueError(f"group_ids must be one of {ID_SCOPES} or None, got {group_ids!r}")
    if gather is not None and groups is not None and group_ids is None:
        raise ValueError(
            "groups: under a gather, group_ids must say whether one group id on two ranks is one "
            "identity ('global', e.g. dataset-level item ids) or two ('local', numbered per "
            "rank); got group_ids=None"
        )
    _check_rows("z", z, min_rows=2)
    sources = _check_labels("sources", sources, z.shape[0]).to(z.device)
    if groups is not None:
        groups = _check_labels("groups", groups, z.shape[0]).to(z.device)
    u = unit_rows(z, "z", gather=gather)  # (N, D)
    return _info_nce_unit(
        u, sources, inv_tau, groups, group_policy, gather, reduction, source_ids, group_ids
    )


def _info_nce_unit(
    u: Tensor,
    sources: Tensor,
    inv_tau: float,
    groups: Tensor | None,
    group_policy: GroupPolicy,
    gather: Gather | None,
    reduction: str,
    source_ids: str,
    group_ids: str | None,
    paired: bool = False,
) -> Tensor:
    """info_nce on unit rows ``u`` (N, D) and checked arguments; ``paired``: the layout of
    :meth:`_Pairs.two_views` (no gather, no groups), known without reading the ids."""
    rank, _ = _world()
    n = u.shape[0]
    local_sources = sources
    sources, cand_sources = _ids_across_ranks("sources", sources, source_ids, "source_ids", gather)
    cand_groups = None
    if groups is not None:  # group_ids is stated whenever gather is given
        scope = group_ids or "global"
        groups, cand_groups = _ids_across_ranks("groups", groups, scope, "group_ids", gather)
    if gather is None:
        candidates, offset = u, 0
    else:
        candidates = gather(u)  # (M, D)
        offset = rank * n
    self_index = torch.arange(offset, offset + n, device=u.device)
    budget = memory_budget(u.device)
    if paired:
        pairs = _Pairs.two_views(n // 2, u.device, budget)
    else:
        pairs = _Pairs(
            sources, cand_sources, self_index, groups, cand_groups, group_policy, local_sources,
            budget,
        )  # fmt: skip
    step = rows_per_chunk(
        candidates.shape[0], n, budget=budget, bytes_per_element=block_bytes_per_pair(u.dtype)
    )
    losses = _InfoNCERows.apply(u, candidates, pairs, inv_tau, step)  # (N,)
    if reduction == "none":
        return losses
    return _global_mean(losses.mean(), gather)


def nt_xent(
    z1: Tensor,
    z2: Tensor,
    temperature: float,
    *,
    gather: Gather | None = None,
    checks: bool = True,
) -> Tensor:
    """SimCLR's symmetric NT-Xent: z1, z2 (B, D) are two views of B distinct sources.

    Row i of z1 and row i of z2 are positives; rows are stacked as [z1; z2] so the partner of
    row i is (i + B) mod 2B. Under a gather the B sources of each rank are distinct from every
    other rank's. Returns a () scalar, the value of :func:`info_nce` on ``[z1; z2]``.

    ``checks=False`` (a training loop that watches its loss) skips the checks that read values
    on the host: without a gather nothing in the call then waits for the device, and NaN, inf or
    a zero row gives a NaN loss instead of raising. Shapes and arguments are checked either way.

    Raises:
        As :func:`info_nce`, naming ``z1`` or ``z2``; with ``checks=False`` only ValueError for
        arguments and shapes.
    """
    inv_tau = 1.0 / _check_positive_finite("temperature", temperature)
    _check_rows("z1", z1, values=checks)
    _check_rows("z2", z2, values=checks)
    if z1.shape != z2.shape:
        shapes = f"{tuple(z1.shape)} and {tuple(z2.shape)}"
        raise ValueError(f"z1 and z2 must have one shape, got {shapes}")
    b = z1.shape[0]
    u = torch.cat(
        [
            unit_rows(z1, "z1", gather=gather, refuse=checks),
            unit_rows(z2, "z2", gather=gather, refuse=checks),
        ]
    )
    sources = torch.arange(b, device=z1.device).repeat(2)  # local ids: rank-unique under gather
    return _info_nce_unit(
        u, sources, inv_tau, None, "negative", gather, "mean", "local", None,
        paired=gather is None,
    )  # fmt: skip


def info_nce_dense(
    z: Tensor,
    sources: Tensor,
    temperature: float,
    *,
    groups: Tensor | None = None,
    group_policy: GroupPolicy = "negative",
) -> Tensor:
    """Reference InfoNCE that materialises the full (N, N) matrix and relies on autograd.

    Same contract as :func:`info_nce` (one process only, no single-view check); kept for
    cross-checks and benchmarks.
    """
    inv_tau = 1.0 / _check_positive_finite("temperature", temperature)
    if group_policy not in GROUP_POLICIES:
        raise ValueError(f"group_policy must be one of {GROUP_POLICIES}, got {group_policy!r}")
    _check_rows("z", z, min_rows=2)
    sources = _check_labels("sources", sources, z.shape[0]).to(z.device)
    if groups is not None:
        groups = _check_labels("groups", groups, z.shape[0]).to(z.device)
    u = unit_rows(z, "z")
    logits = u @ u.T * inv_tau  # (N, N)
    index = torch.arange(u.shape[0], device=u.device)
    positive, kept = pair_masks(
        sources,
        sources,
        index,
        anchor_groups=groups,
        candidate_groups=groups,
        group_policy=group_policy,
    )
    log_prob = logits - logits.masked_fill(~kept, -math.inf).logsumexp(dim=1, keepdim=True)
    return (-(log_prob * positive).sum(dim=1) / positive.sum(dim=1)).mean()


def candidates_per_anchor(
    sources: Tensor, *, groups: Tensor | None = None, group_policy: GroupPolicy = "negative"
) -> Tensor:
    """(N,) number of negatives each anchor actually has in its denominator: |K(i) \\ P(i)|."""
    n = sources.shape[0]
    index = torch.arange(n, device=sources.device)
    counts = torch.empty(n, dtype=torch.long, device=sources.device)
    step = rows_per_chunk(n)
    for a in range(0, n, step):
        b = min(n, a + step)
        positive, kept = pair_masks(
            sources[a:b],
            sources,
            index[a:b],
            anchor_groups=None if groups is None else groups[a:b],
            candidate_groups=groups,
            group_policy=group_policy,
        )
        counts[a:b] = (kept & ~positive).sum(dim=1)
    return counts


# --------------------------------------------------------------------------------------------
# alignment and uniformity (Wang & Isola, 2020)
# --------------------------------------------------------------------------------------------
def _safe_pow(sq: Tensor, half_alpha: float) -> Tensor:
    """sq ** half_alpha with a zero (not NaN) gradient where sq == 0."""
    if half_alpha == 1.0:
        return sq
    positive = sq > 0
    return torch.where(positive, torch.where(positive, sq, 1.0).pow(half_alpha), 0.0)


def align_loss(x: Tensor, y: Tensor, alpha: float = 2.0, *, gather: Gather | None = None) -> Tensor:
    """Alignment ``E ||f(x) - f(y)||_2^alpha`` over positive pairs.

    Args:
        x, y: (N, D) two views; row i of x and row i of y are a positive pair. Rows are
            L2-normalised inside.
        alpha: exponent > 0 (2 makes it an affine map of the positive cosine).

    Returns:
        () scalar in [0, 2**alpha].

    Raises:
        NonFiniteError, ZeroNormError: naming ``x`` or ``y`` (see :func:`unit_rows`).
    """
    alpha = _check_positive_finite("alpha", alpha)
    _check_rows("x", x)
    _check_rows("y", y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    u, v = unit_rows(x, "x", gather=gather), unit_rows(y, "y", gather=gather)
    return _align_unit(u, v, alpha, gather)


def _align_unit(u: Tensor, v: Tensor, alpha: float, gather: Gather | None) -> Tensor:
    sq = (u - v).pow(2).sum(dim=1)  # (N,)
    return _global_mean(_safe_pow(sq, alpha / 2).mean(), gather)


def uniform_loss(x: Tensor, t: float = 2.0, *, gather: Gather | None = None) -> Tensor:
    """Uniformity ``log E_{i<j} exp(-t ||f(x_i) - f(x_j)||^2)`` in logsumexp form.

    Args:
        x: (N, D) features; rows are L2-normalised inside. N >= 2 (over all ranks with gather).
        t: kernel width > 0.

    Returns:
        () scalar in [-4t, 0]; 0 is total collapse. Never underflows: no exp is taken outside
        the logsumexp.

    Raises:
        NonFiniteError, ZeroNormError: naming ``x`` (see :func:`unit_rows`).
    """
    t = _check_positive_finite("t", t)
    _check_rows("x", x)
    return _uniform_unit(unit_rows(x, "x", gather=gather), t, gather, "x")


def _uniform_unit(u: Tensor, t: float, gather: Gather | None, name: str) -> Tensor:
    n = u.shape[0]
    if gather is None:
        if n < 2:
            raise ValueError(f"{name}: uniformity needs at least 2 points, got {n}")
        upper = torch.ones(n, n, dtype=torch.bool, device=u.device).triu_(diagonal=1)
        sq = (2 - 2 * u @ u.T).clamp_min(0)  # (n, n) squared distances; pairs i < j count
        # masked, not indexed: a boolean index would wait for the device to count the pairs
        log_kernel = (-t * sq).masked_fill(~upper, -math.inf)
        return log_kernel.flatten().logsumexp(dim=0) - math.log(n * (n - 1) // 2)
    # Data parallel: this rank's rows against every other row, then a log-sum over ranks.
    rank, world = _world()
    if n * world < 2:
        raise ValueError(f"{name}: uniformity needs at least 2 points, got {n * world}")
    everyone = gather(u)  # (M, D)
    sq = (2 - 2 * u @ everyone.T).clamp_min(0)  # (N, M)
    cols = torch.arange(everyone.shape[0], device=u.device)
    is_self = cols[None, :] == (rank * n + torch.arange(n, device=u.device))[:, None]
    local_lse = (-t * sq).masked_fill(is_self, -math.inf).flatten().logsumexp(dim=0)
    ordered_pairs = n * world * (n * world - 1)
    return gather(local_lse.reshape(1)).logsumexp(dim=0) - math.log(ordered_pairs)


def align_uniform_loss(
    z1: Tensor,
    z2: Tensor,
    lam: float,
    t: float,
    alpha: float = 2.0,
    *,
    gather: Gather | None = None,
    checks: bool = True,
) -> Tensor:
    """``align(z1, z2; alpha) + lam * (uniform(z1; t) + uniform(z2; t)) / 2``.

    Args:
        z1, z2: (N, D) two views of N sources; rows are L2-normalised inside (once each).
        lam: uniformity weight λ >= 0 (a study sets it as λ·t / t).
        t: uniformity kernel width > 0.
        alpha: alignment exponent > 0.
        checks: False skips the checks that read values on the host, as in :func:`nt_xent`.

    Returns:
        () scalar.

    Raises:
        NonFiniteError, ZeroNormError: naming ``z1`` or ``z2`` (see :func:`unit_rows`), unless
            ``checks=False`` (a NaN result instead).
    """
    lam = float(lam)
    if not math.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be a finite number >= 0, got {lam!r}")
    alpha = _check_positive_finite("alpha", alpha)
    t = _check_positive_finite("t", t)
    _check_rows("z1", z1, values=checks)
    _check_rows("z2", z2, values=checks)
    if z1.shape != z2.shape:
        shapes = f"{tuple(z1.shape)} and {tuple(z2.shape)}"
        raise ValueError(f"z1 and z2 must have one shape, got {shapes}")
    u1 = unit_rows(z1, "z1", gather=gather, refuse=checks)
    u2 = unit_rows(z2, "z2", gather=gather, refuse=checks)
    align = _align_unit(u1, u2, alpha, gather)
    uniform = (_uniform_unit(u1, t, gather, "z1") + _uniform_unit(u2, t, gather, "z2")) / 2
    return align + lam * uniform
