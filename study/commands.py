"""Commands a user is told to run, ready to paste: argv quoted for a POSIX shell, console
scripts of this environment by full path (the venv need not be activated), and the MLflow
commands (UI, ``mlflow`` CLI) on a study's record. The runner, ``study augment`` and the CLI
build every command they print here.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from trainables.remote import redacted, without_credentials


def tool(name: str) -> str:
    """A console script of this environment by full path (the venv need not be activated)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def shell_command(*argv: str, env: dict[str, str] | None = None) -> str:
    """argv as one line that a POSIX shell runs as given: every word quoted where it must be
    (spaces, ``#``, ``%``, parentheses, quotes, ``$``), and the password of any URI in it shown
    as ``***`` (:func:`trainables.remote.redacted`): a printed command is never where a
    credential is kept, so one given in a URI is typed again (or set in the environment)."""
    words = [f"{k}={shlex.quote(redacted(v))}" for k, v in (env or {}).items()]
    return " ".join([*words, *(shlex.quote(redacted(a)) for a in argv)])


def ui_command(uri: str, port: int = 5000) -> str:
    """The command that opens the MLflow UI on this record, ready to paste. One worker and no
    job runner: MLflow 3.17 otherwise leaves its job runner behind when the UI is stopped."""
    if uri.startswith("sqlite:///"):
        return shell_command(
            tool("mlflow"), "ui", "--backend-store-uri", uri, "--port", str(port), "--workers",
            "1", env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )  # fmt: skip
    return f"open {without_credentials(uri)} in a browser (the MLflow server's own UI)"


def mlflow_command(uri: str, *argv: str) -> str:
    """An ``mlflow`` CLI command against this tracking store, ready to paste."""
    return shell_command(tool("mlflow"), *argv, env={"MLFLOW_TRACKING_URI": uri})


def duration(seconds: float) -> str:
    """A wall time as a person reads it: '42 s', '2.5 min', '35 min', '1.8 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 600:
        return f"{seconds / 60:.1f} min"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
