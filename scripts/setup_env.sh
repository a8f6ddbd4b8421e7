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
# pip byte-compiles what it installs, but not an editable project: where the environment sets
# PYTHONDONTWRITEBYTECODE (CI images often do), every process (a driver, each Ray worker, each
# command) would compile the project's modules from source again, ~0.2 s of CPU each
.venv/bin/python -m compileall -q -j 0 study trainables analysis search_spaces benchmarks tests/kits
.venv/bin/python -c "import torch, torchvision, ray, mlflow, optuna, pyarrow; print('env ok: torch', torch.__version__, '| ray', ray.__version__, '| mlflow', mlflow.__version__, '| optuna', optuna.__version__)"
