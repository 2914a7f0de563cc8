"""The EBUS request sink: `writeStream.format("ebus").option("service", ...)` sends each row as
a request through the package's broker; answers land in `replyPath`; refused and unanswered
requests follow `mode`."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
import zmq

from spark_zmq.protocols.ebus import Broker, Worker
from support.ebus import run_requests

pytestmark = pytest.mark.spark


class SilentWorker:
    """Registers a service and heartbeats, but never answers a request."""

    def __init__(self, address: str, service: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        identity = b"W/%s/%s" % (service.encode(), uuid.uuid4().hex.encode())
        self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)
        self.sock.send_multipart([b"EBW01", b"READY", b"null", service.encode()])
        self.requests: list[bytes] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopping.is_set():
            if self.sock.poll(200):
                frames = self.sock.recv_multipart()
                if frames[1] == b"REQ":
                    self.requests.append(frames[2])
            self.sock.send_multipart([b"EBW01", b"HEARTBEAT"])

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(2)
        self.sock.close(0)


def refuse(data):
    raise ValueError(f"will not take {data!r}")


@pytest.fixture(scope="module")
def broker():
    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    backend = f"tcp://127.0.0.1:{broker.backend_port}"
    peers = [
        Worker(backend, "echo", lambda data: {"echo": data}),
        Worker(backend, "refuse", refuse),
        SilentWorker(backend, "silent"),
    ]
    yield broker
    for peer in peers:
        peer.close()
    broker.close()


def test_each_row_is_a_request_whose_answer_lands_in_reply_path(spark, tmp_path, broker):
    rows = [{"data": json.dumps({"n": n})} for n in range(6)] + [{"data": "{not json"}]
    error, answers, query_id = run_requests(spark, tmp_path, broker, rows, service="echo")
    assert error is None
    assert len(answers) == 6, "the row that is not JSON is skipped (PERMISSIVE)"
    assert {status for _, status, _, _ in answers} == {"REPLY"}
    assert sorted(json.loads(data)["echo"]["n"] for _, _, data, _ in answers) == list(range(6))
    ids = [request_id for request_id, _, _, _ in answers]
    assert len(set(ids)) == 6 and all(i.startswith(f"{query_id}/0/") for i in ids)
    assert {batch for _, _, _, batch in answers} == {0}


def test_refused_requests_are_recorded_or_fail_the_batch_under_failfast(spark, tmp_path, broker):
    rows = [{"data": json.dumps(n)} for n in range(3)]
    error, answers, _ = run_requests(spark, tmp_path, broker, rows, service="refuse")
    assert error is None
    assert [(status, data) for _, status, data, _ in answers] == [("REJECT", "null")] * 3

    error, answers, _ = run_requests(
        spark, tmp_path, broker, rows, service="refuse", mode="FAILFAST"
    )
    assert error is not None and answers == []
    assert "to service 'refuse'" in error and "was refused" in error and "request " in error


def test_unanswered_requests_fail_the_batch_unless_dropmalformed(spark, tmp_path, broker):
    rows = [{"data": json.dumps(n)} for n in range(2)]
    error, answers, _ = run_requests(
        spark, tmp_path, broker, rows, service="silent", stalesMs="1500"
    )
    assert error is not None and answers == []
    assert "to service 'silent'" in error and "no answer within stalesMs=1500" in error

    error, answers, _ = run_requests(
        spark, tmp_path, broker, rows, service="silent", stalesMs="1500", mode="DROPMALFORMED"
    )
    assert error is None
    assert [(status, data) for _, status, data, _ in answers] == [("EXPIRED", None)] * 2


class ExpiringBroker:
    """The reference broker's frontend as the fact sheet gives it, for requests that expire:
    it answers every REQ the way it answers an expired one, ``REJECT, requestId`` with no data
    frame (never EXPIRED), and PING with HEARTBEAT."""

    def __init__(self) -> None:
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.frontend_port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopping.is_set():
            if not self.sock.poll(50):
                continue
            frames = self.sock.recv_multipart() + [b""] * 8
            identity, kind, request_id = frames[0], frames[3], frames[5]
            if kind == b"REQ":
                self.sock.send_multipart([identity, b"", b"EBW01", b"REJECT", request_id])
            elif kind == b"PING":
                self.sock.send_multipart([identity, b"", b"EBW01", b"HEARTBEAT"])

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(2)
        self.sock.close(0)


def test_the_reference_brokers_expiry_is_recorded_as_expired_not_refused(spark, tmp_path):
    """A REJECT without data is an expiry: with DROPMALFORMED the rows are EXPIRED (at once,
    well before the client's own stalesMs of 60 s), and without it the batch fails as
    unanswered, not as refused."""
    reference = ExpiringBroker()
    rows = [{"data": json.dumps(n)} for n in range(2)]
    try:
        error, answers, _ = run_requests(
            spark, tmp_path, reference, rows, service="late", stalesMs="60000", mode="DROPMALFORMED"
        )
        assert error is None
        assert [(status, data) for _, status, data, _ in answers] == [("EXPIRED", None)] * 2
        error, answers, _ = run_requests(
            spark, tmp_path, reference, rows, service="late", stalesMs="60000"
        )
        assert error is not None and "no answer within stalesMs=60000" in error
        assert "refused" not in error
    finally:
        reference.close()


def test_request_sink_option_and_column_errors(spark, tmp_path, broker):
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "rows.json").write_text('{"channel": "a"}\n')
    frame = spark.readStream.schema("channel STRING").json(str(inbox))
    with pytest.raises(Exception, match="need a column `data`"):
        frame.writeStream.format("ebus").option("service", "echo").option(
            "checkpointLocation", str(tmp_path / "c1")
        ).start().awaitTermination(60)
    frame = spark.readStream.schema("data STRING").json(str(inbox))
    with pytest.raises(Exception, match="option 'stalesMs' must be a positive integer"):
        frame.writeStream.format("ebus").option("service", "echo").option(
            "stalesMs", "soon"
        ).option("checkpointLocation", str(tmp_path / "c2")).start().awaitTermination(60)
