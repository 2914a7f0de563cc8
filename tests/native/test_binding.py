"""The compiled modules' one libzmq binding (``spark_zmq/native/libzmq.pyx``, shared through
``libzmq.pxd``): ``receive`` and ``send`` call the one table of libzmq's functions that
``spark_zmq.native`` binds once per process, and refuse to run before it is bound rather than
call through empty pointers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

#: imports the compiled modules directly (nothing bound), tries both, binds, then sends a
#: message with ``send`` and takes it with ``receive``; prints what it saw
SCRIPT = textwrap.dedent("""
    import json
    import pyarrow as pa
    import zmq
    from spark_zmq.capture.refusals import Refusals
    from spark_zmq.native import libzmq, receive, send
    from spark_zmq.spark.sending import frame_column

    context = zmq.Context.instance()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    sender.bind("inproc://binding")
    receiver.connect("inproc://binding")
    refusals = Refusals("test", "inproc://binding", "peer", 1 << 20, 1000)
    buffer = receive.NativeBuffer(100, 1 << 20, 100, 1000, refusals)
    frames = [pa.array([b"topic"], pa.binary()), pa.array([b"body"], pa.binary())]
    columns = [frame_column(frame) for frame in frames]

    def attempt(call):
        try:
            return call()
        except RuntimeError as exc:
            return str(exc)

    seen = {"library before": libzmq.library_path()}
    seen["receive unbound"] = attempt(lambda: receive.receive(buffer, receiver.underlying))
    seen["send unbound"] = attempt(lambda: send.send_rows(sender.underlying, columns, 0, 1))
    import spark_zmq.native
    seen["bound"] = spark_zmq.native.bind()
    seen["library after"] = libzmq.library_path()
    seen["sent"] = list(send.send_rows(sender.underlying, columns, 0, 1))
    receiver.poll(10_000)
    seen["received"] = list(receive.receive(buffer, receiver.underlying))
    seen["frames"] = [f.decode() for f in buffer.table().column("frames").to_pylist()[0]]
    print(json.dumps(seen))
""")


def test_both_modules_refuse_before_the_binding_is_bound_and_share_it_after():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.splitlines()[-1])
    unbound = "spark_zmq.native.libzmq: bind() was not called (spark_zmq.native.load binds it)"
    assert seen["library before"] is None
    assert seen["receive unbound"] == unbound
    assert seen["send unbound"] == unbound
    assert "libzmq" in seen["bound"] and seen["library after"] == seen["bound"]
    assert seen["sent"] == [1, 0]  # one message, no error
    assert seen["received"] == [1, False]
    assert seen["frames"] == ["topic", "body"]
