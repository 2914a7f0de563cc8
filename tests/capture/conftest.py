"""Every capture test runs on both receive loops (``spark_zmq.capture.receiving``): the compiled
core, and the Python loop it falls back to. The environment variable reaches capture in this
process and in the processes the tests start themselves; queries that start capture processes
through Spark get the ``captureCore`` option from the ``core`` fixture."""

from __future__ import annotations

import pytest

from spark_zmq.native import RECEIVE, load


@pytest.fixture(params=["native", "python"], autouse=True)
def core(request, monkeypatch) -> str:
    if request.param == "native":
        load(RECEIVE)  # the compiled core must load here: an ImportError fails the test
    monkeypatch.setenv(RECEIVE.variable, request.param)
    return request.param
