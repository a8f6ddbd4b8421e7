#!/usr/bin/env bash
# Build .venv/ in the repository root from nothing: the one install path that the README,
# CI (.ci/run) and every developer use.
#
# torch and torchvision are installed first as a matched pair. A GPU cluster that ships its own
# CUDA build can set TORCH_SPEC="" to keep whatever torch its image already provides through the
# ranges declared in pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
TORCH_SPEC=${TORCH_SPEC-"torch==2.14.1 torchvision==0.29.1"}

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade "pip>=24" setuptools wheel
if [ -n "$TORCH_SPEC" ]; then
  # shellcheck disable=SC2086
  .venv/bin/python -m pip install --quiet $TORCH_SPEC
fi
.venv/bin/python -m pip install --quiet -e '.[dev]'
.venv/bin/python -c "import torch, torchvision, ray, mlflow, optuna, pyarrow; print('env ok: torch', torch.__version__, '| ray', ray.__version__, '| mlflow', mlflow.__version__, '| optuna', optuna.__version__)"
