"""What the reader reads of a publisher, as a pure function (no sockets, no discovery)."""

from __future__ import annotations

from spark_zmq.protocols.zeroeq.management import ALL, Overrides
from spark_zmq.protocols.zeroeq.selection import Known, Selection, describe
from spark_zmq.protocols.zeroeq.wire import MEERKAT, event_id

A, B = b"\x01" * 16, b"\x02" * 16


def record(session: str, instance: str = "127.0.0.1:5000") -> Known:
    from spark_zmq.protocols.zeroeq.announce import PublisherRecord

    txt = {"session": session, "application": "viewer"}
    parsed = PublisherRecord.parse(
        f"{instance}._zeroeq_pub._tcp.local.", {k.encode(): v.encode() for k, v in txt.items()}
    )
    return Known(parsed, {A: "a.Event", B: None})


def test_a_publisher_in_the_session_is_read_for_the_querys_events_with_its_metadata():
    selection = Selection("lab", {A: None}, compatible_only=False)
    endpoint = selection.endpoint("127.0.0.1:5000", record("lab"), None)
    assert endpoint is not None
    assert endpoint.address == "tcp://127.0.0.1:5000"
    assert endpoint.subscriptions == (A, event_id(MEERKAT))
    assert endpoint.metadata["events"] == A.hex()
    assert endpoint.metadata["session"] == "lab" and endpoint.metadata["application"] == "viewer"
    assert '"a.Event"' in endpoint.metadata["names"]
    assert selection.origin(record("lab")) == "session"


def test_a_publisher_of_another_session_is_not_read_and_the_reason_says_so():
    selection = Selection("lab", {}, compatible_only=False)
    known = record("other")
    assert selection.endpoint("127.0.0.1:5000", known, None) is None
    assert "session 'other', not 'lab'" in selection.why_not_read(known)


def test_compatible_only_needs_a_shared_event():
    known = record("lab")
    assert Selection("lab", {b"\x09" * 16: None}, True).endpoint("k", known, None) is None
    assert Selection("lab", {B: None}, True).endpoint("k", known, None) is not None


def test_management_adds_and_removes_events_and_whole_publishers():
    selection = Selection("lab", {}, compatible_only=False)
    overrides = Overrides()
    overrides.unsubscribe("127.0.0.1:5000", A.hex())
    every = selection.endpoint("127.0.0.1:5000", record("lab"), overrides)
    assert every is not None and every.subscriptions[0] == b""
    assert every.metadata["excluded"] == A.hex()

    overrides.subscribe("10.0.0.9:7000", B.hex())  # a publisher nobody announced
    added = selection.endpoint("10.0.0.9:7000", None, overrides)
    assert added is not None and added.address == "tcp://10.0.0.9:7000"
    assert added.subscriptions == (B, event_id(MEERKAT))
    assert selection.origin(None) == "management"
    entry = describe("10.0.0.9:7000", added, "management")
    assert entry["events"][0]["id"] == B.hex() and entry["origin"] == "management"

    overrides.unsubscribe("127.0.0.1:5000", ALL)
    assert selection.endpoint("127.0.0.1:5000", record("lab"), overrides) is None
