"""An append writes its segment and one line of the appended-segments file that index.json
names, and a commit's line goes with the partition's next one (or after capture's flush);
index.json itself is written only when something else changes (retention, a claim, a file of
LINES_BEFORE_SAVE lines). Readers, restarts and claims find every segment either way."""

from __future__ import annotations

import json
import os

import pytest

from spark_zmq.capture.buffer import spool_table
from spark_zmq.spool import files, layout
from spark_zmq.spool.index import Source
from spark_zmq.spool.layout import (
    INDEX_NAME,
    SpoolWriteError,
    epochs,
    load_index,
    partition_dir,
)
from spark_zmq.spool.reader import read_range, read_snapshot
from spark_zmq.spool.writer import Spool

SOURCE = Source("tcp://127.0.0.1:1", {"publisher": "p"})


def append(spool: Spool, key: str, count: int = 1, dropped: int = 0) -> None:
    """``count`` segments of one message each, named m<offset>."""
    for _ in range(count):
        first = spool.partitions[key].end if key in spool.partitions else 0
        spool.append(key, SOURCE, spool_table([[b"m%d" % first]], [first], {}), dropped)


def epoch_folder(root: str, key: str) -> str:
    epoch, sealed = epochs(partition_dir(root, key))[-1]
    return os.path.join(partition_dir(root, key), f"e{epoch:08d}" + (".sealed" if sealed else ""))


def index_doc(root: str, key: str) -> dict:
    with open(os.path.join(epoch_folder(root, key), INDEX_NAME), encoding="utf-8") as f:
        return json.load(f)


def appended_lines(root: str, key: str) -> list[list]:
    path = os.path.join(epoch_folder(root, key), index_doc(root, key)["appended"])
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def messages(root: str, key: str, start: int, end: int) -> list[bytes]:
    return [
        row["frames"][0] if row["frames"] else row["fault"]
        for _, _, table in read_range(root, key, start, end)
        for row in table.to_pylist()
    ]


def test_appends_and_commits_leave_index_json_alone_and_readers_and_restarts_see_them(
    tmp_path, monkeypatch
):
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    append(spool, "k", 3)  # lines: the claim wrote index.json, which names an empty file
    before = index_doc(root, "k")
    spool.truncate("k", 1)
    append(spool, "k", 5)
    append(spool, "k", dropped=4)
    assert index_doc(root, "k") == before, "neither an append nor a commit writes index.json"
    lines = appended_lines(root, "k")
    assert lines[3] == {"committed": 1}, "a commit is a line"
    assert [line[0] for line in lines if isinstance(line, list)] == list(range(9))
    assert lines[-1][5] == 4, "the count of drops goes with the line"
    assert read_snapshot(root)["k"] == (0, 9, False, 1)
    assert load_index(root, "k").dropped == 4
    assert messages(root, "k", 0, 9) == [b"m%d" % i for i in range(9)]

    # a file of LINES_BEFORE_SAVE lines: the next commit writes index.json whole
    monkeypatch.setattr(files, "LINES_BEFORE_SAVE", len(lines))
    old = os.path.join(epoch_folder(root, "k"), before["appended"])
    spool.truncate("k", 6)
    after = index_doc(root, "k")
    assert [s[0] for s in after["segments"]] == [6, 7, 8] and after["dropped"] == 4
    assert after["committed"] == 6
    assert after["appended"] != before["appended"] and not os.path.exists(old)
    assert appended_lines(root, "k") == [], "a new index names a new, empty file"
    append(spool, "k")
    spool.truncate("k", 7)
    assert appended_lines(root, "k")[-1] != {"committed": 7}, "it waits for the next line"
    spool.write_commits()  # capture's next flush: no segment took it along
    assert appended_lines(root, "k")[-1] == {"committed": 7}
    spool.close()

    again = Spool(root, 1 << 30)  # a restart claims the partition: a new epoch folder
    index = again.partitions["k"]
    assert (index.end, index.committed, index.dropped) == (10, 7, 4)
    assert [s.first for s in index.segments] == list(range(10))
    append(again, "k")
    assert messages(root, "k", 0, 11) == [b"m%d" % i for i in range(11)]
    again.close()


def test_a_commit_goes_with_the_next_segment_line_in_one_write_or_after_the_flush(
    tmp_path, monkeypatch
):
    """Commits come for every partition each micro-batch: a commit's line waits for the
    partition's next segment line and goes in the same write; one that no segment takes along
    is written after capture's flush (``write_commits``); a retired partition's is written at
    once, since the query's offsets let go of it; closing writes what waits."""
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    append(spool, "k", 3)
    append(spool, "idle", 2)
    writes: list[bytes] = []
    real_write = os.write

    def counted(fd: int, data: bytes) -> int:
        writes.append(data)
        return real_write(fd, data)

    monkeypatch.setattr(files.os, "write", counted)
    spool.truncate("k", 2)
    spool.truncate("idle", 1)
    assert writes == [] and read_snapshot(root)["k"].committed == 0
    assert spool.snapshot()["k"].committed == 2, "the query's own view has it at once"
    append(spool, "k")
    assert len(writes) == 1 and writes[0].count(b"\n") == 2, "commit and segment, one write"
    commit, segment = appended_lines(root, "k")[-2:]
    assert commit == {"committed": 2} and segment[:2] == [3, 1], "the commit first"
    spool.write_commits()
    assert len(writes) == 2 and read_snapshot(root)["idle"].committed == 1
    spool.write_commits()
    assert len(writes) == 2, "nothing waits any more"
    spool.retire("idle")
    writes.clear()
    spool.truncate("idle", 2)
    assert len(writes) == 1 and read_snapshot(root)["idle"].committed == 2, "retired: at once"
    spool.truncate("k", 4)
    spool.close()
    assert load_index(root, "k").committed == 4, "closing wrote it"


def test_a_line_cut_short_is_never_read_and_the_next_append_writes_the_index(tmp_path, monkeypatch):
    """A write of a line that fails part way (a full disk) publishes nothing: the append fails
    as a whole, readers stop before the torn line, and the next append writes index.json whole,
    so that no line ever follows a torn one."""
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    append(spool, "k", 2)
    append(spool, "k")  # a line
    real_write = os.write

    def half(fd: int, data: bytes) -> int:
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(files.os, "write", half)
    with pytest.raises(SpoolWriteError, match=r"appended\.\d{8}\.jsonl \(spool .*partition k\)"):
        append(spool, "k")
    monkeypatch.setattr(files.os, "write", real_write)
    assert spool.partitions["k"].end == 3, "the spool is as it was before the call"
    assert read_snapshot(root)["k"].end == 3
    torn = index_doc(root, "k")["appended"]
    append(spool, "k", 2)
    assert index_doc(root, "k")["appended"] != torn, "index.json written whole"
    assert read_snapshot(root)["k"].end == 5
    assert messages(root, "k", 0, 5) == [b"m%d" % i for i in range(5)]
    spool.close()

    path = os.path.join(epoch_folder(root, "k"), index_doc(root, "k")["appended"])
    with open(path, "ab") as f:  # a crash in the middle of a line
        f.write(b"[5, 1, 9")
    assert Spool(root, 1 << 30).partitions["k"].end == 5


def test_a_reader_whose_appended_file_was_replaced_reads_the_index_again(tmp_path, monkeypatch):
    """A commit writes a new index.json, then deletes the file the old one named: a reader that
    read the old index in between reads the new one, and sees every segment."""
    monkeypatch.setattr(files, "LINES_BEFORE_SAVE", 0)  # every commit writes index.json
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    append(spool, "k", 4)
    spool.truncate("k", 1)
    append(spool, "k", 3)  # in the appended file
    read = layout.read_in_epoch
    reads = []

    def commit_between(folder: str, epoch: int, name: str):
        found = read(folder, epoch, name)
        reads.append(name)
        if name == INDEX_NAME and len(reads) == 1:
            spool.truncate("k", 2)  # the file this index names is deleted
        return found

    monkeypatch.setattr(layout, "read_in_epoch", commit_between)
    index = load_index(root, "k", history=False)
    assert reads[0] == INDEX_NAME and reads[2] == INDEX_NAME, reads
    assert (index.end, index.committed) == (7, 2)
    assert [s.first for s in index.segments] == [2, 3, 4, 5, 6]
    spool.close()


@pytest.mark.parametrize(
    "damage",
    ['{"committed": 3', "[3, 1, 10, 1, 0.0, 0], [4, 1, 10, 1, 0.0, 0]", "", "[3, 1"],
    ids=["cut-object", "two-values", "empty", "cut-array"],
)
def test_the_lines_after_a_damaged_line_are_not_read(damage):
    """The lines of an appended-segments file are parsed all at once when they can be: a
    damaged line (a complete line that is not one value) still ends what is read, as when
    they were parsed one by one."""
    from spark_zmq.spool.index import PartitionIndex, Segment

    good = [[0, 1, 10, 1, 0.0, 0], [1, 2, 10, 1, 0.0, 0], {"committed": 3}]
    after = [[3, 1, 10, 1, 0.0, 0]]
    text = "".join(json.dumps(line) + "\n" for line in good)
    index = PartitionIndex("k")

    index.add_appended(text + damage + "\n" + "".join(json.dumps(x) + "\n" for x in after))

    assert [(s.first, s.count) for s in index.segments] == [(0, 1), (1, 2)]
    assert (index.end, index.committed) == (3, 3)
    whole = PartitionIndex("k")
    whole.add_appended(text + "".join(json.dumps(x) + "\n" for x in after))
    assert whole.segments[-1] == Segment(3, 1, 10, 1, 0.0)


def test_a_snapshot_reader_reads_what_changed_and_sees_what_a_whole_read_sees(
    tmp_path, monkeypatch
):
    """The planner's ``SnapshotReader`` reads an index.json again only when it was written
    anew, and of an appended-segments file only its new lines: after appends, commits, an
    index written whole, a retired partition, retention, a line cut short and a damaged one,
    a restart's claim and a partition gone, each snapshot is the one a whole read gives."""
    from spark_zmq.spool.reader import SnapshotReader

    root = str(tmp_path)
    monkeypatch.setattr(files, "LINES_BEFORE_SAVE", 6)
    spool = Spool(root, 1 << 30)
    follower = SnapshotReader(root)

    def same() -> dict:
        whole = read_snapshot(root)
        assert follower.snapshot() == whole
        return whole

    append(spool, "a", 2)
    append(spool, "b", 1)
    assert same() == {"a": (0, 2, False, 0), "b": (0, 1, False, 0)}
    for round_ in range(5):  # appends and commits, and index.json written whole at 6 lines
        append(spool, "a", 2, dropped=round_)
        assert same()["a"].end == 4 + 2 * round_
        spool.truncate("a", spool.partitions["a"].end - 1)
        spool.write_commits()  # (capture's next flush)
        assert same()["a"].committed == 3 + 2 * round_
    spool.retire("b")
    assert same()["b"].retired
    spool.expire()  # (nothing is old enough: the index stays)
    same()
    path = os.path.join(epoch_folder(root, "a"), index_doc(root, "a")["appended"])
    with open(path, "ab") as f:
        f.write(b"[99, 1, 10, 1, 0.0, 0")  # cut short: not read, whole lines before it are
    same()
    with open(path, "ab") as f:
        f.write(b"\n")  # now a whole line that does not go on from the end: it ends the file
    same()
    append(spool, "a")  # (after the damaged line: read by neither)
    same()
    spool.close()
    again = Spool(root, 1 << 30)  # a restart claims both: new epoch folders
    append(again, "a", 3)
    same()
    again.close()
    import shutil

    shutil.rmtree(partition_dir(root, "b"))
    assert "b" not in same()
