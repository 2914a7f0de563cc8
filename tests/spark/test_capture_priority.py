"""A query's ``captureNice`` reaches its capture: in the process where Spark runs the stream's
source (``capture=driver``), capture's zmq I/O thread, and that process's main thread while
capture runs, are at the nice value asked for. Read from /proc/<pid>/task/<tid>/stat of the
processes this test started (Spark's JVM and its Python workers descend from it)."""

from __future__ import annotations

import os
import time

import pytest
import zmq

from support.common import wait_until

#: a value no other process of this test runs at
ASKED = -7


def descendants(root: int) -> list[int]:
    """Process ids whose chain of parents reaches ``root``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                    text = stat.read()
            except OSError:
                continue
            parents[int(entry)] = int(text[text.rindex(")") + 2 :].split()[1])
    found = []
    for pid in parents:
        ancestor = parents.get(pid, 0)
        while ancestor > 1 and ancestor != root:
            ancestor = parents.get(ancestor, 0)
        if ancestor == root:
            found.append(pid)
    return found


def threads_at(nice: int, pids: list[int]) -> dict[int, list[str]]:
    """{pid: names of its threads at ``nice``, the main thread named "main"}."""
    found: dict[int, list[str]] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii") as stat:
                    text = stat.read()
            except OSError:
                continue
            if int(text[text.rindex(")") + 2 :].split()[16]) == nice:
                name = "main" if int(tid) == pid else text[text.index("(") + 1 : text.rindex(")")]
                found.setdefault(pid, []).append(name)
    return found


@pytest.mark.spark
def test_capture_nice_reaches_the_query_s_capture(spark, tmp_path):
    if os.getpriority(os.PRIO_PROCESS, 0) <= ASKED:
        pytest.skip("the test process already runs at or above the priority asked")
    context = zmq.Context()
    sock = context.socket(zmq.XPUB)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    query = (
        spark.readStream.format("zeroeq")
        .option("publishers", f"127.0.0.1:{port}")
        .option("spoolPath", str(tmp_path / "spool"))
        .option("captureNice", str(ASKED))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        assert sock.poll(60_000), "the query's capture did not subscribe"
        raised: dict[int, list[str]] = {}

        def found() -> bool:
            raised.clear()
            raised.update(threads_at(ASKED, descendants(os.getpid())))
            return bool(raised)

        wait_until(found, timeout=30, what=f"threads at nice {ASKED}")
        time.sleep(0.5)  # the log line and the main thread's raise follow the first thread's
        found()
    finally:
        query.stop()
        sock.close(0)
        context.term()
    assert len(raised) == 1, raised  # one process: the stream's source, where capture runs
    (names,) = raised.values()
    # capture's zmq context names its threads PREFIX/ZMQbg/... (capture.stats)
    assert "main" in names and any(name.endswith("/ZMQbg/Reaper") for name in names), names
    assert any("/ZMQbg/IO/" in name for name in names), names
