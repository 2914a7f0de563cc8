"""How scripts/test.sh spreads the suite over pytest-xdist workers: a test file to a worker (its
module fixtures and Spark session are made once), files that must share one worker together,
and the longest files first, so that the run does not end waiting on one long file."""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: test files that run in one worker, one after the other, in collection order: the docs site's
#: build (tests/docs/test_site.py, marked ``last``) renders the notebooks that
#: tests/jobs/test_notebooks.py executed in this run, and would execute them again without them
SHARED_WORKER = {
    "tests/jobs/test_notebooks.py": "docs site",
    "tests/docs/test_site.py": "docs site",
}


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the group of ``SHARED_WORKER``."""
    path = nodeid.split("::", 1)[0]
    return SHARED_WORKER.get(path, path)


class FileScheduling(LoadScopeScheduling):
    """xdist's ``loadfile`` with ``SHARED_WORKER``'s groups; scopes go out in collection order,
    which tests/conftest.py sorts longest first."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)
