"""Check an application's set-up for the formats, driver and executors, as spark-submit runs it::

    spark-submit --master spark://master:7077 --archives env.tar.gz#environment \\
        "$(spark-zmq job doctor)" --spool /shared/spark_zmq/lab

Prints ``spark-zmq doctor``'s checks of the driver host, then: the Python and the package on
each executor (a task per core), whether each executor sees the spool the driver sees (with
``--spool``; ``capture=executors`` needs one), whether ``format("zeroeq")`` is found and read
end to end (a batch read of an empty spool, which runs on an executor), and whether the conf
``spark.pyspark.python`` names a Python other than the one the formats run. Exit code 1 when
something is wrong; each problem comes with its fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported by job_session: pyspark is an extra)
    from pyspark.sql import SparkSession

import argparse
import os
import re
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from spark_zmq.cli.doctor import (
    DEPLOYING,
    FORMATS_PYTHON,
    OK,
    PROBLEM,
    Finding,
    local_findings,
    report,
)
from spark_zmq.extras import EXTRAS
from spark_zmq.spark.session import job_session

#: the last line of a Python traceback (a builtin exception: no dots in its name)
PYTHON_ERROR = re.compile(r"^[A-Za-z]*(Error|Exception): ")
#: a Java exception's class before its message
JAVA_CLASS = re.compile(r"^(?:[a-z]\w*\.)+[A-Z]\w*(?:Exception|Error): ")


def probe(
    marker: str | None, extras: dict[str, dict[str, str]]
) -> Callable[[int], tuple[str, str, str, str, bool | None]]:
    """What one executor's Python has (runs there; imports only inside, since the package may
    be missing)."""

    def run(_: int) -> tuple[str, str, str, str, bool | None]:
        import importlib.util
        import os
        import socket
        import sys

        try:
            import spark_zmq

            version = spark_zmq.__version__
        except ImportError as exc:
            version = f"no spark_zmq ({exc})"
        absent = []
        for extra, modules in extras.items():
            for module in modules:
                try:
                    if importlib.util.find_spec(module) is None:
                        absent.append(extra)
                except ImportError:
                    absent.append(extra)
        seen = None if marker is None else os.path.exists(marker)
        missing = ",".join(sorted(set(absent)))
        return socket.gethostname(), sys.executable, version, missing, seen

    return run


def executor_findings(spark: SparkSession, marker: str | None) -> list[Finding]:
    tasks = max(2, spark.sparkContext.defaultParallelism) * 2
    answers = spark.sparkContext.parallelize(range(tasks), tasks).map(probe(marker, EXTRAS))
    findings = []
    for host, python, version, missing, seen in sorted(set(answers.collect())):
        where = f"executor on {host}: {python}"
        if version.startswith("no spark_zmq"):
            findings.append(
                Finding(
                    "executors",
                    PROBLEM,
                    f"{where} has {version}",
                    f"ship a Python with the package to every executor ({DEPLOYING})",
                )
            )
            continue
        extras = f" (extras not usable there: {missing})" if missing else ""
        findings.append(Finding("executors", OK, f"{where} has spark_zmq {version}{extras}"))
        if seen is False:
            findings.append(
                Finding(
                    "shared spool",
                    PROBLEM,
                    f"executor on {host} does not see the driver's spool folder "
                    f"{os.path.dirname(marker or '')}",
                    "a spoolPath on a file system every node mounts at the same path "
                    "(capture=executors needs it)",
                )
            )
    return findings


def format_findings(spark: SparkSession, spool: str | None) -> list[Finding]:
    """format("zeroeq") found and read end to end: a batch read of an empty spool."""
    empty = Path(spool or tempfile.gettempdir()) / f"spark_zmq-doctor-{uuid.uuid4().hex[:8]}"
    empty.mkdir(parents=True)
    try:
        rows = spark.read.format("zeroeq").option("spoolPath", str(empty)).load().count()
    except Exception as exc:  # Spark's errors for a source it cannot find or run
        cause = error_summary(str(exc)) or type(exc).__name__
        not_found = "DATA_SOURCE_NOT_FOUND" in cause or "No module named" in cause
        fix = (
            f"export PYSPARK_PYTHON naming a Python with spark_zmq on the driver host and the "
            f"executors, before spark-submit ({DEPLOYING})"
            if not_found
            else "see the error; the checks above may say why"
        )
        detail = f"a batch read failed: {cause[:300]}"
        return [Finding("format('zeroeq')", PROBLEM, detail, fix)]
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    return [Finding("format('zeroeq')", OK, f"found and read on the executors ({rows} rows)")]


def jvm_environment(spark: SparkSession) -> dict[str, str]:
    """The variables that choose the formats' Python, as the driver's JVM has them (Spark reads
    them there; spark-submit gives this Python process values of its own)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:  # a stopped context: no JVM to ask
        return {}
    system = jvm.java.lang.System
    return {name: value for name in FORMATS_PYTHON if (value := system.getenv(name))}


def error_summary(text: str) -> str:
    """The line of a py4j or Python error that says what went wrong, without Java's frames,
    py4j's preamble or the exception's class (an error class such as DATA_SOURCE_NOT_FOUND, or
    the last line of a Python traceback)."""
    lines = [line.strip() for line in text.splitlines()]
    said = [
        JAVA_CLASS.sub("", line.lstrip(": "))
        for line in lines
        if line and not line.startswith(("at ", "An error occurred while calling"))
    ]
    classified = [line for line in said if line.startswith("[")]
    python = [line for line in said if PYTHON_ERROR.match(line)]
    if classified and python:
        return f"{classified[0][:160]} ... {python[-1]}"
    return (classified or python[-1:] or said or [""])[0]


def conf_findings(spark: SparkSession, environment: dict[str, str]) -> list[Finding]:
    configured = spark.sparkContext.getConf().get("spark.pyspark.python")
    formats = next((environment[v] for v in FORMATS_PYTHON if v in environment), "python3")
    if configured is None or configured == formats:
        return []
    return [
        Finding(
            "spark.pyspark.python",
            PROBLEM,
            f"the conf says {configured}, but the formats run {formats}: Python data "
            f"sources do not read the conf (and the executor checks above ran the conf's "
            f"Python)",
            f"export PYSPARK_PYTHON={configured} instead of the conf ({DEPLOYING})",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spool", help="a spool folder the executors should see too")
    args = parser.parse_args(argv)
    spark = job_session("spark_zmq doctor")  # first: a local session sets PYSPARK_PYTHON
    environment = jvm_environment(spark)
    findings = local_findings(args.spool, environment)
    marker = None
    if args.spool and all(f.ok for f in findings if f.check == "spool"):
        marker = str(Path(args.spool) / f".doctor-{uuid.uuid4().hex}")
        Path(marker).touch()
    try:
        findings += executor_findings(spark, marker)
        findings += conf_findings(spark, environment)
        findings += format_findings(spark, args.spool)
    finally:
        if marker is not None:
            Path(marker).unlink(missing_ok=True)
    sys.stdout.write(report(findings))
    return 0 if all(f.ok for f in findings) else 1


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main())
