"""Checks of the running trial code, recorded with every study (release gate item 1): the
InfoNCE implementation against a finite example checked by hand.

Every trial runs them in its own process as it makes its final report (``study.trainable``), with
the torch and the code that trained it, and the driver records each result as the study's parent
run's tag ``study.check.<name>`` (``study.record``). The driver itself never imports torch for
them (seconds of CPU at every study's start)."""

from __future__ import annotations

WORKED_EXAMPLE_LOSS = 0.6551  # hand-computed below, to 4 decimals


def self_checks() -> dict[str, str]:
    """``info_nce_worked_example``: the hand-computed M = 3 example (anchor 0°, positive 20°,
    negatives 90°, 180°, 270°, τ = 1) must give 0.6551; "pass", or "fail: <value> != 0.6551"."""
    import torch

    from trainables.objectives import info_nce

    angles = torch.deg2rad(torch.tensor([0.0, 20.0, 90.0, 180.0, 270.0, 90.0, 180.0, 270.0]))
    z = torch.stack([angles.cos(), angles.sin()], dim=1).double()
    sources = torch.tensor([0, 0, 1, 2, 3, 1, 2, 3])
    groups = torch.tensor([0, 0, 1, 2, 3, 0, 0, 0])  # the negatives' twins are masked
    loss = float(info_nce(z, sources, 1.0, groups=groups, group_policy="mask", reduction="none")[0])
    ok = abs(loss - WORKED_EXAMPLE_LOSS) < 1e-4
    return {"info_nce_worked_example": "pass" if ok else f"fail: {loss:.6f} != 0.6551"}
