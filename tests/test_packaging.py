"""The package as a user installs it: a wheel with its metadata, type hints, licence and the
``spark-zmq`` command, its version from the one place it is kept."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import spark_zmq
from support.packaging import build_wheel


def test_the_wheel_carries_the_version_licence_type_hints_and_command(tmp_path):
    wheel = build_wheel(tmp_path)
    assert wheel.name.startswith(f"spark_zmq-{spark_zmq.__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"spark_zmq-{spark_zmq.__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert {"spark_zmq/py.typed", "pyspark_zeroeq.py", f"{info}/licenses/LICENSE"} <= names
    assert {"spark_zmq/spark/batch.py", "spark_zmq/jobs/capture_to_parquet.py"} <= names
    assert not any(n.startswith("tests/") for n in names)
    assert "License-Expression: Apache-2.0" in metadata
    assert f"Version: {spark_zmq.__version__}" in metadata
    assert "spark-zmq = spark_zmq.cli:run" in entry_points


def test_the_spark_zmq_command_says_its_version():
    command = Path(sys.executable).parent / "spark-zmq"
    run = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"spark_zmq {spark_zmq.__version__}"
