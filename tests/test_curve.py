"""CURVE: a keyed reader gets a CURVE publisher's events; a peer without keys, or with a key the
publisher does not allow, gets nothing; the management port serves allowed keys only; the EBUS
broker and the stand-in gobyd as CURVE servers, with keyed queries, workers and CLI clients."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import zmq
import zmq.auth

from spark_zmq import stream_options
from spark_zmq.capture.loop import Capture
from spark_zmq.options import OptionError, parse_options
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.protocols.ebus import Broker, BrokerError, Worker, ask, pack
from spark_zmq.protocols.ebus.worker import DEFAULT_MAX_BYTES
from spark_zmq.protocols.goby import GobyDaemon, ManagerAddress, ManagerUnreachable, request_router
from spark_zmq.protocols.oneshot import exchange, request_socket
from spark_zmq.protocols.zeroeq import Publisher, event_id
from spark_zmq.protocols.zeroeq.management import LIST, ManagementPort
from spark_zmq.protocols.zeroeq.reqrep import RequestError, request
from spark_zmq.security import Curve
from spark_zmq.spool.writer import Spool
from spark_zmq.stream_options import READER_OPTIONS
from spark_zmq.testing.logs import logged_warnings
from support.common import MemoryState, wait_until
from support.ebus import run_requests

ECHO = "zeroeq::test::Echo"


@pytest.fixture
def keys(tmp_path):
    """Key files of a server, an allowed client and a stranger (zmq.auth's format)."""
    return {
        name: zmq.auth.create_certificates(str(tmp_path), name)
        for name in ("server", "client", "stranger")
    }


def subscriber(port: int, curve: Curve) -> zmq.Socket:
    sock = curve.as_client(zmq.Context.instance().socket(zmq.SUB))
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(f"tcp://127.0.0.1:{port}")
    return sock


def curve_of(**given) -> Curve:
    return stream_options.curve_of(parse_options("zeroeq", READER_OPTIONS, given))


def test_only_allowed_keys_receive_from_a_curve_publisher(keys):
    server_public, server_secret = keys["server"]
    publisher = Publisher(
        "curve",
        announce=False,
        curve=curve_of(curveSecretKey=server_secret, curveClientKeys=keys["client"][0]),
    )
    allowed = subscriber(
        publisher.port, curve_of(curveServerKey=server_public, curveSecretKey=keys["client"][1])
    )
    stranger = subscriber(
        publisher.port, curve_of(curveServerKey=server_public, curveSecretKey=keys["stranger"][1])
    )
    plain = subscriber(publisher.port, Curve())
    try:
        wait_until(lambda: publisher.count_subscribers(ECHO) >= 1, what="the allowed subscriber")
        for i in range(20):
            publisher.publish(ECHO, b"%d" % i)
        got = [allowed.recv_multipart() for _ in range(20)]
        assert [frames[1] for frames in got] == [b"%d" % i for i in range(20)]
        assert got[0][0] == event_id(ECHO)
        assert publisher.count_subscribers(ECHO) == 1  # the others never completed a handshake
        assert not stranger.poll(500) and not plain.poll(100)
    finally:
        for sock in (allowed, stranger, plain):
            sock.close(0)
        publisher.close()


@pytest.mark.spark
def test_a_keyed_query_reads_a_curve_publisher(spark, tmp_path, keys, zeroconf):
    server_public, server_secret = keys["server"]
    publisher = Publisher(
        "curvequery",
        zeroconf=zeroconf,
        curve=curve_of(curveSecretKey=server_secret, curveClientKeys=keys["client"][0]),
    )
    publisher.register(ECHO)  # in the vocabulary, which the reader asks for through CURVE
    query = (
        spark.readStream.format("zeroeq")
        .options(
            session="curvequery",
            discoveryInterfaces="127.0.0.1",
            spoolPath=str(tmp_path / "spool"),
            curveServerKey=server_public,
            curveSecretKey=str(tmp_path / "client.key_secret"),
        )
        .load()
        .writeStream.format("memory")
        .queryName("curvequery")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        publisher.wait_for_subscribers(timeout=60)
        for i in range(10):
            publisher.publish(ECHO, b"%d" % i)
        rows = wait_until(
            lambda: (r := spark.sql("select * from curvequery").collect()) and len(r) >= 10 and r,
            what="10 rows through CURVE",
        )
    finally:
        query.stop()
        publisher.close()
    assert sorted(int(r.payload) for r in rows) == list(range(10))
    assert {r.event for r in rows} == {ECHO}  # the vocabulary was fetched through CURVE too


def test_the_management_port_serves_allowed_keys_only(keys):
    server_public, server_secret = keys["server"]
    port = ManagementPort(
        "tcp://127.0.0.1:*",
        MemoryState(),
        lambda publisher: None,
        lambda: [],
        curve=curve_of(curveSecretKey=server_secret, curveClientKeys=keys["client"][0]),
    )
    allowed = curve_of(curveServerKey=server_public, curveSecretKey=keys["client"][1])
    _reply_type, payload = request(port.address, LIST, curve=allowed)
    assert json.loads(payload) == {"subscriptions": []}
    stranger = curve_of(curveServerKey=server_public, curveSecretKey=keys["stranger"][1])
    with pytest.raises(RequestError, match="no reply"):
        request(port.address, LIST, curve=stranger, timeout=1.0)
    with pytest.raises(RequestError, match="no reply"):
        request(port.address, LIST, timeout=1.0)


def management_port_serving_nobody(server_secret: str) -> ManagementPort:
    """A CURVE management port with no allow-list: it refuses every client key."""
    return ManagementPort(
        "tcp://127.0.0.1:*",
        MemoryState(),
        lambda publisher: None,
        lambda: [],
        curve=curve_of(curveSecretKey=server_secret),
    )


def test_a_curve_management_port_without_an_allow_list_serves_nobody(keys):
    server_public, server_secret = keys["server"]
    port = management_port_serving_nobody(server_secret)
    client = curve_of(curveServerKey=server_public, curveSecretKey=keys["client"][1])
    try:
        with pytest.raises(RequestError, match=r"no reply .* does not allow our key"):
            request(port.address, LIST, curve=client, timeout=1.0)
    finally:
        port.close()


def test_a_request_sent_after_its_curve_handshake_was_refused_ends_at_its_timeout(keys):
    """zmq's send on a REQ socket with no connection blocks until it connects again, which a
    server that refused the handshake never lets happen (a CI run hung 600 s in the test above
    when its send came just after the refusal): the send counts against the timeout too.

    zmq keeps a connecting socket's pipe most of the time, so the send only sometimes finds
    none; ZMQ_IMMEDIATE (queue only on completed connections) makes it find none every time."""
    server_public, server_secret = keys["server"]
    port = management_port_serving_nobody(server_secret)
    stranger = curve_of(curveServerKey=server_public, curveSecretKey=keys["stranger"][1])
    sock = request_socket(None, stranger, None)
    sock.setsockopt(zmq.IMMEDIATE, 1)
    try:
        sock.connect(port.address)
        started = time.monotonic()
        assert exchange(sock, [LIST], timeout=1.0) is None
        assert time.monotonic() - started < 5
    finally:
        sock.close(0)
        port.close()


@pytest.mark.parametrize(
    "option, value",
    [
        ("curveServerKey", "short"),
        ("curveSecretKey", "/nonexistent/key_secret"),
        ("curveClientKeys", "x" * 40 + ",/nonexistent.key"),
    ],
)
def test_bad_keys_are_option_errors(option, value):
    with pytest.raises(OptionError, match=rf"option '{option}' must be .*key.*; got '{value}'"):
        parse_options("zeroeq", READER_OPTIONS, {option: value})


# -- the EBUS broker and the stand-in gobyd as CURVE servers ---------------------------------


@pytest.fixture
def curve_server(keys):
    """A server's Curve allowing only the "client" key; and the client's and a stranger's."""
    server_public, server_secret = keys["server"]
    return (
        curve_of(curveSecretKey=server_secret, curveClientKeys=keys["client"][0]),
        curve_of(curveServerKey=server_public, curveSecretKey=keys["client"][1]),
        curve_of(curveServerKey=server_public, curveSecretKey=keys["stranger"][1]),
    )


def broadcaster(port: int, curve: Curve) -> zmq.Socket:
    sock = curve.as_client(zmq.Context.instance().socket(zmq.PUB))
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{port}")
    return sock


@pytest.mark.spark
def test_a_curve_broker_serves_keyed_readers_requesters_and_workers_only(
    spark, tmp_path, keys, curve_server
):
    server, client, stranger = curve_server
    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0, curve=server)
    backend = f"tcp://127.0.0.1:{broker.backend_port}"
    frontend = f"tcp://127.0.0.1:{broker.frontend_port}"
    workers = [
        Worker(backend, "echo", lambda data: {"echo": data}, curve=client),
        Worker(backend, "plain", lambda data: data),
        Worker(backend, "stranger", lambda data: data, curve=stranger),
    ]
    keyed, plain = broadcaster(broker.pub_port, client), broadcaster(broker.pub_port, Curve())
    key_files = {
        "curveServerKey": keys["server"][0],
        "curveSecretKey": str(tmp_path / "client.key_secret"),
    }
    query = (
        spark.readStream.format("ebus")
        .options(
            subPort=broker.sub_port,
            frontendPort=broker.frontend_port,
            channels="services",
            spoolPath=str(tmp_path / "spool"),
            **key_files,
        )
        .load()
        .writeStream.format("memory")
        .queryName("ebus_curve")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_until(
            lambda: (
                ask(frontend, "SERVICES", curve=client, max_bytes=DEFAULT_MAX_BYTES) == ["echo"]
            ),
            what="the keyed worker's registration",
        )
        with pytest.raises(BrokerError, match="no SERVICES answer"):
            ask(frontend, "SERVICES", timeout=1.0, max_bytes=DEFAULT_MAX_BYTES)
        with pytest.raises(BrokerError, match="no SERVICES answer"):
            ask(frontend, "SERVICES", timeout=1.0, curve=stranger, max_bytes=DEFAULT_MAX_BYTES)

        def keyed_broadcast_arrived():
            plain.send_multipart([b"echo", pack("plain")])
            keyed.send_multipart([b"echo", pack("keyed")])
            return spark.sql("select * from ebus_curve where data = '\"keyed\"'").count()

        wait_until(keyed_broadcast_arrived, interval=0.5, what="a keyed broadcast")
        query.processAllAvailable()
        got = {
            (r.partition, r.channel, r.data)
            for r in spark.sql("select * from ebus_curve").collect()
        }
        error, answers, _ = run_requests(
            spark,
            tmp_path,
            broker,
            [{"data": "1"}, {"data": "2"}],
            service="echo",
            mode="FAILFAST",
            **key_files,
        )
    finally:
        query.stop()
        for peer in workers:
            peer.close()
        for sock in (keyed, plain):
            sock.close(0)
        broker.close()
    assert got == {(f"echo@127.0.0.1:{broker.sub_port}", "echo", '"keyed"')}
    assert error is None
    assert sorted((status, data) for _, status, data, _ in answers) == [
        ("REPLY", '{"echo": 1}'),
        ("REPLY", '{"echo": 2}'),
    ]


@pytest.mark.spark
def test_a_curve_gobyd_serves_keyed_clients_only(spark, tmp_path, keys, curve_server):
    server, _client, stranger = curve_server
    base = str(tmp_path / "g")
    daemon = GobyDaemon(socket_name=base, curve=server)
    manager = ManagerAddress.ipc(socket_name=base)
    key_flags = [
        "--curve-server-key",
        keys["server"][0],
        "--curve-secret-key",
        str(tmp_path / "client.key_secret"),
    ]

    def cli_publish(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "spark_zmq",
                "goby",
                "publish",
                "--socket-name",
                base,
                "--group",
                "log",
                "--text",
                "through CURVE",
                "--count",
                "5",
                "--wait",
                "60",
                "--manager-timeout",
                "2",
                *flags,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    query = (
        spark.readStream.format("goby")
        .options(
            socketName=base,
            subscribe="/log/",
            spoolPath=str(tmp_path / "spool"),
            curveServerKey=keys["server"][0],
            curveSecretKey=str(tmp_path / "client.key_secret"),
        )
        .load()
        .writeStream.format("memory")
        .queryName("goby_curve")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        for curve in (Curve(), stranger):
            with pytest.raises(ManagerUnreachable):
                request_router(manager, "uninvited", 1, 1.0, curve=curve)
        refused = cli_publish()
        published = cli_publish(*key_flags)  # waits for the query's subscription first
        rows = wait_until(
            lambda: (r := spark.sql("select * from goby_curve").collect()) and len(r) >= 5 and r,
            what="5 messages through CURVE",
        )
    finally:
        query.stop()
        daemon.close()
    assert refused.returncode == 1 and "did not answer within 2 s" in refused.stderr
    assert published.returncode == 0, published.stderr
    assert "to 1 subscription(s)" in published.stdout
    assert [(r.group, r.text) for r in rows] == [("log", "through CURVE")] * 5
    assert ("spark_zmq_cli", rows[0].process) in daemon.clients  # it asked the Manager


def test_capture_logs_a_refused_curve_handshake_once_however_often_zmq_retries(tmp_path, keys):
    server_public, server_secret = keys["server"]
    publisher = Publisher(
        "refused",
        announce=False,
        curve=curve_of(curveSecretKey=server_secret, curveClientKeys=keys["client"][0]),
    )
    stranger = curve_of(curveServerKey=server_public, curveSecretKey=keys["stranger"][1])
    capture = Capture(
        Spool(str(tmp_path / "spool"), 1 << 30),
        max_message_bytes=1 << 20,
        flush_interval=0.1,
        curve=stranger,
    )
    address = f"tcp://127.0.0.1:{publisher.port}"
    try:
        with logged_warnings() as warnings:
            capture.start()
            capture.endpoint_joined(Endpoint("refused", address, {}, (b"",)))
            wait_until(
                lambda: capture.handshake_failures().get("refused", 0) >= 3,
                timeout=30,
                what="zmq to retry the refused handshake",
            )
    finally:
        capture.close()
        publisher.close()
    refused = [line for line in warnings if "refused our CURVE handshake" in line]
    assert len(refused) == 1 and address in refused[0], warnings
    assert not any("gap" in line or "reconnected" in line for line in warnings), warnings


def test_a_secret_key_file_others_can_read_is_warned_about_once(tmp_path):
    """As ssh does of a private key: a secret key file readable by its group or by others is
    named in one warning per process, with the command that fixes it; 0600 is quiet."""
    zmq.auth.create_certificates(str(tmp_path), "side")
    secret = tmp_path / "side.key_secret"
    secret.chmod(0o600)
    with logged_warnings() as quiet:
        parse_options("zeroeq", READER_OPTIONS, {"curveSecretKey": str(secret)})
    assert quiet == []
    secret.chmod(0o644)
    with logged_warnings() as lines:
        for _ in range(3):
            parse_options("zeroeq", READER_OPTIONS, {"curveSecretKey": str(secret)})
    assert len(lines) == 1, lines
    assert "can be read by others (mode 644)" in lines[0] and f"chmod 600 {secret}" in lines[0]
