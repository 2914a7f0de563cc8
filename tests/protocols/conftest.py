"""The writer tests of every format run on both of the writer's send loops
(``spark_zmq.spark.sending``): the compiled loop and the Python path. A writer query gets the
``sendCore`` option from the ``send_core`` fixture. A Python worker keeps one publisher per
format and option set for its whole life, so the tests name their sessions (or sockets) after
the loop too: each run then has a publisher of its own."""

from __future__ import annotations

import pytest

from spark_zmq.native import SEND, load


@pytest.fixture(params=["native", "python"])
def send_core(request) -> str:
    if request.param == "native":
        load(SEND)  # the compiled loop must load here: an ImportError fails the test
    return request.param
