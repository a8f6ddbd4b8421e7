"""cluster.yaml: Ray's own cluster-launcher validation, comments on every key, what it runs.

Validation follows what `ray up` does before it touches a cloud (ray.autoscaler._private.commands
._bootstrap_config): `prepare_config` merges the file with the provider's defaults.yaml, then
`validate_config` checks the result against Ray's ray-schema.json (jsonschema) plus its own rules
(head_node_type among available_node_types, min_workers within max_workers, ...). Both are
offline; nothing here needs cloud credentials or boto3.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import ray.autoscaler
import yaml
from ray.autoscaler._private import util

CLUSTER_YAML = Path(__file__).resolve().parent.parent / "cluster.yaml"
RAY_SCHEMA = Path(ray.autoscaler.__file__).parent / "ray-schema.json"

# A line that defines a mapping key: `key:`, `"quoted key":`, `- key:` (first key of a list item).
KEY_LINE = re.compile(r"""^\s*(?:-\s+)?(?:"[^"]*"|'[^']*'|[A-Za-z_][\w.-]*)\s*:(?:\s|$)""")
# A YAML comment starts at the line start or after whitespace.
COMMENT = re.compile(r"(?:^|\s)#")


def load() -> dict[str, Any]:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def ray_up_validate(config: dict[str, Any]) -> dict[str, Any]:
    """Validate as `ray up` does, offline; return the merged config it would use."""
    merged = util.prepare_config(copy.deepcopy(config))
    util.validate_config(merged)
    return merged


def test_file_validates_with_rays_validator() -> None:
    config = load()
    merged = ray_up_validate(config)
    # The file also conforms to the schema on its own, before any defaults are merged in.
    jsonschema.validate(config, json.loads(RAY_SCHEMA.read_text()))
    assert merged["provider"]["type"] == "aws"
    assert merged["head_node_type"] in merged["available_node_types"]


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        pytest.param(lambda c: c.update(bogus_key=1), jsonschema.ValidationError, id="top-level"),
        pytest.param(
            lambda c: c["available_node_types"]["gpu_worker"].update(gpus=1),
            jsonschema.ValidationError,
            id="node-type-key",
        ),
        pytest.param(
            lambda c: c["available_node_types"]["gpu_worker"]["resources"].update(GPU=0.5),
            jsonschema.ValidationError,
            id="fractional-gpu",
        ),
        pytest.param(lambda c: c.update(head_node_type="nope"), ValueError, id="head-type"),
    ],
)
def test_validator_rejects_a_broken_copy(mutate, error: type[Exception]) -> None:
    config = load()
    mutate(config)
    with pytest.raises(error):
        ray_up_validate(config)


def key_lines(text: str) -> list[int]:
    """0-based numbers of the lines that define a key, by the line regex."""
    return [
        i
        for i, line in enumerate(text.splitlines())
        if not line.lstrip().startswith("#") and KEY_LINE.match(line)
    ]


def uncommented_keys(text: str) -> list[str]:
    """Key lines with no comment on the line itself nor on the previous non-empty line."""
    lines = text.splitlines()
    missing = []
    for i in key_lines(text):
        if COMMENT.search(lines[i]):
            continue
        previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
        if not previous.lstrip().startswith("#"):
            missing.append(f"line {i + 1}: {lines[i].strip()}")
    return missing


def test_every_key_is_commented() -> None:
    assert uncommented_keys(CLUSTER_YAML.read_text()) == []


def test_comment_checker_sees_every_key_and_can_fail() -> None:
    text = CLUSTER_YAML.read_text()
    # Every mapping key YAML itself finds starts on a line the regex flags (or on the line of a
    # key it flags, as in `resources: {"GPU": 1}`), so no key escapes the comment check.
    flagged = set(key_lines(text))
    pending = [yaml.compose(text)]
    while pending:
        node = pending.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                assert key.start_mark.line in flagged, f"line {key.start_mark.line + 1}"
                pending.append(value)
        elif isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
    # And the checker does fail on a key without a comment.
    bad = "# about a\na: 1\n\nb: 2  # about b\nc:\n  - d: 3\n"
    assert uncommented_keys(bad) == ["line 5: c:", "line 6: - d: 3"]


def test_commands_install_the_project_and_start_mlflow_on_localhost() -> None:
    config = load()
    assert config["file_mounts"]["~/contrastive-studies"] == "."
    assert ".venv" in config["rsync_exclude"]
    assert any("scripts/setup_env.sh" in cmd for cmd in config["setup_commands"])
    assert any("TORCH_SPEC= " in cmd for cmd in config["setup_commands"])

    head = config["head_start_ray_commands"]
    assert any("ray start --head" in cmd for cmd in head)
    mlflow = [cmd for cmd in head if "mlflow server" in cmd]
    assert len(mlflow) == 1
    assert "--host 127.0.0.1" in mlflow[0]
    assert "0.0.0.0" not in " ".join(head)
    assert any(
        "ray start --address=$RAY_HEAD_IP:6379" in cmd
        for cmd in config["worker_start_ray_commands"]
    )

    node_types = config["available_node_types"]
    workers = {name: t for name, t in node_types.items() if name != config["head_node_type"]}
    assert any(t["resources"].get("GPU", 0) >= 1 for t in workers.values())
    assert node_types[config["head_node_type"]]["resources"].get("GPU", 0) == 0
