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


def read_endpoints(url: str) -> list[str]:
    """The endpoints the metrics at ``url`` count messages of."""
    try:
        samples = scrape(url)
    except OSError:  # not serving yet
        return []
    return [
        dict(labels)["endpoint"]
        for (name, labels), _ in samples.items()
        if name == "spark_zmq_messages_received_total"
    ]


def test_a_query_capturing_on_the_driver_serves_its_metrics_while_it_runs(spark, tmp_path):
    """Two publishers and maxEndpoints=1: one is read (25 messages), the other waits."""
    publisher, other = Publisher("", announce=False), Publisher("", announce=False)
    url = f"http://127.0.0.1:{free_port()}"
    query = (
        spark.readStream.format("zeroeq")
        .option("publishers", f"127.0.0.1:{publisher.port},127.0.0.1:{other.port}")
        .option("maxEndpoints", "1")
        .option("spoolPath", str(tmp_path / "spool"))
        .option("metrics", url.removeprefix("http://"))
        .load()
        .writeStream.format("memory")
        .queryName("metered")
        .start()
    )
    try:
        read = wait_until(lambda: read_endpoints(url), what="an endpoint read in the metrics")
        if read == [f"127.0.0.1:{other.port}"]:
            publisher, other = other, publisher
        publisher.wait_for_subscribers(timeout=60)
        for i in range(25):
            publisher.publish(ECHO, b"%d" % i)
        key = f"127.0.0.1:{publisher.port}"
        fmt = ("format", "zeroeq")
        received = ("spark_zmq_messages_received_total", (("endpoint", key), fmt))
        written = ("spark_zmq_received_bytes_total", (("endpoint", key), fmt))
        sent = sum(16 + len(b"%d" % i) for i in range(25))  # an event's 16 bytes, its payload
        wait_until(  # bytes are counted when they are written: a flush later
            lambda: (s := scrape(url)).get(received) == 25 and s.get(written) == sent,
            what=f"25 received, {sent} bytes written, in the metrics",
        )
        samples = scrape(url)
        states = {
            labels[1][1]: value
            for (name, labels), value in samples.items()
            if name == "spark_zmq_endpoints"
        }
        assert states == {"live": 1, "connecting": 0, "waiting": 1, "refused": 0, "retired": 0}
        assert samples[("spark_zmq_discovery_events_total", (("event", "joined"), fmt))] == 1
        gaps = [v for (name, _), v in samples.items() if name == "spark_zmq_gap_rows_total"]
        assert gaps and sum(gaps) == 0
        assert probe(url, "/healthz") == (200, "ok: zeroeq: capture and discovery run\n")
        assert probe(url, "/readyz") == (200, "ok: capture runs, spool writable\n")
    finally:
        query.stop()
        publisher.close()
        other.close()
    wait_until(lambda: refused(url), timeout=30, what="the metrics port to close with the query")


def test_a_server_on_an_ipv6_address_names_a_url_that_reaches_it():
    """The URL a monitoring server logs and names (the service's start line, a holder's
    record) puts an IPv6 literal in brackets, so that a scraper can use it as it is."""
    from prometheus_client import CollectorRegistry

    from spark_zmq.monitoring.health import Health
    from spark_zmq.monitoring.server import MonitoringServer

    def fine() -> Health:
        return Health(True, "fine")

    server = MonitoringServer("::1", 0, CollectorRegistry(), fine, fine)
    server.start()
    try:
        assert server.url == f"http://[::1]:{server.address[1]}"
        assert probe(server.url, "/healthz") == (200, "ok: fine\n")
    finally:
        server.close()
