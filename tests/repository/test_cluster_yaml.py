"""cluster.yaml: Ray's own cluster-launcher validation, comments on every key, what it runs,
and its object-storage promises (instance profiles, one bucket for the study and MLflow, no mounts).

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

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "cluster.yaml"
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


# Object storage: every node reaches one bucket through its instance profile, the
# study and MLflow write there, and nothing mounts a shared filesystem.

README = CLUSTER_YAML.parent / "README.md"
S3_URI = re.compile(r"s3://([^/\s]+)(/\S*)?")
# A command that mounts a filesystem (NFS/EFS, or a bucket through FUSE) on a node.
MOUNTING = re.compile(r"\b(?:mount|nfs\d?|efs|s3fs|goofys|fuse)\b|mount-s3", re.IGNORECASE)
# AWS credentials written out: an access key id, or the names the SDKs read them from.
AWS_KEYS = re.compile(
    r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b|aws_access_key_id|aws_secret_access_key|aws_session_token",
    re.IGNORECASE,
)
COMMAND_LISTS = (
    "initialization_commands",
    "setup_commands",
    "head_setup_commands",
    "worker_setup_commands",
    "head_start_ray_commands",
    "worker_start_ray_commands",
)


def comments(text: str) -> list[str]:
    """The text of every full-line comment, '#' and surrounding blanks removed."""
    return [
        line.lstrip()[1:].strip() for line in text.splitlines() if line.lstrip().startswith("#")
    ]


def documented(fragment: str) -> list[str]:
    """Full-line comments (the documented commands among them) that contain fragment."""
    return [line for line in comments(CLUSTER_YAML.read_text()) if fragment in line]


def option(command: str, name: str) -> str:
    match = re.search(rf"{re.escape(name)}[ =](\S+)", command)
    assert match, f"{name} missing from: {command}"
    return match.group(1)


def bucket(uri: str) -> tuple[str, str]:
    """(bucket, key prefix without slashes at either end) of an s3:// URI."""
    match = S3_URI.fullmatch(uri)
    assert match, f"not an s3:// URI: {uri}"
    return match.group(1), (match.group(2) or "").strip("/")


def mlflow_server(config: dict[str, Any]) -> str:
    [command] = [cmd for cmd in config["head_start_ray_commands"] if "mlflow server" in cmd]
    return command


def study_command() -> str:
    [command] = documented(".venv/bin/study run ")
    return command


def mounting(config: dict[str, Any]) -> list[str]:
    """file_mounts entries and node commands that mount a filesystem."""
    found = [f"{k}: {v}" for k, v in config.get("file_mounts", {}).items() if MOUNTING.search(v)]
    found += [cmd for key in COMMAND_LISTS for cmd in config.get(key, []) if MOUNTING.search(cmd)]
    return found


def test_every_node_type_has_an_instance_profile() -> None:
    config = load()
    for name, node_type in config["available_node_types"].items():
        arn = node_type["node_config"]["IamInstanceProfile"]["Arn"]
        assert re.fullmatch(r"arn:aws:iam::[^:\s]+:instance-profile/\S+", arn), (name, arn)
    # `ray up` keeps the head's profile as given instead of making its default ray-autoscaler-v1
    # role (EC2 and S3 full access); it returns before any AWS call, so this runs offline.
    from ray.autoscaler._private.aws import config as aws_config

    merged = ray_up_validate(config)
    head = merged["head_node_type"]
    before = copy.deepcopy(merged["available_node_types"][head]["node_config"])
    aws_config._configure_iam_role(merged)
    assert merged["available_node_types"][head]["node_config"] == before


def test_nothing_mounts_a_filesystem() -> None:
    config = load()
    # The project is the only thing copied to the nodes; data and records come from the bucket.
    assert config["file_mounts"] == {"~/contrastive-studies": "."}
    assert mounting(config) == []
    assert not re.search(r"\b(?:efs|nfs)\b", CLUSTER_YAML.read_text(), re.IGNORECASE)
    # The check does see a mount.
    broken = load()
    broken["setup_commands"].append("sudo mount -t nfs4 fs-1234.efs.amazonaws.com:/ ~/studies")
    assert len(mounting(broken)) == 1


def test_documented_study_command_stores_in_the_bucket() -> None:
    command = study_command()
    assert command.startswith("cd ~/contrastive-studies && .venv/bin/study run ")
    spec = command.split("study run ", 1)[1].split()[0]
    assert (CLUSTER_YAML.parent / spec).is_file(), spec
    assert option(command, "--address") == "auto"
    assert option(command, "--tracking-uri") == "http://127.0.0.1:5000"
    storage = option(command, "--storage")
    name, prefix = bucket(storage)
    assert name == "YOUR-BUCKET" and prefix
    # The README's cluster command is the same.
    section = README.read_text().split("### On a GPU cluster", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    assert re.findall(r"--storage\s+(\S+)", block) == [storage]


def test_mlflow_artifacts_go_to_the_same_bucket() -> None:
    config = load()
    server = mlflow_server(config)
    storage_bucket, storage_prefix = bucket(option(study_command(), "--storage"))
    artifacts_bucket, artifacts_prefix = bucket(option(server, "--artifacts-destination"))
    assert artifacts_bucket == storage_bucket
    # Under the study storage, as `study run` lays out a local record (storage/mlartifacts).
    assert artifacts_prefix == f"{storage_prefix}/mlartifacts"
    assert "--no-serve-artifacts" not in server
    assert "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" in server
    assert option(server, "--workers") == "1"


def test_copy_home_and_data_name_the_same_bucket() -> None:
    config = load()
    storage = option(study_command(), "--storage")
    # The record comes home from the bucket, and MLflow's database from where the server keeps it.
    assert f"aws s3 sync {storage.rstrip('/')}/ ./studies/" in documented("aws s3 sync s3://")
    db = option(mlflow_server(config), "--backend-store-uri")
    assert db == "sqlite:///$HOME/studies/mlflow.db"
    assert any("rsync-down cluster.yaml '~/studies/mlflow.db'" in c for c in documented("rsync"))
    # CIFAR-10 goes up once and data_root names it.
    [upload] = documented("aws s3 sync ~/data/cifar10/")
    data_uri = upload.split()[-1]
    assert bucket(data_uri)[0] == bucket(storage)[0]
    assert documented(f"data_root: {data_uri.rstrip('/')}")


def test_header_policy_grants_the_bucket_and_no_more() -> None:
    header = "\n".join(comments(CLUSTER_YAML.read_text()))
    [policy_text] = re.findall(r'\{"Version".*?\]\}', header, re.DOTALL)
    policy = json.loads(policy_text)
    name, _ = bucket(option(study_command(), "--storage"))
    granted = {
        (action, statement["Resource"])
        for statement in policy["Statement"]
        for action in statement["Action"]
        if statement["Effect"] == "Allow"
    }
    assert granted == {
        ("s3:ListBucket", f"arn:aws:s3:::{name}"),
        ("s3:GetObject", f"arn:aws:s3:::{name}/*"),
        ("s3:PutObject", f"arn:aws:s3:::{name}/*"),
        ("s3:DeleteObject", f"arn:aws:s3:::{name}/*"),
    }


def test_no_aws_keys_in_the_file() -> None:
    assert not AWS_KEYS.search(CLUSTER_YAML.read_text())
    # The check does see keys.
    assert AWS_KEYS.search("export AWS_SECRET_ACCESS_KEY=abc")
    assert AWS_KEYS.search("AKIAIOSFODNN7EXAMPLE")
