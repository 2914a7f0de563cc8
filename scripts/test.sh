#!/usr/bin/env bash
# The whole test suite, in a private network namespace (see scripts/netns.sh). Arguments go to
# pytest, e.g. `bash scripts/test.sh -k spool`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bash scripts/netns.sh .venv/bin/python -m pytest "$@"
