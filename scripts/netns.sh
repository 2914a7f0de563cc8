#!/usr/bin/env bash
# Runs a command inside a private network namespace that holds only `lo`, with multicast enabled
# and 224.0.0.0/4 routed to it, so discovery (ZeroConf, Zyre beacons) never reaches a real network,
# and a private mount namespace, so tests can mount a small tmpfs (a full disk) that nobody else
# sees. As root it uses `unshare --net --mount`; otherwise a user namespace as well.
set -euo pipefail
if [ "${SPARK_ZMQ_NETNS:-}" = "1" ]; then
  exec "$@"
fi
inner='ip link set lo up && ip link set lo multicast on &&
       ip route add 224.0.0.0/4 dev lo src 127.0.0.1 && exec "$@"'
if [ "$(id -u)" = "0" ]; then
  exec unshare --net --mount -- env SPARK_ZMQ_NETNS=1 bash -c "$inner" netns "$@"
else
  exec unshare --user --map-root-user --net --mount -- env SPARK_ZMQ_NETNS=1 bash -c "$inner" netns "$@"
fi
