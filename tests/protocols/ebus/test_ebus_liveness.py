"""The heartbeat arithmetic of an EBUS connection, without sockets."""

from __future__ import annotations

import time

from spark_zmq.protocols.ebus.liveness import Liveness


def test_silence_pings_after_a_heartbeat_and_is_lost_after_liveness_heartbeats():
    liveness = Liveness(heartbeat=1.0, liveness=3)
    liveness.connected()
    now = time.monotonic()
    assert not liveness.ping_due(now) and liveness.lost(now) is None
    assert liveness.ping_due(now + 1.0), "a heartbeat of silence: PING"
    assert not liveness.ping_due(now + 1.5), "the next PING is a heartbeat later"
    assert liveness.lost(now + 2.9) is None
    silent = liveness.lost(now + 3.1)
    assert silent is not None and silent >= 3.0
    assert liveness.next_due() <= now + 3.0 + 0.1


def test_an_outage_ends_when_the_peer_is_heard_and_is_reported_once():
    liveness = Liveness(heartbeat=1.0, liveness=3)
    liveness.connected()
    assert liveness.heard() is False, "no outage: hearing the peer ends nothing"
    liveness.outage = True
    assert liveness.heard() is True
    assert liveness.heard() is False
    assert liveness.lost(time.monotonic()) is None, "hearing the peer restarts the count"
