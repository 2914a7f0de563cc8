"""EBUS reading: payload packing against hand-built frames, decoding of malformed broadcasts,
and `format("ebus")` on channel prefixes through the broker's broadcast relay."""

from __future__ import annotations

import json
import os
import struct
import threading
import time
import tracemalloc
import uuid
import zlib

import pyarrow as pa
import pytest
import zmq

from spark_zmq.options import parse_options
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.protocols.ebus import (
    BroadcastRelay,
    Broker,
    EBus,
    PayloadError,
    Worker,
    pack,
    unpack,
)
from spark_zmq.protocols.ebus.discovery import ServiceChannels
from spark_zmq.protocols.ebus.wire import WORKER
from spark_zmq.protocols.ebus.worker import DEFAULT_MAX_BYTES
from spark_zmq.spark.rows import read_rows
from spark_zmq.spool.index import Source
from spark_zmq.stream_options import READER_OPTIONS
from spark_zmq.stream_settings import RowSettings
from support.common import wait_until
from support.fuzzing import Captured, spooled
from support.queries import memory_query

#: BSON of {"l": 42} (int32) and {"l": "hi"} (string), written out from the BSON spec
BSON_L_42 = bytes.fromhex("0c000000106c002a00000000")
BSON_L_HI = bytes.fromhex("0f000000026c000300000068690000")


def test_unpack_hand_built_frames_and_null():
    assert unpack(zlib.compress(BSON_L_42), DEFAULT_MAX_BYTES) == 42
    assert unpack(zlib.compress(BSON_L_HI), DEFAULT_MAX_BYTES) == "hi"
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert unpack(raw_deflate.compress(BSON_L_42) + raw_deflate.flush(), DEFAULT_MAX_BYTES) == 42
    assert unpack(b"null", DEFAULT_MAX_BYTES) is None and pack(None) == b"null"
    assert zlib.decompress(pack(42)) == BSON_L_42
    value = {"temperature": 21.5, "tags": ["a", "b"], "ok": True}
    assert unpack(pack(value), DEFAULT_MAX_BYTES) == value


@pytest.mark.parametrize(
    "frame, fault",
    [
        (b"not zlib at all", "not zlib-deflated"),
        (zlib.compress(b"\x05\x00\x00\x00"), "not a BSON document"),
        (zlib.compress(bytes.fromhex("0c000000106d002a00000000")), "without key 'l'"),
    ],
)
def test_unpack_names_the_layer_at_fault(frame, fault):
    with pytest.raises(PayloadError, match=fault):
        unpack(frame, DEFAULT_MAX_BYTES)


def decode(messages, **raw):
    protocol = EBus()
    return protocol.decode(
        pa.array(messages, pa.list_(pa.binary())),
        Source("tcp://127.0.0.1:5003", {"prefix": ""}),
        protocol.reader_settings(raw),
    )


#: the reference broker's announcements, as the fact sheet gives them
STARTED = [b"ebus/started", pack({"ebusmessage": "broker starting"})]
SHUTDOWN = [b"ebus/shutdown", pack({"ebusmessage": "broker stopping"})]
WORKERS_ECHO = [b"ebus/workers", pack({"ebusmessage": "active workers", "workers": ["echo"]})]


def test_decode_broadcasts_malformed_ones_and_broker_events():
    decoded = decode(
        [
            [b"A", pack({"x": 1})],
            [b"A", b"garbage"],
            [b"lonely"],
            STARTED,
            [b"B", b"null"],
            WORKERS_ECHO,
            SHUTDOWN,
            [b"ebus", b"null"],
            [b"ebusy", b"null"],
        ]
    )
    assert decoded.columns["channel"].to_pylist() == [
        "A",
        "A",
        None,
        "ebus/started",
        "B",
        "ebus/workers",
        "ebus/shutdown",
        "ebus",
        "ebusy",
    ]
    assert [json.loads(d) if d else d for d in decoded.columns["data"].to_pylist()[:4]] == [
        {"x": 1},
        None,
        None,
        {"ebusmessage": "broker starting"},
    ]
    errors = decoded.error.to_pylist()
    assert errors[0] is None and errors[3] is None and errors[4] is None
    assert "not zlib-deflated" in errors[1] and "1 frames of 6 bytes" in errors[2]
    assert decoded.payload.to_pylist()[2] == b"lonely"
    # the broker's channels (ebus and ebus/...) are hidden; ebusy is a user's channel
    assert decoded.keep.to_pylist() == [True, True, True, False, True, False, False, False, True]
    assert decode([[b"ebus", b"null"], WORKERS_ECHO], includeBrokerEvents="true").keep is None


@pytest.mark.spark
def test_channel_prefixes_select_broadcasts_through_the_relay(spark, tmp_path):
    relay = BroadcastRelay(pub_port=0, sub_port=0)
    publisher = zmq.Context.instance().socket(zmq.PUB)
    publisher.setsockopt(zmq.LINGER, 0)
    publisher.connect(f"tcp://127.0.0.1:{relay.pub_port}")
    queries = {}
    try:
        for name, options in (
            ("ebus_a", {"channels": "A"}),
            ("ebus_default", {}),
            ("ebus_all", {"includeBrokerEvents": "true"}),
        ):
            queries[name] = memory_query(
                spark, tmp_path, "ebus", name, subPort=relay.sub_port, **options
            )

        def both_see_warm_up():  # subscriptions travel SUB -> relay -> PUB: wait for them
            publisher.send_multipart([b"A/warm", pack(0)])
            return all(
                spark.sql(f"select * from {n} where channel = 'A/warm'").count() for n in queries
            )

        wait_until(both_see_warm_up, timeout=90, interval=0.5, what="subscriptions to settle")
        for channel, value in ((b"A", 1), (b"AB", {"v": 2}), (b"B", [3])):
            publisher.send_multipart([channel, pack(value)])
        publisher.send_multipart([b"A", b"broken"])
        publisher.send_multipart(WORKERS_ECHO)  # as the reference broker announces
        publisher.send_multipart([b"B", pack("last")])
        for query in queries.values():
            query.processAllAvailable()

        def rows(name):
            return [
                (r.channel, r.data, r.error is not None)
                for r in spark.sql(
                    f"select * from {name} where channel != 'A/warm' order by offset"
                ).collect()
            ]

        wait_until(
            lambda: (
                len(rows("ebus_a")) == 3
                and len(rows("ebus_all")) == 6
                and len(rows("ebus_default")) == 5
            ),
            timeout=60,
            what="the broadcasts",
        )
    finally:
        for query in queries.values():
            query.stop()
        publisher.close(0)
        relay.close()
    assert rows("ebus_a") == [("A", "1", False), ("AB", '{"v": 2}', False), ("A", None, True)]
    every = sorted(rows("ebus_all"), key=str)
    assert every[:5] == [
        ("A", "1", False),
        ("A", None, True),
        ("AB", '{"v": 2}', False),
        ("B", '"last"', False),
        ("B", "[3]", False),
    ]
    broker_event = every[5]
    assert broker_event[0] == "ebus/workers" and json.loads(broker_event[1]) == {
        "ebusmessage": "active workers",
        "workers": ["echo"],
    }
    # by default the broker's announcements are not rows, whatever their ebus/ channel
    assert sorted(rows("ebus_default"), key=str) == every[:5]


@pytest.mark.spark
@pytest.mark.parametrize("mode", ["DROPMALFORMED", "FAILFAST"])
def test_malformed_broadcasts_follow_mode(spark, tmp_path, mode):
    relay = BroadcastRelay(pub_port=0, sub_port=0)
    publisher = zmq.Context.instance().socket(zmq.PUB)
    publisher.setsockopt(zmq.LINGER, 0)
    publisher.connect(f"tcp://127.0.0.1:{relay.pub_port}")
    name = f"ebus_{mode.lower()}"
    query = (
        spark.readStream.format("ebus")
        .option("subPort", relay.sub_port)
        .option("channels", "A")
        .option("mode", mode)
        .option("spoolPath", str(tmp_path / "spool"))
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    def warm_up_seen():
        publisher.send_multipart([b"A/warm", pack(0)])
        return spark.sql(f"select * from {name}").count() > 0

    try:
        wait_until(warm_up_seen, timeout=90, interval=0.5, what="the subscription to settle")
        publisher.send_multipart([b"A", pack("good")])
        publisher.send_multipart([b"A", b"not zlib at all"])
        publisher.send_multipart([b"A-single-frame"])
        publisher.send_multipart([b"A", pack("also good")])
        if mode == "FAILFAST":
            with pytest.raises(Exception) as failure:
                query.awaitTermination(90)
            message = str(failure.value)
            assert "mode=FAILFAST" in message and "not zlib-deflated" in message
            return
        wait_until(
            lambda: spark.sql(f"select * from {name} where channel = 'A'").count() == 2,
            timeout=60,
            what="the well-formed broadcasts",
        )
        query.processAllAvailable()
        rows = spark.sql(
            f"select channel, data, error from {name} "
            "where channel is null or channel != 'A/warm' order by offset"
        ).collect()
    finally:
        query.stop()
        publisher.close(0)
        relay.close()
    assert [(r.channel, r.data, r.error) for r in rows] == [
        ("A", '"good"', None),
        ("A", '"also good"', None),
    ]


@pytest.mark.spark
def test_spark_writes_broadcasts_that_a_spark_reader_and_a_sub_receive(spark, tmp_path, send_core):
    relay = BroadcastRelay(pub_port=0, sub_port=0)
    subscriber = zmq.Context.instance().socket(zmq.SUB)
    subscriber.setsockopt(zmq.LINGER, 0)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"out/")
    subscriber.connect(f"tcp://127.0.0.1:{relay.sub_port}")
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "1.json").write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {"channel": "out/a", "data": '{"x": 1}'},
                {"channel": "out/b", "data": None},
                {"channel": "", "data": "2"},  # no channel: skipped (PERMISSIVE)
                {"channel": "out/c", "data": "{not json"},  # skipped
                {"channel": "out/d", "data": '[1, "two"]'},
            ]
        )
        + "\n"
    )
    writer = (
        spark.readStream.schema("channel STRING, data STRING")
        .json(str(inbox))
        .writeStream.format("ebus")
        .option("sendCore", send_core)
        .option("pubPort", relay.pub_port)
        .option("waitForSubscribers", "60")
        .option("checkpointLocation", str(tmp_path / "cp-writer"))
        .trigger(availableNow=True)
        .start()
    )
    received = []
    try:
        while len(received) < 3 and subscriber.poll(90_000):
            received.append(subscriber.recv_multipart())
        writer.awaitTermination(60)
        assert writer.exception() is None
    finally:
        writer.stop()
        subscriber.close(0)
        relay.close()
    assert [(channel, unpack(packed, DEFAULT_MAX_BYTES)) for channel, packed in received] == [
        (b"out/a", {"x": 1}),
        (b"out/b", None),
        (b"out/d", [1, "two"]),
    ]


def services_query(spark, tmp_path, broker: Broker, name: str):
    """A `channels=services` stream of ``broker`` into the memory table ``name``."""
    return memory_query(
        spark,
        tmp_path,
        "ebus",
        name,
        channels="services",
        subPort=broker.sub_port,
        frontendPort=broker.frontend_port,
    )


@pytest.mark.spark
def test_channels_services_follow_the_services_registered_at_the_broker(spark, tmp_path):
    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    backend = f"tcp://127.0.0.1:{broker.backend_port}"
    workers = [Worker(backend, "echo", lambda data: data)]
    publisher = zmq.Context.instance().socket(zmq.PUB)
    publisher.setsockopt(zmq.LINGER, 0)
    publisher.connect(f"tcp://127.0.0.1:{broker.pub_port}")
    query = services_query(spark, tmp_path, broker, "ebus_services")

    def channels_seen():
        return {r.channel for r in spark.sql("select channel from ebus_services").collect()}

    def arrives(channel):  # broadcast until the partition's SUB is subscribed
        publisher.send_multipart([b"other", pack("not a service")])
        publisher.send_multipart([channel.encode(), pack(channel)])
        return channel in channels_seen()

    try:
        wait_until(lambda: arrives("echo"), timeout=90, interval=0.5, what="echo's channel")
        workers.append(Worker(backend, "temperature", lambda data: data))  # joins mid-stream
        # a peer's service name that is a path and longer than a file name may be: its
        # partition's folder stays inside the spool and is found by its key
        workers.append(RawWorker(backend, LONG_SERVICE))
        for service in ("temperature", LONG_SERVICE):
            wait_until(
                lambda service=service: arrives(service),
                timeout=90,
                interval=0.5,
                what=f"the channel of service {service[:20]}...",
            )
        partitions = {
            r.partition for r in spark.sql("select distinct partition from ebus_services").collect()
        }
    finally:
        query.stop()
        for worker in workers:
            worker.close()
        publisher.close(0)
        broker.close()
    assert channels_seen() == {"echo", "temperature", LONG_SERVICE}
    assert partitions == {
        f"{service}@127.0.0.1:{broker.sub_port}"
        for service in ("echo", "temperature", LONG_SERVICE)
    }
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-ebus_services", "spool-ebus_services"]


#: a service name as a hostile worker may register it: a path, and 263 characters (its
#: partition key, quoted, is longer than a file name may be: 'File name too long' once
#: stopped capture)
LONG_SERVICE = "../" + "s" * 260


class RawWorker:
    """An EBUS worker written from the fact sheet (shared/protocols/ebus.md, "Worker <->
    broker"): a DEALER with identity ``W/<service>/<uuid>`` (the service cut to 40 characters:
    zmq takes identities of 255 bytes at most) that registers with READY and sends HEARTBEAT
    every 0.4 s (the broker gives a worker 5 heartbeats of 0.5 s)."""

    def __init__(self, backend: str, service: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, f"W/{service[:40]}/{uuid.uuid4()}".encode())
        self.sock.connect(backend)
        self.sock.send_multipart([b"EBW01", b"READY", b"null", service.encode()])
        self._stop = threading.Event()
        self._beats = threading.Thread(target=self._beat, daemon=True)
        self._beats.start()

    def _beat(self) -> None:
        while not self._stop.wait(0.4):
            self.sock.send_multipart([b"EBW01", b"HEARTBEAT"])

    def close(self) -> None:
        self._stop.set()
        self._beats.join()
        self.sock.close(0)


def forged_workers_announcement(workers: list) -> list[bytes]:
    """An ``ebus/workers`` broadcast as the fact sheet packs it: zlib(BSON({"l": {...}}))."""
    import bson

    document = {"ebusmessage": "active workers", "workers": workers}
    return [b"ebus/workers", zlib.compress(bson.encode({"l": document}))]


@pytest.mark.spark
def test_forged_workers_announcements_retire_nothing_and_a_new_service_joins_quickly(
    spark, tmp_path, contained
):
    """The broker's XPUB relays whatever any publisher on its XSUB (the pub port) sends, so an
    ``ebus/workers`` list is anyone's to forge. An empty one, sent over and over, once retired
    every partition until the next SERVICES ask (10 s), and the rows sent meanwhile were lost.
    Announcements now only prompt an ask (at most one a second): the broker's answer decides."""
    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    backend = f"tcp://127.0.0.1:{broker.backend_port}"
    workers = [Worker(backend, "echo", lambda data: data)]
    # A raw publisher on the broker's pub port; an XPUB, so that the subscriptions the broker
    # relays to its publishers show who reads what (discovery's ebus/workers SUB, each
    # partition's SUB).
    forger = zmq.Context.instance().socket(zmq.XPUB)
    forger.setsockopt(zmq.LINGER, 0)
    forger.connect(f"tcp://127.0.0.1:{broker.pub_port}")
    subscriptions: set[bytes] = set()

    def subscribed(prefix: bytes) -> bool:
        while forger.poll(0):
            message = forger.recv()
            if message[:1] == b"\x01":
                subscriptions.add(message[1:])
        return prefix in subscriptions

    query = services_query(spark, tmp_path, broker, "ebus_forged")

    def numbers_seen() -> set[int]:
        rows = spark.sql("select data from ebus_forged where channel = 'echo'").collect()
        return {json.loads(r.data)["n"] for r in rows if "n" in json.loads(r.data)}

    def echo_arrives() -> bool:  # broadcast until echo's partition reads
        forger.send_multipart([b"echo", pack({"warm": True})])
        return spark.sql("select 1 from ebus_forged where channel = 'echo'").count() > 0

    forged = forged_workers_announcement([])
    try:
        wait_until(echo_arrives, timeout=90, interval=0.5, what="echo's channel")
        wait_until(
            lambda: subscribed(b"ebus/workers"), what="discovery's subscription to ebus/workers"
        )
        sent = 0
        flood_until = time.monotonic() + 6  # past capture's 2 s leave grace, short of 10 s
        while time.monotonic() < flood_until:
            forger.send_multipart(forged)
            forger.send_multipart([b"echo", pack({"n": sent})])
            sent += 1
            time.sleep(0.1)
        registered = time.monotonic()  # a real service, with the flood going on
        workers.append(Worker(backend, "temperature", lambda data: data))
        while not subscribed(b"temperature"):
            forger.send_multipart(forged)
            assert time.monotonic() - registered < 5, "the new service did not join within 5 s"
            time.sleep(0.1)
        joined_after = time.monotonic() - registered
        wait_until(lambda: numbers_seen() == set(range(sent)), timeout=60, what="every row")
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
        for worker in workers:
            worker.close()
        forger.close(0)
        broker.close()
    assert joined_after < 5


def start_broker_on(ports: dict, timeout: float = 10.0):
    """A Broker on the given ports, retrying while the previous broker's ports are released."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return Broker(**ports)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.spark
def test_broker_restart_mid_stream_loses_and_duplicates_nothing_captured(spark, tmp_path):
    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    ports = dict(
        frontend_port=broker.frontend_port,
        backend_port=broker.backend_port,
        pub_port=broker.pub_port,
        sub_port=broker.sub_port,
    )
    publisher = zmq.Context.instance().socket(zmq.PUB)
    publisher.setsockopt(zmq.LINGER, 0)
    publisher.connect(f"tcp://127.0.0.1:{broker.pub_port}")
    output = tmp_path / "out"
    stream = (
        spark.readStream.format("ebus")
        .option("subPort", broker.sub_port)
        .option("channels", "seq")
        .option("spoolPath", str(tmp_path / "spool"))
        .load()
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    def values():
        if not (output / "_spark_metadata").exists():
            return [], []
        rows = spark.read.schema(stream.schema).parquet(str(output)).collect()
        return (
            [json.loads(r.data) for r in rows if r.error is None],
            [r.error for r in rows if r.error is not None],
        )

    def reaches_the_reader(marker: str):
        publisher.send_multipart([b"seq/probe", pack(marker)])
        return marker in values()[0]

    try:
        wait_until(
            lambda: reaches_the_reader("before"),
            timeout=120,
            interval=0.5,
            what="the reader's subscription to reach the broker",
        )
        for n in range(100):
            publisher.send_multipart([b"seq", pack(n)])
        wait_until(
            lambda: set(range(100)) <= set(values()[0]), timeout=60, what="the first 100 values"
        )
        broker.close()  # the broker goes away ...
        broker = start_broker_on(ports)  # ... and comes back on its ports
        wait_until(
            lambda: reaches_the_reader("after"),
            timeout=120,
            interval=0.5,
            what="the stream to resume through the new broker",
        )
        for n in range(100, 200):
            publisher.send_multipart([b"seq", pack(n)])
        wait_until(
            lambda: set(range(100, 200)) <= set(values()[0]),
            timeout=60,
            what="the values sent after the restart",
        )
        got, errors = values()
    finally:
        query.stop()
        publisher.close(0)
        broker.close()
    numbers = [v for v in got if isinstance(v, int)]
    assert sorted(numbers) == list(range(200)), "each value exactly once"
    assert any("gap" in error and "dropped" in error for error in errors), errors


def packed_by_hand(value_element: bytes) -> bytes:
    """zlib(BSON {"l": <element>}) from the BSON spec: ``value_element`` is the element's type
    byte, then ``l\\0``, then its value."""
    body = value_element + b"\0"
    return zlib.compress(struct.pack("<i", len(body) + 4) + body)


def binary_bomb(size: int) -> bytes:
    """zlib(BSON {"l": <binary of ``size`` zero bytes>}), deflated a megabyte at a time: a
    valid packed frame of about size / 1000 bytes."""
    element = b"\x05l\0" + struct.pack("<i", size) + b"\x00"
    deflate = zlib.compressobj()
    out = [deflate.compress(struct.pack("<i", 4 + len(element) + size + 1) + element)]
    for _ in range(size >> 20):
        out.append(deflate.compress(bytes(1 << 20)))
    out.append(deflate.compress(bytes(size & ((1 << 20) - 1)) + b"\0"))
    return b"".join(out) + deflate.flush()


@pytest.mark.spark
def test_a_decompression_bomb_is_a_malformed_row_and_inflates_no_further(
    spark, tmp_path, contained
):
    """A ~100 KB frame of valid BSON holding 100 MB of zeros, between good broadcasts, with
    maxMessageBytes=1m: a malformed row with a short error and the frame as payload; every good
    row delivered; reading the spool's rows again takes a few megabytes of Python memory."""
    relay = BroadcastRelay(pub_port=0, sub_port=0)
    publisher = zmq.Context.instance().socket(zmq.PUB)
    publisher.setsockopt(zmq.LINGER, 0)
    publisher.connect(f"tcp://127.0.0.1:{relay.pub_port}")
    spool = str(tmp_path / "spool")
    bomb = binary_bomb(100 << 20)
    query = memory_query(
        spark,
        tmp_path,
        "ebus",
        "ebus_bomb",
        subPort=str(relay.sub_port),
        channels="A",
        maxMessageBytes="1m",
        spoolPath=spool,
    )

    def good(n: int) -> bytes:  # {"l": n} (int32)
        return packed_by_hand(b"\x10l\0" + struct.pack("<i", n))

    def rows(where: str = "true") -> list:
        return spark.sql(f"select * from ebus_bomb where {where} order by offset").collect()

    try:

        def warm() -> bool:
            publisher.send_multipart([b"A/warm", good(0)])
            return bool(rows())

        wait_until(warm, timeout=90, interval=0.5, what="the subscription to settle")
        for frames in ([b"A", good(1)], [b"A", bomb], [b"A", good(2)]):
            publisher.send_multipart(frames)
        wait_until(lambda: len(rows("channel = 'A'")) == 3, timeout=60, what="three broadcasts")
        query.processAllAvailable()
        result = rows("channel = 'A'")
    finally:
        query.stop()
        publisher.close(0)
        relay.close()
        print(f"Python workers' peak RSS (VmHWM): {worker_peaks_mb()} MB")
    assert [(r.data, r.error is None) for r in result] == [("1", True), (None, False), ("2", True)]
    malformed = result[1]
    assert "inflate to more than 1048576 bytes (maxMessageBytes)" in malformed.error
    assert len(malformed.error) < 300 and bytes(malformed.payload) == bomb
    print(f"bomb frame {len(bomb)} bytes; error {len(malformed.error)} characters")


def worker_peaks_mb() -> list[int]:
    """The peak resident memory (VmHWM, MB) of each Python worker of the local Spark session
    (the processes of pyspark.daemon and the workers it forked)."""
    peaks = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"pyspark.daemon" not in f.read():
                    continue
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        peaks.append(int(status["VmHWM"].split()[0]) // 1024)
    return sorted(peaks)


def test_reading_a_bomb_takes_the_memory_of_max_message_bytes_not_of_the_bomb():
    """read_rows of a spooled frame that inflates to 100 MB, with maxMessageBytes=1m: the
    Python memory it takes at its peak stays within a few MB (tracemalloc)."""
    bomb = binary_bomb(100 << 20)
    source = Source("tcp://127.0.0.1:5003", {"prefix": ""})
    rows = Captured(
        ([b"A", bomb], [b"A", packed_by_hand(b"\x10l\0" + struct.pack("<i", 7))]), (), 0, 2
    )
    options = parse_options("ebus", READER_OPTIONS + EBus.reader_options, {"maxMessageBytes": "1m"})
    with spooled(source, rows) as part:
        tracemalloc.start()
        try:
            settings = EBus().read_settings(options)
            batches = list(read_rows(EBus(), settings, RowSettings.of(options), part))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    print(f"bomb frame {len(bomb)} bytes: peak Python memory {peak / 1e6:.1f} MB")
    assert peak < 8 << 20, "inflating stopped at maxMessageBytes (1 MB), not at 100 MB"
    bombed, good = pa.Table.from_batches(batches).to_pylist()
    assert "inflate to more than 1048576 bytes" in bombed["error"] and good["data"] == "7"


def test_service_discovery_inflates_no_answer_or_announcement_past_max_message_bytes():
    """The driver's side: a broker (raw ROUTER) that answers SERVICES with bombs, and
    announcements on ``ebus/workers`` (raw PUB) that are bombs, then good ones. Discovery
    ignores the bombs; an announcement only prompts a SERVICES ask, and the broker's first good
    answer has the service join; its Python memory stays within a few MB (tracemalloc) with
    maxMessageBytes=1m."""
    bomb = binary_bomb(100 << 20)
    workers = bson_document(b"\x020\0" + bson_string("svc"))  # ["svc"]
    announcement = packed_by_hand(b"\x03l\0" + bson_document(b"\x04workers\0" + workers))
    good_answer = packed_by_hand(b"\x04l\0" + workers)  # {"l": ["svc"]}
    context = zmq.Context.instance()
    frontend, sub = context.socket(zmq.ROUTER), context.socket(zmq.PUB)
    for sock in (frontend, sub):
        sock.setsockopt(zmq.LINGER, 0)
    frontend_port = frontend.bind_to_random_port("tcp://127.0.0.1")
    sub_port = sub.bind_to_random_port("tcp://127.0.0.1")
    joined: list[str] = []
    listener = type(
        "Listener",
        (),
        {
            "endpoint_joined": lambda self, e: joined.append(e.key),
            "endpoint_left": lambda self, k: None,
        },
    )()
    discovery = ServiceChannels(
        f"tcp://127.0.0.1:{frontend_port}",
        f"tcp://127.0.0.1:{sub_port}",
        lambda service: Endpoint(service, "tcp://127.0.0.1:1"),
        max_bytes=1 << 20,
    )
    answers: list[bytes] = []

    def answer_services():  # ['', 'EBW01', 'SERVICES', requestId, pack([...])]
        while frontend.poll(50):
            identity, *frames = frontend.recv_multipart()
            if frames[2:3] == [b"SERVICES"]:
                request_id = frames[4] if len(frames) > 4 else b""
                answer = bomb if len(answers) < 2 else good_answer  # bombs first
                frontend.send_multipart([identity, b"", WORKER, b"SERVICES", request_id, answer])
                answers.append(answer)

    tracemalloc.start()
    try:
        discovery.start(listener)

        def announced() -> bool:
            answer_services()
            sub.send_multipart([b"ebus/workers", bomb])
            sub.send_multipart([b"ebus/workers", announcement])  # prompts an ask
            return "svc" in joined

        wait_until(announced, timeout=30, interval=0.2, what="the service to join")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        discovery.close()
        frontend.close(0)
        sub.close(0)
    print(f"bomb frame {len(bomb)} bytes: discovery's peak Python memory {peak / 1e6:.1f} MB")
    assert answers[:2] == [bomb, bomb], "the broker answered SERVICES with bombs first"
    assert joined == ["svc"] and peak < 16 << 20


def bson_document(elements: bytes) -> bytes:
    return struct.pack("<i", len(elements) + 5) + elements + b"\0"


def bson_string(text: str) -> bytes:
    data = text.encode() + b"\0"
    return struct.pack("<i", len(data)) + data
