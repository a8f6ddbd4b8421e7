"""Which of the driver's variables a cluster's trial actors are given: only what the nodes lack.

Ray Tune copies some of the driver's environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``RAY_TRAIN_*`` …) into every trial actor's
runtime_env, and Ray's runtime-env agent writes a runtime_env's variables in clear into
``runtime_env_agent.log`` (mode 644) in Ray's temp dir (ray-project/ray#28276): a secret copied
that way is on every node's disk. A cluster whose nodes were started from the job's own
environment (a Slurm job's ``ray start`` steps) already has them, as a local Ray's workers have
what they inherited. So the driver asks each alive node, by one small task pinned to it, for a
salted hash of each candidate variable in its own environment (never the value), and compares
it with its own:

- a variable every node holds with the driver's value is not copied;
- one that some node lacks (or holds with another value) is copied as Tune does, unless its name
  marks a secret (:func:`is_secret`): that is refused before any trial starts, naming the
  variable and the nodes, with the fix (export it where the nodes are started, or leave it out
  of the driver's environment). A secret is never passed through a runtime_env.

Nodes that join after the check are not asked: a Slurm job's nodes all start before its driver.
"""

from __future__ import annotations

import hashlib
import os
import secrets

from search_spaces.spec import StudyError

SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "KEY")
ASK_TIMEOUT_S = 60.0  # each node answers in well under a second once it has a worker


def is_secret(name: str) -> bool:
    """Whether a variable's name marks a credential (``AWS_SECRET_ACCESS_KEY``,
    ``AWS_SESSION_TOKEN``, ``AWS_ACCESS_KEY_ID`` …)."""
    return any(word in name.upper() for word in SECRET_WORDS)


def digests(salt: str, names: list[str]) -> dict[str, str | None]:
    """name -> the salted sha256 of its value in this process's environment (None: unset).
    Run on each node; the salt is fresh per question, so an answer matches nothing else."""
    return {
        name: None if name not in os.environ
        else hashlib.sha256(f"{salt}\0{os.environ[name]}".encode()).hexdigest()
        for name in names
    }  # fmt: skip


def nodes_lacking(names: list[str]) -> dict[str, list[str]]:
    """name -> the alive nodes (by address) whose environment lacks this process's value of it;
    only the names some node lacks. A node that does not answer in time lacks them all."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    salt = secrets.token_hex(16)
    mine = digests(salt, names)
    ask = ray.remote(num_cpus=0, max_retries=0)(digests)
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    asked = [
        ask.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
        .remote(salt, names)
        for node in nodes
    ]  # fmt: skip
    ready, _ = ray.wait(asked, num_returns=len(asked), timeout=ASK_TIMEOUT_S)
    lacking: dict[str, list[str]] = {}
    for node, answer in zip(nodes, asked, strict=True):
        theirs = ray.get(answer) if answer in ready else {}
        for name in names:
            if theirs.get(name) != mine[name]:
                lacking.setdefault(name, []).append(node.get("NodeManagerAddress", "?"))
    return lacking


def to_copy(present: set[str]) -> set[str]:
    """Of the variables Tune would copy (``present``: those set in this process), the ones the
    cluster's nodes lack and that are no secret.

    Raises:
        StudyError: a secret some node lacks, naming it, the nodes and the fix.
    """
    if not present:
        return set()
    lacking = nodes_lacking(sorted(present))
    refused = {name: where for name, where in lacking.items() if is_secret(name)}
    if refused:
        raise StudyError(refusal(refused))
    return set(lacking)


def refusal(refused: dict[str, list[str]]) -> str:
    names = ", ".join(sorted(refused))
    where = "; ".join(f"{name}: {', '.join(sorted(set(n)))}" for name, n in sorted(refused.items()))
    return (
        f"--address: the cluster's nodes lack this driver's {names} ({where}). Ray would copy "
        "it into every trial's runtime_env, and Ray's runtime-env agent writes those in clear "
        "into its log in Ray's temp dir, so it is not copied: export it in the environment "
        "the nodes are started from (ray start, the Slurm job's steps), or, if the trials need "
        f"no bucket, leave it out of the driver's (env -u {sorted(refused)[0]} study run …)"
    )
