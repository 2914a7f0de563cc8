"""An exclusive writer on local storage keeps each partition's appended-segments file open between
its lines (``spool.files.KeptOpen``); a holder, whose fencing is its open failing in a sealed
epoch folder, and a writer on a network file system open the file for each line."""

from __future__ import annotations

import os

import pytest

from spark_zmq.capture.buffer import spool_table
from spark_zmq.spool import files as spool_files
from spark_zmq.spool.files import file_system_type
from spark_zmq.spool.index import Source
from spark_zmq.spool.reader import SnapshotReader, read_range, read_snapshot
from spark_zmq.spool.writer import Append, Spool


def rows(key: str, first: int, count: int):
    frames = [[key.encode(), str(n).encode()] for n in range(first, first + count)]
    return spool_table(frames, [n * 1000 for n in range(count)], {})


def source(key: str) -> Source:
    return Source(f"tcp://{key}", {"publisher": key})


def payloads(root: str, key: str, start: int, end: int) -> list[str]:
    return [
        b"/".join(frames).decode()
        for _, _, table in read_range(root, key, start, end)
        for frames in table.column("frames").to_pylist()
    ]


def open_files(root: str) -> list[str]:
    """The appended-segments files under ``root`` that this process has open
    (``/proc/self/fd``; a deleted one ends in " (deleted)"), sorted."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(root + os.sep) and "/appended." in target:
            found.append(target)
    return sorted(found)


def appended_files(root: str) -> list[str]:
    return sorted(
        os.path.join(d, n)
        for d, _, names in os.walk(root)
        for n in names
        if n.startswith("appended.")
    )


@pytest.fixture
def local_tmp(tmp_path, monkeypatch):
    """``tmp_path``, its file system counted as local whatever it is (the detection has a test
    of its own, below): the tests of files kept open run on any machine."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        kind = file_system_type(os.path.realpath(tmp_path), f.read())
    monkeypatch.setattr(spool_files, "LOCAL_FILE_SYSTEMS", frozenset({kind}))
    return tmp_path


def flush(spool: Spool, keys: list[str], first: int) -> None:
    assert spool.append_all([Append(key, source(key), rows(key, first, 2)) for key in keys]) == {}


def test_an_exclusive_writer_keeps_each_partition_s_lines_file_open(local_tmp, monkeypatch):
    """One descriptor per partition, for the file its index names; every line is seen by a
    reader of the folder as soon as the flush returns; a new index (every LINES_BEFORE_SAVE
    lines, here 4) closes the old file's descriptor before deleting it; nothing stays open
    after ``close``, and a new writer reads every line."""
    monkeypatch.setattr(spool_files, "LINES_BEFORE_SAVE", 4)
    root = str(local_tmp / "spool")
    spool = Spool(root, 1 << 30)
    keys = ["a", "b", "c"]
    follower = SnapshotReader(root)
    for n in range(10):
        flush(spool, keys, 2 * n)
        assert {k: s.end for k, s in follower.snapshot().items()} == dict.fromkeys(keys, 2 * n + 2)
        assert {k: s.end for k, s in read_snapshot(root).items()} == dict.fromkeys(keys, 2 * n + 2)
        kept, named = open_files(root), appended_files(root)
        assert set(kept) <= set(named), "no descriptor of a file deleted"
        assert len(kept) == len(keys), "one descriptor per partition"
        spool.truncate("a", 2 * n)  # a commit line, or a new index every 4 lines
    spool.write_commits()
    spool.close()
    assert open_files(root) == []
    again = Spool(root, 1 << 30)
    assert {k: (i.end, i.committed) for k, i in again.partitions.items()} == {
        "a": (20, 18),
        "b": (20, 0),
        "c": (20, 0),
    }
    assert payloads(root, "b", 0, 20) == [f"b/{n}" for n in range(20)]
    again.close()


def test_a_failed_line_closes_the_file_and_the_next_write_starts_a_new_index(
    local_tmp, monkeypatch
):
    """A write that the storage refuses on the descriptor kept open is the partition's
    SpoolWriteError, and closes the descriptor; the partition's next append writes its index
    whole, with a new file, and goes on. The segment refused was never published."""
    import errno

    root = str(local_tmp / "spool")
    spool = Spool(root, 1 << 30)
    flush(spool, ["a", "b"], 0)
    [before, _] = open_files(root)
    write_whole = spool_files._write_whole

    def full_for_a(fd: int, data: bytes) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == before:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_whole(fd, data)

    monkeypatch.setattr(spool_files, "_write_whole", full_for_a)
    failures = spool.append_all([Append(k, source(k), rows(k, 2, 2)) for k in ("a", "b")])
    assert list(failures) == ["a"] and "No space left" in str(failures["a"]), failures
    assert before not in open_files(root) and len(open_files(root)) == 1
    monkeypatch.setattr(spool_files, "_write_whole", write_whole)
    flush(spool, ["a"], 2)
    flush(spool, ["a"], 4)
    assert before not in open_files(root) and len(open_files(root)) == 2
    assert {k: s.end for k, s in read_snapshot(root).items()} == {"a": 6, "b": 4}
    assert payloads(root, "a", 0, 6) == [f"a/{n}" for n in range(6)]
    spool.close()


def test_a_holder_opens_its_lines_file_for_each_line(tmp_path):
    """A holder keeps nothing open: its open failing in a sealed epoch folder is how it learns
    that a claimer took the partition over."""
    root = str(tmp_path / "spool")
    spool = Spool(root, 1 << 30, exclusive=False)
    for key in ("a", "b"):
        spool.open_partition(key, expect_epoch=0)
    flush(spool, ["a", "b"], 0)
    flush(spool, ["a", "b"], 2)
    assert open_files(root) == []
    assert {k: s.end for k, s in read_snapshot(root).items()} == {"a": 4, "b": 4}
    spool.close()


def test_a_writer_on_a_network_file_system_opens_its_lines_file_for_each_line(
    tmp_path, monkeypatch
):
    """On NFS another host sees a write once the file is closed: no file is kept open."""
    monkeypatch.setattr(spool_files, "LOCAL_FILE_SYSTEMS", frozenset())
    root = str(tmp_path / "spool")
    spool = Spool(root, 1 << 30)
    flush(spool, ["a"], 0)
    assert open_files(root) == []
    spool.close()


MOUNTINFO = "\n".join(
    [
        "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
        "30 22 0:40 / /mnt/spool rw,relatime shared:9 - nfs4 server:/export rw,vers=4.2",
        "31 30 0:41 / /mnt/spool/local\\040disk rw shared:10 - xfs /dev/vdb rw",
        "32 22 0:42 / /mnt/spoolish rw shared:11 - tmpfs tmpfs rw",
    ]
)


@pytest.mark.parametrize(
    "path, kind",
    [
        ("/tmp/spool", "ext4"),
        ("/mnt/spool", "nfs4"),
        ("/mnt/spool/q1", "nfs4"),
        ("/mnt/spool/local disk/q1", "xfs"),
        ("/mnt/spool/local", "nfs4"),
        ("/mnt/spoolish/q1", "tmpfs"),
    ],
)
def test_a_spool_s_file_system_is_that_of_the_innermost_mount_that_holds_it(path, kind):
    assert file_system_type(path, MOUNTINFO) == kind
