"""Option ``metrics``: a query that captures on the driver serves its metrics and probes while
it runs, through a real Spark query and a real publisher."""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request

import pytest

from spark_zmq.protocols.zeroeq import Publisher
from support.common import wait_until
from support.metrics import probe, scrape

pytestmark = pytest.mark.spark
ECHO = "zeroeq::test::Echo"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def refused(url: str) -> bool:
    """Whether nothing listens at ``url`` any more (a reset: its process is closing)."""
    try:
        urllib.request.urlopen(f"{url}/healthz", timeout=5).close()
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    except (ConnectionResetError, http.client.RemoteDisconnected):
        return False
    return False


def test_a_query_capturing_on_the_driver_serves_its_metrics_while_it_runs(spark, tmp_path):
    publisher = Publisher("", announce=False)
    url = f"http://127.0.0.1:{free_port()}"
    query = (
        spark.readStream.format("zeroeq")
        .option("publishers", f"127.0.0.1:{publisher.port}")
        .option("spoolPath", str(tmp_path / "spool"))
        .option("metrics", url.removeprefix("http://"))
        .load()
        .writeStream.format("memory")
        .queryName("metered")
        .start()
    )
    try:
        publisher.wait_for_subscribers(timeout=60)
        for i in range(25):
            publisher.publish(ECHO, b"%d" % i)
        key = f"127.0.0.1:{publisher.port}"
        received = ("spark_zmq_messages_received_total", (("endpoint", key), ("format", "zeroeq")))
        wait_until(lambda: scrape(url).get(received) == 25, what="25 received in the metrics")
        samples = scrape(url)
        assert samples[("spark_zmq_endpoints", (("format", "zeroeq"), ("state", "live")))] == 1
        gaps = [v for (name, _), v in samples.items() if name == "spark_zmq_gap_rows_total"]
        assert gaps and sum(gaps) == 0
        assert probe(url, "/healthz") == (200, "ok: zeroeq: capture and discovery run\n")
        assert probe(url, "/readyz") == (200, "ok: capture runs, spool writable\n")
    finally:
        query.stop()
        publisher.close()
    wait_until(lambda: refused(url), timeout=30, what="the metrics port to close with the query")
