"""The holder of a partition on an executor (capture=executors), run in a thread against a real
publisher and a real spool, with the driver's two files written by hand: the assignment (which
endpoints are live) and the commits (what Spark has committed)."""

from __future__ import annotations

import itertools
import threading
import time

import zmq

from spark_zmq.placement.executors.holder import TICK, Holder
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.contract import ASSIGNMENT, COMMITS
from spark_zmq.spool.layout import JsonState, load_index
from spark_zmq.stream_settings import CaptureSettings
from support.common import wait_until

SETTINGS = CaptureSettings(
    format_name="zeroeq",
    max_spool_bytes=64 << 20,
    max_message_bytes=1 << 20,
    flush_interval=0.05,
    lease_timeout=5.0,
    idle_timeout=120.0,
    drop_on_write_error=False,
    receive_hwm=1000,
)


def test_a_holder_whose_endpoint_left_stays_until_the_query_committed_what_it_captured(tmp_path):
    """Letting go at once (as before) left the partition's data in the spool for ever, to be
    read again by a restarted query or a returning endpoint."""
    spool = tmp_path / "spool"
    spool.mkdir()
    publisher = zmq.Context.instance().socket(zmq.PUB)
    publisher.setsockopt(zmq.LINGER, 0)
    publisher.bind("tcp://127.0.0.1:*")
    endpoint = Endpoint("pub-1", publisher.getsockopt_string(zmq.LAST_ENDPOINT))
    assignment = JsonState(str(spool / f"{ASSIGNMENT}.json"))
    commits = JsonState(str(spool / f"{COMMITS}.json"))
    beats = itertools.count()

    def assign(*endpoints: Endpoint) -> None:
        assignment.save(
            {
                "spool_id": "test",
                "beat": next(beats),
                "format": "zeroeq",
                "endpoints": {e.key: e.to_json() for e in endpoints},
            }
        )

    assign(endpoint)
    holder = Holder(str(spool), endpoint.key, SETTINGS)
    holder.claim(0)
    stopped: list[str] = []
    thread = threading.Thread(target=lambda: stopped.append(holder.run()), daemon=True)
    thread.start()
    try:

        def captured() -> int:
            publisher.send(b"x")  # until the subscription has arrived, and then some
            index = load_index(str(spool), endpoint.key)
            return index.end if index and index.end >= 5 else 0

        end = wait_until(captured, timeout=30, what="messages in the spool")
        assign()  # the endpoint left
        wait_until(
            lambda: load_index(str(spool), endpoint.key).retired,
            timeout=30,
            what="the partition retired",
        )
        end = load_index(str(spool), endpoint.key).end
        time.sleep(4 * TICK)
        assert thread.is_alive(), f"the holder let go before its data was committed: {stopped}"
        assert load_index(str(spool), endpoint.key).segments, "uncommitted data was dropped"
        commits.save({endpoint.key: end})
        thread.join(30)
        assert stopped == ["its endpoint left, and the query committed all it captured"]
        index = load_index(str(spool), endpoint.key)
        assert index.committed == end, "the holder recorded the commit in the index"
        assert index.start == 0 and sum(s.count for s in index.segments) == end, (
            "what was committed stays, for retention to delete"
        )
    finally:
        holder.close(stopped[0] if stopped else "test ended")
        publisher.close()
