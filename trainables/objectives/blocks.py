"""InfoNCE's blocks of anchors against all candidates, with the closed-form gradient.

:func:`pair_masks` says which candidates are an anchor's positives and which stay in its
denominator; :class:`_Pairs` and :class:`_Block` hold them by index or as masks, block by block;
:class:`_InfoNCERows` is the autograd function over the blocks and :func:`_info_nce_unit` the
core that :func:`trainables.objectives.infonce.info_nce` and
:func:`trainables.objectives.ntxent.nt_xent` call on unit rows (see "Memory" in the package's
docstring).
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from trainables.objectives.gathers import Gather, _global_mean, _ids_across_ranks, _world
from trainables.objectives.memory import block_bytes_per_pair, memory_budget, rows_per_chunk

GroupPolicy = Literal["negative", "mask", "positive"]
GROUP_POLICIES: tuple[str, ...] = ("negative", "mask", "positive")
# Positives listed by index (True), held as (C, M) masks (False), or chosen from the ids (None).
_SPARSE_POSITIVES: bool | None = None


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
