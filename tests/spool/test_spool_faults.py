"""Spool faults: a damaged segment is read up to the damage, a full disk fails the query clearly
(or, with onSpoolWriteError=drop, drops and counts) and never damages what the spool holds."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from spark_zmq.capture.buffer import spool_table
from spark_zmq.protocols.zeroeq import Publisher
from spark_zmq.spool import reserve as reserve_module
from spark_zmq.spool.index import Source
from spark_zmq.spool.layout import (
    BATCH_ROWS,
    SpoolWriteError,
    load_index,
    partition_dir,
    segment_paths,
)
from spark_zmq.spool.reader import read_range
from spark_zmq.spool.reserve import RESERVE_BYTES, RESERVE_NAME
from spark_zmq.spool.writer import Spool
from support.common import wait_until
from support.queries import memory_query

SOURCE = Source("tcp://127.0.0.1:1", {})
ECHO = "zeroeq::test::Echo"


def test_a_damaged_segment_is_read_up_to_the_damage_with_the_rest_as_gap_rows(tmp_path):
    root = str(tmp_path)
    spool = Spool(root, 1 << 30)
    count = 2 * BATCH_ROWS + 100
    spool.append(
        "k", SOURCE, spool_table([[b"%d" % i] for i in range(count)], list(range(count)), {})
    )
    spool.append("k", SOURCE, spool_table([[b"after"]], [0], {}))
    segment = load_index(root, "k").segments[0]
    path = segment_paths(root, "k", segment)[0]
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # a crash cut the file in its second batch
        f.truncate(size * 2 // 3)

    def read(start, end):
        rows = []
        for _, _, table in read_range(root, "k", start, end):
            rows += zip(table.column("frames").to_pylist(), table.column("fault").to_pylist())
        return rows

    rows = read(0, count + 1)
    assert len(rows) == count + 1  # every offset still names one row
    assert [f for f, _ in rows[:BATCH_ROWS]] == [[b"%d" % i] for i in range(BATCH_ROWS)]
    kept = next(i for i, (_, fault) in enumerate(rows) if fault)
    assert kept % BATCH_ROWS == 0 and BATCH_ROWS <= kept < count
    lost = rows[kept:count]
    assert all(
        frames == []
        and re.match(
            rf"gap: {count - kept} messages at offsets \[{kept}, {count}\) are lost: spool segment "
            rf"\S+ is damaged",
            fault,
        )
        for frames, fault in lost
    )
    assert rows[count] == ([b"after"], None)
    assert read(kept - 2, kept + 2) == rows[kept - 2 : kept + 2]  # the same rows when replayed
    spool.close()


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs (the test runs in its own mount namespace: scripts/netns.sh)."""
    folder = tmp_path / "small"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


DISK_FULL = r"the spool could not be written \(cannot write .*No space left on device\)"


def accounted(rows, cause: str = DISK_FULL) -> int:
    """Messages delivered as rows plus those the gap rows count as dropped because ``cause`` (a
    regular expression); a gap row of another cause fails."""
    dropped = sum(
        int(
            re.match(
                rf"gap: (\d+) messages dropped between \S+ and \S+ because {cause}", r.error
            ).group(1)
        )
        for r in rows
        if r.error
    )
    return dropped + sum(1 for r in rows if not r.error)


def burst_then_account(spark, publisher, query, spool, cause: str = DISK_FULL) -> list:
    """Publish a burst of 60 messages of 20 kB (1.2 MB, 20 ms apart: a few a flush, so the
    spool fills up to its limit and the rest is dropped), then small messages until every
    message sent is either a row of the query's table or counted by a gap row of ``cause``
    (there may be more than one drop episode), and a small one is a row (capture goes on);
    the rows. Fails after 90 s, with the state of
    the spool and the query."""
    table, big, small = query.name, 60, 0
    publisher.wait_for_subscribers()
    for i in range(big):
        publisher.publish(ECHO, b"big/%d/" % i + os.urandom(20_000))
        time.sleep(0.02)
    deadline = time.monotonic() + 90
    while True:
        publisher.publish(ECHO, b"small/%d" % small)
        small += 1

        def all_accounted(small=small):
            rows = spark.sql(f"select payload, error from {table}").collect()
            goes_on = any(r.payload.startswith(b"small/") for r in rows if not r.error)
            return goes_on and accounted(rows, cause) == big + small and rows

        try:
            return wait_until(all_accounted, timeout=3, what="every message delivered or counted")
        except AssertionError:
            assert time.monotonic() < deadline, (
                f"{big + small} messages not all delivered or counted as dropped in 90 s; "
                f"{spool_state(spool, publisher.instance_name, query)}"
            )


def spool_state(spool, key, query) -> str:
    """What a failure report needs: the partition's index, the spool's files, the query."""
    index = load_index(str(spool), key)
    files = sorted(
        (
            os.path.relpath(os.path.join(folder, name), spool),
            os.path.getsize(os.path.join(folder, name)),
        )
        for folder, _, names in os.walk(spool)
        for name in names
    )
    disk = os.statvfs(spool)
    return (
        f"index {index and (index.start, index.committed, index.end, index.dropped)} "
        f"(start, committed, end, dropped); {disk.f_bavail * disk.f_frsize} bytes free; "
        f"files {files}; query active {query.isActive}, status {query.status}, "
        f"exception {query.exception()}, last progress {query.lastProgress}"
    )


def start_query(spark, tmp_path, spool, name, **options):
    """A query of the publishers of session ``name`` that keeps its spool at ``spool``."""
    return memory_query(
        spark,
        tmp_path,
        "zeroeq",
        name,
        session=name,
        discoveryInterfaces="127.0.0.1",
        spoolPath=str(spool),
        **options,
    )


def test_a_gap_row_on_a_full_disk_takes_the_reserves_room_which_comes_back(small_disk, monkeypatch):
    """The gap rows that report drops are what lets Spark commit and retention free the disk
    (``spool.reserve``): on a disk with no room left, one takes the reserve's room."""
    monkeypatch.setattr(reserve_module, "RETRY_SECONDS", 0.0)  # made again at the next write
    root = str(small_disk / "spool")
    spool = Spool(root, 1 << 30)
    reserve = os.path.join(root, RESERVE_NAME)
    assert os.path.getsize(reserve) == RESERVE_BYTES
    gap = spool_table([[]], [0], {0: "gap: 3 messages dropped"})
    filler = small_disk / "filler"
    with open(filler, "wb", buffering=0) as f, pytest.raises(OSError, match="No space left"):
        while True:
            f.write(bytes(4096))
    with pytest.raises(SpoolWriteError, match="No space left on device"):
        spool.append("k", SOURCE, gap)
    for _ in range(2):  # its room takes a few; it is not made again while the disk is full
        spool.append("k", SOURCE, gap, dropped=3, into_reserve=True)
        assert not os.path.exists(reserve)
    filler.unlink()
    spool.append("k", SOURCE, spool_table([[b"after"]], [0], {}))
    assert os.path.getsize(reserve) == RESERVE_BYTES
    index = load_index(root, "k")
    assert (index.end, index.dropped) == (3, 6)
    spool.close()


@pytest.mark.spark
def test_a_full_disk_fails_the_query_clearly_and_leaves_the_spool_readable(
    spark, tmp_path, small_disk, zeroconf
):
    publisher = Publisher("fulldisk", zeroconf=zeroconf)
    spool = small_disk / "spool"
    query = start_query(spark, tmp_path, spool, "fulldisk")
    try:
        publisher.wait_for_subscribers()
        publisher.publish(ECHO, b"small")
        wait_until(
            lambda: (index := load_index(str(spool), publisher.instance_name)) and index.end == 1,
            what="the first message in the spool",
        )
        for _ in range(60):
            publisher.publish(ECHO, os.urandom(20_000))
        wait_until(
            lambda: query.exception() is not None or not query.isActive,
            timeout=60,
            what="the query to fail",
        )
        error = str(query.exception())
    finally:
        query.stop()
        publisher.close()
    assert re.search(
        r"cannot write \S+ \(spool \S+small/spool, partition \S+\): No space left "
        r"on device\. The spool holds everything written before",
        error,
    ), error
    assert "set onSpoolWriteError=drop" in error
    index = load_index(str(spool), publisher.instance_name)  # intact and readable
    rows = [
        r
        for _, _, t in read_range(str(spool), publisher.instance_name, index.start, index.end)
        for r in t.column("frames").to_pylist()
    ]
    assert len(rows) == index.end - index.start and [b"small"] in rows + [[b"small"]]
    assert not [
        n for n in os.listdir(partition_dir(str(spool), publisher.instance_name)) if ".tmp" in n
    ]


@pytest.mark.spark
@pytest.mark.parametrize("core", ["native", "python"])  # a buffer dropped after a failed write
def test_drop_mode_counts_what_a_full_disk_dropped_and_goes_on(
    spark, tmp_path, small_disk, zeroconf, core
):
    name = f"dropdisk_{core}"  # a session of its own: the other core's test may run beside it
    publisher = Publisher(name, zeroconf=zeroconf)
    spool = small_disk / "spool"
    # spoolRetention=0: commits free the disk (with the default 7d, committed segments stay,
    # and a disk they fill stays full: retention does not yet give way to a full disk)
    query = start_query(
        spark,
        tmp_path,
        spool,
        name,
        onSpoolWriteError="drop",
        captureCore=core,
        spoolRetention="0",
    )
    try:
        got = burst_then_account(spark, publisher, query, spool)
        assert query.isActive
    finally:
        query.stop()
        publisher.close()
    dropped = accounted(got) - sum(1 for r in got if not r.error)
    assert dropped > 0 and any(r.payload.startswith(b"small/") for r in got if not r.error)
    assert load_index(str(spool), publisher.instance_name).dropped == dropped


@pytest.mark.spark
def test_a_spool_at_its_bound_with_nothing_committed_ends_its_drop_episode_and_goes_on(
    spark, tmp_path, zeroconf
):
    """Spark commits a micro-batch's offsets only when it plans the next micro-batch, and plans
    one only for new offsets. A burst that fills the spool to its bound within one micro-batch
    leaves nothing committed to delete and, while every message is dropped, no new offset: the
    drop episode's gap row is written at once, over the bound, so that Spark plans the next
    batch, commits the burst, room is made, and capture goes on."""
    publisher = Publisher("bounddrop", zeroconf=zeroconf)
    spool = tmp_path / "spool"
    query = memory_query(
        spark,
        tmp_path,
        "zeroeq",
        "bounddrop",
        {"processingTime": "2 seconds"},  # the whole burst in one micro-batch, mostly
        session="bounddrop",
        discoveryInterfaces="127.0.0.1",
        spoolPath=str(spool),
        maxSpoolBytes="256k",
    )
    try:
        bound = r"the spool \S+ reached maxSpoolBytes \(262144 bytes\)"
        got = burst_then_account(spark, publisher, query, spool, bound)
        assert query.isActive
    finally:
        query.stop()
        publisher.close()
    delivered = [r.payload for r in got if not r.error]
    assert accounted(got, bound) > len(delivered)  # some were dropped
    assert any(p.startswith(b"small/") for p in delivered)
