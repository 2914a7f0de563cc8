"""``python -m spark_zmq demo``: demo peers of each format, found by ``discover`` with the
options the demo prints, and captured by the capture job under spark-submit."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from support.common import wait_until
from support.jobs import JOB_SECONDS, Lines, spark_submit, stop_job

RUN = [sys.executable, "-m", "spark_zmq"]


def start_demo(format_name: str) -> tuple[subprocess.Popen, list[str]]:
    """The demo process and the ``--option`` arguments it printed."""
    demo = subprocess.Popen(
        RUN + ["demo", "--format", format_name, "--rate", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = demo.stdout.readline().split(maxsplit=1)
    assert first and first[0] == format_name, demo.stderr.read()[-2000:]
    return demo, shlex.split(first[1])


def stop(demo: subprocess.Popen) -> str:
    demo.terminate()
    out, _ = demo.communicate(timeout=30)
    assert demo.returncode == 0
    return out


@pytest.mark.parametrize("format_name", ["zeroeq", "ebus", "goby", "yamz"])
def test_discover_finds_the_demo_peers(format_name):
    demo, options = start_demo(format_name)
    try:
        found = subprocess.run(
            RUN + ["discover", "--format", format_name, "--json", *options],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        last = stop(demo)
    assert found.returncode == 0, found.stderr
    rows = [json.loads(line) for line in found.stdout.splitlines()]
    assert len(rows) == (2 if format_name == "zeroeq" else 1), rows
    assert "sent " in last


@pytest.mark.spark
@pytest.mark.jvms
def test_capture_job_reads_the_goby_demo(spark, tmp_path):
    demo, options = start_demo("goby")
    output = tmp_path / "table"
    job = None
    try:
        job = spark_submit(
            "capture_to_parquet.py",
            "--format",
            "goby",
            *options,
            "--option",
            f"spoolPath={tmp_path / 'spool'}",
            "--output",
            str(output),
            "--trigger",
            "1",
            "--seconds",
            str(JOB_SECONDS),
        )
        lines = Lines(job)
        wait_until(
            lambda: sum(rows for rows, _, _ in lines.progress()) >= 25,
            timeout=180,
            what="25 readings written",
        )
        code = stop_job(lines)
    finally:
        if job is not None and job.poll() is None:
            job.kill()
        stop(demo)
    assert code == 0, lines.errors()
    assert any(rows for rows, _, _ in lines.progress())
    readings = [json.loads(r.text) for r in spark.read.parquet(str(output)).collect()]
    sequence = sorted(r["sequence"] for r in readings)
    assert len(sequence) >= 20 and sequence == list(range(sequence[0], sequence[-1] + 1))
