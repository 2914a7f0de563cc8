"""The spool: append, re-read any range, truncate on commit, survive a restart, one writer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_zmq.capture import _to_table
from spark_zmq.spool import Source, Spool, SpoolError, load_index, read_range

SOURCE = Source("tcp://127.0.0.1:1", {"publisher": "p"})


def messages(first, count):
    frames = [[f"m{i}".encode()] for i in range(first, first + count)]
    return _to_table(frames, [i * 1000 for i in range(count)], {})


def read_all(root, key, start, end):
    out = []
    for first, source, table in read_range(root, key, start, end):
        assert source == SOURCE
        rows = table.column("frames").to_pylist()
        assert len(rows) == table.num_rows
        out += [r[0].decode() for r in rows]
    return out


def test_append_read_any_range_truncate(tmp_path):
    spool = Spool(str(tmp_path), 1 << 30)
    spool.append("k", SOURCE, messages(0, 5))
    spool.append("k", SOURCE, messages(5, 5))
    assert read_all(str(tmp_path), "k", 3, 8) == ["m3", "m4", "m5", "m6", "m7"]
    assert read_all(str(tmp_path), "k", 3, 8) == ["m3", "m4", "m5", "m6", "m7"]  # replayable
    spool.truncate("k", 7)   # the first segment is committed, the second is still needed
    assert load_index(str(tmp_path), "k").start == 5
    assert read_all(str(tmp_path), "k", 7, 10) == ["m7", "m8", "m9"]
    with pytest.raises(SpoolError, match=r"cannot serve offsets \[2, 4\) of partition 'k'"):
        read_all(str(tmp_path), "k", 2, 4)
    spool.close()


def test_offsets_continue_after_restart_and_the_folder_has_one_writer(tmp_path):
    spool = Spool(str(tmp_path), 1 << 30)
    spool.append("a:1", SOURCE, messages(0, 3))
    with pytest.raises(SpoolError, match="in use by another running query"):
        Spool(str(tmp_path), 1 << 30, lock_wait=0.5)
    spool.close()
    again = Spool(str(tmp_path), 1 << 30)
    assert again.snapshot()["a:1"] == (0, 3, False)
    again.append("a:1", SOURCE, messages(3, 2))
    assert read_all(str(tmp_path), "a:1", 0, 5) == ["m0", "m1", "m2", "m3", "m4"]
    again.close()


def test_fault_rows_and_size_accounting(tmp_path):
    spool = Spool(str(tmp_path), 1)
    assert spool.has_room()
    spool.append("k", SOURCE, _to_table([[b"x"], []], [1, 2], {1: "gap: test"}))
    assert not spool.has_room()
    table = next(read_range(str(tmp_path), "k", 0, 2))[2]
    assert table.column("fault").to_pylist() == [None, "gap: test"]
    assert table.schema.field("received_at").type == pa.timestamp("us", tz="UTC")
    spool.truncate("k", 2)
    assert spool.nbytes == 0 and spool.has_room()
    spool.close()
