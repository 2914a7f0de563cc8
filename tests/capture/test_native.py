"""The compiled capture core: it calls the libzmq that pyzmq loaded (never another one in the
process), its buffers become the same rows as the Python loop's, and where it does not load
capture runs the Python loop and says so once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import zmq

from spark_zmq.capture.buffer import BURST, MAX_SEGMENT_BYTES, MAX_SEGMENT_ROWS, Buffer
from spark_zmq.capture.cores import CORE_VARIABLE, native_module


@pytest.fixture
def core() -> str:
    """These tests are about the compiled core (and its absence) whatever the parameter of the
    package's other capture tests."""
    return "native"


#: A capture of 200 messages from a PUB in this process, after ``PRELUDE``; prints what it saw.
CAPTURE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    {prelude}
    import zmq
    from spark_zmq.log import configure_logging
    configure_logging("INFO")
    from spark_zmq.capture.loop import Capture
    from spark_zmq.protocols.base import Endpoint, StaticDiscovery
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
    from spark_zmq.capture import cores
    print(json.dumps({{
        "cores": [c.core for c in captures],
        "payloads": payloads,
        "status": cores.native_status(),
        "maps": sorted({{line.split()[-1] for line in open("/proc/self/maps")
                        if "libzmq" in line}}),
    }}))
""")


def run_capture(tmp_path: Path, prelude: str = "", core: str = "") -> tuple[dict, str]:
    """Run CAPTURE_SCRIPT in a fresh interpreter: (what it printed, its stderr)."""
    env = dict(os.environ)
    env.pop(CORE_VARIABLE, None)
    if core:
        env[CORE_VARIABLE] = core
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
    missing = "import sys; sys.modules['spark_zmq.capture.native'] = None"
    seen, stderr = run_capture(tmp_path, missing)
    assert seen, stderr
    assert seen["cores"] == ["python", "python"]
    assert seen["payloads"] == [str(i) for i in range(200)]
    assert seen["status"].startswith("not available: spark_zmq.capture.native does not import")
    assert stderr.count("capture runs its Python receive loop: the compiled core is not") == 1
    # forced: no fallback, the reason instead
    seen, stderr = run_capture(tmp_path, missing, core="native")
    assert not seen and "ImportError: spark_zmq.capture.native does not import" in stderr
    # and the Python loop by choice: no warning
    seen, stderr = run_capture(tmp_path, core="python")
    assert seen["cores"] == ["python", "python"] and "compiled core is not" not in stderr


def test_an_unknown_core_is_refused_naming_the_variable(tmp_path):
    seen, stderr = run_capture(tmp_path, core="fast")
    assert not seen
    assert f"{CORE_VARIABLE}='fast' is not one of auto, native, python" in stderr


def test_a_native_buffer_becomes_the_same_rows_as_a_python_one():
    native = native_module().NativeBuffer(MAX_SEGMENT_ROWS, MAX_SEGMENT_BYTES, BURST, 10)
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
    assert native.nbytes == sum(len(f) for frames in python.frames for f in frames)
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
