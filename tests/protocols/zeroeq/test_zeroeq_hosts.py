"""Two hosts: every address a ZeroEQ reader or writer announces is one that the other host
reaches. The other host is a network namespace of its own joined to the test's by a veth pair
(``support.hosts``); there, plain python-zeroconf and pyzmq (``zeroeq_other_host.py``, written
from the fact sheet) browse, ask the vocabulary and management servers, and subscribe, and
Debian's avahi-daemon (the responder the shipped C++ library browses through) resolves what it
hears on its link. The test's namespace has ``lo`` and its end of the pair: a reader browsing
every interface announces on both, and what goes on the pair must name the pair's address."""

from __future__ import annotations

import asyncio
import json

import pytest
from avahi_daemon import Avahi

from spark_zmq.cli.discover import Found
from spark_zmq.cli.zeroeq.manage import management_address
from spark_zmq.protocols.zeroeq import (
    PUBLISHER_SERVICE,
    SUBSCRIBER_SERVICE,
    Publisher,
    event_id,
    event_id_text,
    make_zeroconf,
    manage,
    parse_address,
)
from spark_zmq.protocols.zeroeq.discovery import ZeroEQDiscovery
from spark_zmq.protocols.zeroeq.management import REPLY
from support.common import wait_until
from support.hosts import OtherHost
from support.queries import wait_for_rows
from support.sequences import ECHO
from support.zeroeq import announced, session_discovery, start_query, start_writer, write_rows

#: the test's end of the pair and the other host's (name, address)
LOCAL, REMOTE = ("szmqzh0", "10.83.0.1"), ("szmqzh1", "10.83.0.2")
SCRIPT = "protocols/zeroeq/zeroeq_other_host.py"


@pytest.fixture(scope="module")
def other_host():
    host = OtherHost(LOCAL, REMOTE)
    yield host
    host.close()


@pytest.fixture(scope="module")
def other_avahi(other_host, tmp_path_factory):
    """Debian's avahi-daemon on the other host's end of the pair (its tools run there too)."""
    avahi = Avahi(
        tmp_path_factory.mktemp("avahi-other-host"), (REMOTE[0],), tuple(other_host.command())
    )
    yield avahi
    avahi.stop()


def records_seen(host: OtherHost, service: str) -> list[dict]:
    """What the other host's python-zeroconf received of each ``service`` instance within 2 s:
    every TXT, SRV and A record of it (``zeroeq_other_host.py browse``)."""
    return [json.loads(line) for line in host.python(SCRIPT, "browse", service, "2").splitlines()]


def seen_from(host: OtherHost, service: str, instance: str, timeout: float = 30) -> dict:
    """``records_seen`` of ``instance``, once the other host has its TXT and A records."""

    def seen() -> dict | None:
        for record in records_seen(host, service):
            if record["name"] == instance and record["txt"] and record["addresses"]:
                return record
        return None

    return wait_until(seen, timeout=timeout, what=f"{instance} seen from the other host")


def resolved_by_avahi(avahi: Avahi, service: str, instance: str) -> list:
    """Every line in which the other host's avahi resolves ``instance``, once it does."""
    avahi_service = service.removesuffix(".local.")
    avahi.wait_for_instance(avahi_service, instance)
    return [r for r in avahi.browse(avahi_service) if r.name == instance]


def assert_only_the_links_address(seen: dict, ports: dict[str, int | None]) -> None:
    """Every address in what the other host saw is the test's end of the pair; ``ports``
    names the TXT keys that hold addresses and the port each must have (None: any)."""
    assert seen["addresses"] == [LOCAL[1]], seen
    assert "127.0.0.1" not in json.dumps(seen), seen
    for txt in seen["txt"]:
        for key, port in ports.items():
            assert parse_address(txt[key]) == (LOCAL[1], port or port_of(txt[key])), (key, seen)


def discovery(management_bind: str | None) -> ZeroEQDiscovery:
    """A reader's discovery as ``format("zeroeq")`` makes it with the default
    ``discoveryInterfaces`` (every interface)."""
    return session_discovery(
        "two-hosts", None, events={event_id(ECHO): ECHO}, management_bind=management_bind
    )


def port_of(address: str) -> int:
    return parse_address(address)[1]


def test_a_reader_is_announced_to_another_host_at_its_address_there(other_host, other_avahi):
    """The reader's subscriber record on the pair names the pair's address (its A record and
    vocabulary_request; it was 127.0.0.1 on every link), the other host gets the vocabulary
    from that address, and the management port, on loopback by default, is named on loopback
    only: there a local client reaches it."""
    reader = discovery("tcp://127.0.0.1:*")
    reader.start(Found())
    try:
        assert reader.subscriber is not None and reader.management is not None
        name = reader.instance_name
        vocabulary_port = port_of(reader.subscriber.vocabulary.address)
        seen = seen_from(other_host, SUBSCRIBER_SERVICE, name)
        assert_only_the_links_address(seen, {"vocabulary_request": vocabulary_port})
        assert not any("management" in txt for txt in seen["txt"]), seen
        [txt] = seen["txt"]
        answer = json.loads(other_host.python(SCRIPT, "vocabulary", txt["vocabulary_request"]))
        assert answer["role"] == "subscriber"
        assert answer["events"] == [
            {"id": event_id(ECHO).hex(), "text": event_id_text(event_id(ECHO)), "name": ECHO}
        ]
        [avahi_line] = resolved_by_avahi(other_avahi, SUBSCRIBER_SERVICE, name)
        assert (avahi_line.interface, avahi_line.address) == (REMOTE[0], LOCAL[1])
        assert avahi_line.txt["vocabulary_request"] == txt["vocabulary_request"]
        assert "management" not in avahi_line.txt
        # on loopback, the record names the management port, which a local client reaches
        # (zeroeq manage finds it by the reader's name, browsing loopback)
        address = management_address(name, ("127.0.0.1",), 10)
        assert address == reader.management.address
        assert manage(address, "list") == {"subscriptions": []}
    finally:
        reader.close()


def test_a_management_port_on_every_interface_is_announced_at_each_address(other_host):
    """``managementUri=tcp://*:*``: the other host is told the pair's address of the port (not
    0.0.0.0, not 127.0.0.1) and a List request from there is answered."""
    reader = discovery("tcp://*:*")
    reader.start(Found())
    try:
        assert reader.management is not None and reader.subscriber is not None
        assert reader.management.address.startswith("tcp://0.0.0.0:")
        ports = {
            "vocabulary_request": port_of(reader.subscriber.vocabulary.address),
            "management": port_of(reader.management.address),
        }
        seen = seen_from(other_host, SUBSCRIBER_SERVICE, reader.instance_name)
        assert_only_the_links_address(seen, ports)
        reply = json.loads(
            other_host.python(
                SCRIPT, "request", seen["txt"][0]["management"], "zeroeq::management::List"
            )
        )
    finally:
        reader.close()
    assert bytes.fromhex(reply["type"]) == REPLY
    assert json.loads(reply["payload"]) == {"subscriptions": []}


def test_a_publisher_bound_to_every_interface_is_announced_and_reached_at_each_address(
    other_host, other_avahi
):
    """A publisher bound to ``*`` was announced as ``HOSTNAME:PORT``, which the other host has
    no resolver for. Now its record on the pair is ``10.83.0.1:PORT`` (A record and
    vocabulary_request alike); the other host subscribes at the instance name as a C++
    subscriber does and receives what it sends, and avahi there resolves the name. On loopback
    it goes by the same name, so a process here that browses both finds one publisher."""
    publisher = Publisher("two-hosts", host="*", interfaces=None, registered={event_id(ECHO): ECHO})
    subscriber = None
    try:
        name = f"{LOCAL[1]}:{publisher.port}"
        assert publisher.instance_names == {"lo": name, LOCAL[0]: name}
        assert publisher.instance_name == name
        assert publisher.vocabulary is not None
        seen = seen_from(other_host, PUBLISHER_SERVICE, name)
        assert_only_the_links_address(
            seen, {"vocabulary_request": port_of(publisher.vocabulary.address)}
        )
        assert seen["srv"][0][0] == publisher.port
        [txt] = seen["txt"]
        vocabulary = json.loads(other_host.python(SCRIPT, "vocabulary", txt["vocabulary_request"]))
        assert [e["name"] for e in vocabulary["events"]] == [ECHO]
        [avahi_line] = resolved_by_avahi(other_avahi, PUBLISHER_SERVICE, name)
        assert (avahi_line.address, avahi_line.port) == (LOCAL[1], publisher.port)
        subscriber = other_host.start_python(SCRIPT, "subscribe", f"tcp://{name}", ECHO, "3")
        publisher.wait_for_subscribers(1, timeout=60)
        for i in range(3):
            publisher.publish(ECHO, b"remote/%d" % i)
        out, err = subscriber.communicate(timeout=60)
    finally:
        if subscriber is not None and subscriber.poll() is None:
            subscriber.kill()
        publisher.close()
    assert subscriber.returncode == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [
        [event_id(ECHO).hex(), (b"remote/%d" % i).hex()] for i in range(3)
    ]


def test_a_loopback_responder_sends_no_unicast_reply_off_its_link(monkeypatch):
    """RFC 6762 section 11's source check, on what we send: the loopback link's responder
    answers a query asking for a unicast reply (QU) from its own link, and drops the reply to
    a host of another link, which would otherwise get loopback's record (127.0.0.1)."""
    import zeroconf._core
    from zeroconf import DNSOutgoing
    from zeroconf.const import _FLAGS_QR_RESPONSE

    sent: list[str | None] = []
    real = zeroconf._core.async_send_with_transport

    def recording(log_debug, transport, packet, packet_num, out, addr, port, *rest):
        sent.append(addr)
        real(log_debug, transport, packet, packet_num, out, addr, port, *rest)

    monkeypatch.setattr(zeroconf._core, "async_send_with_transport", recording)
    responder = make_zeroconf(("127.0.0.1",))
    try:
        assert responder.link is not None and responder.link.loopback
        for addr in ("10.83.0.2", "127.0.0.1"):
            out = DNSOutgoing(_FLAGS_QR_RESPONSE)
            assert responder.loop is not None
            asyncio.run_coroutine_threadsafe(_send(responder, out, addr), responder.loop).result(5)
    finally:
        responder.close()
    assert sent == ["127.0.0.1"]


async def _send(responder, out, addr: str) -> None:
    responder.async_send(out, addr, 5353)


@pytest.mark.spark
def test_a_spark_reader_and_writer_on_every_interface_are_reached_from_another_host(
    spark, tmp_path, other_host
):
    """A reader query with the default ``discoveryInterfaces`` (every interface) and a writer
    query with ``bindInterface=*``: from the other host, the reader's vocabulary server answers
    at the address its record names, and a subscriber that connects to the writer's instance
    name receives the rows; the reader here reads them too."""
    inbox = tmp_path / "in"
    inbox.mkdir()
    session = "two-hosts-spark"
    reader = start_query(spark, tmp_path, "two_hosts", session=session, discoveryInterfaces="all")
    writer = None
    subscriber = None
    try:
        zeroconf = make_zeroconf(("127.0.0.1",))
        try:
            [record] = announced(zeroconf, SUBSCRIBER_SERVICE, session).values()
        finally:
            zeroconf.close()
        seen = seen_from(other_host, SUBSCRIBER_SERVICE, record.instance_name)
        assert_only_the_links_address(seen, {"vocabulary_request": None})
        answer = json.loads(
            other_host.python(SCRIPT, "vocabulary", seen["txt"][0]["vocabulary_request"])
        )
        assert answer["role"] == "subscriber"

        write_rows(inbox, "1", [{"event": ECHO, "payload": f"w/{i}"} for i in range(5)])
        writer = start_writer(
            spark,
            tmp_path,
            inbox,
            session=session,
            bindInterface="*",
            waitForSubscribers="90",
            minSubscribers="2",
        )
        publisher = wait_until(
            lambda: [
                record
                for record in records_seen(other_host, PUBLISHER_SERVICE)
                if any(txt.get("session") == session for txt in record["txt"])
            ],
            timeout=90,
            what="the writer's record seen from the other host",
        )[0]
        assert publisher["name"].startswith(f"{LOCAL[1]}:"), publisher
        assert_only_the_links_address(publisher, {"vocabulary_request": None})
        subscriber = other_host.start_python(
            SCRIPT, "subscribe", f"tcp://{publisher['name']}", ECHO, "5"
        )
        out, err = subscriber.communicate(timeout=120)
        rows = wait_for_rows(spark, "two_hosts", 5)
    finally:
        if subscriber is not None and subscriber.poll() is None:
            subscriber.kill()
        if writer is not None:
            writer.stop()
        reader.stop()
    assert subscriber.returncode == 0, err
    assert [bytes.fromhex(json.loads(line)[1]) for line in out.splitlines()] == [
        b"w/%d" % i for i in range(5)
    ]
    assert sorted(bytes(r.payload) for r in rows) == [b"w/%d" % i for i in range(5)]
    assert {r.publisher for r in rows} == {publisher["name"]}
