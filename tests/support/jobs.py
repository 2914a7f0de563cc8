"""The jobs as a user submits them: ``spark-submit`` of the file ``spark-zmq job NAME`` names,
in local mode on loopback, and the lines a job prints."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
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


class Lines:
    """A process's stdout lines, collected on a thread."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            self.lines.append(line.rstrip("\n"))

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
