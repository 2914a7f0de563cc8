"""Deploying as the docs say (docs "Deploying"): the package and its libraries packed with
venv-pack, shipped with ``spark-submit --archives``, on a standalone cluster whose hosts know no
Python with the package, pyarrow or pyzmq; ``PYSPARK_PYTHON=./environment/bin/python`` with the
archive unpacked as ``./environment`` where the driver runs too (shared/protocols/spark.md: a
Python data source runs one Python path on the driver host and on the executors).

The venv is made from the wheel with the zeroeq extra only, and without pyspark: the cluster's
Spark provides pyspark (on ``PYTHONPATH``), as on a managed runtime. Both placements run the
package's capture job; every message published lands in the table exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from spark_zmq.spool.leases import load_lease
from spark_zmq.testing.standalone import LOOPBACK, SPARK_HOME, StandaloneCluster, environment
from support.common import wait_until
from support.packaging import WHEELHOUSE
from support.sequences import Sender, check_exactly_once, sequences, sink_rows

#: the first test's set-up builds and checks the wheel (``checked_wheel``, shared with
#: tests/test_packaging.py), packs a venv and starts a cluster
pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.timeout(1200)]
VENV_PACK = Path(sys.executable).parent / "venv-pack"


@pytest.fixture(scope="module")
def packed(tmp_path_factory, checked_wheel) -> Path:
    """env.tar.gz: a venv with spark_zmq[zeroeq] (no pyspark), packed by venv-pack."""
    folder = tmp_path_factory.mktemp("deploy")
    wheel = checked_wheel.wheel
    venv = folder / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
        + ["--find-links", str(WHEELHOUSE), f"{wheel}[zeroeq]"],
        check=True,
        timeout=600,
    )
    archive = folder / "env.tar.gz"
    subprocess.run(
        [str(VENV_PACK), "-q", "-p", str(venv), "-o", str(archive)], check=True, timeout=600
    )
    return archive


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Workers with no PYSPARK_PYTHON and our venv off their PATH."""
    instance = StandaloneCluster(tmp_path_factory.mktemp("bare-cluster"), workers=2, python=None)
    yield instance
    instance.stop()


def driver_folder(folder: Path, archive: Path) -> Path:
    """Where spark-submit runs: the archive unpacked as ./environment, as the docs say."""
    with tarfile.open(archive) as packed_venv:
        packed_venv.extractall(folder / "environment", filter="fully_trusted")
    return folder


def bare_env() -> dict[str, str]:
    """spark-submit's environment: this venv nowhere, the archive's Python for every worker."""
    return dict(environment(None), PYSPARK_PYTHON="./environment/bin/python")


def packed_job_file(here: Path, name: str) -> str:
    """The job's file in the unpacked archive, as the docs find it (``spark_zmq job NAME``)."""
    job_file = subprocess.run(
        ["./environment/bin/python", "-m", "spark_zmq", "job", name],
        cwd=here,
        env=bare_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert job_file.startswith(str(here / "environment")), job_file
    return job_file


def test_the_hosts_own_python_lacks_what_a_job_needs(cluster, tmp_path, packed):
    """Otherwise the test below could pass with the hosts' own packages."""
    own = subprocess.run(
        ["python3", "-c", "import pyarrow"], env=bare_env(), capture_output=True, text=True
    )
    assert own.returncode != 0 and "No module named 'pyarrow'" in own.stderr
    here = driver_folder(tmp_path, packed)
    python = str(here / "environment" / "bin" / "python")
    without_spark = subprocess.run(
        [python, "-c", "import pyspark"], env=bare_env(), capture_output=True, text=True
    )
    assert "No module named 'pyspark'" in without_spark.stderr  # the cluster's Spark brings it
    # a format whose extra is not installed says what to install (pyspark from the cluster)
    spark_path = os.pathsep.join(str(p) for p in (SPARK_HOME / "python" / "lib").glob("*.zip"))
    yamz = subprocess.run(
        [
            python,
            "-c",
            "from pyspark_yamz import DefaultSource; DefaultSource(options={}).reader_options()",
        ],
        env=dict(bare_env(), PYTHONPATH=spark_path),
        capture_output=True,
        text=True,
    )
    assert "format('yamz') cannot run without the Python package 'zeromq-pyre'" in yamz.stderr
    assert "pip install 'spark_zmq[yamz]'" in yamz.stderr


@pytest.mark.parametrize("capture", ["driver", "executors"])
def test_a_packed_venv_runs_the_capture_job_on_a_cluster_without_the_package(
    spark, cluster, tmp_path, packed, publishers, capture
):
    session = f"deploy-{capture}"
    pubs = [publishers(session) for _ in range(2)]
    here = driver_folder(tmp_path / "driver", packed)
    spool, sink = tmp_path / "spool", tmp_path / "table"
    job_file = packed_job_file(here, "capture_to_parquet")
    settings = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
    }
    options = {
        "session": session,
        "discoveryInterfaces": "127.0.0.1",
        "capture": capture,
        "spoolPath": str(spool),
    }
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master",
        cluster.master_url,
        "--archives",
        f"{packed}#environment",
        *(arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")),
        job_file,
        "--format",
        "zeroeq",
        *(arg for key, value in options.items() for arg in ("--option", f"{key}={value}")),
        "--output",
        str(sink),
        "--trigger",
        "1",
    ]
    job = subprocess.Popen(
        command,
        cwd=here,
        env=dict(bare_env(), SPARK_ZMQ_LOG_LEVEL="INFO"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(job.stderr), daemon=True).start()
    sender = None
    try:
        wait_until(
            lambda: job.poll() is not None or connected(log, capture, spool, pubs),
            timeout=240,
            what=f"the job's capture ({capture}) connected to both publishers",
        )
        assert job.poll() is None, "".join(log[-80:])
        holder_commands = [holder_command(spool, p.instance_name) for p in pubs]
        sender = Sender(pubs, rate=20)
        time.sleep(5)
        sent = sender.stop()
        sender = None
        rows = wait_until(
            lambda: all_sent(spark, sink, sent, job, log),
            timeout=180,
            interval=2.0,
            what="every sent message in the table",
        )
    finally:
        if sender is not None:
            sender.stop()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
        job.wait(60)
    check_exactly_once(rows, sent, moved=set())
    if capture == "executors":  # each holder ran the archive's Python on an executor
        for command in holder_commands:
            assert command is not None and "/environment/bin/python" in command, command


def connected(log: list[str], capture: str, spool: Path, pubs) -> bool:
    if capture == "driver":
        return sum("connected to" in line for line in list(log)) >= len(pubs)
    return all(holder_command(spool, p.instance_name) for p in pubs)


def holder_command(spool: Path, key: str) -> str | None:
    """The command line of the live holder of ``key``'s partition (None: no holder yet)."""
    lease = load_lease(str(spool), key)
    if lease is None or not lease.holder or lease.sealed:
        return None
    try:
        with open(f"/proc/{int(lease.holder.rsplit('/', 1)[1])}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return None


def all_sent(spark, sink: Path, sent: dict[str, int], job, log: list[str]) -> list | None:
    """The sink's rows once every sent message is there; the job's log if it ended first."""
    if job.poll() is not None:
        raise AssertionError(f"the job ended ({job.returncode}):\n" + "".join(log[-80:]))
    rows = sink_rows(spark, sink)
    last = {key: max(seqs) for key, seqs in sequences(rows).items() if seqs}
    return rows if all(last.get(key) == n - 1 for key, n in sent.items()) else None


def submit_doctor(cluster, here: Path, archive: Path, spool: Path, *, recipe: str):
    """The doctor job as a user submits it: the docs' recipe, or PySpark's own (the conf
    ``spark.pyspark.python`` instead of the environment variable)."""
    env = bare_env()
    conf = [f"spark.driver.host={LOOPBACK}", f"spark.driver.bindAddress={LOOPBACK}"]
    if recipe == "pyspark":
        del env["PYSPARK_PYTHON"]
        conf.append("spark.pyspark.python=./environment/bin/python")
    job_file = packed_job_file(here, "doctor")
    return subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.master_url]
        + ["--archives", f"{archive}#environment"]
        + [arg for setting in conf for arg in ("--conf", setting)]
        + [job_file, "--spool", str(spool)],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_doctor_job_checks_the_executors_as_the_formats_will_run(cluster, tmp_path, packed):
    here = driver_folder(tmp_path / "driver", packed)
    done = submit_doctor(cluster, here, packed, tmp_path / "spool", recipe="docs")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    executors = [line for line in done.stdout.splitlines() if line.startswith("ok       executors")]
    assert executors, done.stdout
    for line in executors:  # the archive's Python, unpacked by Spark on the executor
        assert "/environment/bin/python has spark_zmq" in line, line
        assert "(extras not usable there: ebus,goby,yamz)" in line, line
    assert "ok       format('zeroeq'): found and read on the executors" in done.stdout
    assert "0 problems found" in done.stdout


def test_the_doctor_job_finds_what_is_wrong_with_pysparks_own_recipe(cluster, tmp_path, packed):
    here = driver_folder(tmp_path / "driver", packed)
    done = submit_doctor(cluster, here, packed, tmp_path / "spool", recipe="pyspark")
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "PROBLEM  spark.pyspark.python: the conf says ./environment/bin/python" in done.stdout
    assert "PROBLEM  formats' Python: neither PYSPARK_DRIVER_PYTHON nor PYSPARK_PYTHON" in (
        done.stdout
    )
    assert "PROBLEM  format('zeroeq'): a batch read failed: [DATA_SOURCE_NOT_FOUND]" in done.stdout
    assert "fix: export PYSPARK_PYTHON naming a Python with spark_zmq" in done.stdout
