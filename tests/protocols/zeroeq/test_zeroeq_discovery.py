"""The seed's additions on the reader side: vocabularies (event names, compatibleOnly), the
reader's own `_zeroeq_sub._tcp` record, and the management port."""

from __future__ import annotations

import json

import pytest

from spark_zmq.protocols.zeroeq import (
    SUBSCRIBER_SERVICE,
    ManagementError,
    event_id,
    manage,
    request_vocabulary,
)
from spark_zmq.protocols.zeroeq.reqrep import RequestError, request
from support.common import wait_until
from support.queries import rows_of, wait_for_rows
from support.zeroeq import Joined, announced, session_discovery, start_query

ECHO, OTHER = "zeroeq::test::Echo", "zeroeq::test::Other"


def subscriber_record(zeroconf, session, reading=None):
    """The `_zeroeq_sub._tcp` record of the reader of ``session`` (the one reading event
    ``reading``, when several readers share the session)."""
    records = [
        r
        for r in announced(zeroconf, SUBSCRIBER_SERVICE, session, timeout=30).values()
        if reading is None or event_id(reading) in r.vocabulary
    ]
    assert len(records) == 1, records
    return records[0]


def test_vocabulary_names_events_and_compatible_only_picks_publishers(
    spark, tmp_path, publishers, zeroconf
):
    echoing = publishers("voc", registered={event_id(ECHO): ECHO})
    other = publishers("voc", registered={event_id(OTHER): OTHER})
    assert request_vocabulary(echoing.vocabulary.address) == {event_id(ECHO): ECHO}
    compatible = start_query(
        spark, tmp_path, "compatible", session="voc", events=ECHO, compatibleOnly="true"
    )
    named = start_query(spark, tmp_path, "named", session="voc")  # names from vocabularies
    try:
        echoing.wait_for_subscribers(2)
        other.wait_for_subscribers(1)  # only the reader of every event
        for i in range(3):
            echoing.publish(ECHO, b"e%d" % i)
            other.publish(OTHER, b"o%d" % i)
        wait_for_rows(spark, "compatible", 3)
        named_rows = wait_for_rows(spark, "named", 6)
        compatible.processAllAvailable()
        assert other.count_subscribers() == 1
        record = subscriber_record(zeroconf, "voc", reading=ECHO)
    finally:
        compatible.stop()
        named.stop()
    rows = rows_of(spark, "compatible")
    assert sorted(bytes(r.payload) for r in rows) == [b"e0", b"e1", b"e2"]
    assert {r.publisher for r in rows} == {echoing.instance_name}
    assert sorted((r.event, bytes(r.payload)) for r in named_rows) == sorted(
        [(ECHO, b"e%d" % i) for i in range(3)] + [(OTHER, b"o%d" % i) for i in range(3)]
    )
    # the reader announces itself as the seed's subscriber, with a UUID instance name
    assert len(record.instance_name) == 36 and record.instance_name.count("-") == 4
    assert {"vocabulary", "vocabulary_request", "user", "application", "management"} <= set(
        record.txt
    )


def test_subscriber_vocabulary_answers_its_events(spark, tmp_path, zeroconf):
    query = start_query(spark, tmp_path, "subvoc", session="subvoc", events=f"{ECHO},{OTHER}")
    try:
        record = wait_until(
            lambda: subscriber_record(zeroconf, "subvoc"), timeout=60, what="the reader's record"
        )
        vocabulary = request_vocabulary(record.vocabulary_request)
    finally:
        query.stop()
    assert vocabulary == {event_id(ECHO): ECHO, event_id(OTHER): OTHER}
    assert record.vocabulary == {event_id(ECHO), event_id(OTHER)}


def test_management_port_subscribes_lists_unsubscribes_and_survives_restart(
    spark, tmp_path, publishers, zeroconf
):
    elsewhere = publishers("elsewhere")  # not in the reader's session
    query = start_query(spark, tmp_path, "managed", session="mgmt", events=ECHO)
    try:
        port = subscriber_record(zeroconf, "mgmt").txt["management"]
        assert elsewhere.count_subscribers() == 0
        reply = manage(port, "subscribe", elsewhere.instance_name, OTHER)
        assert reply["ok"] is True
        elsewhere.wait_for_subscribers(1, event=OTHER)
        # reached at once at host:port; its record (session, ...) fills in when browsed
        wait_until(
            lambda: manage(port, "list")["subscriptions"][0]["session"] == "elsewhere",
            what="the publisher's record",
        )
        elsewhere.publish(ECHO, b"not asked for")
        elsewhere.publish(OTHER, b"o1")
        rows = wait_for_rows(spark, "managed", 1)
        listed = manage(port, "list")["subscriptions"]
        # bad requests get an error reply; the port keeps serving
        with pytest.raises(ManagementError, match="not JSON"):
            request_raw(port, b"subscribe me")
        with pytest.raises(ManagementError, match="no port"):
            manage(port, "subscribe", "nohost", OTHER)
        with pytest.raises(RequestError, match="does not know"):
            request(port, event_id("zeroeq::management::Reboot"))
        assert manage(port, "list")["subscriptions"] == listed
    finally:
        query.stop()
    assert [(r.event, bytes(r.payload), r.session) for r in rows] == [(OTHER, b"o1", "elsewhere")]
    [entry] = listed
    assert entry["publisher"] == elsewhere.instance_name and entry["origin"] == "management"
    assert [e["name"] for e in entry["events"]] == [OTHER]

    # a restart keeps the subscription: it is saved in the spool, which a restart from the
    # checkpoint finds again (the memory sink cannot restart from a checkpoint: new name)
    wait_until(lambda: elsewhere.count_subscribers() == 0, what="the reader to disconnect")
    query = start_query(
        spark,
        tmp_path,
        "managed_again",
        session="mgmt",
        events=ECHO,
        spoolPath=str(tmp_path / "spool-managed"),
    )
    try:
        elsewhere.wait_for_subscribers(1, event=OTHER)
        port = subscriber_record(zeroconf, "mgmt").txt["management"]
        manage(port, "unsubscribe", elsewhere.instance_name, OTHER)
        wait_until(
            lambda: elsewhere.count_subscribers() == 0,
            what="the unsubscribed publisher to lose its subscriber",
        )
        assert manage(port, "list")["subscriptions"] == []
    finally:
        query.stop()


def request_raw(port, payload):
    """A subscribe request with a payload that is not JSON."""
    from spark_zmq.protocols.zeroeq.management import ERROR, SUBSCRIBE

    reply_type, reply = request(port, SUBSCRIBE, payload)
    if reply_type == ERROR:
        raise ManagementError(json.loads(reply)["error"])
    return reply


def test_a_publisher_announces_from_a_thread_that_runs_an_event_loop():
    """Jupyter's kernel runs an asyncio loop in the thread of the notebook's code: ZeroConf
    made there must not attach to that loop and then block it when registering."""
    import asyncio

    from spark_zmq.protocols.zeroeq import Publisher, make_zeroconf

    async def in_a_running_loop() -> str:
        zeroconf = make_zeroconf(("127.0.0.1",))
        publisher = Publisher("in-loop", zeroconf=zeroconf)
        try:
            return publisher.instance_name
        finally:
            publisher.close()
            zeroconf.close()

    assert asyncio.run(asyncio.wait_for(in_a_running_loop(), 60)).startswith("127.0.0.1:")


def test_what_discovery_remembers_of_record_names_is_bounded(zeroconf):
    """Peers choose record names: a flood of distinct faulty names, or of names asked about,
    does not grow what discovery keeps without end."""
    from spark_zmq.protocols.zeroeq.discovery import MAX_FAULTY_RECORDS
    from spark_zmq.protocols.zeroeq.mdns import MAX_ONE_LABEL_NAMES

    discovery = session_discovery("s", interfaces=None)
    for n in range(MAX_FAULTY_RECORDS + 100):
        discovery.records._fault(f"bad{n}._zeroeq_pub._tcp.local.", "a reason")
        zeroconf.keep_one_label(f"h.{n}:5555")
    assert len(discovery.records._faulty) == MAX_FAULTY_RECORDS
    assert len(zeroconf._one_labels) == MAX_ONE_LABEL_NAMES


def test_a_silent_record_does_not_hold_the_others_back(caplog):
    """Issue 46: records are looked up off ZeroConf's browser thread, several at once. Six
    publisher records announced by a PTR alone, whose owner never answers the question for
    their SRV and TXT (3 s each), then a real publisher of the session: it joins before the
    first silent record is given up on; one lookup at a time, it waited 18 s behind them."""
    import asyncio
    import logging
    import time

    from zeroconf import DNSOutgoing, DNSPointer
    from zeroconf.const import _CLASS_IN, _FLAGS_AA, _FLAGS_QR_RESPONSE, _TYPE_PTR

    from spark_zmq.protocols.zeroeq import Publisher, make_zeroconf
    from spark_zmq.protocols.zeroeq.wire import PUBLISHER_SERVICE

    async def announce(zeroconf, out) -> None:
        zeroconf.async_send(out)

    joined = Joined()
    discovery = session_discovery("silent-records")
    sender = make_zeroconf(("127.0.0.1",))
    publisher = None
    caplog.set_level(logging.WARNING, logger="spark_zmq")
    try:
        discovery.start(joined)
        out = DNSOutgoing(_FLAGS_QR_RESPONSE | _FLAGS_AA)
        for n in range(6):
            name = f"127.0.0.1:{n + 1}.{PUBLISHER_SERVICE}"
            out.add_answer_at_time(
                DNSPointer(PUBLISHER_SERVICE, _TYPE_PTR, _CLASS_IN, 120, name), 0
            )
        assert sender.loop is not None
        asyncio.run_coroutine_threadsafe(announce(sender, out), sender.loop).result(5)
        time.sleep(0.5)  # the browser has reported them: their lookups wait for an answer
        publisher = Publisher("silent-records", interfaces=("127.0.0.1",))
        key = publisher.instance_name
        wait_until(lambda: key in joined.at, timeout=60, what="the real publisher to join")
        wait_until(
            lambda: "no answer when asked for its record" in caplog.text,
            timeout=60,
            what="a silent record to be given up on",
        )
    finally:
        if publisher is not None:
            publisher.close()
        discovery.close()
        sender.close()
    given_up = min(
        r.created for r in caplog.records if "no answer when asked for its record" in r.message
    )
    assert set(joined.at) == {key}, joined.keys
    assert joined.at[key] < given_up, "the real publisher waited for the silent records"


def test_a_record_s_changes_run_in_order_and_only_its_newest_waits():
    """``RecordLookups``: another record's lookup runs while one waits; changes of one record
    that come during its running lookup are not run twice over: only the newest runs next."""
    import threading

    from spark_zmq.protocols.zeroeq.lookups import RecordLookups

    lookups = RecordLookups(threads=4)
    gate, ran = threading.Event(), []
    try:
        lookups.submit("a", lambda: (gate.wait(30), ran.append("a1")))
        lookups.submit("a", lambda: ran.append("a2"))
        lookups.submit("a", lambda: ran.append("a3"))
        lookups.submit("b", lambda: ran.append("b1"))
        wait_until(lambda: "b1" in ran, timeout=30, what="b's lookup beside a's")
        gate.set()
        wait_until(lookups.idle, timeout=30, what="every lookup to end")
    finally:
        gate.set()
        lookups.close()
    assert ran == ["b1", "a1", "a3"]


def test_a_vocabulary_fault_is_a_warning_only_in_the_reader_s_session(caplog):
    """A publisher of another session is read only if a management request asks for it: that
    its vocabulary server does not answer is logged at debug level, not as a warning on every
    reader of every session that hears its record (a CLI subscriber of an empty session
    printed one). The same fault in the reader's session stays a warning, also for a record
    that moves into it."""
    import logging
    import socket

    from zeroconf import ServiceInfo

    from spark_zmq.protocols.zeroeq import make_zeroconf
    from spark_zmq.protocols.zeroeq.wire import PUBLISHER_SERVICE

    with socket.socket() as closed:  # a port nobody listens on: the request goes unanswered
        closed.bind(("127.0.0.1", 0))
        silent = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
    discovery = session_discovery("vocabulary-faults")
    sender = make_zeroconf(("127.0.0.1",))
    caplog.set_level(logging.DEBUG, logger="spark_zmq")
    names = {"vocabulary-faults": 1, "elsewhere": 2}

    def record(port: int, session: str) -> ServiceInfo:
        return ServiceInfo(
            PUBLISHER_SERVICE,
            f"127.0.0.1:{port}.{PUBLISHER_SERVICE}",
            addresses=[socket.inet_aton("127.0.0.1")],
            port=port,
            properties={"session": session, "vocabulary_request": silent},
            server="vocabulary-faults.local.",
        )

    def faults(port: int) -> list[int]:
        """The levels at which the fault of the record on ``port`` was logged, in order."""
        name = repr(f"127.0.0.1:{port}.{PUBLISHER_SERVICE}")
        return [
            r.levelno
            for r in caplog.records
            if name in r.getMessage() and "no vocabulary from" in r.getMessage()
        ]

    try:
        discovery.start(Joined())
        for session, port in names.items():  # (the shipped library's type has an underscore)
            sender.register_service(record(port, session), strict=False)
        wait_until(
            lambda: faults(1) and faults(2), timeout=60, what="both vocabulary faults logged"
        )
        assert (faults(1), faults(2)) == ([logging.WARNING], [logging.DEBUG])
        sender.update_service(record(2, "vocabulary-faults"))  # it moves into the session
        wait_until(lambda: len(faults(2)) == 2, timeout=60, what="the moved record's fault")
    finally:
        discovery.close()
        sender.close()
    assert faults(2) == [logging.DEBUG, logging.WARNING]
