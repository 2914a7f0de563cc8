"""The EBUS broker's request routing, against a client and workers written from the fact sheet
(no Spark): registration, dispatch, the reply cache, rejects, expiry, heartbeats, SERVICES and
WORKERS, and the `ebus/workers` announcement."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
import zmq

from spark_zmq.protocols.ebus import Broker, pack, unpack
from spark_zmq.protocols.ebus.worker import DEFAULT_MAX_BYTES
from support.common import wait_until

CLIENT, WORKER = b"EBC01", b"EBW01"


def dealer(identity: bytes, port: int) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{port}")
    return sock


def receive(sock: zmq.Socket, timeout: float = 10.0) -> list[bytes]:
    assert sock.poll(timeout * 1000), "no message"
    return sock.recv_multipart()


class EchoWorker:
    """A worker: READY for ``service``, answers every REQ with its data, heartbeats back."""

    def __init__(self, port: int, service: str) -> None:
        self.sock = dealer(b"W/%s/%s" % (service.encode(), uuid.uuid4().hex.encode()), port)
        self.sock.send_multipart([WORKER, b"READY", b"null", service.encode()])
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopping.is_set():
            if not self.sock.poll(50):
                continue
            frames = self.sock.recv_multipart()
            if frames[1] == b"REQ":
                self.sock.send_multipart([WORKER, b"REPLY", frames[2], frames[3]])
            elif frames[1] == b"HEARTBEAT":
                self.sock.send_multipart([WORKER, b"HEARTBEAT"])

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(2)
        self.sock.close(0)


def announcement(sock: zmq.Socket, channel: bytes) -> dict:
    """The next broadcast on ``channel``, past late probes and other broadcasts."""
    while True:
        frames = receive(sock)
        if frames[0] == channel:
            assert len(frames) == 2, frames
            return unpack(frames[1], DEFAULT_MAX_BYTES)


def announced_workers(sock: zmq.Socket) -> dict:
    """The next announcement on ``ebus/workers``, where the reference broker makes it."""
    return announcement(sock, b"ebus/workers")


def subscribed(broker, channel: bytes) -> zmq.Socket:
    """A SUB on the broker's sub port whose subscription has reached the broker (a probe
    broadcast sent through the broker came back)."""
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    for prefix in (channel, b"probe"):
        sub.setsockopt(zmq.SUBSCRIBE, prefix)
    sub.connect(f"tcp://127.0.0.1:{broker.sub_port}")
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(f"tcp://127.0.0.1:{broker.pub_port}")
    try:

        def probe_came_back():
            pub.send_multipart([b"probe", b"null"])
            return sub.poll(100) and sub.recv_multipart()[0] == b"probe"

        wait_until(probe_came_back, timeout=10, interval=0, what="the SUB to be subscribed")
    finally:
        pub.close(0)
    return sub


@pytest.fixture
def broker():
    instance = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    yield instance
    instance.close()


def test_requests_go_to_a_worker_and_back(broker):
    announcements = subscribed(broker, b"ebus")
    worker = EchoWorker(broker.backend_port, "echo")
    client = dealer(b"C" + uuid.uuid4().hex.encode(), broker.frontend_port)
    try:

        def services():  # as the reference client asks: no id at all
            client.send_multipart([b"", CLIENT, b"SERVICES"])
            frames = receive(client)
            return frames[2:4] == [b"SERVICES", b""] and unpack(frames[4], DEFAULT_MAX_BYTES) == [
                "echo"
            ]

        wait_until(services, timeout=10, what="the worker to register")
        client.send_multipart([b"", CLIENT, b"REQ", b"echo", b"r1", pack({"x": 1}), b"3000"])
        reply = receive(client)
        assert reply[:4] == [b"", WORKER, b"REPLY", b"r1"] and unpack(
            reply[4], DEFAULT_MAX_BYTES
        ) == {"x": 1}
        # a resend with the same id is answered from the reply cache
        client.send_multipart([b"", CLIENT, b"REQ", b"echo", b"r1", pack({"x": 2}), b"3000"])
        assert unpack(receive(client)[4], DEFAULT_MAX_BYTES) == {"x": 1}
        client.send_multipart([b"", CLIENT, b"WORKERS"])
        [listed] = unpack(receive(client)[4], DEFAULT_MAX_BYTES)
        assert listed["service"] == "echo" and listed["load"] == 0
        client.send_multipart([b"", CLIENT, b"PING"])
        assert receive(client)[2] == b"HEARTBEAT"
        assert announced_workers(announcements) == {
            "ebusmessage": "active workers",
            "workers": ["echo"],
        }
    finally:
        worker.close()
        client.close(0)
        announcements.close(0)


def test_frontend_messages_are_read_by_position_as_the_reference_broker_reads_them(broker):
    """[identity, '', sender, type, service, requestId, ...]: SERVICES and WORKERS answers
    echo index 5 (our client's id), or an empty id (the reference client sends none)."""
    worker = EchoWorker(broker.backend_port, "echo")
    client = dealer(b"C" + uuid.uuid4().hex.encode(), broker.frontend_port)
    try:

        def listed():
            client.send_multipart([b"", CLIENT, b"SERVICES", b"", b"q1"])
            frames = receive(client)
            return frames[:4] == [b"", WORKER, b"SERVICES", b"q1"] and unpack(
                frames[4], DEFAULT_MAX_BYTES
            )

        assert wait_until(listed, timeout=10, what="the worker to register") == ["echo"]
        client.send_multipart([b"", CLIENT, b"WORKERS", b"ignored service", b"q2"])
        frames = receive(client)
        assert frames[:4] == [b"", WORKER, b"WORKERS", b"q2"]
        assert [w["service"] for w in unpack(frames[4], DEFAULT_MAX_BYTES)] == ["echo"]
        client.send_multipart([b"", CLIENT, b"WORKERS"])
        assert receive(client)[3] == b""
    finally:
        worker.close()
        client.close(0)


def test_a_request_for_a_service_with_no_worker_is_held_until_one_registers(broker):
    client = dealer(b"C" + uuid.uuid4().hex.encode(), broker.frontend_port)
    worker = None
    try:
        client.send_multipart([b"", CLIENT, b"REQ", b"late", b"r1", pack("early"), b"20000"])
        assert not client.poll(1500), "the broker answered before the service had a worker"
        worker = EchoWorker(broker.backend_port, "late")
        reply = receive(client, timeout=10)
        assert (
            reply[:4] == [b"", WORKER, b"REPLY", b"r1"]
            and unpack(reply[4], DEFAULT_MAX_BYTES) == "early"
        )
    finally:
        if worker is not None:
            worker.close()
        client.close(0)


def test_an_expired_request_gets_a_reject_without_data_never_expired(broker):
    """The reference broker's expiry is ``REJECT, requestId`` and nothing more; its client
    does not understand EXPIRED."""
    client = dealer(b"C" + uuid.uuid4().hex.encode(), broker.frontend_port)
    try:
        client.send_multipart([b"", CLIENT, b"REQ", b"nobody", b"r2", b"null", b"1500"])
        assert not client.poll(700), "answered long before its stalesMs: not an expiry"
        assert receive(client, timeout=5) == [b"", WORKER, b"REJECT", b"r2"]
    finally:
        client.close(0)


def test_the_broker_announces_on_the_reference_channels(broker):
    """ebus/workers and ebus/shutdown, each {ebusmessage, ...}, reach a SUB to the prefix
    ``ebus`` (what reference clients and workers subscribe to). (ebus/started goes out as the
    broker binds, before any subscription can have reached it.)"""
    sub = subscribed(broker, b"ebus")
    worker = EchoWorker(broker.backend_port, "echo")
    try:
        assert announced_workers(sub) == {"ebusmessage": "active workers", "workers": ["echo"]}
    finally:
        worker.close()
    broker.close()
    assert announcement(sub, b"ebus/shutdown") == {"ebusmessage": "broker stopping"}
    sub.close(0)


def test_silent_workers_expire_and_unregistered_ones_are_disconnected(broker):
    client = dealer(b"C" + uuid.uuid4().hex.encode(), broker.frontend_port)
    silent = dealer(b"W/slow/" + uuid.uuid4().hex.encode(), broker.backend_port)
    stranger = dealer(b"W/x/" + uuid.uuid4().hex.encode(), broker.backend_port)
    try:
        stranger.send_multipart([WORKER, b"HEARTBEAT"])  # before READY
        assert receive(stranger)[:2] == [CLIENT, b"DISCONNECT"]
        silent.send_multipart([WORKER, b"READY", b"null", b"slow"])

        def registered():
            client.send_multipart([b"", CLIENT, b"SERVICES", b"s"])
            return unpack(receive(client)[4], DEFAULT_MAX_BYTES) == ["slow"]

        wait_until(registered, timeout=10, what="the silent worker to register")
        client.send_multipart([b"", CLIENT, b"REQ", b"slow", b"r1", b"null", b"300"])
        assert receive(silent)[1:3] == [b"REQ", b"r1"]  # it never answers
        assert receive(client) == [b"", WORKER, b"REJECT", b"r1"]  # expired: no data

        def gone():
            client.send_multipart([b"", CLIENT, b"SERVICES", b"s"])
            return unpack(receive(client)[4], DEFAULT_MAX_BYTES) == []

        wait_until(gone, timeout=10, what="the silent worker to be dropped")
    finally:
        for sock in (client, silent, stranger):
            sock.close(0)


def test_worker_replies_and_rejects_when_its_handler_fails(broker):
    from spark_zmq.protocols.ebus import Worker, ask

    def handler(data):
        if data == "boom":
            raise ValueError("boom")
        return {"echo": data}

    worker = Worker(f"tcp://127.0.0.1:{broker.backend_port}", "echo", handler)
    client = dealer(b"C" + uuid.uuid4().hex.encode(), broker.frontend_port)
    frontend = f"tcp://127.0.0.1:{broker.frontend_port}"
    try:
        wait_until(
            lambda: ask(frontend, "SERVICES", max_bytes=DEFAULT_MAX_BYTES) == ["echo"],
            timeout=10,
            what="the worker to register",
        )
        [listed] = ask(frontend, "WORKERS", max_bytes=DEFAULT_MAX_BYTES)
        assert listed["id"] == worker.identity.decode() and listed["service"] == "echo"
        client.send_multipart([b"", CLIENT, b"REQ", b"echo", b"r1", pack([1, 2]), b"3000"])
        assert unpack(receive(client)[4], DEFAULT_MAX_BYTES) == {"echo": [1, 2]}
        client.send_multipart([b"", CLIENT, b"REQ", b"echo", b"r2", pack("boom"), b"3000"])
        assert receive(client)[2:4] == [b"REJECT", b"r2"]
    finally:
        worker.close()
        client.close(0)


def test_cli_runs_a_broker_and_a_worker_and_asks_for_services(tmp_path):
    import os
    import subprocess
    import sys

    cli = [sys.executable, "-m", "spark_zmq", "ebus"]
    broker = subprocess.Popen(
        cli
        + [
            "broker",
            "--frontend-port",
            "0",
            "--backend-port",
            "0",
            "--pub-port",
            "0",
            "--sub-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    worker = None
    try:
        words = broker.stdout.readline().replace(",", "").split()
        ports = dict(zip(words[4::2], words[5::2]))  # "... frontend P backend P pub P sub P"
        worker = subprocess.Popen(
            cli + ["worker", "--service", "echo", "--backend-port", ports["backend"]],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert worker.stdout.readline().startswith("ebus worker 'echo'")

        def services():
            out = subprocess.run(
                cli + ["services", "--frontend-port", ports["frontend"]],
                capture_output=True,
                text=True,
                timeout=30,
            )
            return out.returncode == 0 and out.stdout.strip() == '["echo"]'

        wait_until(services, timeout=30, what="`ebus services` to list the worker")
        called = subprocess.run(
            cli
            + [
                "call",
                "--service",
                "echo",
                "--data",
                '{"x": [1, 2]}',
                "--frontend-port",
                ports["frontend"],
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert called.returncode == 0, called.stderr
        answer = json.loads(called.stdout)
        assert (answer["status"], answer["data"]) == ("REPLY", {"x": [1, 2]})
        held = subprocess.run(
            cli + ["call", "--service", "nobody", "--frontend-port", ports["frontend"]],
            capture_output=True,
            text=True,
            timeout=30,
        )  # held for a worker that never comes: expired
        assert held.returncode == 1 and json.loads(held.stdout)["status"] == "EXPIRED"
    finally:
        for process in (worker, broker):
            if process is not None:
                process.terminate()
                assert process.wait(10) == 0
    nobody = subprocess.run(
        cli + ["workers", "--frontend-port", ports["frontend"], "--timeout", "0.5"],
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ),
    )
    assert nobody.returncode == 1
    assert (
        f"no WORKERS answer from the EBUS broker at tcp://127.0.0.1:{ports['frontend']}"
        in nobody.stderr
    )
