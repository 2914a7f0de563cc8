#!/usr/bin/env bash
# Runs a command inside a private network namespace that holds only `lo`, with multicast enabled
# and 224.0.0.0/4 routed to it, so discovery (ZeroConf, Zyre beacons) never reaches a real network.
# As root it uses `unshare --net`; otherwise a user namespace (`unshare --user --map-root-user`).
set -euo pipefail
if [ "${SPARK_ZMQ_NETNS:-}" = "1" ]; then
  exec "$@"
fi
inner='ip link set lo up && ip link set lo multicast on &&
       ip route add 224.0.0.0/4 dev lo src 127.0.0.1 && exec "$@"'
if [ "$(id -u)" = "0" ]; then
  exec unshare --net -- env SPARK_ZMQ_NETNS=1 bash -c "$inner" netns "$@"
else
  exec unshare --user --map-root-user --net -- env SPARK_ZMQ_NETNS=1 bash -c "$inner" netns "$@"
fi
