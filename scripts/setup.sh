#!/usr/bin/env bash
# Creates .venv and installs spark_zmq with its test extras. Re-runs pip only when pyproject.toml
# changed since the last install. Needs Python >= 3.10 and Java 17 on the PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.11 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1; then python=$candidate; break; fi
  done
fi
[ -n "$python" ] || { echo "setup: no python3 on the PATH" >&2; exit 1; }
command -v java >/dev/null 2>&1 || { echo "setup: Spark needs Java 17 (java is not on the PATH)" >&2; exit 1; }
if ! command -v ip >/dev/null 2>&1 || ! command -v unshare >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq iproute2 util-linux >/dev/null
  else
    echo "setup: the private network namespace needs 'ip' (iproute2) and 'unshare' (util-linux)" >&2
    exit 1
  fi
fi
# Independent peers for the interop tests: Debian's avahi (the mDNS responder of the C++ ZeroEQ
# library) with its tools and D-Bus, and Debian's Prometheus server (it scrapes a capture
# service). Installed without starting any service: the tests start their own daemon inside
# the private network namespace.
missing=()
for pair in avahi-daemon:avahi-daemon avahi-browse:avahi-utils dbus-daemon:dbus \
            prometheus:prometheus; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    no_start=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$no_start" ]; then printf '#!/bin/sh\nexit 101\n' > "$no_start"; chmod +x "$no_start"; made_policy=1; fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    if [ "$made_policy" = 1 ]; then rm -f "$no_start"; fi
  else
    echo "setup: warning: the interop tests need Debian's ${missing[*]}; not root, so not" \
         "installed (a root user runs: apt-get install ${missing[*]})" >&2
  fi
fi
# and zyre.js (npm), an independent Zyre node for the yamz interop tests
if ! bash scripts/peers-node.sh; then
  echo "setup: warning: zyre.js is not installed; the yamz interop tests will fail" >&2
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=.venv/.spark_zmq-installed
# the install also compiles the package's modules (setup.py, Cython: spark_zmq/native/) into the
# checkout: a change to their source installs again
wanted=$(cat pyproject.toml setup.py spark_zmq/native/*.pyx spark_zmq/native/*.pxd \
  | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # compat mode puts the checkout on sys.path, so Spark's scan for top-level pyspark_* modules
  # (auto-registration of format("zeroeq")) finds pyspark_zeroeq.py
  .venv/bin/python -m pip install -q -e '.[test]' --config-settings editable_mode=compat
  echo "$wanted" > "$stamp"
fi
# Bytecode for the pyspark and py4j zips that Spark puts first on its Python processes' path
# (Python cannot cache it there): a streaming source's runner starts in half the CPU, well within
# the 10 s Spark gives it to connect back (scripts/pyspark_bytecode.py).
.venv/bin/python scripts/pyspark_bytecode.py
# The benchmarks' publisher (benchmarks/native_publisher.pyx): a development tool, not in the
# wheel, compiled in place against the package's libzmq binding (spark_zmq/native/libzmq.pxd,
# found on the venv's path); built again when either changed or the package was reinstalled.
publisher=.venv/.native_publisher-built
built=$(cat "$stamp" benchmarks/native_publisher.pyx spark_zmq/native/libzmq.pxd \
  | sha256sum | cut -d' ' -f1)
if [ ! -f "$publisher" ] || [ "$(cat "$publisher")" != "$built" ] \
   || ! compgen -G 'benchmarks/native_publisher*.so' >/dev/null; then
  if .venv/bin/cythonize -i -3 -q benchmarks/native_publisher.pyx; then
    echo "$built" > "$publisher"
  else
    echo "setup: warning: benchmarks/native_publisher.pyx did not compile; the benchmarks'" \
         "compiled publisher (native_publisher.send_sequence) is missing" >&2
  fi
fi
# Wheels of what the package needs at run time with the zeroeq extra, pyspark aside (a cluster's
# Spark provides it), for tests/test_deploy.py: it installs the package in a fresh venv inside
# the tests' private network namespace, where no package index is reachable.
wheelhouse=.venv/wheelhouse
dependencies=$(sha256sum < pyproject.toml | cut -d' ' -f1)
if [ ! -f "$wheelhouse/.stamp" ] || [ "$(cat "$wheelhouse/.stamp")" != "$dependencies" ]; then
  mapfile -t requirements < <(.venv/bin/python -c '
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["zeroeq"]))')
  .venv/bin/python -m pip download -q --only-binary=:all: -d "$wheelhouse" "${requirements[@]}"
  echo "$dependencies" > "$wheelhouse/.stamp"
fi
