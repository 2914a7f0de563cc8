#!/usr/bin/env bash
# Lint, format and type checks (ruff, cython-lint for the Cython sources, and mypy, configured in
# pyproject.toml): CI runs them before the tests, pre-commit before each commit. Installs nothing
# beyond scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# cython-lint runs pycodestyle by name: the venv's, first on the PATH
PATH="$PWD/.venv/bin:$PATH" .venv/bin/cython-lint \
  spark_zmq/native/*.pyx spark_zmq/native/*.pxd benchmarks/*.pyx
.venv/bin/mypy
