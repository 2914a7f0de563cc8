"""ZeroEQ wire facts: event ids (the fact sheet's vectors), records, sessions, decoding."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st

from spark_zmq.protocols.contract import concatenated
from spark_zmq.protocols.zeroeq import (
    MEERKAT,
    PublisherRecord,
    ZeroEQ,
    event_id,
    event_id_text,
    in_session,
    parse_address,
    parse_event,
    request_vocabulary,
)
from spark_zmq.spool.index import Source
from support.fuzzing import fuzz

ECHO_WIRE = "dddb197182000e88e3986e01f92e2e28"


@pytest.mark.parametrize(
    "name, wire",
    [
        ("zeroeq::test::Echo", ECHO_WIRE),
        ("zeroeq::Meerkat", "bf96a55c8bd7ca42e4b4333b90187236"),
        ("Echo", "416b1c3011f81ed325619d95da0d3811"),
    ],
)
def test_event_id_wire_bytes(name, wire):
    assert event_id(name).hex() == wire


@pytest.mark.parametrize(
    "name, text",
    [
        ("zeroeq::test::Echo", "880e00827119dbdd:282e2ef9016e98e3"),
        ("", "d41d8cd98f00b204:e9800998ecf8427e"),
        ("The quick brown fox jumps over the lazy dog.", "e4d909c290d0fb1c:a068ffaddf22cbd0"),
    ],
)
def test_event_id_text_form(name, text):
    assert event_id_text(event_id(name)) == text


def test_parse_event_accepts_names_wire_hex_and_text_ids():
    wire = bytes.fromhex(ECHO_WIRE)
    assert parse_event("zeroeq::test::Echo") == (wire, "zeroeq::test::Echo")
    assert parse_event(ECHO_WIRE) == (wire, None)
    assert parse_event("880e00827119dbdd:282e2ef9016e98e3") == (wire, None)


def test_record_keys_are_case_insensitive_and_instance_name_gives_the_address():
    shipped = PublisherRecord.parse(
        "127.0.0.1:5555._zeroeq_pub._tcp.local.",
        {
            b"Session": b"alice",
            b"User": b"bob",
            b"Type": b"ZeroEQ",
            b"Application": b"viewer",
            b"Instance": b"1:2",
        },
    )
    seed = PublisherRecord.parse(
        "host.example:6000._zeroeq_pub._tcp.local.",
        {b"session": b"alice", b"vocabulary": b"a;b", b"vocabulary_request": b"tcp://h:1"},
    )
    assert shipped.session == seed.session == "alice"
    assert shipped.instance_name == "127.0.0.1:5555" and shipped.address == "tcp://127.0.0.1:5555"
    assert shipped.txt["application"] == "viewer" and shipped.txt["user"] == "bob"
    assert seed.vocabulary_request == "tcp://h:1" and seed.address == "tcp://host.example:6000"
    assert shipped.vocabulary == set() and shipped.vocabulary_request is None
    ids = PublisherRecord.parse(
        "h:1._zeroeq_pub._tcp.local.",
        {b"vocabulary": b"880e00827119dbdd:282e2ef9016e98e3;nonsense;" + ECHO_WIRE.encode()},
    )
    assert ids.vocabulary == {event_id("zeroeq::test::Echo")}
    with pytest.raises(ValueError):
        PublisherRecord.parse("not-an-address._zeroeq_pub._tcp.local.", {})


def test_session_filter():
    assert in_session("alice", "alice")
    assert not in_session("bob", "alice")
    assert in_session(None, "alice")  # a record without a session is accepted
    assert in_session("bob", "")  # empty session: no filtering


def test_default_session_order(monkeypatch):
    from spark_zmq.protocols.zeroeq import default_session

    monkeypatch.setenv("ZEROEQ_SESSION", "old")
    monkeypatch.setenv("ZEROEQ_PUB_SESSION", "new")
    assert default_session() == "new"
    monkeypatch.delenv("ZEROEQ_PUB_SESSION")
    assert default_session() == "old"
    monkeypatch.delenv("ZEROEQ_SESSION")
    import getpass

    assert default_session() == getpass.getuser()


def test_parse_address():
    assert parse_address("tcp://127.0.0.1:5555") == ("127.0.0.1", 5555)
    assert parse_address("example:1") == ("example", 1)
    assert parse_address("[::1]:7") == ("::1", 7)
    for bad in ("example", ":5555", "udp://a:1", "a:0", "a:x", "a:\u0665", "a:123456"):
        with pytest.raises(ValueError):
            parse_address(bad)
    # hosts that zmq's connect refuses (EINVAL) are refused here, naming the host
    for bad in ("-bad:5555", "_x:1", "a b:1", "h\u00e9:1", "*:1", "a/b:1"):
        with pytest.raises(ValueError, match="neither an IP address nor a host name"):
            parse_address(bad)


def decode(messages, metadata=None, **raw_options):
    protocol = ZeroEQ()
    settings = protocol.reader_settings(raw_options)
    frames = pa.array(messages, pa.list_(pa.binary()))
    source = Source(
        "tcp://127.0.0.1:1", {"publisher": "127.0.0.1:1", "session": "s", **(metadata or {})}
    )
    return protocol.decode(frames, source, settings)


def test_decode_well_formed_and_malformed_messages():
    echo = event_id("zeroeq::test::Echo")
    decoded = decode([[echo, b"hello"], [echo], [b"short", b"x"], [echo, b"a", b"b"]])
    ids = decoded.columns["event_id"].to_pylist()
    assert ids == [ECHO_WIRE, ECHO_WIRE, None, None]
    assert decoded.payload.to_pylist() == [b"hello", b"", b"shortx", echo + b"ab"]
    errors = decoded.error.to_pylist()
    assert errors[:2] == [None, None]
    assert "2 frames of 5, 1 bytes" in errors[2]
    assert "3 frames of 16, 1, 1 bytes" in errors[3]
    assert decoded.columns["session"].to_pylist() == ["s"] * 4
    assert decoded.keep is None


def test_decode_names_from_events_option_filters_by_the_endpoint_subscription():
    echo, meerkat = event_id("zeroeq::test::Echo"), event_id(MEERKAT)
    decoded = decode(
        [[echo, b"1"], [meerkat], [b"bad"]], {"events": echo.hex()}, events="zeroeq::test::Echo"
    )
    assert decoded.columns["event"].to_pylist() == ["zeroeq::test::Echo", None, None]
    assert decoded.keep.to_pylist() == [True, False, False]
    assert decoded.error.to_pylist()[2] is not None  # malformed rows still go through `mode`


def test_decode_names_from_vocabulary_and_excluded_events():
    echo, other = event_id("zeroeq::test::Echo"), event_id("other")
    metadata = {"names": json.dumps({echo.hex(): "zeroeq::test::Echo"}), "excluded": other.hex()}
    decoded = decode([[echo, b"1"], [other, b"2"]], metadata)
    assert decoded.columns["event"].to_pylist() == ["zeroeq::test::Echo", None]
    assert decoded.keep.to_pylist() == [True, False]


ECHO_ID, OTHER_ID = event_id("zeroeq::test::Echo"), event_id("other")
#: the metadata sources differ by: vocabularies, subscriptions (Meerkat, excluded), columns
SOURCE_METADATA = [
    {},
    {"instance": "i", "user": "u", "application": "app"},
    {"names": json.dumps({OTHER_ID.hex(): "other"})},
    {"names": json.dumps({OTHER_ID.hex(): "its own name for other"}), "session": "t"},
    {"events": ECHO_ID.hex()},
    {"excluded": OTHER_ID.hex()},
]
zeroeq_messages = st.one_of(
    st.tuples(st.sampled_from([ECHO_ID, OTHER_ID]), st.binary(max_size=4)).map(list),
    st.just([ECHO_ID]),
    st.lists(st.binary(max_size=20), max_size=3),  # malformed mostly, none without frames
)


@fuzz(100)
@given(
    runs=st.lists(
        st.tuples(st.sampled_from(range(len(SOURCE_METADATA))), st.lists(zeroeq_messages)),
        min_size=1,
        max_size=5,
    ),
    named=st.booleans(),
)
def test_runs_of_many_sources_decode_at_once_as_each_alone_100_examples(runs, named):
    """``decode_runs`` (a read task's runs of many partitions in one call) gives each run
    what ``decode`` gives it alone: its source's columns, names and subscription."""
    protocol = ZeroEQ()
    settings = protocol.reader_settings({"events": "zeroeq::test::Echo"} if named else {})
    sources = [
        (Source(f"tcp://127.0.0.1:{n}", {"publisher": str(n), **SOURCE_METADATA[which]}), len(m))
        for n, (which, m) in enumerate(runs)
    ]
    messages = [message for _, run in runs for message in run]
    frames = pa.array(messages, pa.list_(pa.binary()))

    together = protocol.decode_runs(frames, sources, settings)
    alone, at = [], 0
    for source, count in sources:
        alone.append(protocol.decode(frames.slice(at, count), source, settings))
        at += count
    expected = concatenated(ZeroEQ.columns.names, alone)

    assert together.payload.equals(expected.payload)
    assert together.error.equals(expected.error)
    for name in ZeroEQ.columns.names:
        assert together.columns[name].equals(expected.columns[name]), name
    assert kept(together, len(messages)) == kept(expected, len(messages))


def kept(decoded, n: int) -> list[bool]:
    """Which messages a decoding keeps (``keep`` None: all)."""
    return [True] * n if decoded.keep is None else decoded.keep.to_pylist()


def test_a_request_over_the_bound_is_dropped_and_the_server_serves_on():
    """Anyone who reaches a vocabulary (or management) port may send to it: a request frame
    over 64 KiB is dropped unread (no reply), and the next well-formed request is answered."""
    from spark_zmq.protocols.zeroeq.reqrep import MAX_REQUEST_BYTES
    from spark_zmq.protocols.zeroeq.vocabulary import Vocabulary

    vocabulary = Vocabulary("publisher", "tcp://127.0.0.1:0")
    vocabulary.register(event_id("zeroeq::test::Echo"), "zeroeq::test::Echo")
    request_type = event_id("zeroeq::vocabulary::Request")
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(vocabulary.address)
        sock.send_multipart([request_type, b"x" * (MAX_REQUEST_BYTES + 1)])
        assert not sock.poll(1000), "a request over the bound was answered"
        assert request_vocabulary(vocabulary.address) == {
            event_id("zeroeq::test::Echo"): "zeroeq::test::Echo"
        }
    finally:
        sock.close(0)
        vocabulary.close()
