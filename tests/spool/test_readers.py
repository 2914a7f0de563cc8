"""The reader names of a capture service's spool (``spool.readers``), without Spark: the queries'
side (``ReaderHandle``) and the service's (``ReaderCount``, ``held_ends``, ``read_ends``). Real
queries on a service's spool: tests/cli/test_capture_service.py."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time

import pytest

from spark_zmq.spool import readers
from spark_zmq.spool.contract import commits_state
from spark_zmq.spool.index import PartitionState
from spark_zmq.spool.layout import SpoolError
from spark_zmq.spool.readers import (
    ReaderCount,
    ReaderHandle,
    ReaderRecord,
    held_ends,
    load_readers,
    read_ends,
    reader_state,
)
from spark_zmq.testing.logs import logged_warnings


def test_what_every_name_committed_and_what_some_did(tmp_path):
    a = ReaderRecord("a", {"p": 10, "q": 4})
    b = ReaderRecord("b", {"p": 3})
    both = {"a": a, "b": b}
    assert held_ends(both, ["p", "q"]) == {"p": 3, "q": 0}, "b has not committed q: it holds it"
    assert read_ends(both, ["p", "q"]) == {"p": 10, "q": 4}
    assert held_ends({}, ["p"]) == {}, "no name holds data: nothing more is let go"
    held = {"p": PartitionState(0, 12, False), "q": PartitionState(0, 4, False)}
    held["r"] = PartitionState(2, 5, False)  # 0 and 1 are gone: not counted
    assert a.lag(held) == 2 + 0 + 3


def test_a_name_commits_forward_and_a_new_run_goes_on_from_its_commits(tmp_path):
    root = str(tmp_path)
    first = ReaderHandle(root, "archive")
    first.open()
    first.commit({"p": 10})
    first.commit({"p": 7, "q": 2})  # a position never moves back
    first.close()
    assert load_readers(root)["archive"].committed == {"p": 10, "q": 2}
    again = ReaderHandle(root, "archive")
    assert again.open().committed == {"p": 10, "q": 2}
    assert not load_readers(root)["archive"].stopped
    again.close()


def test_a_name_read_by_a_query_on_another_host_is_taken_while_its_document_is_recent(
    tmp_path, monkeypatch
):
    root = str(tmp_path)
    elsewhere = ReaderRecord("n", {}, time.time(), "another-host", 1, "run1", stopped=False)
    os.makedirs(readers.readers_folder(root))
    reader_state(root, "n").save(dataclasses.asdict(elsewhere))
    with pytest.raises(SpoolError, match=r"by a running query \(run run1 in process 1 on host"):
        ReaderHandle(root, "n").open(wait=0)
    stale = time.time() - readers.RUNNING_ELSEWHERE_SECONDS - 1
    reader_state(root, "n").save(dataclasses.asdict(dataclasses.replace(elsewhere, at=stale)))
    ReaderHandle(root, "n").open()  # its query is gone: the name is free


def test_a_query_refused_a_name_leaves_the_running_querys_document_alone(tmp_path):
    root = str(tmp_path)
    running = ReaderHandle(root, "n")
    running.open()
    running.commit({"p": 5})
    refused = ReaderHandle(root, "n")
    with pytest.raises(SpoolError):
        refused.open(wait=0.5)
    refused.close()  # as a query that failed to start does
    record = load_readers(root)["n"]
    assert record.committed == {"p": 5} and not record.stopped
    with pytest.raises(SpoolError, match="commits before open"):
        refused.commit({"p": 9})


def test_a_silent_name_stops_holding_and_is_logged_once(tmp_path):
    root = str(tmp_path)
    for name in ("live", "silent"):
        handle = ReaderHandle(root, name)
        handle.open()
        handle.commit({"p": 1})
        handle.close()
    old = load_readers(root)["silent"]
    reader_state(root, "silent").save(
        dataclasses.asdict(dataclasses.replace(old, at=time.time() - 100))
    )
    count = ReaderCount(root, timeout=50)
    with logged_warnings() as warnings:
        assert set(count.holding()) == {"live"}
        assert set(count.holding()) == {"live"}
    assert len(warnings) == 1 and "reader 'silent' was last seen " in warnings[0]
    assert "over spoolReaderTimeout (50 s)" in warnings[0]


def test_commits_json_of_an_earlier_release_counts_as_name_default(tmp_path):
    root = str(tmp_path)
    commits_state(root).save({"p": 42})
    legacy = load_readers(root)["default"]
    assert legacy.committed == {"p": 42} and legacy.stopped and legacy.at > 0
    handle = ReaderHandle(root, "default")
    assert handle.open().committed == {"p": 42}, "a new run goes on from it"
    handle.commit({"p": 50})
    assert load_readers(root)["default"].committed == {"p": 50}
    assert json.loads((tmp_path / "commits.json").read_text())["p"] == 42, "left as it was"


def test_a_query_waits_for_the_previous_run_under_its_name_to_let_go(tmp_path):
    """A restart at once: the previous run's process stops a moment later."""
    root = str(tmp_path)
    previous = ReaderHandle(root, "n")
    previous.open()
    stopper = threading.Timer(1.0, previous.close)
    stopper.start()
    started = time.monotonic()
    ReaderHandle(root, "n").open(wait=10)
    assert 0.9 < time.monotonic() - started < 5


def take_at_once(root: str, contenders: int) -> tuple[int, list[str]]:
    """``contenders`` handles open one name at the same instant: how many took it, and the
    errors of the others."""
    start = threading.Barrier(contenders)
    taken: list[ReaderHandle] = []
    refused: list[str] = []

    def take() -> None:
        handle = ReaderHandle(root, "archive")
        start.wait()
        try:
            handle.open(wait=0)
        except SpoolError as exc:
            refused.append(str(exc))
        else:
            taken.append(handle)

    threads = [threading.Thread(target=take) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(taken), refused


def test_two_queries_that_take_one_name_at_once_cannot_both_have_it(tmp_path):
    """Eight handles open one name at the same instant, 20 times over: each time exactly one
    takes it and the others are refused (taking a name is done under its lock file)."""
    for round_ in range(20):
        root = str(tmp_path / f"spool{round_}")
        os.makedirs(root)
        taken, refused = take_at_once(root, 8)
        assert taken == 1 and len(refused) == 7, (round_, taken, refused[:1])
