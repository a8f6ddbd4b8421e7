"""The objectives a trial can train with: one row each, the one table everything that names an
objective reads.

- the training loop (:mod:`trainables.train`): the row's module's ``trial_loss``
  (:meth:`ObjectiveRow.trial_loss`), and whether the pair diagnostics weigh by a temperature;
- the config (:mod:`trainables.config`): the names ``objective`` takes, and the row's
  :attr:`ObjectiveRow.check` of the settings it cannot use;
- the metric catalogue (:mod:`trainables.metrics`): the metrics only it reports;
- the evidence card (``analysis.report.evidence``): its settings, whether groups change its
  positives, its sentences.

A new objective is its module (a loss, pure functions on tensors, and ``trial_loss(config, z1, z2,
groups, gather)``) and its row here. This module imports no torch: the config and the driver
read it, and a row's loss is imported only when a trial asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any


@dataclass(frozen=True)
class ObjectiveRow:
    """One objective, as everything that names it reads it.

    Attributes:
        name: the value of the config's ``objective``.
        module: the module under :mod:`trainables.objectives` that holds its loss and its
            ``trial_loss(config, z1, z2, groups, gather) -> Tensor``, the loop's call on two
            projected views (B, D) of B sources.
        settings: the config fields that weigh it, which its trials' record must hold (the
            evidence card's gate checks them).
        check: raises ValueError for a config whose settings this objective cannot use.
        temperature: its logits are cos / ``temperature``: the pair diagnostics measure the
            hardest negative's share of the softmax, and the card's τ sections read its trials.
        groups: whether ``group_policy`` changes its positives and its denominator.
        metrics: the evaluation metrics only this objective reports.
        similarity: the card's sentence on its similarity; ``{field}`` is replaced by the values
            its trials recorded for ``field``.
        candidates_note: the card's note on what its denominator holds, if it differs from the
            2B - 2 other views of the batch.
    """

    name: str
    module: str
    settings: tuple[str, ...]
    check: Callable[[Any], None]
    temperature: bool
    groups: bool
    metrics: tuple[str, ...]
    similarity: str
    candidates_note: str | None = None

    def trial_loss(self) -> Callable[..., Any]:
        """The module's ``trial_loss`` (imports torch)."""
        return import_module(f"{__package__}.{self.module}").trial_loss


def _weighted_by_temperature(config: Any) -> None:
    if config.lam_t is not None:
        raise ValueError(
            f"lam_t={config.lam_t} applies to objective='align_uniform' only; "
            "objective='info_nce' is weighted by its temperature"
        )


def _needs_lam_t(config: Any) -> None:
    if config.lam_t is None:
        raise ValueError("lam_t is required with objective='align_uniform' (λ·t, e.g. 2.0)")


ROWS: tuple[ObjectiveRow, ...] = (
    ObjectiveRow(
        name="info_nce",
        module="infonce",
        settings=("temperature",),
        check=_weighted_by_temperature,
        temperature=True,
        groups=True,
        metrics=("sim/hardest_neg_share",),
        similarity="InfoNCE: cosine similarity of L2-normalised z, divided by the temperature τ "
        "(logits = cos / τ).",
    ),
    ObjectiveRow(
        name="align_uniform",
        module="align_uniform",
        settings=("uniform_t", "lam_t"),
        check=_needs_lam_t,
        temperature=False,
        groups=False,
        metrics=(),
        similarity="align_uniform: squared Euclidean distance of L2-normalised z (= 2 - 2 cos); "
        "alignment exponent α = {align_alpha}; uniformity Gaussian kernel exp(-t ||u - v||²) "
        "with t = uniform_t = {uniform_t}, λ·t = lam_t = {lam_t} (λ = {derived.lam}).",
        candidates_note="align_uniform trials: the uniformity term pairs each view with the "
        "other B - 1 views of its own side (uniform(z1), uniform(z2) averaged), not the 2B - 2 "
        "shown.",
    ),
)
OBJECTIVES: dict[str, ObjectiveRow] = {row.name: row for row in ROWS}
OBJECTIVE_NAMES: tuple[str, ...] = tuple(OBJECTIVES)
DEFAULT_OBJECTIVE = ROWS[0].name  # the config's default
TEMPERATURE_OBJECTIVES = tuple(row.name for row in ROWS if row.temperature)
GROUPLESS_OBJECTIVES = tuple(row.name for row in ROWS if not row.groups)
