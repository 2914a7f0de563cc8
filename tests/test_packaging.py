"""The package as a user installs it: a wheel with its metadata, type hints, licence and the
``spark-zmq`` command, its version from the one place it is kept."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import spark_zmq
from support.common import ROOT

PYSPARK_MODULES = [f"pyspark_{name}.py" for name in ("zeroeq", "ebus", "goby", "yamz")]
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def test_the_wheel_carries_the_version_licence_type_hints_and_command(tmp_path):
    source = tmp_path / "source"  # a copy: an in-tree build would leave build/ in the checkout
    shutil.copytree(ROOT / "spark_zmq", source / "spark_zmq", ignore=IGNORED)
    for name in ("pyproject.toml", "README.md", "LICENSE", *PYSPARK_MODULES):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "-w", str(tmp_path), str(source)], check=True, capture_output=True, timeout=300
    )
    (wheel,) = tmp_path.glob("spark_zmq-*.whl")
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
