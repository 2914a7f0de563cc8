"""The EBUS client's heartbeats, reconnects and resends (no Spark), against the package's
broker and against a fake broker written here from the fact sheet that can fall silent, send
DISCONNECT and leave requests unanswered; and the discovery of ``channels=services`` built on
it, against that fake broker and forged ``ebus/workers`` announcements."""

from __future__ import annotations

import logging
import secrets
import threading
import time
import zlib
from concurrent.futures import Future
from itertools import pairwise

import pytest
import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.protocols.ebus import Broker, Client, Worker, pack, unpack
from spark_zmq.protocols.ebus.discovery import ANNOUNCED_ASK_SECONDS, ServiceChannels
from spark_zmq.protocols.ebus.worker import DEFAULT_MAX_BYTES
from support.common import wait_until

CLIENT, BROKER_SIDE = b"EBC01", b"EBW01"


class FakeBroker:
    """A ROUTER that records every client message as (identity, kind, args) and, while
    ``answering`` is set, answers PING with HEARTBEAT; SERVICES with the frame ``services``
    when that is set (a packed list, as the fact sheet has it)."""

    def __init__(self) -> None:
        self.services: bytes | None = None
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.answering = threading.Event()
        self.answering.set()
        self.received: list[tuple[bytes, bytes, list[bytes]]] = []
        #: when each of ``received`` arrived (time.monotonic())
        self.arrivals: list[float] = []
        self._outbox: list[list[bytes]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                outbox, self._outbox = self._outbox, []
            for frames in outbox:
                self.sock.send_multipart(frames)
            if not self.sock.poll(20):
                continue
            identity, empty, sender, kind, *args = self.sock.recv_multipart()
            assert empty == b"" and sender == CLIENT, "a client message as the fact sheet has it"
            with self._lock:
                self.received.append((identity, kind, args))
                self.arrivals.append(time.monotonic())
            if kind == b"PING" and self.answering.is_set():
                self.sock.send_multipart([identity, b"", BROKER_SIDE, b"HEARTBEAT"])
            services = self.services
            if kind == b"SERVICES" and services is not None:
                request_id = args[1] if len(args) > 1 else b""
                self.sock.send_multipart(
                    [identity, b"", BROKER_SIDE, b"SERVICES", request_id, services]
                )

    def send(self, identity: bytes, kind: bytes, *args: bytes) -> None:
        with self._lock:
            self._outbox.append([identity, b"", BROKER_SIDE, kind, *args])

    def messages(self, kind: bytes) -> list[tuple[bytes, list[bytes]]]:
        with self._lock:
            return [(identity, args) for identity, k, args in self.received if k == kind]

    def arrived(self, kind: bytes) -> list[float]:
        """When each message of ``kind`` arrived, in the order of ``messages(kind)``."""
        with self._lock:
            return [at for (_, k, _), at in zip(self.received, self.arrivals) if k == kind]

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(2)
        self.sock.close(0)


@pytest.fixture
def fake_broker():
    broker = FakeBroker()
    yield broker
    broker.close()


@pytest.fixture
def log_lines():
    """Lines the package logs during the test, from INFO on (as an application that wants
    them configures its logging: the package sets no level of its own)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_client_pings_a_silent_broker_and_reconnects_with_a_new_identity(fake_broker, log_lines):
    with Client(fake_broker.address) as client:
        wait_until(
            lambda: len(fake_broker.messages(b"PING")) >= 3,
            timeout=10,
            what="PINGs while nothing else comes",
        )
        first = client.identity
        assert {identity for identity, _ in fake_broker.messages(b"PING")} == {first}
        assert client.reconnects == 0, "answered PINGs keep the connection"

        fake_broker.answering.clear()  # the broker falls silent
        silent_since = time.monotonic()
        wait_until(
            lambda: any(identity != first for identity, _ in fake_broker.messages(b"PING")),
            timeout=10,
            what="a PING from a new identity",
        )
        took = time.monotonic() - silent_since
        assert client.identity != first and client.identity.startswith(b"C")
        assert 2.0 <= took <= 6.0, f"reconnected after {took:.1f} s; liveness is 5 x 500 ms"
        assert [
            line
            for line in log_lines
            if "reconnecting as" in line and fake_broker.address in line and first.decode() in line
        ]

        fake_broker.answering.set()  # and answers again
        wait_until(
            lambda: any("answers again" in line for line in log_lines),
            timeout=10,
            what="the client to log that the broker answers again",
        )
        reconnects = client.reconnects
        time.sleep(3.0)
        assert client.reconnects == reconnects, "no reconnect while the broker answers"
    warnings = [line for line in log_lines if "reconnecting as" in line]
    assert len(warnings) <= reconnects, "one warning per outage, not one per message"


def test_disconnect_from_the_broker_makes_the_client_reconnect_at_once(fake_broker, log_lines):
    with Client(fake_broker.address) as client:
        wait_until(lambda: fake_broker.messages(b"PING"), timeout=10, what="a first PING")
        first = client.identity
        fake_broker.send(first, b"DISCONNECT", b"maintenance")
        asked_at = time.monotonic()
        wait_until(
            lambda: any(identity != first for identity, _ in fake_broker.messages(b"PING")),
            timeout=10,
            what="a message from a new identity",
        )
        assert time.monotonic() - asked_at < 1.5
        assert client.reconnects == 1
        assert any("maintenance" in line for line in log_lines)


def test_unanswered_request_is_resent_with_its_id_also_after_a_reconnect(fake_broker):
    with Client(fake_broker.address) as client:
        answer = client.request("slow", pack({"x": 1}), request_id="r-1", stales_ms=20_000)
        wait_until(
            lambda: len(fake_broker.messages(b"REQ")) >= 2,
            timeout=10,
            what="the request and its resend",
        )
        (sender, first), (_, resend) = fake_broker.messages(b"REQ")[:2]
        assert first == resend == [b"slow", b"r-1", pack({"x": 1}), b"20000"]

        fake_broker.answering.clear()  # silent: the client reconnects ...
        wait_until(
            lambda: any(identity != sender for identity, _ in fake_broker.messages(b"REQ")),
            timeout=15,
            what="the request sent again by the new identity",
        )
        renewed, args = next(
            (identity, args)
            for identity, args in fake_broker.messages(b"REQ")
            if identity != sender
        )
        assert args[:2] == [b"slow", b"r-1"], "the same request id after the reconnect"
        fake_broker.answering.set()
        fake_broker.send(renewed, b"REPLY", b"someone-else", pack("not ours"))  # discarded
        fake_broker.send(renewed, b"REPLY", b"r-1", pack({"y": 2}))
        result = answer.result(10)
    assert (result.request_id, result.status, unpack(result.data, DEFAULT_MAX_BYTES)) == (
        "r-1",
        "REPLY",
        {"y": 2},
    )
    assert result.sends >= 3


def test_request_expires_after_its_stales_time_and_is_cancelled(fake_broker):
    with Client(fake_broker.address) as client:
        started = time.monotonic()
        result = client.request("silent", pack(1), request_id="r-2", stales_ms=1500).result(10)
        took = time.monotonic() - started
        wait_until(lambda: fake_broker.messages(b"CANCEL"), timeout=5, what="a CANCEL")
    assert (result.status, result.data, result.sends) == ("EXPIRED", None, 2)
    assert 1.4 <= took <= 3.0
    assert fake_broker.messages(b"CANCEL")[0][1] == [b"silent", b"r-2"]
    assert len(fake_broker.messages(b"REQ")) == 2, "sent, then resent once after 1 s"


def test_an_unanswered_request_is_sent_at_most_4_times_a_second_apart_then_expires(fake_broker):
    """docs/formats/ebus.md: an unanswered request is resent after a second with its id, at
    most 3 times, and expires after ``stalesMs``; the broker gets a CANCEL. With the timings
    the request sink's client has (the defaults) and a request living 4.5 s, a fourth resend
    would come at about 4 s, before the expiry; the broker stand-in answers PING only, so the
    client never reconnects (which sends again without counting)."""
    with Client(fake_broker.address) as client:
        started = time.monotonic()
        result = client.request("silent", pack(1), request_id="r-3", stales_ms=4500).result(10)
        took = time.monotonic() - started
        wait_until(lambda: fake_broker.messages(b"CANCEL"), timeout=5, what="a CANCEL")
        assert client.reconnects == 0
    requests = fake_broker.messages(b"REQ")
    assert [args for _, args in requests] == [[b"silent", b"r-3", pack(1), b"4500"]] * 4
    assert len({identity for identity, _ in requests}) == 1
    arrived = fake_broker.arrived(b"REQ")
    gaps = [later - earlier for earlier, later in pairwise(arrived)]
    assert all(gap >= 0.8 for gap in gaps), f"resent after a second: {gaps}"
    assert (result.status, result.data, result.sends) == ("EXPIRED", None, 4)
    assert 4.4 <= took <= 6.5
    assert fake_broker.messages(b"CANCEL")[0][1] == [b"silent", b"r-3"]


def test_services_and_workers_are_asked_as_the_reference_broker_reads_them(fake_broker):
    """The fake broker stands for the reference one: it reads the id at index 5 of a frontend
    message (args[1] here, after the service at index 4) and answers its own client's
    questions with an empty id, matched by type."""
    with Client(fake_broker.address) as client:
        services = Future()
        threading.Thread(
            target=lambda: services.set_result(
                client.ask("SERVICES", 10, max_bytes=DEFAULT_MAX_BYTES)
            ),
            daemon=True,
        ).start()
        wait_until(lambda: fake_broker.messages(b"SERVICES"), timeout=10, what="SERVICES")
        identity, args = fake_broker.messages(b"SERVICES")[0]
        assert len(args) == 2 and args[0] == b"" and args[1], "the id at index 5"
        fake_broker.send(identity, b"SERVICES", b"", pack(["echo", "double"]))
        assert services.result(10) == ["echo", "double"]
        workers = Future()
        threading.Thread(
            target=lambda: workers.set_result(
                client.ask("WORKERS", 10, max_bytes=DEFAULT_MAX_BYTES)
            ),
            daemon=True,
        ).start()
        wait_until(lambda: fake_broker.messages(b"WORKERS"), timeout=10, what="WORKERS")
        identity, args = fake_broker.messages(b"WORKERS")[0]
        fake_broker.send(identity, b"WORKERS", args[1], pack([{"id": "W/echo/1"}]))  # echoed
        assert workers.result(10) == [{"id": "W/echo/1"}]


def test_a_reject_without_data_is_the_brokers_expiry_and_with_data_a_refusal(fake_broker):
    with Client(fake_broker.address) as client:
        expired = client.request("late", pack(1), request_id="r-x", stales_ms=60_000)
        refused = client.request("picky", pack(2), request_id="r-y", stales_ms=60_000)
        wait_until(lambda: len(fake_broker.messages(b"REQ")) >= 2, timeout=10, what="REQs")
        identity = fake_broker.messages(b"REQ")[0][0]
        fake_broker.send(identity, b"REJECT", b"r-x")  # the reference expiry
        fake_broker.send(identity, b"REJECT", b"r-y", b"null")  # a worker's REJECT
        assert (expired.result(10).status, expired.result(10).data) == ("EXPIRED", None)
        assert (refused.result(10).status, refused.result(10).data) == ("REJECT", b"null")


def test_client_against_the_package_broker_stays_connected_and_gets_answers():
    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    worker = Worker(f"tcp://127.0.0.1:{broker.backend_port}", "double", lambda x: 2 * x)
    try:
        with Client(f"tcp://127.0.0.1:{broker.frontend_port}") as client:
            wait_until(
                lambda: client.ask("SERVICES", max_bytes=DEFAULT_MAX_BYTES) == ["double"],
                timeout=10,
                what="the worker to register",
            )
            time.sleep(3.5)  # longer than 5 heartbeats of silence
            assert client.reconnects == 0, "the broker answers PINGs"
            answers = [client.request("double", pack(n)) for n in range(20)]
            assert [unpack(a.result(10).data, DEFAULT_MAX_BYTES) for a in answers] == [
                2 * n for n in range(20)
            ]
            # no worker: the broker holds the request, then expires it (REJECT without data)
            held = client.request("nobody", pack(1), stales_ms=1000).result(10)
            assert (held.status, held.data) == ("EXPIRED", None)
            # the same id again while the broker caches its reply: answered from the cache
            again = client.request("double", pack(99), request_id=answers[0].result().request_id)
            assert unpack(again.result(10).data, DEFAULT_MAX_BYTES) == 0
    finally:
        worker.close()
        broker.close()


# -- channels=services: the broker's answer decides, announcements only prompt it ------------


def packed(value) -> bytes:
    """``value`` packed as the fact sheet says: zlib(BSON({"l": value}))."""
    import bson

    return zlib.compress(bson.encode({"l": value}))


def workers_announcement(workers) -> list[bytes]:
    return [b"ebus/workers", packed({"ebusmessage": "active workers", "workers": workers})]


class Services:
    """A discovery listener that keeps the services joined and every leave."""

    def __init__(self) -> None:
        self.joined: set[str] = set()
        self.left: list[str] = []

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        self.joined.add(endpoint.key)

    def endpoint_left(self, key: str) -> None:
        self.left.append(key)
        self.joined.discard(key)


class Relay:
    """The broker's sub port as discovery sees it: an XPUB that anyone's broadcasts come out
    of, and whose subscription messages show discovery's SUB subscribing."""

    def __init__(self) -> None:
        self.sock = zmq.Context.instance().socket(zmq.XPUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.address = f"tcp://127.0.0.1:{self.sock.bind_to_random_port('tcp://127.0.0.1')}"
        self.events: list[bytes] = []

    def subscription_events(self) -> list[bytes]:
        while self.sock.poll(0):
            self.events.append(self.sock.recv())
        return self.events

    def close(self) -> None:
        self.sock.close(0)


@pytest.fixture
def services_discovery(fake_broker):
    relay = Relay()
    discovery = ServiceChannels(
        fake_broker.address,
        relay.address,
        lambda service: Endpoint(service, relay.address, {}),
        max_bytes=DEFAULT_MAX_BYTES,
    )
    listener = Services()
    yield discovery, relay, listener
    discovery.close()
    relay.close()


def test_forged_announcements_only_prompt_a_rate_limited_ask(
    fake_broker, services_discovery, log_lines
):
    """A flood of forged empty lists (and of garbage, and one over the 1 MiB bound) retires
    nothing: it costs the broker at most one SERVICES ask a second, whose answer stands; each
    kind of garbage, and the contradicted announcements, are one log line each; the oversized
    one drops the SUB's connection unread (zmq would not reconnect it), and discovery opens
    it anew; a genuine announcement still has a new service joined at once."""
    discovery, relay, listener = services_discovery
    fake_broker.services = packed(["echo"])
    discovery.start(listener)
    wait_until(lambda: listener.joined == {"echo"}, what="echo to join")
    wait_until(lambda: b"\x01ebus/workers" in relay.subscription_events(), what="discovery's SUB")
    asked_before = len(fake_broker.messages(b"SERVICES"))
    flood_until = time.monotonic() + 4
    while time.monotonic() < flood_until:
        relay.sock.send_multipart(workers_announcement([]))
        relay.sock.send_multipart([b"ebus/workers", b"not zlib"])
        relay.sock.send_multipart([b"ebus/workers", packed({"workers": "not a list"})])
        time.sleep(0.02)
    asked = len(fake_broker.messages(b"SERVICES")) - asked_before
    assert 2 <= asked <= 6, f"{asked} SERVICES asks in 4 s of forged announcements"
    assert listener.left == [] and listener.joined == {"echo"}

    relay.sock.send_multipart([b"ebus/workers", b"\0" * (2 << 20)])  # over the 1 MiB bound
    wait_until(
        lambda: any("subscriber to " in line and "dropped" in line for line in log_lines),
        what="the SUB to drop the connection",
    )
    fake_broker.services = packed(["echo", "temperature"])
    time.sleep(ANNOUNCED_ASK_SECONDS)  # the last ask is this long ago; the SUB is open anew
    relay.sock.send_multipart(workers_announcement(["echo", "temperature"]))
    started = time.monotonic()
    # long before the next refresh (REFRESH_SECONDS after the last ask): the announcement did it
    wait_until(lambda: "temperature" in listener.joined, timeout=5, what="temperature to join")
    assert time.monotonic() - started < 2.5 and listener.left == []
    assert sum("the broker's answer stands" in line for line in log_lines) == 1, log_lines
    malformed = [line for line in log_lines if "malformed ebus/workers announcement" in line]
    assert len(malformed) == 2, malformed  # one line for each kind: not packed, no list
    assert sum("subscriber to " in line and "dropped" in line for line in log_lines) == 1


def test_a_services_answer_over_the_bound_is_refused_and_asked_again(
    fake_broker, services_discovery, log_lines
):
    """A SERVICES answer over the 1 MiB bound (packed, so its size on the wire counts) is
    dropped unread: the ask fails with one line naming the broker and the bound, nothing
    joins from it, and the next answer is taken."""
    discovery, _, listener = services_discovery
    fake_broker.services = packed(["echo", secrets.token_hex(2 << 20)])  # over the bound, packed
    discovery.start(listener)
    wait_until(
        lambda: any("1048576-byte bound" in line for line in log_lines),
        timeout=10,
        what="the refused answer's log line",
    )
    assert listener.joined == set()
    fake_broker.services = packed(["echo"])
    wait_until(lambda: listener.joined == {"echo"}, timeout=20, what="echo to join")
    [refused] = [line for line in log_lines if "1048576-byte bound" in line]
    assert fake_broker.address in refused
    assert any(f"the broker at {fake_broker.address} answers again" in line for line in log_lines)
