"""ZeroEQ discovery against avahi, the mDNS responder of the shipped C++ library (through
Servus): our announcements must be what avahi accepts and resolves, and our reader must find
what avahi announces. A C++ subscriber finds publishers by browsing through avahi and connects
to ``tcp://<instance name>`` (the fact sheet); ``AvahiSubscriber`` does exactly that."""

from __future__ import annotations

import subprocess
import time
from contextlib import contextmanager

import pytest
import zmq
from avahi_daemon import Avahi, Resolved

from spark_zmq.protocols.zeroeq import MEERKAT, PUBLISHER_SERVICE, Publisher, event_id
from support.queries import wait_for_rows
from support.sequences import ECHO
from support.zeroeq import start_query, start_writer, write_rows

SERVICE = PUBLISHER_SERVICE.removesuffix(".local.")  # avahi's spelling
#: a veth pair inside the test's own namespace stands for a LAN interface
LAN_INTERFACE, LAN_PEER, LAN_ADDRESS = "szmqav0", "szmqav1", "10.213.7.1"
AVAHI_FAULTS = ("Failed to split service name", "Received goodbye record for one of our records")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


@pytest.fixture(scope="module")
def avahi(tmp_path_factory):
    ip("link", "add", LAN_INTERFACE, "type", "veth", "peer", "name", LAN_PEER)
    ip("addr", "add", f"{LAN_ADDRESS}/24", "dev", LAN_INTERFACE)
    ip("link", "set", LAN_PEER, "up")
    ip("link", "set", LAN_INTERFACE, "up")
    daemon = None
    try:
        daemon = Avahi(tmp_path_factory.mktemp("avahi"), ("lo", LAN_INTERFACE))
        yield daemon
    finally:
        if daemon is not None:
            daemon.stop()
        ip("link", "del", LAN_INTERFACE)


@pytest.fixture(autouse=True)
def no_avahi_faults(avahi):
    """Whatever a test does, avahi must not reject our records nor see goodbyes for its own."""
    before = len(avahi.log())
    yield
    new = avahi.log()[before:]
    assert not [line for line in new.splitlines() if any(f in line for f in AVAHI_FAULTS)], new


class AvahiSubscriber:
    """A subscriber as the C++ library's: finds publishers of ``session`` through avahi and
    connects one SUB to ``tcp://<instance name>`` of each, subscribed to ``events`` and
    Meerkat."""

    def __init__(self, avahi: Avahi, session: str, events: list[str]) -> None:
        self.avahi, self.session = avahi, session
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        for name in events + [MEERKAT]:
            self.socket.setsockopt(zmq.SUBSCRIBE, event_id(name))
        self.connected: set[str] = set()

    def connect_found(self) -> list[Resolved]:
        found = [r for r in self.avahi.browse(SERVICE) if r.txt.get("Session") == self.session]
        for record in found:
            if record.name not in self.connected:
                self.socket.connect(f"tcp://{record.name}")
                self.connected.add(record.name)
        return found

    def receive(self, count: int, timeout: float = 60.0) -> list[list[bytes]]:
        received: list[list[bytes]] = []
        deadline = time.monotonic() + timeout
        next_browse = 0.0
        while len(received) < count and time.monotonic() < deadline:
            if time.monotonic() >= next_browse:
                self.connect_found()
                next_browse = time.monotonic() + 2
            if self.socket.poll(100):
                received.append(self.socket.recv_multipart())
        return received

    def close(self) -> None:
        self.socket.close(0)


@contextmanager
def publisher_on(host: str, session: str):
    publisher = Publisher(session, host=host, interfaces=(host,))
    try:
        yield publisher
    finally:
        publisher.close()


@pytest.mark.parametrize("host", ["127.0.0.1", LAN_ADDRESS], ids=["loopback", "lan"])
def test_a_cxx_style_subscriber_finds_our_publisher_by_session(avahi, host):
    session = f"avahi-{host}"
    subscriber = AvahiSubscriber(avahi, session, [ECHO])
    try:
        with publisher_on(host, session) as publisher:
            record = avahi.wait_for_instance(SERVICE, publisher.instance_name)
            assert record.name == f"{host}:{publisher.port}"  # one label, dots included
            assert record.port == publisher.port and record.address == host
            assert record.txt["Type"] == "ZeroEQ" and record.txt["Session"] == session
            assert not record.host.startswith(avahi.hostname + ".")  # a host name of our own
            subscriber.connect_found()
            publisher.wait_for_subscribers(1, timeout=30)
            for i in range(3):
                publisher.publish(ECHO, b"%d" % i)
            publisher.publish(ECHO)
            got = subscriber.receive(4)
            name = publisher.instance_name
        # withdrawn: avahi forgets it, through goodbyes for our records only (see the fixture)
        deadline = time.monotonic() + 20
        while any(r.name == name for r in avahi.browse(SERVICE)):
            assert time.monotonic() < deadline, "avahi still lists a closed publisher"
            time.sleep(0.5)
    finally:
        subscriber.close()
    assert got == [
        [event_id(ECHO), b"0"],
        [event_id(ECHO), b"1"],
        [event_id(ECHO), b"2"],
        [event_id(ECHO)],
    ]


@pytest.mark.spark
def test_the_spark_writer_with_default_options_reaches_a_cxx_style_subscriber(
    spark, tmp_path, avahi, send_core
):
    inbox = tmp_path / "in"
    inbox.mkdir()
    session = f"avahi-writer-{send_core}"
    subscriber = AvahiSubscriber(avahi, session, [ECHO])
    write_rows(inbox, "1", [{"event": ECHO, "payload": f"w/{i}"} for i in range(5)])
    writer = start_writer(
        spark, tmp_path, inbox, session=session, waitForSubscribers="60", sendCore=send_core
    )
    try:
        got = subscriber.receive(5, timeout=90)
    finally:
        writer.stop()
        subscriber.close()
    assert got == [[event_id(ECHO), b"w/%d" % i] for i in range(5)]
    assert all(name.startswith("127.0.0.1:") for name in subscriber.connected)


@pytest.mark.spark
def test_our_reader_finds_a_publisher_that_avahi_announces(spark, tmp_path, avahi):
    """The record as the C++ library announces it through avahi (Servus): instance name
    ``127.0.0.1:<port>`` as one label, the library's TXT keys, SRV target the host's name."""
    socket = zmq.Context.instance().socket(zmq.XPUB)
    socket.setsockopt(zmq.LINGER, 0)
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    avahi.publish(
        f"127.0.0.1:{port}",
        SERVICE,
        port,
        {
            "Type": "ZeroEQ",
            "Instance": "1:2",
            "User": "cxx",
            "Application": "cxxpub",
            "Session": "avahi-reader",
        },
    )
    query = start_query(spark, tmp_path, "from_avahi", session="avahi-reader")
    try:
        deadline = time.monotonic() + 60
        subscriptions: set[bytes] = set()
        while event_id(MEERKAT) not in subscriptions:  # the reader has connected
            assert time.monotonic() < deadline, "the reader never subscribed"
            if socket.poll(200):
                subscriptions.add(socket.recv()[1:])
        for i in range(5):
            socket.send_multipart([event_id(ECHO), b"cxx/%d" % i])
        rows = wait_for_rows(spark, "from_avahi", 5)
        query.processAllAvailable()
        rows = spark.sql("select * from from_avahi").collect()
    finally:
        query.stop()
        socket.close(0)
    assert sorted(bytes(r.payload) for r in rows) == [b"cxx/%d" % i for i in range(5)]
    assert {r.partition for r in rows} == {f"127.0.0.1:{port}"}
    assert {(r.application, r.user, r.session) for r in rows} == {("cxxpub", "cxx", "avahi-reader")}
