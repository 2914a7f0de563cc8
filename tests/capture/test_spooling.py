"""A flush of many connections (``capture.spooling``): small buffers are copied into one
table, large ones go whole, each after the others in one flush file; every partition reads back
its own rows, gap rows first, with each core's buffers (the ``core`` fixture)."""

from __future__ import annotations

from spark_zmq.capture.buffer import BURST, MAX_SEGMENT_BYTES, MAX_SEGMENT_ROWS, Buffer
from spark_zmq.capture.connections import Connection
from spark_zmq.capture.drops import DropEpisode
from spark_zmq.capture.refusals import Refusals
from spark_zmq.capture.spooling import OWN_TABLE_BYTES, SegmentWriter
from spark_zmq.native import RECEIVE, load
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.layout import load_index
from spark_zmq.spool.reader import read_range
from spark_zmq.spool.writer import Spool


def connection(key: str, kind: str) -> Connection:
    refusals = Refusals("test", f"tcp://{key}", key, 1 << 24, 100)
    if kind == "python":
        buffer = Buffer(refusals=refusals)
    else:
        native = load(RECEIVE)
        buffer = native.NativeBuffer(MAX_SEGMENT_ROWS, MAX_SEGMENT_BYTES, BURST, 10, refusals)
    endpoint = Endpoint(key, f"tcp://{key}", metadata={"n": key})
    return Connection(endpoint, None, None, None, None, DropEpisode("test", key), None, buffer)


def add(conn: Connection, frames: list[bytes]) -> None:
    if isinstance(conn.buffer, Buffer):
        conn.buffer._add_row(frames, 1_700_000_000_000_000_000, sum(map(len, frames)))
    else:
        conn.buffer.add_message(frames)


def rows_of(root: str, key: str) -> list[tuple[list[bytes], str | None, str]]:
    index = load_index(root, key)
    rows = []
    for _, source, table in read_range(root, key, index.start, index.end):
        frames, faults = table.column("frames").to_pylist(), table.column("fault").to_pylist()
        rows += [(f, fault, source.metadata["n"]) for f, fault in zip(frames, faults)]
    return rows


def test_small_and_large_buffers_of_one_flush_read_back_as_their_partitions_rows(tmp_path, core):
    spool = Spool(str(tmp_path), 1 << 30)
    writer = SegmentWriter(spool, "test", drop_on_write_error=False)
    conns = [connection(f"p{n}", core) for n in range(6)]
    large = b"L" * (OWN_TABLE_BYTES // 4)
    sent: dict[str, list[list[bytes]]] = {conn.endpoint.key: [] for conn in conns}
    for flush in range(3):
        for n, conn in enumerate(conns):
            if n == 5 and flush == 1:
                continue  # nothing to write this flush
            for i in range(5 if n % 2 else 2):
                frames = [b"p%d" % n, large if n in (1, 3) else b"%d.%d" % (flush, i)]
                add(conn, frames)
                sent[conn.endpoint.key].append(frames)
        if flush == 1:  # a drop episode ended: its gap row comes before the rows of a large one
            conns[3].drops.drop(7, 1_700_000_000_000_000_000, "the test")
        assert writer.flush_all(conns) == []
    for conn in conns:
        key = conn.endpoint.key
        rows = rows_of(spool.root, key)
        gaps = [fault for _, fault, _ in rows if fault]
        assert [frames for frames, fault, _ in rows if not fault] == sent[key], key
        assert {n for _, _, n in rows} == {key}
        assert len(gaps) == (1 if key == "p3" else 0) and all("7 messages" in g for g in gaps)
        assert conn.written_bytes == sum(len(f) for frames in sent[key] for f in frames)
        assert len(conn.buffer) == 0
    assert rows_of(spool.root, "p3")[5][1] is not None, "the gap row first in its flush"
    assert load_index(spool.root, "p3").dropped == 7
    spool.close()
