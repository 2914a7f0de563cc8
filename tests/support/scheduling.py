"""How scripts/test.sh spreads the suite over pytest-xdist workers.

A unit of work goes to one worker as a whole: a test file (its module fixtures are made once),
a group of files that must share a worker (``SHARED_WORKER``), or, for the long files whose
tests share nothing but the worker's Spark session (``SPREAD``), each test on its own. Units
start longest first, so that the run does not end waiting on a long unit started last. How long
a unit takes comes from ``durations.json`` (measured: ``python tests/support/scheduling.py
JUNIT_XML`` rewrites it from a run's ``--junitxml``), else from ``guessed_seconds``. The file
can be stale without harm: it only orders the units.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

#: test files that run in one worker, one after the other, in collection order: the docs site's
#: build (tests/docs/test_site.py, marked ``last``) renders the notebooks that
#: tests/jobs/test_notebooks.py executed in this run, and would execute them again without them;
#: the packaging and deployment tests share the wheel that one worker builds (``checked_wheel``)
SHARED_WORKER = {
    "tests/jobs/test_notebooks.py": "docs site",
    "tests/docs/test_site.py": "docs site",
    "tests/test_packaging.py": "the wheel",
    "tests/test_deploy.py": "the wheel",
}

#: long files whose tests share no fixture wider than a test's but the session's: each test is
#: a unit of its own (a spark-submit job, a docs example, a restarted query, ...)
SPREAD = frozenset(
    {
        "tests/jobs/test_jobs.py",
        "tests/jobs/test_demo.py",
        "tests/docs/test_examples.py",
        "tests/placement/test_restart_gaps.py",
        "tests/capture/test_hostile_peers.py",
    }
)

DURATIONS = Path(__file__).with_name("durations.json")


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to."""
    path = nodeid.split("::", 1)[0]
    if path in SPREAD:
        return nodeid
    return SHARED_WORKER.get(path, path)


def guessed_seconds(item: pytest.Item) -> float:
    """Roughly what a test takes on 2 cores when no measurement says: a standalone cluster
    minutes, any other Spark start tens of seconds, a fuzz test (``..._<n>_examples``) seconds,
    most others a fraction of one."""
    if item.get_closest_marker("cluster"):
        return 150
    if item.get_closest_marker("spark"):
        return 40
    return 10 if re.search(r"_\d+_examples$", item.name.split("[")[0]) else 0.2


def measured() -> dict[str, float]:
    """Seconds per test id, as durations.json holds them (empty without the file)."""
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def unit_seconds(items: Iterable[pytest.Item]) -> dict[str, float]:
    """Expected seconds per unit of work: measured where known, else guessed."""
    seconds = measured()
    files = {nodeid.split("::", 1)[0] for nodeid in seconds}
    units: dict[str, float] = {}
    for item in items:
        scope = scope_of(item.nodeid)
        if item.nodeid in seconds:
            took = seconds[item.nodeid]
        elif item.nodeid.split("::", 1)[0] in files:
            took = 0.2  # a test of a measured file that durations.json leaves out: a short one
        else:
            took = guessed_seconds(item)
        units[scope] = units.get(scope, 0.0) + took
    return units


class FileScheduling(LoadScopeScheduling):
    """xdist's ``loadfile`` with this module's units of work (``scope_of``); units go out in
    collection order, which tests/conftest.py sorts longest first."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


def write_durations(junit_xml: str) -> None:
    """Rewrite durations.json from a run's ``--junitxml`` report: whole seconds per test id, for
    the tests that took a second or more."""
    found: dict[str, float] = {}
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        took = round(float(case.get("time", 0)))
        if took >= 1:
            found[f"{path}::{case.get('name')}"] = took
    DURATIONS.write_text(json.dumps(dict(sorted(found.items())), indent=0) + "\n")


if __name__ == "__main__":
    write_durations(sys.argv[1])
