"""`format("goby")` with Spark, through the stand-in gobyd: reading subscribed prefixes with
decoding and `mode`, writing messages a C++ Goby client parses, the hold handshake, a gobyd
restart mid-stream, and an unreachable Manager."""

from __future__ import annotations

import json
import os
import re
import struct
import time

import pytest
import zmq
from google.protobuf import descriptor_pb2, timestamp_pb2
from pyspark.errors import StreamingQueryException

from spark_zmq.protocols.goby import GobyDaemon, ManagerAddress, identifier, request_router
from spark_zmq.protocols.goby.messages import manager_messages
from support.common import wait_until
from support.goby import (
    BSON_DEPTH_5,
    GOBY_IDENTIFIER,
    HOLD_REQUEST,
    NAV_STATUS,
    RawClient,
    write_descriptor_set,
)
from support.queries import memory_query

pytestmark = pytest.mark.spark
APP_NAME = "spark_zmq tests"  # conftest's session
WARM = "beef"  # the thread part of warm-up messages


def message(group: str, scheme: str, type_name: str, payload: bytes) -> bytes:
    """A message as a Goby publisher sends it (one frame), from a made-up pid and thread."""
    return identifier(group, scheme, type_name, 4321, "9af3") + payload


def cstr(group: str, text: str) -> bytes:
    return message(group, "CSTR", "CSTR", text.encode() + b"\0")


class TestPublisher:
    """A PUB on the Router's XSUB, found through the Manager."""

    __test__ = False

    def __init__(self, manager: ManagerAddress) -> None:
        router = request_router(manager, "test_publisher", os.getpid(), 10)
        self.sock = zmq.Context.instance().socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(router.publish)

    def send(self, *messages: bytes) -> None:
        for frame in messages:
            self.sock.send(frame)

    def close(self) -> None:
        self.sock.close(0)


def rows(spark, name: str, where: str = "true") -> list:
    return spark.sql(f"select * from {name} where {where} order by partition, offset").collect()


def test_reader_gets_exactly_the_subscribed_prefixes_decoded(spark, tmp_path):
    base = str(tmp_path / "g")
    daemon = GobyDaemon(socket_name=base)
    descriptors = write_descriptor_set(tmp_path / "nav.pb")
    queries = {
        "goby_some": memory_query(
            spark,
            tmp_path,
            "goby",
            "goby_some",
            socketName=base,
            subscribe="/log/CSTR,/nav/PROTOBUF/test.NavStatus/,/state/JSON/,Foo",
            protobufDescriptorSet=descriptors,
        ),
        "goby_all": memory_query(
            spark,
            tmp_path,
            "goby",
            "goby_all",
            socketName=base,
            subscribe="/",
            mode="DROPMALFORMED",
        ),
    }
    publisher = TestPublisher(ManagerAddress.ipc(socket_name=base))
    # warm-ups come from thread WARM, one per partition of goby_some
    warm_ups = [
        identifier(group, scheme, type_name, 4321, WARM) + payload
        for group, scheme, type_name, payload in (
            ("log", "CSTR", "CSTR", b"warm\0"),
            ("Foo", "CSTR", "CSTR", b"warm\0"),
            ("nav", "PROTOBUF", "test.NavStatus", NAV_STATUS),
            ("state", "JSON", "nlohmann::json", BSON_DEPTH_5),
        )
    ]
    not_warm = f"coalesce(thread, '') != '{WARM}'"
    try:

        def every_partition_warm():  # subscriptions travel SUB -> XPUB -> XSUB -> PUB
            publisher.send(*warm_ups)
            some = {r.partition for r in rows(spark, "goby_some", f"thread = '{WARM}'")}
            return len(some) == 4 and rows(spark, "goby_all", f"thread = '{WARM}'")

        wait_until(
            every_partition_warm,
            timeout=120,
            interval=0.5,
            what="every partition's subscription to reach the publisher",
        )
        publisher.send(
            cstr("log", "hello"),
            message("nav", "PROTOBUF", "test.NavStatus", NAV_STATUS),
            message("state", "JSON", "nlohmann::json", BSON_DEPTH_5),
            cstr("Foo", "foo"),
            cstr("FooBar", "not Foo"),
            cstr("other", "only for /"),
            b"/a/b/CSTR/CSTR/4321/9af3/\0slash group\0",  # as goby3 3.1.5a writes a/b
            b"/Foo/CSTR/CSTR/notapid/1/\0malformed",
            cstr("log", "last"),
        )
        wait_until(
            lambda: (
                len(rows(spark, "goby_some", not_warm)) >= 6
                and len(rows(spark, "goby_all", not_warm)) >= 8
            ),
            timeout=90,
            interval=0.5,
            what="the messages",
        )
        for query in queries.values():
            query.processAllAvailable()  # anything more would show now
        some = rows(spark, "goby_some", not_warm)
        every = rows(spark, "goby_all", not_warm)
    finally:
        for query in queries.values():
            query.stop()
        publisher.close()
        daemon.close()
    got = sorted(
        (
            (r.group, r.scheme, r.scheme_id, r.type, r.text, r.json and json.loads(r.json))
            for r in some
            if r.error is None
        ),
        key=str,
    )
    assert got == sorted(
        [
            ("log", "CSTR", 0, "CSTR", "hello", None),
            ("log", "CSTR", 0, "CSTR", "last", None),
            ("nav", "PROTOBUF", 1, "test.NavStatus", None, {"x": 1.5, "name": "auv"}),
            ("state", "JSON", 7, "nlohmann::json", '{"depth": 5}', None),
            ("Foo", "CSTR", 0, "CSTR", "foo", None),
        ],
        key=str,
    )
    assert len(some) == 6
    assert {(r.process, r.thread) for r in some if r.error is None} == {(4321, "9af3")}
    malformed = [r for r in some if r.error is not None]
    assert len(malformed) == 1 and "process id 'notapid'" in malformed[0].error
    assert malformed[0].partition == f"/Foo/@{base}.manager"
    assert bytes(malformed[0].payload) == b"/Foo/CSTR/CSTR/notapid/1/\0malformed"
    assert {r.partition for r in some} == {
        f"{prefix}@{base}.manager"
        for prefix in ("/log/CSTR/", "/nav/PROTOBUF/test.NavStatus/", "/state/JSON/", "/Foo/")
    }
    # "/": everything, the malformed message dropped (DROPMALFORMED)
    assert sorted((r.group, r.scheme, r.text) for r in every) == [
        ("Foo", "CSTR", "foo"),
        ("FooBar", "CSTR", "not Foo"),
        ("a/b", "CSTR", "slash group"),
        ("log", "CSTR", "hello"),
        ("log", "CSTR", "last"),
        ("nav", "PROTOBUF", None),
        ("other", "CSTR", "only for /"),
        ("state", "JSON", '{"depth": 5}'),
    ]
    assert all(r.error is None for r in every)


def test_schemes_3_and_4_and_gobyd_internal_groups_are_read_as_goby3_writes_them(spark, tmp_path):
    """Messages as goby3 3.x clients send them: schemes 3 and 4 as numbers (a subscription
    by number reads them), and gobyd's hold handshake, hidden unless includeInternalGroups."""
    base = str(tmp_path / "g")
    daemon = GobyDaemon(socket_name=base)
    queries = {
        "goby_3": memory_query(
            spark, tmp_path, "goby", "goby_3", socketName=base, subscribe="/raw3/3/"
        ),
        "goby_every": memory_query(
            spark, tmp_path, "goby", "goby_every", socketName=base, subscribe="/"
        ),
        "goby_internal": memory_query(
            spark,
            tmp_path,
            "goby",
            "goby_internal",
            socketName=base,
            subscribe="/",
            includeInternalGroups="true",
        ),
    }
    publisher = TestPublisher(ManagerAddress.ipc(socket_name=base))
    hold_request = (
        manager_messages()
        .ManagerRequest(request=2, client_name="navigator", client_pid=4321, ready=True)
        .SerializeToString()
    )
    not_warm = f"thread != '{WARM}'"
    try:

        def every_query_warm():
            publisher.send(b"/raw3/3/RawString/4321/" + WARM.encode() + b"/\0warm")
            return all(rows(spark, name, f"thread = '{WARM}'") for name in queries)

        wait_until(
            every_query_warm,
            timeout=120,
            interval=0.5,
            what="every query's subscription to reach the publisher",
        )
        publisher.send(
            b"/raw3/3/RawString/4321/9af3/\0three",
            b"/raw4/4/Packed/4321/9af3/\0four",
            HOLD_REQUEST + b"4321/9af3/\0" + hold_request,
            cstr("log", "last"),
        )
        wait_until(
            lambda: (
                rows(spark, "goby_every", "group = 'log'")
                and rows(spark, "goby_internal", "group = 'log'")
            ),
            timeout=90,
            interval=0.5,
            what="the messages",
        )
        for query in queries.values():
            query.processAllAvailable()
        by_number = rows(spark, "goby_3", not_warm)
        every = rows(spark, "goby_every", not_warm)
        internal = rows(spark, "goby_internal", not_warm)
    finally:
        for query in queries.values():
            query.stop()
        publisher.close()
        daemon.close()
    assert [(r.group, r.scheme, r.scheme_id, r.type, bytes(r.payload)) for r in by_number] == [
        ("raw3", "3", 3, "RawString", b"three")
    ]
    assert sorted((r.group, r.scheme, r.scheme_id) for r in every) == [
        ("log", "CSTR", 0),
        ("raw3", "3", 3),
        ("raw4", "4", 4),
    ]
    hidden = [r for r in internal if r.group.startswith("goby::zeromq::_internal")]
    assert ("goby::zeromq::_internal_manager_request", bytes(hold_request)) in {
        (r.group, bytes(r.payload)) for r in hidden
    }
    assert sorted(r.group for r in internal if r not in hidden) == ["log", "raw3", "raw4"]


def test_spark_writes_messages_a_goby_client_parses(spark, tmp_path, send_core):
    base = str(tmp_path / "g")
    daemon = GobyDaemon(socket_name=base)
    subscriber = zmq.Context.instance().socket(zmq.SUB)
    subscriber.setsockopt(zmq.LINGER, 0)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"/out/")
    subscriber.connect(f"ipc://{base}.xpub")
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "1.json").write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {"group": "out", "scheme": "CSTR", "text": "hello"},
                {
                    "group": "out",
                    "scheme": "JSON",
                    "type": "nlohmann::json",
                    "text": '{"depth": 5}',
                },
                {
                    "group": "out",
                    "scheme": "1",
                    "type": "test.NavStatus",
                    "payload": NAV_STATUS.hex(),
                },
                {"group": None, "scheme": "CSTR", "text": "no group: skipped"},
                {"group": "out", "scheme": "3", "type": "RawString", "payload": "0102"},
                {"group": "out", "scheme": "MSGPACK", "type": "Packed", "payload": "03"},
                {"group": "out/sub", "scheme": "CSTR", "text": "a slash: skipped"},
                {"group": "out", "scheme": "CSTR", "text": "bye"},
            ]
        )
        + "\n"
    )
    writer = (
        spark.readStream.schema(
            "group STRING, scheme STRING, type STRING, text STRING, payload STRING"
        )
        .json(str(inbox))
        .selectExpr("group", "scheme", "type", "text", "unhex(payload) AS payload")
        .writeStream.format("goby")
        .option("sendCore", send_core)
        .option("socketName", base)
        .option("waitForSubscribers", "60")
        .option("checkpointLocation", str(tmp_path / "cp-writer"))
        .trigger(availableNow=True)
        .start()
    )
    received = []
    try:
        while len(received) < 6 and subscriber.poll(90_000):
            received.append(subscriber.recv())
        writer.awaitTermination(60)
        assert writer.exception() is None
    finally:
        writer.stop()
        subscriber.close(0)
        daemon.close()
    heads = [GOBY_IDENTIFIER.match(frame) for frame in received]
    assert all(heads), received
    assert [h.group(1, 2, 3) for h in heads] == [
        (b"out", b"CSTR", b"CSTR"),
        (b"out", b"JSON", b"nlohmann::json"),
        (b"out", b"PROTOBUF", b"test.NavStatus"),
        (b"out", b"3", b"RawString"),
        (b"out", b"4", b"Packed"),
        (b"out", b"CSTR", b"CSTR"),
    ]  # 3 and 4: numbers, as 3.x
    assert [frame[h.end() :] for frame, h in zip(received, heads)] == [
        b"hello\0",
        BSON_DEPTH_5,
        NAV_STATUS,
        b"\x01\x02",
        b"\x03",
        b"bye\0",
    ]
    pids = {int(h.group(4)) for h in heads}
    assert len(pids) == 1 and pids != {os.getpid()}  # a Python worker's pid
    assert (APP_NAME, pids.pop()) in daemon.clients  # clientName: the application's


def test_hold_keeps_spark_writes_back_until_the_required_client_is_ready(
    spark, tmp_path, send_core
):
    base = str(tmp_path / "g")
    daemon = GobyDaemon(socket_name=base, required_clients=["navigator"])
    subscriber = zmq.Context.instance().socket(zmq.SUB)
    subscriber.setsockopt(zmq.LINGER, 0)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"/held/")
    subscriber.connect(f"ipc://{base}.xpub")
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "1.json").write_text("".join(json.dumps({"n": n}) + "\n" for n in range(30)))
    navigator = RawClient(f"ipc://{base}.manager", "navigator", 777)
    writer = (
        spark.readStream.schema("n INT")
        .json(str(inbox))
        .coalesce(1)
        .selectExpr("'held' AS group", "'CSTR' AS scheme", "cast(n AS STRING) AS text")
        .writeStream.format("goby")
        .option("sendCore", send_core)
        .option("socketName", base)
        .option("waitForSubscribers", "60")
        .option("holdTimeout", "120")
        .option("checkpointLocation", str(tmp_path / "cp-writer"))
        .trigger(availableNow=True)
        .start()
    )
    received = []
    try:
        wait_until(
            lambda: any(name == APP_NAME for name, _ in set(daemon.hold_askers)),
            timeout=90,
            what="the writer to ask gobyd for the hold state",
        )
        assert not subscriber.poll(2000), "a message got through while gobyd holds"
        assert writer.isActive and daemon.hold
        assert navigator.hold_state(ready=True, until=False)[1] is False
        while len(received) < 30 and subscriber.poll(60_000):
            received.append(subscriber.recv())
        writer.awaitTermination(60)
        assert writer.exception() is None
    finally:
        writer.stop()
        navigator.close()
        subscriber.close(0)
        daemon.close()
    texts = [frame.split(b"\0")[1].decode() for frame in received]
    assert texts == [str(n) for n in range(30)]


def restarted_daemon(port: int, timeout: float = 10.0) -> GobyDaemon:
    """A daemon on the port of one just closed: libzmq unbinds a closed socket in its I/O
    thread, so on a loaded machine the port may still be taken for a moment."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return GobyDaemon(tcp_port=port)
        except OSError as exc:
            if "Address already in use" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_reader_follows_a_gobyd_restart_without_losing_or_repeating_rows(spark, tmp_path):
    daemon = GobyDaemon(tcp_port=0)
    manager = ManagerAddress.tcp("127.0.0.1", daemon.tcp_port)
    query = memory_query(
        spark, tmp_path, "goby", "goby_restart", managerPort=str(daemon.tcp_port), subscribe="/r/"
    )
    publisher = TestPublisher(manager)

    def data_rows():
        return [r.text for r in rows(spark, "goby_restart", "error is null and text != 'warm'")]

    def warm(publisher):
        before = len(rows(spark, "goby_restart", "text = 'warm'"))

        def seen():
            publisher.send(cstr("r", "warm"))
            return len(rows(spark, "goby_restart", "text = 'warm'")) > before

        wait_until(seen, timeout=120, interval=0.5, what="the reader to receive from gobyd")

    try:
        warm(publisher)
        publisher.send(*(cstr("r", str(n)) for n in range(5)))
        wait_until(lambda: len(data_rows()) == 5, timeout=60, what="rows before the restart")
        old_xpub = daemon.xpub_port
        publisher.close()
        daemon.close()
        daemon = restarted_daemon(manager_port(manager))
        assert daemon.xpub_port != old_xpub
        publisher = TestPublisher(manager)
        warm(publisher)  # the reader asked the Manager again and reconnected
        publisher.send(*(cstr("r", str(n)) for n in range(5, 10)))
        wait_until(lambda: len(data_rows()) >= 10, timeout=60, what="rows after the restart")
        query.processAllAvailable()  # a duplicate would show now
        result = rows(spark, "goby_restart", "error is null and text != 'warm'")
    finally:
        query.stop()
        publisher.close()
        daemon.close()
    assert [r.text for r in result] == [str(n) for n in range(10)]
    assert {r.partition for r in result} == {f"/r/@127.0.0.1:{manager_port(manager)}"}
    assert [r.offset for r in result] == sorted({r.offset for r in result})
    assert {r.endpoint for r in result} == {
        f"tcp://127.0.0.1:{old_xpub}",
        f"tcp://127.0.0.1:{daemon.xpub_port}",
    }


def manager_port(manager: ManagerAddress) -> int:
    return int(manager.endpoint.rsplit(":", 1)[1])


def test_unreachable_manager_fails_the_query_naming_the_address(spark, tmp_path):
    nobody = str(tmp_path / "nobody")
    query = memory_query(
        spark, tmp_path, "goby", "goby_nobody", socketName=nobody, managerTimeout="2"
    )
    started = time.monotonic()
    try:
        with pytest.raises(StreamingQueryException) as caught:
            query.awaitTermination(120)
        elapsed = time.monotonic() - started
    finally:
        query.stop()
    assert elapsed < 120
    error = caught.value
    assert re.search(
        rf"gobyd's Manager at ipc://{re.escape(nobody)}\.manager did not answer "
        rf"within 2 s \(managerTimeout\)",
        str(error),
    )


def varint(n: int) -> bytes:
    """A protobuf base-128 varint (two's complement for a negative int64), from the encoding
    spec."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def fix_payload(seconds: int) -> bytes:
    """``test.Fix{at: Timestamp{seconds}, x: 1.5}`` in the protobuf encoding, by hand: field 1
    (length-delimited) holding field 1 (varint), then field 2 (64-bit)."""
    timestamp = b"\x08" + varint(seconds)
    return b"\x0a" + varint(len(timestamp)) + timestamp + b"\x11" + struct.pack("<d", 1.5)


def write_fix_descriptor_set(path) -> str:
    """A FileDescriptorSet as ``protoc --include_imports`` builds it for ``test.Fix
    {google.protobuf.Timestamp at = 1; double x = 2;}``: with google/protobuf/timestamp.proto."""
    F = descriptor_pb2.FieldDescriptorProto
    timestamp = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp)
    proto = descriptor_pb2.FileDescriptorProto(
        name="test/fix.proto", package="test", syntax="proto3", dependency=[timestamp.name]
    )
    fix = proto.message_type.add(name="Fix")
    fix.field.add(
        name="at",
        number=1,
        label=F.LABEL_OPTIONAL,
        type=F.TYPE_MESSAGE,
        type_name=".google.protobuf.Timestamp",
    )
    fix.field.add(name="x", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_DOUBLE)
    path.write_bytes(descriptor_pb2.FileDescriptorSet(file=[proto, timestamp]).SerializeToString())
    return str(path)


def test_a_poison_message_is_a_malformed_row_that_a_restart_gets_past(spark, tmp_path, contained):
    """A Timestamp of seconds 2**62 (valid protobuf, no JSON form) between good messages:
    FAILFAST fails naming it; the same query restarted from its checkpoint with PERMISSIVE
    delivers it as a malformed row naming the error, and every good row once."""
    base = str(tmp_path / "g")
    daemon = GobyDaemon(socket_name=base)
    descriptors = write_fix_descriptor_set(tmp_path / "fix.pb")
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    peer = RawClient(f"ipc://{base}.manager", "poisoner", 4321)

    def start(mode: str):
        return (
            spark.readStream.format("goby")
            .option("socketName", base)
            .option("subscribe", "/nav/")
            .option("protobufDescriptorSet", descriptors)
            .option("mode", mode)
            .option("spoolPath", str(tmp_path / "spool"))
            .load()
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    def sink_rows() -> list:
        try:
            return spark.read.parquet(str(sink)).orderBy("offset").collect()
        except Exception:  # no file written yet
            return []

    def fix(seconds: int) -> bytes:
        return identifier("nav", "PROTOBUF", "test.Fix", 4321, "9af3") + fix_payload(seconds)

    failing = start("FAILFAST")
    try:

        def warm() -> bool:  # subscriptions travel SUB -> XPUB -> XSUB -> PUB
            peer.pub.send(fix(0))
            return bool(sink_rows())

        wait_until(warm, timeout=120, interval=0.5, what="a first row in the sink")
        peer.pub.send(fix(1))
        peer.pub.send(fix(2**62))  # the poison
        peer.pub.send(fix(2))
        with pytest.raises(StreamingQueryException) as failure:
            failing.awaitTermination(90)
    finally:
        failing.stop()
    message = str(failure.value)
    assert "mode=FAILFAST" in message and "Timestamp is not valid" in message
    poison_offset = int(re.search(r"at offset (\d+)", message).group(1))

    restarted = start("PERMISSIVE")
    try:
        wait_until(lambda: any(r.error for r in sink_rows()), timeout=90, what="the restart's rows")

        def past_the_poison() -> bool:  # the replay came from the spool: the new capture's
            peer.pub.send(fix(3))  # subscription may still be on its way to the publisher
            return any(r.json and '"1970-01-01T00:00:03Z"' in r.json for r in sink_rows())

        wait_until(past_the_poison, timeout=60, interval=0.5, what="a row after the poison")
        restarted.processAllAvailable()
        result = sink_rows()
    finally:
        restarted.stop()
        peer.close()
        daemon.close()
    # the restart's gap row (capture did not run between the two queries) is not malformed
    gaps = [r for r in result if r.error is not None and r.error.startswith("gap:")]
    assert len(gaps) == 1 and "was not running" in gaps[0].error
    [poison] = [r for r in result if r.error is not None and r not in gaps]
    assert poison.offset == poison_offset
    assert poison.error.startswith("malformed payload of 'nav/test.Fix': PROTOBUF payload")
    assert "Timestamp is not valid" in poison.error and len(poison.error) < 400
    assert bytes(poison.payload) == fix_payload(2**62) and poison.group == "nav"
    shown = [json.loads(r.json)["at"] for r in result if r.error is None]
    after = shown[shown.index("1970-01-01T00:00:01Z") :]
    assert after[:2] == ["1970-01-01T00:00:01Z", "1970-01-01T00:00:02Z"]
    assert after[2:] and set(after[2:]) == {"1970-01-01T00:00:03Z"}, "sent until one arrived"
    assert set(shown[: -len(after)]) == {"1970-01-01T00:00:00Z"}, "warm-ups only before them"
    assert [r.offset for r in result] == list(range(len(result))), "each offset once"
