"""Flush files: one Arrow file for every partition a flush writes (``spool.segments``). An
exclusive writer names it by number from each partition's segment and deletes it with the last
segment that names it (``spool.flushes``); a holder links it as each partition's segment file,
and the file goes with its last link. A spool of release 0.2.0 (``data/release-0.2.0``, made
by ``data/make_release_0_2_spool.py`` with that release) and one of index format 3
(``data/format-3``, by ``data/make_format_3_spool.py``) are read and written on in place."""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest

from spark_zmq.capture.buffer import spool_table
from spark_zmq.spool import files as spool_files
from spark_zmq.spool.index import Retention, Source
from spark_zmq.spool.layout import (
    FLUSHES,
    INDEX_NAME,
    LeaseLost,
    SpoolWriteError,
    epochs,
    load_index,
    partition_dir,
)
from spark_zmq.spool.reader import read_range, read_snapshot
from spark_zmq.spool.segments import SegmentFiles
from spark_zmq.spool.writer import Append, Spool

RELEASE_0_2 = os.path.join(os.path.dirname(__file__), "data", "release-0.2.0")
FORMAT_3 = os.path.join(os.path.dirname(__file__), "data", "format-3")


def rows(name: str, first: int, count: int):
    frames = [[name.encode(), str(n).encode()] for n in range(first, first + count)]
    return spool_table(frames, [n * 1000 for n in range(count)], {})


def source(key: str) -> Source:
    return Source(f"tcp://{key}", {"publisher": key})


def read(root: str, key: str, start: int, end: int, files: SegmentFiles | None = None):
    """(source endpoint, frames) of every row of the range, gap rows as their fault text."""
    out = []
    for _, found, table in read_range(root, key, start, end, files):
        for frames, fault in zip(
            table.column("frames").to_pylist(), table.column("fault").to_pylist(), strict=True
        ):
            out.append((found.endpoint, fault or b"/".join(frames).decode()))
    return out


def arrow_files(folder) -> list[str]:
    return sorted(
        os.path.join(d, n) for d, _, names in os.walk(folder) for n in names if ".arrow" in n
    )


def holder(root: str, keys: list[str]) -> Spool:
    """A holder's spool (``capture=executors``) that has claimed ``keys``."""
    spool = Spool(root, 1 << 30, exclusive=False, retention=Retention(seconds=0))
    for key in keys:
        spool.open_partition(key, expect_epoch=0)
    return spool


def three_flushes(spool: Spool, keys: list[str]) -> None:
    for flush in range(3):
        failures = spool.append_all(
            [Append(key, source(key), rows(key, 2 * flush, 2)) for key in keys]
        )
        assert failures == {}


def test_one_flush_writes_one_file_that_every_partition_names_by_number(tmp_path):
    """An exclusive writer: no link per partition; the file goes with the last segment."""
    root = str(tmp_path / "spool")
    spool = Spool(root, 1 << 30, retention=Retention(seconds=0))
    keys = [f"p{n}" for n in range(50)]
    three_flushes(spool, keys)
    flushes = arrow_files(os.path.join(root, FLUSHES))
    assert len(flushes) == 3 and arrow_files(root) == flushes, "a file a flush, no links"
    assert {s.flush for key in keys for s in load_index(root, key).segments} == {
        int(os.path.basename(path).split(".")[0]) for path in flushes
    }
    files = SegmentFiles()
    for key in keys:
        assert read(root, key, 1, 6, files) == [(f"tcp://{key}", f"{key}/{n}") for n in range(1, 6)]
    assert len(files._files) == 3, "a read of many partitions opens each flush file once"
    assert spool.nbytes == sum(os.stat(path).st_size for path in flushes)
    for key in keys[:-1]:
        spool.truncate(key, 6)
    assert arrow_files(root) == flushes, "p49 keeps them"
    spool.truncate(keys[-1], 2)
    assert arrow_files(root) == flushes[1:]
    assert read(root, keys[-1], 2, 6) == [("tcp://p49", f"p49/{n}") for n in range(2, 6)]
    spool.close()
    again = Spool(root, 1 << 30, retention=Retention(seconds=0))  # counts what indexes name
    assert arrow_files(root) == flushes[1:]
    again.truncate(keys[-1], 6)
    assert arrow_files(root) == []
    again.close()


def test_one_flush_writes_one_file_that_every_partition_of_a_holder_links(tmp_path):
    root = str(tmp_path / "spool")
    keys = [f"p{n}" for n in range(50)]
    spool = holder(root, keys)
    three_flushes(spool, keys)
    links = arrow_files(root)
    assert len(links) == 150, "one segment per partition and flush"
    assert len({os.stat(path).st_ino for path in links}) == 3, "one file per flush"
    assert os.listdir(os.path.join(root, FLUSHES)) == [], "the flush file is named by its links"
    files = SegmentFiles()
    for key in keys:
        assert read(root, key, 1, 6, files) == [(f"tcp://{key}", f"{key}/{n}") for n in range(1, 6)]
    assert len(files._files) == 3, "a read of many partitions opens each flush file once"
    # the size of a flush file is split among its segments, and retention frees it with the
    # last of them
    size = sum(os.stat(path).st_size for path in {os.stat(p).st_ino: p for p in links}.values())
    assert spool.nbytes == size
    for key in keys[:-1]:
        spool.truncate(key, 6)
    assert len({os.stat(path).st_ino for path in arrow_files(root)}) == 3, "p49 keeps them"
    spool.truncate(keys[-1], 2)
    assert len({os.stat(path).st_ino for path in arrow_files(root)}) == 2
    assert read(root, keys[-1], 2, 6) == [("tcp://p49", f"p49/{n}") for n in range(2, 6)]
    spool.close()


def test_a_flush_not_published_is_deleted_and_its_file_too_at_the_next_start(tmp_path, monkeypatch):
    """A flush none of whose segments was published leaves no file: at once when its lines
    fail, at the writer's next start when it crashed in between."""
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    assert spool.append_all([Append("a", source("a"), rows("a", 0, 2))]) == {}
    kept = arrow_files(root)

    def refused(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    with monkeypatch.context() as patch:
        patch.setattr(spool_files, "_write_whole", refused)  # the line's write fails
        failures = spool.append_all([Append("a", source("a"), rows("a", 2, 2))])
    assert isinstance(failures["a"], SpoolWriteError)
    assert arrow_files(root) == kept, "the file no segment names is gone"
    number, path = spool._numbered.next()  # a crash after the file, before its lines
    shutil.copy(kept[0], path)
    spool.close()
    again = Spool(root, 1 << 30)
    assert arrow_files(root) == kept
    assert read(root, "a", 0, 2) == [("tcp://a", "a/0"), ("tcp://a", "a/1")]
    assert again._numbered.next()[0] > number, "numbers are never given twice"
    again.close()


def test_appends_of_one_partition_in_a_flush_become_one_segment_in_order(tmp_path):
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    gap = spool_table([[]], [0], {0: "gap: down"})
    failures = spool.append_all(
        [
            Append("a", source("a"), gap),
            Append("b", source("b"), rows("b", 0, 2)),
            Append("a", source("a"), rows("a", 0, 3), dropped=7),
            Append("a", Source("tcp://other", {}), rows("x", 0, 1)),
        ]
    )
    assert failures == {}
    index = load_index(root, "a")
    assert [(s.first, s.count) for s in index.segments] == [(0, 4), (4, 1)]
    assert index.dropped == 7
    assert read(root, "a", 0, 5) == [
        ("tcp://a", "gap: down"),
        ("tcp://a", "a/0"),
        ("tcp://a", "a/1"),
        ("tcp://a", "a/2"),
        ("tcp://other", "x/0"),
    ]
    spool.close()


def test_a_partition_taken_over_fails_alone_and_the_others_are_written(tmp_path):
    root = str(tmp_path)
    mine = Spool(root, 1 << 30, exclusive=False)
    mine.open_partition("a", expect_epoch=0)
    mine.open_partition("b", expect_epoch=0)
    other = Spool(root, 1 << 30, exclusive=False)
    other.open_partition("a", expect_epoch=1)  # a newer holder seals a's folder
    failures = mine.append_all(
        [Append("a", source("a"), rows("a", 0, 2)), Append("b", source("b"), rows("b", 0, 2))]
    )
    assert set(failures) == {"a"} and isinstance(failures["a"], LeaseLost)
    assert "a" not in mine.held()
    assert read(root, "b", 0, 2) == [("tcp://b", "b/0"), ("tcp://b", "b/1")]
    assert load_index(root, "a").end == 0
    other.close()
    mine.close()


def test_storage_without_hard_links_gets_a_file_per_partition(tmp_path, monkeypatch):
    def no_links(target, path):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(spool_files, "_link", no_links)
    root = str(tmp_path)
    spool = holder(root, ["a", "b"])
    assert spool.append_all([Append(k, source(k), rows(k, 0, 3)) for k in "ab"]) == {}
    assert len({os.stat(path).st_ino for path in arrow_files(root)}) == 2
    assert read(root, "b", 0, 3) == [("tcp://b", f"b/{n}") for n in range(3)]
    spool.close()


def test_a_flush_file_the_storage_refuses_fails_its_partitions_and_changes_nothing(
    tmp_path, monkeypatch
):
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    spool.append("a", source("a"), rows("a", 0, 1))

    def full(path, rows, parts):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("spark_zmq.spool.writer.write_flush_file", full)
    failures = spool.append_all([Append(k, source(k), rows(k, 1, 1)) for k in "abcde"])
    assert set(failures) == set("abcde")
    assert all(isinstance(e, SpoolWriteError) for e in failures.values())
    assert "partitions a, b, c and 2 more): No space left on device" in str(failures["a"])
    assert load_index(root, "a").end == 1 and read(root, "a", 0, 1) == [("tcp://a", "a/0")]
    spool.close()


def test_a_damaged_flush_file_gives_each_partition_its_rows_then_a_gap(tmp_path):
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    spool.append_all([Append(k, source(k), rows(k, 0, 5000)) for k in "ab"])
    spool.close()
    path = arrow_files(os.path.join(root, FLUSHES))[0]
    with open(path, "r+b") as f:  # cut short, as a crash of its host leaves it
        f.truncate(os.path.getsize(path) * 97 // 100)  # in b's last batch
    a = read(root, "a", 0, 5000)
    b = read(root, "b", 0, 5000)
    assert [text for _, text in a] == [f"a/{n}" for n in range(5000)], "a's batches survived"
    # the file's batches are of 4096 rows: a's 5000 rows, then b's from the second batch on
    assert b[:3192] == [("tcp://b", f"b/{n}") for n in range(3192)]
    assert len(b) == 5000 and b[3192][1].startswith("gap: 1808 messages at offsets [3192, 5000)")


def test_a_spool_of_release_0_2_is_read_and_written_on(tmp_path):
    root = str(tmp_path / "spool")
    shutil.copytree(RELEASE_0_2, root)
    a, b = "tcp://10.0.0.1:5000", "tcp://10.0.0.2:5000"
    assert read_snapshot(root) == {a: (5, 6, False, 5), b: (0, 5, False, 0)}
    assert [text for _, text in read(root, a, 5, 6)] == ["a/5"]
    assert [text for _, text in read(root, b, 0, 5)] == [
        "b/0",
        "b/1",
        "b/2",
        "b/3",
        "gap: 2 messages dropped",
    ]
    spool = Spool(root, 1 << 30, retention=Retention(seconds=0))
    spool.append_all(
        [Append(a, source("a"), rows("a", 6, 2)), Append(b, source("b"), rows("b", 5, 1))]
    )
    assert [text for _, text in read(root, a, 5, 8)] == ["a/5", "a/6", "a/7"]
    assert [text for _, text in read(root, b, 3, 6)] == ["b/3", "gap: 2 messages dropped", "b/5"]
    assert load_index(root, b).dropped == 2
    spool.truncate(a, 7)  # 0.2's segment goes, the new one stays
    assert load_index(root, a).start == 6
    assert [text for _, text in read(root, a, 7, 8)] == ["a/7"]
    spool.close()
    with pytest.raises(FileNotFoundError):
        os.stat(os.path.join(partition_dir(root, a), "e00000001.sealed", f"{5:020d}.arrow"))


def test_a_spool_of_index_format_3_is_read_and_written_on_in_place(tmp_path):
    """Index format 3 (0.3 before flush files were named by number: every segment a link in
    its epoch folder), left by a capture that stopped without letting go: read as it is; an
    exclusive writer goes on from it with numbered flush files, and retention deletes the old
    links and the new files alike."""
    root = str(tmp_path / "spool")
    shutil.copytree(FORMAT_3, root)
    a, b = "tcp://10.0.0.1:5000", "tcp://10.0.0.2:5000"
    assert read_snapshot(root) == {a: (0, 6, False, 5), b: (0, 5, False, 0)}
    assert [text for _, text in read(root, b, 3, 5)] == ["b/3", "gap: 2 messages dropped"]
    spool = Spool(root, 1 << 30, retention=Retention(seconds=0))
    spool.append_all(
        [Append(a, source("a"), rows("a", 6, 2)), Append(b, source("b"), rows("b", 5, 1))]
    )
    epoch = epochs(partition_dir(root, a))[-1][0]
    doc = json.loads(open(os.path.join(partition_dir(root, a), f"e{epoch:08d}", INDEX_NAME)).read())
    assert doc["format_version"] == 4
    assert [text for _, text in read(root, a, 4, 8)] == ["a/4", "a/5", "a/6", "a/7"]
    assert len(arrow_files(os.path.join(root, FLUSHES))) == 1
    spool.truncate(a, 6)  # the format 3 segments go, the new one stays
    assert load_index(root, a).start == 6
    assert not [path for path in arrow_files(partition_dir(root, a)) if "e00000001" in path]
    spool.truncate(b, 6)
    spool.truncate(a, 8)
    assert arrow_files(root) == [], "the numbered file went with its last segment"
    assert load_index(root, b).dropped == 2
    spool.close()


def test_holders_leave_numbered_flush_files_to_the_next_exclusive_writer(tmp_path):
    """A folder that capture on the driver wrote, then capture processes: a holder's start does
    not delete the numbered files (old as they are), it reads them, and its retention deletes
    their segments but not the files, which the next exclusive writer's start deletes once no
    segment names them."""
    root = str(tmp_path)
    driver = Spool(root, 1 << 30)
    assert driver.append_all([Append(k, source(k), rows(k, 0, 2)) for k in "ab"]) == {}
    driver.close()
    [numbered] = arrow_files(os.path.join(root, FLUSHES))
    os.utime(numbered, (1, 1))  # older than any stale holder's file
    spool = Spool(root, 1 << 30, exclusive=False, retention=Retention(seconds=0))
    for key in "ab":
        spool.open_partition(key, expect_epoch=1)
    assert arrow_files(os.path.join(root, FLUSHES)) == [numbered]
    assert read(root, "a", 0, 2) == [("tcp://a", "a/0"), ("tcp://a", "a/1")]
    spool.truncate("a", 2)
    spool.truncate("b", 2)
    assert load_index(root, "a").start == 2 and load_index(root, "b").start == 2
    assert arrow_files(os.path.join(root, FLUSHES)) == [numbered], "not a holder's to delete"
    spool.close()
    Spool(root, 1 << 30).close()
    assert arrow_files(os.path.join(root, FLUSHES)) == []
