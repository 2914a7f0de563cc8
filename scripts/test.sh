#!/usr/bin/env bash
# The whole test suite, in a private network namespace (see scripts/netns.sh). Arguments go to
# pytest, e.g. `bash scripts/test.sh -k spool`. The tests run in SPARK_ZMQ_TEST_WORKERS pytest-xdist
# workers (default 4), each in a network namespace of its own (scripts/test-worker.sh), in the
# units of work of tests/support/scheduling.py (a file, a group of files, a test of a long file),
# longest first; SPARK_ZMQ_TEST_WORKERS=1 runs them in this process, one after the other.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
workers="${SPARK_ZMQ_TEST_WORKERS:-4}"
parallel=()
if [ "$workers" -gt 1 ]; then
  parallel=(--dist loadfile
            --tx "${workers}*popen//python=bash $PWD/scripts/test-worker.sh $PWD/.venv/bin/python")
fi
exec bash scripts/netns.sh .venv/bin/python -m pytest "${parallel[@]}" "$@"
