"""Goby3 without Spark: identifiers and prefixes, the Manager's messages byte for byte against
hand-built protobuf, the stand-in gobyd against a client written from the fact sheet, the hold
handshake, decoding and encoding of rows, and the command line."""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import tracemalloc

import pyarrow as pa
import pytest
import zmq

from spark_zmq.options import OptionError, parse_options
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.protocols.goby import (
    Goby,
    GobyDaemon,
    HoldTimeout,
    IdentifierError,
    ManagerAddress,
    ManagerError,
    ManagerUnreachable,
    identifier,
    request_router,
    split_message,
)
from spark_zmq.protocols.goby.discovery import ManagerDiscovery
from spark_zmq.protocols.goby.messages import manager_messages
from spark_zmq.protocols.goby.options import HOLD_TIMEOUT, SUBSCRIBE, manager_address
from spark_zmq.protocols.goby.payloads import descriptor_set
from spark_zmq.protocols.goby.publisher import GobyPublisher
from spark_zmq.protocols.goby.wire import subscription_prefix
from spark_zmq.spool.index import Source
from spark_zmq.stream_options import READER_OPTIONS, WRITER_OPTIONS
from support.common import wait_until
from support.goby import (
    BSON_DEPTH_5,
    GOBY_IDENTIFIER,
    HOLD_RESPONSE,
    NAV_STATUS,
    RawClient,
    ask_raw,
    write_descriptor_set,
)

ManagerRequest = manager_messages().ManagerRequest
ManagerResponse = manager_messages().ManagerResponse
Socket = manager_messages().Socket

#: ManagerRequest{PROVIDE_PUB_SUB_SOCKETS, "reader", 1234}, written out from the proto2 encoding
REQUEST_SOCKETS_READER_1234 = bytes.fromhex("0801120672656164657218d209")


# -- identifiers and prefixes ----------------------------------------------------------------


def test_identifier_has_the_five_parts_a_cpp_client_parses():
    assert (
        identifier("nav", "PROTOBUF", "goby.Status", 1234, "7f3a")
        == b"/nav/PROTOBUF/goby.Status/1234/7f3a/\0"
    )
    assert identifier("nav", 1, "goby.Status", 7, "a") == b"/nav/PROTOBUF/goby.Status/7/a/\0"
    assert identifier("raw", 42, "T", 7, "a") == b"/raw/42/T/7/a/\0"
    with pytest.raises(IdentifierError, match="unknown scheme 'BOGUS'"):
        identifier("g", "BOGUS", "T", 1, "a")


@pytest.mark.parametrize("scheme", [3, "3", "CAPTN_PROTO", 4, "4", "MSGPACK"])
def test_schemes_3_and_4_go_on_the_wire_as_numbers_as_goby3_writes_them(scheme):
    """goby3 3.x (every release since 3.0.0) writes schemes 3 and 4 as numbers; a 3.x
    subscriber aborts (stoi) on a name in the scheme part. The pre-release names are taken
    from users but never written."""
    number = 3 if str(scheme) in ("3", "CAPTN_PROTO") else 4
    message = identifier("raw3", scheme, "RawString", 7, "a")
    assert message == b"/raw3/%d/RawString/7/a/\0" % number
    assert int(GOBY_IDENTIFIER.match(message).group(2)) == number  # what stoi reads


@pytest.mark.parametrize("group, type_name", [("a/b", "T"), ("g", "x/y")])
def test_a_slash_in_a_group_or_type_is_refused_not_written(group, type_name):
    """goby3 writes a '/' in a name unescaped, which no 3.x peer reads back (byte 0x1a is no
    escape in any release): refuse rather than send bytes nobody can read."""
    with pytest.raises(IdentifierError, match=r"contains '/'.*no 3\.x peer reads"):
        identifier(group, "CSTR", type_name, 7, "a")


def test_split_message_reads_the_parts_and_the_payload():
    ident, payload = split_message(b"/ab/JSON/nlohmann::json/99/ff01/\0\x01\x00rest")
    assert (
        ident.group,
        ident.scheme,
        ident.scheme_id,
        ident.type,
        ident.process,
        ident.thread,
    ) == ("ab", "JSON", 7, "nlohmann::json", 99, "ff01")
    assert payload == b"\x01\x00rest"  # split at the first NUL only
    ident, _ = split_message(b"/g/5/T/1/a/\0")
    assert (ident.scheme, ident.scheme_id) == ("CXX_OBJECT", 5)
    ident, _ = split_message(b"/g/99/T/1/a/\0")
    assert (ident.scheme, ident.scheme_id) == ("99", 99)
    ident, _ = split_message(b"/g/CSTR/old/style/type/1/a/\0")  # surplus: not a scheme
    assert (ident.group, ident.type) == ("g", "old/style/type")
    ident, _ = split_message(b"/a\x1ab/CSTR/CSTR/1/a/\0")  # 0x1a: an ordinary byte
    assert ident.group == "a\x1ab"


def test_split_message_reads_what_goby3_writes_for_a_group_with_a_slash():
    """goby3 3.1.5a writes group ``a/b`` unescaped: the parts from the right still hold a
    valid scheme, so the group takes the surplus."""
    ident, _ = split_message(b"/a/b/CSTR/CSTR/12/ff/\0x\0")
    assert (ident.group, ident.scheme, ident.type, ident.process) == ("a/b", "CSTR", "CSTR", 12)


@pytest.mark.parametrize(
    "wire, number", [(b"3", 3), (b"CAPTN_PROTO", 3), (b"4", 4), (b"MSGPACK", 4)]
)
def test_schemes_3_and_4_are_read_in_both_spellings_and_shown_as_3x_writes_them(wire, number):
    ident, _ = split_message(b"/raw3/" + wire + b"/RawString/7/a/\0x")
    assert (ident.scheme, ident.scheme_id) == (str(number), number)


@pytest.mark.parametrize(
    "message, fault",
    [
        (b"/g/CSTR/CSTR/1/a/", "no NUL"),
        (b"/g/CSTR/CSTR/1/\0x", "has 4 parts; expected five"),
        (b"/g/CSTR/CSTR/12x/a/\0x", "process id '12x' is not a decimal"),
        (b"/g/CSTR/CSTR/99999999999/a/\0x", "process id"),
        (b"g/CSTR/CSTR/1/a\0x", "does not start and end with '/'"),
        (b"/g/CSTR/\xff/1/a/\0x", "not UTF-8"),
    ],
)
def test_split_message_names_what_is_malformed(message, fault):
    with pytest.raises(IdentifierError, match=fault):
        split_message(message)


def test_subscription_prefixes_are_completed_so_foo_never_matches_foobar():
    assert subscription_prefix("/") == b"/"
    assert subscription_prefix("Foo") == b"/Foo/"
    assert subscription_prefix("/nav/1") == b"/nav/PROTOBUF/"  # numbers as Goby writes
    assert subscription_prefix("/raw3/3/") == b"/raw3/3/"  # 3 and 4 stay numbers
    assert subscription_prefix("/raw3/CAPTN_PROTO/") == b"/raw3/3/"
    assert subscription_prefix("/raw4/MSGPACK/T") == b"/raw4/4/T/"
    assert subscription_prefix("/nav/PROTOBUF/goby.Status/") == b"/nav/PROTOBUF/goby.Status/"
    foo = subscription_prefix("Foo")
    assert identifier("Foo", "CSTR", "CSTR", 1, "a").startswith(foo)
    assert not identifier("FooBar", "CSTR", "CSTR", 1, "a").startswith(foo)
    for bad, fault in (
        ("//x", "empty part"),
        ("/a/CSTR/T/1/2/3", "at most five"),
        ("/a/BOGUS/", "unknown scheme"),
    ):
        with pytest.raises(IdentifierError, match=fault):
            subscription_prefix(bad)


def goby_options(raw: dict, writer: bool = False):
    protocol = Goby()
    specs = (
        WRITER_OPTIONS + protocol.writer_options
        if writer
        else READER_OPTIONS + protocol.reader_options
    )
    return parse_options("goby", specs, raw)


def goby_settings(raw: dict, writer: bool = False):
    """The format's settings of options ``raw``, as a query makes them."""
    protocol, options = Goby(), goby_options(raw, writer)
    return protocol.write_settings(options) if writer else protocol.read_settings(options)


def test_options_choose_the_managers_address_and_reject_bad_values():
    assert (
        manager_address(goby_options({})).endpoint
        == "ipc:///tmp/goby_default_goby_platform.manager"
    )
    assert (
        manager_address(goby_options({"platform": "auv"})).endpoint == "ipc:///tmp/goby_auv.manager"
    )
    assert (
        manager_address(goby_options({"socketName": "/run/g"})).endpoint == "ipc:///run/g.manager"
    )
    assert (
        manager_address(goby_options({"managerPort": "11150"})).endpoint == "tcp://127.0.0.1:11150"
    )
    assert (
        manager_address(goby_options({"managerHost": "10.0.0.2"})).endpoint
        == "tcp://10.0.0.2:11144"
    )
    with pytest.raises(OptionError, match=r"platform .IPC. and managerPort .TCP."):
        manager_address(goby_options({"platform": "x", "managerPort": "1"}))
    assert goby_options({"subscribe": "Foo, /nav/PROTOBUF"}).get(SUBSCRIBE) == (
        b"/Foo/",
        b"/nav/PROTOBUF/",
    )
    with pytest.raises(OptionError, match="'subscribe' must be comma-separated identifier"):
        goby_options({"subscribe": "Foo,/Foo/"})
    with pytest.raises(OptionError, match="'managerTimeout' must be a positive number"):
        goby_options({"managerTimeout": "0"})
    with pytest.raises(OptionError, match=r"protobufDescriptorSet.*cannot read /nonexistent"):
        goby_settings({"protobufDescriptorSet": "/nonexistent.pb"})
    assert goby_options({"holdTimeout": "0"}, writer=True).get(HOLD_TIMEOUT) is None


# -- the Manager's messages, byte for byte -----------------------------------------------------


def test_manager_request_bytes_match_the_proto2_encoding():
    request = ManagerRequest(request=1, client_name="reader", client_pid=1234)
    assert request.SerializeToString() == REQUEST_SOCKETS_READER_1234
    assert not request.ready  # [default = false]
    request.ready = True
    assert request.SerializeToString() == REQUEST_SOCKETS_READER_1234 + bytes.fromhex("2001")
    negative = ManagerRequest(request=2, client_name="", client_pid=-1)  # int32: 10-byte varint
    assert negative.SerializeToString() == bytes.fromhex("0802120018ffffffffffffffffff01")


def test_manager_response_parses_hand_built_bytes_with_the_fact_sheets_defaults():
    # publish_socket {PUBLISH, transport TCP, CONNECT, ethernet_port 40000}
    publish = bytes.fromhex("08011803200138c0b802")
    # subscribe_socket {SUBSCRIBE, transport IPC, socket_name "/tmp/g.xpub"}
    subscribe = bytes.fromhex("08021802") + b"\x42\x0b/tmp/g.xpub"
    wire = (
        bytes.fromhex("08011201")
        + b"c"
        + bytes.fromhex("1807")
        + b"\x22"
        + bytes([len(publish)])
        + publish
        + b"\x2a"
        + bytes([len(subscribe)])
        + subscribe
        + bytes.fromhex("3000")
    )
    response = ManagerResponse.FromString(wire)
    assert (response.request, response.client_name, response.client_pid, response.hold) == (
        1,
        "c",
        7,
        False,
    )
    pub, sub = response.publish_socket, response.subscribe_socket
    assert (pub.socket_type, pub.transport, pub.connect_or_bind, pub.ethernet_port) == (
        Socket.PUBLISH,
        Socket.TCP,
        Socket.CONNECT,
        40000,
    )
    assert not pub.HasField("ethernet_address") and pub.ethernet_address == "127.0.0.1"
    assert (sub.transport, sub.socket_name) == (Socket.IPC, "/tmp/g.xpub")
    assert (
        sub.ethernet_port,
        sub.socket_id,
        sub.multicast_address,
        sub.send_queue_size,
        sub.receive_queue_size,
    ) == (11142, 0, "239.255.7.15", 1000, 1000)
    assert Socket(socket_type=Socket.SUBSCRIBE).transport == Socket.EPGM  # [default = EPGM]
    assert ManagerResponse(request=2, client_name="c", client_pid=1).hold is True
    assert response.SerializeToString() == wire


# -- the stand-in gobyd against a client written from the fact sheet -------------------------


@pytest.fixture
def ipc_base(tmp_path):
    return str(tmp_path / "g")


def test_daemon_hands_out_ipc_sockets_as_the_fact_sheet_says(ipc_base):
    daemon = GobyDaemon(socket_name=ipc_base)
    try:
        reply = ManagerResponse.FromString(
            ask_raw(f"ipc://{ipc_base}.manager", REQUEST_SOCKETS_READER_1234)
        )
    finally:
        daemon.close()
    assert (reply.request, reply.client_name, reply.client_pid) == (1, "reader", 1234)
    sub, pub = reply.subscribe_socket, reply.publish_socket
    assert (sub.socket_type, sub.connect_or_bind, sub.transport, sub.socket_name) == (
        Socket.SUBSCRIBE,
        Socket.CONNECT,
        Socket.IPC,
        f"{ipc_base}.xpub",
    )
    assert (pub.socket_type, pub.connect_or_bind, pub.transport, pub.socket_name) == (
        Socket.PUBLISH,
        Socket.CONNECT,
        Socket.IPC,
        f"{ipc_base}.xsub",
    )
    assert ("reader", 1234) in daemon.clients


def test_daemon_on_tcp_leaves_the_address_to_the_client_and_relays_messages():
    daemon = GobyDaemon(tcp_port=0)
    manager = ManagerAddress.tcp("127.0.0.1", daemon.tcp_port)
    sub = zmq.Context.instance().socket(zmq.SUB)
    pub = zmq.Context.instance().socket(zmq.PUB)
    try:
        reply = ManagerResponse.FromString(ask_raw(manager.endpoint, REQUEST_SOCKETS_READER_1234))
        assert reply.subscribe_socket.transport == Socket.TCP
        assert not reply.subscribe_socket.HasField("ethernet_address")
        assert reply.subscribe_socket.ethernet_port == daemon.xpub_port
        assert reply.publish_socket.ethernet_port == daemon.xsub_port
        router = request_router(manager, "me", os.getpid(), 10)
        assert (router.subscribe, router.publish) == (
            f"tcp://127.0.0.1:{daemon.xpub_port}",
            f"tcp://127.0.0.1:{daemon.xsub_port}",
        )
        for sock in (sub, pub):
            sock.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"/nav/")
        sub.connect(router.subscribe)
        pub.connect(router.publish)
        message = identifier("nav", "CSTR", "CSTR", 1, "a") + b"hi\0"

        def relayed():  # until the subscription has reached the publisher
            pub.send(identifier("other", "CSTR", "CSTR", 1, "a") + b"not for /nav/\0")
            pub.send(message)
            return sub.poll(100) and sub.recv() == message

        wait_until(relayed, timeout=30, interval=0, what="a message through the router")
    finally:
        sub.close(0)
        pub.close(0)
        daemon.close()


def test_unreachable_manager_fails_within_the_timeout_naming_the_address(tmp_path):
    manager = ManagerAddress.ipc(socket_name=str(tmp_path / "nobody"))
    started = time.monotonic()
    with pytest.raises(ManagerUnreachable) as caught:
        request_router(manager, "me", os.getpid(), 1.0)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 3.0
    assert f"ipc://{tmp_path / 'nobody'}.manager did not answer within 1 s" in str(caught.value)


class HostileManager:
    """gobyd's Manager as the fact sheet describes its exchange (a REP answering each
    ManagerRequest with a ManagerResponse naming the same request, client and pid), whose
    answers ``socket_fields`` fills in: one dict of Socket fields for each of
    ``subscribe_socket`` and ``publish_socket``, the last one kept for every later answer."""

    def __init__(self, *socket_fields: dict) -> None:
        self.answers = list(socket_fields)
        self.sock = zmq.Context.instance().socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.manager = ManagerAddress.tcp("127.0.0.1", self.port)
        self.asked = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            if not self.sock.poll(50):
                continue
            request = ManagerRequest.FromString(self.sock.recv())
            fields = self.answers[min(self.asked, len(self.answers) - 1)]
            self.asked += 1
            response = ManagerResponse(
                request=request.request,
                client_name=request.client_name,
                client_pid=request.client_pid,
                subscribe_socket=Socket(socket_type=Socket.SUBSCRIBE, **fields["subscribe"]),
                publish_socket=Socket(socket_type=Socket.PUBLISH, **fields["publish"]),
            )
            self.sock.send(response.SerializeToString())

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(2)
        self.sock.close(0)


def tcp_socket(port: int, **more) -> dict:
    return {
        "transport": Socket.TCP,
        "connect_or_bind": Socket.CONNECT,
        "ethernet_port": port,
        **more,
    }


GOOD_SOCKETS = {"subscribe": tcp_socket(40001), "publish": tcp_socket(40002)}


@pytest.mark.parametrize(
    "sockets, field, fault",
    [
        (
            {**GOOD_SOCKETS, "subscribe": tcp_socket(40001, ethernet_address="-evil")},
            "subscribe_socket",
            "neither an IP address nor a host name",
        ),
        (
            {**GOOD_SOCKETS, "publish": tcp_socket(40002, ethernet_address="a b")},
            "publish_socket",
            "neither an IP address nor a host name",
        ),
        ({**GOOD_SOCKETS, "subscribe": tcp_socket(0)}, "subscribe_socket", "port 0"),
        ({**GOOD_SOCKETS, "publish": tcp_socket(70000)}, "publish_socket", "port 70000"),
        (
            {
                **GOOD_SOCKETS,
                "subscribe": {"transport": Socket.IPC, "socket_name": "/tmp/" + "x" * 200},
            },
            "subscribe_socket",
            "a Unix socket path holds at most 107",
        ),
    ],
    ids=["host", "host-space", "port-0", "port-too-big", "ipc-too-long"],
)
def test_manager_addresses_that_zmq_refuses_are_refused_naming_gobyd_and_the_field(
    sockets, field, fault
):
    """The Manager's sockets become the addresses of capture's sockets, whose connect would
    fail (and end the query) on an address zmq refuses: refused here, naming gobyd's Manager,
    the field and the fault."""
    manager = HostileManager(sockets)
    try:
        with pytest.raises(ManagerError) as caught:
            request_router(manager.manager, "me", os.getpid(), 5.0)
    finally:
        manager.close()
    message = str(caught.value)
    assert f"gobyd's Manager at {manager.manager.endpoint} gave a {field}" in message
    assert fault in message


def test_an_oversized_manager_answer_is_refused_unread_naming_the_bound():
    """A ManagerResponse padded to 128 KiB (a Socket field no client reads) is over the 64 KiB
    bound: zmq drops it unread and the request fails as unanswered, saying so."""
    padded = {**GOOD_SOCKETS, "subscribe": tcp_socket(40001, multicast_address="x" * (128 << 10))}
    manager = HostileManager(padded)
    try:
        with pytest.raises(ManagerUnreachable) as caught:
            request_router(manager.manager, "me", os.getpid(), 1.0)
    finally:
        manager.close()
    assert manager.asked == 1
    assert f"An answer over {64 << 10} bytes is refused" in str(caught.value)


class Endpoints:
    def __init__(self) -> None:
        self.joined: list[Endpoint] = []

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        self.joined.append(endpoint)

    def endpoint_left(self, key: str) -> None:
        pass


def test_a_manager_that_later_hands_out_a_bad_address_is_refused_and_logged_once(caplog):
    """Discovery asks the Manager every second whether the Router moved: an answer with an
    address zmq refuses is one log line, and the Router read so far stays."""
    manager = HostileManager(
        GOOD_SOCKETS, {**GOOD_SOCKETS, "subscribe": tcp_socket(40001, ethernet_address="-evil")}
    )
    discovery = ManagerDiscovery(
        manager.manager,
        "me",
        2.0,
        (b"/nav/",),
        lambda prefix, router: Endpoint(prefix.decode(), router.subscribe, {}),
    )
    endpoints = Endpoints()
    caplog.set_level(logging.INFO, logger="spark_zmq")
    try:
        discovery.start(endpoints)
        wait_until(lambda: manager.asked >= 4, timeout=10, what="discovery to ask again")
    finally:
        discovery.close()
        manager.close()
    assert [e.address for e in endpoints.joined] == ["tcp://127.0.0.1:40001"]
    refused = [r.getMessage() for r in caplog.records if "-evil" in r.getMessage()]
    assert len(refused) == 1 and "gave a subscribe_socket" in refused[0], refused


# -- the hold handshake ----------------------------------------------------------------------


def test_daemon_answers_hold_requests_until_the_required_clients_are_ready(ipc_base):
    daemon = GobyDaemon(socket_name=ipc_base, required_clients=["navigator", "logger"])
    clients = [
        RawClient(f"ipc://{ipc_base}.manager", name, 100 + n)
        for n, name in enumerate(("writer", "navigator", "logger"))
    ]
    writer, navigator, logger = clients
    try:
        head, hold = writer.hold_state(ready=True)
        assert hold is True and GOBY_IDENTIFIER.match(head)
        assert head.startswith(HOLD_RESPONSE)
        assert navigator.hold_state(ready=True)[1] is True  # logger is not ready yet
        assert logger.hold_state(ready=False)[1] is True
        assert logger.hold_state(ready=True, until=False)[1] is False
        assert writer.hold_state(ready=True, until=False)[1] is False
    finally:
        for client in clients:
            client.close()
        daemon.close()
    assert daemon.ready_clients == {"writer", "navigator", "logger"}


def test_publisher_sends_nothing_while_held_then_everything_in_order(ipc_base):
    daemon = GobyDaemon(socket_name=ipc_base, required_clients=["navigator"])
    manager = ManagerAddress.ipc(socket_name=ipc_base)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"/out/")
    sub.connect(f"ipc://{ipc_base}.xpub")
    publisher = GobyPublisher(
        manager, "writer", manager_timeout=10, hold_timeout=60, send_hwm=1000, send_timeout=10
    )
    navigator = RawClient(f"ipc://{ipc_base}.manager", "navigator", 4242)
    messages = [
        identifier("out", "CSTR", "CSTR", os.getpid(), "a") + b"%d\0" % n for n in range(20)
    ]
    failures = []

    def send_all():
        try:
            for message in messages:
                publisher.send([message])
        except Exception as exc:  # surfaced below
            failures.append(exc)

    try:
        wait_until(
            lambda: publisher.subscribers(b"/out/") >= 1,
            timeout=30,
            interval=0.05,
            what="the SUB's subscription to reach the publisher",
        )
        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        wait_until(
            lambda: ("writer", os.getpid()) in daemon.hold_askers,
            timeout=30,
            what="the publisher to ask for the hold state",
        )
        assert not sub.poll(1500), "a message got through while gobyd holds"
        assert sender.is_alive() and daemon.hold
        assert navigator.hold_state(ready=True, until=False)[1] is False
        received = []
        while len(received) < len(messages) and sub.poll(30_000):
            received.append(sub.recv())
        sender.join(30)
    finally:
        navigator.close()
        publisher.close()
        sub.close(0)
        daemon.close()
    assert not failures
    assert received == messages


def test_publisher_fails_after_the_hold_timeout_naming_gobyd(ipc_base):
    daemon = GobyDaemon(socket_name=ipc_base, required_clients=["never"])
    publisher = GobyPublisher(
        ManagerAddress.ipc(socket_name=ipc_base),
        "writer",
        manager_timeout=10,
        hold_timeout=1.0,
        send_hwm=1000,
        send_timeout=10,
    )
    try:
        with pytest.raises(
            HoldTimeout,
            match=r"still holds publications of client 'writer' "
            r"after 1 s \(holdTimeout\)",
        ):
            publisher.send([identifier("out", "CSTR", "CSTR", 1, "a") + b"x\0"])
    finally:
        publisher.close()
        daemon.close()


def restarted(tcp_port: int) -> GobyDaemon | None:
    """A gobyd on the port of one just closed, or None while that port is still taken: zmq
    releases a closed socket's port in its I/O thread, a moment after ``close``."""
    try:
        return GobyDaemon(tcp_port=tcp_port)
    except OSError:
        return None


def test_publisher_follows_gobyd_to_its_new_router_after_a_restart():
    daemon = GobyDaemon(tcp_port=0)
    manager = ManagerAddress.tcp("127.0.0.1", daemon.tcp_port)
    publisher = GobyPublisher(
        manager, "writer", manager_timeout=10, hold_timeout=60, send_hwm=1000, send_timeout=10
    )
    subscribers = []

    def received_through(daemon) -> bytes:
        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"/out/")
        sub.connect(daemon.xpub_endpoint)
        subscribers.append(sub)
        message = identifier("out", "CSTR", "CSTR", os.getpid(), "a") + b"%d\0" % daemon.xpub_port

        def arrived():
            publisher.send([message])
            return sub.poll(100) and sub.recv()

        return wait_until(arrived, timeout=30, interval=0, what="a message through the router")

    try:
        first = received_through(daemon)
        old_port = daemon.xpub_port
        daemon.close()
        daemon = wait_until(
            lambda: restarted(daemon.tcp_port),
            timeout=10,
            interval=0.1,
            what="gobyd to bind its Manager's port again",
        )
        second = received_through(daemon)
    finally:
        publisher.close()
        for sub in subscribers:
            sub.close(0)
        daemon.close()
    assert first.endswith(b"%d\0" % old_port) and second.endswith(b"%d\0" % daemon.xpub_port)
    assert publisher.router.publish == f"tcp://127.0.0.1:{daemon.xsub_port}"


# -- decoding and encoding -------------------------------------------------------------------


def test_decode_shows_cstr_json_and_protobuf_payloads_and_malformed_messages(tmp_path):
    options = goby_settings({"protobufDescriptorSet": write_descriptor_set(tmp_path / "d.pb")})
    messages = [
        [b"/log/CSTR/CSTR/12/ab/\0hello\0"],
        [b"/state/JSON/nlohmann::json/12/ab/\0" + BSON_DEPTH_5],
        [b"/nav/PROTOBUF/test.NavStatus/12/ab/\0" + NAV_STATUS],
        [b"/nav/PROTOBUF/other.Unknown/12/ab/\0\x08\x01"],
        [b"/nav/PROTOBUF/test.NavStatus/12/ab/\0\xff\xff"],
        [b"/log/CSTR/CSTR/pid/ab/\0x\0"],
        [b"/two/", b"frames"],
    ]
    decoded = Goby().decode(
        pa.array(messages, pa.list_(pa.binary())), Source("ipc:///tmp/g.xpub", {}), options
    )
    columns = {name: array.to_pylist() for name, array in decoded.columns.items()}
    assert columns["group"] == ["log", "state", "nav", "nav", "nav", None, None]
    assert columns["scheme"][:5] == ["CSTR", "JSON", "PROTOBUF", "PROTOBUF", "PROTOBUF"]
    assert columns["scheme_id"][:5] == [0, 7, 1, 1, 1]
    assert columns["process"][:5] == [12] * 5 and columns["thread"][:5] == ["ab"] * 5
    assert columns["text"][:2] == ["hello", '{"depth": 5}']
    assert json.loads(columns["json"][2]) == {"x": 1.5, "name": "auv"}
    assert columns["json"][3] is None  # a type the set does not hold
    errors = decoded.error.to_pylist()
    assert errors[:4] == [None] * 4
    assert "does not parse as test.NavStatus" in errors[4]
    assert "process id 'pid' is not a decimal" in errors[5]
    assert "2 frames" in errors[6]
    payloads = decoded.payload.to_pylist()
    assert payloads[0] == b"hello\0" and payloads[5] == b"/log/CSTR/CSTR/pid/ab/\0x\0"


def test_the_descriptor_cache_keeps_only_the_sets_own_types_whatever_names_peers_send(tmp_path):
    """Type names come from peers: decoding 100,000 messages of distinct types the set does
    not hold leaves nothing behind (the cache kept every name asked for, misses included:
    some 10 MB here), and the set's own type still decodes."""
    path = write_descriptor_set(tmp_path / "d.pb")
    options = goby_settings({"protobufDescriptorSet": path})
    unknown = [[b"/nav/PROTOBUF/peer.Type%d/12/ab/\0\x08\x01" % i] for i in range(100_000)]
    known = [[b"/nav/PROTOBUF/test.NavStatus/12/ab/\0" + NAV_STATUS]]
    frames = pa.array(unknown + known, pa.list_(pa.binary()))
    types = descriptor_set(path)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        decoded = Goby().decode(frames, Source("ipc:///tmp/g.xpub", {}), options)
        shown = decoded.columns["json"].to_pylist()
        not_shown, last = shown[:-1].count(None), shown[-1]
        del decoded, shown
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert not_shown == 100_000
    assert json.loads(last) == {"x": 1.5, "name": "auv"}
    assert retained < 1 << 20, f"{retained} bytes kept after decoding"
    assert len(types._classes) <= 1  # the set holds one type


def test_encode_rows_into_messages_and_name_rows_that_cannot_be_sent():
    batch = pa.RecordBatch.from_pylist(
        [
            {"group": "log", "scheme": "CSTR", "type": None, "payload": None, "text": "hi"},
            {
                "group": "state",
                "scheme": "7",
                "type": "nlohmann::json",
                "payload": None,
                "text": '{"depth": 5}',
            },
            {
                "group": "nav",
                "scheme": "PROTOBUF",
                "type": "test.NavStatus",
                "payload": NAV_STATUS,
                "text": None,
            },
            {"group": None, "scheme": "CSTR", "type": None, "payload": None, "text": "x"},
            {"group": "g", "scheme": "BOGUS", "type": "T", "payload": b"", "text": None},
            {"group": "g", "scheme": "PROTOBUF", "type": "T", "payload": None, "text": "x"},
            {"group": "g", "scheme": "JSON", "type": "T", "payload": None, "text": "[1]"},
        ],
        schema=pa.schema(
            [
                ("group", pa.string()),
                ("scheme", pa.string()),
                ("type", pa.string()),
                ("payload", pa.binary()),
                ("text", pa.string()),
            ]
        ),
    )
    protocol = Goby()
    options = goby_settings({}, writer=True)
    protocol.check_input(batch.schema, options)
    encoded = protocol.encode(batch, options)
    frames = [m[0] if m else None for m in encoded.messages]
    heads = [GOBY_IDENTIFIER.match(f) for f in frames[:3]]
    assert [h.group(1, 2, 3) for h in heads] == [
        (b"log", b"CSTR", b"CSTR"),
        (b"state", b"JSON", b"nlohmann::json"),
        (b"nav", b"PROTOBUF", b"test.NavStatus"),
    ]
    assert {int(h.group(4)) for h in heads} == {os.getpid()}
    assert [f[h.end() :] for f, h in zip(frames, heads)] == [b"hi\0", BSON_DEPTH_5, NAV_STATUS]
    assert encoded.topics[0] == frames[0][: heads[0].end() - 1]
    errors = encoded.errors
    assert errors[:3] == [None] * 3 and frames[3:] == [None] * 4
    assert "no group" in errors[3] and "unknown scheme 'BOGUS'" in errors[4]
    assert "`text` is for CSTR and JSON rows" in errors[5]
    assert "must be a JSON object" in errors[6]
    with pytest.raises(ValueError, match="the rows need columns `group`, `scheme`"):
        protocol.check_input(pa.schema([("group", pa.string()), ("text", pa.string())]), options)
    with pytest.raises(ValueError, match="column `payload` has type string"):
        protocol.check_input(
            pa.schema([("group", pa.string()), ("scheme", pa.int32()), ("payload", pa.string())]),
            options,
        )


# -- the command line ------------------------------------------------------------------------


def test_cli_daemon_publish_and_subscribe(ipc_base):
    run = [sys.executable, "-m", "spark_zmq", "goby"]
    daemon = subprocess.Popen(
        run + ["daemon", "--socket-name", ipc_base],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    subscriber = internal = None
    try:
        assert f"manager ipc://{ipc_base}.manager" in daemon.stdout.readline()
        # everything ("/"): gobyd's hold handshake with each publish is hidden unless asked for
        subscriber, internal = (
            subprocess.Popen(
                run
                + [
                    "subscribe",
                    "--socket-name",
                    ipc_base,
                    "--count",
                    count,
                    "--timeout",
                    "120",
                    *flag,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            # two lines for the internal one: a subscriber still joining may miss one publish's
            # handshake and see its message, but the next publish's handshake reaches it
            for count, flag in (("1", []), ("2", ["--include-internal-groups"]))
        )

        def published_to_both_subscribers():
            result = subprocess.run(
                run
                + [
                    "publish",
                    "--socket-name",
                    ipc_base,
                    "--group",
                    "cli",
                    "--text",
                    "hello",
                    "--wait",
                    "2",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr
            return subscriber.poll() is not None and internal.poll() is not None

        wait_until(
            published_to_both_subscribers,
            timeout=120,
            interval=0,
            what="the subscribers to print a message",
        )
        out, err = subscriber.communicate(timeout=30)
        assert subscriber.returncode == 0, err
        internal_out, _ = internal.communicate(timeout=30)
        groups = [json.loads(line)["group"] for line in internal_out.splitlines()]
        assert any(g.startswith("goby::zeromq::_internal_manager") for g in groups), groups
    finally:
        for process in (subscriber, internal, daemon):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(30)
    line = json.loads(out.splitlines()[0])
    assert {k: line[k] for k in ("group", "scheme", "type", "text")} == {
        "group": "cli",
        "scheme": "CSTR",
        "type": "CSTR",
        "text": "hello",
    }
    assert re.fullmatch("[0-9a-f]+", line["thread"]) and line["process"] > 0
    missing = subprocess.run(
        run + ["subscribe", "--socket-name", ipc_base + "-none", "--manager-timeout", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert f"ipc://{ipc_base}-none.manager did not answer within 1 s" in missing.stderr
