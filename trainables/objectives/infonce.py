"""InfoNCE (van den Oord et al., 2018), multi-positive (Khosla et al., 2020): the loss, its dense
reference, the negatives it counts, and the trial's loss for ``objective: info_nce``."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor

from trainables.objectives.blocks import GROUP_POLICIES, GroupPolicy, _info_nce_unit, pair_masks
from trainables.objectives.gathers import ID_SCOPES, Gather, IdScope
from trainables.objectives.memory import rows_per_chunk
from trainables.objectives.ntxent import nt_xent
from trainables.objectives.rows import (
    _check_labels,
    _check_positive_finite,
    _check_rows,
    unit_rows,
)


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


def trial_loss(
    config: Any, z1: Tensor, z2: Tensor, groups: Tensor | None, gather: Gather | None = None
) -> Tensor:
    """``objective: info_nce`` on two projected views (B, D) of B sources, as the loop calls it.

    Without groups it is SimCLR's :func:`nt_xent` and nothing here waits for the device: NaN,
    inf or a zero row gives a NaN loss instead of raising. With groups (B,) it is
    :func:`info_nce` with ``config.group_policy``, which reads the ids on the host. Under a
    ``gather`` sources are numbered per rank and groups are the dataset's ids (one id is one
    group everywhere).
    """
    if groups is None:
        return nt_xent(z1, z2, config.temperature, checks=False, gather=gather)
    b = z1.shape[0]
    sources = torch.arange(b, device=z1.device).repeat(2)
    view_groups = groups.to(z1.device).repeat(2)
    scope = {} if gather is None else {"group_ids": "global"}
    return info_nce(
        torch.cat([z1, z2]), sources, config.temperature,
        groups=view_groups, group_policy=config.group_policy, gather=gather, **scope,
    )  # fmt: skip
