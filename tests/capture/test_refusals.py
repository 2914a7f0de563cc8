"""Capture refuses an endpoint it cannot open alone: one log line naming it, no folder outside
the spool, and the endpoints beside it keep flowing (before, one such endpoint ended capture
for every partition). Discovery's guard (``placement.guard``) refuses most such endpoints before
capture sees them; this is what capture does with one that gets through (a holder's, say)."""

from __future__ import annotations

import logging
import os

import zmq

from spark_zmq.capture.loop import Capture
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.writer import Spool
from support.common import wait_until


def test_an_endpoint_capture_cannot_open_is_refused_alone(tmp_path, caplog, core):
    sender = zmq.Context.instance().socket(zmq.XPUB)
    sender.setsockopt(zmq.LINGER, 0)
    port = sender.bind_to_random_port("tcp://127.0.0.1")
    good = Endpoint(f"127.0.0.1:{port}", f"tcp://127.0.0.1:{port}")
    spool = Spool(str(tmp_path / "spool"), 1 << 30)
    capture = Capture(spool, max_message_bytes=1 << 20, flush_interval=0.05, name="test")
    capture.start()
    try:
        with caplog.at_level(logging.INFO, logger="spark_zmq"):
            for _ in range(3):  # reported again and again, refused once
                capture.endpoint_joined(Endpoint("..", ".."))
                capture.endpoint_joined(Endpoint("long", "ipc:///tmp/" + "x" * 300))
            capture.endpoint_joined(good)
            sender.recv()  # the good endpoint's subscription: capture lives
            for i in range(100):
                sender.send(b"%d" % i)
            wait_until(lambda: capture.received().get(good.key) == 100, what="100 messages")
            capture.sync()
    finally:
        capture.close()
        spool.close()
        sender.close()
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 2, refusals
    assert sorted(os.listdir(tmp_path)) == ["spool"]
    reopened = Spool(spool.root, 1 << 30)
    assert set(reopened.snapshot()) == {good.key}
    reopened.close()
