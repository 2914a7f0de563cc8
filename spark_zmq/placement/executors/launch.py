"""Starting a capture process (``python -m spark_zmq.placement.executors.holder``), on an
executor by a claim task, or on the driver's host by the driver (``capture=executors``).

The process is detached from its starter (a session of its own: it outlives the Python worker
that ran the task) and gets its settings on its stdin, so that CURVE keys stay off its command
line. It answers on its stdout once it runs (``ready``) or when another process serves its
executor already (``busy``); ``launch`` waits for that answer. It logs to
``@holders/<executor>.<role>.log`` in the spool, which outlives executors.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from dataclasses import asdict

from spark_zmq.errors import CaptureError
from spark_zmq.log import logger
from spark_zmq.spool.contract import holder_log
from spark_zmq.stream_settings import CaptureSettings

#: what runs a capture process (``python -m``)
HOLDER_MODULE = "spark_zmq.placement.executors.holder"
#: seconds ``launch`` waits for the process it started to answer
START_TIMEOUT = 60.0


def launch(spool_path: str, settings: CaptureSettings, role: str, executor: str) -> int | None:
    """Start a capture process in ``role`` for ``executor`` (the JVM its starter serves), and
    return its pid once it runs, or None once it said another serves that executor. A process
    killed by a signal while it started (the OOM killer, an operator) is logged, and None
    returned: it is started again later. CaptureError for any other failure, with the end of
    its log."""
    args = json.dumps({"spool_path": spool_path, "settings": asdict(settings), "role": role})
    log_path = holder_log(spool_path, executor, role)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", HOLDER_MODULE, role],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    stdin, stdout = process.stdin, process.stdout  # both pipes, as asked for above
    assert stdin is not None and stdout is not None
    try:
        stdin.write(args.encode())
        stdin.close()
    except BrokenPipeError:  # it ended at once: its exit status says why
        pass
    ready, _, _ = select.select([stdout], [], [], START_TIMEOUT)
    line = stdout.readline().decode(errors="replace").strip() if ready else ""
    stdout.close()
    if line.startswith("ready"):
        return process.pid
    if line.startswith("busy"):
        return None
    if not ready:
        process.kill()
    try:
        code = process.wait(5)
    except subprocess.TimeoutExpired:
        code = None
    if ready and code is not None and code < 0:
        logger.warning(
            "%s: the capture process for executor %s was killed by signal %d while "
            "starting; it will be started again",
            settings.format_name,
            executor,
            -code,
        )
        return None
    status = "still running" if code is None else f"exit status {code}"
    raise CaptureError(
        f"{settings.format_name}: the capture process for executor {executor} did not "
        f"start: {line or 'no answer'} ({status}); the end of its log {log_path}:\n"
        f"{_tail(log_path)}"
    )


def _tail(path: str, size: int = 3000) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - size))
        return f.read().decode(errors="replace")
