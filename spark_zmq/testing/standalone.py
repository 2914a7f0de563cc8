"""A Spark standalone cluster on this machine, for tests, benchmarks and trying capture=executors.

A master and workers of one core each, started with ``spark-class`` from the installed pyspark
(the pip wheel ships no start scripts), bound to 127.0.0.1, torn down by process group. With
``private_mounts`` (root only), each worker runs in a mount namespace of its own where
``private`` is an empty tmpfs: a path there is *not* shared between the driver and the
executors, as a local folder on a real cluster.

The pieces that do not depend on where a daemon runs (its command, the wait for workers in the
master's JSON, an application's settings and ``spark-submit`` command, the executors of a
worker) are functions here, which ``spark_zmq.testing.hosts`` uses for a cluster across
emulated hosts.
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
from collections.abc import Callable
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
LOOPBACK = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: what an executor's JVM has on its command line
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"
#: variables that would pin a Spark process to an address or to a running application's
#: gateway: a process of another host must not inherit them from this one
PINNED_ADDRESS_VARIABLES = (
    "SPARK_LOCAL_IP",
    "SPARK_LOCAL_HOSTNAME",
    "SPARK_PUBLIC_DNS",
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def environment(
    python: str | None = sys.executable, local_ip: str | None = LOOPBACK
) -> dict[str, str]:
    """The environment of the cluster's processes; ``python`` None: no PYSPARK_PYTHON at all
    (and this venv off the PATH), as on hosts where only Spark is installed. ``local_ip`` None:
    Spark picks the address from the host's name, as on a user's host (and no address this
    process was pinned to is inherited)."""
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME))
    if local_ip is None:
        for name in PINNED_ADDRESS_VARIABLES:
            env.pop(name, None)
    else:
        env["SPARK_LOCAL_IP"] = local_ip
    if python is None:
        venv_bin = str(Path(sys.executable).parent)
        path = os.environ.get("PATH", "").split(os.pathsep)
        env["PATH"] = os.pathsep.join(p for p in path if p != venv_bin)
        for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(name, None)
    else:
        env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    return env


def master_command(port: int, ui_port: int, host: str | None = None) -> list[str]:
    """A master's command; ``host`` None: it binds the address its host's name resolves to."""
    where = ["--host", host] if host else []
    return [str(SPARK_CLASS), MASTER_CLASS, *where, "--port", str(port)] + [
        "--webui-port",
        str(ui_port),
    ]


def worker_command(
    master_url: str, work_dir: Path, ui_port: int, host: str | None = None
) -> list[str]:
    """A worker of 1 core and 2 GB (executors of 1 GB each); ``host`` as for ``master_command``."""
    where = ["--host", host] if host else []
    return [str(SPARK_CLASS), WORKER_CLASS, master_url, *where, "--cores", "1"] + [
        "--memory",
        "2g",
        "--webui-port",
        str(ui_port),
        "--work-dir",
        str(work_dir),
    ]


def wait_for_workers(
    master_state: Callable[[], dict], count: int, timeout: float, logs: Path
) -> None:
    """Returns once the master's JSON (``master_state``; an OSError: not answering yet; a
    ValueError: its web UI answered with a page, not JSON, as it can while it starts) lists
    ``count`` live workers; raises RuntimeError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            workers = master_state().get("workers", [])
            if sum(w["state"] == "ALIVE" for w in workers) >= count:
                return
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the standalone cluster did not get {count} workers within {timeout} s; "
                f"see the logs in {logs}"
            )
        time.sleep(0.5)


def application_settings(
    master_url: str, cores: int, python: str = sys.executable
) -> dict[str, str]:
    """Spark settings of an application of a cluster of ``cores`` one-core workers, wherever
    its driver runs (the caller adds the driver's address if it must pin one). Its first job
    waits (up to Spark's 30 s) for every executor, as a user of ``capture=executors`` is told
    to: a capture process that starts alone claims every partition and keeps them."""
    return {
        "spark.master": master_url,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": python,
        "spark.executor.cores": "1",
        "spark.executor.memory": "1g",
        "spark.cores.max": str(cores),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    }


def submit_command(settings: dict[str, str], script: str, *args: str) -> list[str]:
    """``spark-submit`` of ``script`` in client mode with ``settings`` (``spark.master`` as
    ``--master``)."""
    settings = dict(settings)
    command = [str(SPARK_SUBMIT), "--master", settings.pop("spark.master")]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return command + [script, *args]


def executor_pids_of(worker_pid: int) -> list[int]:
    """JVMs of executors that a worker launched (children of the worker's JVM)."""
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
        if ppid == worker_pid and EXECUTOR_CLASS.encode() in cmdline:
            found.append(int(entry))
    return found


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the process group that ``process`` leads (started with ``start_new_session``)
    and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


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
        self._spawn("master", master_command(self.port, self.ui_port, LOOPBACK))
        for n in range(workers):
            command = worker_command(self.master_url, folder / f"work{n}", free_port(), LOOPBACK)
            self.workers.append(self._spawn(f"worker{n}", command, private=private_mounts))
        try:
            wait_for_workers(self._master_state, workers, 120.0, self.folder)
        except RuntimeError:
            self.stop()
            raise

    def _spawn(self, name: str, command: list[str], private: bool = False) -> subprocess.Popen:
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
        with open(self.folder / f"{name}.log", "wb") as log:
            process = subprocess.Popen(
                command,
                env=environment(self.python),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def _master_state(self) -> dict:
        url = f"http://{LOOPBACK}:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=2) as answer:
            return json.load(answer)

    def settings(self) -> dict[str, str]:
        """Spark settings of an application of this cluster whose driver runs here."""
        return {
            **application_settings(self.master_url, len(self.workers)),
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
        }

    def submit(
        self,
        script: str,
        *args: str,
        conf: dict[str, str] | None = None,
        log_level: str = "INFO",
    ) -> subprocess.Popen:
        """spark-submit ``script`` to the cluster (client mode: the driver runs here)."""
        command = submit_command({**self.settings(), **(conf or {})}, script, *args)
        env = dict(environment(), SPARK_ZMQ_LOG_LEVEL=log_level)
        return subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def executor_pids(self, worker: int) -> list[int]:
        """JVMs of executors that a worker launched (children of the worker's JVM)."""
        return executor_pids_of(self.workers[worker].pid)

    def kill_worker(self, worker: int) -> None:
        """The host dies: SIGKILL the worker's JVM and its executor JVMs at once."""
        kill_group(self.workers[worker])

    def stop(self) -> None:
        for process in reversed(self.processes):
            kill_group(process)
