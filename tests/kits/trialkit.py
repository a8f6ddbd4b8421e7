"""What a trial test starts from: the shipped presets, a quick evaluation, and a reporter that
stands in for a kill after its n-th checkpoint."""

from __future__ import annotations

from pathlib import Path

import yaml

from trainables.train import LocalReporter

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "trainables" / "presets"


def preset(name: str) -> dict:
    return yaml.safe_load((PRESETS / f"{name}.yaml").read_text())


FAST_EVAL = {"linear_probe_iters": 20, "probe_train_size": 300}


class StopAfter(LocalReporter):
    """Stands in for a kill: raises once it has stored ``n`` checkpoints."""

    def __init__(self, root, n: int) -> None:
        super().__init__(root, keep=10)
        self.n = n

    def report(self, metrics, *, step, checkpoint_dir=None):
        super().report(metrics, step=step, checkpoint_dir=checkpoint_dir)
        if len(self.checkpoints()) == self.n:
            raise KeyboardInterrupt("stopped after checkpoint")
