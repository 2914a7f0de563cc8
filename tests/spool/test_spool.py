"""The spool: append, re-read any range, commits and retention (``spoolRetention=0``: deleted at
commit), survive a restart, one writer. Retention itself: test_retention."""

from __future__ import annotations

import os
import socket

import pyarrow as pa
import pytest

from spark_zmq.capture.buffer import spool_table
from spark_zmq.spool.index import Retention, Source
from spark_zmq.spool.layout import LeaseLost, SpoolError, epochs, load_index, partition_dir
from spark_zmq.spool.leases import load_lease
from spark_zmq.spool.reader import read_range
from spark_zmq.spool.writer import Spool

SOURCE = Source("tcp://127.0.0.1:1", {"publisher": "p"})


def messages(first, count):
    frames = [[f"m{i}".encode()] for i in range(first, first + count)]
    return spool_table(frames, [i * 1000 for i in range(count)], {})


def read_all(root, key, start, end):
    out = []
    for _first, source, table in read_range(root, key, start, end):
        assert source == SOURCE
        rows = table.column("frames").to_pylist()
        assert len(rows) == table.num_rows
        out += [r[0].decode() for r in rows]
    return out


def test_append_read_any_range_truncate(tmp_path):
    spool = Spool(str(tmp_path), 1 << 30, retention=Retention(seconds=0))
    spool.append("k", SOURCE, messages(0, 5))
    spool.append("k", SOURCE, messages(5, 5))
    assert read_all(str(tmp_path), "k", 3, 8) == ["m3", "m4", "m5", "m6", "m7"]
    assert read_all(str(tmp_path), "k", 3, 8) == ["m3", "m4", "m5", "m6", "m7"]  # replayable
    spool.truncate("k", 7)  # the first segment is committed, the second is still needed
    assert load_index(str(tmp_path), "k").start == 5
    assert load_index(str(tmp_path), "k").committed == 7
    assert read_all(str(tmp_path), "k", 7, 10) == ["m7", "m8", "m9"]
    # offsets retention deleted: one gap row saying so, not an error
    [(first, _, deleted)] = list(read_range(str(tmp_path), "k", 2, 4))
    assert first == 2 and deleted.num_rows == 1
    assert (
        deleted.column("fault")[0]
        .as_py()
        .startswith(
            "gap: 2 messages at offsets [2, 4) of partition k were deleted from the spool "
            "before this read reached them: by retention once committed"
        )
    )
    with pytest.raises(SpoolError, match=r"cannot serve offsets \[2, 12\) of partition 'k'"):
        read_all(str(tmp_path), "k", 2, 12)  # past its end: never held
    spool.close()


def test_a_second_writer_waits_for_a_stopping_holder_and_fails_fast_on_a_live_one(tmp_path):
    import threading
    import time

    from spark_zmq.spool.epochs import STOPPING_GRACE

    holder = Spool(str(tmp_path), 1 << 30)
    started = time.monotonic()
    with pytest.raises(SpoolError, match="in use by another running query"):
        Spool(str(tmp_path), 1 << 30, lock_wait=30)
    assert STOPPING_GRACE <= time.monotonic() - started < 10, "a live holder: no long wait"

    holder.stopping()  # as a query's process does when it is told to stop
    threading.Timer(STOPPING_GRACE + 1.0, holder.close).start()
    successor = Spool(str(tmp_path), 1 << 30, lock_wait=30)  # waits, then takes over
    successor.close()


def test_offsets_continue_after_restart_and_the_folder_has_one_writer(tmp_path):
    spool = Spool(str(tmp_path), 1 << 30)
    spool.append("a:1", SOURCE, messages(0, 3))
    with pytest.raises(SpoolError, match="in use by another running query") as info:
        Spool(str(tmp_path), 1 << 30, lock_wait=0.5)
    holder = f"process {os.getpid()} on host {socket.gethostname()}, since "
    assert holder in str(info.value) and "give each query its own option spoolPath" in str(
        info.value
    )
    spool.close()
    again = Spool(str(tmp_path), 1 << 30)
    assert again.snapshot()["a:1"] == (0, 3, False, 0)
    again.append("a:1", SOURCE, messages(3, 2))
    assert read_all(str(tmp_path), "a:1", 0, 5) == ["m0", "m1", "m2", "m3", "m4"]
    again.close()


def test_fault_rows_and_size_accounting(tmp_path):
    spool = Spool(str(tmp_path), 1)
    assert spool.has_room()
    spool.append("k", SOURCE, spool_table([[b"x"], []], [1, 2], {1: "gap: test"}))
    assert not spool.has_room()
    table = next(read_range(str(tmp_path), "k", 0, 2))[2]
    assert table.column("fault").to_pylist() == [None, "gap: test"]
    assert table.schema.field("received_at").type == pa.timestamp("us", tz="UTC")
    spool.truncate("k", 2)  # committed: deleted as soon as a write needs the room
    assert spool.has_room() and spool.nbytes == 0
    spool.close()


def test_at_the_bound_only_a_partition_over_its_share_loses_room(tmp_path):
    """One partition fills the spool: it has no more room, its neighbours still have theirs
    (the bound divided among the partitions)."""
    spool = Spool(str(tmp_path), 64 << 10)
    spool.append("quiet", SOURCE, messages(0, 1))
    big = spool_table([[b"x" * (80 << 10)]], [1], {})
    spool.append("flood", SOURCE, big)
    assert spool.nbytes >= spool.max_bytes
    assert not spool.has_room("flood") and not spool.has_room()
    assert spool.has_room("quiet") and spool.has_room("new")
    spool.truncate("flood", 1)
    assert spool.has_room("flood")
    spool.close()


def test_a_claim_fences_the_previous_holder(tmp_path):
    """Two holders of one partition (capture=executors): the second claims the next epoch, and
    from then on every write of the first fails; nothing it writes late reaches a reader."""
    root = str(tmp_path)
    first = Spool(root, 1 << 30, exclusive=False)
    with pytest.raises(LeaseLost, match="not held"):
        first.append("k", SOURCE, messages(0, 1))  # a holder never claims implicitly
    first.open_partition("k", expect_epoch=0)
    first.append("k", SOURCE, messages(0, 3))
    assert load_lease(root, "k").epoch == 1

    second = Spool(root, 1 << 30, exclusive=False, retention=Retention(seconds=0))
    with pytest.raises(LeaseLost, match="held by epoch 1, not 0"):
        second.open_partition("k", expect_epoch=0)
    second.open_partition("k", expect_epoch=1)
    assert second.inherited["k"].holder and second.inherited["k"].epoch == 1
    with pytest.raises(LeaseLost, match="taken over"):
        first.append("k", SOURCE, messages(3, 2))  # the stale holder is fenced
    with pytest.raises(LeaseLost):
        first.write_lease("k")
    second.append("k", SOURCE, messages(3, 2))
    assert read_all(root, "k", 0, 5) == ["m0", "m1", "m2", "m3", "m4"]
    # a third claimant that planned on epoch 1 loses to the second's claim
    with pytest.raises(LeaseLost):
        Spool(root, 1 << 30, exclusive=False).open_partition("k", expect_epoch=1)

    second.truncate("k", 3)  # the first epoch's segment goes, and its folder with it
    assert [e for e, _ in epochs(partition_dir(root, "k"))] == [2]
    second.close()  # lets go: the partition is free
    assert load_lease(root, "k").sealed
    assert read_all(root, "k", 3, 5) == ["m3", "m4"]


def test_an_exclusive_spool_takes_every_partition_over(tmp_path):
    root = str(tmp_path)
    holder = Spool(root, 1 << 30, exclusive=False)
    holder.open_partition("k", expect_epoch=0)
    holder.append("k", SOURCE, messages(0, 2))
    driver = Spool(root, 1 << 30)
    assert driver.snapshot() == {"k": (0, 2, False, 0)}
    driver.append("k", SOURCE, messages(2, 1))
    assert load_lease(root, "k").epoch == 2
    with pytest.raises(LeaseLost):
        holder.append("k", SOURCE, messages(2, 1))
    assert read_all(root, "k", 0, 3) == ["m0", "m1", "m2"]
    driver.close()


def test_every_json_file_of_the_spool_carries_its_format_version(tmp_path):
    """index.json, lease.json and the driver's documents say which layout wrote them; a file
    of another layout is refused with a clear error, one without a version (an earlier
    release) is read as version 1. index.json has a layout of its own (version 4: it names an
    appended-segments file, and its segments are parts of flush files, which an exclusive
    writer's segments name by number) and this release reads its versions 1 to 3 too."""
    import json

    from spark_zmq.spool.index import FORMAT_VERSION, INDEX_FORMAT_VERSION
    from spark_zmq.spool.layout import INDEX_NAME, LEASE_NAME, JsonState

    root = str(tmp_path / "spool")
    spool = Spool(root, 1 << 20)
    spool.append("p", SOURCE, messages(0, 3))
    epoch = epochs(partition_dir(root, "p"))[-1][0]
    folder = tmp_path / "spool" / "p" / f"e{epoch:08d}"
    assert json.loads((folder / LEASE_NAME).read_text())["format_version"] == FORMAT_VERSION
    assert json.loads((folder / INDEX_NAME).read_text())["format_version"] == 4
    assert INDEX_FORMAT_VERSION == 4
    state = JsonState(str(tmp_path / "spool" / "assignment.json"))
    state.save({"beat": 1})
    assert json.loads((tmp_path / "spool" / "assignment.json").read_text())["format_version"] == 1
    assert state.load() == {"beat": 1}
    spool.close()

    index = folder.parent / f"e{epoch:08d}.sealed" / INDEX_NAME
    doc = json.loads(index.read_text())
    del doc["format_version"]
    index.write_text(json.dumps(doc))
    assert load_index(root, "p").end == 3
    doc["format_version"] = 1
    index.write_text(json.dumps(doc))
    assert load_index(root, "p").end == 3
    doc["format_version"] = 5
    index.write_text(json.dumps(doc))
    with pytest.raises(
        SpoolError,
        match=r"e00000001\.sealed/index\.json has spool format "
        r"version 5; this release of spark_zmq reads versions 1 to 4",
    ):
        load_index(root, "p")
    lease = folder.parent / f"e{epoch:08d}.sealed" / LEASE_NAME
    lease.write_text(json.dumps({**json.loads(lease.read_text()), "format_version": 2}))
    with pytest.raises(
        SpoolError,
        match=r"lease\.json has spool format version 2; this "
        r"release of spark_zmq reads version 1\.",
    ):
        load_lease(root, "p")
    (tmp_path / "spool" / "assignment.json").write_text('{"format_version": 7, "beat": 2}')
    with pytest.raises(SpoolError, match=r"assignment\.json has spool format version 7"):
        state.load()
    (tmp_path / "spool" / "assignment.json").write_text("[1, 2]")
    with pytest.raises(SpoolError, match=r"assignment\.json holds a JSON list where spark_zmq"):
        state.load()


@pytest.mark.parametrize(
    "key",
    ["..", ".", "a/../../b", "x" * 1000, "\u00e9" * 300, "ok:1", "+not-hashed", "%2E%2E"],
)
def test_a_key_peers_chose_names_one_folder_inside_the_spool(tmp_path, key):
    """Keys come from what peers announce: '..' once made '<spool>/..'s children, and a key
    that quotes to over 255 bytes failed with 'File name too long'. Each key is one folder
    inside the spool, whatever it holds, and is found again by its key."""
    from spark_zmq.spool.layout import folder_name, partition_keys

    root = tmp_path / "spool"
    spool = Spool(str(root), 1 << 30)
    spool.append(key, SOURCE, messages(0, 3))
    spool.close()
    name = folder_name(key)
    assert name not in ("", ".", "..") and "/" not in name and len(name.encode()) <= 255
    assert os.path.dirname(partition_dir(str(root), key)) == str(root)
    assert sorted(os.listdir(tmp_path)) == ["spool"]  # nothing beside the spool
    assert partition_keys(str(root)) == [key]
    assert read_all(str(root), key, 0, 3) == ["m0", "m1", "m2"]
    again = Spool(str(root), 1 << 30)  # a restart finds the partition by its key
    assert again.snapshot()[key].end == 3
    again.close()


def test_long_keys_that_share_a_beginning_are_different_folders(tmp_path):
    from spark_zmq.spool.layout import partition_keys

    keys = ["p" * 400 + "1", "p" * 400 + "2"]
    spool = Spool(str(tmp_path), 1 << 30)
    for n, key in enumerate(keys):
        spool.append(key, SOURCE, messages(n, 1))
    spool.close()
    assert sorted(partition_keys(str(tmp_path))) == sorted(keys)
    assert read_all(str(tmp_path), keys[1], 0, 1) == ["m1"]


def test_a_listing_names_the_segments_of_a_range_or_none_where_it_cannot(tmp_path):
    """``PartitionIndex.listing``: the retained start and the segments that hold a range,
    for read tasks that then load no index; None where the index does not list the range
    whole (past its end, into committed segments it was loaded without) or it would take more
    than the bound's segments."""
    from spark_zmq.spool.index import Listing, PartitionIndex, Segment

    segments = [Segment(first, 10, 100, 0, 0.0, 0) for first in range(20, 100, 10)]
    index = PartitionIndex("k", start=5, end=100, segments=segments)  # [5, 20) not listed
    listing = index.listing(35, 62)
    assert isinstance(listing, Listing) and listing.start == 5
    assert [s.first for s in listing.segment_list()] == [30, 40, 50, 60]
    assert listing.segment_list()[0] == segments[1]
    assert index.listing(20, 100) is not None and index.listing(62, 62) is not None
    assert index.listing(90, 101) is None, "past the end"
    assert index.listing(10, 30) is None, "starts in committed segments not loaded"
    assert index.listing(0, 4) == Listing(5, ()), "all of it deleted: a gap row, no segment"
    assert index.listing(20, 100, limit=7) is None and index.listing(20, 90, limit=7)
