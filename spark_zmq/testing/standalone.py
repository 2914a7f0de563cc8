"""A Spark standalone cluster on this machine, for tests, benchmarks and trying capture=executors.

A master and workers of one core each, started with ``spark-class`` from the installed pyspark
(the pip wheel ships no start scripts), bound to 127.0.0.1, torn down by process group. With
``private_mounts`` (root only), each worker runs in a mount namespace of its own where
``private`` is an empty tmpfs: a path there is *not* shared between the driver and the
executors, as a local folder on a real cluster.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def environment(python: str | None = sys.executable) -> dict[str, str]:
    """The environment of the cluster's processes; ``python`` None: no PYSPARK_PYTHON at all
    (and this venv off the PATH), as on hosts where only Spark is installed."""
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP=LOOPBACK)
    if python is None:
        venv_bin = str(Path(sys.executable).parent)
        path = os.environ.get("PATH", "").split(os.pathsep)
        env["PATH"] = os.pathsep.join(p for p in path if p != venv_bin)
        for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(name, None)
    else:
        env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    return env


class StandaloneCluster:
    """Master + ``workers`` workers (1 core each); ``stop`` kills every process they started
    (the workers' executors and Python workers are in their process groups)."""

    def __init__(
        self,
        folder: Path,
        workers: int = 2,
        private_mounts: bool = False,
        python: str | None = sys.executable,
    ) -> None:
        """``python``: the Python the workers know of (PYSPARK_PYTHON); None for none, so
        that applications must bring their own (``spark-submit --archives``)."""
        self.folder = folder
        self.python = python
        #: a folder each worker sees as an empty tmpfs of its own (a path that is not shared)
        self.private = folder / "private"
        self.port, self.ui_port = free_port(), free_port()
        self.master_url = f"spark://{LOOPBACK}:{self.port}"
        self.processes: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        self.private.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        for n in range(workers):
            self.workers.append(
                self._spawn(
                    f"worker{n}",
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    LOOPBACK,
                    "--cores",
                    "1",
                    "--memory",
                    "2g",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(folder / f"work{n}"),
                    private=private_mounts,
                )
            )
        self._wait_for_workers(workers)

    def _spawn(self, name: str, *args: str, private: bool = False) -> subprocess.Popen:
        command = [str(SPARK_CLASS), *args]
        if private:  # a mount namespace of its own, with a tmpfs over self.private
            command = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                'mount -t tmpfs tmpfs "$0" && exec "$@"',
                str(self.private),
                *command,
            ]
        log = open(self.folder / f"{name}.log", "wb")
        process = subprocess.Popen(
            command,
            env=environment(self.python),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def _wait_for_workers(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(
                    f"http://{LOOPBACK}:{self.ui_port}/json/", timeout=2
                ) as answer:
                    state = json.load(answer)
                if sum(w["state"] == "ALIVE" for w in state.get("workers", [])) >= count:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the standalone cluster did not get {count} workers within "
                    f"{timeout} s; see {self.folder}/*.log"
                )
            time.sleep(0.5)

    def settings(self) -> dict[str, str]:
        """Spark settings of an application of this cluster whose driver runs here."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.pyspark.python": sys.executable,
            "spark.executor.cores": "1",
            "spark.executor.memory": "1g",
            "spark.cores.max": str(len(self.workers)),
        }

    def submit(
        self, script: str, *args: str, conf: dict[str, str] | None = None, log_level: str = "INFO"
    ) -> subprocess.Popen:
        """spark-submit ``script`` to the cluster (client mode: the driver runs here)."""
        settings = {**self.settings(), **(conf or {})}
        command = [str(SPARK_SUBMIT), "--master", settings.pop("spark.master")]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        env = dict(environment(), SPARK_ZMQ_LOG_LEVEL=log_level)
        return subprocess.Popen(
            command + [script, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def executor_pids(self, worker: int) -> list[int]:
        """JVMs of executors that a worker launched (children of the worker's JVM)."""
        parent = self.workers[worker].pid
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            if ppid == parent and b"CoarseGrainedExecutorBackend" in cmdline:
                found.append(int(entry))
        return found

    def kill_worker(self, worker: int) -> None:
        """The host dies: SIGKILL the worker's JVM and its executor JVMs at once."""
        process = self.workers[worker]
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        for process in reversed(self.processes):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
