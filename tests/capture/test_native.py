"""The compiled capture core: it calls the libzmq that pyzmq loaded (never another one in the
process), its buffers become the same rows as the Python loop's, and where it does not load
capture runs the Python loop and says so once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
import zmq

from spark_zmq.capture.buffer import BURST, MAX_SEGMENT_BYTES, MAX_SEGMENT_ROWS, Buffer
from spark_zmq.capture.refusals import Refusals
from spark_zmq.native import RECEIVE, load


@pytest.fixture
def core() -> str:
    """These tests are about the compiled core (and its absence) whatever the parameter of the
    package's other capture tests."""
    return "native"


#: A capture of 200 messages from a PUB in this process, after ``PRELUDE``; prints what it saw.
CAPTURE_SCRIPT = textwrap.dedent("""
    import json, re, sys, time
    {prelude}
    import zmq
    from spark_zmq.log import configure_logging
    configure_logging("INFO")
    from spark_zmq.capture.loop import Capture
    from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
    from spark_zmq.spool.layout import load_index
    from spark_zmq.spool.reader import read_range
    from spark_zmq.spool.writer import Spool

    sender = zmq.Context.instance().socket(zmq.XPUB)
    port = sender.bind_to_random_port("tcp://127.0.0.1")
    key = f"127.0.0.1:{{port}}"
    spool = Spool(sys.argv[1], 1 << 30)
    captures = [Capture(spool, max_message_bytes=1 << 20, flush_interval=0.05, name="test")]
    captures.append(Capture(spool, max_message_bytes=1 << 20, flush_interval=0.05, name="other"))
    capture = captures[0]
    capture.start()
    StaticDiscovery([Endpoint(key, f"tcp://{{key}}")]).start(capture)
    assert sender.poll(10_000) and sender.recv() == b"\\x01"
    for i in range(200):
        sender.send_multipart([b"topic", b"%d" % i])
    deadline = time.monotonic() + 30
    while capture.received().get(key) != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    capture.close()
    index = load_index(spool.root, key)
    payloads = []
    for _, _, table in read_range(spool.root, key, index.start, index.end):
        payloads += [frames[1].decode() for frames in table.column("frames").to_pylist()]
    from spark_zmq import native
    print(json.dumps({{
        "cores": [c.core for c in captures],
        "payloads": payloads,
        "status": native.status(),
        # libzmq's files (libzmq.so.5..., libzmq-<hash>.so.5...), not the package's binding
        # module spark_zmq/native/libzmq.cpython-...so
        "maps": sorted({{line.split()[-1] for line in open("/proc/self/maps")
                        if re.search(r"/libzmq[^/]*\\.so\\.[0-9]", line)}}),
    }}))
""")


def run_capture(tmp_path: Path, prelude: str = "", core: str = "") -> tuple[dict, str]:
    """Run CAPTURE_SCRIPT in a fresh interpreter: (what it printed, its stderr)."""
    env = dict(os.environ)
    env.pop(RECEIVE.variable, None)
    if core:
        env[RECEIVE.variable] = core
    run = subprocess.run(
        [sys.executable, "-c", CAPTURE_SCRIPT.format(prelude=prelude), str(tmp_path / "spool")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if run.returncode != 0:
        return {}, run.stderr
    return json.loads(run.stdout.splitlines()[-1]), run.stderr


def pyzmq_libzmq() -> Path:
    """The libzmq that the pyzmq wheel bundles (the tests' venv has a wheel's pyzmq)."""
    bundled = list((Path(zmq.__file__).parent.parent / "pyzmq.libs").glob("libzmq*.so*"))
    assert len(bundled) == 1, f"this test expects a pyzmq wheel's bundled libzmq: {bundled}"
    return bundled[0].resolve()


def system_libzmq() -> str:
    import ctypes.util

    system = ctypes.util.find_library("zmq")
    if system is None:
        pytest.skip("no system libzmq on this machine to load beside pyzmq's")
    return system


def test_the_core_calls_pyzmqs_libzmq_with_another_libzmq_loaded_beside_it(tmp_path):
    prelude = f"import ctypes; ctypes.CDLL({system_libzmq()!r})"
    seen, stderr = run_capture(tmp_path, prelude, core="native")
    assert seen, stderr
    ours = str(pyzmq_libzmq())
    assert seen["status"] == f"available, calling {ours}"
    assert len(seen["maps"]) == 2 and ours in seen["maps"], seen["maps"]  # both are loaded
    assert seen["cores"] == ["native", "native"]
    assert seen["payloads"] == [str(i) for i in range(200)]
    assert "capture runs the native receive loop" in stderr


def test_with_a_libzmq_whose_symbols_are_global_the_core_refuses_rather_than_guess(tmp_path):
    """Loaded with global symbols before pyzmq, the system's libzmq is the one pyzmq's sockets
    belong to, while pyzmq's own dependency is loaded too: calling the wrong one receives
    nothing (or crashes). The core cannot tell which one pyzmq bound to: auto falls back."""
    prelude = f"import ctypes; ctypes.CDLL({system_libzmq()!r}, mode=ctypes.RTLD_GLOBAL)"
    seen, stderr = run_capture(tmp_path, prelude)
    assert seen, stderr
    assert seen["cores"] == ["python", "python"]
    assert seen["payloads"] == [str(i) for i in range(200)]
    assert seen["status"].startswith("not available: two copies of libzmq are loaded")
    assert stderr.count("capture runs its Python receive loop: the compiled core is not") == 1


def test_where_the_core_does_not_load_capture_runs_the_python_loop_and_says_so_once(tmp_path):
    missing = "import sys; sys.modules['spark_zmq.native.receive'] = None"
    seen, stderr = run_capture(tmp_path, missing)
    assert seen, stderr
    assert seen["cores"] == ["python", "python"]
    assert seen["payloads"] == [str(i) for i in range(200)]
    assert seen["status"].startswith("not available: spark_zmq.native.receive does not import")
    assert stderr.count("capture runs its Python receive loop: the compiled core is not") == 1
    # forced: no fallback, the reason instead
    seen, stderr = run_capture(tmp_path, missing, core="native")
    unavailable = (
        "NativeUnavailable: SPARK_ZMQ_CAPTURE_CORE=native: the compiled core is not available: "
        "spark_zmq.native.receive does not import"
    )
    assert not seen and unavailable in stderr
    # and the Python loop by choice: no warning
    seen, stderr = run_capture(tmp_path, core="python")
    assert seen["cores"] == ["python", "python"] and "compiled core is not" not in stderr


def test_an_unknown_core_is_refused_naming_the_variable(tmp_path):
    seen, stderr = run_capture(tmp_path, core="fast")
    assert not seen
    assert f"{RECEIVE.variable}='fast' is not one of auto, native, python" in stderr


def new_native_buffer(
    max_bytes: int = MAX_SEGMENT_BYTES,
    max_message_bytes: int = 1 << 20,
    max_message_parts: int = 1000,
):
    refusals = Refusals("test", "tcp://peer", "peer", max_message_bytes, max_message_parts)
    return load(RECEIVE).NativeBuffer(MAX_SEGMENT_ROWS, max_bytes, BURST, 10, refusals)


def test_a_native_buffer_becomes_the_same_rows_as_a_python_one():
    native = new_native_buffer()
    python = Buffer()
    messages = [[b"a"], [b"", b""], [b"x" * 100_000, b"y", b""], [bytes(range(256))]]
    for index, frames in enumerate(messages * 300):
        native.add_message(frames)
        python.frames.append(frames)
        if index % 250 == 3:
            native.add_fault(f"gap: {index}")
            python.faults[len(python.frames)] = f"gap: {index}"
            python.frames.append([])
    assert len(native) == len(python) == 1200 + 5
    frames = [f for message in python.frames for f in message]
    # its bound counts what the arrays take: bytes, and a frame's offset and a row's time too
    assert native.nbytes == sum(map(len, frames)) + 4 * len(frames) + 12 * len(python.frames)
    taken = native.take()
    assert len(native) == 0 and native.received == 1200  # counters stay with the buffer
    python.times = [taken.time_at(i) for i in range(len(taken))]
    assert python.times == sorted(python.times)
    assert taken.table().equals(python.table())
    # a spool write that fails after the table was made drops the rows: they can still be
    # counted and dated (the spool-fault tests take this path), and made into a table again
    assert len(taken) == len(python) and taken.time_at(0) == python.times[0]
    assert taken.table().equals(python.table())
    with pytest.raises(RuntimeError, match="handed to Arrow"):
        taken.add_fault("too late")


def test_buffers_moved_into_a_flush_become_the_rows_of_their_tables_one_after_the_other():
    """A flush moves each connection's buffer into one buffer (``move_to``): its rows are
    those of the buffers' own tables in order, fault texts (a refusal's gap text too) at their
    rows; each buffer is left empty and goes on receiving, one grown large by a burst with new
    arrays. The Python buffer does the same."""
    refusals = Refusals("test", "tcp://peer", "peer", 1000, 10)
    for kind in ("native", "python"):

        def new_buffer(kind=kind):
            if kind == "python":
                return Buffer(refusals=refusals)
            return load(RECEIVE).NativeBuffer(
                MAX_SEGMENT_ROWS, MAX_SEGMENT_BYTES, BURST, 10, refusals
            )

        sources = [new_buffer() for _ in range(4)]
        expected = []
        for n, source in enumerate(sources):
            alone = new_buffer()
            for target in (source, alone):
                for i in range(n * 3):
                    add_message(target, [b"m%d" % n, b"%d" % i * (1 + 40_000 * (n == 3))])
                if n == 2:
                    add_fault(target, "gap: two", 1_700_000_000_123_456_000)
            if n == 1:  # a message over maxMessageParts: a refusal row with its gap text
                refuse(source, refusals)
                refuse(alone, refusals)
            expected.append(alone.take().table())
        flush = sources[0].flush_buffer()
        firsts = [source.move_to(flush) for source in sources]
        assert firsts == [0, 0, 4, 11]
        rows = flush.table()
        # (the buffers received, and refused, at other times than their copies alone)
        alone = pa.concat_tables(expected).combine_chunks()
        assert rows.column("frames").equals(alone.column("frames")), kind
        faults = rows.column("fault").to_pylist()
        assert [row for row, text in enumerate(faults) if text] == [3, 10], kind
        assert "maxMessageParts (10)" in faults[3] and faults[10] == "gap: two"
        assert rows.column("received_at")[10].value == 1_700_000_000_123_456
        for n, source in enumerate(sources):
            assert len(source) == 0 and source.faults == {}
            add_message(source, [b"again", b"%d" % n])
            assert source.take().table().column("frames").to_pylist() == [[b"again", b"%d" % n]]


def add_message(buffer, frames: list[bytes]) -> None:
    if isinstance(buffer, Buffer):
        buffer._add_row(frames, time.time_ns() // 1000 * 1000, sum(map(len, frames)))
    else:
        buffer.add_message(frames)


def add_fault(buffer, text: str, at: int) -> None:
    buffer.add_fault(text, at)


def refuse(buffer, refusals: Refusals) -> None:
    """A message of 11 frames, over maxMessageParts (10), received by ``buffer``."""
    context = zmq.Context.instance()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    sender.bind(f"inproc://refuse-{id(buffer)}")
    receiver.connect(f"inproc://refuse-{id(buffer)}")
    try:
        sender.send_multipart([b"x"] * 11)
        assert receiver.poll(5000)
        if isinstance(buffer, Buffer):
            buffer.receive_burst(receiver)
        else:
            load(RECEIVE).receive(buffer, receiver.underlying)
    finally:
        sender.close(0)
        receiver.close(0)


#: Point 7's edges, each a check that prints its outcome; run in a fresh interpreter, so that a
#: regression (a double free, a NULL dereference) fails the test instead of killing pytest.
EDGES_SCRIPT = textwrap.dedent("""
    import copy, json, pickle
    import zmq
    from spark_zmq.capture.refusals import Refusals
    from spark_zmq.native import RECEIVE, load

    native = load(RECEIVE)
    refusals = Refusals("test", "tcp://peer", "peer", 1 << 20, 1000)
    context = zmq.Context.instance()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    sender.bind("inproc://edges")
    receiver.connect("inproc://edges")

    def outcome(call):
        try:
            call()
            return "no error"
        except Exception as exc:
            return type(exc).__name__ + ": " + str(exc)

    def buffer():
        made = native.NativeBuffer(100, 1 << 20, 16, 10, refusals)
        made.add_message([b"a", b"bc"])
        return made

    handed = buffer()
    handed.table()  # its arrays now belong to Arrow
    memory = handed.columns()[2]
    poller = native.Poller(receiver.fileno(), 0.001)
    watched = buffer()
    poller.set_watched([("owner", receiver.underlying, watched, receiver.underlying)])
    watched.table()  # handed to Arrow while watched
    sender.send_multipart([b"waiting", b"to be received"])
    seen = {}
    for name, thing in (("memory", memory), ("buffer", buffer()), ("poller", poller)):
        seen[name + " copy"] = outcome(lambda: copy.copy(thing))
        seen[name + " pickle"] = outcome(lambda: pickle.dumps(thing))
    seen["receive None"] = outcome(lambda: native.receive(None, receiver.underlying))
    seen["receive handed"] = outcome(lambda: native.receive(handed, receiver.underlying))
    entry = ("owner", receiver.underlying, None, receiver.underlying)
    seen["watch None"] = outcome(lambda: poller.set_watched([entry]))
    seen["watch list None"] = outcome(lambda: poller.set_watched(None))
    entry = ("owner", receiver.underlying, handed, receiver.underlying)
    seen["watch handed"] = outcome(lambda: poller.set_watched([entry]))
    seen["wait handed since"] = outcome(lambda: poller.wait(0.5))
    print(json.dumps(seen))
""")


def test_the_cores_objects_refuse_copies_none_and_buffers_handed_to_arrow():
    """Copying a column buffer's memory would free it twice; a None buffer would be read
    through a NULL pointer; a buffer handed to Arrow would be written under Arrow's feet. Each
    is an error instead."""
    run = subprocess.run(
        [sys.executable, "-c", EDGES_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.splitlines()[-1])
    for name in ("memory", "buffer", "poller"):
        for how in ("copy", "pickle"):
            assert seen[f"{name} {how}"].startswith("TypeError: cannot pickle"), seen
    assert seen["receive None"].startswith("TypeError"), seen
    assert seen["watch None"].startswith("TypeError"), seen
    assert seen["watch list None"].startswith("TypeError"), seen
    for handed in ("receive handed", "watch handed", "wait handed since"):
        assert seen[handed] == "RuntimeError: this buffer's arrays were handed to Arrow", seen


def test_a_receive_that_fails_on_one_socket_is_reported_and_the_others_go_on():
    """A REQ socket receives its reply, then fails (EFSM: a REQ must send before it receives
    again). The poller reports the failure about its owner, keeps the reply, and receives
    from the other socket as before, instead of raising for all."""
    native = load(RECEIVE)
    context = zmq.Context.instance()
    sockets = [context.socket(kind) for kind in (zmq.REP, zmq.REQ, zmq.XPUB, zmq.SUB)]
    replier, requester, publisher, subscriber = sockets
    for sock in sockets:
        sock.setsockopt(zmq.LINGER, 0)
    requester.connect(f"tcp://127.0.0.1:{replier.bind_to_random_port('tcp://127.0.0.1')}")
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.connect(f"tcp://127.0.0.1:{publisher.bind_to_random_port('tcp://127.0.0.1')}")
    mailbox, wake = os.pipe()
    monitors = [requester.get_monitor_socket(), subscriber.get_monitor_socket()]
    failing, flowing = new_native_buffer(), new_native_buffer()
    poller = native.Poller(mailbox, 0.001)
    poller.set_watched(
        [
            ("requester", requester.underlying, failing, monitors[0].underlying),
            ("subscriber", subscriber.underlying, flowing, monitors[1].underlying),
        ]
    )
    try:
        assert publisher.poll(10_000) and publisher.recv() == b"\x01"
        requester.send(b"question")
        assert replier.recv() == b"question"
        replier.send_multipart([b"answer", b"in two"])
        for i in range(10):
            publisher.send_multipart([b"message", b"%d" % i])
        failures = []
        deadline = time.monotonic() + 10
        while (not failures or len(flowing) < 10) and time.monotonic() < deadline:
            events = poller.wait(0.5)
            failures += [owner for kind, owner in events if kind == native.FAILED]
        assert failures == ["requester"]
        assert failing.take_error() == zmq.EFSM and failing.take_error() == 0
        assert failing.take().table().column("frames").to_pylist() == [[b"answer", b"in two"]]
        frames = flowing.take().table().column("frames").to_pylist()
        assert frames == [[b"message", b"%d" % i] for i in range(10)]
    finally:
        poller.set_watched([])
        for sock in (requester, subscriber):  # else its monitor's inproc address stays taken
            sock.disable_monitor()
        for sock in sockets + monitors:
            sock.close(0)
        os.close(mailbox)
        os.close(wake)


#: Messages of many frames received while a timer interrupts the process every 20 us: zmq's
#: receive then fails with EINTR now and then, between frames too. Prints what was stored.
INTERRUPTED_SCRIPT = textwrap.dedent("""
    import json, signal
    import zmq
    from spark_zmq.capture.refusals import Refusals
    from spark_zmq.native import RECEIVE, load

    native = load(RECEIVE)
    context = zmq.Context.instance()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    for sock in (sender, receiver):
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
    sender.bind("inproc://interrupted")
    receiver.connect("inproc://interrupted")
    messages = [[b"%d" % i] + [b""] * 20_000 for i in range(30)]
    for frames in messages:
        sender.send_multipart(frames)
    refusals = Refusals("test", "inproc://interrupted", "peer", 1 << 20, 1 << 20)
    buffer = native.NativeBuffer(65536, 1 << 30, 1024, 1 << 40, refusals)
    signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 20e-6, 20e-6)
    errors = []
    while len(buffer) < len(messages) and not errors:
        native.receive(buffer, receiver.underlying)
        error = buffer.take_error()
        if error:
            errors.append(error)
    signal.setitimer(signal.ITIMER_REAL, 0)
    stored = buffer.take().table().column("frames").to_pylist()
    print(json.dumps({"errors": errors, "rows": len(stored), "intact": stored == messages}))
""")


def test_an_interrupted_receive_is_retried_between_frames_too():
    """EINTR is not a failure: every message arrives whole, none is cut at the interruption."""
    run = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1]) == {"errors": [], "rows": 30, "intact": True}


@pytest.fixture
def paused_poller():
    """make(longest_pause, full_run, burst) -> (poller, buffer, sender): a Poller that watches
    one inproc PAIR socket with a new buffer (the moment it is made is when its queue was last
    found empty), its mailbox a pipe whose write end is ``poller.wake``; everything closed
    after the test."""
    native = load(RECEIVE)
    context = zmq.Context.instance()
    made: list = []

    def make(longest_pause: float, full_run: int, burst: int = BURST):
        sender, receiver, monitor = (context.socket(zmq.PAIR) for _ in range(3))
        address = f"inproc://paused-{id(made)}-{len(made)}"
        sender.bind(address)
        receiver.connect(address)
        mailbox, wake = os.pipe()
        refusals = Refusals("test", address, "peer", 1 << 20, 1000)
        buffer = native.NativeBuffer(MAX_SEGMENT_ROWS, MAX_SEGMENT_BYTES, burst, full_run, refusals)
        poller = native.Poller(mailbox, longest_pause)
        poller.set_watched([("peer", receiver.underlying, buffer, monitor.underlying)])
        made.append((poller, (sender, receiver, monitor), (mailbox, wake)))
        return poller, buffer, sender, wake

    yield make
    for poller, sockets, pipe in made:
        poller.set_watched([])
        for sock in sockets:
            sock.close(0)
        for end in pipe:
            os.close(end)


def send_messages(sender: zmq.Socket, count: int) -> None:
    for i in range(count):
        sender.send_multipart([b"topic", b"%d" % i])


def test_a_pause_lasts_no_longer_than_the_peers_pace_takes_to_fill_a_share_of_its_queue(
    paused_poller,
):
    """100 messages that took 0.2 s to arrive (the buffer's queue was empty when it was made)
    and a queue of 400 messages: at that pace a quarter of the queue fills in 0.2 s, so the
    pause after taking them lasts that long, not the longest pause (10 s) nor until the
    wait's deadline (2 s). Nothing else arrives: the wait then ends at its deadline."""
    poller, buffer, sender, _ = paused_poller(10.0, 400)
    time.sleep(0.2)
    send_messages(sender, 100)
    assert poller.wait(2.0) == []
    stats = poller.statistics()
    assert len(buffer) == 100 and stats["pauses"] == 1
    assert 0.2 <= stats["paused_seconds"] < 1.5, stats


def test_a_small_receive_queue_shortens_the_pause(paused_poller):
    """4 messages in 0.2 s and a queue of 8: the pause lasts as long as 2 took to arrive,
    0.1 s, where a queue of 400 would allow 5 s (here: until the wait's deadline)."""
    poller, buffer, sender, _ = paused_poller(10.0, 8)
    time.sleep(0.2)
    send_messages(sender, 4)
    assert poller.wait(2.0) == []
    stats = poller.statistics()
    assert len(buffer) == 4 and stats["pauses"] == 1
    assert 0.1 <= stats["paused_seconds"] < 1.0, stats


def test_a_round_cut_short_by_its_burst_is_followed_by_the_next_without_a_pause(paused_poller):
    """Bursts of 16, and a first message 0.1 s after the queue was empty (at that pace a
    pause may last 1.6 s): 100 waiting messages then take 7 rounds, and only the last one,
    which finds the queue empty, pauses."""
    poller, buffer, sender, _ = paused_poller(10.0, 1 << 20, burst=16)
    time.sleep(0.1)
    send_messages(sender, 1)
    assert poller.wait(0.2) == [] and len(buffer) == 1
    send_messages(sender, 100)
    assert poller.wait(0.5) == []
    stats = poller.statistics()
    assert len(buffer) == 101 and stats["pauses"] == 2 and stats["rounds"] >= 8, stats


def test_a_command_in_the_mailbox_ends_a_pause_at_once(paused_poller):
    """One message after 0.5 s of silence: the pause that follows would last until the wait's
    deadline (10 s), but a command posted 0.3 s into it is reported at once."""
    poller, buffer, sender, wake = paused_poller(20.0, 1 << 20)
    time.sleep(0.5)
    send_messages(sender, 1)
    timer = threading.Timer(0.3, os.write, (wake, b"x"))
    timer.start()
    started = time.monotonic()
    try:
        events = poller.wait(10.0)
    finally:
        timer.join()
    assert events == [(load(RECEIVE).MAILBOX, None)]
    assert time.monotonic() - started < 3.0
    assert len(buffer) == 1 and poller.statistics()["pauses"] == 1


def test_the_longest_pause_can_be_changed_while_watching(paused_poller):
    """``set_longest_pause`` (capture lengthens the pause with the endpoints it watches): a
    poller made with 1-ms pauses, set to 0.3 s, pauses 0.3 s after a message that came after
    0.5 s of silence (its pace would allow the whole wait, 2 s)."""
    poller, buffer, sender, _ = paused_poller(0.001, 1 << 20)
    poller.set_longest_pause(0.3)
    time.sleep(0.5)
    send_messages(sender, 1)
    assert poller.wait(2.0) == []
    stats = poller.statistics()
    assert len(buffer) == 1 and stats["pauses"] >= 1
    assert 0.3 <= stats["paused_seconds"] < 1.0, stats


def test_the_pause_grows_with_the_endpoints_watched_within_bounds():
    """A round polls every socket: with many endpoints the pause after a round is longer, so
    that polling costs about the same a second; never shorter than the core's own, never
    longer than MOST_PAUSE_SECONDS."""
    from spark_zmq.capture.receiving import (
        LONGEST_PAUSE_SECONDS,
        MOST_PAUSE_SECONDS,
        longest_pause,
    )

    assert longest_pause(1, LONGEST_PAUSE_SECONDS) == LONGEST_PAUSE_SECONDS
    assert longest_pause(300, LONGEST_PAUSE_SECONDS) > 3 * LONGEST_PAUSE_SECONDS
    assert longest_pause(100_000, LONGEST_PAUSE_SECONDS) == MOST_PAUSE_SECONDS
    pauses = [longest_pause(n, LONGEST_PAUSE_SECONDS) for n in range(0, 2000, 50)]
    assert pauses == sorted(pauses)


def test_messages_left_on_a_socket_between_waits_are_received_without_new_ones_arriving():
    """The poller asks ``ZMQ_EVENTS`` only of sockets whose ``ZMQ_FD`` libzmq signalled, and a
    socket signals again only after its commands were processed. Capture's Python takes a
    burst itself between waits (draining an endpoint that changed), which processes them, and
    says so (``touch``): what it leaves must still be received by the next wait, with nothing
    new arriving. Among 200 idle sockets, the one that holds messages is found, and every
    message of it is taken once."""
    native = load(RECEIVE)
    context = zmq.Context.instance()
    pairs = []
    for n in range(200):
        sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
        for sock in (sender, receiver):
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
        sender.bind(f"inproc://left-{n}")
        receiver.connect(f"inproc://left-{n}")
        pairs.append((sender, receiver, receiver.get_monitor_socket(), new_native_buffer()))
    mailbox, wake = os.pipe()
    poller = native.Poller(mailbox, 0.001)
    poller.set_watched(
        [
            (n, receiver.underlying, buffer, monitor.underlying)
            for n, (_, receiver, monitor, buffer) in enumerate(pairs)
        ]
    )
    sender, receiver, _, buffer = pairs[137]
    try:
        assert poller.wait(0) == []  # its first wait asks every socket: this test is of later ones
        count = 3 * BURST + 5
        for i in range(count):
            sender.send_multipart([b"left", b"%d" % i])
        deadline = time.monotonic() + 10
        while len(buffer) < BURST and time.monotonic() < deadline:
            native.receive(buffer, receiver.underlying)  # as capture's Python does, between waits
        assert len(buffer) == BURST, "one burst taken outside the poller"
        poller.touch(137)
        while len(buffer) < count and time.monotonic() < deadline:
            poller.wait(0.2)
        frames = buffer.take().table().column("frames").to_pylist()
        assert frames == [[b"left", b"%d" % i] for i in range(count)]
        assert all(len(other) == 0 for n, (_, _, _, other) in enumerate(pairs) if n != 137)
    finally:
        poller.set_watched([])
        for sender, receiver, monitor, _ in pairs:
            receiver.disable_monitor()
            for sock in (sender, receiver, monitor):
                sock.close(0)
        os.close(mailbox)
        os.close(wake)


class _CountingPoller:
    """A compiled ``Poller`` that counts how often it is given what to watch."""

    def __init__(self, poller) -> None:
        self.poller = poller
        self.rebuilds = 0

    def set_watched(self, entries):
        self.rebuilds += 1
        self.poller.set_watched(entries)

    def __getattr__(self, name):
        return getattr(self.poller, name)


def test_endpoints_that_join_or_leave_together_cost_one_rebuild_and_the_rest_are_received():
    """The compiled core rebuilds its poller (arrays, epoll set: a cost per watched socket)
    once before its next wait, not at each endpoint watched or unwatched: a session's 1,000
    endpoints joining, or capture stopping, cost one rebuild rather than 1,000 (stopping took
    about 6 s of CPU). Sockets closed after they were unwatched, before that rebuild, are not
    touched, and the endpoints still watched are received."""
    from types import SimpleNamespace

    from spark_zmq.capture.receiving import NativeCore
    from spark_zmq.mailbox import Mailbox

    mailbox = Mailbox()
    core = NativeCore(mailbox, load(RECEIVE))
    counting = _CountingPoller(core._poller)
    core._poller = counting
    # a context of its own: 480 sockets (a monitor is two), more than a shared one may have
    # left under its limit (zmq.MAX_SOCKETS) after the tests before this one in the process
    context = zmq.Context()
    conns, senders = [], []
    for n in range(120):
        sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
        sender.bind(f"inproc://together-{n}")
        receiver.connect(f"inproc://together-{n}")
        conn = SimpleNamespace(
            socket=receiver, monitor=receiver.get_monitor_socket(), buffer=new_native_buffer()
        )
        conns.append(conn)
        senders.append(sender)
        core.watch(conn)
    try:
        assert core.wait(0) == [] and counting.rebuilds == 1
        for conn in conns[:60]:
            core.unwatch(conn)
            conn.socket.disable_monitor()
            for sock in (conn.monitor, conn.socket):
                sock.close(0)
        for n in range(60, 120):
            senders[n].send_multipart([b"still", b"%d" % n])
        deadline = time.monotonic() + 10
        while sum(len(c.buffer) for c in conns[60:]) < 60 and time.monotonic() < deadline:
            core.wait(0.1)
        assert counting.rebuilds == 2
        for n, conn in enumerate(conns[60:], start=60):
            assert conn.buffer.take().table().column("frames").to_pylist() == [
                [b"still", b"%d" % n]
            ]
    finally:
        core.close()
        for conn in conns[60:]:
            conn.socket.disable_monitor()
            for sock in (conn.monitor, conn.socket):
                sock.close(0)
        for sender in senders:
            sender.close(0)
        context.destroy(linger=0)


def test_a_monitor_reported_to_python_is_asked_again_while_it_holds_events():
    """Python reads one monitor event for each report (``upkeep.on_monitor_event``), and the
    read takes the signal of the events left: the poller asks a reported item again at its
    next wait, so that every event is reported, one wait each, with no new one arriving."""
    native = load(RECEIVE)
    context = zmq.Context.instance()
    server, client = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    monitor = client.get_monitor_socket()
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    server.send(b"over the connection")
    assert client.poll(5000)  # connected, handshaken: several events are queued by now
    time.sleep(0.2)
    mailbox, wake = os.pipe()
    poller = native.Poller(mailbox, 0.001)
    poller.set_watched([("owner", client.underlying, new_native_buffer(), monitor.underlying)])
    try:
        reports = 0
        while reports < 20 and ("monitor", "owner") in poller.wait(1.0):
            reports += 1
            monitor.recv_multipart(zmq.NOBLOCK)  # one event a report, as capture reads them
        assert reports >= 2, "connect and handshake are two events at least"
        assert not monitor.poll(0), "an event was left unreported"
    finally:
        poller.set_watched([])
        client.disable_monitor()
        for sock in (monitor, client, server):
            sock.close(0)
        os.close(mailbox)
        os.close(wake)
