"""The package as a user installs it: a wheel with its metadata, type hints, licence, the
``spark-zmq`` command and the compiled modules (and no other: the benchmarks' publisher stays
out), its version from the one place it is kept; installed in a fresh venv, the compiled
modules load from the wheel and capture."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import spark_zmq


def test_the_wheel_carries_the_version_licence_type_hints_and_command(checked_wheel):
    wheel = checked_wheel.wheel
    assert wheel.name.startswith(f"spark_zmq-{spark_zmq.__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"spark_zmq-{spark_zmq.__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert {"spark_zmq/py.typed", "pyspark_zeroeq.py", f"{info}/licenses/LICENSE"} <= names
    assert {"spark_zmq/spark/batch.py", "spark_zmq/jobs/capture_to_parquet.py"} <= names
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    compiled = {n for n in names if n.endswith(suffix)}
    modules = ("libzmq", "buffer", "receive", "send")
    assert compiled == {f"spark_zmq/native/{module}{suffix}" for module in modules}
    assert {f"spark_zmq/native/{module}.pyi" for module in modules} <= names
    assert not wheel.name.endswith("-py3-none-any.whl")  # a platform wheel: it holds C
    assert not any(n.startswith("tests/") for n in names)
    assert "License-Expression: Apache-2.0" in metadata
    assert f"Version: {spark_zmq.__version__}" in metadata
    assert "spark-zmq = spark_zmq.cli:run" in entry_points


def test_the_spark_zmq_command_says_its_version():
    command = Path(sys.executable).parent / "spark-zmq"
    run = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"spark_zmq {spark_zmq.__version__}"


def test_a_wheel_installed_in_a_fresh_venv_captures_with_its_compiled_core(checked_wheel):
    """CI's wheel check (scripts/check_wheel.sh): built offline, installed with no package
    index, the self-test run from outside the checkout with the compiled core required."""
    run = checked_wheel.run
    assert run.returncode == 0, checked_wheel.output
    venv = checked_wheel.folder / "venv"
    assert run.stdout.count(f"check_wheel: core at {venv}/lib/") == 2, run.stdout
    assert "compiled core: available, calling " in run.stdout
    assert "capture (native receive loop): 20000 of 20000 messages spooled, all as sent" in (
        run.stdout
    )
