#!/usr/bin/env bash
# One pytest-xdist worker of scripts/test.sh: the Python command given, in a network and mount
# namespace of its own (scripts/netns.sh, entered again from inside the suite's), so that each
# worker's discovery sees only its own peers, and ports and fixed paths (avahi's tmpfs on
# /run/avahi-daemon) cannot collide between workers.
set -euo pipefail
exec env -u SPARK_ZMQ_NETNS bash "$(dirname "$0")/netns.sh" "$@"
