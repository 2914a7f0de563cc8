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
from spark_zmq.spool.index import Source
from spark_zmq.spool.layout import BATCH_ROWS, load_index, partition_dir, segment_paths
from spark_zmq.spool.reader import read_range
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


def accounted(rows) -> int:
    """Messages delivered as rows plus those the gap rows count as dropped at a full disk."""
    dropped = sum(
        int(
            re.match(
                r"gap: (\d+) messages dropped between \S+ and \S+ because the "
                r"spool could not be written \(cannot write .*No space left on "
                r"device\)",
                r.error,
            ).group(1)
        )
        for r in rows
        if r.error
    )
    return dropped + sum(1 for r in rows if not r.error)


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
    publisher = Publisher("dropdisk", zeroconf=zeroconf)
    spool = small_disk / "spool"
    # spoolRetention=0: commits free the disk (with the default 7d, committed segments stay,
    # and a disk they fill stays full: retention does not yet give way to a full disk)
    query = start_query(
        spark,
        tmp_path,
        spool,
        "dropdisk",
        onSpoolWriteError="drop",
        captureCore=core,
        spoolRetention="0",
    )
    big, small = 60, 0

    def rows():
        return spark.sql("select payload, error from dropdisk").collect()

    try:
        publisher.wait_for_subscribers()
        for i in range(big):  # 1.2 MB at once into 512 KiB
            publisher.publish(ECHO, b"big/%d/" % i + os.urandom(20_000))
        # Small messages until every drop episode has ended: one gets written once Spark's
        # commits have freed the disk, and with it the gap row that counts the drops. There may
        # be more than one episode (a flush after a gap row can fail again), so go on until
        # every message sent is either a row or counted in a gap row.
        deadline = time.monotonic() + 90
        while True:
            publisher.publish(ECHO, b"small/%d" % small)
            small += 1
            try:

                def all_accounted(small=small):
                    return (r := rows()) and accounted(r) == big + small and r

                got = wait_until(
                    all_accounted, timeout=3, what="every message delivered or counted"
                )
                break
            except AssertionError:
                assert time.monotonic() < deadline, (
                    f"{big + small} messages not all delivered or counted as dropped in 90 s"
                )
        assert query.isActive
    finally:
        query.stop()
        publisher.close()
    dropped = accounted(got) - sum(1 for r in got if not r.error)
    assert dropped > 0 and any(r.payload.startswith(b"small/") for r in got if not r.error)
    assert load_index(str(spool), publisher.instance_name).dropped == dropped
