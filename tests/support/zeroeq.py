"""ZeroEQ for the tests: queries that read and write the format, and a subscriber written from
the fact sheet, independent of the package's own code paths."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable

import zmq
from zeroconf import ServiceBrowser, ServiceStateChange

from spark_zmq.protocols.zeroeq import MEERKAT, PUBLISHER_SERVICE, Record, event_id
from support.common import wait_until
from support.queries import memory_query


def start_query(spark, tmp_path, name, trigger=None, **options):
    """A ``zeroeq`` query into the memory table ``name``, browsing loopback only."""
    options.setdefault("discoveryInterfaces", "127.0.0.1")
    return memory_query(spark, tmp_path, "zeroeq", name, trigger, **options)


def write_rows(folder, name, rows):
    """A JSON file of ``rows`` for a file stream to pick up."""
    with open(folder / f"{name}.json", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def start_writer(spark, tmp_path, inbox, trigger=None, **options):
    """A ``zeroeq`` writer of the JSON rows (event, event_id, payload) that land in ``inbox``."""
    stream = (
        spark.readStream.schema("event STRING, event_id STRING, payload STRING")
        .json(str(inbox))
        .writeStream.format("zeroeq")
    )
    options.setdefault("checkpointLocation", str(tmp_path / "checkpoint-writer"))
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream.trigger(**(trigger or {"processingTime": "500 milliseconds"})).start()


class WireSubscriber:
    """A plain ZeroEQ subscriber: browses ``_zeroeq_pub._tcp`` of one session, connects one SUB
    to each publisher's ``host:port`` instance name and subscribes with 16-byte ids."""

    def __init__(self, zeroconf, session: str, events: list[str]) -> None:
        self.session = session
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        self.socket.setsockopt(zmq.LINGER, 0)
        for name in events + [MEERKAT]:
            self.socket.setsockopt(zmq.SUBSCRIBE, event_id(name))
        self._found: set[str] = set()
        self.connected: set[str] = set()
        self._lock = threading.Lock()
        self.received: list[list[bytes]] = []
        self._browser = ServiceBrowser(zeroconf, PUBLISHER_SERVICE, handlers=[self._on_change])

    def _on_change(self, zeroconf, service_type, name, state_change) -> None:
        if state_change is ServiceStateChange.Removed:
            return
        info = zeroconf.get_service_info(service_type, name, timeout=3000)
        if info is None:
            return
        txt = {k.decode().lower(): (v or b"").decode() for k, v in info.properties.items()}
        if txt.get("session") == self.session:
            with self._lock:
                self._found.add(name[: -len(PUBLISHER_SERVICE) - 1])

    def receive(self, count: int, timeout: float = 60.0) -> list[list[bytes]]:
        """Receive until ``count`` messages in all, connecting to publishers as found."""
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            with self._lock:
                new = self._found - self.connected
            for instance in new:
                self.socket.connect(f"tcp://{instance}")
                self.connected.add(instance)
            if self.socket.poll(100):
                self.received.append(self.socket.recv_multipart())
        return self.received

    def close(self) -> None:
        self._browser.cancel()
        self.socket.close(0)


def announced(
    zeroconf, service: str, session: str, timeout: float = 60.0, including: Iterable[str] = ()
) -> dict:
    """{instance name: Record} of the ``service`` records of ``session`` that a browser sees,
    once there is at least one and every instance named in ``including`` is among them."""
    wanted = set(including)
    found = {}

    def on_change(zeroconf, service_type, name, state_change):
        info = zeroconf.get_service_info(service_type, name, timeout=3000)
        if info is not None:
            record = Record.parse(name, info.properties)
            if record.session == session:
                found[record.instance_name] = record

    browser = ServiceBrowser(zeroconf, service, handlers=[on_change])
    try:
        wait_until(
            lambda: found and wanted <= found.keys(),
            timeout=timeout,
            what=f"{service} records of {session}{' for ' if wanted else ''}{', '.join(wanted)}",
        )
    finally:
        browser.cancel()
    return found


def session_discovery(
    session: str,
    interfaces: tuple[str, ...] | None = ("127.0.0.1",),
    *,
    events: dict[bytes, str | None] | None = None,
    management_bind: str | None = None,
):
    """The reader's ZeroEQ discovery of ``session`` alone (no capture, no Spark), started by
    the test with a listener such as ``Joined``; ``events`` asked for (None: every event)."""
    from spark_zmq.protocols.zeroeq.discovery import ZeroEQDiscovery
    from support.common import MemoryState

    return ZeroEQDiscovery(
        session=session,
        events=events or {},
        interfaces=interfaces,
        static=(),
        compatible_only=False,
        management_bind=management_bind,
        application="test",
        state=MemoryState(),
    )


class Joined:
    """A discovery listener: the keys of the endpoints that joined, in order, and when each
    first joined (wall clock)."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.at: dict[str, float] = {}

    def endpoint_joined(self, endpoint) -> None:
        self.keys.append(endpoint.key)
        self.at.setdefault(endpoint.key, time.time())

    def endpoint_left(self, key: str) -> None:
        pass
