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

Modules
-------
One loss per module, each a pure function named as in its paper: :mod:`.infonce`
(``info_nce``, its dense reference ``info_nce_dense``, ``candidates_per_anchor``),
:mod:`.ntxent` (``nt_xent``), :mod:`.alignment` (``align_loss``), :mod:`.uniformity`
(``uniform_loss``), :mod:`.align_uniform` (``align_uniform_loss``). What they share: :mod:`.rows`
(errors, argument checks, unit rows), :mod:`.gathers` (data parallelism), :mod:`.memory` (the
block budget), :mod:`.blocks` (InfoNCE's blocks and closed-form gradient). :mod:`.registry` is
the table of the objectives a trial trains with (a new one: its module and its row there).

Every public name is importable from this package, loaded on first use: importing
:mod:`.registry` (the config does) imports no torch. The switches tests set live where they are
read: ``memory._CHUNK_ELEMENTS``, ``memory._CPU_BUDGET_BYTES``, ``blocks._SPARSE_POSITIVES``,
``blocks._on_cpu``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# module -> the names it gives this package (private ones: read by tests and benchmarks)
_EXPORTS: dict[str, tuple[str, ...]] = {
    "rows": ("NonFiniteError", "ZeroNormError", "has_direction", "min_row_norm", "unit_rows",
             "unit_rows_or_zero"),
    "gathers": ("Gather", "ID_SCOPES", "IdScope", "all_gather_detached", "all_gather_with_grad",
                "_gather_plain", "_world"),
    "memory": ("block_bytes_per_pair", "memory_budget", "rows_per_chunk"),
    "blocks": ("GROUP_POLICIES", "GroupPolicy", "pair_masks", "_Block", "_InfoNCERows", "_Pairs"),
    "infonce": ("candidates_per_anchor", "info_nce", "info_nce_dense"),
    "ntxent": ("nt_xent",),
    "alignment": ("align_loss",),
    "uniformity": ("uniform_loss",),
    "align_uniform": ("align_uniform_loss",),
    "registry": ("OBJECTIVES", "OBJECTIVE_NAMES", "ObjectiveRow"),
}  # fmt: skip
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = [
    "GROUP_POLICIES",
    "ID_SCOPES",
    "OBJECTIVES",
    "OBJECTIVE_NAMES",
    "Gather",
    "GroupPolicy",
    "IdScope",
    "NonFiniteError",
    "ObjectiveRow",
    "ZeroNormError",
    "align_loss",
    "align_uniform_loss",
    "all_gather_detached",
    "all_gather_with_grad",
    "block_bytes_per_pair",
    "candidates_per_anchor",
    "has_direction",
    "info_nce",
    "info_nce_dense",
    "memory_budget",
    "min_row_norm",
    "nt_xent",
    "pair_masks",
    "rows_per_chunk",
    "uniform_loss",
    "unit_rows",
    "unit_rows_or_zero",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: the next read finds it here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


if TYPE_CHECKING:
    from trainables.objectives.align_uniform import align_uniform_loss
    from trainables.objectives.alignment import align_loss
    from trainables.objectives.blocks import (
        GROUP_POLICIES,
        GroupPolicy,
        pair_masks,
    )
    from trainables.objectives.gathers import (
        ID_SCOPES,
        Gather,
        IdScope,
        all_gather_detached,
        all_gather_with_grad,
    )
    from trainables.objectives.infonce import candidates_per_anchor, info_nce, info_nce_dense
    from trainables.objectives.memory import block_bytes_per_pair, memory_budget, rows_per_chunk
    from trainables.objectives.ntxent import nt_xent
    from trainables.objectives.registry import OBJECTIVE_NAMES, OBJECTIVES, ObjectiveRow
    from trainables.objectives.rows import (
        NonFiniteError,
        ZeroNormError,
        has_direction,
        min_row_norm,
        unit_rows,
        unit_rows_or_zero,
    )
    from trainables.objectives.uniformity import uniform_loss
