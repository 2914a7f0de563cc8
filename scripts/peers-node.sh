#!/usr/bin/env bash
# Installs the independent Zyre peer of the yamz interop tests: zyre.js (npm), whose zeromq.js
# is built against Debian's libzmq (libzmq3-dev) rather than a libzmq it would download.
# Idempotent, and quick when already installed. As root it installs what is missing with apt;
# a user who is not root needs node, npm, g++, make, pkg-config and libzmq3-dev installed.
set -euo pipefail
cd "$(dirname "$0")/../tests/peers/node"
if [ -d node_modules ] && node -e "require('zyre.js'); require('zeromq')" >/dev/null 2>&1; then
  exit 0
fi
missing=()
for pair in node:nodejs npm:npm g++:g++ make:make pkg-config:pkg-config; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
[ -f /usr/include/zmq.h ] || missing+=(libzmq3-dev)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "peers-node: the zyre.js interop tests need ${missing[*]} (as root: apt-get install" \
         "${missing[*]}); not installed" >&2
    exit 1
  fi
fi
# zeromq.js 5 downloads and builds its own libzmq unless told to use the system's
npm_config_zmq_external=true npm ci --no-audit --no-fund --loglevel=error >/dev/null
node -e "require('zyre.js'); require('zeromq')"
