"""Capture's priority (``captureNice``): its receive thread and its zmq I/O thread run at the
nice value asked for, the process's other threads (another zmq context's I/O thread among them)
do not; where raising priority is not permitted, capture says so in one line and still
captures. Nice values are read from /proc/self/task/<tid>/stat, as ``ps`` does."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import zmq

from spark_zmq.capture.loop import Capture
from spark_zmq.options import parse_options
from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
from spark_zmq.spool.writer import Spool
from spark_zmq.stream_options import CAPTURE_NICE, READER_OPTIONS
from support.common import wait_until

#: a value nothing else in the test process runs at
ASKED = -7
ROOT = Path(__file__).resolve().parents[2]


def threads_by_nice() -> dict[int, list[str]]:
    """{nice value: names of this process's threads at it}, from /proc/self/task/*/stat."""
    found: dict[int, list[str]] = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as stat:
            text = stat.read()
        name = text[text.index("(") + 1 : text.rindex(")")]
        nice = int(text[text.rindex(")") + 2 :].split()[16])  # field 19 of stat(5)
        found.setdefault(nice, []).append(name)
    return found


def raw_publisher() -> tuple[zmq.Context, zmq.Socket, str]:
    """An XPUB in a context of its own, bound on loopback: its I/O thread is the test's."""
    context = zmq.Context()
    sock = context.socket(zmq.XPUB)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    return context, sock, f"tcp://127.0.0.1:{port}"


def settled_threads() -> dict[int, list[str]]:
    """``threads_by_nice`` once two readings 50 ms apart agree: a zmq thread names itself only
    after it has started (a loaded run read capture's reaper as "python")."""
    last = threads_by_nice()
    for _ in range(100):
        time.sleep(0.05)
        if (now := threads_by_nice()) == last:
            return now
        last = now
    return last


def capture_one_message(
    tmp_path: Path, nice: int | None, own_process: bool = False
) -> tuple[dict[int, list[str]], Capture]:
    """Start a capture at ``nice``, deliver one message, and list threads by nice value while
    capture still runs."""
    context, sock, address = raw_publisher()
    spool = Spool(str(tmp_path / "spool"), 1 << 30)
    capture = Capture(
        spool,
        max_message_bytes=1 << 20,
        flush_interval=0.05,
        name="prio",
        nice=nice,
        own_process=own_process,
    )
    try:
        capture.start()
        StaticDiscovery([Endpoint("p", address, {}, (b"",))]).start(capture)
        assert sock.poll(10_000), "capture did not subscribe"
        sock.recv()
        sock.send_multipart([b"topic", b"body"])
        wait_until(lambda: capture.received().get("p") == 1, timeout=10, what="1 received")
        return settled_threads(), capture
    finally:
        capture.close()
        spool.close()
        sock.close(0)
        context.term()


def test_capture_and_its_zmq_io_thread_run_at_the_nice_value_asked(tmp_path, caplog):
    if os.getpriority(os.PRIO_PROCESS, 0) != 0:
        pytest.skip("the test process does not run at nice 0")
    with caplog.at_level(logging.INFO, logger="spark_zmq"):
        by_nice, capture = capture_one_message(tmp_path, ASKED)
    raised = sorted(by_nice.get(ASKED, []))
    # capture's thread, the I/O thread and the reaper of capture's own zmq context, which
    # names its threads with the capture's prefix (capture.stats)
    prefix = f"{capture.stats.thread_prefix}/ZMQbg/"
    assert len(raised) == 3, by_nice
    assert f"{prefix}Reaper" in raised and f"{prefix}IO/0" in raised, by_nice
    lines = [r.getMessage() for r in caplog.records if "capture priority" in r.getMessage()]
    expected = f"prio: capture priority: nice {ASKED} for capture's thread and its zmq I/O thread"
    assert lines == [expected]


def test_off_leaves_the_priority_alone(tmp_path, caplog):
    before = set(threads_by_nice())
    with caplog.at_level(logging.INFO, logger="spark_zmq"):
        by_nice, _ = capture_one_message(tmp_path, None)
    assert set(by_nice) <= before, by_nice
    lines = [r.getMessage() for r in caplog.records if "capture priority" in r.getMessage()]
    assert lines == ["prio: capture priority: left as is (captureNice=off)"]


def test_the_option_defaults_to_nice_minus_10_and_off_turns_it_off():
    parse = lambda raw: parse_options("zeroeq", READER_OPTIONS, raw)  # noqa: E731
    assert parse({}).get(CAPTURE_NICE) == -10
    assert parse({"captureNice": "off"}).get(CAPTURE_NICE) is None
    assert parse({"captureNice": "5"}).get(CAPTURE_NICE) == 5
    with pytest.raises(Exception, match="captureNice"):
        parse({"captureNice": "-21"})


NOT_PERMITTED = textwrap.dedent(
    """
    import logging, os, sys, tempfile, threading
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from spark_zmq.testing.logs import logged_warnings
    from test_priority import capture_one_message, ASKED
    with logged_warnings() as lines:
        by_nice, capture = capture_one_message(Path(tempfile.mkdtemp()), ASKED)
    assert ASKED not in by_nice, by_nice
    print(lines)
    """
)


def test_not_permitted_to_raise_says_so_once_and_captures(tmp_path):
    """Without CAP_SYS_NICE (dropped with setpriv, as a user without it runs) and with the
    default RLIMIT_NICE, capture cannot raise its priority: one warning, and it captures."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    here = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [
            setpriv,
            "--bounding-set=-sys_nice",
            "--inh-caps=-sys_nice",
            sys.executable,
            "-c",
            NOT_PERMITTED,
            here,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("capture priority: could not set nice -7") == 1, done.stdout
    assert "not permitted: needs CAP_SYS_NICE or RLIMIT_NICE" in done.stdout


def test_in_its_own_process_the_main_thread_is_raised_while_capture_runs(tmp_path, caplog):
    """The main thread answers Spark's calls holding Python's lock, which capture's thread
    needs at every flush: it runs at capture's priority while capture runs, and gets its own
    back when capture stops."""
    main = os.getpid()
    before = os.getpriority(os.PRIO_PROCESS, main)
    if before <= ASKED:
        pytest.skip("the main thread already runs at or above the priority asked")
    with caplog.at_level(logging.INFO, logger="spark_zmq"):
        by_nice, _ = capture_one_message(tmp_path, ASKED, own_process=True)
    assert len(by_nice.get(ASKED, [])) == 4, by_nice  # capture, I/O, reaper, and main
    assert os.getpriority(os.PRIO_PROCESS, main) == before
    assert any(
        "and this process's main thread while it runs" in r.getMessage() for r in caplog.records
    )


def test_two_captures_in_one_process_hold_its_main_thread_until_the_last_one_stops(tmp_path):
    """Two captures in one process (a program that runs two): the first to stop leaves the
    main thread raised for the other, and the last gives it back its own."""
    main = os.getpid()
    before = os.getpriority(os.PRIO_PROCESS, main)
    if before <= ASKED:
        pytest.skip("the main thread already runs at or above the priority asked")
    spool = Spool(str(tmp_path / "spool"), 1 << 30)
    captures = [
        Capture(
            spool,
            max_message_bytes=1 << 20,
            flush_interval=0.05,
            name=name,
            nice=ASKED,
            own_process=True,
        )
        for name in ("first", "second")
    ]
    try:
        for capture in captures:
            capture.start()
            capture.sync()  # its thread runs: it has taken its priority
        assert os.getpriority(os.PRIO_PROCESS, main) == ASKED
        captures[0].close()
        assert os.getpriority(os.PRIO_PROCESS, main) == ASKED, "the second capture still runs"
        captures[1].close()
        assert os.getpriority(os.PRIO_PROCESS, main) == before
    finally:
        for capture in captures:
            capture.close()
        spool.close()
