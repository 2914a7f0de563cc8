#!/usr/bin/env bash
# The docs site (mkdocs.yml, docs/): `bash scripts/docs.sh build` writes build/site with warnings
# as errors (as CI builds it: tests/docs/test_site.py); `bash scripts/docs.sh serve` serves it on
# http://127.0.0.1:8000 and rebuilds it as you edit. Further arguments go to mkdocs. Installs
# what it needs through scripts/setup.sh. The notebook pages need the executed notebooks that
# tests/jobs/test_notebooks.py saves in build/notebooks; a build without them runs that test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export NO_MKDOCS_2_WARNING=1  # mkdocs 1.6.1 otherwise opens with a banner about its successor
command=${1:-build}
[ $# -gt 0 ] && shift
case "$command" in
  build) exec .venv/bin/mkdocs build --strict "$@" ;;
  serve) exec .venv/bin/mkdocs serve --strict --dev-addr 127.0.0.1:8000 "$@" ;;
  *) echo "usage: bash scripts/docs.sh [build|serve] [mkdocs arguments]" >&2; exit 2 ;;
esac
