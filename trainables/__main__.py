"""``python -m trainables CONFIG.yaml [--set key=value ...] [--json]``: run one trial, no Ray."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from trainables.config import TrialConfig
from trainables.names import did_you_mean
from trainables.shown import shown
from trainables.text import base_type, load_yaml
from trainables.train import LocalReporter, run_trial

PRESETS = Path(__file__).with_name("presets")
DESIGN_METRICS = (
    "train/loss", "train/lr", "train/examples_seen", "train/steps", "train/examples_per_s",
    "z/align", "z/uniform", "h/align", "h/uniform", "z/effective_rank", "h/effective_rank",
    "z/dim_std_min", "z/dim_std_mean", "sim/pos_mean", "sim/neg_mean", "sim/neg_q99",
    "sim/false_negative_rate", "probe/knn_top1_h", "probe/knn_top1_z", "probe/linear_top1_h",
    "probe/linear_top1_z", "loss/candidates",
)  # fmt: skip


def load_config_file(path: str) -> dict[str, Any]:
    """A YAML mapping of TrialConfig fields; a bare preset name is looked up in presets/."""
    file = Path(path)
    if not file.exists() and (PRESETS / f"{path}.yaml").exists():
        file = PRESETS / f"{path}.yaml"
    if not file.exists():
        names = sorted(p.stem for p in PRESETS.glob("*.yaml"))
        hint = did_you_mean(Path(path).stem, names)
        raise SystemExit(f"config file {path!r} not found{hint} (presets: {', '.join(names)})")
    try:
        mapping = load_yaml(file.read_text()) or {}
    except yaml.YAMLError as err:
        raise SystemExit(f"{file}: not valid YAML: {err}") from None
    if not isinstance(mapping, dict):
        raise SystemExit(f"{file}: expected a mapping of TrialConfig fields")
    return mapping


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["temperature=0.2", "mlp_hidden=[64, 64]"]`` -> values for TrialConfig.

    A text field takes the text after ``=`` exactly (``data_root=lab #3``, ``augmentation=crop``);
    any other field reads it as YAML (``[64, 64]``, ``null``), its numbers converted by the
    field's declared type. A key that is not a field is refused by TrialConfig.
    """
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SystemExit(f"--set expects key=value, got {pair!r}")
        field = TrialConfig.model_fields.get(key)
        if field is not None and base_type(field.annotation) is str and value != "null":
            out[key] = value
        else:
            out[key] = load_yaml(value)
    return out


def smoke(config: TrialConfig) -> TrialConfig:
    """A seconds-long copy: 4 steps, 2 evaluations, small held-out and probe sets."""
    return TrialConfig(
        **config.model_dump()
        | {
            "budget_examples": 4 * config.batch_size,
            "eval_marks": 2,
            "heldout_size": min(config.heldout_size or 200, 200),
            "probe_train_size": min(config.probe_train_size or 400, 400),
            "linear_probe_iters": 20,
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainables", description=__doc__)
    parser.add_argument("config", help="YAML file of TrialConfig fields, or a preset name")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--checkpoint-dir", help="checkpoint here, and resume from here")
    parser.add_argument("--smoke", action="store_true", help="4 steps, small evaluation")
    args = parser.parse_args(argv)
    try:
        config = TrialConfig(**(load_config_file(args.config) | parse_overrides(args.overrides)))
    except ValueError as err:
        print(shown(f"invalid trial config: {err}"), file=sys.stderr)  # it quotes the file
        return 2
    if args.smoke:
        config = smoke(config)
    reporter = LocalReporter(args.checkpoint_dir) if args.checkpoint_dir else None
    result = run_trial(config, reporter)
    if args.json:
        keys = (*DESIGN_METRICS, "status", "examples_seen", "steps", "wall_s")
        clean = {
            k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in result.items()
        }
        print(json.dumps({k: clean.get(k) for k in keys}))
    else:
        for key, value in result.items():
            print(f"{key:28s} {value:.4f}" if isinstance(value, float) else f"{key:28s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
