"""CURVE: a keyed reader gets a CURVE publisher's events; a peer without keys, or with a key the
publisher does not allow, gets nothing; the management port serves allowed keys only."""

from __future__ import annotations

import json

import pytest
import zmq
import zmq.auth

from conftest import MemoryState, wait_until
from spark_zmq.options import OptionError, READER_OPTIONS, parse_options
from spark_zmq.protocols.zeroeq import Publisher, event_id
from spark_zmq.protocols.zeroeq.management import LIST, ManagementPort
from spark_zmq.protocols.zeroeq.reqrep import RequestError, request
from spark_zmq.security import Curve

ECHO = "zeroeq::test::Echo"


@pytest.fixture
def keys(tmp_path):
    """Key files of a server, an allowed client and a stranger (zmq.auth's format)."""
    return {name: zmq.auth.create_certificates(str(tmp_path), name)
            for name in ("server", "client", "stranger")}


def subscriber(port: int, curve: Curve) -> zmq.Socket:
    sock = curve.as_client(zmq.Context.instance().socket(zmq.SUB))
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(f"tcp://127.0.0.1:{port}")
    return sock


def curve_of(**given) -> Curve:
    return Curve.of(parse_options("zeroeq", READER_OPTIONS, given))


def test_only_allowed_keys_receive_from_a_curve_publisher(keys):
    server_public, server_secret = keys["server"]
    publisher = Publisher("curve", announce=False, curve=curve_of(
        curveSecretKey=server_secret, curveClientKeys=keys["client"][0]))
    allowed = subscriber(publisher.port, curve_of(
        curveServerKey=server_public, curveSecretKey=keys["client"][1]))
    stranger = subscriber(publisher.port, curve_of(
        curveServerKey=server_public, curveSecretKey=keys["stranger"][1]))
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
    publisher = Publisher("curvequery", zeroconf=zeroconf, curve=curve_of(
        curveSecretKey=server_secret, curveClientKeys=keys["client"][0]))
    publisher.register(ECHO)       # in the vocabulary, which the reader asks for through CURVE
    query = (spark.readStream.format("zeroeq")
             .options(session="curvequery", discoveryInterfaces="127.0.0.1",
                      spoolPath=str(tmp_path / "spool"), curveServerKey=server_public,
                      curveSecretKey=str(tmp_path / "client.key_secret"))
             .load().writeStream.format("memory").queryName("curvequery")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        publisher.wait_for_subscribers(timeout=60)
        for i in range(10):
            publisher.publish(ECHO, b"%d" % i)
        rows = wait_until(lambda: (r := spark.sql("select * from curvequery").collect())
                          and len(r) >= 10 and r, what="10 rows through CURVE")
    finally:
        query.stop()
        publisher.close()
    assert sorted(int(r.payload) for r in rows) == list(range(10))
    assert {r.event for r in rows} == {ECHO}      # the vocabulary was fetched through CURVE too


def test_the_management_port_serves_allowed_keys_only(keys):
    server_public, server_secret = keys["server"]
    port = ManagementPort("tcp://127.0.0.1:*", MemoryState(), lambda publisher: None, lambda: [],
                          curve=curve_of(curveSecretKey=server_secret,
                                         curveClientKeys=keys["client"][0]))
    allowed = curve_of(curveServerKey=server_public, curveSecretKey=keys["client"][1])
    reply_type, payload = request(port.address, LIST, curve=allowed)
    assert json.loads(payload) == {"subscriptions": []}
    stranger = curve_of(curveServerKey=server_public, curveSecretKey=keys["stranger"][1])
    with pytest.raises(RequestError, match="no reply"):
        request(port.address, LIST, curve=stranger, timeout=1.0)
    with pytest.raises(RequestError, match="no reply"):
        request(port.address, LIST, timeout=1.0)


def test_a_curve_management_port_without_an_allow_list_serves_nobody(keys):
    server_public, server_secret = keys["server"]
    port = ManagementPort("tcp://127.0.0.1:*", MemoryState(), lambda publisher: None, lambda: [],
                          curve=curve_of(curveSecretKey=server_secret))
    client = curve_of(curveServerKey=server_public, curveSecretKey=keys["client"][1])
    with pytest.raises(RequestError, match="no reply"):
        request(port.address, LIST, curve=client, timeout=1.0)


@pytest.mark.parametrize("option, value", [
    ("curveServerKey", "short"),
    ("curveSecretKey", "/nonexistent/key_secret"),
    ("curveClientKeys", "x" * 40 + ",/nonexistent.key"),
])
def test_bad_keys_are_option_errors(option, value):
    with pytest.raises(OptionError, match=rf"option '{option}' must be .*key.*; got '{value}'"):
        parse_options("zeroeq", READER_OPTIONS, {option: value})
