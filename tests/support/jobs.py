"""The jobs as a user submits them: ``spark-submit`` of the file ``spark-zmq job NAME`` names,
in local mode on loopback, and the lines a job prints."""

from __future__ import annotations

import collections
import importlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
#: the longest (``--seconds``) a test's streaming job runs, counted from its query's start, if
#: the test does not stop it first once it saw what it waits for (``stop_job``): enough for its
#: first micro-batches and the test's messages after them when the job starts while the suite's
#: heaviest tests start too (a monitor job given 40 s and a capture job given 60 s read nothing
#: in that time in a CI run whose first minutes loaded 2 cores with several JVMs each)
JOB_SECONDS = 240
LOOPBACK_CONF = (
    "spark.driver.host=127.0.0.1",
    "spark.driver.bindAddress=127.0.0.1",
    "spark.ui.enabled=false",
)


def job_file(job: str) -> str:
    """The job's file as the installed package has it, found as a user does (``spark-zmq job``)."""
    name = job.removesuffix(".py")
    found = subprocess.run(
        [str(Path(sys.executable).parent / "spark-zmq"), "job", name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert found == importlib.import_module(f"spark_zmq.jobs.{name}").__file__
    return found


def spark_submit(job: str, *args: str) -> subprocess.Popen:
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_ZMQ_LOG_LEVEL="WARNING",
    )
    command = [str(SPARK_SUBMIT), "--master", "local[2]"]
    for setting in LOOPBACK_CONF:
        command += ["--conf", setting]
    return subprocess.Popen(
        command + [job_file(job), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_job(lines: Lines, timeout: float = 120) -> int:
    """Stop a job as a supervisor does, SIGTERM to its Python driver program (the child of
    spark-submit's JVM that runs the job's file), and return its exit code once it ended."""
    import psutil

    try:
        children = psutil.Process(lines.process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []  # it ended already
    drivers = []
    for child in children:
        try:
            command = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        # a child the JVM is starting (a Python worker, before its exec) has the JVM's command
        # line for a moment, which names the job's file too: only a python runs the job
        python = bool(command) and "python" in os.path.basename(command[0])
        if python and any(p.endswith(".py") and "/spark_zmq/jobs/" in p for p in command):
            drivers.append(child)
    assert len(drivers) <= 1, f"one Python driver program: {drivers}"
    # a running job whose driver is not found would only end at its --seconds, minutes on
    assert drivers or lines.process.poll() is not None, f"no job driver among {children}"
    for driver in drivers:
        driver.send_signal(signal.SIGTERM)
    return lines.wait(timeout)


class Lines:
    """A process's stdout lines and the end of its stderr, each collected on a thread: a
    pipe nobody reads fills up (64 KiB) and then blocks the process's next write, which for a
    Spark job is its JVM's next log line."""

    def __init__(self, process: subprocess.Popen, kept_errors: int = 3000) -> None:
        self.process = process
        self.lines: list[str] = []
        self._errors: collections.deque[str] = collections.deque()
        self._error_chars = 0
        self._kept_errors = kept_errors
        streams = ((self._read, process.stdout), (self._read_errors, process.stderr))
        self._readers = [
            threading.Thread(target=target, args=(stream,), daemon=True)
            for target, stream in streams
            if stream is not None
        ]
        for reader in self._readers:
            reader.start()

    def wait(self, timeout: float | None = None) -> int:
        """The process's exit code once it ended (``subprocess.TimeoutExpired`` after
        ``timeout``) and its last lines are read: a process can end before the threads have
        read what it wrote last."""
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(10)
        return code

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def _read_errors(self, stream) -> None:
        for line in stream:
            self._errors.append(line)
            self._error_chars += len(line)
            while self._error_chars - len(self._errors[0]) >= self._kept_errors:
                self._error_chars -= len(self._errors.popleft())

    def errors(self) -> str:
        """The last ``kept_errors`` characters (about) of what the process wrote to stderr."""
        return "".join(list(self._errors))[-self._kept_errors :]

    def progress(self) -> list[tuple[int, int, int]]:
        """(rows, endpoints, gaps) of every progress line so far."""
        found = (
            re.match(
                r"batch \d+: (\d+) rows, \d+ rows/s, backlog \d+ rows, (\d+) "
                r"endpoints, (\d+) gaps",
                line,
            )
            for line in list(self.lines)
        )
        return [tuple(int(g) for g in m.groups()) for m in found if m]
