#!/usr/bin/env bash
# CI's wheel check: builds spark_zmq's wheel from a copy of the checkout (pip wheel, offline, no
# build isolation: setuptools and Cython come from .venv), installs it in a fresh venv from
# .venv/wheelhouse only (no package index), and runs the capture self-test there with the
# compiled core required: it loads from the wheel, binds to pyzmq's libzmq and captures.
# Usage: scripts/check_wheel.sh [WORK_DIR]; run by tests/test_packaging.py (in the private
# network namespace: the self-test uses loopback only).
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
work=${1:-$(mktemp -d)}
mkdir -p "$work/source" "$work/wheels"
# a copy without the editable install's in-place build (spark_zmq/native/*.c, the .so) and caches
tar -C "$checkout" --exclude='__pycache__' --exclude='*.pyc' --exclude='*.so' \
    --exclude='spark_zmq/native/*.c' \
    -cf - spark_zmq setup.py pyproject.toml README.md LICENSE pyspark_*.py \
  | tar -C "$work/source" -xf -
.venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheels" "$work/source"
wheel=$(ls "$work"/wheels/spark_zmq-*.whl)
echo "check_wheel: built $(basename "$wheel")"
"$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-index --find-links .venv/wheelhouse "$wheel"
# from a neutral folder, so that the checkout's package cannot be the one imported
cd "$work"
"$work/venv/bin/python" -c '
import spark_zmq.native as native
for direction in native.DIRECTIONS:
    print("check_wheel: core at", native.load(direction).__file__)'
"$work/venv/bin/python" -m spark_zmq.capture.selftest --core native
