#!/usr/bin/env bash
# The main job on embedded defaults: demo ZeroEQ publishers on loopback streamed into a local
# Parquet table (spark_zmq/jobs/zeroeq_to_parquet.py), in a private network namespace so that discovery
# never leaves the machine. Arguments go to the job (see `--help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bash scripts/netns.sh .venv/bin/python -m spark_zmq.jobs.zeroeq_to_parquet "$@"
