"""Retention: committed segments are kept after Spark commits them and deleted by age, by bytes,
and first whenever a write needs room at the spool's bound; uncommitted ones never are."""

from __future__ import annotations

import json
import os
import time

from spark_zmq.capture.buffer import spool_table
from spark_zmq.spool import files as spool_files
from spark_zmq.spool.index import Retention, Source
from spark_zmq.spool.layout import (
    HISTORY_NAME,
    INDEX_NAME,
    epochs,
    load_index,
    partition_dir,
    segment_paths,
)
from spark_zmq.spool.reader import read_range, read_snapshot
from spark_zmq.spool.writer import Spool

SOURCE = Source("tcp://127.0.0.1:1", {"publisher": "p"})


def segment(first: int, size: int = 1000):
    """One message of about ``size`` bytes, named m<first>."""
    return spool_table([[b"m%d " % first + b"." * size]], [first], {})


def kept(root: str, key: str) -> list[int]:
    """First offsets of the segments a partition's index lists (whose files are there)."""
    index = load_index(root, key)
    for s in index.segments:
        assert any(os.path.exists(path) for path in segment_paths(root, key, s)), s
    return [s.first for s in index.segments]


def segment_size(tmp_path) -> int:
    """The size on disk of one ``segment``."""
    probe = Spool(str(tmp_path / "probe"), 1 << 30)
    probe.append("p", SOURCE, segment(0))
    size = probe.partitions["p"].segments[0].nbytes
    probe.close()
    return size


def fill(spool: Spool, key: str, count: int) -> None:
    for _ in range(count):
        spool.append(
            key, SOURCE, segment(spool.partitions[key].end if key in spool.partitions else 0)
        )


def test_committed_segments_stay_until_retention_and_a_restart_knows_they_are_committed(tmp_path):
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)  # no bound by age or bytes
    fill(spool, "k", 4)
    spool.truncate("k", 3)
    spool.write_commits()  # (capture's next flush)
    assert kept(root, "k") == [0, 1, 2, 3], "committed, kept for replay"
    assert read_snapshot(root)["k"] == (0, 4, False, 3)
    assert read_snapshot(root)["k"].first_uncommitted == 3
    spool.close()
    again = Spool(root, 1 << 30, retention=Retention(nbytes=1))
    assert kept(root, "k") == [0, 1, 2, 3], "retention runs at a commit or a tick, not at load"
    again.expire()
    again.truncate("k", 3)  # nothing new is committed: retention still runs
    assert kept(root, "k") == [3], "the new holder knew which were committed"
    again.close()


def test_retention_by_bytes_deletes_committed_segments_oldest_first_across_partitions(tmp_path):
    root = str(tmp_path / "spool")
    one = segment_size(tmp_path)
    spool = Spool(root, 1 << 30, retention=Retention(nbytes=one * 7 // 2))  # 3 segments fit
    for key in ("a", "b", "a", "b", "a", "b"):  # a0 b0 a1 b1 a2 b2, oldest first
        fill(spool, key, 1)
    spool.truncate("a", 3)
    assert kept(root, "a") == [0, 1, 2] and kept(root, "b") == [0, 1, 2], "3 committed fit"
    spool.truncate("b", 2)  # 5 committed: the 2 oldest go (a0, b0)
    assert kept(root, "a") == [1, 2] and kept(root, "b") == [1, 2]
    assert spool.committed_nbytes == 3 * one
    spool.truncate("b", 3)  # 4 committed: a1 goes
    assert kept(root, "a") == [2] and kept(root, "b") == [1, 2]
    assert load_index(root, "a").start == 2 and load_index(root, "b").start == 1
    fill(spool, "a", 5)  # uncommitted: never deleted, however much retention is exceeded
    spool.expire()
    assert kept(root, "a") == [2, 3, 4, 5, 6, 7]
    spool.close()


def test_retention_by_age_deletes_only_committed_segments_also_with_nothing_written(tmp_path):
    root = str(tmp_path)
    spool = Spool(root, 1 << 30, retention=Retention(seconds=0.5))
    fill(spool, "k", 3)
    fill(spool, "idle", 1)
    spool.truncate("k", 2)
    spool.truncate("idle", 1)
    assert kept(root, "k") == [0, 1, 2], "younger than the retention"
    time.sleep(0.6)
    fill(spool, "k", 1)
    spool.truncate("k", 2)  # nothing new committed: k0, k1 and idle0 are old
    assert kept(root, "k") == [2, 3], "k2 is old too, but not committed"
    assert kept(root, "idle") == []
    spool.truncate("k", 4)  # k2 goes at its commit, k3 is young
    assert kept(root, "k") == [3]
    fill(spool, "k", 1)  # k4: never committed
    time.sleep(0.6)
    spool.expire()  # the writer's tick: nothing written, nothing committed, yet it runs
    assert kept(root, "k") == [4], "k3 went; k4 was never committed"
    spool.close()


def test_at_the_bound_committed_segments_go_before_any_message_is_dropped(tmp_path):
    root = str(tmp_path / "spool")
    size = segment_size(tmp_path)
    spool = Spool(root, 20 * size)  # no retention of its own: the bound alone
    fill(spool, "a", 12)
    fill(spool, "b", 8)
    spool.truncate("a", 12)
    spool.truncate("b", 4)
    assert spool.nbytes == 20 * size and spool.committed_nbytes == 16 * size
    assert spool.has_room("a") and spool.has_room("b"), "room made of committed segments"
    # at once a sixteenth of the bound below it: 2 segments, the oldest (a0, a1)
    assert kept(root, "a") == list(range(2, 12)) and kept(root, "b") == list(range(8))
    assert spool.nbytes == 18 * size
    fill(spool, "b", 2)
    assert spool.has_room("b"), "room again, without a drop"
    fill(spool, "b", 2)
    assert kept(root, "a") == list(range(4, 12))
    spool.truncate("a", 12)
    for _ in range(6):  # all 12 committed go, oldest first, before anything drops
        assert spool.has_room("b")
        fill(spool, "b", 2)
    assert spool.committed_nbytes == 0 and kept(root, "a") == []
    assert kept(root, "b") == list(range(4, 24)), "b's uncommitted messages all kept"
    assert not spool.has_room("b"), "only uncommitted data left: b drops (a gap row)"
    spool.close()


def test_at_the_bound_what_some_reader_committed_goes_once_nothing_all_committed_is_left(
    tmp_path,
):
    """A capture service's spool with reader names at different places: at the bound, what
    every name committed goes first; then what some name committed (``read_by_some``), oldest
    first across partitions; never what no name committed. The partition's committed offset
    moves up to what is left (what is gone cannot be read), and a restart knows it."""
    root = str(tmp_path / "spool")
    size = segment_size(tmp_path)
    spool = Spool(root, 20 * size)
    fill(spool, "a", 12)
    fill(spool, "b", 8)
    spool.truncate("a", 2)  # every name committed a0, a1
    spool.read_by_some({"a": 8, "b": 4})  # some name committed a2..a7 and b0..b3
    assert spool.has_room("b")
    assert kept(root, "a") == list(range(2, 12)), "what every name committed goes first"
    fill(spool, "b", 2)
    assert spool.has_room("b")
    assert kept(root, "a") == list(range(4, 12)), "then the oldest that some name committed"
    assert spool.snapshot()["a"].committed == 4 and spool.committed_nbytes == 0
    for _ in range(4):  # a4..a7 and b0..b3 go, two at a time, before anything drops
        fill(spool, "b", 2)
        assert spool.has_room("b")
    assert kept(root, "a") == list(range(8, 12)) and kept(root, "b") == list(range(4, 18))
    fill(spool, "b", 2)
    assert not spool.has_room("b"), "only what no name committed is left: b drops"
    assert kept(root, "a") == list(range(8, 12)) and kept(root, "b") == list(range(4, 20))
    spool.close()
    assert read_snapshot(root)["a"] == (8, 12, False, 8)
    assert read_snapshot(root)["b"] == (4, 20, False, 4)


def test_an_index_written_before_retention_existed_still_loads(tmp_path, monkeypatch):
    """An index of the previous release has neither ``committed`` nor ``written_at``: all it
    lists is uncommitted (that release deleted at commit); its segments' age counts from the
    load, and retention works on them once committed."""
    monkeypatch.setattr(spool_files, "LINES_BEFORE_SAVE", 0)  # every commit writes index.json
    root = str(tmp_path)
    spool = Spool(root, 1 << 30, exclusive=False)  # (a holder: segment files in the epoch folder)
    spool.open_partition("k", expect_epoch=0)
    fill(spool, "k", 3)
    spool.truncate("k", 1)
    spool.close()
    epoch = epochs(partition_dir(root, "k"))[-1][0]
    path = os.path.join(partition_dir(root, "k"), f"e{epoch:08d}.sealed", INDEX_NAME)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    # as that release left it: the committed segment deleted, no history file
    assert doc["start"] == 1 and [s[0] for s in doc["segments"]] == [1, 2]
    del doc["committed"], doc["retained_from"]
    doc["segments"] = [segment[:4] for segment in doc["segments"]]  # no age, no part
    os.remove(os.path.join(os.path.dirname(path), HISTORY_NAME))
    os.remove(os.path.join(os.path.dirname(path), f"{0:020d}.arrow"))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    assert read_snapshot(root)["k"] == (1, 3, False, 1)
    before = time.time()
    again = Spool(root, 1 << 30, retention=Retention(seconds=0.3))
    assert all(s.at >= before for s in again.partitions["k"].segments)
    again.truncate("k", 2)
    assert kept(root, "k") == [1, 2], "its age counts from the load"
    time.sleep(0.4)
    again.expire()
    assert kept(root, "k") == [2]
    again.close()


def test_a_read_that_meets_segments_retention_deleted_meanwhile_gets_a_gap_row(tmp_path):
    """The writer publishes the index, then deletes: a reader that listed a segment before
    finds its file gone and reads a gap row for it, not a failure."""
    root = str(tmp_path)
    spool = Spool(root, 1 << 30, retention=Retention(seconds=0))
    fill(spool, "k", 4)
    reading = read_range(root, "k", 0, 4)
    first, _, table = next(reading)  # the index is read: it lists all 4
    assert first == 0 and table.column("fault").to_pylist() == [None]
    spool.truncate("k", 3)  # retention 0: segments 1 and 2 go (0 too)
    rest = [(first, t.column("fault").to_pylist()) for first, _, t in reading]
    assert [first for first, _ in rest] == [1, 2, 3]
    assert rest[0][1][0].startswith("gap: 1 messages at offsets [1, 2) of partition k were")
    assert rest[2][1] == [None], "the uncommitted segment is read as usual"
    spool.close()


def history_file(root: str, key: str) -> str:
    epoch = epochs(partition_dir(root, key))[-1][0]
    return os.path.join(partition_dir(root, key), f"e{epoch:08d}", HISTORY_NAME)


def test_committed_segments_go_to_an_append_only_history_so_the_index_stays_small(
    tmp_path, monkeypatch
):
    """index.json is written at every append: it lists only what is not committed; the
    committed segments are appended to the history file at commit, which is written anew only
    once mostly dead. A restart, and readers, find them all again."""
    monkeypatch.setattr(spool_files, "LINES_BEFORE_SAVE", 0)  # every commit writes index.json
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    fill(spool, "k", 50)
    spool.truncate("k", 40)
    index_path = os.path.join(os.path.dirname(history_file(root, "k")), INDEX_NAME)
    with open(index_path, encoding="utf-8") as f:
        assert [s[0] for s in json.load(f)["segments"]] == list(range(40, 50))
    size = os.path.getsize(history_file(root, "k"))
    fill(spool, "k", 1)
    assert os.path.getsize(history_file(root, "k")) == size, "an append leaves it alone"
    spool.truncate("k", 45)
    with open(history_file(root, "k"), encoding="utf-8") as f:
        assert [json.loads(line)[0] for line in f] == list(range(45)), "appended"
    assert [first for first, _, _ in read_range(root, "k", 0, 51)] == list(range(51))
    spool.close()
    again = Spool(root, 1 << 30, retention=Retention(nbytes=5 * segment_size(tmp_path)))
    assert [s.first for s in again.partitions["k"].segments] == list(range(51))
    for _ in range(1100):  # each commit deletes one: dead lines pile up, then go at once
        fill(again, "k", 1)
        again.truncate("k", again.partitions["k"].end)
    with open(history_file(root, "k"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert 5 <= len(lines) <= 5 + 1024 + 1, len(lines)
    again.close()
    assert kept(root, "k") == list(range(1146, 1151))


def test_a_history_cut_short_counts_its_lost_lines_as_deleted(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_files, "LINES_BEFORE_SAVE", 0)  # every commit writes index.json
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    fill(spool, "k", 6)
    spool.truncate("k", 4)
    folder, name = os.path.split(history_file(root, "k"))
    spool.close()
    path = os.path.join(f"{folder}.sealed", name)
    with open(path, "r+b") as f:  # the first line lost, a torn line at the end
        lines = f.read().splitlines(keepends=True)
        f.seek(0)
        f.truncate()
        f.write(b"".join(lines[1:]) + b"[4, 1, 2")
    index = load_index(root, "k")
    assert index.start == 1 and [s.first for s in index.segments] == [1, 2, 3, 4, 5]
    assert [first for first, _, _ in read_range(root, "k", 0, 6)] == [0, 1, 2, 3, 4, 5]
    assert (
        next(read_range(root, "k", 0, 6))[2]
        .column("fault")[0]
        .as_py()
        .startswith("gap: 1 messages at offsets [0, 1) of partition k were deleted")
    )
