#!/usr/bin/env bash
# Screenshots of the docs site for a person to look at: headless Chromium, inside the private
# network namespace (scripts/netns.sh), against the built site served on 127.0.0.1. Builds the
# site first (scripts/docs.sh build) unless given --no-build. Writes PNGs to build/screenshots/:
# the home page, a format page (ZeroEQ), the options reference, a notebook page, architecture,
# the Python API and the CLI reference, each at a
# desktop width, and the home page at a phone's width. Installs Debian's chromium when it is
# missing (as root); it is not needed by the tests or CI.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--no-build" ]; then
  bash scripts/docs.sh build
fi
[ -f build/site/index.html ] || { echo "screenshots: no built site in build/site" >&2; exit 1; }
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "screenshots: needs Debian's chromium (as root: apt-get install chromium)" >&2
    exit 1
  fi
fi
mkdir -p build/screenshots
exec bash scripts/netns.sh bash -euo pipefail -c '
port=8765
.venv/bin/python -m http.server "$port" --bind 127.0.0.1 --directory build/site >/dev/null 2>&1 &
server=$!
profile=$(mktemp -d)
trap "kill $server; rm -rf $profile" EXIT
for _ in $(seq 50); do
  (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
  sleep 0.1
done
shoot() {  # name, path, width, height
  chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --user-data-dir="$profile" \
    --hide-scrollbars --window-size="$3,$4" --virtual-time-budget=3000 \
    --screenshot="build/screenshots/$1.png" "http://127.0.0.1:$port/$2" >/dev/null 2>&1
  echo "build/screenshots/$1.png"
}
shoot home "" 1280 1600
shoot format-zeroeq "formats/zeroeq/" 1280 2400
shoot options "options/" 1280 1600
shoot notebook-ebus "notebooks/ebus_quickstart/" 1280 3600
shoot architecture "architecture/" 1280 1300
shoot api "reference/api/" 1280 2400
shoot cli "reference/cli/" 1280 1400
shoot home-phone "" 412 1400
'
